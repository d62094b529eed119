"""Every registered layer translator agrees with plain Keras, both ways.

The cases are generated from the translator registry: each Keras layer class that has a translator
must have a template here (a new translator without one fails ``test_every_translator_has_a_case``).
For each, P=3 distinct members run as one population and as three ordinary Keras models with the
same weights (``to_keras`` -> ``.keras`` file -> reload), and ``from_keras`` of the reloaded model
gives back the member's parameters bit for bit.
"""

import numpy as np
import pytest
import keras
import tensorflow as tf

from tfevo import nn
from tfevo.core import ConfigError
from tfevo.nn.translators import registry, supported_layers

L = keras.layers
P, B = 3, 2
TOL = 1e-5


def chain(shape, *layers, dense_first=False):
    """Input(shape) [-> Dense] -> layers -> Flatten -> Dense(3)."""
    inp = keras.Input(shape)
    x = L.Dense(shape[-1])(inp) if dense_first else inp
    for layer in layers:
        x = layer(x)
    if len(x.shape) > 2:
        x = L.Flatten()(x)
    return keras.Model(inp, L.Dense(3)(x))


def merge(layer):
    a, b = keras.Input((4,), name="a"), keras.Input((4,), name="b")
    y = layer([L.Dense(5, activation="tanh")(a), L.Dense(5)(b)])
    if len(y.shape) > 2:
        y = L.Flatten()(y)
    return keras.Model([a, b], L.Dense(2)(y))


def rnn(cls, **kw):
    return keras.Sequential([keras.Input((5, 3)), cls(4, return_sequences=True, **kw), cls(3, **kw), L.Dense(2)])


def attend(shapes, build):
    """Inputs of ``shapes`` -> ``build(*inputs)`` -> each output flattened -> Dense(3), concatenated."""
    ins = [keras.Input(s) for s in shapes]
    out = build(*ins)
    heads = [L.Dense(3)(L.Flatten()(t) if len(t.shape) > 2 else t) for t in (out if isinstance(out, (list, tuple))
                                                                             else [out])]
    return keras.Model(ins if len(ins) > 1 else ins[0], heads[0] if len(heads) == 1 else L.Concatenate()(heads))


