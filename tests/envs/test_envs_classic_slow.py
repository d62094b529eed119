"""Long agreement runs vs Gymnasium over many seeds and random actions (slow)."""

import numpy as np
import pytest
import tensorflow as tf

gym = pytest.importorskip("gymnasium")

from tfevo.envs import make  # noqa: E402
from tfevo.envs.classic import CLASSIC_ENV_IDS  # noqa: E402


@pytest.mark.slow
@pytest.mark.parametrize("env_id", CLASSIC_ENV_IDS)
def test_many_seeds_random_actions_bit_identical_under_xla(env_id):
    """32 environments per task, uniformly random actions (continuous ones up to
    1.5x the bounds), whole episodes: XLA rollouts equal Gymnasium bit for bit."""
    n = 32
    rng = np.random.default_rng(123)
    envs = [gym.make(env_id) for _ in range(n)]
    T = envs[0].spec.max_episode_steps
    init = []
    for k, e in enumerate(envs):
        e.reset(seed=1000 + k)
        init.append(np.array(e.unwrapped.state))
    space = envs[0].action_space
    if hasattr(space, "n"):
        actions = rng.integers(0, space.n, size=(T, n)).astype(np.int32)
    else:
        actions = rng.uniform(1.5 * space.low[0], 1.5 * space.high[0], size=(T, n, 1)).astype(np.float32)
    env = make(env_id, n)
    state, _ = env.state_from_numpy(np.stack(init))

    @tf.function(jit_compile=True, autograph=False)
    def roll(state, acts):
        def body(carry, a):
            r = env.step(carry[0], a)
            return r.state, r.obs, r.reward, r.terminated | r.truncated

        init_ = (state, tf.zeros([n, *env.observation_shape]), tf.zeros([n]), tf.zeros([n], bool))
        return tf.scan(body, acts, initializer=init_)[1:]

    obs, rew, done = [x.numpy() for x in roll(state, tf.constant(actions))]
    for k, e in enumerate(envs):
        for t in range(T):
            a = actions[t, k] if actions.ndim == 3 else int(actions[t, k])
            o, r, te, tr, _ = e.step(a)
            np.testing.assert_array_equal(obs[t, k], o)
            assert rew[t, k] == np.float32(r) and done[t, k] == (te or tr)
            if te or tr:
                break
