"""The pipelined evaluator: host simulators and TensorFlow inference at the same time.

:class:`PipelinedEvaluator` evaluates a population of flat parameter vectors
``[P, D]`` on a :class:`~tfevo.envs.base.HostVectorEnv` (Atari through
ale-py, batched MuJoCo, any Gymnasium env) and returns fitness ``[P]``
(higher is better: the sum of rewards of an episode, averaged over
``episodes``).

How it schedules (after Such et al., "Accelerating deep neuroevolution"):

* the simulator slots are split into ``K = num_subsets`` groups, each with
  its own host env of ``num_envs // K`` slots;
* the groups take turns: *receive* the group's step results, add rewards,
  retire members whose episode ended (or hit ``max_steps``), *refill* freed
  slots with (member, episode) jobs still waiting (resetting those slots with
  the job's seed), run the policy *only for the group's active slots*, and
  *send* the actions -- then move to the next group.  While group ``k``'s
  simulators step on native threads, group ``k+1``'s forward pass runs in
  TensorFlow;
* a population larger than the slots streams through them;
* ``K = 1`` is the plain serial "step all, then infer all" loop.

Where the env makes each job's episode a pure function of the member's
parameters and the job's seed (``episode_seeds``), fitness does not depend
on ``K``, on the number of slots or on which slot ran which job: the
pipelined result equals a one-member-at-a-time reference loop exactly.
Atari's default fast seed mode does not in every game (see
:mod:`tfevo.envs.atari`, "Seeding").

The forward pass is one ``tf.function`` over ``(params [P, D], obs [n, 1, ...],
indices [n])``; ``n`` (the number of active slots) varies, so it is padded to
a few bucket sizes (powers of two) -- one trace/compile per bucket, never one
per ``n``.

Example:

>>> from tfevo.envs import make
>>> from tfevo.nn import Policy, PopulationModel, nature_dqn
>>> env = make("ALE/Frostbite-v5", num_envs=1)
>>> policy = Policy(PopulationModel(nature_dqn(env.action_spec.num_actions)), env.action_spec)
>>> ev = PipelinedEvaluator("ALE/Frostbite-v5", policy, num_envs=4, num_subsets=2,
...                         max_steps=10, seed=0)
>>> fitness = ev.evaluate(policy.init_params(8, seed=0))   # float32 [8]
>>> ev.last_stats["frames"] > 0                            # emulator frames used
True
"""

from __future__ import annotations

import time
from typing import Any, Callable

import numpy as np
import tensorflow as tf

from tfevo import registry
from tfevo.core import ConfigError, ShapeError, check_seed, sanitize_fitness
from tfevo.envs.base import HostVectorEnv
from tfevo.rollout._inference import InferenceStep, _bucket_sizes
from tfevo.rollout._limits import check_max_steps, host_limit, host_limit_kwargs, limit_too_short
from tfevo.rollout.ingraph import check_policy_inputs
from tfevo.rollout.normalization import ObservationNormalizer, batch_moments, merge_moments

__all__ = ["PipelinedEvaluator"]


def _merge_episode_moments(job_mom, P: int, E: int, shape) -> tuple:
    """Per-member (count, mean, m2) from per-job moments, merging episodes 0, 1, ... in order."""
    c, m, m2 = (a.reshape(P, E, *a.shape[1:]) for a in job_mom)
    n, mean, s2 = c[:, 0].copy(), m[:, 0].copy(), m2[:, 0].copy()
    for e in range(1, E):  # episodes per member (a handful), vectorized over members
        nb = c[:, e]
        tot = n + nb
        w = np.divide(nb, tot, out=np.zeros_like(tot), where=tot > 0)[:, None]
        delta = m[:, e] - mean
        mean = mean + delta * w
        s2 = s2 + m2[:, e] + delta * delta * (n * w[:, 0])[:, None]
        n = tot
    return n, mean.reshape(P, *shape), s2.reshape(P, *shape)


