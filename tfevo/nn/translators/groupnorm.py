"""``keras.layers.GroupNormalization``: each sample's channels split into groups, each group normalized
over its channels and every other sample axis, then each member's own ``gamma`` and ``beta`` per channel
(Keras's formula and order: ``x * inv + (beta - mean * inv)`` with ``inv = rsqrt(var + eps) * gamma``)."""

from __future__ import annotations

import keras
import tensorflow as tf

from tfevo.core import ConfigError
from tfevo.nn.translators.base import Translator, register_translator, select


@register_translator(keras.layers.GroupNormalization)
class GroupNormTranslator(Translator):
    weight_names = ("gamma", "beta")

    def check(self):
        rank = len(self.input_shapes[0])  # including Keras's batch axis
        axis = int(self.layer.axis) % rank
        if axis == 0:
            raise ConfigError(f"layer {self.name}: normalizing over the batch axis is not supported")
        self.paxis = axis + 1  # population axis in front
        self.channels = int(self.input_shapes[0][axis])
        self.groups = int(self.layer.groups) if int(self.layer.groups) != -1 else self.channels

    def forward(self, inputs, weights, indices):
        x = inputs[0]  # [n, B, ...]
        pa, g, c = self.paxis, self.groups, self.channels
        rank = x.shape.rank
        dims = tf.unstack(tf.shape(x))
        grouped = tf.reshape(x, tf.stack(dims[:pa] + [g, c // g] + dims[pa + 1:]))  # group axis at pa
        axes = [a for a in range(2, rank + 1) if a != pa]
        mean, var = tf.nn.moments(grouped, axes, keepdims=True)
        inv = tf.math.rsqrt(var + float(self.layer.epsilon))

        def per_channel(v):  # [n, C] -> [n, 1, .., G, C/G, .., 1] against `grouped`
            shape = [tf.shape(v)[0]] + [1] * rank
            shape[pa], shape[pa + 1] = g, c // g
            return tf.reshape(v, shape)

        w = list(weights)
        if self.layer.scale:
            inv = inv * per_channel(select(w.pop(0), indices))
        res = -mean * inv
        if self.layer.center:
            res = res + per_channel(select(w.pop(0), indices))
        out = tf.reshape(grouped * inv + res, tf.shape(x))
        out.set_shape(x.shape)
        return out
