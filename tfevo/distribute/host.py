"""Host simulators per replica: each replica drives its own pipelined evaluator.

:class:`HostShards` is an ``evaluate_fn`` for
:class:`~tfevo.distribute.DistributedEvaluator` that evaluates a replica's
shard with a host-side evaluator (e.g. :class:`tfevo.rollout.PipelinedEvaluator`
over ale-py or MuJoCo simulators) owned by that replica, so every replica (GPU)
keeps its own simulators busy.  Episode seeds are derived from each member's
layout-independent seed, so results do not depend on the replica count.

Example:

>>> from tfevo.rollout import PipelinedEvaluator
>>> shards = HostShards(lambda: PipelinedEvaluator("CartPole-v1", policy, num_envs=32, episodes=2),
...                     episodes=2)
>>> ev = DistributedEvaluator(strategy, shards, seed=0)
>>> fitness = ev.evaluate(params)
"""

from __future__ import annotations

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


class HostShards:
    """Per-replica host evaluators behind one ``evaluate_fn``.

    Args:
      make_evaluator: ``() -> evaluator`` called once per local replica; the
        evaluator has ``evaluate(params [S, D]) -> fitness [S]`` (or
        ``(fitness, descriptors)`` if ``num_descriptors``), and, to be
        replica-count invariant, an ``episode_seeds(popsize, call=None)``
        method it uses for its episodes (as :class:`tfevo.rollout.PipelinedEvaluator`
        has) -- it is overridden per call with seeds derived from the members'.
      episodes: episodes per member of the evaluator (for the seed table).
      num_descriptors: k if the evaluator returns descriptors ``[S, k]``.
    """

    def __init__(self, make_evaluator: Callable, episodes: int = 1, num_descriptors: int = 0):
        if not callable(make_evaluator):
            raise ConfigError(f"make_evaluator must be callable, got {type(make_evaluator).__name__}")
        if int(episodes) < 1:
            raise ConfigError(f"episodes must be >= 1, got {episodes}")
        self.make_evaluator = make_evaluator
        self.episodes = int(episodes)
        self.num_descriptors = int(num_descriptors)
        self.evaluators: dict[int, object] = {}
        self._lock = threading.Lock()

    def _evaluator(self, replica: int):
        with self._lock:
            if replica not in self.evaluators:
                self.evaluators[replica] = self.make_evaluator()
            return self.evaluators[replica]

    def _host(self, replica, params, seeds):
        ev = self._evaluator(int(replica))
        table = episode_seeds_from_member_seeds(seeds, self.episodes)
        if hasattr(ev, "episode_seeds"):
            object.__setattr__(ev, "episode_seeds", lambda popsize, call=None: table[:popsize])
        out = ev.evaluate(params)
        if self.num_descriptors:
            fit, desc = out
            return np.asarray(fit, np.float32), np.asarray(desc, np.float32)
        return np.asarray(out, np.float32)

    def __call__(self, params, indices, seeds):
        ctx = tf.distribute.get_replica_context()
        replica = ctx.replica_id_in_sync_group if ctx is not None else 0
        replica = tf.cast(replica, tf.int32)
        s = params.shape[0]
        if self.num_descriptors:
            fit, desc = tf.numpy_function(self._host, [replica, params, seeds], [tf.float32, tf.float32],
                                          stateful=True)
            return tf.ensure_shape(fit, [s]), tf.ensure_shape(desc, [s, self.num_descriptors])
        fit = tf.numpy_function(self._host, [replica, params, seeds], tf.float32, stateful=True)
        return tf.ensure_shape(fit, [s])
