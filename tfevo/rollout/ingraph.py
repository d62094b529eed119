"""In-graph evaluator: a whole population's episodes in one ``tf.function``.

:class:`InGraphEvaluator` rolls out every member of a population for
``episodes`` episodes each, all at once, with an in-graph environment
(:class:`~tfevo.envs.base.TFEnv`, e.g. the classic control tasks of
:mod:`tfevo.envs.classic`).  One ``tf.while_loop`` steps ``P x episodes``
environments and runs the policy of every member on its own observations;
finished episodes stop accumulating reward (done masks) and the loop stops
as soon as every episode has ended.  The whole loop is XLA compiled when the
policy's ops allow it.

Example:

>>> import tfevo
>>> from tfevo.envs import make
>>> from tfevo.nn import Policy, PopulationModel, mlp
>>> env = make("CartPole-v1")
>>> policy = Policy(PopulationModel(mlp((4,), 2, hidden=(16,))), env.action_spec)
>>> ev = InGraphEvaluator(env, policy, episodes=2, seed=0)
>>> fitness = ev.evaluate(policy.init_params(64, seed=0))     # float32 [64]
>>> int(ev.last_frames) > 0                                   # env steps used
True
"""

from __future__ import annotations

import inspect
import time
import warnings
from typing import Any, NamedTuple

import numpy as np
import tensorflow as tf

from tfevo.core import ConfigError, SeedStream, ShapeError, TraceCounter
from tfevo.envs.base import TFEnv
from tfevo.registry import register
from tfevo.rollout._limits import ingraph_limit

__all__ = ["InGraphEvaluator", "EpisodeResult", "final_obs_descriptor"]


class EpisodeResult(NamedTuple):
    """What one call of :meth:`InGraphEvaluator.evaluate_episodes` returns.

    Attributes:
      fitness: float32 ``[P]``, mean episode return of each member.
      returns: float32 ``[P, B]``, the return of every episode.
      lengths: int32 ``[P, B]``, environment steps of every episode.
      final_obs: float32 ``[P, B, *obs_shape]``, the last observation of
        every episode (handy for behaviour descriptors in quality-diversity).
      descriptors: float32 ``[P, k]`` from ``descriptor_fn``, or None.
    """

    fitness: tf.Tensor
    returns: tf.Tensor
    lengths: tf.Tensor
    final_obs: tf.Tensor
    descriptors: Any = None


def final_obs_descriptor(final_obs, returns, lengths):
    """Behaviour descriptor: the episode-mean final observation, ``[P, prod(obs_shape)]``."""
    p = tf.shape(final_obs)[0]
    return tf.reshape(tf.reduce_mean(final_obs, axis=1), [p, -1])


def policy_fns(policy):
    """``(prepare, forward)`` of a policy for in-graph rollouts: the graph path of a
    :class:`tfevo.nn.Policy` (weights split once per rollout) if present, else its
    ``forward`` on the raw parameters."""
    model = getattr(policy, "model", None)
    if callable(getattr(policy, "forward_graph", None)) and callable(getattr(model, "unflatten_graph", None)):
        prepare = getattr(policy, "prepare_graph", None)
        return (prepare if callable(prepare) else model.unflatten_graph), policy.forward_graph
    return (lambda params: params), policy.forward


def _tile_batch(x: tf.Tensor, p: int) -> tf.Tensor:
    """``[B, ...] -> [p * B, ...]`` with row ``i * B + b`` = ``x[b]``."""
    return tf.tile(x, [p] + [1] * (x.shape.rank - 1))


def policy_input_shape(policy):
    """The observation shape a policy was built for (``None`` when it does not say).

    Reads ``input_shape`` of the policy or of its ``model`` (Keras-built
    policies, :class:`tfevo.nn.Policy`).
    """
    for owner in (policy, getattr(policy, "model", None)):
        shape = getattr(owner, "input_shape", None)
        if isinstance(shape, (tuple, list)) and all(isinstance(d, (int, np.integer)) for d in shape):
            return tuple(int(d) for d in shape)
    return None


def check_policy_inputs(policy, observation_shape, env_id: str) -> None:
    """Refuses a policy built for other observations than the environment gives (before any rollout)."""
    want = policy_input_shape(policy)
    obs = tuple(int(d) for d in observation_shape)
    if want is None or want == obs:
        return
    if len(want) == 1 and len(obs) > 1 and want[0] == int(np.prod(obs)):
        return  # a flat-input policy over flattened observations
    raise ShapeError(
        f"{env_id} gives observations of shape {obs}, but the policy takes inputs of shape {want}; "
        f"build the policy for this environment's observations (input shape {obs})"
    )


