"""In-graph rollouts whose result depends only on each member's own seed.

:class:`ShardedRollout` is an ``evaluate_fn`` for
:class:`~tfevo.distribute.DistributedEvaluator`: it rolls out a shard of
members on an in-graph :class:`~tfevo.envs.base.TFEnv`, starting member ``i``'s
``episodes`` episodes from states drawn with member ``i``'s own seed (not one
seed for the whole batch as :class:`tfevo.rollout.InGraphEvaluator` does), so a
member's return is the same whichever replica runs it and however large the
shard is.

Example:

>>> from tfevo.distribute import DistributedEvaluator, make_strategy
>>> from tfevo.envs import make
>>> from tfevo.nn import Policy, PopulationModel, mlp
>>> strategy = make_strategy()
>>> env = make("CartPole-v1")
>>> policy = Policy(PopulationModel(mlp((4,), 2, hidden=(16,))), env.action_spec)
>>> ev = DistributedEvaluator(strategy, ShardedRollout(env, policy, episodes=2), seed=0)
>>> fitness = ev.evaluate(policy.init_params(16, seed=0))   # float32 [16] on every worker
>>> fitness.shape
TensorShape([16])
"""

from __future__ import annotations

import tensorflow as tf

from tfevo.core import ConfigError, ShapeError
from tfevo.envs.base import TFEnv
from tfevo.rollout.ingraph import policy_fns
from tfevo.rollout._limits import ingraph_limit

__all__ = ["ShardedRollout"]


class ShardedRollout:
    """Per-member-seeded in-graph rollout of a shard (an ``evaluate_fn``).

    Args:
      env: a :class:`~tfevo.envs.base.TFEnv` (its ``reset(seed, num_envs=n)``
        is called once per member with that member's seed) or an env id.
      policy: ``forward(params [S, D], obs [S, B, *obs]) -> actions``; a
        :class:`tfevo.nn.Policy` is used through its graph path.
      episodes: B, episodes per member (fitness = mean return).
      max_steps: the episode's time limit in steps (default: the env's
        ``max_episode_steps``); replaces the env's default limit, above or
        below it, as in :class:`~tfevo.rollout.InGraphEvaluator`.
      report_frames: also return each member's environment steps (summed
        over its episodes), so that
        :attr:`DistributedEvaluator.last_frames` counts them.

    Calling it as ``fn(params [S, D], indices [S], seeds [S, 2])`` returns
    fitness ``float32 [S]`` (with ``report_frames``: a dict with
    ``fitness`` and ``frames`` int64 ``[S]``).
    """

    def __init__(self, env, policy, episodes: int = 1, max_steps: int | None = None,
                 report_frames: bool = False):
        if isinstance(env, str):
            from tfevo.envs import make

            env = make(env, 1)
        if not isinstance(env, TFEnv):
            raise ConfigError(f"ShardedRollout needs an in-graph TFEnv, got {type(env).__name__}")
        if not callable(getattr(policy, "forward", None)):
            raise ConfigError(f"policy must have forward(params, obs), got {type(policy).__name__}")
        if getattr(policy, "state_shape", None) is not None:
            raise ConfigError(
                f"ShardedRollout does not carry a recurrent policy's state ({type(policy).__name__} has a "
                "state_shape); use a feed-forward policy or tfevo.rollout.InGraphEvaluator"
            )
        if int(episodes) < 1:
            raise ConfigError(f"episodes must be >= 1, got {episodes}")
        env, limit = ingraph_limit(env, max_steps)
        self.env = env
        self.policy = policy
        self.episodes = int(episodes)
        self.max_steps = int(limit)
        self.report_frames = bool(report_frames)

    def __call__(self, params, indices, seeds):
        params = tf.cast(params, tf.float32)
        if params.shape.rank != 2:
            raise ShapeError(f"params must be [S, D], got {params.shape.as_list()}")
        s, b = params.shape[0], self.episodes
        n = s * b
        env = self.env
        obs_shape = list(env.observation_shape)
        spec = env.action_spec
        prepare, forward = policy_fns(self.policy)
        weights = prepare(params)

        probe_state, probe_obs = env.reset(seeds[0], num_envs=b)
        sig = tf.nest.map_structure(lambda t: tf.TensorSpec(t.shape, t.dtype), (probe_state, probe_obs))
        state, obs = tf.map_fn(lambda sd: env.reset(sd, num_envs=b), seeds, fn_output_signature=sig)
        # [S, B, ...] -> [S * B, ...]; row i * B + e = member i, episode e
        state = tf.nest.map_structure(lambda t: tf.reshape(t, [n] + t.shape.as_list()[2:]), state)
        obs = tf.cast(tf.reshape(obs, [n] + obs_shape), tf.float32)

        def cond(t, state, obs, done, returns, lengths):
            return tf.logical_and(t < self.max_steps, tf.logical_not(tf.reduce_all(done)))

        def body(t, state, obs, done, returns, lengths):
            a = forward(weights, tf.reshape(obs, [s, b] + obs_shape))
            a = tf.reshape(tf.cast(a, tf.int32 if spec.discrete else tf.float32), [n] + ([] if spec.discrete else list(spec.shape)))
            res = env.step(state, a)
            alive = tf.logical_not(done)
            returns = returns + tf.where(alive, tf.cast(res.reward, tf.float64), tf.zeros_like(returns))
            lengths = lengths + tf.cast(alive, tf.int64)
            done = done | res.terminated | res.truncated | (t + 1 >= self.max_steps)
            return t + 1, res.state, tf.cast(res.obs, tf.float32), done, returns, lengths

        init = (tf.constant(0), state, obs, tf.zeros([n], tf.bool), tf.zeros([n], tf.float64),
                tf.zeros([n], tf.int64))
        out = tf.while_loop(cond, body, init, maximum_iterations=self.max_steps)
        returns = tf.reshape(out[4], [s, b])
        fitness = tf.cast(tf.reduce_mean(returns, axis=1), tf.float32)
        if self.report_frames:
            return {"fitness": fitness, "frames": tf.reduce_sum(tf.reshape(out[5], [s, b]), axis=1)}
        return fitness
