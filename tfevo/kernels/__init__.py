"""tfevo's C++ kernels behind one dispatch.

Every call site of a custom op asks :func:`kernel` (``tfevo.kernels.kernel``)
whether the op runs here, with one switch, ``use_op`` (``None`` automatic,
``True`` required, ``False`` the pure-TensorFlow reference).  The rule, the
table of ops and the GPU assumption used by the readiness test are described
in ``docs/kernels.md``; :mod:`tfevo.ops` builds and loads the libraries.
"""

from tfevo.kernels.device import assume_gpu, gpu_present, on_host
from tfevo.kernels.dispatch import KERNELS, KernelUnavailableError, built, check_use_op, decisions, kernel, use_ops

__all__ = ["KERNELS", "KernelUnavailableError", "kernel", "built", "check_use_op", "decisions", "use_ops", "gpu_present",
           "assume_gpu", "on_host"]
