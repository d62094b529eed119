"""Loader for tfevo's C++ TensorFlow kernels (``custom_ops/``).

Custom ops are an accelerator, never a requirement.  ``load("name")`` compiles
``custom_ops/name.cc`` against the installed TensorFlow headers with the C++
compiler on the machine (once; the shared library is cached under
``$TFEVO_CACHE`` or ``~/.cache/tfevo/ops/<tf version>/``, keyed by the
source, TensorFlow's compile flags and the CPU's instruction sets, since it
is built with ``-march=native``), loads it with
``tf.load_op_library`` and returns the module.  When there is no compiler, or
the build fails, it logs one clear line and returns ``None``; callers then use
their pure-TensorFlow reference, which gives the same results.

``TFEVO_DISABLE_CUSTOM_OPS=1`` forces the references everywhere.  Whether a
loaded op runs at a given call site is decided by :func:`tfevo.kernels.kernel`
(the one dispatch: built, not inside XLA, inputs on the host), not here.

``tfevo build-ops`` (or :func:`build_all`) compiles every op ahead of time,
several at once, so that the first run -- or the test suite -- does not pay
for it.
"""

from __future__ import annotations

import functools
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


@functools.lru_cache(maxsize=None)  # read once per process: the CPU does not change under it
def _cpu_key() -> str:
    """What ``-march=native`` depends on: the machine and its instruction sets.

    A library built on one CPU may use instructions another lacks (a cache in
    a shared home directory, a disk image moved to other hardware), so the CPU
    is part of the cache key.
    """
    import platform

    key = platform.machine() + platform.processor()
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith(("flags", "Features")):  # x86 / ARM
                    key += " ".join(sorted(line.split(":", 1)[1].split()))
                    break
    except OSError:  # not Linux: the processor string above is what there is
        pass
    return key


_ARCH_FLAGS = (["-march=native", "-mno-avx512fp16"], ["-march=native"], [])


def _warn_once(name: str, msg: str) -> None:
    if name not in _WARNED:
        _WARNED.add(name)
        log.warning("tfevo custom op %r unavailable (%s); using the pure-TensorFlow reference.", name, msg)


def _library_path(name: str) -> Path:
    """The cached library of op ``name``: keyed by its source, the shared headers (e.g.
    philox.h), TensorFlow's compile flags and this CPU."""
    code = (source_dir() / f"{name}.cc").read_bytes()
    for h in sorted(source_dir().glob("*.h")):
        code += h.name.encode() + h.read_bytes()
    flags = " ".join(tf.sysconfig.get_compile_flags()) + _cpu_key()
    digest = hashlib.sha256(code + flags.encode()).hexdigest()[:16]
    return cache_dir() / f"{name}-{digest}.so"


def _flags_path(name: str) -> Path:
    return _library_path(name).with_suffix(".flags")


def build(name: str, force: bool = False) -> Path:
    """Compiles ``custom_ops/<name>.cc`` and returns the path of the ``.so``.

    Raises ``RuntimeError`` with the compiler's message on failure.
    """
    src = source_dir() / f"{name}.cc"
    if not src.is_file():
        raise RuntimeError(f"no source {src}")
    out = _library_path(name)
    out_dir = out.parent
    if out.is_file() and not force:
        return out
    cxx = _compiler()
    if cxx is None:
        raise RuntimeError("no C++ compiler found (install g++ or set CXX to one)")
    out_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=out_dir)
    os.close(fd)
    base = [cxx, "-shared", "-fPIC", "-O3", str(src), "-o", tmp,
            *tf.sysconfig.get_compile_flags(), *tf.sysconfig.get_link_flags(), "-pthread"]
    # Tuned for this CPU first.  TensorFlow's bundled Eigen does not compile with
    # AVX512-FP16 enabled (GCC 12, Sapphire Rapids and newer), so that one extension is
    # turned off (the kernels do not use it); then -march=native alone (a compiler that
    # does not know -mno-avx512fp16), then the generic target (one that rejects both).
    proc = None
    for arch in _ARCH_FLAGS:
        proc = subprocess.run(base[:4] + arch + base[4:], capture_output=True, text=True)
        if proc.returncode == 0:
            break
    if proc.returncode != 0:
        os.unlink(tmp)
        raise RuntimeError(f"compiling {src.name} failed:\n{proc.stderr[-2000:]}")
    if not arch:
        log.warning("tfevo custom op %r built for the generic CPU target (the compiler rejected -march=native); "
                    "its kernels run without this CPU's vector instructions", name)
    out.with_suffix(".flags").write_text(" ".join(arch) + "\n")
    os.replace(tmp, out)  # atomic: a half-written library is never loaded
    return out


def build_flags(name: str) -> list[str] | None:
    """The target flags the cached library of op ``name`` was built with (``None``: not built)."""
    try:
        return _flags_path(name).read_text().split()
    except OSError:
        return None


def names() -> list[str]:
    """The ops whose sources ship with the package."""
    return sorted(p.stem for p in source_dir().glob("*.cc"))


def build_all(jobs: int | None = None, force: bool = False, report=None) -> dict[str, Path | Exception]:
    """Compiles every op (``jobs`` compilers at once; default: one per core).

    Returns ``{name: path of the .so}``, or the exception for an op that
    failed; ``report(name, result, seconds)`` is called as each one ends.
    Ops already in the cache are not rebuilt unless ``force``.
    """
    import concurrent.futures as cf
    import time

    jobs = max(1, int(jobs or os.cpu_count() or 1))

    def one(name):
        t = time.perf_counter()
        try:
            res: Path | Exception = build(name, force=force)
        except Exception as e:  # noqa: BLE001 - reported per op
            res = e
        if report is not None:
            report(name, res, time.perf_counter() - t)
        return name, res

    # Compiling is a child process per op: threads are enough to run several.
    with cf.ThreadPoolExecutor(max_workers=jobs) as pool:
        return dict(pool.map(one, names()))


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
    """Whether the function being traced will be XLA-compiled (``jit_compile=True``)."""
    from tfevo._tf_private import in_xla_context as inside

    return inside()


def op_module(name: str, symbol: str):
    """The loaded module of ``custom_ops/<name>.cc`` if it exports ``symbol``, else ``None``.

    The one lazy accessor the package's dispatchers use (``ops.load`` builds
    and caches the library on first use).
    """
    mod = load(name)
    return mod if (mod is not None and hasattr(mod, symbol)) else None


def available(name: str) -> bool:
    return load(name) is not None
