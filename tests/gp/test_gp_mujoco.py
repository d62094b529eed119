"""GP trees driving MuJoCo (Swimmer-v5) through the pipelined evaluator."""

import numpy as np
import pytest
import tensorflow as tf

from tfevo.core import ShapeError
from tfevo.gp import GeneticProgramming, GPConfig, GPPolicy, interpret
from tfevo.gp.generation import TerminalSet, generate
from tfevo.gp.trees import FunctionSet
from tfevo.rollout.pipelined import PipelinedEvaluator

pytest.importorskip("mujoco")

FUNCS = ("add", "sub", "mul")   # exact IEEE ops: the NumPy oracle matches bit for bit
OBS, ACT, STEPS = 8, 2, 50


def _trees(P, seed, max_len=24):
    return generate(seed=tf.constant([seed, 1], tf.int32), popsize=P, max_len=max_len,
                    functions=FunctionSet(FUNCS), terminals=TerminalSet(OBS, 0.3, (-1.0, 1.0)),
                    depth=(1, 3), num_outputs=ACT)


def _serial_returns(trees, seeds, squash):
    """One member at a time on a 1-slot env; actions from the NumPy tree interpreter."""
    from _serial_reference import serial_returns

    def act(i, obs, t):
        y = interpret(trees, obs.astype(np.float32), i, ACT).T       # [1, A]
        y = np.where(np.isfinite(y), y, np.float32(0)).astype(np.float32)
        if squash == "clip":
            a = np.clip(y, -1.0, 1.0)
        else:  # same tf.tanh kernel as the policy; affine part in float32
            t_ = tf.tanh(tf.constant(y)).numpy()
            a = np.float32(-1.0) + (t_ + np.float32(1.0)) * np.float32(0.5) * np.float32(2.0)
        return a.astype(np.float32)

    return serial_returns("Swimmer-v5", trees[0].shape[0], seeds, STEPS, act)


@pytest.mark.parametrize("squash,subsets,use_op", [("clip", 2, None), ("tanh", 1, None), ("clip", 2, False)])
def test_pipelined_matches_serial_oracle(squash, subsets, use_op):
    """Returns through the pipelined evaluator equal a one-member-at-a-time loop exactly."""
    P = 6
    tr = _trees(P, 3)
    pol = GPPolicy(num_outputs=ACT, low=-1.0, high=1.0, functions=FUNCS, squash=squash, use_op=use_op)
    with PipelinedEvaluator("Swimmer-v5", pol, num_envs=4, num_subsets=subsets, max_steps=STEPS,
                            seed=5) as ev:
        seeds = ev.episode_seeds(P)[:, 0]
        fit = ev.evaluate(GPPolicy.pack(tr)).numpy()
        assert ev.last_stats["steps"] == P * STEPS
    ref = _serial_returns(tr, seeds, squash)
    assert np.all(np.isfinite(fit))
    assert np.ptp(ref) > 0  # the trees really act differently
    np.testing.assert_array_equal(fit, ref.astype(np.float32))


def test_forward_with_indices_and_errors():
    """forward(params, obs, indices) equals the full forward's rows; bad shapes raise ShapeError."""
    tr = _trees(5, 7)
    packed = GPPolicy.pack(tr)
    pol = GPPolicy(num_outputs=ACT, functions=FUNCS, low=[-1.0, -0.5], high=[1.0, 0.5])
    obs = np.random.RandomState(0).randn(5, 1, OBS).astype(np.float32)
    full = pol.forward(packed, obs).numpy()
    idx = np.array([4, 1, 1], np.int32)
    sub = pol.forward(packed, obs[idx], idx).numpy()
    np.testing.assert_array_equal(sub, full[idx])
    assert np.all(np.abs(full[..., 1]) <= 0.5)
    with pytest.raises(ShapeError):
        pol.forward(packed, obs[:2], np.array([0, 1, 2], np.int32))
    with pytest.raises(ShapeError):
        pol.forward(packed, obs[:, 0])


def test_gp_ask_tell_on_swimmer_improves_and_is_reproducible():
    """3 generations of ask/tell on Swimmer (50 steps, common seeds) improve the best return."""
    def run():
        gp = GeneticProgramming(GPConfig(popsize=16, max_len=32, num_vars=OBS, num_outputs=ACT,
                                         functions=FUNCS, tournament_size=3, elite=2,
                                         init_depth=(1, 3)), seed=1)
        pol = GPPolicy(num_outputs=ACT, functions=FUNCS)
        best = []
        with PipelinedEvaluator("Swimmer-v5", pol, num_envs=8, num_subsets=2, max_steps=STEPS,
                                seed=0, common_seeds=True) as ev:
            for _ in range(3):
                tr = gp.ask()
                f = ev.evaluate(GPPolicy.pack(tr))
                assert np.all(np.isfinite(f.numpy()))
                gp.tell(tr, f)
                best.append(float(gp.best[1]))
        return best

    b1 = run()
    assert all(b >= a for a, b in zip(b1, b1[1:]))  # elitism: the best-so-far never drops
    assert b1[-1] > b1[0], b1                         # and it improves within 3 generations
    assert b1 == run()      # same seeds -> identical run