@registry.register("evaluator", "pipelined", doc="Pipelined host-simulator evaluator (K subsets, active-slot inference)")
class PipelinedEvaluator(InferenceStep, tf.Module):
    """Evaluates populations on host simulators with pipelined inference.

    Args:
      env: a Gymnasium/tfevo env id (``"ALE/Pong-v5"``, ``"HalfCheetah-v5"``,
        ``"CartPole-v1"``, ...), or a callable ``env_fn(num_slots) ->
        HostVectorEnv`` (called once per subset).
      policy: object with ``forward(params, obs [n, B, *obs], indices [n])
        -> actions [n, B, ...]`` (a :class:`tfevo.nn.Policy`).  If it has
        ``prepare(params [P, D])`` that is called once per evaluation and its
        result is what ``forward`` receives (``Policy.prepare`` keeps the
        flat parameters when the C++ ops can read the active members'
        weights in place from them, else splits them into per-layer tensors
        once).  For discrete envs a float
        output with last axis ``num_actions`` is read as logits and
        argmax'ed; continuous actions are clipped to the env's bounds.
      num_envs: total number of simulator slots (split evenly over subsets).
      num_subsets: ``K``; 1 = serial, >= 2 = pipelined.
      episodes: episodes per member (fitness = mean return).
      max_steps: the episode's time limit in agent steps (``None``: the
        env's own limit; an env without one is a ConfigError).  It replaces
        the env's default limit, above or below it, as
        ``gym.make(id, max_episode_steps=N)`` does: an env given by id is
        made with ``max_episode_steps=max_steps`` (Atari: with a frame limit
        of at least ``(max_steps + noop_max) * frameskip``).  A limit set
        explicitly in ``env_kwargs`` or by an ``env_fn`` is kept, and
        ``max_steps`` above it is a ConfigError.  See ``docs/pipeline.md``,
        "Episode length".
      seed: base seed of the episode seeds.
      obs_norm: optional :class:`ObservationNormalizer` (or ``True`` to make
        one); observations are normalized with the statistics as they were
        at the start of the call, and the statistics are then updated with
        the observations this call fed to the policy (``update_obs_norm``).
      descriptors: also return behaviour descriptors ``[P, k]`` (mean over
        episodes of ``env.descriptors``).
      env_kwargs: keyword arguments for ``tfevo.envs.make``.
      bucket: ``"pow2"`` (pad active rows to powers of two), ``"full"``
        (always all slots, masked) or ``"none"`` (exact ``n``).
      jit_compile: XLA-compile the forward pass.
      obs_scale: multiply observations by this in the graph (default:
        ``1/255`` for uint8 frames unless the policy has its own
        ``preprocess``, else 1).
      common_seeds: all members use the same episode seeds (common random
        numbers) instead of one seed per (member, episode).
      inline_forward: run each step's forward graph with TensorFlow's
        single-threaded graph executor, called without the Python
        function-call layers: its ops run one after the other on one
        inter-op thread (TensorFlow hands every function call to one), so a
        step costs one thread hand-off instead of one per op; same results,
        less per-step overhead.  Falls back to the ordinary call (``forward_executor`` says
        which ran) if the graph or the TensorFlow version does not allow it.

    A *recurrent* policy (``policy.state_shape`` not None, e.g. a recurrent
    :class:`tfevo.neat.NEATPolicy`) gets its state carried per simulator
    slot: ``forward_state(params, obs [n, 1, *obs], state [n, 1,
    *state_shape], indices [n]) -> (actions, new_state)``, with the state
    set to zeros whenever a slot starts a new episode.

    Attributes:
      last_stats: dict of the last call: ``frames``, ``steps``,
        ``member_steps`` (int64 ``[P]``, agent steps of each member over its
        episodes), ``seconds``,
        ``forward_rows`` (rows the policy actually computed, before padding),
        ``padded_rows``, ``forward_calls``, and where the time went:
        ``forward_seconds`` (inference), ``recv_seconds`` (waiting for
        simulators), ``reset_seconds``, ``prepare_seconds``.
      calls: ``tf.Variable`` counting calls; episode seeds depend on it.  The
        evaluator is a ``tf.Module``: ``tf.train.Checkpoint(evaluator=ev)``
        saves ``calls`` and the observation normalizer, so a restored run
        continues with the same seeds and statistics.
    """

    def __init__(
        self,
        env: str | Callable[[int], HostVectorEnv],
        policy: Any,
        num_envs: int,
        num_subsets: int = 2,
        episodes: int = 1,
        max_steps: int | None = None,
        seed: int = 0,
        obs_norm: ObservationNormalizer | bool | None = None,
        descriptors: bool = False,
        *,
        env_kwargs: dict | None = None,
        bucket: str = "pow2",
        jit_compile: bool = False,
        obs_scale: float | None = None,
        common_seeds: bool = False,
        update_obs_norm: bool = True,
        inline_forward: bool = True,
    ):
        super().__init__(name="pipelined_evaluator")
        if not hasattr(policy, "forward"):
            raise ConfigError("policy must have a forward(params, obs, indices) method")
        state_shape = getattr(policy, "state_shape", None)
        if state_shape is not None and not callable(getattr(policy, "forward_state", None)):
            raise ConfigError(
                f"{type(policy).__name__} has a state_shape (a recurrent policy) but no "
                "forward_state(params, obs, state, indices) -> (actions, state) method"
            )
        self.state_shape = None if state_shape is None else tuple(int(d) for d in state_shape)
        num_envs, num_subsets, episodes = int(num_envs), int(num_subsets), int(episodes)
        if num_subsets < 1:
            raise ConfigError(f"num_subsets must be >= 1, got {num_subsets}")
        if num_envs < num_subsets:
            raise ConfigError(f"num_envs ({num_envs}) must be >= num_subsets ({num_subsets})")
        if episodes < 1:
            raise ConfigError(f"episodes must be >= 1, got {episodes}")
        max_steps = check_max_steps(max_steps)
        if bucket not in ("pow2", "full", "none"):
            raise ConfigError(f"bucket must be 'pow2', 'full' or 'none', got {bucket!r}")
        seed = check_seed(seed)
        self.policy = policy
        self.num_subsets = num_subsets
        self.episodes = episodes
        self.max_steps = max_steps
        self.seed = int(seed)
        self.want_descriptors = bool(descriptors)
        self.common_seeds = bool(common_seeds)
        self.bucket = bucket
        self.jit_compile = bool(jit_compile)
        self.update_obs_norm = bool(update_obs_norm)
        self.calls = tf.Variable(0, dtype=tf.int64, trainable=False, name="calls")

        # One host env per subset; slots split as evenly as possible.
        sizes = [num_envs // num_subsets + (1 if k < num_envs % num_subsets else 0) for k in range(num_subsets)]
        # max_steps replaces the env's default time limit (see tfevo.rollout._limits)
        kwargs = host_limit_kwargs(env, max_steps, env_kwargs or {}) if isinstance(env, str) else env_kwargs or {}
        self.envs = [self._make_env(env, s, kwargs) for s in sizes]
        e0 = self.envs[0]
        self.env_id = getattr(e0, "env_id", str(env))
        self.observation_shape = tuple(e0.observation_shape)
        try:
            self._check_limit(e0)
            check_policy_inputs(policy, self.observation_shape, self.env_id)
        except (ShapeError, ConfigError):
            for e in self.envs:
                e.close()
            raise
        self.observation_dtype = np.dtype(getattr(e0, "observation_dtype", np.float32))
        self.action_spec = e0.action_spec
        self.frames_per_step = int(getattr(e0, "frames_per_step", 1))
        self.num_envs = num_envs
        if obs_scale is None:  # a policy with its own preprocess() scales frames itself
            own = hasattr(policy, "preprocess") and obs_norm is None
            obs_scale = 1.0 / 255.0 if (self.observation_dtype == np.uint8 and not own) else 1.0
        self.obs_scale = float(obs_scale)
        if obs_norm is True:
            obs_norm = ObservationNormalizer(self.observation_shape)
        if obs_norm is not None and tuple(obs_norm.shape) != self.observation_shape:
            raise ShapeError(
                f"obs_norm has shape {tuple(obs_norm.shape)} but the env's observations are {self.observation_shape}"
            )
        self.obs_norm = obs_norm or None
        self._buckets = {k: _bucket_sizes(s, bucket) for k, s in enumerate(sizes)}
        self._forward_fn = None
        self._num_dims = None
        self._member_tensors: dict = {}
        self.inline_forward = bool(inline_forward)
        self.forward_executor = None
        self.traces = 0
        self.last_stats: dict = {}

    # -- construction helpers -------------------------------------------------
    def _check_limit(self, env) -> None:
        """Refuses a ``max_steps`` the env's own time limit would cut short, and ``max_steps=None``
        on an env without a limit."""
        own = host_limit(env)
        if self.max_steps is None and own == 0:
            raise ConfigError(
                f"max_steps=None asks for the environment's own episode limit, but {self.env_id} has none; "
                "pass max_steps >= 1")
        if self.max_steps is not None and own and own < self.max_steps:
            raise limit_too_short(self.max_steps, f"the {self.env_id} env truncates every episode after {own} agent "
                                  "steps", f"make it with a limit >= {self.max_steps}", own)

    @staticmethod
    def _make_env(env, n: int, kwargs: dict) -> HostVectorEnv:
        if callable(env) and not isinstance(env, str):
            e = env(n)
        elif isinstance(env, str):
            from tfevo import envs as envs_mod

            e = envs_mod.make(env, num_envs=n, **kwargs)
            if not isinstance(e, HostVectorEnv):
                # An in-graph env: the pipelined evaluator needs a host env;
                # fall back to Gymnasium's implementation of the same id and options.
                from tfevo.envs.gym import GymVectorEnv

                make_kwargs, reset_options = envs_mod.gymnasium_twin(env, kwargs)
                e = GymVectorEnv(env, num_envs=n, reset_options=reset_options, **make_kwargs)
        else:
            raise ConfigError(f"env must be an env id or a callable env_fn(num_slots), got {env!r}")
        if not isinstance(e, HostVectorEnv):
            raise ConfigError(f"env_fn must return a HostVectorEnv, got {type(e).__name__}")
        if int(e.num_envs) != n:
            raise ConfigError(f"env_fn({n}) returned an env with {e.num_envs} slots")
        return e

    # -- seeds ----------------------------------------------------------------
    def episode_seeds(self, popsize: int, call: int | None = None) -> np.ndarray:
        """The int seeds ``[P, episodes]`` used by call number ``call`` (default: the next)."""
        call = int(self.calls.numpy()) if call is None else int(call)
        rng = np.random.default_rng([self.seed, call])
        if self.common_seeds:
            return np.broadcast_to(rng.integers(0, 2**31 - 1, size=(1, self.episodes)), (popsize, self.episodes)).copy()
        return rng.integers(0, 2**31 - 1, size=(popsize, self.episodes))

    # -- evaluation -----------------------------------------------------------
    def evaluate(self, params, episode_seeds=None, obs_moments: bool = False):
        """Fitness ``float32 [P]`` of the population ``params [P, D]``.

        With ``descriptors=True`` returns ``(fitness, descriptors [P, k])``.
        Statistics of the call (frames, steps, time, rows forwarded) are in
        ``last_stats``.

        Args:
          params: float ``[P, D]``.
          episode_seeds: optional integer ``[P, episodes]`` seeds in
            ``[0, 2**31 - 1)`` that replace this call's :meth:`episode_seeds`
            (member ``i``'s episode ``e`` starts from seed
            ``episode_seeds[i, e]``).  A caller that owns the seeds (e.g.
            :class:`tfevo.distribute.HostShards`, whose seeds depend only on
            each member's global index) gets results independent of how the
            population was split over evaluators.  ``calls`` still advances.
          obs_moments: also collect each member's observation moments
            ``(count [P], mean [P, *obs], m2 [P, *obs])`` (float64) of the
            observations fed to its policy, in ``last_stats["member_obs_moments"]``.
            They are accumulated per episode in time order and merged over
            the member's episodes in order, so they do not depend on slots,
            subsets or the other members (what
            :class:`tfevo.distribute.HostShards` needs to keep one set of
            statistics across replicas).  Costs ``2 * P * episodes * prod(obs)``
            float64 of memory: meant for vector observations.
        """
        params = tf.convert_to_tensor(params)
        if params.shape.rank != 2 or not params.dtype.is_floating:
            raise ShapeError(f"params must be a float tensor [P, D], got {params.dtype.name} {params.shape.as_list()}")
        params_t = tf.cast(params, tf.float32)
        P, D = int(params_t.shape[0]), int(params_t.shape[1])
        if P < 1:
            raise ShapeError("params must hold at least one member")
        if episode_seeds is not None:
            episode_seeds = np.asarray(episode_seeds)
            if episode_seeds.shape != (P, self.episodes) or episode_seeds.dtype.kind not in "iu":
                raise ShapeError(f"episode_seeds must be integer [{P}, {self.episodes}] (members x episodes), "
                                 f"got {episode_seeds.dtype.name} {list(episode_seeds.shape)}")
            if episode_seeds.size and (episode_seeds.min() < 0 or episode_seeds.max() >= 2**31 - 1):
                raise ShapeError("episode_seeds must lie in [0, 2**31 - 1)")
        t_prep = time.perf_counter()
        prepared = self._prepare(params_t)
        key = tuple((tuple(t.shape), t.dtype) for t in tf.nest.flatten(prepared))
        if self._forward_fn is None or self._num_dims != key:
            self._forward_fn = self._build_forward(prepared)
            self._num_dims = key
        E = self.episodes
        seeds = self.episode_seeds(P) if episode_seeds is None else episode_seeds.astype(np.int64)
        jobs_member = np.repeat(np.arange(P, dtype=np.int32), E)
        jobs_seed = seeds.reshape(-1)
        n_jobs = P * E
        returns = np.zeros(n_jobs, np.float64)
        steps = np.zeros(n_jobs, np.int64)
        desc_sum = None
        next_job = 0
        norm_acc = (0.0, np.zeros(self.observation_shape), np.zeros(self.observation_shape)) if (
            self.obs_norm is not None and self.update_obs_norm
        ) else None
        obs_dim = int(np.prod(self.observation_shape))
        job_mom = (np.zeros(n_jobs), np.zeros((n_jobs, obs_dim)), np.zeros((n_jobs, obs_dim))) if obs_moments else None
        stats = dict(forward_rows=0, padded_rows=0, forward_calls=0, forward_seconds=0.0, recv_seconds=0.0,
                     reset_seconds=0.0)
        t0 = time.perf_counter()
        stats["prepare_seconds"] = t0 - t_prep

        K = self.num_subsets
        slot_job = [np.full(e.num_envs, -1, np.int64) for e in self.envs]
        slot_obs = [np.zeros((e.num_envs, *self.observation_shape), self.observation_dtype) for e in self.envs]
        slot_state = None if self.state_shape is None else [
            np.zeros((e.num_envs, *self.state_shape), np.float32) for e in self.envs]
        pending = [False] * K
        active_cache = [None] * K  # per subset: (active slots, all slots active?, their members)
        done_jobs = 0

        def refill_and_send(k):
            nonlocal next_job
            env, sj, so = self.envs[k], slot_job[k], slot_obs[k]
            free = np.flatnonzero(sj < 0)
            take = min(free.size, n_jobs - next_job)
            if take > 0:
                slots = free[:take]
                jobs = np.arange(next_job, next_job + take)
                next_job += take
                tr = time.perf_counter()
                so[slots] = env.reset(slots, jobs_seed[jobs])
                stats["reset_seconds"] += time.perf_counter() - tr
                sj[slots] = jobs
                if slot_state is not None:  # a new episode starts from the zero state
                    slot_state[k][slots] = 0.0
            # The active slots (and their members) change only when an episode ends or a
            # slot is refilled: between those steps the previous arrays are reused.
            cached = active_cache[k]
            if cached is None or take > 0:
                active = np.flatnonzero(sj >= 0)
                cached = active_cache[k] = (active, active.size == sj.size, jobs_member[sj[active]])
            active, full, members = cached
            if active.size == 0:
                pending[k] = False
                return
            obs = so if full else so[active]
            if norm_acc is not None:
                nonlocal_acc[0] = merge_moments(nonlocal_acc[0], batch_moments(obs, self.observation_shape))
            if job_mom is not None:  # per-job Welford step (each active job appears once)
                rows, x = sj[active], obs.reshape(active.size, obs_dim).astype(np.float64)
                job_mom[0][rows] += 1.0
                delta = x - job_mom[1][rows]
                job_mom[1][rows] += delta / job_mom[0][rows][:, None]
                job_mom[2][rows] += delta * (x - job_mom[1][rows])
            if slot_state is None:
                actions = self._forward(prepared, k, obs, members, stats)
            else:
                actions, slot_state[k][active] = self._forward(prepared, k, obs, members, stats,
                                                               slot_state[k][active])
            env.send(actions, active)
            pending[k] = True

        nonlocal_acc = [norm_acc]
        for k in range(K):
            refill_and_send(k)
        while done_jobs < n_jobs:
            progressed = False
            for k in range(K):
                if not pending[k]:
                    continue
                progressed = True
                env, sj, so = self.envs[k], slot_job[k], slot_obs[k]
                tr = time.perf_counter()
                idx, obs, rew, term, trunc = env.recv()
                stats["recv_seconds"] += time.perf_counter() - tr
                jobs = sj[idx]
                returns[jobs] += rew
                steps[jobs] += 1
                finished = np.asarray(term, bool) | np.asarray(trunc, bool)
                if self.max_steps is not None:
                    finished |= steps[jobs] >= self.max_steps
                so[idx] = obs
                if finished.any():
                    fin_slots = idx[finished]
                    if self.want_descriptors:
                        d = env.descriptors(fin_slots)
                        if d is None:
                            raise ConfigError(
                                f"descriptors=True but env {self.env_id!r} provides no behaviour descriptors"
                            )
                        d = np.asarray(d, np.float64).reshape(fin_slots.size, -1)
                        if desc_sum is None:
                            desc_sum = np.zeros((P, d.shape[1]), np.float64)
                        np.add.at(desc_sum, jobs_member[sj[fin_slots]], d)
                    sj[fin_slots] = -1
                    active_cache[k] = None
                    done_jobs += int(finished.sum())
                refill_and_send(k)
            if not progressed:  # pragma: no cover - defensive
                raise RuntimeError("pipelined evaluator stalled with unfinished jobs")

        seconds = time.perf_counter() - t0
        self.calls.assign_add(1)
        if nonlocal_acc[0] is not None and nonlocal_acc[0][0] > 0:
            self.obs_norm.merge(*nonlocal_acc[0])
        total_steps = int(steps.sum())
        self.last_stats = dict(
            stats,
            steps=total_steps,
            frames=total_steps * self.frames_per_step,
            seconds=seconds,
            steps_per_second=total_steps / max(seconds, 1e-9),
            member_steps=steps.reshape(P, E).sum(axis=1),
        )
        if job_mom is not None:
            self.last_stats["member_obs_moments"] = _merge_episode_moments(job_mom, P, E, self.observation_shape)
        fitness = returns.reshape(P, E).mean(axis=1)
        fitness = sanitize_fitness(tf.constant(fitness, tf.float32))
        if self.want_descriptors:
            return fitness, tf.constant(desc_sum / E, tf.float32)
        return fitness

    __call__ = evaluate

    def close(self) -> None:
        """Closes the subsets' environments."""
        for e in self.envs:
            e.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