@register("evaluator", "ingraph")
class InGraphEvaluator(tf.Module):
    """Evaluates a population on an in-graph environment in one ``tf.function``.

    Fitness of a member = mean over ``episodes`` of the summed reward of each
    episode; an episode ends at its first termination or truncation
    (``max_steps`` if given, else ``max_episode_steps`` of the environment).

    Args:
      env: a :class:`~tfevo.envs.base.TFEnv` or an environment id for
        :func:`tfevo.envs.make` (e.g. ``"CartPole-v1"``).
      policy: the policy family: ``forward(params [P, D], obs [P, B, *obs])
        -> actions`` int ``[P, B]`` (discrete) or float32 ``[P, B, A]``.
        A :class:`tfevo.nn.Policy` is used through its graph path
        (weights split once per evaluation, not once per step).
        A *recurrent* policy (one with a ``state_shape`` that is not None,
        e.g. a recurrent :class:`tfevo.neat.NEATPolicy`) carries a state
        across the steps of an episode instead: it provides
        ``forward_state(weights, obs [P, B, *obs], state [P, B, *state_shape])
        -> (actions, new_state)``; the state starts at zeros (of the policy's
        ``state_dtype`` if it has one, else float32).
      episodes: B, episodes per member.
      max_steps: the episode's time limit in steps (default: the
        environment's ``max_episode_steps``).  It replaces the env's default
        limit, above or below it, as ``gym.make(id, max_episode_steps=N)``
        does (the rollout runs on a copy of ``env`` whose ``truncated`` flag
        is set at step ``max_steps``); a limit the env was made with
        explicitly (``make(id, max_episode_steps=L)``) is kept, and
        ``max_steps > L`` is a ConfigError, as is ``max_steps=None`` for an
        env without a limit.  See ``docs/pipeline.md``, "Episode length".
      seed: seed of the :class:`~tfevo.core.SeedStream` that draws the start
        states; each call of :meth:`evaluate` uses the next seed, so a run is
        reproducible and the stream is saved with ``tf.train.Checkpoint``.
      common_random_numbers: if True, every member faces the same ``B``
        start states within one call (new ones on the next call), which
        reduces the noise when comparing members.
      jit_compile: XLA-compile the rollout.  ``"auto"`` (default) tries XLA
        and falls back to the plain graph (with a warning) if an op of the
        policy has no XLA kernel.
      descriptor_fn: optional behaviour descriptors for quality-diversity:
        ``fn(final_obs [P, B, *obs], returns [P, B], lengths [P, B]) ->
        float32 [P, k]`` (TensorFlow ops, run inside the rollout), or
        ``"final_obs"`` for the episode-mean final observation.  When set,
        :meth:`evaluate` returns ``(fitness, descriptors)``.

    Attributes:
      last_frames: environment steps used by the last call (sum of episode
        lengths), a Python int -- what a Trainer counts as frames.
      last_returns, last_lengths: ``[P, B]`` tensors of the last call.
      last_stats: dict of the last call: ``frames``, ``steps`` (loop
        iterations, the longest episode), ``episodes``, ``seconds``.
      total_frames: int64 variable, frames used over all calls (checkpointed).
      traces: ``{name: count}`` of traces of the rollout function.

    Example:

    >>> from tfevo.envs import make
    >>> from tfevo.nn import Policy, PopulationModel, mlp
    >>> env = make("Pendulum-v1")
    >>> policy = Policy(PopulationModel(mlp((3,), 1, hidden=(8,))), env.action_spec)
    >>> ev = InGraphEvaluator(env, policy, episodes=3, common_random_numbers=True)
    >>> res = ev.evaluate_episodes(policy.init_params(4, seed=0))   # EpisodeResult
    >>> res.returns.shape                                           # [P, 3]
    TensorShape([4, 3])
    """

    def __init__(self, env, policy, episodes: int = 1, max_steps: int | None = None, seed: int = 0,
                 common_random_numbers: bool = False, jit_compile="auto", descriptor_fn=None,
                 name: str | None = None):
        super().__init__(name=name)
        if isinstance(env, str):
            from tfevo.envs import make

            env = make(env, 1)
        if not isinstance(env, TFEnv):
            raise ConfigError(
                f"InGraphEvaluator needs an in-graph TFEnv (e.g. 'CartPole-v1'), got {type(env).__name__}; "
                "host simulators go through tfevo.rollout.PipelinedEvaluator"
            )
        if not callable(getattr(policy, "forward", None)):
            raise ConfigError(f"policy must have a forward(params, obs) method, got {type(policy).__name__}")
        if getattr(policy, "state_shape", None) is not None and not callable(getattr(policy, "forward_state", None)):
            raise ConfigError(
                f"{type(policy).__name__} has a state_shape (a recurrent policy) but no "
                "forward_state(weights, obs, state) -> (actions, state) method"
            )
        check_policy_inputs(policy, env.observation_shape, env.env_id)
        if int(episodes) < 1:
            raise ConfigError(f"episodes must be >= 1, got {episodes}")
        env, limit = ingraph_limit(env, max_steps)
        if jit_compile not in ("auto", True, False):
            raise ConfigError(f"jit_compile must be 'auto', True or False, got {jit_compile!r}")
        if descriptor_fn == "final_obs":
            descriptor_fn = final_obs_descriptor
        if descriptor_fn is not None and not callable(descriptor_fn):
            raise ConfigError(f"descriptor_fn must be callable or 'final_obs', got {descriptor_fn!r}")
        self.descriptor_fn = descriptor_fn
        self.env = env
        self.policy = policy
        self.episodes = int(episodes)
        self.max_steps = int(limit)
        self.common_random_numbers = bool(common_random_numbers)
        self.jit_compile = jit_compile
        self.seeds = SeedStream(seed)
        self.total_frames = tf.Variable(0, dtype=tf.int64, trainable=False, name="total_frames")
        self.last_frames = 0
        object.__setattr__(self, "last_stats", {})  # plain dict, not tracked by tf.Module
        self.last_returns = None
        self.last_lengths = None
        self._trace_counter = TraceCounter()
        object.__setattr__(self, "_fns", {})  # plain dict of compiled rollouts: not checkpointed
        self._num_params = getattr(policy, "num_params", None)
        try:
            self._reset_takes_n = "num_envs" in inspect.signature(env.reset).parameters
        except (TypeError, ValueError):  # pragma: no cover
            self._reset_takes_n = False

    # ------------------------------------------------------------------
    @property
    def traces(self) -> dict:
        """How many times the rollout was traced (once per population size)."""
        return dict(self._trace_counter.counts)

    @property
    def observation_shape(self) -> tuple:
        return tuple(self.env.observation_shape)

    def _reset(self, seed, n: int):
        if self._reset_takes_n:
            return self.env.reset(seed, num_envs=n)
        if self.env.num_envs != n:
            raise ConfigError(
                f"{type(self.env).__name__}.reset has no num_envs argument, so the env must be created "
                f"with num_envs={n} (population x episodes), got {self.env.num_envs}"
            )
        return self.env.reset(seed)

    def _check_actions(self, actions, p: int) -> tf.Tensor:
        spec = self.env.action_spec
        b = self.episodes
        actions = tf.convert_to_tensor(actions)
        if spec.discrete:
            want = [p, b]
            if not actions.dtype.is_integer or actions.shape.as_list() != want:
                raise ShapeError(
                    f"policy.forward must return int32 actions of shape {want} for {self.env.env_id}, "
                    f"got {actions.dtype.name} {actions.shape.as_list()}"
                )
            return tf.reshape(tf.cast(actions, tf.int32), [p * b])
        want = [p, b, *spec.shape]
        if not actions.dtype.is_floating or actions.shape.as_list() != want:
            raise ShapeError(
                f"policy.forward must return float32 actions of shape {want} for {self.env.env_id}, "
                f"got {actions.dtype.name} {actions.shape.as_list()}"
            )
        return tf.reshape(tf.cast(actions, tf.float32), [p * b, *spec.shape])

    def _env_step_and_account(self, t, state, actions, done, returns, lengths, final_obs):
        """One environment step of all ``n`` episodes and their bookkeeping: reward and
        length added while an episode is running, its last observation kept, ``done`` set
        on termination, truncation or step ``max_steps``.  Returns (state, obs, done,
        returns, lengths, final_obs)."""
        res = self.env.step(state, actions)
        alive = tf.logical_not(done)
        returns = returns + tf.where(alive, tf.cast(res.reward, tf.float64), tf.zeros_like(returns))
        lengths = lengths + tf.cast(alive, tf.int32)
        new_obs = tf.cast(res.obs, tf.float32)
        alive_obs = tf.reshape(alive, [-1] + [1] * len(self.env.observation_shape))
        final_obs = tf.where(alive_obs, new_obs, final_obs)
        done = done | res.terminated | res.truncated | (t + 1 >= self.max_steps)
        return res.state, new_obs, done, returns, lengths, final_obs

    def _start_states(self, p: int, offset=None, popsize=None):
        """``(state, obs)`` of the ``p * episodes`` episodes of one call, from the next seed; with
        ``offset`` (int32 scalar) and ``popsize``, those of rows ``[offset, offset + p)`` of a
        population of ``popsize``: the rows at offset 0 draw the seed, the others reuse it."""
        b = self.episodes
        if offset is None:
            seed = self.seeds.next()
        else:
            seed = SeedStream.mix(self.seeds.seed, self.seeds.counter.assign_add(tf.cast(offset == 0, tf.int64)))
        if self.common_random_numbers:
            state, obs = self._reset(seed, b)
            return tf.nest.map_structure(lambda x: _tile_batch(x, p), state), _tile_batch(obs, p)
        if offset is None:
            return self._reset(seed, p * b)
        state, obs = self._reset(seed, popsize * b)  # the whole population's start states: these members' rows
        return tf.nest.map_structure(lambda x: x[offset * b: (offset + p) * b], (state, obs))

    def _rollout(self, params, offset=None, popsize=None):
        p = params.shape[0]
        b = self.episodes
        n = p * b
        env = self.env
        obs_shape = list(env.observation_shape)
        prepare, forward = policy_fns(self.policy)
        weights = prepare(params)

        state, obs = self._start_states(p, offset, popsize)
        obs = tf.cast(obs, tf.float32)

        state_shape = getattr(self.policy, "state_shape", None)
        recurrent = state_shape is not None
        if recurrent:
            step_fn = self.policy.forward_state
            state_dtype = getattr(self.policy, "state_dtype", tf.float32)
            h0 = tf.zeros([p, b, *state_shape], state_dtype)
        else:
            h0 = tf.zeros([], tf.float32)  # unused placeholder loop variable

        def cond(t, state, obs, done, returns, lengths, final_obs, h):
            return tf.logical_and(t < self.max_steps, tf.logical_not(tf.reduce_all(done)))

        def body(t, state, obs, done, returns, lengths, final_obs, h):
            obs_pb = tf.reshape(obs, [p, b] + obs_shape)
            if recurrent:
                actions, h = step_fn(weights, obs_pb, h)
                h = tf.ensure_shape(tf.cast(h, state_dtype), [p, b, *state_shape])
            else:
                actions = forward(weights, obs_pb)
            actions = self._check_actions(actions, p)
            new_state, new_obs, done, returns, lengths, final_obs = self._env_step_and_account(
                t, state, actions, done, returns, lengths, final_obs)
            return t + 1, new_state, new_obs, done, returns, lengths, final_obs, h

        init = (
            tf.constant(0, tf.int32),
            state,
            obs,
            tf.zeros([n], tf.bool),
            tf.zeros([n], tf.float64),
            tf.zeros([n], tf.int32),
            obs,
            h0,
        )
        _, _, _, _, returns, lengths, final_obs, _ = tf.while_loop(cond, body, init,
                                                                   maximum_iterations=self.max_steps)
        returns = tf.reshape(returns, [p, b])
        lengths = tf.reshape(lengths, [p, b])
        fitness = tf.cast(tf.reduce_mean(returns, axis=1), tf.float32)
        self.total_frames.assign_add(tf.reduce_sum(tf.cast(lengths, tf.int64)))
        returns = tf.cast(returns, tf.float32)
        final_obs = tf.reshape(final_obs, [p, b] + obs_shape)
        if self.descriptor_fn is None:
            return fitness, returns, lengths, final_obs
        desc = tf.convert_to_tensor(self.descriptor_fn(final_obs, returns, lengths))
        if desc.shape.rank != 2 or desc.shape[0] != p or not desc.dtype.is_floating:
            raise ShapeError(
                f"descriptor_fn must return float32 [P={p}, k], got {desc.dtype.name} {desc.shape.as_list()}"
            )
        return fitness, returns, lengths, final_obs, tf.cast(desc, tf.float32)

    def _function(self, p: int, d: int, jit: bool, popsize: int | None = None):
        key = (p, d, jit) if popsize is None else (p, d, jit, popsize)
        if key not in self._fns:
            if popsize is None:
                fn, sig = self._rollout, [tf.TensorSpec([p, d], tf.float32)]
            else:
                def fn(params, offset):
                    return self._rollout(params, offset, popsize)
                sig = [tf.TensorSpec([p, d], tf.float32), tf.TensorSpec([], tf.int32)]
            self._fns[key] = tf.function(
                self._trace_counter.wrap("rollout", fn),
                input_signature=sig,
                jit_compile=jit,
                autograph=False,  # the loop is an explicit tf.while_loop
            )
        return self._fns[key]

    def _check_params(self, params) -> tf.Tensor:
        params = tf.convert_to_tensor(params)
        if not params.dtype.is_floating:
            raise ShapeError(f"params must be a float32 tensor [P, D], got dtype {params.dtype.name}")
        params = tf.cast(params, tf.float32)
        if params.shape.rank != 2 or params.shape[0] == 0:
            raise ShapeError(f"params must have shape [P, D] with P >= 1, got {params.shape.as_list()}")
        if self._num_params is not None and params.shape[1] != self._num_params:
            raise ShapeError(
                f"params must have shape [P, {self._num_params}] (the policy's parameter count), "
                f"got {params.shape.as_list()}"
            )
        return params

    def evaluate_episodes(self, params, member_offset: int | None = None,
                          popsize: int | None = None) -> EpisodeResult:
        """Rolls out every member; returns fitness, per-episode returns and lengths.

        Args:
          params: float32 ``[P, D]`` flat parameters of the population.
          member_offset, popsize: ``params`` are the rows ``[member_offset, member_offset + P)`` of a
            population of ``popsize`` members, evaluated in chunks in order (what
            :class:`~tfevo.rollout.GenomeEvaluator` does): each member starts from the states the
            whole population's call would give it, the chunk at offset 0 draws the call's seed and
            the others reuse it, so the chunks change no member's episodes.

        Returns:
          an :class:`EpisodeResult`.  Also sets ``last_frames``,
          ``last_returns`` and ``last_lengths``.
        """
        params = self._check_params(params)
        p, d = params.shape
        args = (params,)
        if member_offset is not None or popsize is not None:
            member_offset, popsize = int(member_offset), int(popsize)
            if not 0 <= member_offset <= popsize - p:
                raise ShapeError(f"member_offset={member_offset} with {p} members does not fit a population of "
                                 f"popsize={popsize}")
            args = (params, tf.constant(member_offset, tf.int32))
        start = time.perf_counter()
        jit = self.jit_compile
        if jit == "auto":
            try:
                out = self._function(p, d, True, popsize)(*args)
            except (tf.errors.InvalidArgumentError, tf.errors.UnimplementedError, tf.errors.NotFoundError) as e:
                if "XLA" not in str(e) and "compil" not in str(e).lower():
                    raise
                warnings.warn(
                    f"InGraphEvaluator: XLA could not compile the rollout ({str(e).splitlines()[0][:200]}); "
                    "using the plain graph instead",
                    RuntimeWarning,
                )
                self.jit_compile = False
                out = self._function(p, d, False, popsize)(*args)
        else:
            out = self._function(p, d, bool(jit), popsize)(*args)
        result = EpisodeResult(*out)
        self.last_returns = result.returns
        self.last_lengths = result.lengths
        lengths = result.lengths.numpy()
        self.last_frames = int(lengths.sum())
        object.__setattr__(self, "last_stats", dict(
            frames=self.last_frames,
            steps=int(lengths.max()),
            episodes=int(lengths.size),
            seconds=time.perf_counter() - start,
        ))
        return result

    def evaluate(self, params, member_offset: int | None = None, popsize: int | None = None):
        """Fitness ``float32 [P]``: mean return over ``episodes`` episodes (higher is better).

        With ``descriptor_fn``, returns ``(fitness, descriptors [P, k])``.  ``member_offset``,
        ``popsize``: a chunk of a population, see :meth:`evaluate_episodes`.
        """
        res = self.evaluate_episodes(params, member_offset, popsize)
        if self.descriptor_fn is None:
            return res.fitness
        return res.fitness, res.descriptors

    __call__ = evaluate
