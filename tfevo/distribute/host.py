"""Host simulators per replica: each replica drives its own pipelined evaluator.

:class:`HostShards` is an ``evaluate_fn`` for
:class:`~tfevo.distribute.DistributedEvaluator` that evaluates a replica's
shard with a host-side evaluator (normally a
:class:`tfevo.rollout.PipelinedEvaluator` over ale-py, MuJoCo or Gymnasium
simulators) owned by that replica, so every replica (GPU) keeps its own
simulators busy and runs its shard's inference on its own device.  Episode
seeds are derived from each member's layout-independent seed and handed to
the evaluator (``evaluate(params, episode_seeds=...)``), so results do not
depend on the replica count.

Example:

>>> from tfevo.distribute import DistributedEvaluator, make_strategy
>>> from tfevo.envs import make
>>> from tfevo.nn import Policy, PopulationModel, mlp
>>> from tfevo.rollout import PipelinedEvaluator
>>> strategy = make_strategy()
>>> spec = make("Swimmer-v5", 1)
>>> policy = Policy(PopulationModel(mlp(spec.observation_shape, 2, hidden=(8,))), spec.action_spec)
>>> shards = HostShards(lambda: PipelinedEvaluator("Swimmer-v5", policy, num_envs=4, episodes=1,
...                                                max_steps=20), episodes=1)
>>> ev = DistributedEvaluator(strategy, shards, seed=0)
>>> fitness = ev.evaluate(policy.init_params(8, seed=0))   # float32 [8] on every worker
>>> fitness.shape
TensorShape([8])
"""

from __future__ import annotations

import inspect
import threading
from typing import Callable

import numpy as np
import tensorflow as tf

from tfevo.core import ConfigError

__all__ = ["HostShards", "episode_seeds_from_member_seeds"]


def episode_seeds_from_member_seeds(seeds: np.ndarray, episodes: int) -> np.ndarray:
    """int64 ``[S, episodes]`` episode seeds in ``[0, 2**31 - 1)`` from member seeds ``int32 [S, 2]``.

    Each row depends only on that member's seed pair.
    """
    seeds = np.asarray(seeds, np.int64) & 0xFFFFFFFF
    out = np.empty((len(seeds), int(episodes)), np.int64)
    for i, (a, b) in enumerate(seeds):  # host side, S small integer draws (not a hot path)
        out[i] = np.random.default_rng([int(a), int(b)]).integers(0, 2**31 - 1, size=int(episodes))
    return out


def _takes_episode_seeds(evaluate) -> bool:
    try:
        return "episode_seeds" in inspect.signature(evaluate).parameters
    except (TypeError, ValueError):  # pragma: no cover - builtins without a signature
        return False


