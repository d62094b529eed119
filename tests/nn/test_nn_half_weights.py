"""float16 population weights (Policy(weight_dtype="float16")).

The in-place C++ ops read float16 params and convert each weight to float32
exactly, so every result must equal the float32 computation on the
float16-rounded parameters *bit for bit*; the other paths (split weights, the
pure-TF reference, XLA) cast the rounded values to float32 first.
"""

import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from tfevo import ops
from tfevo.core import ConfigError
from tfevo.envs.base import ActionSpec
from tfevo.nn.model import PopulationModel
from tfevo.nn.policy import Policy

sys.path.insert(0, str(Path(__file__).parents[1]))  # the shared helpers in tests/
from _nets import small_conv  # noqa: E402


def _ops():
    dense = ops.op_module("indexed_matmul", "tfevo_indexed_dense_flat")
    conv = ops.op_module("pop_conv", "tfevo_population_conv2d_flat")
    if dense is None or conv is None:
        pytest.skip("in-place C++ ops not built")
    return dense.tfevo_indexed_dense_flat, conv.tfevo_population_conv2d_flat


def _rounded(params):
    return tf.cast(tf.cast(params, tf.float16), tf.float32)


@pytest.mark.parametrize("b", [1, 3, 8])  # streaming path (b <= 4 rows) and the Eigen product path
@pytest.mark.parametrize("relu", [False, True])
def test_dense_flat_half_params_bit_identical_to_float32(b, relu):
    dense, _ = _ops()
    rng = np.random.default_rng(b)
    M, k, m = 7, 1100, 37  # k > 1024: several summation segments; m not a multiple of 8: scalar tail
    D = 3 + k * m + m
    p16 = tf.constant(rng.normal(size=(M, D)).astype(np.float16))
    p32 = tf.cast(p16, tf.float32)
    idx = tf.constant([6, 0, 3, 6, 2], tf.int32)
    x = tf.constant(rng.normal(size=(5, b, k)).astype(np.float32))
    kw = dict(w_offset=3, units=m, bias_offset=3 + k * m, activation="relu" if relu else "none")
    out16 = dense(x, p16, idx, **kw).numpy()
    out32 = dense(x, p32, idx, **kw).numpy()
    np.testing.assert_array_equal(out16, out32)
    ref = np.einsum("nbk,nkm->nbm", x.numpy().astype(np.float64),
                    p32.numpy()[idx.numpy(), 3:3 + k * m].reshape(5, k, m).astype(np.float64))
    ref = ref + p32.numpy()[idx.numpy(), 3 + k * m:][:, None, :]
    if relu:
        ref = np.maximum(ref, 0)
    np.testing.assert_allclose(out16, ref, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("u8", [False, True])
def test_conv_flat_half_params_bit_identical_to_float32(u8):
    _, conv = _ops()
    rng = np.random.default_rng(3)
    M, C, F = 5, 3, 6
    ks = 4 * 4 * C * F
    D = 2 + ks + F
    p16 = tf.constant((rng.normal(size=(M, D)) * 0.2).astype(np.float16))
    p32 = tf.cast(p16, tf.float32)
    idx = tf.constant([4, 1, 4], tf.int32)
    if u8:
        x = tf.constant(rng.integers(0, 256, (3, 2, 13, 13, C)).astype(np.uint8))
        extra = {"input_scale": 1.0 / 255.0}
    else:
        x = tf.constant(rng.normal(size=(3, 2, 13, 13, C)).astype(np.float32))
        extra = {}
    kw = dict(kernel_offset=2, kernel_size=[4, 4], filters=F, bias_offset=2 + ks, strides=[2, 2], padding="SAME",
              activation="relu", **extra)
    np.testing.assert_array_equal(conv(x, p16, idx, **kw).numpy(), conv(x, p32, idx, **kw).numpy())


def test_policy_half_weights_equal_float32_forward_of_rounded_params():
    pm = PopulationModel(small_conv(layer_norm=True))
    if not pm.in_place_available():
        pytest.skip("in-place C++ ops not built")
    spec = ActionSpec(discrete=True, num_actions=5)
    half, full = Policy(pm, spec, weight_dtype="float16"), Policy(pm, spec)
    P = 9
    params = pm.init_params(P, seed=5) + tf.random.stateless_normal([P, pm.num_params], [3, 4]) * 0.05
    prepared = half.prepare(params)
    assert prepared.dtype == tf.float16  # the in-place ops get the float16 [P, D] itself
    rng = np.random.default_rng(0)
    obs = tf.constant(rng.integers(0, 256, (4, 1, 20, 20, 3)).astype(np.uint8))
    idx = tf.constant([8, 1, 4, 0], tf.int32)
    out16 = pm.forward_graph(prepared, obs, idx, input_scale=1.0 / 255.0).numpy()
    out32 = pm.forward_graph(_rounded(params), obs, idx, input_scale=1.0 / 255.0).numpy()
    np.testing.assert_array_equal(out16, out32)
    # ... and the per-member Keras model with the rounded weights (the float32 network it stands for)
    for row, member in enumerate(idx.numpy()):
        keras_out = pm.to_keras(_rounded(params)[member])(tf.cast(obs[row], tf.float32) / 255.0).numpy()
        np.testing.assert_allclose(out16[row], keras_out, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(half.forward_graph(prepared, obs, idx).numpy(),
                                  full.forward_graph(full.prepare(_rounded(params)), obs, idx).numpy())
    # the rounding matters: float32 weights give other outputs
    assert not np.array_equal(out16, pm.forward_graph(params, obs, idx, input_scale=1.0 / 255.0).numpy())
    # paths without the in-place ops compute from the same values in float32
    split = pm.forward_graph(pm.unflatten(_rounded(params)), obs, idx, input_scale=1.0 / 255.0).numpy()
    np.testing.assert_allclose(out16, split, rtol=1e-5, atol=1e-5)
    xla = tf.function(lambda p, o, i: pm.forward_graph(p, tf.cast(o, tf.float32) / 255.0, i), jit_compile=True)
    np.testing.assert_allclose(out16, xla(prepared, obs, idx).numpy(), rtol=1e-5, atol=1e-5)


def test_half_weights_for_mlps_and_in_graph_rollouts_round_the_same_way():
    from tfevo.nn.policy import mlp
    from tfevo.rollout.ingraph import InGraphEvaluator

    pm = PopulationModel(mlp((4,), 2, hidden=(8,)))
    spec = ActionSpec(discrete=True, num_actions=2)
    params = pm.init_params(6, seed=2) * 3.0
    pol = Policy(pm, spec, weight_dtype="float16")
    # the fused MLP kernel reads float32: prepare hands it the rounded values
    prepared = pol.prepare(params)
    got = prepared if not isinstance(prepared, list) else tf.concat([tf.reshape(w, [6, -1]) for w in prepared], 1)
    assert got.dtype == tf.float32
    np.testing.assert_array_equal(got.numpy(), _rounded(params).numpy())
    ev16 = InGraphEvaluator("CartPole-v1", pol, episodes=2, seed=4, jit_compile=False)
    ev32 = InGraphEvaluator("CartPole-v1", Policy(pm, spec), episodes=2, seed=4, jit_compile=False)
    np.testing.assert_array_equal(ev16.evaluate(params).numpy(), ev32.evaluate(_rounded(params)).numpy())


def test_half_weights_bad_input():
    pm = PopulationModel(small_conv(layer_norm=True))
    spec = ActionSpec(discrete=True, num_actions=5)
    for bad in ("bfloat16", "half-ish", np.int8):
        with pytest.raises(ConfigError, match="weight_dtype"):
            Policy(pm, spec, weight_dtype=bad)
    assert Policy(pm, spec, weight_dtype=np.float16).weight_dtype == tf.float16
    pol = Policy(pm, spec, weight_dtype="float16")
    params = pm.init_params(2, seed=0).numpy()
    params[1, 7] = 1e5
    with pytest.raises(ValueError, match="float16's range"):
        pol.prepare(params)
    params[1, 7] = np.nan  # NaN (and inf) pass through: the member's fitness becomes NaN, handled as worst
    assert pol.prepare(params).shape == params.shape


def test_pipelined_atari_half_weights_equal_rounded_float32():
    try:
        import ale_py  # noqa: F401
    except ImportError:  # pragma: no cover
        pytest.skip("ale-py not installed")
    from tfevo.nn.policy import nature_dqn
    from tfevo.rollout.pipelined import PipelinedEvaluator

    spec = ActionSpec(discrete=True, num_actions=18)
    pm = PopulationModel(nature_dqn(18))
    params = pm.init_params(6, seed=1) + tf.random.stateless_normal([6, pm.num_params], [5, 6]) * 0.02
    fits = []
    for dtype, p in (("float16", params), ("float32", _rounded(params))):
        ev = PipelinedEvaluator("ALE/Frostbite-v5", Policy(pm, spec, weight_dtype=dtype), num_envs=4,
                                num_subsets=2, max_steps=20, seed=0)
        fits.append(ev.evaluate(p).numpy())
        ev.close()
    np.testing.assert_array_equal(fits[0], fits[1])


def test_to_half_op_bit_identical_to_tf_cast():
    from tfevo.nn.indexed import to_half, to_half_reference

    _ops()
    rng = np.random.default_rng(0)
    x = (rng.normal(size=(3, 70001)) * 1e3).astype(np.float32)  # not a multiple of 8 or of a work unit
    special = [np.nan, np.inf, -np.inf, 65504, 65519.99, 65520, -65520, 1e-8, -1e-8, 6e-5, 6.1e-5, 1e-7,
               5.96e-8, 2.98e-8, 2.99e-8, -0.0, 0.0, 1e30, -1e30, 3.0, 1.0009765625, 1.00048828125]
    x[1, :len(special)] = special
    (h, big), (h_ref, big_ref) = to_half(x, use_op=True), to_half_reference(x)
    nan = np.isnan(h_ref.numpy())
    np.testing.assert_array_equal(np.isnan(h.numpy()), nan)
    np.testing.assert_array_equal(h.numpy().view(np.uint16)[~nan], h_ref.numpy().view(np.uint16)[~nan])
    assert float(big) == float(big_ref) == np.float32(1e30)
    assert float(to_half(np.zeros((2, 0), np.float32), use_op=True)[1]) == 0.0


def test_direct_calls_compute_what_the_rollouts_compute():
    """Policy.forward / outputs on float32 [P, D] params round them as prepare() does for the
    rollouts (tfevo play and user calls act as in training), and differ from float32 weights."""
    from tfevo.nn.policy import mlp

    pm = PopulationModel(mlp((4,), 3, hidden=(16,)))
    spec = ActionSpec(discrete=True, num_actions=3)
    half, full = Policy(pm, spec, weight_dtype="float16"), Policy(pm, spec)
    params = pm.init_params(32, seed=1) * 3.0 + 1e-3
    obs = tf.constant(np.random.default_rng(0).normal(size=(32, 64, 4)).astype(np.float32))
    np.testing.assert_array_equal(half.outputs(params, obs).numpy(), full.outputs(_rounded(params), obs).numpy())
    np.testing.assert_array_equal(half.forward(params, obs).numpy(), full.forward(_rounded(params), obs).numpy())
    np.testing.assert_array_equal(half.forward(params, obs).numpy(), half.forward(half.prepare(params), obs).numpy())
    assert not np.array_equal(half.outputs(params, obs).numpy(), full.outputs(params, obs).numpy())
