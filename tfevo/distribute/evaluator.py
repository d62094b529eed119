"""Population sharding over the replicas of a ``tf.distribute.Strategy``.

:class:`DistributedEvaluator` evaluates a population (any nest of tensors with
a leading population axis ``P``: flat parameters ``[P, D]``, SeedGA seed lists
``int32 [P, L]``, NEAT ``(nodes, conns)``) across every replica of a strategy:

1. ``P`` is padded to ``R * S`` (``R`` replicas, shard size ``S = ceil(P / R)``);
   padding rows repeat real members (row ``i`` is member ``i mod P``) and are
   dropped afterwards, so they never reach the algorithm.
2. Replica ``r`` receives the contiguous rows ``[r S, (r + 1) S)`` on its own
   device (``experimental_distribute_values_from_function``); an optional
   ``decode_fn`` (e.g. ``SeedGA.decode``) turns that shard's compact genomes
   into parameters *on the replica*, so only ``S`` rows are ever materialized
   there.
3. ``strategy.run`` evaluates each shard; the shards' results are concatenated
   in replica order (an all-gather, ``strategy.gather``, under
   ``MultiWorkerMirroredStrategy``), so the full fitness vector is on every
   worker, which then calls ``tell`` itself.  The algorithm is
   deterministic given (state, population, fitness), so every worker keeps an
   identical state without ever broadcasting it.

Replica-count invariance: the evaluation function receives, besides its shard,
the *global* member indices and one ``int32 [2]`` seed per member derived only
from the call's seed and the member's global index.  A member's fitness thus
depends on (call seed, member index, genome), never on the shard layout, so a
fixed-seed run gives the same result on 1 CPU, 4 logical CPUs, 8 GPUs or 2
machines.

Example:

>>> import tensorflow as tf
>>> from tfevo.distribute import make_strategy
>>> from tfevo.strategies import OpenES
>>> strategy = make_strategy()                             # TF_CONFIG / GPUs / CPU
>>> def fn(params, indices, seeds):                        # one replica's shard
...     return -tf.reduce_sum(params ** 2, axis=1)
>>> ev = DistributedEvaluator(strategy, fn, seed=0)
>>> es = OpenES(num_dims=5, popsize=16, seed=0)
>>> fitness = ev.evaluate(es.ask())                        # float32 [P] on every worker
>>> fitness.shape
TensorShape([16])
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

import numpy as np
import tensorflow as tf

from tfevo._tf_private import in_multi_worker_mode
from tfevo.core import ConfigError, SeedStream, ShapeError, TraceCounter

__all__ = ["DistributedEvaluator", "member_seeds", "shard_layout"]


def member_seeds(call_seed, indices, popsize: int) -> tf.Tensor:
    """Per-member stateless seeds ``int32 [n, 2]`` for global ``indices``.

    Depends only on ``call_seed`` (``int32 [2]``), the member's global index and
    ``popsize``, never on how the population is split, so every shard layout
    gives every member the same seed.
    """
    table = tf.random.stateless_uniform([int(popsize), 2], seed=call_seed, minval=None, maxval=None,
                                        dtype=tf.int32)
    return tf.gather(table, tf.math.floormod(tf.cast(indices, tf.int32), int(popsize)))


def shard_layout(popsize: int, num_replicas: int) -> tuple[int, int]:
    """``(shard_size, padded_popsize)`` for ``popsize`` members on ``num_replicas`` replicas."""
    if int(popsize) < 1 or int(num_replicas) < 1:
        raise ConfigError(f"popsize and num_replicas must be >= 1, got {popsize}, {num_replicas}")
    s = int(math.ceil(int(popsize) / int(num_replicas)))
    return s, s * int(num_replicas)


def _check_outputs(out, s: int) -> dict:
    """``evaluate_fn``'s result as ``{"fitness": [S], "descriptors"?: [S, k], "frames"?: [S]}``."""
    frames, aux = None, {}
    if isinstance(out, dict):
        unknown = {k for k in out if not k.startswith("aux_")} - {"fitness", "descriptors", "frames"}
        if "fitness" not in out or unknown:
            raise ShapeError("a dict from evaluate_fn needs 'fitness' and may have 'descriptors', 'frames' and "
                             f"'aux_*' entries, got keys {sorted(out)}")
        fit, desc, frames = out["fitness"], out.get("descriptors"), out.get("frames")
        aux = {k: tf.convert_to_tensor(v) for k, v in out.items() if k.startswith("aux_")}
    elif isinstance(out, (tuple, list)):
        if len(out) != 2:
            raise ShapeError("evaluate_fn must return fitness [S] or (fitness [S], descriptors [S, k])")
        fit, desc = out
    else:
        fit, desc = out, None
    fit = tf.cast(tf.convert_to_tensor(fit), tf.float32)
    if fit.shape.as_list() != [s]:
        raise ShapeError(f"evaluate_fn must return fitness of shape [{s}] for a shard of {s} members, "
                         f"got {fit.shape.as_list()}")
    res = {"fitness": fit}
    if desc is not None:
        desc = tf.cast(tf.convert_to_tensor(desc), tf.float32)
        if desc.shape.rank != 2 or desc.shape[0] != s:
            raise ShapeError(f"descriptors must have shape [{s}, k], got {desc.shape.as_list()}")
        res["descriptors"] = desc
    if frames is not None:
        frames = tf.cast(tf.convert_to_tensor(frames), tf.int64)
        if frames.shape.as_list() != [s]:
            raise ShapeError(f"frames must have shape [{s}], got {frames.shape.as_list()}")
        res["frames"] = frames
    for k, v in aux.items():
        if v.shape.rank < 1 or v.shape[0] != s:
            raise ShapeError(f"{k} must have a leading axis of {s} members, got {v.shape.as_list()}")
        res[k] = v
    return res


