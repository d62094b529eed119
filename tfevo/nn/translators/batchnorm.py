"""``keras.layers.BatchNormalization`` in inference mode.

The moving statistics are *evolvable parameters*: ``moving_mean`` and
``moving_variance`` sit in the flat vector next to ``gamma`` and ``beta``
(the template's ``get_weights()`` order), start from the layer's initializers
(zeros and ones) and are what ``to_keras`` writes back -- unless the layer is
frozen (``trainable=False``): then all four are the template's constants.  The forward is Keras's
inference formula ``(x - mean) * rsqrt(var + epsilon) * gamma + beta`` with
each member's own four vectors; a member whose ``var + epsilon`` goes negative
gives NaN, exactly as the Keras layer would.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from tfevo.core import ConfigError
from tfevo.nn.translators.base import Translator, per_member, register_translator, select


@register_translator(keras.layers.BatchNormalization)
class BatchNormTranslator(Translator):
    weight_names = ("gamma", "beta", "moving_mean", "moving_variance")
    evolved_statistics = ("moving_mean", "moving_variance")

    def check(self):
        rank = len(self.input_shapes[0])
        axis = int(self.layer.axis) % rank
        if axis == 0:
            raise ConfigError(f"layer {self.name}: normalizing over the batch axis is not supported")
        if getattr(self.layer, "renorm", False):
            raise ConfigError(f"layer {self.name}: renorm=True is not supported")
        self.paxis = axis + 1  # population axis in front
        self.rank = rank + 1

    def forward(self, inputs, weights, indices):
        x = inputs[0]
        layer = self.layer
        w = list(weights)
        gamma = w.pop(0) if layer.scale else None
        beta = w.pop(0) if layer.center else None
        mean, var = w

        def b(v):
            return per_member(select(v, indices), self.rank, [self.paxis])

        inv = tf.math.rsqrt(b(var) + float(layer.epsilon))
        if gamma is not None:
            inv = inv * b(gamma)
        out = x * inv - b(mean) * inv
        return out + b(beta) if beta is not None else out
