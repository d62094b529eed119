"""Where the population tensors live: a GPU present (real or assumed) or the host only.

The C++ kernels and the private-API fast paths are CPU-only.  On a machine
with a visible GPU, TensorFlow places the population tensors there, and a CPU
kernel in a hot graph would copy them to the host and back every generation;
so both stand aside whenever :func:`gpu_present` is true.

No machine running this project's tests has a GPU, so the GPU path is checked
on the CPU with :func:`assume_gpu` (or ``TFEVO_ASSUME_GPU=1``): every decision
is then made as on a GPU machine, while the ops still execute on the CPU.
"""

from __future__ import annotations

import contextlib
import os

import tensorflow as tf

__all__ = ["gpu_present", "assume_gpu", "on_host"]

_VISIBLE: list = []  # [bool] once read: the visible devices are fixed once TensorFlow is initialized
_ASSUMED: list = []  # a stack of assume_gpu() values
_ENV: list = []  # [TFEVO_ASSUME_GPU is set] once read


def _gpu_visible() -> bool:
    if not _VISIBLE:
        _VISIBLE.append(bool(tf.config.list_logical_devices("GPU")))
    return _VISIBLE[0]


def gpu_present() -> bool:
    """Whether a GPU is visible to TensorFlow, or assumed by :func:`assume_gpu` /
    ``TFEVO_ASSUME_GPU=1`` (a real GPU cannot be assumed away)."""
    if _ASSUMED:
        return _ASSUMED[-1] or _gpu_visible()
    if not _ENV:  # read once: a process assumes a GPU from its start or not at all
        _ENV.append(os.environ.get("TFEVO_ASSUME_GPU", "") not in ("", "0"))
    return _ENV[0] or _gpu_visible()


@contextlib.contextmanager
def assume_gpu(present: bool = True):
    """Within the block, decide as if a GPU were visible (``present=True``).

    Kernel dispatch (:func:`tfevo.kernels.kernel`) then takes the pure-TF
    references and the private-API fast paths are off, exactly as on a GPU
    machine; the GPU-readiness test traces the hot graphs this way.  Objects
    that decided before the block (an already traced function) keep their
    decision.

    Example:

    >>> from tfevo import kernels
    >>> with kernels.assume_gpu():
    ...     kernels.kernel("TfevoGaussianPopulation") is None
    True
    """
    _ASSUMED.append(bool(present))
    try:
        yield
    finally:
        _ASSUMED.pop()


def on_host(*tensors) -> bool:
    """Whether all ``tensors`` (tensors or variables) live on the host.

    Without a GPU everything does.  With one, a tensor counts as on the host
    only when it was placed on a CPU (``tf.device("CPU")``): an unplaced
    tensor in a graph goes to the GPU, so no tensors at all also counts as
    "not on the host".  With an *assumed* GPU (:func:`assume_gpu`) nothing
    does: every tensor is where TensorFlow would put it on a GPU machine.
    """
    if not gpu_present():
        return True
    if not tensors or not _gpu_visible():
        return False
    for t in tensors:
        dev = (getattr(t, "device", "") or "").upper()
        if "CPU" not in dev:
            return False
    return True
