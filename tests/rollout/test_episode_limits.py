"""Episode length of the pipelined evaluator: ``max_steps`` against ``gym.make(id, max_episode_steps=N)``.

A plain Gymnasium loop with the same seeds and the same policy (so the same actions) gives the
reference lengths and returns, for ``N`` below and above the registered limit.
"""

import numpy as np
import pytest
import tensorflow as tf

gym = pytest.importorskip("gymnasium")

from tfevo.core import ConfigError  # noqa: E402
from tfevo.envs.gym import GymVectorEnv  # noqa: E402
from tfevo.rollout._limits import host_limit_kwargs  # noqa: E402
from tfevo.rollout.pipelined import PipelinedEvaluator  # noqa: E402


class Linear:
    """``out = obs[:k] . w`` per member; discrete: action ``out > 0``; continuous: ``out`` on every
    one of the ``act`` action dimensions."""

    def __init__(self, k, discrete, act=1):
        self.k, self.discrete, self.act, self.num_params = k, discrete, act, k

    def forward(self, params, obs, indices=None):
        w = params if indices is None else tf.gather(params, indices)
        out = tf.reduce_sum(obs[..., : self.k] * w[:, None, :], axis=-1)  # [n, 1]
        return tf.cast(out > 0, tf.int32) if self.discrete else tf.tile(out[..., None], [1, 1, self.act])


def gym_loop(env_id, policy, params, seeds, limit, **make_kwargs):
    """Returns, lengths and last truncation flags of ``gym.make(env_id, max_episode_steps=limit)``
    episodes started with ``reset(seed=seeds[m, e])``, actions from ``policy``."""
    env = gym.make(env_id, max_episode_steps=limit, **make_kwargs)
    box = getattr(env.action_space, "low", None)
    P, E = seeds.shape
    ret, length, trunc = np.zeros((P, E)), np.zeros((P, E), int), np.zeros((P, E), bool)
    for m in range(P):
        for e in range(E):
            obs, _ = env.reset(seed=int(seeds[m, e]))
            while True:
                a = policy.forward(params, tf.constant(np.asarray(obs, np.float32)[None, None]),
                                   tf.constant([m])).numpy().reshape(-1)
                a = int(a[0]) if box is None else np.clip(a, env.action_space.low, env.action_space.high)
                obs, r, te, tr, _ = env.step(a)
                ret[m, e] += np.float32(r)
                length[m, e] += 1
                if te or tr:
                    trunc[m, e] = tr and not te
                    break
    env.close()
    return ret, length, trunc


@pytest.mark.parametrize("env_id,k,discrete,params,limit,kwargs", [
    ("CartPole-v1", 4, True, [[0.0, 0.0, 1.0, 0.5], [0.0, 0.3, 1.0, 1.0], [0.0, 0.0, -1.0, 0.0]], 600, {}),
    ("CartPole-v1", 4, True, [[0.0, 0.0, 1.0, 0.5]], 300, {}),
    ("Pendulum-v1", 3, False, [[0.0, 0.0, -1.0], [0.0, 0.0, 2.0]], 300, {}),
    ("HalfCheetah-v5", (17, 6), False, [[0.0] * 17, [0.0] * 8 + [0.1] + [0.0] * 8], 1200,
     dict(reset_rng="gymnasium")),
])
def test_max_steps_gives_the_episodes_of_gym_make(env_id, k, discrete, params, limit, kwargs):
    params = np.array(params, np.float32)
    policy = Linear(k[0], discrete, k[1]) if isinstance(k, tuple) else Linear(k, discrete)
    with PipelinedEvaluator(env_id, policy, num_envs=2, num_subsets=2, episodes=2, max_steps=limit, seed=3,
                            env_kwargs=kwargs) as ev:
        seeds = ev.episode_seeds(params.shape[0])
        fit = ev.evaluate(params).numpy()
        steps = ev.last_stats["member_steps"]
    ret, length, trunc = gym_loop(env_id, policy, params, seeds, limit)
    assert length.max() == limit and trunc.any()  # some episodes reach the limit (above or below 500/200/1000)
    np.testing.assert_array_equal(steps, length.sum(axis=1))
    np.testing.assert_allclose(fit, ret.mean(axis=1), rtol=1e-5 if env_id == "HalfCheetah-v5" else 1e-6)