S1, S2, S3 = (8, 3), (8, 8, 3), (4, 4, 4, 2)
CASES = {
    L.Dense: lambda: chain((5,), L.Dense(4, activation="tanh")),
    L.Conv1D: lambda: chain(S1, L.Conv1D(3, 3, padding="causal", activation="tanh"), L.Conv1D(2, 2, strides=2)),
    L.Conv2D: lambda: chain((7, 7, 2), L.Conv2D(3, 3, strides=2, padding="same", activation="relu")),
    L.Conv3D: lambda: chain(S3, L.Conv3D(2, 3, strides=2, padding="same", activation="elu"), L.Conv3D(2, 2)),
    L.DepthwiseConv2D: lambda: chain((7, 7, 3), L.DepthwiseConv2D(3, depth_multiplier=2, strides=2, activation="relu")),
    L.SeparableConv2D: lambda: chain((7, 7, 3), L.SeparableConv2D(4, 3, depth_multiplier=2, padding="same")),
    L.DepthwiseConv1D: lambda: chain(S1, L.DepthwiseConv1D(3, depth_multiplier=2, strides=2, activation="relu")),
    L.SeparableConv1D: lambda: chain(S1, L.SeparableConv1D(4, 3, depth_multiplier=2, padding="same")),
    L.Conv1DTranspose: lambda: chain(S1, L.Conv1DTranspose(3, 3, strides=2, padding="same", activation="tanh")),
    L.Conv2DTranspose: lambda: chain((4, 4, 2), L.Conv2DTranspose(3, 3, strides=2, output_padding=1, activation="elu")),
    L.Conv3DTranspose: lambda: chain((3, 3, 3, 2), L.Conv3DTranspose(2, 2, strides=2, padding="same")),
    L.LayerNormalization: lambda: chain((3, 4), L.LayerNormalization(axis=[1, 2])),
    L.BatchNormalization: lambda: chain((4, 4, 3), L.BatchNormalization(), L.BatchNormalization(axis=1)),
    L.GroupNormalization: lambda: chain((4, 3, 6), L.GroupNormalization(3, gamma_initializer="random_normal"),
                                        L.GroupNormalization(2, axis=1, center=False)),
    L.Embedding: lambda: keras.Sequential([keras.Input((5,)), L.Embedding(10, 3), L.Flatten(), L.Dense(2)]),
    L.Flatten: lambda: chain((3, 4), L.Flatten()),
    L.Reshape: lambda: chain((3, 4), L.Reshape((2, 6)), L.Dense(2)),
    L.Activation: lambda: chain((5,), L.Dense(4), L.Activation("gelu")),
    L.ReLU: lambda: chain((5,), L.Dense(4), L.ReLU(max_value=0.5, negative_slope=0.1, threshold=0.05)),
    L.LeakyReLU: lambda: chain((5,), L.Dense(4), L.LeakyReLU(0.2)),
    L.ELU: lambda: chain((5,), L.Dense(4), L.ELU(0.7)),
    L.Softmax: lambda: chain((3, 4), L.Dense(4), L.Softmax(axis=1)),
    L.PReLU: lambda: chain((3, 4), L.Dense(4), L.PReLU(alpha_initializer="random_normal", shared_axes=[1])),
    L.Dropout: lambda: chain((5,), L.Dropout(0.5)),
    L.SpatialDropout1D: lambda: chain(S1, L.SpatialDropout1D(0.5)),
    L.SpatialDropout2D: lambda: chain(S2, L.SpatialDropout2D(0.5)),
    L.SpatialDropout3D: lambda: chain(S3, L.SpatialDropout3D(0.5)),
    L.GaussianNoise: lambda: chain((5,), L.GaussianNoise(1.0)),
    L.GaussianDropout: lambda: chain((5,), L.GaussianDropout(0.3)),
    L.AlphaDropout: lambda: chain((5,), L.AlphaDropout(0.3)),
    L.ActivityRegularization: lambda: chain((5,), L.ActivityRegularization(0.1, 0.1)),
    L.MaxPooling1D: lambda: chain(S1, L.MaxPooling1D(2), dense_first=True),
    L.MaxPooling2D: lambda: chain(S2, L.MaxPooling2D(3, strides=2, padding="same"), dense_first=True),
    L.MaxPooling3D: lambda: chain(S3, L.MaxPooling3D(2), dense_first=True),
    L.AveragePooling1D: lambda: chain(S1, L.AveragePooling1D(3, padding="same"), dense_first=True),
    L.AveragePooling2D: lambda: chain(S2, L.AveragePooling2D(2), dense_first=True),
    L.AveragePooling3D: lambda: chain(S3, L.AveragePooling3D(2), dense_first=True),
    L.GlobalMaxPooling1D: lambda: chain(S1, L.GlobalMaxPooling1D(), dense_first=True),
    L.GlobalMaxPooling2D: lambda: chain(S2, L.GlobalMaxPooling2D(keepdims=True), dense_first=True),
    L.GlobalMaxPooling3D: lambda: chain(S3, L.GlobalMaxPooling3D(), dense_first=True),
    L.GlobalAveragePooling1D: lambda: chain(S1, L.GlobalAveragePooling1D(), dense_first=True),
    L.GlobalAveragePooling2D: lambda: chain(S2, L.GlobalAveragePooling2D(), dense_first=True),
    L.GlobalAveragePooling3D: lambda: chain(S3, L.GlobalAveragePooling3D(), dense_first=True),
    L.AdaptiveMaxPooling1D: lambda: chain(S1, L.AdaptiveMaxPooling1D(3), dense_first=True),
    L.AdaptiveMaxPooling2D: lambda: chain(S2, L.AdaptiveMaxPooling2D(3), dense_first=True),
    L.AdaptiveMaxPooling3D: lambda: chain(S3, L.AdaptiveMaxPooling3D(2), dense_first=True),
    L.AdaptiveAveragePooling1D: lambda: chain(S1, L.AdaptiveAveragePooling1D(3), dense_first=True),
    L.AdaptiveAveragePooling2D: lambda: chain(S2, L.AdaptiveAveragePooling2D(3), dense_first=True),
    L.AdaptiveAveragePooling3D: lambda: chain(S3, L.AdaptiveAveragePooling3D(2), dense_first=True),
    L.Permute: lambda: chain((3, 4), L.Permute((2, 1)), L.Dense(2)),
    L.RepeatVector: lambda: chain((4,), L.Dense(3), L.RepeatVector(3), L.Dense(2)),
    L.Cropping1D: lambda: chain(S1, L.Cropping1D((1, 2)), dense_first=True),
    L.Cropping2D: lambda: chain(S2, L.Cropping2D(((1, 0), (2, 1))), dense_first=True),
    L.Cropping3D: lambda: chain(S3, L.Cropping3D(1), dense_first=True),
    L.ZeroPadding1D: lambda: chain(S1, L.ZeroPadding1D(2), dense_first=True),
    L.ZeroPadding2D: lambda: chain(S2, L.ZeroPadding2D(((1, 0), (0, 2))), dense_first=True),
    L.ZeroPadding3D: lambda: chain(S3, L.ZeroPadding3D(1), dense_first=True),
    L.UpSampling1D: lambda: chain(S1, L.UpSampling1D(2), dense_first=True),
    L.UpSampling2D: lambda: chain(S2, L.UpSampling2D(2, interpolation="bilinear"), dense_first=True),
    L.UpSampling3D: lambda: chain(S3, L.UpSampling3D(2), dense_first=True),
    L.UnitNormalization: lambda: chain(S1, L.UnitNormalization(), dense_first=True),
    L.Concatenate: lambda: merge(L.Concatenate()),
    L.Add: lambda: merge(L.Add()),
    L.Subtract: lambda: merge(L.Subtract()),
    L.Multiply: lambda: merge(L.Multiply()),
    L.Average: lambda: merge(L.Average()),
    L.Maximum: lambda: merge(L.Maximum()),
    L.Minimum: lambda: merge(L.Minimum()),
    L.Dot: lambda: merge(L.Dot(axes=1, normalize=True)),
    L.SimpleRNN: lambda: rnn(L.SimpleRNN),
    L.GRU: lambda: rnn(L.GRU),
    L.LSTM: lambda: rnn(L.LSTM),
    L.Rescaling: lambda: chain((4, 3), L.Rescaling([0.5, 2.0, -1.0], offset=0.25), L.Dense(4)),
    L.Normalization: lambda: _adapted_normalization((1, 2)),
    L.Identity: lambda: chain((5,), L.Identity()),
    L.Bidirectional: lambda: chain((3, 2), L.Bidirectional(L.LSTM(3, return_sequences=True))),
    L.TimeDistributed: lambda: chain((3, 4, 4, 2), L.TimeDistributed(keras.Sequential(
        [keras.Input((4, 4, 2)), L.Conv2D(3, 2, activation="relu"), L.Flatten(), L.Dense(4)]))),
    L.Attention: lambda: attend([(4, 3)], lambda q: L.Attention(use_scale=True)([q, L.Dense(3)(q)],
                                                                               use_causal_mask=True)),
    L.AdditiveAttention: lambda: attend([(4, 3), (5, 3)], lambda q, v: L.AdditiveAttention()([q, v])),
    L.MultiHeadAttention: lambda: attend([(4, 3), (6, 5)], lambda q, v: L.MultiHeadAttention(3, 2, value_dim=4)(
        q, v, use_causal_mask=True)),
}

