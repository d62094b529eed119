"""The cluster a worker belongs to (``TF_CONFIG``), and what the chief tells every worker.

A multi-machine run is configured the standard TensorFlow way: every process
gets a ``TF_CONFIG`` environment variable, a JSON object with the whole
``cluster`` (job name -> list of ``"host:port"`` addresses) and this process's
``task`` (``{"type": "worker", "index": i}``).  :func:`read_tf_config` checks
it before TensorFlow opens any port, so a typo is a clear
:class:`~tfevo.core.ConfigError` instead of a hang or a gRPC error minutes
later.  The chief is ``chief:0`` when the cluster has a ``chief`` job, else
``worker:0``; it alone writes checkpoints and logs.

:func:`broadcast_from_chief` hands the chief's bytes (a checkpoint) to every
worker through the strategy's collectives, so resuming needs no file system
shared between machines.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

import numpy as np
import tensorflow as tf

from tfevo.core import ConfigError

__all__ = ["ClusterInfo", "read_tf_config", "apply_tf_config", "gather_bytes", "broadcast_from_chief"]

_JOBS = ("chief", "worker")
_EXAMPLE = ('{"cluster": {"worker": ["10.0.0.1:12345", "10.0.0.2:12345"]}, '
            '"task": {"type": "worker", "index": 0}}')


@dataclass(frozen=True)
class ClusterInfo:
    """A checked ``TF_CONFIG``: ``cluster`` (job -> addresses) and this task's type and index."""

    cluster: dict
    task_type: str
    task_index: int

    @property
    def num_workers(self) -> int:
        """Processes in the job (chief included)."""
        return sum(len(v) for v in self.cluster.values())

    @property
    def is_chief(self) -> bool:
        """Whether this task writes checkpoints and logs (``chief:0``, or ``worker:0`` without a chief job)."""
        if "chief" in self.cluster:
            return self.task_type == "chief"
        return self.task_type == "worker" and self.task_index == 0

    @property
    def address(self) -> str:
        return self.cluster[self.task_type][self.task_index]


def _fail(problem: str):
    raise ConfigError(f"TF_CONFIG: {problem}; expected e.g. TF_CONFIG='{_EXAMPLE}'")


def _addresses(job: str, value) -> list[str]:
    if isinstance(value, dict):  # TensorFlow also accepts {index: address}; tfevo needs them all, in order
        keys = sorted(value, key=lambda k: int(k) if str(k).isdigit() else -1)
        if [str(k) for k in keys] != [str(i) for i in range(len(value))]:
            _fail(f"cluster.{job} as a table needs the indices 0..{len(value) - 1}, got {sorted(map(str, value))}")
        value = [value[k] for k in keys]
    if not isinstance(value, list) or not value:
        _fail(f"cluster.{job} must be a non-empty list of \"host:port\" addresses, got {value!r}")
    for a in value:
        host, sep, port = a.rpartition(":") if isinstance(a, str) else ("", "", "")
        if not (host and sep and port.isdigit() and 0 < int(port) < 65536):
            _fail(f"cluster.{job} has the address {a!r}, which is not \"host:port\" with a port 1..65535")
    return list(value)


