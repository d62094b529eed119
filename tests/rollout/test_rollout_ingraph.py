"""InGraphEvaluator: exact returns vs Gymnasium, seeds, CRN, traces, checkpoints."""

import numpy as np
import pytest
import tensorflow as tf

gym = pytest.importorskip("gymnasium")

from tfevo.core import ConfigError, ShapeError  # noqa: E402
from tfevo.envs import make  # noqa: E402
from tfevo.rollout.ingraph import InGraphEvaluator  # noqa: E402


class SignPolicy:
    """CartPole controller family: push right iff w0*angle + w1*angular_velocity > 0.

    params ``[P, 2]``; element-wise float32 arithmetic, so NumPy computes the
    very same actions from the same observations.
    """

    num_params = 2

    def forward(self, params, obs):
        w = params[:, None, :]  # [P, 1, 2]
        score = w[..., 0] * obs[..., 2] + w[..., 1] * obs[..., 3]
        return tf.cast(score > 0, tf.int32)

    @staticmethod
    def numpy_action(w, obs):
        w = np.asarray(w, np.float32)
        return int(w[0] * obs[2] + w[1] * obs[3] > 0)


class TorquePolicy:
    """Pendulum: torque = k * angular_velocity (float32 [P, B, 1])."""

    num_params = 1

    def forward(self, params, obs):
        return params[:, None, :] * obs[..., 2:3]

    @staticmethod
    def numpy_action(w, obs):
        return np.array([np.float32(w[0]) * obs[2]], np.float32)


class LinearPolicy:
    """Generic linear policy ``obs @ W + b`` (argmax or raw) for the ES test."""

    def __init__(self, obs_dim, out, discrete):
        self.obs_dim, self.out, self.discrete = obs_dim, out, discrete
        self.num_params = obs_dim * out + out

    def forward(self, params, obs):
        p = params.shape[0]
        w = tf.reshape(params[:, : self.obs_dim * self.out], [p, self.obs_dim, self.out])
        b = params[:, None, self.obs_dim * self.out :]
        y = tf.matmul(obs, w) + b
        return tf.argmax(y, -1, output_type=tf.int32) if self.discrete else y


def _gym_returns(env_id, physics, policy_cls, params, episodes, max_episode_steps=None):
    """Returns/lengths of stepping Gymnasium (``gym.make(env_id, max_episode_steps=...)``) from the
    given start states."""
    p = params.shape[0]
    returns = np.zeros((p, episodes))
    lengths = np.zeros((p, episodes), int)
    env = gym.make(env_id, max_episode_steps=max_episode_steps)
    for i in range(p):
        for b in range(episodes):
            env.reset(seed=0)
            env.unwrapped.state = physics[i * episodes + b].copy()
            obs = np.array(env.unwrapped.state, np.float32) if env_id == "CartPole-v1" else env.unwrapped._get_obs()
            total = np.float64(0.0)
            while True:
                obs, r, term, trunc, _ = env.step(policy_cls.numpy_action(params[i], obs))
                total += np.float64(np.float32(r))  # the env returns float32 rewards
                lengths[i, b] += 1
                if term or trunc:
                    break
            returns[i, b] = total
    return returns, lengths


def _start_states(env_id, seed, n, counter=1):
    return make(env_id).reset(tf.constant([seed, counter]), num_envs=n)[0].physics.numpy()


def test_cartpole_returns_equal_gymnasium_exactly():
    params = np.array(
        [[1.0, 0.5], [1.0, 0.0], [0.0, 0.0], [-1.0, 0.3], [0.3, 1.0], [2.0, 0.2]], np.float32
    )
    ev = InGraphEvaluator("CartPole-v1", SignPolicy(), episodes=2, seed=11, jit_compile=False)
    res = ev.evaluate_episodes(params)
    physics = _start_states("CartPole-v1", 11, 6 * 2)
    ref_ret, ref_len = _gym_returns("CartPole-v1", physics, SignPolicy, params, 2)
    np.testing.assert_array_equal(res.lengths.numpy(), ref_len)
    np.testing.assert_array_equal(res.returns.numpy(), ref_ret.astype(np.float32))
    np.testing.assert_array_equal(res.fitness.numpy(), ref_ret.mean(1).astype(np.float32))
    assert ref_len.max() == 500 and ref_len.min() < 50  # balancing and falling members
    assert ev.last_frames == ref_len.sum() == int(ev.total_frames.numpy()) == ev.last_stats["frames"]
    assert ev.last_stats["steps"] == 500 and ev.last_stats["episodes"] == 12
    # the XLA-compiled rollout gives the very same episodes
    evx = InGraphEvaluator("CartPole-v1", SignPolicy(), episodes=2, seed=11, jit_compile=True)
    resx = evx.evaluate_episodes(params)
    np.testing.assert_array_equal(resx.lengths.numpy(), ref_len)
    np.testing.assert_array_equal(resx.returns.numpy(), res.returns.numpy())