SEQUENCE_VARIANTS = {  # the arguments of the sequence, wrapper and attention layers
    "lstm_go_backwards_state": lambda: attend([(5, 3)], lambda x: L.LSTM(4, go_backwards=True, return_sequences=True,
                                                                          return_state=True)(x)),
    "gru_simple_rnn_go_backwards": lambda: chain((5, 3), L.GRU(4, go_backwards=True, return_sequences=True),
                                                 L.SimpleRNN(3, go_backwards=True)),
    "bidirectional_merge_none_state_backward_layer": lambda: attend([(5, 3)], lambda x: L.Bidirectional(
        L.LSTM(3, return_state=True), merge_mode=None, backward_layer=L.LSTM(3, return_state=True,
                                                                             go_backwards=True))(x)),
    "bidirectional_sum_mul_ave": lambda: chain((5, 3), L.Bidirectional(L.GRU(4, return_sequences=True), merge_mode="sum"),
                                               L.Bidirectional(L.SimpleRNN(3, return_sequences=True), merge_mode="mul"),
                                               L.Bidirectional(L.GRU(2, reset_after=False), merge_mode="ave")),
    "time_distributed_dense_conv": lambda: chain((3, 6, 6, 2), L.TimeDistributed(L.Conv2D(3, 3, strides=2,
                                                                                          padding="same")),
                                                 L.TimeDistributed(L.Flatten()), L.TimeDistributed(L.Dense(4))),
    "attention_concat_key_scores": lambda: attend([(4, 3), (5, 3), (5, 2)], lambda q, v, k: L.Attention(
        use_scale=True, score_mode="concat")([q, v, L.Dense(3)(k)], return_attention_scores=True)),
    "additive_attention_no_scale_causal": lambda: attend([(4, 3), (5, 3)], lambda q, v: L.AdditiveAttention(
        use_scale=False)([q, v], use_causal_mask=True)),
    "mha_self_gate_window_scores": lambda: attend([(5, 3)], lambda x: L.MultiHeadAttention(
        2, 3, use_gate=True, sliding_window=2, dropout=0.3)(x, x, return_attention_scores=True)),
    "mha_key_output_shape_no_bias": lambda: attend([(4, 3), (6, 5), (6, 2)], lambda q, v, k: L.MultiHeadAttention(
        2, 3, output_shape=(2, 3), use_bias=False)(q, v, key=k)),
    "mha_rank4_attention_axes": lambda: attend([(3, 4, 2)], lambda x: L.Add()([
        L.MultiHeadAttention(2, 3)(x, x), L.MultiHeadAttention(2, 2, attention_axes=(2,))(x, x)])),
    "transformer_block_layernorm": lambda: attend([(5, 4)], lambda x: L.LayerNormalization()(L.Add()([
        x, L.TimeDistributed(L.Dense(4))(L.MultiHeadAttention(2, 4)(x, x, use_causal_mask=True))]))),
}


