"""In-place subset forward: TfevoIndexedDenseFlat / TfevoPopulationConv2DFlat read the active members'
weights straight from the flat population parameters [P, D] (no gather, no split)."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfevo import nn, ops
from tfevo.envs.base import ActionSpec
from tfevo.nn.layers import population_conv2d, population_dense

L = keras.layers


def _mods():
    d = ops.op_module("indexed_matmul", "tfevo_indexed_dense_flat")
    c = ops.op_module("pop_conv", "tfevo_population_conv2d_flat")
    return (d, c) if d is not None and c is not None else None


needs_ops = pytest.mark.skipif(_mods() is None, reason="custom ops not built (no compiler)")


@needs_ops
@pytest.mark.parametrize("b,k,m,relu,bias", [(1, 7744 // 8, 512, True, True), (1, 33, 18, False, True),
                                             (3, 100, 70, True, False), (6, 40, 300, False, True),
                                             (2, 2500, 17, True, True)])
def test_dense_flat_equals_split_op_and_reference(b, k, m, relu, bias):
    rng = np.random.default_rng(k + m)
    P, pre, post = 7, 13, 5  # weights sit at odd column offsets inside each row
    D = pre + k * m + m + post
    params = rng.normal(size=(P, D)).astype(np.float32)
    kern = params[:, pre:pre + k * m].reshape(P, k, m)
    bvec = params[:, pre + k * m:pre + k * m + m]
    idx = np.array([6, 0, 6, 3], np.int32)
    x = rng.normal(size=(4, b, k)).astype(np.float32)
    dense = _mods()[0].tfevo_indexed_dense_flat
    got = dense(x, params, idx, w_offset=pre, units=m, bias_offset=pre + k * m if bias else -1,
                activation="relu" if relu else "none").numpy()
    split = population_dense(x, tf.constant(kern), tf.constant(bvec) if bias else None, "relu" if relu else None,
                             idx).numpy()
    np.testing.assert_array_equal(got, split)  # same kernel code, same order: bit-identical
    ref = tf.matmul(x, tf.gather(kern, idx)).numpy() + (bvec[idx][:, None] if bias else 0)
    ref = np.maximum(ref, 0) if relu else ref
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * np.sqrt(k))
    with pytest.raises(tf.errors.InvalidArgumentError, match="outside params rows"):
        dense(x, params, idx, w_offset=D - k * m + 1, units=m)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"idx\[0\] = 7 is out of range"):
        dense(x, params, np.array([7, 0, 0, 0], np.int32), w_offset=pre, units=m)


@needs_ops
def test_conv_flat_bit_identical_to_conv_op():
    rng = np.random.default_rng(4)
    P, C, F, kh, kw = 5, 3, 20, 3, 4
    ks = kh * kw * C * F
    D = 9 + ks + F + 2
    params = rng.normal(size=(P, D)).astype(np.float32)
    kern = params[:, 9:9 + ks].reshape(P, kh, kw, C, F)
    bias = params[:, 9 + ks:9 + ks + F]
    x = rng.normal(size=(3, 2, 10, 9, C)).astype(np.float32)
    idx = np.array([4, 4, 1], np.int32)
    conv = _mods()[1].tfevo_population_conv2d_flat
    got = conv(x, params, idx, kernel_offset=9, kernel_size=[kh, kw], filters=F, bias_offset=9 + ks,
               strides=[2, 1], padding="SAME", activation="relu").numpy()
    want = population_conv2d(x, kern, bias, (2, 1), "same", "relu", idx).numpy()
    np.testing.assert_array_equal(got, want)
    ref = population_conv2d(x, kern, bias, (2, 1), "same", "relu", idx, method="im2col").numpy()
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    with pytest.raises(tf.errors.InvalidArgumentError, match="outside params rows"):
        conv(x, params, idx, kernel_offset=D - ks + 1, kernel_size=[kh, kw], filters=F, strides=[1, 1], padding="SAME")


@needs_ops
def test_model_and_policy_run_in_place():
    """Flat params + indices read in place; equals the split path and per-member Keras; prepare keeps params."""
    template = keras.Sequential([keras.Input((12, 12, 2)), L.Conv2D(4, 3, strides=2, activation="relu"),
                                 L.Conv2D(3, 2, padding="valid", activation="tanh", use_bias=False), L.Flatten(),
                                 L.Dense(8, activation="elu"), L.LayerNormalization(), L.Dense(3)])
    pm = nn.PopulationModel(template)
    assert pm.in_place_available()
    assert not nn.PopulationModel(template, conv_method="im2col").in_place_available()
    P = 6
    params = pm.init_params(P, seed=1)
    params = params + tf.random.stateless_normal(params.shape, [1, 2]) * 0.3
    x = tf.random.stateless_normal((4, 1, 12, 12, 2), [3, 3])
    idx = tf.constant([5, 1, 1, 0], tf.int32)
    f = tf.function(lambda p, x, i: pm.forward_graph(p, x, i), autograph=False)
    graph = {nd.op for nd in f.get_concrete_function(params, x, idx).graph.as_graph_def().node}
    assert {"TfevoIndexedDenseFlat", "TfevoPopulationConv2DFlat"} <= graph
    assert "GatherV2" in graph and "Split" not in graph and "SplitV" not in graph  # only LayerNorm gains gathered
    got = f(params, x, idx).numpy()
    split = pm(pm.unflatten(params), x, idx).numpy()
    np.testing.assert_allclose(got, split, rtol=1e-6, atol=1e-6)
    keras_out = np.stack([np.asarray(pm.to_keras(params[i])(x[j])) for j, i in enumerate(idx.numpy())])
    np.testing.assert_allclose(got, keras_out, rtol=1e-5, atol=1e-5)
    policy = nn.Policy(pm, ActionSpec(discrete=True, num_actions=3))
    prepared = policy.prepare(params)
    assert isinstance(prepared, tf.Tensor) and prepared.shape == params.shape
    np.testing.assert_array_equal(policy.forward(prepared, x, idx).numpy(), got.argmax(-1))
    ref_policy = nn.Policy(nn.PopulationModel(template, conv_method="im2col"), ActionSpec(discrete=True, num_actions=3))
    assert isinstance(ref_policy.prepare(params), list)
