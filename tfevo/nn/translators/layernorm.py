"""``keras.layers.LayerNormalization`` over any non-batch axes (per-member gains and offsets)."""

from __future__ import annotations

import keras
import tensorflow as tf

from tfevo.core import ConfigError
from tfevo.nn.translators.base import Translator, register_translator


@register_translator(keras.layers.LayerNormalization)
class LayerNormTranslator(Translator):
    weight_names = ("gamma", "beta")

    def check(self):
        rank = len(self.input_shapes[0])  # including Keras's batch axis
        axes = self.layer.axis if isinstance(self.layer.axis, (list, tuple)) else [self.layer.axis]
        axes = sorted(a % rank for a in axes)
        if 0 in axes:
            raise ConfigError(f"layer {self.name}: normalizing over the batch axis is not supported")
        self.paxes = [a + 1 for a in axes]  # population axis in front
        self.sample_rank = rank

    def forward(self, inputs, weights, indices):
        x = inputs[0]
        layer, paxes, sample_rank = self.layer, self.paxes, self.sample_rank
        eps = float(layer.epsilon)
        rms = bool(getattr(layer, "rms_scaling", False))

        def bshape(v):
            # [P, *param] -> [P, 1 (batch), ..] with the param dims at their axes
            shape = [tf.shape(v)[0]] + [1] * sample_rank
            for j, a in enumerate(paxes):
                shape[a] = v.shape[1 + j]
            return tf.reshape(v, shape)

        i = 0
        gamma = beta = None
        if layer.gamma is not None:
            gamma = weights[i] if indices is None else tf.gather(weights[i], indices)
            i += 1
        if getattr(layer, "beta", None) is not None:
            beta = weights[i] if indices is None else tf.gather(weights[i], indices)
        mean, var = tf.nn.moments(x, paxes, keepdims=True)
        inv = tf.math.rsqrt(var + eps)
        if rms:
            out = x * inv
            return out * bshape(gamma) if gamma is not None else out
        if gamma is not None:
            inv = inv * bshape(gamma)
        res = -mean * inv
        if beta is not None:
            res = res + bshape(beta)
        return x * inv + res
