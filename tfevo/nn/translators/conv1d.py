"""``keras.layers.Conv1D`` (either data format; valid, same or causal padding): a Conv2D of height 1, so it
runs on the same population convolution; a dilated or grouped one runs on the general convolution
(:mod:`tfevo.nn.translators._conv`)."""

from __future__ import annotations

import keras
import tensorflow as tf

from tfevo.nn.layers import builtin_activation, population_conv2d, sample_activation
from tfevo.nn.translators._conv import check_conv_settings, general_conv_forward
from tfevo.nn.translators.base import Translator, register_translator


@register_translator(keras.layers.Conv1D)
class Conv1DTranslator(Translator):
    weight_names = ("kernel", "bias")

    def check(self):
        self.general = check_conv_settings(self)

    def forward(self, inputs, weights, indices):
        if self.general:
            return general_conv_forward(self, inputs, weights, indices)
        layer = self.layer
        x = self.to_channels_last(inputs[0])  # [n, B, L, C]
        k = int(layer.kernel_size[0])
        padding = layer.padding
        if padding == "causal":  # left-pad so output t sees inputs <= t, then a valid convolution
            x = tf.pad(x, [[0, 0], [0, 0], [k - 1, 0], [0, 0]])
            padding = "valid"
        builtin = builtin_activation(layer.activation) and not self.channels_first
        kernel = weights[0][:, None]  # [M, 1, k, C, F]
        y = population_conv2d(x[:, :, None], kernel, weights[1] if len(weights) > 1 else None,
                              (1, int(layer.strides[0])), padding, layer.activation if builtin else None, indices,
                              self.conv_method)[:, :, 0]
        y = self.from_channels_last(y)
        if builtin:
            return y
        act = sample_activation(layer.activation)  # on Keras's sample axes ([L, F] or [F, L])
        return act(y) if act is not None else y
