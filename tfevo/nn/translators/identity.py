"""Layers that are the identity at inference: dropout and noise of every kind, activity regularization,
Identity."""

from __future__ import annotations

import keras

from tfevo.nn.translators.base import Translator, register_translator

L = keras.layers


@register_translator(L.Dropout, L.SpatialDropout1D, L.SpatialDropout2D, L.SpatialDropout3D, L.GaussianNoise,
                     L.GaussianDropout, L.AlphaDropout, L.ActivityRegularization, L.Identity)
class IdentityTranslator(Translator):
    def forward(self, inputs, weights, indices):
        return inputs[0]