def test_gym_env_reports_its_time_limit():
    with GymVectorEnv("CartPole-v1", 1) as env:
        assert env.max_episode_steps == 500
    with GymVectorEnv("CartPole-v1", 1, max_episode_steps=700) as env:
        assert env.max_episode_steps == 700
    with GymVectorEnv("CartPole-v1", 1, asynchronous=True, max_episode_steps=700) as env:
        assert env.max_episode_steps == 700
    with GymVectorEnv("Blackjack-v1", 1) as env:
        assert env.max_episode_steps == 0  # registered without a TimeLimit


def test_limits_that_cannot_be_honoured_are_config_errors():
    pol = Linear(4, True)
    # an explicit env limit below max_steps: refused, naming both
    with pytest.raises(ConfigError, match=r"max_steps=600 cannot be honoured.*max_episode_steps=300"):
        PipelinedEvaluator("CartPole-v1", pol, num_envs=1, num_subsets=1, max_steps=600, env_kwargs={"max_episode_steps": 300})
    # the same through an env_fn: the env's own TimeLimit is read back
    with pytest.raises(ConfigError, match=r"max_steps=600 cannot be honoured.*after 500 agent steps"):
        PipelinedEvaluator(lambda n: GymVectorEnv("CartPole-v1", n), pol, num_envs=1, num_subsets=1,
                           max_steps=600)
    # no limit at all and max_steps=None: refused rather than running unbounded
    with pytest.raises(ConfigError, match=r"max_steps=None.*Blackjack-v1 has none.*pass max_steps"):
        PipelinedEvaluator(lambda n: GymVectorEnv("Blackjack-v1", n), Linear(3, True), num_envs=1, num_subsets=1)
    for bad in (0, 2.5, "600", True):
        with pytest.raises(ConfigError, match="max_steps"):
            PipelinedEvaluator("CartPole-v1", pol, num_envs=1, num_subsets=1, max_steps=bad)
    # Atari: frame limits are emulator frames (frameskip 4), max_steps agent steps
    with pytest.raises(ConfigError, match=r"max_steps=30 cannot be honoured.*max_num_frames_per_episode=100.*25"):
        host_limit_kwargs("ALE/Pong-v5", 30, {"max_num_frames_per_episode": 100})
    assert host_limit_kwargs("ALE/Pong-v5", 25, {"max_num_frames_per_episode": 100}) == {
        "max_num_frames_per_episode": 100}
    # the preset's 20000 frames (5000 steps) make room for a longer max_steps: (6000 + 30 no-ops) * 4 frames
    assert host_limit_kwargs("ALE/Pong-v5", 6000, {}) == {"max_num_frames_per_episode": 24120}
    assert host_limit_kwargs("ALE/Pong-v5", 100, {}) == {}
    assert host_limit_kwargs("HalfCheetah-v5", 1500, {}) == {"max_episode_steps": 1500}
    assert host_limit_kwargs("HalfCheetah-v5", 1500, {"max_episode_steps": None}) == {"max_episode_steps": 1500}
    assert host_limit_kwargs("HalfCheetah-v5", None, {}) == {}
    # max_episode_steps=0 (no limit of its own, as for the in-graph envs): max_steps is the limit
    assert host_limit_kwargs("CartPole-v1", 700, {"max_episode_steps": 0}) == {"max_episode_steps": 700}
    with pytest.raises(ConfigError, match=r"max_steps=None.*max_episode_steps=0.*pass max_steps"):
        PipelinedEvaluator("CartPole-v1", pol, num_envs=1, num_subsets=1, env_kwargs={"max_episode_steps": 0})


def test_atari_frame_limit_and_max_steps_against_gymnasium():
    ale_py = pytest.importorskip("ale_py")
    gym.register_envs(ale_py)

    class Noop:
        num_params = 1

        def forward(self, params, obs, indices=None):
            return tf.zeros([tf.shape(obs)[0], 1], tf.int32)

    ref = gym.make("ALE/Pong-v5", max_num_frames_per_episode=102, repeat_action_probability=0.0,
                   full_action_space=True)
    ref.reset(seed=1)
    n = 0
    while True:
        _, _, te, tr, _ = ref.step(0)
        n += 1
        if te or tr:
            break
    assert (n, te, tr) == (26, False, True)  # frames: ceil(102 / 4) agent steps
    with PipelinedEvaluator("ALE/Pong-v5", Noop(), num_envs=2, num_subsets=1, seed=0,
                            env_kwargs=dict(max_num_frames_per_episode=102, noop_max=0)) as ev:
        ev.evaluate(np.zeros((2, 1), np.float32))
        np.testing.assert_array_equal(ev.last_stats["member_steps"], [n, n])
        assert ev.last_stats["frames"] == 4 * 2 * n