def test_pendulum_returns_match_gymnasium_and_final_obs():
    params = np.array([[-1.0], [0.0], [2.5], [-0.3]], np.float32)
    ev = InGraphEvaluator("Pendulum-v1", TorquePolicy(), episodes=3, seed=5, jit_compile=False)
    res = ev.evaluate_episodes(params)
    physics = _start_states("Pendulum-v1", 5, 12)
    ref_ret, ref_len = _gym_returns("Pendulum-v1", physics, TorquePolicy, params, 3)
    np.testing.assert_array_equal(res.lengths.numpy(), ref_len)
    assert np.all(ref_len == 200)
    np.testing.assert_allclose(res.returns.numpy(), ref_ret, rtol=1e-6)
    assert res.final_obs.shape == (4, 3, 3)
    assert ev.last_frames == 4 * 3 * 200


@pytest.mark.parametrize("env_id,policy_cls,params,limit", [
    ("CartPole-v1", SignPolicy, [[1.0, 0.5], [0.0, 0.0], [0.3, 1.0]], 600),
    ("CartPole-v1", SignPolicy, [[1.0, 0.5], [0.0, 0.0]], 300),
    ("Pendulum-v1", TorquePolicy, [[-1.0], [2.5]], 300),
    ("Pendulum-v1", TorquePolicy, [[-1.0]], 150),
])
def test_max_steps_replaces_the_registered_limit_like_gym_make(env_id, policy_cls, params, limit):
    # max_steps=N gives the episodes of gym.make(id, max_episode_steps=N), below and above the
    # registered limit (500 / 200): same lengths, same returns
    params = np.array(params, np.float32)
    env = make(env_id)
    default = env.max_episode_steps
    for ev_env in (env_id, env):
        ev = InGraphEvaluator(ev_env, policy_cls(), episodes=2, max_steps=limit, seed=4, jit_compile=False)
        assert ev.max_steps == limit and ev.env.max_episode_steps == limit
        res = ev.evaluate_episodes(params)
        physics = _start_states(env_id, 4, params.shape[0] * 2)
        ref_ret, ref_len = _gym_returns(env_id, physics, policy_cls, params, 2, max_episode_steps=limit)
        np.testing.assert_array_equal(res.lengths.numpy(), ref_len)
        assert ref_len.max() == limit
        np.testing.assert_allclose(res.returns.numpy(), ref_ret, rtol=1e-6)
    assert env.max_episode_steps == default  # the caller's env is not changed


def test_max_steps_sets_the_truncated_flag_at_the_limit():
    ev = InGraphEvaluator("Pendulum-v1", TorquePolicy(), max_steps=260, jit_compile=False)
    state, _ = ev.env.reset(tf.constant([0, 1]), num_envs=1)
    flags = []
    for _ in range(260):
        res = ev.env.step(state, tf.zeros([1, 1]))
        state = res.state
        flags.append(bool(res.truncated.numpy()[0]))
    assert flags == [False] * 259 + [True]  # Gymnasium's TimeLimit(260): truncated at step 260, not 200


def test_explicit_env_limit_is_kept_and_a_longer_max_steps_refused():
    env = make("CartPole-v1", max_episode_steps=300)
    with pytest.raises(ConfigError, match=r"max_steps=600 cannot be honoured.*max_episode_steps=300"):
        InGraphEvaluator(env, SignPolicy(), max_steps=600)
    ev = InGraphEvaluator(env, SignPolicy(), max_steps=200, jit_compile=False)
    assert ev.evaluate_episodes(np.array([[1.0, 0.5]], np.float32)).lengths.numpy().max() == 200
    assert InGraphEvaluator(env, SignPolicy()).max_steps == 300
    # an env without a limit: max_steps=None is refused, an explicit cap runs to it
    free = make("CartPole-v1", max_episode_steps=0)
    with pytest.raises(ConfigError, match=r"max_steps=None.*has none.*pass max_steps"):
        InGraphEvaluator(free, SignPolicy())
    ev = InGraphEvaluator(free, SignPolicy(), max_steps=620, jit_compile=False)
    assert ev.evaluate_episodes(np.array([[1.0, 0.5]], np.float32)).lengths.numpy().max() == 620
    for bad in (0, -3, 2.5, "600", True):
        with pytest.raises(ConfigError, match="max_steps"):
            InGraphEvaluator("CartPole-v1", SignPolicy(), max_steps=bad)


