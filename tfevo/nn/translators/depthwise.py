"""``keras.layers.DepthwiseConv1D``, ``DepthwiseConv2D``, ``SeparableConv1D`` and ``SeparableConv2D`` (either
data format, any strides and dilation): the members' channels are stacked and run as one depthwise
convolution (a 1-D layer as a 2-D one of height 1), then (separable) a per-member pointwise product.
Strides and dilation together run as Keras computes them: SAME padding made explicit, the dilated
convolution at stride 1, then every ``stride``-th output."""

from __future__ import annotations

import keras
import tensorflow as tf

from tfevo.core import ConfigError
from tfevo.nn.layers import population_dense, sample_activation
from tfevo.nn.translators._conv import forward_pads, require_static_spatial
from tfevo.nn.translators.base import Translator, per_member, register_translator, select


def stacked_depthwise(x, kernel, strides, padding, dilation):
    """``x [n, B, H, W, C]``, ``kernel [n, kh, kw, C, M]`` -> ``[n, B, Ho, Wo, C*M]`` (Keras channel order)."""
    kh, kw = kernel.shape.as_list()[1:3]
    step = None
    if max(strides) > 1 and max(dilation) > 1:  # (TensorFlow's depthwise convolution takes one or the other)
        pads = forward_pads(x.shape.as_list()[2:4], [kh, kw], strides, dilation, padding)
        x = tf.pad(x, [[0, 0], [0, 0], *[list(p) for p in pads], [0, 0]])
        step, strides, padding = strides, [1, 1], "valid"
    n, b = tf.shape(x)[0], tf.shape(x)[1]
    _, _, h, w, c = x.shape.as_list()
    kh, kw, _, m = kernel.shape.as_list()[1:]
    xg = tf.reshape(tf.transpose(x, [1, 2, 3, 0, 4]), [b, h, w, -1])  # [B, H, W, n*C]
    kg = tf.reshape(tf.transpose(kernel, [1, 2, 0, 3, 4]), [kh, kw, -1, m])  # [kh, kw, n*C, M]
    y = tf.nn.depthwise_conv2d(xg, kg, [1, *strides, 1], padding.upper(), dilations=dilation)  # [B, Ho, Wo, n*C*M]
    if step is not None:
        y = y[:, ::step[0], ::step[1]]
    ho, wo = y.shape[1], y.shape[2]
    y = tf.reshape(y, [b, ho, wo, n, c * m])
    return tf.transpose(y, [3, 0, 1, 2, 4])


class _DepthwiseBase(Translator):
    def check(self):
        layer = self.layer
        self.channels_first = layer.data_format == "channels_first"
        if layer.padding not in ("same", "valid"):
            raise ConfigError(f"layer {self.name}: padding {layer.padding!r} is not supported")
        self.one_d = int(layer.rank) == 1
        require_static_spatial(self)

    def _depthwise(self, x, kernel, indices):
        """The depthwise part, channels last: ``[n, B, *spatial, C*mult]``."""
        layer = self.layer
        x, k = self.to_channels_last(x), select(kernel, indices)
        strides, dilation = [int(s) for s in layer.strides], [int(d) for d in layer.dilation_rate]
        if self.one_d:  # a 2-D depthwise convolution of height 1
            x, k, strides, dilation = x[:, :, None], k[:, None], [1] + strides, [1] + dilation
        y = stacked_depthwise(x, k, strides, layer.padding, dilation)
        return y[:, :, 0] if self.one_d else y


@register_translator(keras.layers.DepthwiseConv1D, keras.layers.DepthwiseConv2D)
class DepthwiseConvTranslator(_DepthwiseBase):
    weight_names = ("kernel", "bias")

    def initializer(self, variable):
        return self.layer.depthwise_initializer if variable.name == "kernel" else self.layer.bias_initializer

    def forward(self, inputs, weights, indices):
        y = self._depthwise(inputs[0], weights[0], indices)
        if len(weights) > 1:
            y = y + per_member(select(weights[1], indices), y.shape.rank)
        y = self.from_channels_last(y)
        act = sample_activation(self.layer.activation)
        return act(y) if act is not None else y


@register_translator(keras.layers.SeparableConv1D, keras.layers.SeparableConv2D)
class SeparableConvTranslator(_DepthwiseBase):
    weight_names = ("depthwise_kernel", "pointwise_kernel", "bias")

    def initializer(self, variable):
        return getattr(self.layer, {"depthwise_kernel": "depthwise_initializer",
                                    "pointwise_kernel": "pointwise_initializer"}.get(variable.name,
                                                                                      "bias_initializer"))

    def forward(self, inputs, weights, indices):
        y = self._depthwise(inputs[0], weights[0], indices)
        pw = weights[1]  # [M, 1, 1, C*mult, F]
        pw = tf.reshape(pw, [tf.shape(pw)[0], pw.shape[-2], pw.shape[-1]])
        cf = self.channels_first
        y = population_dense(y, pw, weights[2] if len(weights) > 2 else None, None if cf else self.layer.activation,
                             indices)
        if not cf:
            return y
        act = sample_activation(self.layer.activation)
        y = self.from_channels_last(y)
        return act(y) if act is not None else y