def test_sharded_rollout_max_steps_above_the_registered_limit():
    from tfevo.distribute import ShardedRollout
    from tfevo.envs import make

    class Torque:
        num_params = 1

        def forward(self, params, obs):
            return params[:, None, :] * obs[..., 2:3]

    env = make("Pendulum-v1")
    params = np.array([[-1.0], [0.5]], np.float32)
    seeds = tf.constant([[3, 1], [8, 2]], tf.int32)
    fn = ShardedRollout(env, Torque(), episodes=2, max_steps=300, report_frames=True)
    out = fn(params, tf.constant([0, 1]), seeds)
    np.testing.assert_array_equal(out["frames"].numpy(), [600, 600])  # 2 episodes of 300 steps, not 200
    assert env.max_episode_steps == 200
    ref = gym.make("Pendulum-v1", max_episode_steps=300)
    for i in range(2):
        physics = env.reset(seeds[i], num_envs=2)[0].physics.numpy()
        total = 0.0
        for b in range(2):
            ref.reset(seed=0)
            ref.unwrapped.state = physics[b].copy()
            obs = ref.unwrapped._get_obs()
            while True:
                obs, r, te, tr, _ = ref.step(np.array([np.float32(params[i, 0]) * obs[2]], np.float32))
                total += float(np.float32(r))  # float64 sums, as the rollout keeps them
                if te or tr:
                    break
        np.testing.assert_allclose(out["fitness"].numpy()[i], total / 2, rtol=1e-6)


@pytest.mark.parametrize("env_id,max_steps,kind", [("CartPole-v1", 600, "ingraph"), ("CartPole-v1", 600, "pipelined"),
                                                    ("HalfCheetah-v5", 1500, "pipelined")])
def test_train_config_env_max_steps_reaches_the_evaluator(env_id, max_steps, kind):
    import json

    from tfevo.training.builders import build
    from tfevo.training.config import DEFAULT_CONFIG, parse_config

    data = json.loads(json.dumps(DEFAULT_CONFIG))
    data["env"].update(id=env_id, max_steps=max_steps)
    data["evaluator"] = {**data.get("evaluator", {}), "kind": kind, **({"num_envs": 2} if kind == "pipelined" else {})}
    data["algorithm"]["popsize"] = 4
    ev = build(parse_config(data)).evaluator
    try:
        assert ev.max_steps == max_steps
        limit = ev.env.max_episode_steps if kind == "ingraph" else ev.envs[0].max_episode_steps
        assert limit == max_steps  # the env's own TimeLimit no longer ends episodes first
    finally:
        if hasattr(ev, "close"):
            ev.close()
    data["env"]["kwargs"] = {"max_episode_steps": 300}
    with pytest.raises(ConfigError, match=rf"max_steps={max_steps} cannot be honoured.*max_episode_steps=300"):
        build(parse_config(data))


def test_play_runs_the_episode_length_the_run_trained_with(tmp_path, capfd):
    import re

    pytest.importorskip("imageio")
    from tfevo.cli import main

    run = tmp_path / "run"
    assert main(["train", "--run-dir", str(run), "--generations", "1", "--no-progress", "--set", "env.id=Pendulum-v1",
                 "--set", "policy.kind=linear", "--set", "algorithm.popsize=2", "--set", "env.episodes=1",
                 "--set", "evaluator.kind=pipelined", "--set", "env.max_steps=230"]) == 0
    capfd.readouterr()
    assert main(["play", str(run), "--video", str(tmp_path / "p.gif"), "--fps", "50"]) == 0
    out = capfd.readouterr().out
    assert re.search(r"over 230 steps", out), out  # Pendulum never terminates: 230 steps, not its registered 200
    # --max-steps is the played episode's limit, above the run's env.max_steps too
    assert main(["play", str(run), "--video", str(tmp_path / "q.gif"), "--fps", "50", "--max-steps", "240"]) == 0
    out = capfd.readouterr().out
    assert re.search(r"over 240 steps", out), out
