"""Concurrent inference chains of conv policies (PopulationModel.inference_chains) and the evaluator's
executor choice: every member's outputs, and so every fitness, must not depend on the chain count."""

import sys
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfevo.envs.base import ActionSpec
from tfevo.nn.model import PopulationModel
from tfevo.nn.policy import Policy

sys.path.insert(0, str(Path(__file__).parents[1]))  # the shared helpers in tests/
from _nets import small_conv  # noqa: E402

L = keras.layers


def _model(chains):
    pm = PopulationModel(small_conv())
    pm.inference_chains = chains
    return pm


def test_concurrent_forward_only_for_conv_models():
    assert _model(4).concurrent_forward
    assert not _model(1).concurrent_forward
    mlp = PopulationModel(keras.Sequential([keras.Input((3,)), L.Dense(4), L.Dense(2)]))
    mlp.inference_chains = 4
    assert not mlp.concurrent_forward


@pytest.mark.parametrize("n", [1, 3, 7, 11])
def test_chains_give_identical_outputs(n):
    base = _model(1)
    if not base.in_place_available():
        pytest.skip("in-place C++ ops not built")
    P = 13
    params = base.init_params(P, seed=3)
    # Non-zero biases so a member mix-up (wrong index in a chain) changes the output.
    params = params + tf.random.stateless_normal(params.shape, [1, 2]) * 0.05
    rng = np.random.default_rng(n)
    idx = tf.constant(rng.choice(P, n, replace=False).astype(np.int32))
    x = tf.constant(rng.uniform(-1, 1, (n, 1, 20, 20, 3)).astype(np.float32))
    ref = base.forward_graph(params, x, idx).numpy()
    # Per-member check against the full-population forward of the same rows (no chains involved).
    full = base._run(base.unflatten(tf.gather(params, idx)), x, None).numpy()
    np.testing.assert_allclose(ref, full, rtol=1e-5, atol=1e-6)
    for chains in (2, 3, 4, 8):
        f = tf.function(lambda p, x_, i, m=_model(chains): m.forward_graph(p, x_, i), autograph=False)
        out = f(params, x, idx).numpy()
        assert out.shape == ref.shape
        np.testing.assert_array_equal(out, ref, err_msg=f"chains={chains}, n={n}")


def test_evaluator_fitness_independent_of_chains_and_uses_threaded_executor():
    from tfevo.rollout.pipelined import PipelinedEvaluator

    try:
        import ale_py  # noqa: F401
    except ImportError:  # pragma: no cover
        pytest.skip("ale-py not installed")
    from tfevo.nn.policy import nature_dqn

    spec = ActionSpec(discrete=True, num_actions=18)
    fits, execs = [], []
    params = None
    for chains in (1, 4):
        pm = PopulationModel(nature_dqn(18))
        pm.inference_chains = chains
        if params is None:
            params = pm.init_params(6, seed=1)
        ev = PipelinedEvaluator("ALE/Frostbite-v5", Policy(pm, spec), num_envs=4, num_subsets=1, max_steps=12,
                                seed=0)
        fits.append(ev.evaluate(params).numpy())
        execs.append(ev.forward_executor)
        assert ev.last_stats["steps"] == 6 * 12
        ev.close()
    np.testing.assert_array_equal(fits[0], fits[1])
    # one chain: the single-threaded inline executor when available; chains: the threaded one
    assert execs[1] == "default"
    assert execs[0] in ("inline", "default")


@pytest.mark.parametrize("chains", [1, 4])
def test_policy_uint8_frames_fused_into_first_conv_identical(chains):
    """Policy.forward_graph on uint8 frames (first Conv2D reads them with input_scale) == the model on
    preprocess(frames) (float cast and scale first), for a subset and for the whole population."""
    pm = _model(chains)
    if not pm.in_place_available():
        pytest.skip("in-place C++ ops not built")
    spec = ActionSpec(discrete=True, num_actions=5)
    pol = Policy(pm, spec)
    P = 9
    params = pm.init_params(P, seed=5) + tf.random.stateless_normal([P, pm.num_params], [3, 4]) * 0.05
    rng = np.random.default_rng(chains)
    obs = tf.constant(rng.integers(0, 256, (4, 1, 20, 20, 3)).astype(np.uint8))
    idx = tf.constant([8, 1, 4, 0], tf.int32)
    f = tf.function(lambda p, o, i: pm.forward_graph(p, o, i, input_scale=1.0 / 255.0), autograph=False)
    g = tf.function(lambda p, o, i: pm.forward_graph(p, pol.preprocess(o), i), autograph=False)
    np.testing.assert_array_equal(f(params, obs, idx).numpy(), g(params, obs, idx).numpy())
    h = tf.function(lambda p, o, i: pol.forward_graph(p, o, i), autograph=False)
    np.testing.assert_array_equal(h(params, obs, idx).numpy(),
                                  pol.actions_from_outputs(g(params, obs, idx)).numpy())
    full = tf.constant(rng.integers(0, 256, (P, 1, 20, 20, 3)).astype(np.uint8))
    np.testing.assert_array_equal(pm.forward_graph(params, full, None, input_scale=1.0 / 255.0).numpy(),
                                  pm.forward_graph(params, pol.preprocess(full), None).numpy())
    # split weights (no in-place path): the scale is applied before the layers
    ws = pm.unflatten(params)
    np.testing.assert_array_equal(pm.forward_graph(ws, obs, idx, input_scale=1.0 / 255.0).numpy(),
                                  pm.forward_graph(ws, pol.preprocess(obs), idx).numpy())
