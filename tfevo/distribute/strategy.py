"""Picking a ``tf.distribute.Strategy`` so one script runs anywhere.

:func:`make_strategy` chooses, in order: ``MultiWorkerMirroredStrategy`` when
``TF_CONFIG`` names a cluster, ``MirroredStrategy`` over every GPU when there
are several, ``MirroredStrategy`` over logical CPU devices when asked for
(:func:`split_cpu`), else a ``OneDeviceStrategy`` on the only device.
"""

from __future__ import annotations

import json
import os

import tensorflow as tf

from tfevo.core import ConfigError

__all__ = ["make_strategy", "split_cpu"]


def split_cpu(n: int) -> list[str]:
    """Splits the physical CPU into ``n`` logical devices; returns their names.

    Must run before TensorFlow initializes its devices (before the first op);
    afterwards it raises a :class:`~tfevo.core.ConfigError` unless the split
    already in place has ``n`` devices.
    """
    n = int(n)
    if n < 1:
        raise ConfigError(f"number of logical CPU devices must be >= 1, got {n}")
    cpu = tf.config.list_physical_devices("CPU")[0]
    try:
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * n)
    except RuntimeError as e:
        have = tf.config.list_logical_devices("CPU")
        if len(have) != n:
            raise ConfigError(
                f"cannot split the CPU into {n} logical devices: TensorFlow already initialized "
                f"{len(have)} (call split_cpu before any TensorFlow op)") from e
    return [d.name for d in tf.config.list_logical_devices("CPU")]


def make_strategy(kind: str = "auto", logical_cpus: int | None = None) -> tf.distribute.Strategy:
    """A strategy for this machine / cluster.

    Args:
      kind: ``"auto"``, ``"multi_worker"``, ``"mirrored"`` or ``"one_device"``.
        ``auto`` = multi_worker if ``TF_CONFIG`` has a cluster, mirrored over
        GPUs if there are >= 2 (or over logical CPUs if ``logical_cpus`` >= 2),
        else one_device.
      logical_cpus: split the CPU into this many logical devices first
        (testing multi-replica runs on one machine).
    """
    if kind not in ("auto", "multi_worker", "mirrored", "one_device"):
        raise ConfigError(f"kind must be auto, multi_worker, mirrored or one_device, got {kind!r}")
    cpus = split_cpu(logical_cpus) if logical_cpus else None
    has_cluster = bool(json.loads(os.environ.get("TF_CONFIG", "{}") or "{}").get("cluster"))
    if kind == "multi_worker" or (kind == "auto" and has_cluster):
        if not has_cluster and kind == "multi_worker":
            raise ConfigError("multi_worker needs TF_CONFIG with a 'cluster' and a 'task'")
        return tf.distribute.MultiWorkerMirroredStrategy()
    gpus = [d.name for d in tf.config.list_logical_devices("GPU")]
    if kind == "one_device":
        return tf.distribute.OneDeviceStrategy((gpus or ["/cpu:0"])[0])
    if len(gpus) >= 2:
        return tf.distribute.MirroredStrategy(gpus)
    if cpus and len(cpus) >= 2:
        return tf.distribute.MirroredStrategy(cpus)
    if kind == "mirrored":
        return tf.distribute.MirroredStrategy(gpus or [d.name for d in tf.config.list_logical_devices("CPU")])
    return tf.distribute.OneDeviceStrategy((gpus or ["/cpu:0"])[0])