def _adapted_normalization(axis):
    """Statistics from ``adapt`` live in the layer's variables and in tensors Keras derives from them."""
    layer = L.Normalization(axis=axis)
    layer.adapt(np.random.default_rng(5).normal(3.0, 2.0, (64, 4, 3)).astype(np.float32))
    return chain((4, 3), layer, L.Dense(4))


EXTRA = {  # further configurations of the same translators
    "gru_reset_before": lambda: rnn(L.GRU, reset_after=False),
    "lstm_no_forget_bias": lambda: rnn(L.LSTM, unit_forget_bias=False, activation="relu"),
    "conv1d_same_strided": lambda: chain(S1, L.Conv1D(3, 3, strides=2, padding="same", use_bias=False)),
    "conv3d_valid": lambda: chain((5, 6, 4, 1), L.Conv3D(2, (3, 2, 2), strides=(1, 2, 1))),
    "separable_strided": lambda: chain((8, 8, 2), L.SeparableConv2D(3, 3, strides=2, activation="relu")),
    "depthwise_same_nobias": lambda: chain(S2, L.DepthwiseConv2D(3, padding="same", use_bias=False)),
    "batchnorm_no_center_scale": lambda: chain((5,), L.Dense(4), L.BatchNormalization(center=False, scale=False)),
    "dense_rank4": lambda: chain((2, 3, 4), L.Dense(5, activation="swish")),
    "normalization_adapted_last_axis": lambda: _adapted_normalization(-1),
    "normalization_given": lambda: chain((4, 3), L.Normalization(mean=[1.0, -2.0, 0.5], variance=[4.0, 0.25, 1.0])),
}


def test_every_translator_has_a_case():
    missing = sorted(c.__name__ for c in registry() if c not in CASES)
    assert not missing, f"translators without a test case: {missing}"
    assert "LSTM" in supported_layers() and "Concatenate" in supported_layers()


def _inputs(pm, seed):
    rng = np.random.default_rng(seed)
    shapes = pm.input_shapes
    xs = []
    for s in shapes:
        if any(type(l) is L.Embedding for l in pm.template.layers):
            xs.append(rng.integers(0, 10, size=(P, B, *s)).astype(np.float32))
        else:
            xs.append(rng.normal(size=(P, B, *s)).astype(np.float32))
    return xs