def read_tf_config(environ=None) -> ClusterInfo | None:
    """The checked ``TF_CONFIG`` of this process, or ``None`` when it is unset or names no cluster.

    Raises:
      ConfigError: naming the field, on malformed JSON, a cluster without a
        ``task`` (or a task without a cluster), job types other than
        ``chief``/``worker`` (``MultiWorkerMirroredStrategy`` has no
        parameter servers; tfevo has no side-car evaluator), addresses that
        are not ``host:port`` or appear twice, more than one chief, or a task
        whose type is not in the cluster or whose index is out of range.
    """
    raw = (os.environ if environ is None else environ).get("TF_CONFIG", "")
    if not raw.strip():
        return None
    try:
        data = json.loads(raw)
    except ValueError as e:
        _fail(f"not valid JSON ({e}) in {raw[:80]!r}")
    if not isinstance(data, dict):
        _fail(f"must be a JSON object, got {type(data).__name__}")
    cluster, task = data.get("cluster"), data.get("task")
    if not cluster:
        if task:
            _fail("has a 'task' but no 'cluster'")
        return None
    if not isinstance(cluster, dict):
        _fail(f"'cluster' must be an object of job name -> addresses, got {type(cluster).__name__}")
    unknown = sorted(set(cluster) - set(_JOBS))
    if unknown:
        _fail(f"cluster job(s) {unknown} are not supported: MultiWorkerMirroredStrategy runs only "
              f"{' and '.join(_JOBS)} tasks")
    jobs = {job: _addresses(job, cluster[job]) for job in _JOBS if job in cluster}
    if "worker" not in jobs and "chief" not in jobs:
        _fail("'cluster' lists no worker")
    if len(jobs.get("chief", [])) > 1:
        _fail(f"cluster.chief must have exactly one address, got {jobs['chief']}")
    every = [a for v in jobs.values() for a in v]
    dup = sorted({a for a in every if every.count(a) > 1})
    if dup:
        _fail(f"the address(es) {dup} appear more than once in 'cluster'")
    if not isinstance(task, dict):
        _fail("has a 'cluster' but no 'task' object: each process needs its own "
              "{\"type\": \"worker\", \"index\": i}")
    ttype, index = task.get("type"), task.get("index")
    if ttype not in jobs:
        _fail(f"task.type is {ttype!r}; accepted: {sorted(jobs)} (the jobs of 'cluster')")
    if index is None:
        _fail("task.index is missing")
    if isinstance(index, bool) or not isinstance(index, int):
        _fail(f"task.index must be an integer, got {index!r}")
    if not 0 <= index < len(jobs[ttype]):
        _fail(f"task.index {index} is out of range: cluster.{ttype} has {len(jobs[ttype])} address(es), "
              f"indices 0..{len(jobs[ttype]) - 1}")
    return ClusterInfo(jobs, ttype, int(index))


def apply_tf_config(data: dict, environ=None) -> dict:
    """A run config (as a dict) made one worker of the ``TF_CONFIG`` job, if there is one.

    Checks ``TF_CONFIG`` (:func:`read_tf_config`) before any work starts.
    When it names a cluster and the config does not choose a ``distribute``
    layout itself, sets ``distribute.strategy = "multi_worker"``, so the run
    directory records that the population is sharded (and the config refuses
    ``run.seconds`` there, before any work).  With ``auto``, which is a
    multi-worker run there too, ``run.seconds`` is refused here.
    """
    dist = data.get("distribute") or {}
    cluster = read_tf_config(environ) is not None and dist.get("devices") is None
    seconds = (data.get("run") or {}).get("seconds")
    if cluster and dist.get("strategy") == "auto" and seconds is not None:
        raise ConfigError(f"run.seconds={seconds} is not allowed in a multi-worker run (distribute.strategy auto "
                          "under TF_CONFIG naming a cluster): workers would stop at different generations and wait "
                          "forever; use run.generations or run.frames")
    if cluster and dist.get("strategy", "none") == "none":
        data = {**data, "distribute": {**dist, "strategy": "multi_worker"}}
    return data


def gather_bytes(strategy: tf.distribute.Strategy, data: bytes) -> list[tuple[bytes, bool]]:
    """Every replica's ``(data, is_chief)`` in replica order, on every worker.

    Two all-gathers over the strategy's replicas: the lengths with a chief
    flag, then the bytes padded to the longest (as int64 words: collectives
    carry no bytes).  Every worker must call it at the same point, as any
    collective.
    """
    extended = strategy.extended
    chief = 1 if extended.should_checkpoint else 0
    devices = extended.worker_devices

    def gather(array: np.ndarray) -> np.ndarray:
        def value_fn(ctx):
            with tf.device(devices[int(ctx.replica_id_in_sync_group) % len(devices)]):
                return tf.constant(array[None])

        dist = strategy.experimental_distribute_values_from_function(value_fn)
        return tf.function(lambda d: strategy.gather(d, axis=0), autograph=False)(dist).numpy()

    heads = gather(np.array([len(data), chief], np.int64))
    words = max(-(-int(heads[:, 0].max()) // 8), 1)
    buf = np.zeros(words * 8, np.uint8)
    buf[:len(data)] = np.frombuffer(data, np.uint8)
    body = gather(buf.view(np.int64))
    return [(row.tobytes()[:int(n)], bool(c)) for row, (n, c) in zip(body, heads)]


def broadcast_from_chief(strategy: tf.distribute.Strategy, data: bytes) -> bytes:
    """The chief's ``data`` on every worker (each worker passes its own; only the chief's counts)."""
    for value, is_chief in gather_bytes(strategy, data):
        if is_chief:
            return value
    raise ConfigError("no chief among the workers of this strategy")
