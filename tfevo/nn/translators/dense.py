"""``keras.layers.Dense``: a batched matrix product per member (C++ in-place kernel when it can run)."""

from __future__ import annotations

import keras
import tensorflow as tf

from tfevo.core import ConfigError
from tfevo.nn.layers import population_dense
from tfevo.nn.translators._kernels import flat_ops, fused_activation
from tfevo.nn.translators.base import Translator, register_translator


@register_translator(keras.layers.Dense)
class DenseTranslator(Translator):
    weight_names = ("kernel", "bias")

    def check(self):
        if getattr(self.layer, "lora_enabled", False):
            raise ConfigError(f"layer {self.name}: LoRA Dense layers are not supported")

    def forward(self, inputs, weights, indices):
        return population_dense(inputs[0], weights[0], weights[1] if len(weights) > 1 else None,
                                self.layer.activation, indices)

    def forward_flat(self, inputs, params, offs, indices, input_scale=None):
        units, use_bias = int(self.layer.units), bool(self.layer.use_bias)
        attr, after = fused_activation(self.layer.activation)
        x = inputs[0]
        k = x.shape[-1]
        x3 = x if x.shape.rank == 3 else tf.reshape(x, [tf.shape(x)[0], -1, k])
        y = flat_ops()[0](x3, params, indices, w_offset=int(offs[0]), units=units,
                          bias_offset=int(offs[1]) if use_bias else -1, activation=attr)
        if x.shape.rank != 3:
            y = tf.reshape(y, tf.concat([tf.shape(x)[:-1], [units]], 0))
        return after(y) if after is not None else y