def _params(pm, seed=0):
    params = pm.init_params(P, seed)
    return params + tf.random.stateless_normal(params.shape, [seed, 3]) * 0.2  # distinct, non-trivial members


def _check_template(template, tmp_path=None):
    """Flat, split, indices and (``use_op=False``) pure-TensorFlow paths against each member's Keras model:
    reloaded from a ``.keras`` file with ``tmp_path``, else the template with the member's weights."""
    pm = nn.PopulationModel(template)
    params = _params(pm)
    xs = _inputs(pm, 1)
    x = xs[0] if len(xs) == 1 else xs
    y_flat = np.asarray(pm(params, x))
    y_split = np.asarray(pm(pm.unflatten(params), x))
    idx = tf.constant([2, 0], tf.int32)
    x_sub = [t[[2, 0]] for t in xs]
    y_idx = np.asarray(pm(params, x_sub[0] if len(xs) == 1 else x_sub, indices=idx))
    np.testing.assert_allclose(y_split, y_flat, atol=TOL, rtol=0)
    np.testing.assert_allclose(y_idx, y_flat[[2, 0]], atol=TOL, rtol=0)
    assert len({float(np.abs(y_flat[p]).sum()) for p in range(P)}) == P  # the members differ
    if tmp_path is None:
        y_tf = np.asarray(nn.PopulationModel(template, use_op=False)(params, x))
        np.testing.assert_allclose(y_tf, y_flat, atol=TOL, rtol=TOL)
        for p in range(P):
            template.set_weights(pm.template_weights(params[p]))
            ref = np.asarray(template([t[p] for t in xs] if len(xs) > 1 else xs[0][p]))
            np.testing.assert_allclose(y_flat[p], ref, atol=TOL, rtol=TOL)
        return
    for p in range(P):
        path = str(tmp_path / f"m{p}.keras")
        pm.to_keras(params[p]).save(path)
        loaded = keras.models.load_model(path)
        ref = np.asarray(loaded([t[p] for t in xs] if len(xs) > 1 else xs[0][p]))
        np.testing.assert_allclose(y_flat[p], ref, atol=TOL, rtol=0)
        np.testing.assert_array_equal(pm.from_keras(loaded).numpy(), params[p].numpy())


@pytest.mark.parametrize("cls", list(CASES), ids=lambda c: c.__name__)
def test_translator_agrees_with_keras(cls, tmp_path):
    _check_template(CASES[cls](), tmp_path)


# in the default run: the one variant no other default test covers (score_mode="concat", a key, the scores);
# go_backwards with states, the Bidirectional backward pass and cross-attention run in the registry cases
# and tests/nn/test_nn_recurrent_policy.py; the rest with -m slow and in benchmarks/audit_keras_zoo.py
_FAST_VARIANTS = ("attention_concat_key_scores",)


@pytest.mark.parametrize("name", [n if n in _FAST_VARIANTS else pytest.param(n, marks=pytest.mark.slow)
                                  for n in SEQUENCE_VARIANTS])
def test_sequence_layer_variants_agree_with_keras(name, tmp_path):
    _check_template(SEQUENCE_VARIANTS[name](), tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(EXTRA))
def test_translator_variants_agree_with_keras(name, tmp_path):
    _check_template(EXTRA[name](), tmp_path)


def _softmax_over_axis1(x):
    return keras.activations.softmax(x, axis=1)  # axis 1 of Keras's [batch, ...]: a sample axis


