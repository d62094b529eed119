"""GymVectorEnv: Gymnasium fallback under the HostVectorEnv contract."""

import numpy as np
import pytest

from tfevo.core import ConfigError, ShapeError
from tfevo.envs.gym import GymVectorEnv


def _episode(env, slot, seed, actions):
    """Runs one episode in ``slot`` with a fixed action sequence; returns (obs list, rewards, done step)."""
    obs = [env.reset([slot], [seed])[0]]
    rews = []
    for t, a in enumerate(actions):
        env.send(np.array([a]), np.array([slot]))
        idx, o, r, te, tr = env.recv()
        assert idx.tolist() == [slot]
        obs.append(o[0])
        rews.append(r[0])
        if te[0] or tr[0]:
            return np.stack(obs), np.array(rews), t
    return np.stack(obs), np.array(rews), None


def test_shapes_and_specs():
    env = GymVectorEnv("CartPole-v1", num_envs=3)
    assert env.observation_shape == (4,)
    assert env.action_spec.discrete and env.action_spec.num_actions == 2
    obs = env.reset(np.arange(3), np.arange(3))
    assert obs.shape == (3, 4) and obs.dtype == np.float32
    env.send(np.array([1, 0]), np.array([2, 0]))
    idx, obs, rew, term, trunc = env.recv()
    assert idx.tolist() == [2, 0]
    assert obs.shape == (2, 4) and rew.dtype == np.float32 and term.dtype == bool and trunc.dtype == bool
    np.testing.assert_array_equal(rew, [1.0, 1.0])
    env.close()

    cont = GymVectorEnv("Pendulum-v1", num_envs=2)
    assert not cont.action_spec.discrete and cont.action_spec.shape == (1,)
    cont.reset([0, 1], [0, 1])
    cont.send(np.zeros((1, 1), np.float32), [1])
    assert cont.recv()[1].shape == (1, 3)
    cont.close()


def test_slot_reset_is_reproducible_and_independent_of_other_slots():
    env = GymVectorEnv("CartPole-v1", num_envs=3)
    env.reset(np.arange(3), [5, 6, 7])
    rng = np.random.default_rng(0)
    actions = rng.integers(0, 2, 300)
    o1, r1, d1 = _episode(env, 0, 42, actions)
    # step other slots in between: slot 2's episode with the same seed must match
    env.send(np.array([1]), np.array([1]))
    env.recv()
    o2, r2, d2 = _episode(env, 2, 42, actions)
    np.testing.assert_array_equal(o1, o2)
    np.testing.assert_array_equal(r1, r2)
    assert d1 == d2 and d1 is not None  # random actions end CartPole well before 300 steps
    o3, _, _ = _episode(env, 1, 43, actions)
    assert not np.array_equal(o1[0], o3[0])
    env.close()


def test_async_matches_sync():
    actions = np.random.default_rng(1).integers(0, 2, 60)
    s = GymVectorEnv("CartPole-v1", num_envs=2)
    a = GymVectorEnv("CartPole-v1", num_envs=2, asynchronous=True)
    try:
        for env in (s, a):
            env.reset([0, 1], [0, 1])
        rs = _episode(s, 1, 11, actions)
        ra = _episode(a, 1, 11, actions)
        np.testing.assert_array_equal(rs[0], ra[0])
        assert rs[2] == ra[2]
    finally:
        s.close()
        a.close()


def test_errors():
    with pytest.raises(ConfigError, match="gymnasium.registry"):
        GymVectorEnv("NoSuchEnv-v0", num_envs=1)
    env = GymVectorEnv("CartPole-v1", num_envs=2)
    env.reset([0, 1])
    with pytest.raises(ShapeError, match="slot indices"):
        env.send(np.array([0]), np.array([5]))
    with pytest.raises(ShapeError, match="one action per slot"):
        env.send(np.array([0, 1, 1]), np.array([0, 1]))
    with pytest.raises(RuntimeError, match="without a pending send"):
        env.recv()
    env.close()


def test_make_routes_gym_only_ids_here():
    from tfevo import envs

    known = envs.list_envs()
    ids = [e for e in ("CartPole-v1", "Acrobot-v1", "MountainCar-v0", "Pendulum-v1") if e not in known]
    if not ids:
        pytest.skip("every candidate id has an in-graph tfevo version")
    env = envs.make(ids[0], num_envs=2)
    assert isinstance(env, GymVectorEnv) and env.num_envs == 2
    env.close()
