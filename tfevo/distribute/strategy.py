"""Picking a ``tf.distribute.Strategy`` so one script runs anywhere.

:func:`make_strategy` chooses, in order: ``MultiWorkerMirroredStrategy`` when
``TF_CONFIG`` names a cluster, ``MirroredStrategy`` over every GPU when there
are several, ``MirroredStrategy`` over logical CPU devices when asked for
(:func:`split_cpu`), else a ``OneDeviceStrategy`` on the only device.
"""

from __future__ import annotations

import tensorflow as tf

from tfevo.core import ConfigError

__all__ = ["make_strategy", "split_cpu"]


def _has_cluster() -> bool:
    from tfevo.distribute.cluster import read_tf_config

    return read_tf_config() is not None  # checked first: a bad TF_CONFIG is a ConfigError, not a hang


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


def make_strategy(kind: str = "auto", logical_cpus: int | None = None,
                  devices: int | None = None) -> tf.distribute.Strategy:
    """A strategy for this machine / cluster.

    Call it before any other TensorFlow op when it may split the CPU
    (``logical_cpus``, or ``devices`` on a machine without enough GPUs).

    Args:
      kind: ``"auto"``, ``"multi_worker"``, ``"mirrored"`` or ``"one_device"``.
        ``auto`` = multi_worker if ``TF_CONFIG`` has a cluster, mirrored over
        GPUs if there are >= 2 (or over logical CPUs if ``logical_cpus`` >= 2),
        else one_device.
      logical_cpus: split the CPU into this many logical devices first
        (testing multi-replica runs on one machine).
      devices: number of local replicas (not with ``multi_worker``, which
        uses every local device): the first ``devices`` GPUs when the
        machine has that many, else -- on a machine without GPUs -- the CPU
        split into ``devices`` logical devices.  ``1`` gives a
        ``OneDeviceStrategy``.

    Raises:
      ConfigError: on an unknown ``kind``, ``multi_worker`` without
        ``TF_CONFIG``, or more ``devices`` than GPUs on a GPU machine.
    """
    if kind not in ("auto", "multi_worker", "mirrored", "one_device"):
        raise ConfigError(f"kind must be auto, multi_worker, mirrored or one_device, got {kind!r}")
    if devices is not None:
        devices = int(devices)
        if devices < 1:
            raise ConfigError(f"devices must be >= 1, got {devices}")
        if logical_cpus:
            raise ConfigError("give devices or logical_cpus, not both")
        if kind == "multi_worker" or (kind == "auto" and _has_cluster()):
            raise ConfigError("devices does not apply to multi_worker / TF_CONFIG runs "
                              "(each worker uses all its local devices)")
        if kind == "one_device" and devices != 1:
            raise ConfigError(f"one_device with devices={devices}")
        n_gpus = len(tf.config.list_physical_devices("GPU"))  # physical: does not initialize TensorFlow
        if n_gpus and n_gpus < devices:
            raise ConfigError(f"devices={devices} but this machine has {n_gpus} GPU(s)")
        if n_gpus:
            names = [f"/gpu:{i}" for i in range(devices)]
        else:
            names = split_cpu(devices) if devices > 1 else ["/cpu:0"]
        return tf.distribute.MirroredStrategy(names) if devices > 1 else tf.distribute.OneDeviceStrategy(names[0])
    cpus = split_cpu(logical_cpus) if logical_cpus else None
    has_cluster = _has_cluster()
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