AXIS1_CASES = {
    "Dense": lambda: chain((3, 5), L.Dense(4, activation=_softmax_over_axis1)),
    "Activation": lambda: chain((3, 5), L.Dense(4), L.Activation(_softmax_over_axis1)),
    "layer_as_activation": lambda: chain((3, 5), L.Dense(4, activation=L.Softmax(axis=1))),
    "Conv1D": lambda: chain(S1, L.Conv1D(3, 2, activation=_softmax_over_axis1)),
    "Conv2D": lambda: chain((4, 4, 2), L.Conv2D(3, 2, activation=_softmax_over_axis1)),
    "Conv3D": lambda: chain(S3, L.Conv3D(2, 2, activation=_softmax_over_axis1)),
    "DepthwiseConv2D": lambda: chain((4, 4, 2), L.DepthwiseConv2D(2, activation=_softmax_over_axis1)),
    "SeparableConv2D": lambda: chain((4, 4, 2), L.SeparableConv2D(3, 2, activation=_softmax_over_axis1)),
    "LSTM": lambda: keras.Sequential([keras.Input((5, 3)), L.LSTM(4, activation=_softmax_over_axis1), L.Dense(2)]),
    "GRU": lambda: keras.Sequential([keras.Input((5, 3)), L.GRU(4, recurrent_activation=_softmax_over_axis1),
                                     L.Dense(2)]),
}


@pytest.mark.parametrize("name", list(AXIS1_CASES))
def test_user_activation_sees_keras_sample_axes(name):
    """A user activation (or a layer given as one) gets Keras's ``[batch, ...]`` view: axis 1 is a sample
    axis, not the members' batch axis of the population tensor ``[n, B, ...]``."""
    template = AXIS1_CASES[name]()
    pm = nn.PopulationModel(template)
    params = _params(pm)
    x = _inputs(pm, 1)[0]
    y = np.asarray(pm(params, x))
    idx = tf.constant([2, 0], tf.int32)
    np.testing.assert_allclose(np.asarray(pm(params, x[[2, 0]], indices=idx)), y[[2, 0]], atol=TOL, rtol=0)
    np.testing.assert_allclose(np.asarray(pm(pm.unflatten(params), x)), y, atol=TOL, rtol=0)
    for p in range(P):
        template.set_weights(pm.template_weights(params[p]))
        np.testing.assert_allclose(y[p], np.asarray(template(x[p])), atol=TOL, rtol=0)


LAYOUTS = {  # (default, fast) rank-5 samples and channels-first layouts
    # softmax over a [n, B, D, H, W, C] population tensor: TensorFlow's CPU kernel takes rank <= 5
    "conv3d_softmax": lambda: chain((4, 4, 4, 2), L.Conv3D(3, 2, activation="softmax")),
    "dense_rank5_softmax": lambda: chain((2, 2, 3, 2), L.Dense(3, activation="softmax")),
    "groupnorm_instance_and_layer": lambda: chain((5, 4), L.GroupNormalization(-1, scale=False),
                                                  L.GroupNormalization(1, beta_initializer="random_uniform")),
    # channels first: computed channels last between two transposes, the activation on Keras's layout
    # (softmax over the last axis: W, not the channels). The last axis never equals the filters here:
    # Keras's TensorFlow backend then adds a channels-first bias over the last axis (keras.ops.add's
    # bias_add shortcut picks NHWC), which is Keras's error, not the layer's formula.
    "conv1d_cf_causal": lambda: chain((3, 9), L.Conv1D(4, 3, padding="causal", activation="softmax",
                                                       data_format="channels_first")),
    "conv2d_cf_same_strided": lambda: chain((2, 7, 6), L.Conv2D(4, 3, strides=2, padding="same", activation="softmax",
                                                                data_format="channels_first")),
    "conv2d_cf_relu_valid": lambda: chain((2, 6, 7), L.Conv2D(3, 2, activation="relu", data_format="channels_first")),
    "conv3d_cf": lambda: chain((2, 4, 4, 5), L.Conv3D(3, 2, strides=2, activation="softmax",
                                                      data_format="channels_first")),
    "depthwise_cf": lambda: chain((3, 8, 9), L.DepthwiseConv2D(3, depth_multiplier=2, activation="softmax",
                                                               data_format="channels_first")),
    "separable_cf": lambda: chain((3, 8, 8), L.SeparableConv2D(5, 3, strides=2, padding="same", activation="softmax",
                                                               data_format="channels_first")),
}


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_translator_layouts_agree_with_keras(name, tmp_path):
    _check_template(LAYOUTS[name](), tmp_path)


