"""Linear algebra with LAPACK speed on CPU: :func:`eigh` for CMA-ES.

``eigh(x)`` returns the eigenvalues (ascending) and eigenvectors
(``v[..., :, i]`` belongs to ``e[..., i]``) of symmetric float32/float64
matrices ``[..., n, n]``; like :func:`tf.linalg.eigh` it reads only the lower
triangle.  Both of its paths give each eigenvector a *canonical sign*: its
largest-magnitude component (the first one on ties) is positive.  So the two
paths agree up to float rounding whenever the eigenvalues are distinct.

* **Op path** (default on CPU): the C++ kernel ``TfevoSymEig``
  (``custom_ops/sym_eig.cc``) calls LAPACK's divide-and-conquer ``?syevd``
  from the OpenBLAS that numpy's wheel bundles (``numpy.libs/
  libscipy_openblas64_-*.so``).  On this project's 2-core machine it is ~2-2.5x
  faster than TensorFlow's ``tf.linalg.eigh`` at n = 1000 (see
  ``benchmarks/results/cma.md``).
* **Reference path**: ``tf.linalg.eigh`` (Eigen's solver) plus the sign
  convention.  It is used inside XLA (``jit_compile=True``; the op has no XLA
  kernel), when ``TFEVO_DISABLE_CUSTOM_OPS=1``, when the op cannot be built, or
  when no LAPACK library is found.  One log line says so.

**Which library.** ``$TFEVO_LAPACK`` (a path to any shared library exporting
``ssyevd``/``dsyevd`` under the names listed in ``sym_eig.cc``), else numpy's
bundled ILP64 OpenBLAS, else scipy's bundled LP64 one.  numpy's and scipy's are
loaded as a *private copy* (a file copy under ``$TFEVO_CACHE``): OpenBLAS
keeps one thread count per loaded library, and the copy lets tfevo set its own
without changing numpy's.

**Threads.** ``$TFEVO_EIGH_THREADS`` (default 1) OpenBLAS threads per
decomposition.  One thread is the default because (a) the result is then
bit-reproducible on every machine (same seed, same CMA-ES run), and (b) on this
shared 2-core machine OpenBLAS's spinning worker threads made a decomposition
up to 8x *slower* whenever the other core was busy (measured: 0.89 s against
0.11 s for one thread at load ~4; 0.061 s against 0.091 s on a quiet machine).
With one thread and n >= 257, the op calls ``?syevd``'s three steps itself
(``?sytrd``, ``?stedc``, ``?ormtr``) and splits the last one, the
back-transformation of the eigenvectors (~1/3 of the time), into column blocks
fixed by n that run on TensorFlow's intra-op pool, so a second core helps
without OpenBLAS worker threads (~1.16x per decomposition at n = 1000, paired
in one process); the bits do not depend on the number of threads.  Smaller
batched matrices are split over the pool one matrix per task.  ``0`` leaves
the library's own setting.

:func:`cholesky` (for :class:`tfevo.strategies.CholeskyCMAES`) is the same
arrangement for LAPACK's blocked ``?potrf`` (op ``TfevoCholesky`` in the same
``sym_eig.cc``, same library, same thread setting).  With one thread (the
default), a matrix with n > 128 is factorised in 128-column steps by
single-threaded ``?potrf``/``?trsm``/``?syrk``/``?gemm`` calls (one per tile, or
one ``?gemm`` per row strip of tiles for the trailing update) whose units are
spread over TensorFlow's intra-op pool: a second core helps, without OpenBLAS
worker threads, and the result does not depend on the number of threads.  Its contract differs from
``tf.linalg.cholesky`` in one point: a matrix that is not positive definite
gives an all-NaN factor instead of an error (TensorFlow's CPU kernel raises,
which cannot be caught inside a compiled ``tell``).  The reference path is
XLA's Cholesky (NaN on failure, like the op), normalised to all-NaN per matrix.

:func:`covariance_refresh` is CholeskyCMAES's refactorisation step on its
variables: the rank-k update of ``C`` and ``A = chol(C)`` in one op
(``TfevoCovarianceRefresh``) that computes into a scratch variable and swaps
buffers, so no ``[n, n]`` tensor is allocated per call.  :func:`eigen_refresh`
is the same for the eigen :class:`tfevo.strategies.CMAES` (op
``TfevoEigenRefresh``: the rank-k update of ``C``, then ``B``, ``D`` from its
eigendecomposition).  :func:`all_equal` is ``tf.reduce_all(tf.equal(x, y))``
with a dtype and shape check.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from tfevo import ops
from tfevo.core import ShapeError
from tfevo.kernels.lapack import lapack_kernel, lapack_library, threads as _threads

__all__ = [
    "eigh", "eigh_reference", "canonical_sign", "lapack_library",
    "cholesky", "cholesky_reference",
    "triangular_rows", "triangular_rows_reference", "syrk_update", "syrk_update_reference",
    "covariance_refresh", "covariance_refresh_reference", "covariance_refresh_op_available",
    "all_equal",
]

def canonical_sign(v: tf.Tensor) -> tf.Tensor:
    """Flips each column of ``v [..., n, n]`` so its largest-|.| entry (first on ties) is positive."""
    idx = tf.argmax(tf.abs(v), axis=-2, output_type=tf.int32)  # [..., n]
    pivot = tf.gather(tf.linalg.matrix_transpose(v), idx[..., None], axis=-1, batch_dims=v.shape.rank - 1)
    s = tf.where(pivot[..., 0] < 0, tf.constant(-1, v.dtype), tf.constant(1, v.dtype))
    return v * s[..., None, :]


def eigh_reference(x) -> tuple[tf.Tensor, tf.Tensor]:
    """``tf.linalg.eigh`` with the canonical sign: the pure-TensorFlow path of :func:`eigh`."""
    e, v = tf.linalg.eigh(x)
    return e, canonical_sign(v)


def _check(x, what: str = "eigh") -> tf.Tensor:
    x = tf.convert_to_tensor(x)
    if x.dtype not in (tf.float32, tf.float64):
        raise ShapeError(f"{what}: x must be float32 or float64, got {x.dtype.name}")
    s = x.shape
    if s.rank is not None and (s.rank < 2 or (s[-1] is not None and s[-2] is not None and s[-1] != s[-2])):
        raise ShapeError(f"{what}: x must be [..., n, n] (square matrices), got shape {s}")
    return x


def eigh(x, use_op=None) -> tuple[tf.Tensor, tf.Tensor]:
    """Eigendecomposition of symmetric matrices: ``(e [..., n] ascending, v [..., n, n])``.

    ``x = v @ diag(e) @ v^T`` with orthonormal ``v``; only the lower triangle of
    ``x`` is read.  Eigenvectors carry the canonical sign (see the module
    docstring).  Non-finite input raises ``InvalidArgumentError`` on both paths,
    except a 1x1 matrix on the reference path: ``tf.linalg.eigh`` returns it as is
    (NaN or inf eigenvalue, eigenvector 1) where the op raises.
    ``use_op``: ``None`` = automatic, ``False`` = reference, ``True`` = op or error.
    """
    x = _check(x)
    op = lapack_kernel("TfevoSymEig", use_op, [x])
    if op is not None:
        return tuple(op(x, lapack=lapack_library(), threads=_threads()))
    return eigh_reference(x)


# ---------------------------------------------------------------------------
# Cholesky (LAPACK ?potrf op, XLA reference)


def _nan_if_failed(l: tf.Tensor) -> tf.Tensor:
    ok = tf.reduce_all(tf.math.is_finite(l), axis=[-2, -1], keepdims=True)
    return tf.where(ok, l, tf.constant(float("nan"), l.dtype))


_xla_cholesky = tf.function(tf.linalg.cholesky, jit_compile=True, reduce_retracing=True)


def cholesky_reference(x) -> tf.Tensor:
    """Pure-TF path of :func:`cholesky`: XLA's Cholesky (no error on failure), all-NaN per failed matrix.

    TensorFlow's CPU kernel of ``tf.linalg.cholesky`` raises on a matrix that is
    not positive definite; XLA's returns NaN, so the reference runs it under XLA
    (a nested ``jit_compile`` function, or directly when already inside XLA).
    It is 5-10x slower than the op at n = 1000 on this CPU.
    """
    x = _check(x, "cholesky")
    lower = tf.linalg.band_part(x, -1, 0)  # only the lower triangle counts, as in the op
    l = tf.linalg.cholesky(lower) if ops.in_xla_context() else _xla_cholesky(lower)
    return _nan_if_failed(l)


def cholesky(x, use_op=None) -> tf.Tensor:
    """Lower Cholesky factor ``l`` of symmetric positive definite ``x [..., n, n]`` (``x = l l^T``).

    Reads only the lower triangle of ``x``; the strict upper triangle of ``l``
    is zero.  A matrix that is not numerically positive definite (or has a
    non-finite entry) gives an **all-NaN** factor, not an error.  ``use_op``:
    ``None`` = automatic (op on CPU graphs, reference under XLA, with
    ``TFEVO_DISABLE_CUSTOM_OPS=1`` or when the op is unavailable), ``False`` =
    reference, ``True`` = op or error.
    """
    x = _check(x, "cholesky")
    op = lapack_kernel("TfevoCholesky", use_op, [x])
    if op is not None:
        return op(x, lapack=lapack_library(), threads=_threads())
    return cholesky_reference(x)


# ---------------------------------------------------------------------------
# Triangular products/solves on rows and the symmetric rank-k update (BLAS ops)


def _check_rows(a, r, what):
    a, r = tf.convert_to_tensor(a), tf.convert_to_tensor(r)
    if a.dtype not in (tf.float32, tf.float64) or r.dtype != a.dtype:
        raise ShapeError(f"{what}: need float32/float64 inputs of one dtype, got {a.dtype.name} and {r.dtype.name}")
    if a.shape.rank != 2 or r.shape.rank != 2 or (a.shape[0] is not None and a.shape[0] != a.shape[1]) or (
            a.shape[1] is not None and r.shape[1] is not None and r.shape[1] != a.shape[1]):
        raise ShapeError(f"{what}: need a square [n, n] and rows [k, n], got {a.shape} and {r.shape}")
    return a, r


def triangular_rows_reference(a, r, solve: bool = False) -> tf.Tensor:
    """Pure-TF path of :func:`triangular_rows`."""
    a, r = _check_rows(a, r, "triangular_rows")
    if solve:
        return tf.transpose(tf.linalg.triangular_solve(a, tf.transpose(r), lower=True))
    return tf.matmul(r, tf.linalg.band_part(a, -1, 0), transpose_b=True)


def triangular_rows(a, r, solve: bool = False, use_op=None) -> tf.Tensor:
    """Each row ``r_i`` of ``r [k, n]`` multiplied by (``a r_i``) or solved with
    (``a^{-1} r_i``) the lower triangular ``a [n, n]`` (strict upper triangle not read).

    Op path: BLAS ``?trmm``/``?trsm`` (``TfevoTriangular``: half the flops of a
    general product, and ~2x faster than Eigen's triangular solve on this CPU);
    float32 products on AVX2 + FMA CPUs use the op's own kernel instead of
    ``?trmm`` (``a`` read in place, only ``r`` packed; a GEMM-style register
    tile: ~5x faster than ``?trmm`` for 24 rows at n = 1000), work spread over
    TensorFlow's pool in groups of rows of ``a`` once it exceeds 2^22
    multiply-adds (each entry is one sum in ascending order: bits independent of
    the threads);
    reference: ``tf.matmul`` / ``tf.linalg.triangular_solve``.
    """
    a, r = _check_rows(a, r, "triangular_rows")
    op = lapack_kernel("TfevoTriangular", use_op, [a, r])
    if op is not None:
        return op(a, r, lapack=lapack_library(), solve=bool(solve))
    return triangular_rows_reference(a, r, solve)


def _as(t, dtype):
    """``t`` as ``dtype`` (Python floats converted directly, not through float32)."""
    return tf.cast(t, dtype) if isinstance(t, tf.Tensor) else tf.convert_to_tensor(t, dtype=dtype)


def syrk_update_reference(c, r, v, s) -> tf.Tensor:
    """Pure-TF path of :func:`syrk_update` (a full product, then the lower triangle)."""
    c, r = _check_rows(c, r, "syrk_update")
    v, s = _as(v, c.dtype), _as(s, c.dtype)
    return _nan_if_failed(tf.linalg.band_part(s * c + tf.matmul(r * v[:, None], r, transpose_a=True), -1, 0))


def syrk_update(c, r, v, s, use_op=None) -> tf.Tensor:
    """Lower triangle of ``s c + r^T diag(v) r`` (strict upper triangle 0), reading only c's lower triangle.

    If any entry of the result is not finite (NaN/inf input, overflow), the
    whole result is NaN (as :func:`cholesky` on failure), so one entry tells.

    Op path (default ``$TFEVO_EIGH_THREADS`` = 1, n > 128): one single-threaded
    ``?gemm`` per 128-row strip of the lower triangle, strips spread over
    TensorFlow's intra-op pool (the result does not depend on the thread count);
    small ``n`` or other thread settings: two BLAS ``?syrk`` calls (positive and
    negative weights, rows scaled by ``sqrt(|v|)``) on that many BLAS threads.
    Reference: ``tf.matmul`` then ``tf.linalg.band_part``.
    """
    c, r = _check_rows(c, r, "syrk_update")
    op = lapack_kernel("TfevoSyrkUpdate", use_op, [c, r])
    if op is not None:
        return op(c, r, _as(v, c.dtype), _as(s, c.dtype), lapack=lapack_library(), threads=_threads())
    return syrk_update_reference(c, r, v, s)


# ---------------------------------------------------------------------------
# Update + refactorisation on the variables themselves (CholeskyCMAES)


def covariance_refresh_op_available() -> bool:
    """Whether :func:`covariance_refresh`'s in-place op is built (callers allocate its scratch variable then)."""
    from tfevo.kernels import built

    return built("TfevoCovarianceRefresh") and lapack_library() is not None


def _check_refresh(c, a, rows, weights, what):
    for name, var in (("c", c), ("a", a)):
        if not isinstance(var, tf.Variable):
            raise ShapeError(f"{what}: {name} must be a tf.Variable, got {type(var).__name__}")
    if c.dtype not in (tf.float32, tf.float64) or a.dtype != c.dtype:
        raise ShapeError(f"{what}: need float32/float64 variables of one dtype, got {c.dtype.name} and {a.dtype.name}")
    if c.shape.rank != 2 or c.shape[0] != c.shape[1] or a.shape != c.shape:
        raise ShapeError(f"{what}: c and a must both be [n, n], got {c.shape} and {a.shape}")
    return _update_rows(rows, weights, c.shape[0], c.dtype, what)


def _update_rows(rows, weights, n, dtype, what):
    """``(rows [k, n], weights [k])`` of a rank-k update as tensors of ``dtype`` (empty for ``rows=None``)."""
    if rows is None:
        return tf.zeros([0, n], dtype), tf.zeros([0], dtype)
    rows, weights = tf.convert_to_tensor(rows, dtype), _as(weights, dtype)
    if rows.shape.rank != 2 or rows.shape[1] != n or weights.shape.rank != 1 or (
            rows.shape[0] is not None and weights.shape[0] is not None and rows.shape[0] != weights.shape[0]):
        raise ShapeError(f"{what}: need rows [k, {n}] and weights [k], got {rows.shape} and {weights.shape}")
    return rows, weights


def covariance_refresh_reference(c, a, rows=None, weights=None, scale=1.0, tries: int = 12):
    """Pure-TF path of :func:`covariance_refresh` (same contract, ordinary assignments)."""
    update = rows is not None
    rows, weights = _check_refresh(c, a, rows, weights, "covariance_refresh")
    dt, n = c.dtype, c.shape[0]
    if n == 0:
        return tf.constant(update), tf.constant(True)
    updated = tf.constant(False)
    if update:
        c_new = syrk_update_reference(tf.convert_to_tensor(c), rows, weights, scale)
        updated = tf.math.is_finite(c_new[0, 0])  # all NaN when any entry is not

        def commit_c():
            c.assign(c_new)
            return tf.constant(0)

        tf.cond(updated, commit_c, lambda: tf.constant(0))
    cm = tf.convert_to_tensor(c)
    l = cholesky_reference(cm)
    ok = tf.math.is_finite(l[0, 0])  # a failed factorisation is all NaN
    if tries > 0:
        def loaded():
            eps = float(np.finfo(dt.as_numpy_dtype).eps)
            base = eps * tf.maximum(tf.reduce_max(tf.abs(tf.linalg.diag_part(cm))), tf.constant(1e-30, dt))

            def body(i, l_, ok_):
                l2 = cholesky_reference(cm + (base * tf.pow(tf.constant(10.0, dt), tf.cast(i, dt))) * tf.eye(n, dtype=dt))
                return i + 1, l2, tf.math.is_finite(l2[0, 0])

            _, l2, ok2 = tf.while_loop(lambda i, l_, ok_: (i < tries) & tf.logical_not(ok_), body,
                                       (tf.constant(0), l, tf.constant(False)))
            return l2, ok2

        l, ok = tf.cond(ok, lambda: (l, ok), loaded)

    def commit_a():
        a.assign(l)
        return tf.constant(0)

    tf.cond(ok, commit_a, lambda: tf.constant(0))
    return updated, ok


def covariance_refresh(c, a, scratch=None, rows=None, weights=None, scale=1.0, tries: int = 12, use_op=None):
    """Applies a rank-k update to a covariance variable and refactorises it, in place.

    ``c``, ``a``: ``[n, n]`` variables (``c`` as its lower triangle, strict upper
    triangle 0; ``a`` its lower Cholesky factor).  Steps:

    1. (``rows`` given) ``c <- lower(scale c + rows^T diag(weights) rows)``
       (:func:`syrk_update`), committed only if every entry is finite;
    2. ``a <- chol(c)`` (:func:`cholesky`); when ``c`` is not numerically
       positive definite, retried on ``c + delta_i I`` with
       ``delta_i = eps max(max_i |c_ii|, 1e-30) 10^i``, ``i < tries``;
       committed only on success (else ``a`` is kept).

    Returns ``(updated, factored)``, scalar bools (``updated`` is False when no
    update was asked for or it was not finite).

    Op path (``TfevoCovarianceRefresh``, needs ``scratch``, a third ``[n, n]``
    variable of the same dtype whose contents are never read): the same two
    kernels as :func:`syrk_update` and :func:`cholesky`, bit for bit, but
    computed into ``scratch``, whose buffer is then swapped with ``c``'s or
    ``a``'s -- no ``[n, n]`` tensor is allocated per call.  (A fresh 4 MB output
    cost ~1000 page faults, ~1.5 ms, per call at n = 1000 on this project's VM
    whenever the C allocator had given the memory back to the system.)  Readers
    of earlier values of ``c`` or ``a`` never see a change: a buffer still
    shared is never written.  Reference: ordinary assignments (XLA's Cholesky).
    """
    op = lapack_kernel("TfevoCovarianceRefresh", use_op, [c, a, scratch]) if scratch is not None else None
    if op is not None:
        update = rows is not None
        rows, weights = _check_refresh(c, a, rows, weights, "covariance_refresh")
        if not isinstance(scratch, tf.Variable) or scratch.dtype != c.dtype:
            raise ShapeError("covariance_refresh: scratch must be a tf.Variable of c's dtype")
        return op(
            c.handle, a.handle, scratch.handle, rows, weights, _as(scale, c.dtype), lapack=lapack_library(),
            threads=_threads(), tries=int(tries), update=update)
    if use_op is True and scratch is None:
        raise RuntimeError("the TfevoCovarianceRefresh custom op needs a scratch variable")
    return covariance_refresh_reference(c, a, rows, weights, scale, tries)


# ---------------------------------------------------------------------------
# Update + eigendecomposition on the variables themselves (CMAES)


def _floor_rel(dt) -> float:
    return 1e-14 if dt == tf.float64 else 1e-12


def _check_eigen_vars(c, b, d, rows, weights):
    for name, var in (("c", c), ("b", b), ("d", d)):
        if not isinstance(var, tf.Variable):
            raise ShapeError(f"eigen_refresh: {name} must be a tf.Variable, got {type(var).__name__}")
    if c.dtype not in (tf.float32, tf.float64) or b.dtype != c.dtype or d.dtype != c.dtype:
        raise ShapeError(f"eigen_refresh: need float32/float64 variables of one dtype, got {c.dtype.name}, "
                         f"{b.dtype.name} and {d.dtype.name}")
    if c.shape.rank != 2 or c.shape[0] != c.shape[1] or b.shape != c.shape or d.shape != c.shape[:1]:
        raise ShapeError(f"eigen_refresh: need c [n, n], b [n, n] and d [n], got {c.shape}, {b.shape} and {d.shape}")
    return _update_rows(rows, weights, c.shape[0], c.dtype, "eigen_refresh")


def eigen_refresh_reference(c, b, d, rows=None, weights=None, scale=1.0, ok=True, refresh=True):
    """Pure-TF path of :func:`eigen_refresh` (same contract, ordinary assignments)."""
    update = rows is not None
    rows, weights = _check_eigen_vars(c, b, d, rows, weights)
    dt = c.dtype
    updated = tf.constant(False)
    if update:
        c_new = syrk_update_reference(tf.convert_to_tensor(c), rows, weights, scale)
        updated = tf.convert_to_tensor(ok, tf.bool) & tf.math.is_finite(c_new[0, 0])  # all NaN when any entry is not

        def commit_c():
            c.assign(c_new)
            return tf.constant(0)

        tf.cond(updated, commit_c, lambda: tf.constant(0))

    def decompose():
        cm = tf.convert_to_tensor(c)
        finite = tf.reduce_all(tf.math.is_finite(tf.linalg.band_part(cm, -1, 0)))

        def run():
            e, v = eigh_reference(cm)  # reads the lower triangle only
            good = tf.reduce_all(tf.math.is_finite(e)) & tf.reduce_all(tf.math.is_finite(v))
            lo = tf.maximum(tf.reduce_max(e) * _floor_rel(dt), tf.constant(np.finfo(dt.as_numpy_dtype).tiny, dt))

            def commit():
                b.assign(v)
                d.assign(tf.sqrt(tf.maximum(e, lo)))
                return tf.constant(0)

            tf.cond(good, commit, lambda: tf.constant(0))
            return good

        # (tf.linalg.eigh fails on non-finite input: such a C is not decomposed, as in the op)
        return tf.cond(finite, run, lambda: tf.constant(False))

    refreshed = tf.cond(tf.convert_to_tensor(refresh, tf.bool), decompose, lambda: tf.constant(False))
    return updated, refreshed


def eigen_refresh(c, b, d, rows=None, weights=None, scale=1.0, ok=True, refresh=True, use_op=None):
    """The eigen CMA-ES's covariance step, in place: a rank-k update, then (optionally) the eigenbasis.

    ``c``, ``b``: ``[n, n]`` variables, ``d``: ``[n]`` (``c`` as its lower
    triangle, strict upper triangle 0; ``b`` the eigenvectors as columns, ``d``
    the square roots of the eigenvalues).  Steps:

    1. (``rows`` given and ``ok``) ``c <- lower(scale c + rows^T diag(weights) rows)``
       (:func:`syrk_update`), committed only if every entry is finite;
    2. (``refresh``, a scalar bool tensor or Python bool) if ``c``'s lower
       triangle is finite: ``e, v = eigh(c)`` (:func:`eigh`, canonical sign);
       if both are finite, ``b <- v`` and ``d <- sqrt(max(e, f))`` with the
       floor ``f = max(max(e) r, tiny)``, ``r`` = 1e-12 (float32) or 1e-14
       (float64); otherwise ``b``, ``d`` are kept.

    Returns ``(updated, refreshed)``, scalar bools.

    Op path (``TfevoEigenRefresh``): the kernels of :func:`syrk_update` and
    :func:`eigh`, bit for bit, in one call: the new ``c`` is computed into a
    buffer the kernel keeps and swapped in, and LAPACK's matrix and workspace
    are kept too, so no ``[n, n]`` tensor is allocated per call (at n = 1000
    this saves ~20 ms a generation around a ~100 ms decomposition).  A buffer
    still shared by an earlier read is never written.  Variables on a GPU take
    the reference (the op has a CPU kernel only).  Reference: ordinary
    assignments (``tf.linalg.eigh``).
    """
    op = lapack_kernel("TfevoEigenRefresh", use_op, [c, b, d])
    if op is not None:
        update = rows is not None
        rows, weights = _check_eigen_vars(c, b, d, rows, weights)
        return tuple(op(
            c.handle, b.handle, d.handle, rows, weights, _as(scale, c.dtype),
            tf.convert_to_tensor(ok, tf.bool) & tf.constant(update), tf.convert_to_tensor(refresh, tf.bool),
            tf.constant(_floor_rel(c.dtype), c.dtype), lapack=lapack_library(), threads=_threads()))
    return eigen_refresh_reference(c, b, d, rows, weights, scale, ok, refresh)


# ---------------------------------------------------------------------------
# Entry-by-entry equality (CholeskyCMAES's check for the rows of the last ask)


def all_equal(x, y) -> tf.Tensor:
    """Whether ``x == y`` entry by entry (float comparison: NaN equals nothing, ``-0 == 0``).

    ``x`` and ``y`` float32/float64 of one dtype and shape (else
    :class:`~tfevo.core.ShapeError`).  Plain TensorFlow ops: the check is a
    negligible part of a generation.
    """
    x, y = tf.convert_to_tensor(x), tf.convert_to_tensor(y)
    if x.dtype not in (tf.float32, tf.float64) or y.dtype != x.dtype or (
            x.shape.is_fully_defined() and y.shape.is_fully_defined() and x.shape != y.shape):
        raise ShapeError(f"all_equal: need float32/float64 tensors of one dtype and shape, got {x.dtype.name}"
                         f"{x.shape} and {y.dtype.name}{y.shape}")
    return tf.reduce_all(tf.equal(x, y))
