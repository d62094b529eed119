"""Keras-template audit: a zoo of models a Keras 3 user would bring, each run as a tfevo population and
compared member by member against plain Keras with that member's weights.

For every model: ``PopulationModel(template)``, ``P`` members (``init_params`` plus N(0, 0.05) noise, so
zero-initialized biases and BatchNormalization statistics differ between members), random inputs
``[P, B, ...]``. The reference for member ``p`` is the template itself after
``template.set_weights(pm.template_weights(params[p]))`` and, separately, ``pm.to_keras(params[p])``;
both are called on ``x[p]`` in inference mode. The population runs on flat params (full population),
on ``unflatten`` weights, with ``indices`` (a permuted subset) and with ``use_op=False`` (the pure-TF
path). Outcome per model: ``ok`` (max abs error over members and paths, within the tolerance),
``MISMATCH`` (an output beyond the tolerance), ``refused`` (a ConfigError at construction: the message
is printed), ``CRASH`` (any other exception), ``keras_fails`` (the population ran, plain Keras raised a
TensorFlow error computing the reference: e.g. channels-first convolutions in float64/float16 on CPU).

Usage: ``PYTHONPATH=$PWD python benchmarks/audit_keras_zoo.py [--only NAME ...] [--json out.jsonl]``
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import numpy as np
import tensorflow as tf

from tfevo import nn
from tfevo.core import ConfigError

L = keras.layers
P, B = 3, 2
TOL32 = 2e-5  # relative to max(1, |reference|): float32 sums in another order


def seq(shape, *layers, dtype=None):
    return keras.Sequential([keras.Input(shape, dtype=dtype), *layers])


def fn(shape, build, dtype=None):
    inp = keras.Input(shape, dtype=dtype)
    return keras.Model(inp, build(inp))


def head(x, units=3):
    if len(x.shape) > 2:
        x = L.Flatten()(x)
    return L.Dense(units)(x)


def multi_branch(merge_cls, **kw):
    def build(inp):
        a = L.Dense(6, activation="tanh")(inp)
        b = L.Dense(6, activation="relu")(inp)
        c = L.Dense(6)(inp)
        ins = [a, b] if merge_cls is L.Subtract else [a, b, c]
        return L.Dense(2)(merge_cls(**kw)(ins))
    return fn((5,), build)


def shared_twice():
    a, b = keras.Input((4,), name="a"), keras.Input((4,), name="b")
    shared = L.Dense(5, activation="tanh", name="shared")
    h = L.Concatenate()([shared(a), shared(b)])
    return keras.Model([a, b], L.Dense(2)(h))


def shared_twice_chain():
    inp = keras.Input((4,))
    d = L.Dense(4, activation="tanh", name="shared")
    return keras.Model(inp, L.Dense(2)(d(d(inp))))


def nested_two_levels():
    inner = keras.Sequential([keras.Input((6,)), L.Dense(6, activation="tanh"), L.Dense(6)], name="inner")
    mid_in = keras.Input((6,))
    mid = keras.Model(mid_in, L.Add()([inner(mid_in), L.Dense(6)(mid_in)]), name="mid")
    inp = keras.Input((5,))
    h = L.Dense(6)(inp)
    return keras.Model(inp, L.Dense(2)(mid(mid(h))))


def nested_seq_in_seq():
    inner = keras.Sequential([keras.Input((4,)), L.Dense(4, activation="relu")], name="inner")
    middle = keras.Sequential([keras.Input((4,)), inner, L.Dense(4)], name="middle")
    inp = keras.Input((4,))
    return keras.Model(inp, L.Dense(2)(middle(inp)))


def nested_multi_io():
    a, b = keras.Input((3,)), keras.Input((4,))
    h = L.Concatenate()([L.Dense(4)(a), b])
    inner = keras.Model([a, b], [L.Dense(2, activation="tanh")(h), L.Dense(3)(h)], name="inner")
    x, y = keras.Input((3,)), keras.Input((4,))
    o1, o2 = inner([x, y])
    return keras.Model([x, y], L.Dense(2)(L.Concatenate()([o1, o2])))


def multi_io():
    a, b = keras.Input((3,), name="pos"), keras.Input((2, 2), name="img")
    h = L.Concatenate()([L.Dense(4)(a), L.Flatten()(b)])
    return keras.Model({"pos": a, "img": b}, {"logits": L.Dense(2)(h), "value": L.Dense(1)(h)})


def multi_out_list():
    inp = keras.Input((4,))
    h = L.Dense(5, activation="tanh")(inp)
    return keras.Model(inp, [L.Dense(2)(h), L.Dense(1)(h), h])


def residual_cnn():
    def build(inp):
        x = L.Conv2D(4, 3, padding="same", activation="relu")(inp)
        y = L.Conv2D(4, 3, padding="same")(x)
        y = L.BatchNormalization()(y)
        x = L.Activation("relu")(L.Add()([x, y]))
        x = L.MaxPooling2D()(x)
        return head(L.GlobalAveragePooling2D()(x))
    return fn((8, 8, 2), build)


class Scale(L.Layer):
    def build(self, shape):
        self.w = self.add_weight(shape=(shape[-1],), initializer="ones", name="w")

    def call(self, x):
        return x * self.w


class MyDense(L.Dense):
    pass


@keras.saving.register_keras_serializable(package="audit")
def softmax_axis1(t):
    return keras.ops.softmax(t, axis=1)


def lambda_model():
    return fn((4,), lambda i: L.Dense(2)(L.Lambda(lambda t: t * 2.0)(L.Dense(4)(i))))


def ops_model():
    return fn((4,), lambda i: L.Dense(2)(keras.ops.tanh(L.Dense(4)(i))))


def constraints_model():
    return seq((4,), L.Dense(5, kernel_constraint=keras.constraints.MaxNorm(0.5), use_bias=False,
                             bias_constraint=keras.constraints.NonNeg()),
               L.Dense(2, kernel_constraint="non_neg"))


ZOO = {
    # --- Sequential / functional basics
    "seq_mlp": lambda: seq((5,), L.Dense(8, activation="tanh"), L.Dense(8, activation="relu"), L.Dense(2)),
    "seq_mlp_no_bias": lambda: seq((5,), L.Dense(8, activation="tanh", use_bias=False), L.Dense(2, use_bias=False)),
    "func_mlp": lambda: fn((5,), lambda i: L.Dense(2, activation="softmax")(L.Dense(7, activation="selu")(i))),
    "dense_rank3": lambda: seq((3, 4), L.Dense(5, activation="gelu"), L.Dense(2), L.Flatten(), L.Dense(2)),
    "constraints": constraints_model,
    # --- multi-branch merges
    "merge_add": lambda: multi_branch(L.Add),
    "merge_concat": lambda: multi_branch(L.Concatenate),
    "merge_multiply": lambda: multi_branch(L.Multiply),
    "merge_average": lambda: multi_branch(L.Average),
    "merge_subtract": lambda: multi_branch(L.Subtract),
    "merge_maximum": lambda: multi_branch(L.Maximum),
    "merge_minimum": lambda: multi_branch(L.Minimum),
    "merge_concat_axis1": lambda: fn((3, 4), lambda i: head(L.Concatenate(axis=1)([L.Dense(4)(i), i]))),
    "merge_dot": lambda: fn((5,), lambda i: L.Dense(2)(L.Dot(axes=1)([L.Dense(4)(i), L.Dense(4)(i)]))),
    "residual_cnn": residual_cnn,
    # --- shared / nested
    "shared_twice": shared_twice,
    "shared_chain": shared_twice_chain,
    "nested_two_levels": nested_two_levels,
    "nested_seq_in_seq": nested_seq_in_seq,
    "nested_multi_io": nested_multi_io,
    "multi_io_dict": multi_io,
    "multi_out_list": multi_out_list,
    # --- convolutions
    "conv1d_valid_stride": lambda: seq((9, 3), L.Conv1D(4, 3, strides=2, activation="relu"), L.Flatten(), L.Dense(2)),
    "conv1d_same": lambda: seq((9, 3), L.Conv1D(4, 4, padding="same"), L.Flatten(), L.Dense(2)),
    "conv1d_causal": lambda: seq((9, 3), L.Conv1D(4, 3, padding="causal"), L.Flatten(), L.Dense(2)),
    "conv1d_dilated": lambda: seq((9, 3), L.Conv1D(4, 3, dilation_rate=2), L.Flatten(), L.Dense(2)),
    "conv1d_groups": lambda: seq((9, 4), L.Conv1D(4, 3, groups=2), L.Flatten(), L.Dense(2)),
    "conv2d_valid_s2": lambda: seq((9, 9, 2), L.Conv2D(3, 3, strides=2), L.Flatten(), L.Dense(2)),
    "conv2d_same_s2": lambda: seq((9, 9, 2), L.Conv2D(3, 4, strides=(2, 3), padding="same", activation="tanh"),
                                  L.Flatten(), L.Dense(2)),
    "conv2d_rect_kernel": lambda: seq((8, 7, 2), L.Conv2D(3, (2, 3), use_bias=False), L.Flatten(), L.Dense(2)),
    "conv2d_dilated": lambda: seq((9, 9, 2), L.Conv2D(3, 3, dilation_rate=2), L.Flatten(), L.Dense(2)),
    "conv2d_groups": lambda: seq((9, 9, 4), L.Conv2D(4, 3, groups=2), L.Flatten(), L.Dense(2)),
    "conv2d_channels_first": lambda: seq((2, 9, 9), L.Conv2D(3, 3, data_format="channels_first"), L.Flatten(),
                                         L.Dense(2)),
    "conv2d_cf_softmax": lambda: seq((2, 7, 6), L.Conv2D(4, 3, strides=2, padding="same", activation="softmax",
                                                    data_format="channels_first"), L.Flatten(), L.Dense(2)),
    "conv1d_cf_causal_user_act": lambda: seq((3, 9), L.Conv1D(4, 3, padding="causal", data_format="channels_first",
                                                              activation=softmax_axis1),
                                             L.Conv1D(2, 2, strides=2, data_format="channels_first"), L.Flatten(),
                                             L.Dense(2)),
    "conv3d_cf": lambda: seq((2, 4, 4, 4), L.Conv3D(3, 2, strides=2, activation="softmax",
                                                    data_format="channels_first"), L.Flatten(), L.Dense(2)),
    "depthwise_cf": lambda: seq((3, 8, 9), L.DepthwiseConv2D(3, depth_multiplier=2, activation="softmax",
                                                            data_format="channels_first"), L.Flatten(), L.Dense(2)),
    "separable_cf": lambda: seq((3, 8, 8), L.SeparableConv2D(5, 3, strides=2, padding="same", activation="softmax",
                                                            data_format="channels_first"), L.Flatten(), L.Dense(2)),
    # Keras's TF backend adds a channels-first bias over the last axis when that axis has as many
    # entries as there are filters (keras.ops.add's bias_add shortcut): here W == filters == 3
    "conv2d_cf_w_eq_filters": lambda: seq((2, 7, 6), L.Conv2D(3, 3, strides=2, padding="same",
                                                            data_format="channels_first"), L.Flatten(), L.Dense(2)),
    "batchnorm_axis1_c_eq_w": lambda: seq((4, 5, 4), L.BatchNormalization(axis=1), L.Flatten(), L.Dense(2)),
    "conv3d_softmax": lambda: seq((4, 4, 4, 2), L.Conv3D(3, 2, activation="softmax"), L.Flatten(), L.Dense(2)),
    "cnn_channels_first": lambda: seq((3, 8, 8), L.Conv2D(4, 3, padding="same", activation="relu",
                                                         data_format="channels_first"),
                                      L.BatchNormalization(axis=1), L.MaxPooling2D(data_format="channels_first"),
                                      L.Conv2D(4, 2, activation="tanh", data_format="channels_first"),
                                      L.GlobalAveragePooling2D(data_format="channels_first"), L.Dense(2)),
    "depthwise_same_s2": lambda: seq((8, 8, 3), L.DepthwiseConv2D(3, strides=2, padding="same", depth_multiplier=2),
                                     L.Flatten(), L.Dense(2)),
    "depthwise_dilated": lambda: seq((8, 8, 3), L.DepthwiseConv2D(3, dilation_rate=2), L.Flatten(), L.Dense(2)),
    "depthwise_no_bias": lambda: seq((8, 8, 3), L.DepthwiseConv2D(2, use_bias=False, activation="relu"),
                                     L.Flatten(), L.Dense(2)),
    "separable_s2": lambda: seq((8, 8, 3), L.SeparableConv2D(4, 3, strides=2, activation="elu"), L.Flatten(),
                                L.Dense(2)),
    "separable_dilated": lambda: seq((8, 8, 3), L.SeparableConv2D(4, 3, dilation_rate=2, padding="same"),
                                     L.Flatten(), L.Dense(2)),
    "conv2d_transpose": lambda: seq((4, 4, 2), L.Conv2DTranspose(3, 3, strides=2), L.Flatten(), L.Dense(2)),
    "conv3d": lambda: seq((4, 4, 4, 2), L.Conv3D(2, 2, strides=2), L.Flatten(), L.Dense(2)),
    "separable_conv1d": lambda: seq((9, 3), L.SeparableConv1D(4, 3), L.Flatten(), L.Dense(2)),
    "depthwise_conv1d": lambda: seq((9, 3), L.DepthwiseConv1D(3), L.Flatten(), L.Dense(2)),
    # --- dilated, grouped and transposed convolutions, 1-D depthwise/separable, strides with dilation
    # (channels first: shapes whose last axis differs from the channel count, see conv2d_cf_w_eq_filters)
    "conv1d_dilated_causal": lambda: seq((9, 3), L.Conv1D(4, 3, dilation_rate=2, padding="causal", activation="relu"),
                                         L.Flatten(), L.Dense(2)),
    "conv1d_dilated_same_cf": lambda: seq((3, 9), L.Conv1D(4, 3, dilation_rate=3, padding="same",
                                                           data_format="channels_first"), L.Flatten(), L.Dense(2)),
    "conv1d_groups_cf": lambda: seq((4, 9), L.Conv1D(6, 3, groups=2, strides=2, activation="softmax",
                                                     data_format="channels_first"), L.Flatten(), L.Dense(2)),
    "conv2d_dilated_same_rect": lambda: seq((9, 8, 2), L.Conv2D(3, (3, 2), dilation_rate=(2, 3), padding="same",
                                                                activation="tanh"), L.Flatten(), L.Dense(2)),
    "conv2d_groups_s2_same": lambda: seq((7, 7, 4), L.Conv2D(6, 3, groups=2, strides=2, padding="same"),
                                         L.Flatten(), L.Dense(2)),
    "conv2d_depthwise_groups_dilated": lambda: seq((7, 7, 4), L.Conv2D(4, 3, groups=4, dilation_rate=2,
                                                                       use_bias=False), L.Flatten(), L.Dense(2)),
    "conv2d_groups_dilated_cf": lambda: seq((4, 7, 6), L.Conv2D(6, 3, groups=2, dilation_rate=(1, 2),
                                                                data_format="channels_first"),
                                            L.Flatten(), L.Dense(2)),
    "conv3d_dilated": lambda: seq((5, 5, 5, 2), L.Conv3D(2, 2, dilation_rate=2), L.Flatten(), L.Dense(2)),
    "conv3d_groups_same": lambda: seq((4, 4, 4, 4), L.Conv3D(4, 2, groups=2, padding="same"), L.Flatten(),
                                      L.Dense(2)),
    "conv3d_dilated_groups_cf": lambda: seq((4, 5, 5, 3), L.Conv3D(2, 2, dilation_rate=2, groups=2,
                                                                   data_format="channels_first"), L.Flatten(),
                                            L.Dense(2)),
    "conv1d_transpose": lambda: seq((5, 3), L.Conv1DTranspose(4, 3, strides=2), L.Flatten(), L.Dense(2)),
    "conv1d_transpose_same_op": lambda: seq((5, 3), L.Conv1DTranspose(4, 3, strides=2, padding="same",
                                                                      output_padding=1), L.Flatten(), L.Dense(2)),
    "conv1d_transpose_dilated_cf": lambda: seq((3, 5), L.Conv1DTranspose(4, 3, dilation_rate=2, padding="same",
                                                                         data_format="channels_first"),
                                               L.Flatten(), L.Dense(2)),
    "conv2d_transpose_same": lambda: seq((4, 4, 2), L.Conv2DTranspose(3, (3, 2), strides=(2, 3), padding="same",
                                                                      activation="relu"), L.Flatten(), L.Dense(2)),
    "conv2d_transpose_valid_op": lambda: seq((4, 3, 2), L.Conv2DTranspose(3, 3, strides=3, output_padding=(2, 1)),
                                             L.Flatten(), L.Dense(2)),
    "conv2d_transpose_even_same_op": lambda: seq((4, 3, 2), L.Conv2DTranspose(3, 4, strides=2, padding="same",
                                                                              output_padding=1), L.Flatten(),
                                                 L.Dense(2)),
    "conv2d_transpose_dilated": lambda: seq((4, 4, 2), L.Conv2DTranspose(3, 3, dilation_rate=2, use_bias=False),
                                            L.Flatten(), L.Dense(2)),
    "conv2d_transpose_cf": lambda: seq((2, 4, 5), L.Conv2DTranspose(3, 3, strides=2, padding="same",
                                                                    data_format="channels_first"), L.Flatten(),
                                       L.Dense(2)),
    "conv2d_transpose_bad_op": lambda: seq((4, 4, 2), L.Conv2DTranspose(3, 4, strides=2, padding="same",
                                                                        output_padding=0), L.Flatten(), L.Dense(2)),
    "conv3d_transpose": lambda: seq((3, 3, 3, 2), L.Conv3DTranspose(2, 2, strides=2, padding="same"), L.Flatten(),
                                    L.Dense(2)),
    "conv3d_transpose_cf": lambda: seq((2, 3, 3, 4), L.Conv3DTranspose(3, 3, strides=(1, 2, 1),
                                                                       data_format="channels_first"), L.Flatten(),
                                       L.Dense(2)),
    "depthwise_conv1d_s2_mult": lambda: seq((9, 3), L.DepthwiseConv1D(3, strides=2, depth_multiplier=2,
                                                                      padding="same", activation="relu"),
                                            L.Flatten(), L.Dense(2)),
    "depthwise_conv1d_dilated_s2_cf": lambda: seq((3, 11), L.DepthwiseConv1D(3, strides=2, dilation_rate=2,
                                                                             padding="same", activation="softmax",
                                                                             data_format="channels_first"),
                                                  L.Flatten(), L.Dense(2)),
    "separable_conv1d_dilated_s2_cf": lambda: seq((3, 13), L.SeparableConv1D(4, 3, strides=2, dilation_rate=2,
                                                                             data_format="channels_first"),
                                                  L.Flatten(), L.Dense(2)),
    "depthwise_dilated_s2": lambda: seq((9, 9, 3), L.DepthwiseConv2D(3, strides=2, dilation_rate=2, padding="same"),
                                        L.Flatten(), L.Dense(2)),
    "separable_dilated_s2": lambda: seq((9, 9, 3), L.SeparableConv2D(4, 3, strides=2, dilation_rate=(2, 1)),
                                        L.Flatten(), L.Dense(2)),
    "unet_like": lambda: unet_like(),
    # --- pooling / shape ops
    "pool1d_max_avg": lambda: seq((8, 3), L.Dense(3), L.MaxPooling1D(2), L.AveragePooling1D(2, padding="same"),
                                  L.Flatten(), L.Dense(2)),
    "pool2d_global": lambda: seq((8, 8, 3), L.Conv2D(3, 3), L.MaxPooling2D(2, strides=1), L.AveragePooling2D(2),
                                 L.GlobalMaxPooling2D(), L.Dense(2)),
    "pool1d_global_avg": lambda: seq((8, 3), L.Dense(3), L.GlobalAveragePooling1D(), L.Dense(2)),
    "pool_channels_first": lambda: seq((3, 8, 8), L.MaxPooling2D(data_format="channels_first"),
                                       L.GlobalAveragePooling2D(data_format="channels_first"), L.Dense(2)),
    "upsample_pad_crop": lambda: seq((4, 4, 2), L.Conv2D(2, 1), L.UpSampling2D(2), L.ZeroPadding2D(((1, 0), (2, 1))),
                                     L.Cropping2D(((0, 1), (1, 1))), L.Flatten(), L.Dense(2)),
    "upsample1d_pad_crop": lambda: seq((5, 2), L.Dense(2), L.UpSampling1D(3), L.ZeroPadding1D(2), L.Cropping1D(1),
                                       L.Flatten(), L.Dense(2)),
    "upsample_bilinear": lambda: seq((4, 4, 2), L.Conv2D(2, 1), L.UpSampling2D(2, interpolation="bilinear"),
                                     L.Flatten(), L.Dense(2)),
    "reshape_permute_repeat": lambda: seq((6,), L.Dense(6), L.Reshape((2, 3)), L.Permute((2, 1)), L.Flatten(),
                                          L.RepeatVector(2), L.Dense(3), L.Reshape((-1,)), L.Dense(2)),
    "flatten_channels_first": lambda: seq((2, 4, 3), L.Dense(3), L.Permute((2, 1, 3)),
                                          L.Flatten(data_format="channels_first"), L.Dense(2)),
    "mlp_flatten_channels_first": lambda: seq((3, 4), L.Flatten(data_format="channels_first"),
                                              L.Dense(5, activation="relu"), L.Dense(2)),
    # --- normalization
    "batchnorm_dense": lambda: seq((5,), L.Dense(6), L.BatchNormalization(), L.Dense(2)),
    "batchnorm_no_center_scale": lambda: seq((5,), L.Dense(6), L.BatchNormalization(center=False, scale=False),
                                             L.Dense(2)),
    "batchnorm_conv_axis1": lambda: seq((3, 6, 6), L.BatchNormalization(axis=1), L.Flatten(), L.Dense(2)),
    "layernorm": lambda: seq((3, 4), L.Dense(4), L.LayerNormalization(), L.Flatten(), L.Dense(2)),
    "layernorm_rms_noscale": lambda: seq((4,), L.Dense(4), L.LayerNormalization(rms_scaling=True),
                                         L.LayerNormalization(center=False, scale=False), L.Dense(2)),
    "groupnorm": lambda: seq((4, 4, 4), L.GroupNormalization(groups=2), L.Flatten(), L.Dense(2)),
    "groupnorm_cf_instance": lambda: seq((4, 3, 5), L.GroupNormalization(groups=-1, axis=1), L.Flatten(), L.Dense(2)),
    "unitnorm": lambda: seq((5,), L.Dense(4), L.UnitNormalization(), L.Dense(2)),
    # --- inference-time identities
    "dropout_noise": lambda: seq((8, 8, 3), L.Conv2D(3, 3), L.SpatialDropout2D(0.5), L.Flatten(), L.Dropout(0.5),
                                 L.GaussianNoise(1.0), L.GaussianDropout(0.4), L.AlphaDropout(0.3), L.Dense(2)),
    "dropout_training_true": lambda: fn((5,), lambda i: L.Dense(2)(L.Dropout(0.5)(L.Dense(4)(i), training=True))),
    "batchnorm_training_true": lambda: fn((5,), lambda i: L.Dense(2)(L.BatchNormalization()(L.Dense(4)(i),
                                                                                           training=True))),
    "dropout_training_false": lambda: fn((5,), lambda i: L.Dense(2)(L.Dropout(0.5)(L.Dense(4)(i), training=False))),
    # --- embeddings / recurrent
    "embedding_int": lambda: seq((5,), L.Embedding(11, 3), L.Flatten(), L.Dense(2), dtype="int32"),
    "embedding_float_input": lambda: seq((5,), L.Embedding(11, 3), L.GlobalAveragePooling1D(), L.Dense(2)),
    "simple_rnn_seq": lambda: seq((5, 3), L.SimpleRNN(4, return_sequences=True), L.SimpleRNN(3), L.Dense(2)),
    "gru_reset_after_false": lambda: seq((5, 3), L.GRU(4, reset_after=False), L.Dense(2)),
    "gru_reset_after": lambda: seq((5, 3), L.GRU(4, return_sequences=True), L.Flatten(), L.Dense(2)),
    "lstm_seq": lambda: seq((5, 3), L.LSTM(4, return_sequences=True), L.LSTM(3), L.Dense(2)),
    "lstm_no_bias_unit_forget": lambda: seq((5, 3), L.LSTM(4, use_bias=False, unit_forget_bias=False), L.Dense(2)),
    "lstm_open_time": lambda: seq((None, 3), L.LSTM(4), L.Dense(2)),
    "lstm_go_backwards": lambda: seq((5, 3), L.LSTM(4, go_backwards=True), L.Dense(2)),
    "bidirectional": lambda: seq((5, 3), L.Bidirectional(L.LSTM(4)), L.Dense(2)),
    "time_distributed": lambda: seq((5, 3), L.TimeDistributed(L.Dense(4)), L.Flatten(), L.Dense(2)),
    "conv_lstm1d": lambda: seq((3, 6, 2), L.ConvLSTM1D(2, 3), L.Flatten(), L.Dense(2)),
    # --- attention
    "attention": lambda: fn((4, 3), lambda i: head(L.Attention()([L.Dense(3)(i), i]))),
    "mha": lambda: fn((4, 3), lambda i: head(L.MultiHeadAttention(2, 3)(i, i))),
    # --- sequence layers, wrappers and attention: the forms added since the first audit
    "gru_go_backwards_seq": lambda: seq((5, 3), L.GRU(4, go_backwards=True, return_sequences=True), L.Flatten(),
                                        L.Dense(2)),
    "simple_rnn_go_backwards_state": lambda: fn((5, 3), lambda i: L.Dense(2)(L.Concatenate()(
        list(L.SimpleRNN(4, go_backwards=True, return_state=True)(i))))),
    "lstm_go_backwards_seq_state": lambda: fn((5, 3), lambda i: L.Dense(2)(L.Concatenate()([
        L.Flatten()(t) for t in L.LSTM(3, go_backwards=True, return_sequences=True, return_state=True)(i)]))),
    "lstm_stateful": lambda: keras.Sequential([keras.Input((5, 3), batch_size=2), L.LSTM(4, stateful=True),
                                               L.Dense(2)]),
    "bidirectional_sum_seq": lambda: seq((5, 3), L.Bidirectional(L.GRU(4, return_sequences=True), merge_mode="sum"),
                                         L.Flatten(), L.Dense(2)),
    "bidirectional_mul_rnn": lambda: seq((5, 3), L.Bidirectional(L.SimpleRNN(3), merge_mode="mul"), L.Dense(2)),
    "bidirectional_ave_backward_layer": lambda: seq((5, 3), L.Bidirectional(
        L.LSTM(4, return_sequences=True), merge_mode="ave",
        backward_layer=L.GRU(4, return_sequences=True, go_backwards=True)), L.Flatten(), L.Dense(2)),
    "bidirectional_none_state": lambda: fn((5, 3), lambda i: L.Dense(2)(L.Concatenate()(
        list(L.Bidirectional(L.LSTM(3, return_state=True), merge_mode=None)(i))))),
    "bidirectional_open_time": lambda: seq((None, 3), L.Bidirectional(L.GRU(3, return_sequences=True)),
                                           L.Bidirectional(L.LSTM(2)), L.Dense(2)),
    "bidirectional_go_backwards_inner": lambda: seq((5, 3), L.Bidirectional(L.LSTM(3, go_backwards=True),
                                                                                      backward_layer=L.LSTM(3)),
                                                    L.Dense(2)),
    "time_distributed_conv2d": lambda: seq((3, 6, 6, 2), L.TimeDistributed(L.Conv2D(3, 3, strides=2, padding="same",
                                                                                     activation="relu")),
                                           L.TimeDistributed(L.Flatten()), L.LSTM(3), L.Dense(2)),
    "time_distributed_sequential": lambda: seq((3, 4, 4, 2), L.TimeDistributed(keras.Sequential(
        [keras.Input((4, 4, 2)), L.Conv2D(3, 2), L.BatchNormalization(), L.Flatten(), L.Dense(4)])),
        L.Flatten(), L.Dense(2)),
    "time_distributed_functional": lambda: seq((3, 5), L.TimeDistributed(_td_functional()), L.Flatten(), L.Dense(2)),
    "time_distributed_lstm": lambda: seq((2, 4, 3), L.TimeDistributed(L.LSTM(3)), L.Flatten(), L.Dense(2)),
    "time_distributed_lambda": lambda: seq((3, 5), L.TimeDistributed(L.Lambda(lambda t: 2 * t)), L.Dense(2)),
    "attention_scale_causal": lambda: fn((4, 3), lambda i: head(L.Attention(use_scale=True)([i, i],
                                                                                            use_causal_mask=True))),
    "attention_concat_key": lambda: _two_in((4, 3), (6, 3), lambda q, v: head(L.Attention(
        use_scale=True, score_mode="concat")([q, v, L.Dense(3)(v)]))),
    "attention_scores": lambda: fn((4, 3), lambda i: L.Dense(2)(L.Concatenate()([L.Flatten()(t) for t in L.Attention()(
        [i, i], return_attention_scores=True)]))),
    "attention_mask_tensor": lambda: _attention_mask(),
    "additive_attention": lambda: _two_in((4, 3), (6, 3), lambda q, v: head(L.AdditiveAttention()([q, v]))),
    "additive_attention_causal_no_scale": lambda: fn((4, 3), lambda i: head(L.AdditiveAttention(use_scale=False)(
        [i, i], use_causal_mask=True))),
    "mha_cross_causal": lambda: _two_in((4, 3), (6, 5), lambda q, v: head(L.MultiHeadAttention(
        3, 2, value_dim=4, output_shape=(2, 3), use_bias=False)(q, v, use_causal_mask=True))),
    "mha_key_dropout": lambda: _two_in((4, 3), (6, 5), lambda q, v: head(L.MultiHeadAttention(2, 3, dropout=0.3)(
        q, v, key=L.Dense(2)(v)))),
    "mha_self_scores": lambda: fn((4, 3), lambda i: L.Dense(2)(L.Concatenate()([L.Flatten()(t) for t in
                                                                               L.MultiHeadAttention(2, 3)(
        i, i, return_attention_scores=True)]))),
    "mha_scores_cross_length": lambda: _two_in((4, 3), (6, 5), lambda q, v: head(L.MultiHeadAttention(2, 3)(
        q, v, return_attention_scores=True)[1])),
    "mha_rank4_default_axes": lambda: fn((3, 4, 2), lambda i: head(L.MultiHeadAttention(2, 3)(i, i))),
    "mha_rank4_axis2": lambda: fn((3, 4, 2), lambda i: head(L.MultiHeadAttention(2, 3, attention_axes=(2,))(i, i))),
    "mha_gate_sliding_window": lambda: fn((5, 3), lambda i: head(L.MultiHeadAttention(
        2, 3, use_gate=True, sliding_window=2)(i, i, use_causal_mask=True))),
    "mha_attention_mask": lambda: _mha_mask(),
    "transformer_block": lambda: _transformer_block(),
    "bidirectional_frozen": lambda: _frozen_wrapped("bi"),
    "time_distributed_partly_frozen": lambda: _frozen_wrapped("td"),
    "mha_frozen": lambda: _frozen_wrapped("mha"),
    # --- user code
    "lambda": lambda_model,
    "keras_ops": ops_model,
    "custom_layer_weights": lambda: seq((4,), L.Dense(3), Scale(), L.Dense(2)),
    "dense_subclass": lambda: seq((4,), MyDense(3), L.Dense(2)),
    # --- shapes
    "unknown_dim_dense": lambda: seq((None, 4), L.Dense(3), L.GlobalAveragePooling1D(), L.Dense(2)),
    "unknown_dim_conv": lambda: seq((None, None, 2), L.Conv2D(2, 3), L.GlobalMaxPooling2D(), L.Dense(2)),
    # --- more graphs
    "shared_two_shapes": lambda: shared_two_shapes(),
    "same_tensor_twice": lambda: same_tensor_twice(),
    "output_is_intermediate": lambda: output_is_input(),
    "fixed_batch_input": lambda: keras.Sequential([keras.Input((4,), batch_size=2), L.Dense(3), L.Dense(2)]),
    "uint8_rescaling": lambda: seq((4, 4, 1), L.Rescaling(1 / 255.0), L.Conv2D(2, 2), L.Flatten(), L.Dense(2),
                                   dtype="uint8"),
    "dense_on_image": lambda: seq((4, 4, 3), L.Dense(5, activation="relu"), L.Conv2D(2, 2), L.Flatten(), L.Dense(2)),
    "conv1d_same_stride2": lambda: seq((9, 3), L.Conv1D(4, 4, strides=2, padding="same"), L.Flatten(), L.Dense(2)),
    "conv1d_causal_stride2": lambda: seq((9, 3), L.Conv1D(4, 3, strides=2, padding="causal"), L.Flatten(),
                                         L.Dense(2)),
    # --- recurrent variants
    "lstm_initial_state": lambda: lstm_initial_state(),
    "lstm_return_state": lambda: lstm_return_state(),
    "gru_relu_hard_sigmoid_no_bias": lambda: seq((5, 3), L.GRU(4, activation="relu", recurrent_activation="hard_sigmoid",
                                                             use_bias=False), L.Dense(2)),
    "gru_reset_after_false_no_bias": lambda: seq((5, 3), L.GRU(4, reset_after=False, use_bias=False), L.Dense(2)),
    "lstm_dropouts_unroll": lambda: seq((5, 3), L.LSTM(4, dropout=0.3, recurrent_dropout=0.3, unroll=True),
                                        L.Dense(2)),
    "simple_rnn_return_state": lambda: fn((5, 3), lambda i: L.Dense(2)(L.Concatenate()(
        list(L.SimpleRNN(4, return_state=True, activation="relu")(i))))),
    "rnn_cell_wrapper": lambda: seq((5, 3), L.RNN(L.LSTMCell(4)), L.Dense(2)),
    "stacked_cells": lambda: seq((5, 3), L.RNN([L.GRUCell(4), L.GRUCell(3)]), L.Dense(2)),
    # --- frozen / non-trainable
    "frozen_first_dense": lambda: _frozen(),
    # --- initializers
    "initializers_mix": lambda: seq((4,), L.Dense(5, kernel_initializer=keras.initializers.RandomNormal(stddev=3.0),
                                              bias_initializer=keras.initializers.Constant(0.7)),
                                    L.Dense(2, kernel_initializer="orthogonal")),
}


def unet_like():
    """An encoder-decoder: strided and dilated convolutions down, transposed ones up, a skip connection."""
    inp = keras.Input((8, 8, 2))
    e1 = L.Conv2D(4, 3, padding="same", activation="relu")(inp)
    e2 = L.Conv2D(6, 3, strides=2, padding="same", groups=2, activation="relu")(e1)
    b = L.Conv2D(6, 3, dilation_rate=2, padding="same", activation="relu")(e2)
    d1 = L.Conv2DTranspose(4, 3, strides=2, padding="same", activation="relu")(b)
    out = L.Conv2D(1, 1)(L.Concatenate()([d1, e1]))
    return keras.Model(inp, L.Dense(2)(L.Flatten()(out)))


def shared_two_shapes():
    inp = keras.Input((3, 4))
    d = L.Dense(4, activation="tanh", name="shared")
    a = d(inp)  # [B, 3, 4]
    b = d(L.Dense(4)(L.Flatten()(inp)))  # [B, 4]
    return keras.Model(inp, L.Dense(2)(L.Concatenate()([L.Flatten()(a), b])))


def same_tensor_twice():
    return fn((4,), lambda i: L.Dense(2)(L.Add()([L.Dense(3, name="h")(i)] * 2)))


def output_is_input():
    inp = keras.Input((4,))
    h = L.Dense(3)(inp)
    return keras.Model(inp, [L.Dense(2)(h), h, h])


def lstm_initial_state():
    inp, s0, s1 = keras.Input((5, 3)), keras.Input((4,)), keras.Input((4,))
    return keras.Model([inp, s0, s1], L.Dense(2)(L.LSTM(4)(inp, initial_state=[s0, s1])))


def lstm_return_state():
    inp = keras.Input((5, 3))
    seq_out, h, c = L.LSTM(4, return_sequences=True, return_state=True)(inp)
    return keras.Model(inp, L.Dense(2)(L.Concatenate()([L.Flatten()(seq_out), h, c])))


def _two_in(s1, s2, build):
    a, b = keras.Input(s1), keras.Input(s2)
    return keras.Model([a, b], build(a, b))


def _td_functional():
    inp = keras.Input((5,))
    h = L.Dense(4, activation="tanh")(inp)
    return keras.Model(inp, L.Concatenate()([h, L.Dense(2)(inp)]))


def _attention_mask():
    q, v, qm, vm = keras.Input((4, 3)), keras.Input((6, 3)), keras.Input((4,), dtype="bool"), keras.Input((6,), dtype="bool")
    return keras.Model([q, v, qm, vm], head(L.Attention()([q, v], mask=[qm, vm])))


def _mha_mask():
    q, m = keras.Input((4, 3)), keras.Input((4, 4), dtype="bool")
    return keras.Model([q, m], head(L.MultiHeadAttention(2, 3)(q, q, attention_mask=m)))


def _transformer_block():
    inp = keras.Input((6, 4))
    x = L.LayerNormalization()(L.Add()([inp, L.MultiHeadAttention(2, 4)(inp, inp, use_causal_mask=True)]))
    f = L.TimeDistributed(L.Dense(4))(L.Dense(8, activation="gelu")(x))
    x = L.LayerNormalization()(L.Add()([x, f]))
    return keras.Model(inp, L.Dense(2)(L.GlobalAveragePooling1D()(x)))


def _frozen_wrapped(kind):
    """A wrapper or attention layer with trainable=False (a frozen encoder), or frozen inside a TimeDistributed."""
    if kind == "td":
        inner = keras.Sequential([keras.Input((3,)), L.Dense(4, name="enc"), L.BatchNormalization(), L.Dense(2)])
        inner.layers[0].trainable = False
        return seq((5, 3), L.TimeDistributed(inner), L.Flatten(), L.Dense(2))
    layer = L.Bidirectional(L.LSTM(3, return_sequences=True)) if kind == "bi" else L.MultiHeadAttention(2, 2)
    inp = keras.Input((4, 3))
    out = layer(inp) if kind == "bi" else layer(inp, inp)
    layer.trainable = False
    return keras.Model(inp, L.Dense(2)(L.Flatten()(out)))


def _frozen():
    m = seq((4,), L.Dense(5, name="enc"), L.BatchNormalization(), L.Dense(2))
    m.layers[0].trainable = False
    return m


def _inputs(pm, template, seed):
    rng = np.random.default_rng(seed)
    out = []
    for t, shape in zip(template.inputs, pm.input_shapes):
        shape = tuple(4 if d is None else d for d in shape)
        if "int" in str(t.dtype) or any(type(s.layer).__name__ == "Embedding" and pm._input_ids[0] in s.inputs
                                        for s in pm._steps):
            out.append(rng.integers(0, 10, (P, B, *shape)).astype(np.float32))
        else:
            out.append(rng.standard_normal((P, B, *shape)).astype(np.float32))
    return out


def _as_list(y):
    if isinstance(y, dict):
        return [y[k] for k in sorted(y)]
    return list(y) if isinstance(y, (list, tuple)) else [y]


def _keras_input(pm, template, xs, p):
    one = [x[p] for x in xs]
    if "int" in str(template.inputs[0].dtype):
        one = [o.astype(np.int32) for o in one]
    if pm._input_keys is not None:
        return dict(zip(pm._input_keys, one))
    return one[0] if len(one) == 1 else one


def run_case(name, build, tol=TOL32, seed=0):
    keras.utils.set_random_seed(seed)
    template = build()
    try:
        pm = nn.PopulationModel(template)
    except ConfigError as e:
        return {"model": name, "outcome": "refused", "message": str(e)[:300]}
    params = pm.init_params(P, seed=seed) + 0.05 * tf.random.stateless_normal([P, pm.num_params], [seed, 1])
    xs = _inputs(pm, template, seed)
    feed = xs[0] if len(xs) == 1 else (dict(zip(pm._input_keys, xs)) if pm._input_keys else xs)
    runs = {"flat": _as_list(pm(params, feed)), "split": _as_list(pm(pm.unflatten(params), feed))}
    idx = np.array([2, 0, 1][:P], np.int32)
    sub = [x[idx] for x in xs]
    sfeed = sub[0] if len(sub) == 1 else (dict(zip(pm._input_keys, sub)) if pm._input_keys else sub)
    runs["indices"] = [tf.gather(t, np.argsort(idx)) for t in _as_list(pm(params, sfeed, indices=idx))]
    pm_tf = nn.PopulationModel(template, use_op=False)
    runs["pure_tf"] = _as_list(pm_tf(params, feed))
    worst, worst_ref, where = 0.0, 0.0, ""
    for p in range(P):
        template.set_weights(pm.template_weights(params[p]))
        kin = _keras_input(pm, template, xs, p)
        try:
            refs = {"set_weights": _as_list(template(kin, training=False)),
                    "to_keras": _as_list(pm.to_keras(params[p])(kin, training=False))}
        except tf.errors.OpError as e:  # plain Keras cannot run the model here (the population ran it)
            return {"model": name, "outcome": "keras_fails", "D": pm.num_params,
                    "message": f"Keras reference: {type(e).__name__}: {str(e).splitlines()[-1][:200]}"}
        for rname, ref in refs.items():
            for path, ys in runs.items():
                for r, y in zip(ref, ys):
                    r = np.asarray(keras.ops.convert_to_numpy(r), np.float64)
                    y = np.asarray(y[p], np.float64)
                    if r.shape != y.shape:
                        return {"model": name, "outcome": "MISMATCH", "message": f"shape {y.shape} vs {r.shape}"}
                    err = float(np.max(np.abs(y - r) / np.maximum(1.0, np.abs(r)))) if r.size else 0.0
                    if not np.isfinite(err):
                        err = float("inf")
                    if err > worst:
                        worst, where = err, f"{rname}/{path}/member {p}"
                    worst_ref = max(worst_ref, float(np.max(np.abs(r))) if r.size else 0.0)
    counted = template.count_params()
    return {"model": name, "outcome": "ok" if worst <= tol else "MISMATCH", "max_rel_err": worst, "worst_at": where,
            "tol": tol, "max_abs_ref": worst_ref, "D": pm.num_params, "frozen": pm.num_frozen,
            "count_params": counted, "D_plus_frozen_eq_count": pm.num_params + pm.num_frozen == counted}


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--json")
    ap.add_argument("--dtype", default="float32", help="keras floatx / dtype policy for the templates")
    ap.add_argument("--batch", type=int, default=B, help="samples per member (<= 4: the in-place kernel paths)")
    args = ap.parse_args(argv)
    globals()["B"] = args.batch
    tol = TOL32
    if args.dtype in ("mixed_float16", "mixed_bfloat16", "float16", "bfloat16"):
        keras.mixed_precision.set_dtype_policy(args.dtype)
        tol = 2e-2 if "bfloat16" not in args.dtype else 1e-1
    elif args.dtype != "float32":
        keras.config.set_floatx(args.dtype)
    rows = []
    for name, build in ZOO.items():
        if args.only and name not in args.only:
            continue
        try:
            row = run_case(name, build, tol)
        except Exception as e:  # noqa: BLE001  (the audit records every failure)
            row = {"model": name, "outcome": "CRASH", "message": f"{type(e).__name__}: {str(e)[:300]}"}
            if os.environ.get("AUDIT_TRACE"):
                traceback.print_exc()
        row["dtype"], row["batch"] = args.dtype, args.batch
        rows.append(row)
        extra = row.get("message", "") or (row.get("worst_at", "") if row["outcome"] == "MISMATCH" else "")
        print(f"{name:28s} {row['outcome']:9s} {row.get('max_rel_err', ''):<12} {extra[:200]}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
    bad = [r for r in rows if r["outcome"] in ("MISMATCH", "CRASH")]
    kf = sum(r["outcome"] == "keras_fails" for r in rows)
    print(f"{len(rows)} models: {sum(r['outcome'] == 'ok' for r in rows)} ok, "
          f"{sum(r['outcome'] == 'refused' for r in rows)} refused, {len(bad)} mismatch/crash"
          + (f", {kf} Keras cannot run" if kf else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