def test_sequence_layer_initializers():
    """init_params samples what Keras initializes: MultiHeadAttention's EinsumDense kernels with their
    input/output fans (Glorot limit sqrt(6 / (fan_in + fan_out)), not a convolution's fans), Attention's
    scale at one, AdditiveAttention's [dim] scale Glorot-uniform, a Bidirectional LSTM's forget-gate biases
    at one in both directions."""
    inp = keras.Input((3, 16))
    x = L.MultiHeadAttention(4, 8, name="mha")(inp, inp)
    x = L.Attention(use_scale=True, name="att")([x, x])
    x = L.AdditiveAttention(name="add")([x, x])
    x = L.Bidirectional(L.LSTM(2), name="bi")(x)
    template = keras.Model(inp, x)
    pm = nn.PopulationModel(template)
    params = pm.init_params(64, seed=3)
    weights = dict(zip(pm.weight_names, pm.unflatten(params)))
    keras_w = {v.path: np.asarray(v) for v in template.weights}
    for name, limit in (("mha/query/kernel", (6 / (16 + 32)) ** 0.5), ("mha/attention_output/kernel", (6 / 48) ** 0.5),
                        ("add/scale", (3 / 16) ** 0.5)):
        w = np.asarray(weights[name])
        assert np.abs(w).max() <= limit and np.abs(w).max() > 0.97 * limit, name
        assert abs(w.std() / (limit / 3 ** 0.5) - 1) < 0.05, name
        assert np.abs(keras_w[name]).max() <= limit  # Keras's own draw obeys the same limit
    np.testing.assert_array_equal(np.asarray(weights["att/scale"]), 1.0)
    biases = [n for n in weights if n.startswith("bi/") and n.endswith("/bias")]
    assert len(biases) == 2  # forward and backward LSTM
    for name in biases:
        bias = np.asarray(weights[name])
        np.testing.assert_array_equal(bias[:, 2:4], 1.0)
        np.testing.assert_array_equal(bias[:, :2], 0.0)


def test_sequence_layer_refusals_name_layer_and_argument():
    q, v = keras.Input((4, 3)), keras.Input((6, 3))
    mask, qm, vm = keras.Input((4, 6), dtype="bool"), keras.Input((4,), dtype="bool"), keras.Input((6,), dtype="bool")
    refused = {
        "'m' .*attention_mask= is not supported": lambda: keras.Model([q, v, mask], L.MultiHeadAttention(
            2, 2, name="m")(q, v, attention_mask=mask)),
        "'m' .*mask= is not supported": lambda: keras.Model([q, v, qm, vm], L.Attention(name="m")(
            [q, v], mask=[qm, vm])),
        "'m' .*declares the attention scores as \\(2, 4, 4\\) but they are \\(2, 4, 6\\)": lambda: keras.Model(
            [q, v], L.MultiHeadAttention(2, 2, name="m")(q, v, return_attention_scores=True)[1]),
        "'m' .*wraps 'lam' \\(Lambda\\)": lambda: keras.Sequential([keras.Input((3, 2)), L.TimeDistributed(
            L.Lambda(lambda t: t * 2, name="lam"), name="m")]),
    }
    for message, build in refused.items():
        with pytest.raises(ConfigError, match=message):
            nn.PopulationModel(build())


CONV_FORMS = {  # dilated, grouped, transposed, 1-D depthwise/separable and strided+dilated convolutions, chained;
    # channels first where a layer says so (the last axis never equals the channels there, see LAYOUTS)
    "1d": lambda: chain((12, 4), L.Conv1D(4, 2, dilation_rate=2, padding="causal", activation="relu"),
                        L.Conv1D(6, 2, groups=2, strides=2, padding="same"),
                        L.SeparableConv1D(4, 2, dilation_rate=2, padding="same"),  # -> (6, 4)
                        L.Conv1DTranspose(5, 3, strides=3, output_padding=2, data_format="channels_first"),
                        L.DepthwiseConv1D(2, strides=2, dilation_rate=2, padding="same", activation="softmax",
                                          data_format="channels_first")),
    "2d": lambda: chain((7, 6, 4), L.Conv2D(4, 2, dilation_rate=2, padding="same", activation="relu"),
                        L.Conv2D(6, 2, groups=2, strides=2, padding="same"),
                        L.Conv2DTranspose(3, (4, 3), strides=(2, 3), padding="same", output_padding=1),  # (7, 8, 3)
                        L.Conv2DTranspose(4, 2, dilation_rate=2, padding="same", data_format="channels_first"),
                        L.SeparableConv2D(4, 2, strides=2, dilation_rate=2, padding="same",
                                          data_format="channels_first")),
    "3d": lambda: chain((4, 4, 4, 4), L.Conv3D(4, 2, dilation_rate=2, groups=2, padding="same"),
                        L.Conv3DTranspose(3, 2, strides=(1, 2, 1), data_format="channels_first")),
}


