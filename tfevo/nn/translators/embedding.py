"""``keras.layers.Embedding``: each member looks the (integer-valued) inputs up in its own table."""

from __future__ import annotations

import keras
import tensorflow as tf

from tfevo.core import ConfigError
from tfevo.nn.translators.base import Translator, register_translator, select


@register_translator(keras.layers.Embedding)
class EmbeddingTranslator(Translator):
    weight_names = ("embeddings",)

    def check(self):
        if getattr(self.layer, "mask_zero", False):
            raise ConfigError(f"layer {self.name}: mask_zero=True is not supported (masks are not propagated)")
        if getattr(self.layer, "lora_enabled", False):
            raise ConfigError(f"layer {self.name}: LoRA embeddings are not supported")

    def forward(self, inputs, weights, indices):
        table = select(weights[0], indices)  # [n, V, dim]
        ids = tf.cast(inputs[0], tf.int32)
        flat = tf.reshape(ids, [tf.shape(ids)[0], -1])
        y = tf.gather(table, flat, batch_dims=1)  # [n, B*..., dim]
        out = tf.reshape(y, tf.concat([tf.shape(ids), [table.shape[-1]]], 0))
        out.set_shape(ids.shape.concatenate([table.shape[-1]]))
        return out