def test_done_masks_stop_accumulating_and_loop_stops_early():
    # constant "push right" falls within ~10 steps: rewards after the end are not counted
    ev = InGraphEvaluator("CartPole-v1", SignPolicy(), episodes=4, seed=0, jit_compile=False)
    res = ev.evaluate_episodes(np.zeros([3, 2], np.float32))  # score 0 -> action 0 always
    lengths = res.lengths.numpy()
    assert lengths.max() < 30
    np.testing.assert_array_equal(res.returns.numpy(), lengths.astype(np.float32))
    # max_steps caps episodes (counted as truncation)
    ev2 = InGraphEvaluator("CartPole-v1", SignPolicy(), episodes=2, max_steps=37, seed=0, jit_compile=False)
    res2 = ev2.evaluate_episodes(np.array([[1.0, 0.5]] * 2, np.float32))
    assert res2.lengths.numpy().max() == 37 and ev2.last_frames == int(res2.lengths.numpy().sum())


def test_seeds_reproducible_crn_traces_and_checkpoint(tmp_path):
    params = tf.constant(np.random.default_rng(0).normal(size=(8, 2)), tf.float32)
    a = InGraphEvaluator("CartPole-v1", SignPolicy(), episodes=3, seed=3, jit_compile=False)
    b = InGraphEvaluator("CartPole-v1", SignPolicy(), episodes=3, seed=3, jit_compile=False)
    r1 = a.evaluate_episodes(params).returns.numpy()
    np.testing.assert_array_equal(r1, b.evaluate_episodes(params).returns.numpy())
    ckpt = tf.train.Checkpoint(evaluator=a)
    path = ckpt.save(str(tmp_path / "ev"))
    r2 = a.evaluate_episodes(params).returns.numpy()
    assert not np.array_equal(r1, r2)  # next call: new start states
    r3 = a.evaluate_episodes(params).returns.numpy()
    ckpt.restore(path)
    np.testing.assert_array_equal(a.evaluate_episodes(params).returns.numpy(), r2)
    np.testing.assert_array_equal(a.evaluate_episodes(params).returns.numpy(), r3)
    assert a.traces == {"rollout": 1}  # fixed P: traced once
    a.evaluate(params[:4])
    assert a.traces == {"rollout": 2}  # a new population size traces again
    # common random numbers: identical members face identical episodes
    same = tf.tile(params[:1], [6, 1])
    crn = InGraphEvaluator("CartPole-v1", SignPolicy(), episodes=3, seed=1, common_random_numbers=True,
                           jit_compile=False)
    rc = crn.evaluate_episodes(same).returns.numpy()
    assert np.all(rc == rc[:1]) and len(set(rc[0])) > 1
    no = InGraphEvaluator("CartPole-v1", SignPolicy(), episodes=3, seed=1, jit_compile=False)
    assert not np.all(no.evaluate_episodes(same).returns.numpy() == rc[:1])
    # CRN start states are the B states of reset(seed) shared by all members
    phys = _start_states("CartPole-v1", 1, 3)
    ref, _ = _gym_returns("CartPole-v1", np.tile(phys, (1, 1)), SignPolicy, same.numpy()[:1], 3)
    np.testing.assert_array_equal(rc[0], ref[0].astype(np.float32))


def test_descriptors_for_quality_diversity():
    params = np.array([[1.0, 0.5], [0.0, 0.0], [-1.0, 0.3]], np.float32)
    ev = InGraphEvaluator("CartPole-v1", SignPolicy(), episodes=2, seed=4, descriptor_fn="final_obs",
                          jit_compile=False)
    fitness, desc = ev.evaluate(params)
    res = ev.evaluate_episodes(params)  # next seed: other episodes, same shapes
    assert fitness.shape == (3,) and desc.shape == (3, 4)
    np.testing.assert_allclose(res.descriptors.numpy(), res.final_obs.numpy().mean(1), rtol=1e-6)
    # the final observation of a fallen pole is beyond the +-12 degree limit
    fallen = res.lengths.numpy() < 500
    fo = res.final_obs.numpy()[fallen]
    assert fallen.any() and np.all((np.abs(fo[:, 2]) > 0.2094) | (np.abs(fo[:, 0]) > 2.4))
    custom = InGraphEvaluator("CartPole-v1", SignPolicy(), episodes=2, seed=4, jit_compile=False,
                              descriptor_fn=lambda o, r, n: tf.cast(n, tf.float32) / 500.0)
    _, d2 = custom.evaluate(params)
    np.testing.assert_allclose(d2.numpy(), custom.last_lengths.numpy() / 500.0)
    bad = InGraphEvaluator("CartPole-v1", SignPolicy(), jit_compile=False, descriptor_fn=lambda o, r, n: r[:, 0])
    with pytest.raises(ShapeError, match="descriptor_fn"):
        bad.evaluate(params)