@pytest.mark.parametrize("name", list(CONV_FORMS))
def test_conv_forms_agree_with_keras(name):
    """Forms the plain convolution paths do not compute (dilation, groups, transposed, 1-D depthwise and
    separable, strides with dilation) against the template holding each member's weights, on the flat,
    split, indices and pure-TensorFlow paths."""
    _check_template(CONV_FORMS[name]())


def _open_time(layer):
    return keras.Sequential([keras.Input((None, 3)), layer, L.LSTM(2), L.Dense(2)])


@pytest.mark.parametrize("make, match", [
    # an output_padding whose output size TensorFlow's conv_transpose refuses: Keras builds the model, then
    # fails calling it
    (lambda: chain((4, 4, 2), L.Conv2DTranspose(3, 4, strides=2, padding="same", output_padding=0, name="up")),
     r"'up' \(Conv2DTranspose\).*output_padding=\(0, 0\).*accepted"),
    # an open time axis (a recurrent template) before a form that slices it
    (lambda: _open_time(L.Conv1D(4, 3, dilation_rate=2, name="dil")), r"'dil' \(Conv1D\): needs known spatial"),
    (lambda: _open_time(L.Conv1DTranspose(4, 3, name="up")), r"'up' \(Conv1DTranspose\): needs known spatial"),
    (lambda: _open_time(L.DepthwiseConv1D(3, name="dw")), r"'dw' \(DepthwiseConv1D\): needs known spatial"),
], ids=["output_padding", "dilated_open_time", "transpose_open_time", "depthwise_open_time"])
def test_conv_forms_refused_before_any_forward(make, match):
    """What the population cannot compute is a ConfigError naming the layer, the value and what is accepted."""
    with pytest.raises(ConfigError, match=match):
        nn.PopulationModel(make())


def test_new_conv_init_params_sample_their_initializers():
    """``init_params`` draws each weight of the transposed, 1-D depthwise and 1-D separable convolutions from
    the layer's own initializer, with the fans of the weight's shape: constants equal, random ones match
    100 draws of the Keras initializer in mean and spread."""
    layers = [L.Conv1DTranspose(8, 3, kernel_initializer="he_uniform", bias_initializer="random_normal"),
              L.DepthwiseConv1D(3, depth_multiplier=2, depthwise_initializer="glorot_normal", bias_initializer="ones"),
              L.SeparableConv1D(8, 3, depth_multiplier=2, pointwise_initializer="lecun_uniform")]
    pm = nn.PopulationModel(chain((12, 4), *layers))
    ours = dict(zip(pm.weight_names, pm.unflatten(pm.init_params(200, seed=1))))
    checked = 0
    for layer in layers:
        for v in layer.weights:
            init = getattr(layer, {"kernel": "depthwise_initializer" if isinstance(layer, L.DepthwiseConv1D)
                                   else "kernel_initializer"}.get(v.name, f"{v.name.split('_')[0]}_initializer"))
            w = np.asarray(ours[v.path])
            # (a Keras initializer without a seed draws the same values on every call: one seed per draw)
            cfg = init.get_config()
            ref = np.stack([np.asarray((type(init).from_config({**cfg, "seed": i}) if "seed" in cfg else init)(v.shape))
                            for i in range(100)])
            assert w.shape[1:] == ref.shape[1:], v.path
            checked += 1
            if np.all(ref == ref.flat[0]):  # a constant initializer
                np.testing.assert_array_equal(w, np.full(w.shape, ref.flat[0]), err_msg=v.path)
                continue
            assert abs(w.mean() - ref.mean()) < 0.1 * ref.std(), v.path
            np.testing.assert_allclose(w.std(), ref.std(), rtol=0.06, err_msg=v.path)
    assert checked == len(pm.weight_names) - 2  # every weight but the Dense head's
