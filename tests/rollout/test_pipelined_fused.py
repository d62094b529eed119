"""The pipelined evaluator's lean forward path: fused MLP kernel + inline executor.

Neither may change a result: fitness with the fused kernel equals the
layer-by-layer path, the inline (single-threaded executor) call equals the
ordinary function call, and K does not matter.
"""

import numpy as np
import pytest
import tensorflow as tf

pytest.importorskip("mujoco")

from tfevo.envs.mujoco import MujocoVectorEnv  # noqa: E402
from tfevo import kernels  # noqa: E402
from tfevo.nn.model import PopulationModel  # noqa: E402
from tfevo.nn.policy import Policy, mlp  # noqa: E402
from tfevo.rollout.pipelined import PipelinedEvaluator  # noqa: E402


@pytest.fixture(scope="module")
def setup():
    e = MujocoVectorEnv("HalfCheetah-v5", 1)
    template = mlp(e.observation_shape, e.action_spec.policy_output_size, hidden=(64, 64))
    spec = e.action_spec
    e.close()
    fused = Policy(PopulationModel(template), spec)
    layered_model = PopulationModel(template)
    layered_model._mlp_plan = None  # the layer-by-layer path, other kernels on
    layered = Policy(layered_model, spec)
    params = fused.init_params(12, seed=3)
    params = params + 0.3 * tf.random.stateless_normal(params.shape, [1, 2])
    return fused, layered, params


def _run(policy, params, K, inline, slots=8):
    ev = PipelinedEvaluator("HalfCheetah-v5", policy, num_envs=slots, num_subsets=K, max_steps=30, seed=5,
                            inline_forward=inline)
    try:
        fit = ev.evaluate(params).numpy()
        return fit, ev.forward_executor, ev.last_stats
    finally:
        ev.close()


@pytest.mark.skipif(not kernels.built("TfevoPopulationMlp"), reason="TfevoPopulationMlp not built")
def test_fused_inline_equals_layered_default(setup):
    fused, layered, params = setup
    assert fused.model.fused_mlp and not layered.model.fused_mlp
    ref, ex_ref, _ = _run(layered, params, K=1, inline=False)
    assert ex_ref == "default"
    got, ex, st = _run(fused, params, K=2, inline=True)
    assert ex == "inline"
    assert st["forward_rows"] == st["steps"] == 12 * 30
    # the slots stream 12 members through 8 simulators; episodes are chaotic
    # (HalfCheetah), so equality here means every action was bit-identical
    np.testing.assert_array_equal(got, ref)
    assert len(np.unique(ref)) == 12


def test_inline_executor_equals_ordinary_call(setup):
    _, layered, params = setup
    a, ex_a, _ = _run(layered, params, K=1, inline=True, slots=12)
    b, ex_b, _ = _run(layered, params, K=1, inline=False, slots=12)
    assert ex_a == "inline" and ex_b == "default"
    np.testing.assert_array_equal(a, b)
