"""``keras.layers.Flatten`` (either data format) and ``keras.layers.Reshape``: reshapes behind the two leading
axes."""

from __future__ import annotations

import math

import keras
import tensorflow as tf

from tfevo.nn.translators.base import Translator, register_translator


@register_translator(keras.layers.Flatten)
class FlattenTranslator(Translator):
    def forward(self, inputs, weights, indices):
        x = inputs[0]
        rank = x.shape.rank
        if getattr(self.layer, "data_format", "channels_last") == "channels_first" and rank > 3:
            # as Keras: the channel axis (the first sample axis) goes last before flattening
            x = tf.transpose(x, [0, 1, *range(3, rank), 2])
        n = math.prod(x.shape[2:]) if None not in x.shape[2:] else -1
        return tf.reshape(x, tf.concat([tf.shape(x)[:2], [n]], 0))


@register_translator(keras.layers.Reshape)
class ReshapeTranslator(Translator):
    def forward(self, inputs, weights, indices):
        x = inputs[0]
        target = [int(t) for t in self.layer.target_shape]
        return tf.reshape(x, tf.concat([tf.shape(x)[:2], target], 0))
