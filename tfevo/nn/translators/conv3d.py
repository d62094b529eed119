"""``keras.layers.Conv3D`` (either data format): volume patches (im2col) and one batched matrix product per
member; a dilated or grouped one runs on the general convolution (:mod:`tfevo.nn.translators._conv`)."""

from __future__ import annotations

import keras
import tensorflow as tf

from tfevo.nn.layers import population_dense, sample_activation
from tfevo.nn.translators._conv import check_conv_settings, general_conv_forward
from tfevo.nn.translators.base import Translator, register_translator


@register_translator(keras.layers.Conv3D)
class Conv3DTranslator(Translator):
    weight_names = ("kernel", "bias")

    def check(self):
        self.general = check_conv_settings(self)

    def forward(self, inputs, weights, indices):
        if self.general:
            return general_conv_forward(self, inputs, weights, indices)
        layer = self.layer
        x = self.to_channels_last(inputs[0])  # [n, B, D, H, W, C]
        d, h, w, c = x.shape.as_list()[2:]
        ks = [int(k) for k in layer.kernel_size]
        st = [int(s) for s in layer.strides]
        cols = tf.extract_volume_patches(tf.reshape(x, [-1, d, h, w, c]), [1, *ks, 1], [1, *st, 1],
                                         layer.padding.upper())  # [n*B, Do, Ho, Wo, kd*kh*kw*C]
        patches = cols
        cols = tf.reshape(patches, tf.concat([tf.shape(x)[:2], tf.shape(patches)[1:]], 0))
        cols.set_shape(x.shape[:2].concatenate(patches.shape[1:]))
        kernel = tf.reshape(weights[0], [tf.shape(weights[0])[0], -1, int(layer.filters)])
        cf = self.channels_first
        y = population_dense(cols, kernel, weights[1] if len(weights) > 1 else None,
                             None if cf else layer.activation, indices)
        if not cf:
            return y
        act = sample_activation(layer.activation)
        y = self.from_channels_last(y)
        return act(y) if act is not None else y
