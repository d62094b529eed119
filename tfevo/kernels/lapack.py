"""The LAPACK/BLAS library behind the ``sym_eig`` kernels (``custom_ops/sym_eig.cc``).

``$TFEVO_LAPACK`` (a path to any shared library exporting ``ssyevd``/``dsyevd``
under the names listed in ``sym_eig.cc``), else numpy's bundled ILP64
OpenBLAS, else scipy's bundled LP64 one.  numpy's and scipy's are loaded as a
*private copy* (a file copy under ``$TFEVO_CACHE``): OpenBLAS keeps one thread
count per loaded library, and the copy lets tfevo set its own without changing
numpy's.  ``$TFEVO_EIGH_THREADS`` (default 1) is the OpenBLAS thread count per
call (see :mod:`tfevo.linalg`).

:func:`lapack_kernel` is :func:`tfevo.kernels.kernel` for these ops: a kernel
that has no library to call is not usable either.
"""

from __future__ import annotations

import glob
import logging
import os
import shutil
import threading
from pathlib import Path

from tfevo import ops
from tfevo.kernels.dispatch import kernel

__all__ = ["lapack_library", "threads", "lapack_kernel"]

log = logging.getLogger("tfevo.linalg")

_LOCK = threading.Lock()
_LAPACK: list = []  # [path or None] once resolved


def _site_libs(package: str, pattern: str) -> list[str]:
    """Bundled libraries of an installed wheel (``<site-packages>/<package>.libs/<pattern>``)."""
    try:
        mod = __import__(package)
    except Exception:  # noqa: BLE001 - package missing: no library from it
        return []
    root = Path(mod.__file__).resolve().parent.parent / f"{package}.libs"
    return sorted(glob.glob(str(root / pattern)))


def _private_copy(src: str) -> str:
    """A private copy of ``src`` (with its sibling libraries linked next to it) in tfevo's cache.

    The copy has its own inode, so ``dlopen`` loads a second instance with its
    own OpenBLAS state (thread count) instead of returning numpy's.
    """
    src_p = Path(src)
    st = src_p.stat()
    dest_dir = ops.cache_dir() / "lapack" / f"{src_p.parent.name}-{st.st_size}-{int(st.st_mtime)}"
    dest = dest_dir / src_p.name
    if dest.is_file():
        return str(dest)
    dest_dir.mkdir(parents=True, exist_ok=True)
    # The library finds its libgfortran/libquadmath through RPATH $ORIGIN: link the siblings.
    for sib in src_p.parent.iterdir():
        if sib.name != src_p.name and not (dest_dir / sib.name).exists():
            try:
                os.symlink(sib, dest_dir / sib.name)
            except FileExistsError:
                pass
    tmp = dest_dir / f".{src_p.name}.{os.getpid()}.tmp"
    shutil.copyfile(src, tmp)  # a copy, never a hard link: a link would share the inode
    os.replace(tmp, dest)  # atomic: a half-written library is never loaded
    return str(dest)


def lapack_library() -> str | None:
    """Path of the LAPACK library the op loads (``None`` if there is none).

    ``$TFEVO_LAPACK`` if set (used as given); else a private copy of numpy's
    bundled OpenBLAS (ILP64), else of scipy's (LP64).
    """
    with _LOCK:
        if _LAPACK:
            return _LAPACK[0]
        path = None
        explicit = os.environ.get("TFEVO_LAPACK", "")
        if explicit:
            if not os.path.isfile(explicit):
                raise FileNotFoundError(f"TFEVO_LAPACK={explicit!r} is not a file")
            path = explicit
        else:
            for cands in (_site_libs("numpy", "libscipy_openblas64_*.so"), _site_libs("scipy", "libscipy_openblas*.so")):
                if cands:
                    try:
                        path = _private_copy(cands[0])
                    except OSError as e:  # read-only cache etc.: load the original
                        log.warning("tfevo.linalg: cannot copy %s (%s); loading it in place", cands[0], e)
                        path = cands[0]
                    break
        if path is not None:
            _preload(path)
        _LAPACK.append(path)
        return path


def _preload(path: str) -> None:
    """Loads the LAPACK library once, with OpenBLAS's worker threads told to sleep right after a call.

    OpenBLAS reads ``OPENBLAS_THREAD_TIMEOUT`` when the library is loaded; by default its
    worker threads spin for ~2^28 cycles (~0.1 s) after every multithreaded call, taking a
    core from whatever TensorFlow runs next (only with ``TFEVO_EIGH_THREADS`` > 1; the default
    of one thread starts no workers).  The op's own ``dlopen`` of the same path (same flags,
    ``custom_ops/sym_eig.cc``) then returns this instance.  A timeout the user has set is kept.
    """
    if "OPENBLAS_THREAD_TIMEOUT" in os.environ:
        return
    import ctypes

    os.environ["OPENBLAS_THREAD_TIMEOUT"] = "4"  # the minimum: 2^4 cycles
    try:
        ctypes.CDLL(path, mode=os.RTLD_NOW | os.RTLD_LOCAL | getattr(os, "RTLD_DEEPBIND", 0))
    except OSError as e:  # the op reports a library it cannot load, with its own message
        log.debug("tfevo.linalg: preloading %s failed: %s", path, e)
    finally:
        del os.environ["OPENBLAS_THREAD_TIMEOUT"]


def threads() -> int:
    """OpenBLAS threads per call: ``$TFEVO_EIGH_THREADS`` (default 1; 0 = the library's own setting)."""
    raw = os.environ.get("TFEVO_EIGH_THREADS", "1")
    try:
        t = int(raw)
    except ValueError:
        t = -1
    if t < 0:
        from tfevo.core import ConfigError

        raise ConfigError(f"TFEVO_EIGH_THREADS must be an integer >= 0, got {raw!r}")
    return t


def lapack_kernel(op: str, use_op=None, inputs=()):
    """:func:`tfevo.kernels.kernel` for a ``sym_eig`` op: also ``None`` (or, with
    ``use_op=True``, an error) when no LAPACK library is found."""
    why = None
    if use_op is not False and lapack_library() is None:
        why = "no LAPACK library found (install numpy >= 2 or set TFEVO_LAPACK)"
    return kernel(op, use_op, inputs, unsupported=why)