def test_errors_are_clear():
    ev = InGraphEvaluator("CartPole-v1", SignPolicy(), jit_compile=False)
    with pytest.raises(ShapeError, match=r"\[P, 2\]"):
        ev.evaluate(np.zeros([4, 3], np.float32))
    with pytest.raises(ShapeError, match="dtype"):
        ev.evaluate(np.zeros([4, 2], np.int32))

    class BadPolicy:
        def forward(self, params, obs):
            return tf.zeros([params.shape[0], 1], tf.float32)

    with pytest.raises(ShapeError, match=r"int32 actions of shape \[4, 1\].*float32"):
        InGraphEvaluator("CartPole-v1", BadPolicy(), jit_compile=False).evaluate(np.zeros([4, 2], np.float32))
    with pytest.raises(ConfigError, match="episodes"):
        InGraphEvaluator("CartPole-v1", SignPolicy(), episodes=0)
    with pytest.raises(ConfigError, match="forward"):
        InGraphEvaluator("CartPole-v1", object())
    with pytest.raises(ConfigError, match="TFEnv"):
        InGraphEvaluator(object(), SignPolicy())


def test_registered_as_evaluator():
    from tfevo import registry

    assert registry.get("evaluator", "ingraph") is InGraphEvaluator
    assert "CartPole-v1" in registry.names("env")


def test_tfevo_nn_policy_graph_path_matches_forward():
    pytest.importorskip("tfevo.nn")
    from tfevo.problems.control import control_problem

    policy, ev, d = control_problem("Acrobot-v1", hidden=(16,), episodes=2, max_steps=60, seed=2,
                                    jit_compile=False)
    assert d == 6 * 16 + 16 + 16 * 3 + 3 == policy.num_params
    env = ev.env
    params = policy.init_params(6, seed=1)

    class ViaForward:  # hides forward_graph, so the evaluator calls forward()
        num_params = policy.num_params

        def forward(self, p, obs):
            return policy.forward(p, obs)

    a = ev.evaluate_episodes(params)
    b = InGraphEvaluator(env, ViaForward(), episodes=2, max_steps=60, seed=2, jit_compile=False).evaluate_episodes(params)
    np.testing.assert_array_equal(a.returns.numpy(), b.returns.numpy())
    assert a.returns.shape == (6, 2) and np.all(a.lengths.numpy() <= 60)


def test_openai_es_solves_cartpole():
    """OpenES (popsize 64) + a linear policy: the search centre scores >= 475
    (mean of 20 fresh episodes) within 40 generations (7,680 training episodes)."""
    strategies = pytest.importorskip("tfevo.strategies")
    policy = LinearPolicy(4, 2, discrete=True)
    ev = InGraphEvaluator("CartPole-v1", policy, episodes=3, seed=0)
    check = InGraphEvaluator("CartPole-v1", policy, episodes=20, seed=99)
    es = strategies.OpenES(num_dims=policy.num_params, popsize=64, sigma=0.2, learning_rate=0.1, seed=0)
    centre_score = -np.inf
    for gen in range(40):
        x = es.ask()
        es.tell(x, ev.evaluate(x))
        if gen % 5 == 4:
            centre_score = float(check.evaluate(tf.reshape(es.mean, [1, -1]))[0])
            if centre_score >= 475:
                break
    assert centre_score >= 475, f"centre scores {centre_score} after {gen + 1} generations"
    assert ev.traces == {"rollout": 1}


def test_nan_member_does_not_affect_others():
    params = np.array([[-1.0], [np.nan], [0.5]], np.float32)
    ev = InGraphEvaluator("Pendulum-v1", TorquePolicy(), episodes=2, seed=8, jit_compile=False)
    f = ev.evaluate(params).numpy()
    ref = InGraphEvaluator("Pendulum-v1", TorquePolicy(), episodes=2, seed=8, jit_compile=False)
    g = ref.evaluate(np.array([[-1.0], [0.0], [0.5]], np.float32)).numpy()
    assert np.isnan(f[1])  # the broken member is NaN (= worst for every strategy) ...
    np.testing.assert_array_equal(f[[0, 2]], g[[0, 2]])  # ... and the others are untouched