class HostShards:
    """Per-replica host evaluators behind one ``evaluate_fn``.

    Args:
      make_evaluator: ``() -> evaluator`` called once per local replica (the
        first time that replica evaluates).  The evaluator has
        ``evaluate(params [S, D], episode_seeds=None) -> fitness [S]`` (or
        ``(fitness, descriptors)`` if ``num_descriptors``), as
        :class:`tfevo.rollout.PipelinedEvaluator` has; ``episode_seeds`` is
        an integer ``[S, episodes]`` table derived from the members' own
        seeds.  (Evaluators whose ``evaluate`` takes no ``episode_seeds`` but
        that read their seeds from an ``episode_seeds(popsize, call=None)``
        method get that method replaced per call instead.)  An evaluator that
        updates running observation statistics is rejected: each replica
        would see only its own shard's observations, so the statistics --
        and the results -- would depend on the replica count.
      episodes: episodes per member of the evaluator (for the seed table).
      num_descriptors: k if the evaluator returns descriptors ``[S, k]``.
      report_frames: also return each member's environment frames (read from
        the evaluator's ``last_stats["member_steps"]`` times its
        ``frames_per_step``), so that
        :attr:`DistributedEvaluator.last_frames` counts every replica's
        frames on every worker.
      obs_norm: one :class:`tfevo.rollout.ObservationNormalizer` shared by
        every replica's evaluator (build them with ``obs_norm=<it>,
        update_obs_norm=False``).  During a call every replica normalizes
        with the statistics as they were at its start; each member's
        observation moments are then gathered with the fitness and merged in
        member order on every worker, so the statistics -- and the next
        generation -- are the same for any replica count.

    Attributes:
      evaluators: ``{replica id: evaluator}`` built so far on this worker.

    Calling it as ``fn(params [S, D], indices [S], seeds [S, 2])`` (inside
    ``strategy.run``) returns fitness ``float32 [S]``, ``(fitness,
    descriptors)`` with ``num_descriptors``, or with ``report_frames`` a dict
    with ``fitness``, ``frames`` and (if configured) ``descriptors``.
    """

    def __init__(self, make_evaluator: Callable, episodes: int = 1, num_descriptors: int = 0,
                 report_frames: bool = False, obs_norm=None):
        if not callable(make_evaluator):
            raise ConfigError(f"make_evaluator must be callable, got {type(make_evaluator).__name__}")
        if int(episodes) < 1:
            raise ConfigError(f"episodes must be >= 1, got {episodes}")
        if int(num_descriptors) < 0:
            raise ConfigError(f"num_descriptors must be >= 0, got {num_descriptors}")
        self.make_evaluator = make_evaluator
        self.episodes = int(episodes)
        self.num_descriptors = int(num_descriptors)
        self.report_frames = bool(report_frames)
        if obs_norm is not None and not callable(getattr(obs_norm, "merge", None)):
            raise ConfigError(f"obs_norm must be an ObservationNormalizer, got {type(obs_norm).__name__}")
        self.obs_norm = obs_norm
        self.evaluators: dict[int, object] = {}
        self._devices: list[str] = []
        self._last_moments: dict[int, tuple] = {}
        self._lock = threading.Lock()

    def _evaluator(self, replica: int):
        with self._lock:
            if replica not in self.evaluators:
                ev = self.make_evaluator()
                if not callable(getattr(ev, "evaluate", None)):
                    raise ConfigError(f"make_evaluator() must return an object with evaluate(), got {type(ev).__name__}")
                if getattr(ev, "obs_norm", None) is not None and getattr(ev, "update_obs_norm", False):
                    raise ConfigError(
                        "HostShards: the evaluator updates its own running observation statistics; "
                        "per-replica statistics would make results depend on the replica count. "
                        "Build it with update_obs_norm=False and pass the same normalizer as HostShards(obs_norm=...)")
                if self.obs_norm is not None and getattr(ev, "obs_norm", None) is not self.obs_norm:
                    raise ConfigError("HostShards(obs_norm=n): build every evaluator with obs_norm=n, "
                                      "update_obs_norm=False")
                if getattr(ev, "episodes", self.episodes) != self.episodes:
                    raise ConfigError(f"HostShards(episodes={self.episodes}) but the evaluator runs "
                                      f"{ev.episodes} episodes per member")
                self.evaluators[replica] = ev
            return self.evaluators[replica]

    def evaluate_shard(self, replica: int, params, indices, seeds, device: str | None = None):
        """Evaluates one replica's shard eagerly (what :class:`DistributedEvaluator` calls).

        Runs replica ``replica``'s evaluator on ``params [S, D]`` with episode
        seeds derived from ``seeds [S, 2]``, placing its TensorFlow work on
        ``device``.  Returns numpy fitness ``[S]``, ``(fitness, descriptors)``
        or, with ``report_frames``, a dict (see the class docstring).
        """
        res = self._host(replica, params, np.asarray(seeds), device)
        if not self.report_frames and self.obs_norm is None:
            return tuple(res) if self.num_descriptors else res[0]
        out = {"fitness": res[0]}
        if self.num_descriptors:
            out["descriptors"] = res[1]
        if self.report_frames:
            out["frames"] = res[2 if self.num_descriptors else 1]
        if self.obs_norm is not None:
            count, mean, m2 = self._last_moments[int(replica)]
            out.update(aux_obs_count=count, aux_obs_mean=mean, aux_obs_m2=m2)
        return out

    def after_gather(self, aux: dict) -> None:
        """Merges the gathered per-member observation moments ``[P, ...]`` (member order) into ``obs_norm``.

        Called by :class:`DistributedEvaluator` on every worker after each
        call; the merge is one vectorized reduction over members in a fixed
        order, so every worker and every layout ends with the same bits.
        """
        if self.obs_norm is None:
            return
        n = np.asarray(aux["obs_count"], np.float64)
        mean = np.asarray(aux["obs_mean"], np.float64)
        m2 = np.asarray(aux["obs_m2"], np.float64)
        total = float(n.sum())
        if total <= 0:
            return
        w = n.reshape(-1, *([1] * (mean.ndim - 1)))
        mu = (w * mean).sum(axis=0) / total
        s2 = m2.sum(axis=0) + (w * (mean - mu) ** 2).sum(axis=0)
        self.obs_norm.merge(total, mu, s2)

    def _host(self, replica, params, seeds, device=None):
        replica = int(replica)
        ev = self._evaluator(replica)
        table = episode_seeds_from_member_seeds(seeds, self.episodes)
        if device is None and self._devices:
            device = self._devices[replica % len(self._devices)]
        with tf.device(device):
            if self.obs_norm is not None:
                out = ev.evaluate(params, episode_seeds=table, obs_moments=True)
                self._last_moments[replica] = ev.last_stats["member_obs_moments"]
            elif _takes_episode_seeds(ev.evaluate):
                out = ev.evaluate(params, episode_seeds=table)
            else:
                if hasattr(ev, "episode_seeds"):
                    object.__setattr__(ev, "episode_seeds", lambda popsize, call=None: table[:popsize])
                out = ev.evaluate(params)
        if self.num_descriptors:
            fit, desc = out
            res = [np.asarray(fit, np.float32), np.asarray(desc, np.float32)]
        else:
            res = [np.asarray(out[0] if isinstance(out, (tuple, list)) else out, np.float32)]
        if self.report_frames:
            stats = getattr(ev, "last_stats", None) or {}
            steps = stats.get("member_steps")
            if steps is None:
                raise ConfigError(f"report_frames=True needs an evaluator whose last_stats has 'member_steps' "
                                  f"(as PipelinedEvaluator), got {type(ev).__name__}")
            res.append(np.asarray(steps, np.int64) * int(getattr(ev, "frames_per_step", 1)))
        return res

    def __call__(self, params, indices, seeds):
        """In-graph entry point (``tf.numpy_function``); :class:`DistributedEvaluator` uses
        :meth:`evaluate_shard` instead, outside the graph, one thread per local replica."""
        ctx = tf.distribute.get_replica_context()
        if ctx is not None and not self._devices and tf.distribute.has_strategy():
            self._devices = list(ctx.strategy.extended.worker_devices)
        replica = ctx.replica_id_in_sync_group if ctx is not None else 0
        replica = tf.cast(replica, tf.int32)
        s = params.shape[0]
        types = [tf.float32] + ([tf.float32] if self.num_descriptors else []) + (
            [tf.int64] if self.report_frames else [])
        outs = tf.numpy_function(self._host, [replica, params, seeds], types, stateful=True)
        if not isinstance(outs, (list, tuple)):
            outs = [outs]
        fit = tf.ensure_shape(outs[0], [s])
        if not self.report_frames:
            return (fit, tf.ensure_shape(outs[1], [s, self.num_descriptors])) if self.num_descriptors else fit
        res = {"fitness": fit}
        if self.num_descriptors:
            res["descriptors"] = tf.ensure_shape(outs[1], [s, self.num_descriptors])
        if self.report_frames:
            res["frames"] = tf.ensure_shape(outs[-1], [s])
        return res
