"""Loader for tfevo's C++ TensorFlow kernels (``custom_ops/``).

Custom ops are an accelerator, never a requirement.  ``load("name")`` compiles
``custom_ops/name.cc`` against the installed TensorFlow headers with the C++
compiler on the machine (once; the shared library is cached under
``$TFEVO_CACHE`` or ``~/.cache/tfevo/ops/<tf version>/``), loads it with
``tf.load_op_library`` and returns the module.  When there is no compiler, or
the build fails, it logs one clear line and returns ``None``; callers then use
their pure-TensorFlow reference, which gives the same results.

``TFEVO_DISABLE_CUSTOM_OPS=1`` forces the references everywhere.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import tensorflow as tf

log = logging.getLogger("tfevo.ops")

_LOCK = threading.Lock()
_CACHE: dict[str, object] = {}
_WARNED: set[str] = set()


def source_dir() -> Path:
    """Where the ``.cc`` sources live (repo checkout or installed package)."""
    here = Path(__file__).resolve().parent
    for cand in (here.parent / "custom_ops", here / "custom_ops_src"):
        if cand.is_dir():
            return cand
    try:  # installed as the mapped package tfevo.custom_ops_src
        import tfevo.custom_ops_src as m  # type: ignore

        return Path(m.__file__).resolve().parent
    except Exception:  # pragma: no cover
        return here.parent / "custom_ops"


def cache_dir() -> Path:
    root = os.environ.get("TFEVO_CACHE") or os.path.join(Path.home(), ".cache", "tfevo")
    return Path(root) / "ops" / f"tf-{tf.__version__}-py{sys.version_info[0]}{sys.version_info[1]}"


def _compiler() -> str | None:
    """The C++ compiler: ``$CXX`` if set (and only it), else g++/c++/clang++ on PATH."""
    explicit = os.environ.get("CXX")
    if explicit:
        return explicit if shutil.which(explicit) else None
    for cxx in ("g++", "c++", "clang++"):
        if shutil.which(cxx):
            return cxx
    return None


def _warn_once(name: str, msg: str) -> None:
    if name not in _WARNED:
        _WARNED.add(name)
        log.warning("tfevo custom op %r unavailable (%s); using the pure-TensorFlow reference.", name, msg)


def build(name: str, force: bool = False) -> Path:
    """Compiles ``custom_ops/<name>.cc`` and returns the path of the ``.so``.

    Raises ``RuntimeError`` with the compiler's message on failure.
    """
    src = source_dir() / f"{name}.cc"
    if not src.is_file():
        raise RuntimeError(f"no source {src}")
    code = src.read_bytes()
    # Shared headers (e.g. philox.h) are part of every op's build key.
    for h in sorted(source_dir().glob("*.h")):
        code += h.name.encode() + h.read_bytes()
    digest = hashlib.sha256(code + " ".join(tf.sysconfig.get_compile_flags()).encode()).hexdigest()[:16]
    out_dir = cache_dir()
    out = out_dir / f"{name}-{digest}.so"
    if out.is_file() and not force:
        return out
    cxx = _compiler()
    if cxx is None:
        raise RuntimeError("no C++ compiler found (install g++ or set CXX to one)")
    out_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=out_dir)
    os.close(fd)
    cmd = [
        cxx, "-shared", "-fPIC", "-O3", "-march=native", str(src), "-o", tmp,
        *tf.sysconfig.get_compile_flags(), *tf.sysconfig.get_link_flags(), "-pthread",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0 and "-march=native" in cmd:  # some compilers reject it
        cmd.remove("-march=native")
        proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        os.unlink(tmp)
        raise RuntimeError(f"compiling {src.name} failed:\n{proc.stderr[-2000:]}")
    os.replace(tmp, out)  # atomic: a half-written library is never loaded
    return out


def load(name: str):
    """Returns the loaded op module for ``custom_ops/<name>.cc`` or ``None``."""
    if os.environ.get("TFEVO_DISABLE_CUSTOM_OPS", "") not in ("", "0"):
        _warn_once(name, "TFEVO_DISABLE_CUSTOM_OPS is set")
        return None
    with _LOCK:
        if name in _CACHE:
            return _CACHE[name]
        try:
            mod = tf.load_op_library(str(build(name)))
        except Exception as e:  # noqa: BLE001 - any failure means "use the reference"
            _warn_once(name, str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__)
            mod = None
        _CACHE[name] = mod
        return mod


def in_xla_context() -> bool:
    """Whether the function being traced will be XLA-compiled (``jit_compile=True``).

    The custom ops have no XLA kernels, so their dispatchers use the pure-TF
    reference there.
    """
    try:
        from tensorflow.python.ops import control_flow_util

        return bool(control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph()))
    except Exception:  # pragma: no cover - private API moved: assume no XLA
        return False


def op_module(name: str, symbol: str):
    """The loaded module of ``custom_ops/<name>.cc`` if it exports ``symbol``, else ``None``.

    The one lazy accessor the package's dispatchers use (``ops.load`` builds
    and caches the library on first use).
    """
    mod = load(name)
    return mod if (mod is not None and hasattr(mod, symbol)) else None


def available(name: str) -> bool:
    return load(name) is not None
