"""Pooling of every kind (max, average, global, adaptive; 1-D to 3-D): weightless, per sample."""

from __future__ import annotations

import keras

from tfevo.nn.translators.base import PerSampleTranslator, register_translator

L = keras.layers


@register_translator(L.MaxPooling1D, L.MaxPooling2D, L.MaxPooling3D, L.AveragePooling1D, L.AveragePooling2D,
                     L.AveragePooling3D, L.GlobalMaxPooling1D, L.GlobalMaxPooling2D, L.GlobalMaxPooling3D,
                     L.GlobalAveragePooling1D, L.GlobalAveragePooling2D, L.GlobalAveragePooling3D,
                     L.AdaptiveMaxPooling1D, L.AdaptiveMaxPooling2D, L.AdaptiveMaxPooling3D,
                     L.AdaptiveAveragePooling1D, L.AdaptiveAveragePooling2D, L.AdaptiveAveragePooling3D)
class PoolingTranslator(PerSampleTranslator):
    pass
