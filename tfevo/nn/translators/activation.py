"""Activation layers: ``Activation`` with any built-in or user function (see ``sample_activation``),
``ReLU``, ``LeakyReLU``, ``ELU``, ``Softmax`` and ``PReLU`` (per-member slopes)."""

from __future__ import annotations

import keras
import tensorflow as tf

from tfevo.nn.layers import sample_activation
from tfevo.nn.translators.base import PerSampleTranslator, Translator, call_float32, register_translator, select

L = keras.layers


@register_translator(L.Activation, L.ReLU, L.LeakyReLU, L.ELU)
class ActivationTranslator(Translator):
    def forward(self, inputs, weights, indices):
        if isinstance(self.layer, L.Activation):
            return sample_activation(self.layer.activation)(inputs[0])
        return call_float32(self.keras_layer, inputs[0])


@register_translator(L.Softmax)
class SoftmaxTranslator(PerSampleTranslator):
    def forward(self, inputs, weights, indices):
        if self.layer.axis in (-1,):
            return call_float32(self.keras_layer, inputs[0])
        return super().forward(inputs, weights, indices)  # a sample axis counted from the batch axis


@register_translator(L.PReLU)
class PReLUTranslator(Translator):
    weight_names = ("alpha",)

    def forward(self, inputs, weights, indices):
        x = inputs[0]
        alpha = select(weights[0], indices)  # [n, *alpha_shape] (1 on shared axes)
        alpha = tf.reshape(alpha, tf.concat([tf.shape(alpha)[:1], [1], tf.shape(alpha)[1:]], 0))
        return tf.nn.relu(x) - alpha * tf.nn.relu(-x)
