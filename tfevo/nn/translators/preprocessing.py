"""Preprocessing layers of a template's input: Rescaling (``x * scale + offset``) and Normalization
(``(x - mean) / sqrt(variance)``, its statistics given or adapted). Their statistics are
non-trainable, so they are frozen constants every member shares; the Keras layer itself runs on the
members' merged batch."""

from __future__ import annotations

import keras

from tfevo.core import ConfigError
from tfevo.nn.translators.base import PerSampleTranslator, register_translator

L = keras.layers


@register_translator(L.Rescaling)
class RescalingTranslator(PerSampleTranslator):
    pass


@register_translator(L.Normalization)
class NormalizationTranslator(PerSampleTranslator):
    weight_names = ("mean", "variance", "count")
    optional_weights = ("mean", "variance", "count")

    def check(self) -> None:
        if getattr(self.layer, "invert", False):
            raise ConfigError(f"layer {self.name}: invert=True (a de-normalization) is not supported")
