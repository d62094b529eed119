"""Merge layers joining branches of a graph: Concatenate, Add, Subtract, Multiply, Average, Maximum,
Minimum, Dot (any number of inputs, per sample)."""

from __future__ import annotations

import keras

from tfevo.nn.translators.base import PerSampleTranslator, register_translator

L = keras.layers


@register_translator(L.Concatenate, L.Add, L.Subtract, L.Multiply, L.Average, L.Maximum, L.Minimum, L.Dot)
class MergeTranslator(PerSampleTranslator):
    num_inputs = None
