"""``keras.layers.Conv1DTranspose``, ``Conv2DTranspose`` and ``Conv3DTranspose`` (either data format; valid or
same padding, any strides, ``output_padding`` and dilation Keras accepts; see
:mod:`tfevo.nn.translators._conv`): at stride 1 the convolution with each member's flipped kernel, padded
so the output has the size Keras computes; with strides, one convolution computing every output phase
(sub-pixel form), its outputs interleaved."""

from __future__ import annotations

import keras
import tensorflow as tf

from tfevo.core import ConfigError
from tfevo.nn.translators._conv import (
    finish, population_conv, require_static_spatial, strided_transpose, transpose_geometry,
)
from tfevo.nn.translators.base import Translator, register_translator

L = keras.layers


@register_translator(L.Conv1DTranspose, L.Conv2DTranspose, L.Conv3DTranspose)
class ConvTransposeTranslator(Translator):
    weight_names = ("kernel", "bias")

    def check(self):
        layer = self.layer
        self.channels_first = layer.data_format == "channels_first"
        if layer.padding not in ("same", "valid"):
            raise ConfigError(f"layer {self.name}: padding={layer.padding!r} is not supported; a transposed "
                              "convolution takes 'valid' or 'same' (as Keras's conv_transpose)")
        require_static_spatial(self)
        ins, outs = self.input_shapes[0], self.output_shapes[0]
        sp_in = ins[2:] if self.channels_first else ins[1:-1]
        sp_out = outs[2:] if self.channels_first else outs[1:-1]
        self.ksize = [int(k) for k in layer.kernel_size]
        self.strides = [int(s) for s in layer.strides]
        self.dilation = [int(d) for d in layer.dilation_rate]
        self.out_spatial = [int(v) for v in sp_out]
        self.befores, self.pads = transpose_geometry([int(v) for v in sp_in], self.out_spatial, self.ksize,
                                                     self.strides, self.dilation, layer.padding, self.name,
                                                     layer.output_padding)

    def forward(self, inputs, weights, indices):
        x = self.to_channels_last(inputs[0])
        bias = weights[1] if len(weights) > 1 else None
        if max(self.strides) > 1:
            y = strided_transpose(x, weights[0], self.out_spatial, self.strides, self.befores, indices)
            return finish(self, y, bias, indices)
        r = len(self.ksize)
        # Keras's kernel [*k, F, C] -> the forward convolution's [*k, C, F], flipped on every spatial axis
        k = tf.reverse(weights[0], list(range(1, r + 1)))
        k = tf.transpose(k, [0, *range(1, r + 1), r + 2, r + 1])
        y = population_conv(x, k, [1] * r, self.dilation, self.pads, 1, indices)
        return finish(self, y, bias, indices)
