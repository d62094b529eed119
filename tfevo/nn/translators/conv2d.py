"""``keras.layers.Conv2D``: the C++ direct population convolution (in place from flat parameters when it
can run), else im2col + batched matmul; a dilated or grouped one runs on the general convolution
(:mod:`tfevo.nn.translators._conv`). A channels-first layer runs channels last between two
transposes, its activation applied to the channels-first result."""

from __future__ import annotations

import keras

from tfevo.core import ConfigError
from tfevo.nn.layers import population_conv2d, sample_activation
from tfevo.nn.translators._kernels import flat_ops, fused_activation
from tfevo.nn.translators._conv import check_conv_settings, general_conv_forward
from tfevo.nn.translators.base import Translator, register_translator


@register_translator(keras.layers.Conv2D)
class Conv2DTranslator(Translator):
    weight_names = ("kernel", "bias")
    takes_input_scale = True

    def check(self):
        self.general = check_conv_settings(self)
        layer = self.layer
        if layer.padding not in ("same", "valid"):
            raise ConfigError(f"layer {self.name}: padding {layer.padding!r} is not supported")
        if self.conv_method != "auto" or self.general:
            # the in-place path is the C++ op (no dilation or groups); other methods are their own reference
            self.forward_flat = None

    def forward(self, inputs, weights, indices):
        if self.general:
            return general_conv_forward(self, inputs, weights, indices)
        layer = self.layer
        cf = self.channels_first
        y = population_conv2d(self.to_channels_last(inputs[0]), weights[0], weights[1] if len(weights) > 1 else None,
                              tuple(layer.strides), layer.padding, None if cf else layer.activation, indices,
                              self.conv_method)
        if not cf:
            return y
        act = sample_activation(layer.activation)  # on Keras's channels-first layout (softmax: over W)
        y = self.from_channels_last(y)
        return act(y) if act is not None else y

    def forward_flat(self, inputs, params, offs, indices, input_scale=None):
        layer = self.layer
        attr, after = fused_activation(layer.activation)
        extra = {} if input_scale is None else {"input_scale": float(input_scale)}  # x may then be uint8
        y = flat_ops()[1](self.to_channels_last(inputs[0]), params, indices, kernel_offset=int(offs[0]),
                          kernel_size=[int(k) for k in layer.kernel_size], filters=int(layer.filters),
                          bias_offset=int(offs[1]) if layer.use_bias else -1,
                          strides=[int(s) for s in layer.strides], padding=layer.padding.upper(),
                          activation=attr, **extra)
        y = self.from_channels_last(y)  # (relu, fused, is elementwise; `after` sees the layer's layout)
        return after(y) if after is not None else y
