"""Weightless shape layers applied per sample: Permute, RepeatVector, Cropping, ZeroPadding, UpSampling,
UnitNormalization."""

from __future__ import annotations

import keras

from tfevo.nn.translators.base import PerSampleTranslator, register_translator

L = keras.layers


@register_translator(L.Permute, L.RepeatVector, L.Cropping1D, L.Cropping2D, L.Cropping3D, L.ZeroPadding1D,
                     L.ZeroPadding2D, L.ZeroPadding3D, L.UpSampling1D, L.UpSampling2D, L.UpSampling3D,
                     L.UnitNormalization)
class ShapeTranslator(PerSampleTranslator):
    pass
