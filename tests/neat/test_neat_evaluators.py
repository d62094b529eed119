"""NEAT populations through the package's evaluators: recurrent state carried by
InGraphEvaluator, and feed-forward/recurrent genomes on host simulators through
PipelinedEvaluator (against one-member-at-a-time reference loops)."""

import numpy as np
import pytest
import tensorflow as tf

from tfevo.core import SeedStream
from tfevo.envs import make
from tfevo.neat import NEAT, NEATConfig, NEATPolicy
from tfevo.neat import network as net
from tfevo.rollout import InGraphEvaluator


def _evolved_pop(cfg, gens=6, seed=3):
    """A population with varied structure (evolved on random fitness)."""
    algo = NEAT(cfg, seed=seed)
    rng = np.random.default_rng(seed)
    for _ in range(gens):
        pop = algo.ask()
        algo.tell(pop, rng.normal(size=cfg.pop_size).astype(np.float32))
    return algo.ask()


def _cfg(feed_forward, num_inputs=4, num_outputs=2, pop=12):
    return NEATConfig(num_inputs=num_inputs, num_outputs=num_outputs, pop_size=pop, max_nodes=14, max_conns=36,
                      feed_forward=feed_forward, node_add_prob=0.6, conn_add_prob=0.8, compatibility_threshold=1.5,
                      weight_max_value=3.0, weight_min_value=-3.0, activation_default="tanh",
                      activation_options=("tanh",))


def test_recurrent_policy_state_is_carried_by_ingraph_evaluator():
    """InGraphEvaluator with a recurrent NEATPolicy equals an explicit per-step loop that
    passes the node values along, and differs from running each step from zero state."""
    cfg = _cfg(False)
    env = make("CartPole-v1", 1)
    pol = NEATPolicy(cfg, env.action_spec)
    assert pol.state_shape == (cfg.max_nodes,)
    pop = _evolved_pop(cfg)
    flat = pol.flatten(pop)
    P, B, T = cfg.pop_size, 2, 60
    ev = InGraphEvaluator(env, pol, episodes=B, max_steps=T, seed=7, jit_compile=False)
    got = ev.evaluate(flat).numpy()

    def loop(carry_state):
        seed = SeedStream(7).next()
        state_env, obs = env.reset(seed, num_envs=P * B)
        network = pol.prepare(flat)
        h = tf.zeros([P, B, cfg.max_nodes])
        done = np.zeros(P * B, bool)
        ret = np.zeros(P * B)
        for _ in range(T):
            o = tf.reshape(tf.cast(obs, tf.float32), [P, B, -1])
            a, h_new = pol.forward_state(network, o, h if carry_state else tf.zeros_like(h))
            h = h_new
            res = env.step(state_env, tf.reshape(a, [-1]))
            ret += np.where(done, 0.0, res.reward.numpy())
            done |= res.terminated.numpy() | res.truncated.numpy()
            state_env, obs = res.state, res.obs
            if done.all():
                break
        return ret.reshape(P, B).mean(1)

    np.testing.assert_allclose(got, loop(True).astype(np.float32), rtol=1e-6)
    assert not np.allclose(got, loop(False)), "state made no difference: the test would not catch a stateless rollout"


def test_recurrent_control_problem_is_reproducible():
    from tfevo.neat.policy import ControlProblem

    cfg = _cfg(False, pop=10)
    pop = _evolved_pop(cfg, gens=3)
    a = ControlProblem("CartPole-v1", cfg, episodes=2, seed=4)(pop).numpy()
    b = ControlProblem("CartPole-v1", cfg, episodes=2, seed=4)(pop).numpy()
    np.testing.assert_array_equal(a, b)
    assert a.shape == (10,) and np.all(a >= 1)


def test_forward_with_indices_equals_full_rows():
    cfg = _cfg(True)
    env = make("CartPole-v1", 1)
    pol = NEATPolicy(cfg, env.action_spec)
    pop = _evolved_pop(cfg)
    flat = pol.flatten(pop)
    obs = np.random.default_rng(0).normal(size=(cfg.pop_size, 1, 4)).astype(np.float32)
    full = pol.forward(flat, obs).numpy()
    idx = np.array([5, 0, 11, 5], np.int32)
    np.testing.assert_array_equal(pol.forward(flat, obs[idx], idx).numpy(), full[idx])
    # recurrent: forward_state on a subset equals the full population's rows
    rpol = NEATPolicy(_cfg(False), env.action_spec)
    rnet = rpol.prepare(flat)
    sub = np.array([5, 0, 11], np.int32)
    h_full = tf.random.normal([cfg.pop_size, 1, cfg.max_nodes], seed=1)
    a_all, h_all = rpol.forward_state(rnet, obs, h_full)
    a_sub, h_sub = rpol.forward_state(rnet, obs[sub], tf.gather(h_full, sub), sub)
    np.testing.assert_array_equal(a_sub.numpy(), a_all.numpy()[sub])
    np.testing.assert_allclose(h_sub.numpy(), h_all.numpy()[sub], rtol=1e-6, atol=1e-7)


def _swimmer_serial(pol, flat, seeds, steps, recurrent):
    """One member at a time on a 1-slot Swimmer env, state passed along explicitly."""
    from _serial_reference import serial_returns

    network = pol.prepare(flat)
    h = {}

    def act(i, obs, t):
        o = tf.constant(obs[:, None].astype(np.float32))
        if recurrent:
            a, h[i] = pol.forward_state(network, o, h[i] if t else tf.zeros([1, 1, pol.config.max_nodes]),
                                        tf.constant([i]))
        else:
            a = pol.forward_graph(network, o, tf.constant([i]))
        return np.clip(tf.reshape(a, [1, -1]).numpy(), -1.0, 1.0).astype(np.float32)

    return serial_returns("Swimmer-v5", int(flat.shape[0]), seeds, steps, act)


@pytest.mark.parametrize("feed_forward,subsets", [(True, 2), (False, 2), (False, 1)])
def test_pipelined_mujoco_matches_serial_reference(feed_forward, subsets):
    pytest.importorskip("mujoco")
    from tfevo.rollout import PipelinedEvaluator

    cfg = _cfg(feed_forward, num_inputs=8, num_outputs=2, pop=7)
    env = make("Swimmer-v5", num_envs=1)
    pol = NEATPolicy(cfg, env.action_spec)
    env.close()
    flat = pol.flatten(_evolved_pop(cfg, gens=4))
    steps = 30
    with PipelinedEvaluator("Swimmer-v5", pol, num_envs=4, num_subsets=subsets, max_steps=steps, seed=3) as ev:
        seeds = ev.episode_seeds(cfg.pop_size)[:, 0]
        fit = ev.evaluate(flat).numpy()
        assert ev.last_stats["steps"] == cfg.pop_size * steps
    ref = _swimmer_serial(pol, flat, seeds, steps, not feed_forward)
    assert np.ptp(ref) > 0
    np.testing.assert_allclose(fit, ref.astype(np.float32), rtol=1e-4, atol=1e-5)


def test_sharded_rollout_rejects_recurrent_policy():
    """The distributed in-graph rollout does not carry policy state: it says so instead of
    silently running a recurrent network from zero state at every step."""
    from tfevo.core import ConfigError
    from tfevo.distribute import ShardedRollout

    env = make("CartPole-v1", 1)
    with pytest.raises(ConfigError, match="recurrent"):
        ShardedRollout(env, NEATPolicy(_cfg(False), env.action_spec))
    ShardedRollout(env, NEATPolicy(_cfg(True), env.action_spec))  # feed-forward is fine
