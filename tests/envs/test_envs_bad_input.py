"""Environments and evaluators refuse bad input as Gymnasium does, before any rollout."""

import numpy as np
import pytest
import tensorflow as tf

from tfevo import envs, nn, rollout
from tfevo.core import ConfigError, ShapeError
from tfevo.envs.base import ActionSpec


@pytest.mark.parametrize("env_id", ["Swimmer-v5", "CartPole-v1"])
def test_unknown_option_is_a_config_error_listing_the_options(env_id):
    with pytest.raises(ConfigError, match=r"unknown option.*bogus.*max_episode_steps"):
        envs.make(env_id, 1, bogus=1)


@pytest.mark.parametrize("env_id, bad", [("CartPole-v1", 5), ("CartPole-v1", -1), ("CartPole-v1", 2),
                                         ("Acrobot-v1", 3), ("MountainCar-v0", -1)])
def test_discrete_classic_actions_out_of_range_raise(env_id, bad):
    gym = pytest.importorskip("gymnasium")
    genv = gym.make(env_id)
    genv.reset(seed=0)
    with pytest.raises((AssertionError, IndexError)):  # Gymnasium raises for the same action
        genv.step(bad)
    env = envs.make(env_id, 2)
    state, _ = env.reset(tf.constant([0, 1]))
    with pytest.raises(ShapeError, match=r"actions must be integers in \[0, \d\).*" + str(bad)):
        env.step(state, tf.constant([0, bad], tf.int32))
    if env_id != "CartPole-v1":  # the in-graph assertion is shared; one task's trace is enough
        return
    step = tf.function(lambda s, a: env.step(s, a).obs)
    with pytest.raises(tf.errors.InvalidArgumentError, match="actions must be integers"):
        step(state, tf.constant([bad, 0], tf.int32))
    step(state, tf.constant([0, 1], tf.int32))  # valid actions still step (same trace)


def test_atari_non_integer_action_raises():
    pytest.importorskip("ale_py")
    env = envs.make("ALE/Pong-v5", 2)
    try:
        env.reset(np.arange(2), seeds=np.arange(2))
        for bad in (np.array([3.7, 0.0]), np.array([3.0, 0.0])):  # Gymnasium's Discrete holds integers only
            with pytest.raises(ShapeError, match="integers"):
                env.send(bad, np.arange(2))
        env.send(np.array([3, 0], np.int64), np.arange(2))  # the env is still usable
        idx, obs, *_ = env.recv()
        assert obs.shape == (2, 84, 84, 4)
    finally:
        env.close()


def test_mujoco_refuses_complex_actions_and_steps_before_reset():
    pytest.importorskip("mujoco")
    env = envs.make("Swimmer-v5", 2)
    try:
        a = np.zeros((2, 2))
        with pytest.raises(RuntimeError, match="never reset"):
            env.send(a, np.arange(2))
        env.reset(np.array([0]))
        with pytest.raises(RuntimeError, match=r"slots \[1\] were never reset"):
            env.send(a, np.arange(2))
        with pytest.raises(ShapeError, match="real numbers"):
            env.send(np.zeros((1, 2), np.complex128), np.array([0]))
        env.send(a[:1], np.array([0]))
        idx, obs, *_ = env.recv()
        assert obs.shape == (1, 8)
    finally:
        env.close()


def _policy_for(obs_dim, num_actions=2):
    model = nn.PopulationModel(nn.mlp((obs_dim,), num_actions, hidden=(4,)))
    return nn.Policy(model, ActionSpec(discrete=True, num_actions=num_actions))


@pytest.mark.parametrize("kind", ["ingraph", "pipelined"])
def test_policy_for_the_wrong_observation_size_names_both_shapes(kind):
    policy = _policy_for(5)
    msg = r"CartPole-v1 gives observations of shape \(4,\), but the policy takes inputs of shape \(5,\)"
    with pytest.raises(ShapeError, match=msg):
        if kind == "ingraph":
            rollout.InGraphEvaluator(envs.make("CartPole-v1", 2), policy)
        else:
            rollout.PipelinedEvaluator("CartPole-v1", policy, num_envs=2, num_subsets=1)