def _local_device(strategy, replica_id) -> str:
    devices = strategy.extended.worker_devices
    return devices[int(replica_id) % len(devices)]


class DistributedEvaluator(tf.Module):
    """Evaluates a population sharded over the replicas of a ``tf.distribute.Strategy``.

    Args:
      strategy: a ``tf.distribute.Strategy`` (``MirroredStrategy`` over GPUs
        or logical CPUs, ``MultiWorkerMirroredStrategy``, ``OneDeviceStrategy``);
        ``None`` uses :func:`tfevo.distribute.make_strategy`.
      evaluate_fn: ``(shard, indices int32 [S], seeds int32 [S, 2]) ->
        fitness [S]``, ``(fitness [S], descriptors [S, k])`` or a dict
        with ``fitness`` and optionally ``descriptors``, ``frames``
        (environment frames of each member, int ``[S]``) and ``aux_<name>``
        entries (any per-member ``[S, ...]`` tensors; gathered like the
        fitness and handed, padding dropped, to
        ``evaluate_fn.after_gather({name: array [P, ...]})`` on every
        worker), written with
        TensorFlow ops (it runs inside ``tf.function`` on each replica).
        ``shard`` has the structure of the population (after ``decode_fn``);
        ``indices`` are the members' global row numbers (padding rows repeat
        real members); ``seeds`` are per-member seeds (:func:`member_seeds`).
        A member's result must depend only on its row, index and seed.  It is
        traced as written (no autograph): use ``tf.cond``/``tf.while_loop``
        for control flow on tensor values.  An ``evaluate_fn`` with a method
        ``evaluate_shard(replica, shard, indices, seeds, device=...)`` (as
        :class:`~tfevo.distribute.HostShards` has) runs on the host instead:
        eagerly, one Python thread per local replica, with its TensorFlow
        work placed on the replica's device; its results travel the same way.
      decode_fn: optional ``shard -> shard`` run eagerly on each replica's
        device before evaluation (e.g. ``SeedGA.decode``: genomes travel as
        seed lists, parameters are materialized where they are used).
      seed: seed of the :class:`~tfevo.core.SeedStream` that draws one seed
        per call (checkpointed with the evaluator).
      jit_compile: XLA-compile the per-replica evaluation.
      eager: call ``evaluate_fn`` eagerly, one Python thread per local
        replica under ``tf.device(<replica device>)``, instead of tracing it
        into the distributed step -- for evaluation functions that cannot be
        traced (data-dependent shapes, Python control flow on values, their
        own ``tf.function`` caches).  Results are the same as traced.

    Attributes:
      num_replicas: R, ``strategy.num_replicas_in_sync``.
      last_descriptors: descriptors of the last call (if ``evaluate_fn``
        returns them), ``[P, k]``.
      traces: ``{name: count}`` of traces of the distributed step.
      last_frames: environment frames of the last call summed over all
        replicas and workers (an int, the same on every worker), if
        ``evaluate_fn`` reports ``frames``; else ``None``.
      bytes_gathered: bytes of results all-gathered by the last call.

    Raises:
      ConfigError: on a non-callable ``evaluate_fn``/``decode_fn``.
      ShapeError: on populations without a common leading axis or a wrong-shaped
        fitness from ``evaluate_fn``.
    """

    def __init__(self, strategy, evaluate_fn: Callable, decode_fn: Callable | None = None, seed: int = 0,
                 jit_compile: bool = False, eager: bool = False, name: str | None = None):
        super().__init__(name=name)
        if strategy is None:
            from tfevo.distribute.strategy import make_strategy

            strategy = make_strategy()
        if not isinstance(strategy, tf.distribute.Strategy):
            raise ConfigError(f"strategy must be a tf.distribute.Strategy, got {type(strategy).__name__}")
        if not callable(evaluate_fn):
            raise ConfigError(f"evaluate_fn must be callable, got {type(evaluate_fn).__name__}")
        if decode_fn is not None and not callable(decode_fn):
            raise ConfigError(f"decode_fn must be callable or None, got {type(decode_fn).__name__}")
        object.__setattr__(self, "strategy", strategy)
        object.__setattr__(self, "_evaluate_fn", evaluate_fn)
        object.__setattr__(self, "_decode_fn", decode_fn)
        self.jit_compile = bool(jit_compile)
        self.eager = bool(eager)
        if self.eager and self.jit_compile:
            raise ConfigError("eager=True and jit_compile=True exclude each other")
        self.seeds = SeedStream(seed)
        self.num_replicas = int(strategy.num_replicas_in_sync)
        self.last_descriptors = None
        self.last_frames = None
        self.bytes_gathered = 0
        self._trace_counter = TraceCounter()
        self._multi_worker = in_multi_worker_mode(strategy)
        object.__setattr__(self, "_steps", {})

    @property
    def traces(self) -> dict:
        """How many times the distributed step was traced (once per population shape)."""
        return dict(self._trace_counter.counts)

    # ------------------------------------------------------------------
    def _check_population(self, population):
        flat = tf.nest.flatten(population)
        if not flat:
            raise ShapeError("population is empty")
        flat = [tf.convert_to_tensor(x) for x in flat]
        sizes = {x.shape[0] if x.shape.rank else None for x in flat}
        if len(sizes) != 1 or None in sizes or 0 in sizes:
            raise ShapeError(
                "every tensor of the population needs the same leading population axis P >= 1, got shapes "
                + ", ".join(str(x.shape.as_list()) for x in flat))
        return tf.nest.pack_sequence_as(population, flat), int(sizes.pop())

    def _replica_body(self, popsize: int):
        fn = self._evaluate_fn

        def body(shard, indices, call_seed):
            seeds = member_seeds(call_seed, indices, popsize)
            return _check_outputs(fn(shard, indices, seeds), indices.shape[0])

        # strategy.run would autograph-convert the body (and everything it calls); the
        # evaluation functions here are plain TensorFlow ops, so keep them as written.
        body = tf.autograph.experimental.do_not_convert(body)
        if self.jit_compile:
            return tf.function(body, jit_compile=True, autograph=False)
        return body

    def _step(self, key, popsize: int):
        if key not in self._steps:
            strategy = self.strategy
            body = self._replica_body(popsize)

            multi_worker = self._multi_worker

            def step(dist_shard, dist_idx, call_seed):
                out = strategy.run(body, args=(dist_shard, dist_idx, call_seed))
                if multi_worker:  # all-gather across workers (collective ops)
                    return {k: strategy.gather(o, axis=0) for k, o in out.items()}
                # one worker: replicas are local, concatenate in replica order (no collective group,
                # so several strategies can coexist in one process)
                return {k: tf.concat(strategy.experimental_local_results(o), axis=0) for k, o in out.items()}

            self._steps[key] = tf.function(self._trace_counter.wrap("step", step), autograph=False)
        return self._steps[key]

    def _gather_step(self, key):
        if key not in self._steps:
            strategy = self.strategy

            def gather(dist):
                return {k: strategy.gather(v, axis=0) for k, v in dist.items()}

            self._steps[key] = tf.function(self._trace_counter.wrap("gather", gather), autograph=False)
        return self._steps[key]

    def _evaluate_on_host(self, population, p: int, s: int, call_seed) -> dict:
        """Host evaluators (``evaluate_fn.evaluate_shard``) and ``eager=True``: each local replica's shard
        runs eagerly in its own Python thread, with TensorFlow work placed on the replica's device; the results then
        travel like the in-graph ones (concatenated, or all-gathered across workers)."""
        strategy = self.strategy
        fn = self._evaluate_fn
        decode = self._decode_fn
        local: list[int] = []

        def collect(ctx):
            local.append(int(ctx.replica_id_in_sync_group))
            return tf.zeros([])

        strategy.experimental_distribute_values_from_function(collect)

        def work(rid: int) -> dict:
            device = _local_device(strategy, rid)
            with tf.device(device):
                idx = tf.math.floormod(tf.range(rid * s, (rid + 1) * s, dtype=tf.int32), p)
                shard = tf.nest.map_structure(lambda x: tf.gather(x, idx), population)
                if decode is not None:
                    shard = decode(shard)
                seeds = member_seeds(call_seed, idx, p)
                if callable(getattr(fn, "evaluate_shard", None)):
                    return _check_outputs(fn.evaluate_shard(rid, shard, idx, seeds, device=device), s)
                return _check_outputs(fn(shard, idx, seeds), s)

        if len(local) == 1:
            results = [work(local[0])]
        else:
            with ThreadPoolExecutor(max_workers=len(local), thread_name_prefix="tfevo-replica") as pool:
                results = list(pool.map(work, local))
        by_replica = dict(zip(local, results))
        if not self._multi_worker:
            return {k: tf.concat([by_replica[rid][k] for rid in sorted(local)], axis=0) for k in results[0]}

        def value_fn(ctx):
            rid = int(ctx.replica_id_in_sync_group)
            with tf.device(_local_device(strategy, rid)):
                return {k: tf.identity(v) for k, v in by_replica[rid].items()}

        dist = strategy.experimental_distribute_values_from_function(value_fn)
        key = ("gather", p, tuple(sorted((k, tuple(v.shape.as_list())) for k, v in results[0].items())))
        return self._gather_step(key)(dist)

    def evaluate_all(self, population) -> tuple[tf.Tensor, tf.Tensor | None]:
        """``(fitness float32 [P], descriptors [P, k] or None)`` of the whole population.

        Every worker of a multi-worker strategy must call this with the same
        population (they do when each runs the same deterministic algorithm).
        """
        population, p = self._check_population(population)
        r = self.num_replicas
        s, _ = shard_layout(p, r)
        call_seed = self.seeds.next()
        strategy = self.strategy
        decode = self._decode_fn
        if self.eager or callable(getattr(self._evaluate_fn, "evaluate_shard", None)):
            out = self._evaluate_on_host(population, p, s, call_seed)
            return self._finish(out, p)

        def value_fn(ctx):
            rid = ctx.replica_id_in_sync_group
            with tf.device(_local_device(strategy, rid)):
                idx = tf.math.floormod(tf.range(rid * s, (rid + 1) * s, dtype=tf.int32), p)
                shard = tf.nest.map_structure(lambda x: tf.gather(x, idx), population)
                if decode is not None:
                    shard = decode(shard)
                return shard, idx

        dist = strategy.experimental_distribute_values_from_function(value_fn)
        dist_shard, dist_idx = dist
        sig = tuple((tuple(x.shape.as_list()), x.dtype.name) for x in tf.nest.flatten(population))
        out = self._step((p, sig), p)(dist_shard, dist_idx, call_seed)
        return self._finish(out, p)

    def _finish(self, out: dict, p: int):
        fit = out["fitness"][:p]
        desc = out["descriptors"][:p] if "descriptors" in out else None
        self.last_frames = int(tf.reduce_sum(out["frames"][:p])) if "frames" in out else None
        aux = {k[4:]: v[:p].numpy() for k, v in out.items() if k.startswith("aux_")}
        hook = getattr(self._evaluate_fn, "after_gather", None)
        if aux and callable(hook):
            hook(aux)
        self.bytes_gathered = int(sum(int(np.prod(o.shape)) * o.dtype.size for o in out.values()))
        self.last_descriptors = desc
        return fit, desc

    def evaluate(self, population) -> tf.Tensor:
        """Fitness ``float32 [P]`` (higher is better), identical on every worker."""
        return self.evaluate_all(population)[0]

    __call__ = evaluate
