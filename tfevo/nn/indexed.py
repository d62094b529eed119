"""Matrix products for the active subset of a population.

:func:`indexed_matmul` multiplies each row-block of ``x`` by the weight matrix
of one chosen member, without first copying the chosen members' weights out of
the population tensor.  It is the primitive behind "only the networks whose
episodes are still running cost inference" (Such et al., 2018).

It dispatches to the C++ kernel ``custom_ops/indexed_matmul.cc`` (op
``TfevoIndexedMatmul``) where :func:`tfevo.kernels.kernel` allows, and
otherwise to the pure-TensorFlow reference ``tf.matmul(x, tf.gather(w, idx))``;
both give the same results.
"""

from __future__ import annotations

import tensorflow as tf

from tfevo import kernels
from tfevo.core import ShapeError

__all__ = ["indexed_matmul", "indexed_matmul_reference", "to_half", "to_half_reference"]


def indexed_matmul_reference(x, w, idx):
    """Pure-TensorFlow reference of :func:`indexed_matmul`: ``x @ w[idx]``."""
    return tf.matmul(x, tf.gather(w, idx))


def _check(x, w, idx):
    if x.shape.rank != 3 or w.shape.rank != 3 or idx.shape.rank != 1:
        raise ShapeError(
            "indexed_matmul expects x [n, b, k], w [M, k, m], idx [n]; got "
            f"x {x.shape.as_list()}, w {w.shape.as_list()}, idx {idx.shape.as_list()}"
        )
    if x.shape[2] is not None and w.shape[1] is not None and x.shape[2] != w.shape[1]:
        raise ShapeError(f"indexed_matmul: x has k={x.shape[2]} but w has k={w.shape[1]}")
    if x.shape[0] is not None and idx.shape[0] is not None and x.shape[0] != idx.shape[0]:
        raise ShapeError(f"indexed_matmul: x has n={x.shape[0]} rows but idx has {idx.shape[0]} entries")


def indexed_matmul(x, w, idx, use_op: bool | None = None):
    """``out[i] = x[i] @ w[idx[i]]`` for a subset of a population.

    Args:
      x: float32 ``[n, b, k]``, the inputs of the ``n`` active members.
      w: float32 ``[M, k, m]``, the weight matrices of the whole population.
      idx: int32 ``[n]``, which member of ``w`` each row of ``x`` belongs to
        (values in ``[0, M)``).
      use_op: force (``True``) or forbid (``False``) the C++ kernel; by default
        it runs where :func:`tfevo.kernels.kernel` allows (not inside an
        XLA-compiled function, where XLA fuses the gather and the batched
        matmul itself, nor with a GPU present).

    Returns:
      float32 ``[n, b, m]``.

    Example:

    >>> w = tf.random.normal([8, 4, 3])
    >>> x = tf.random.normal([2, 5, 4])
    >>> y = indexed_matmul(x, w, tf.constant([6, 1]))   # shape [2, 5, 3]
    """
    x = tf.convert_to_tensor(x, tf.float32)
    w = tf.convert_to_tensor(w, tf.float32)
    idx = tf.cast(tf.convert_to_tensor(idx), tf.int32)
    _check(x, w, idx)
    op = kernels.kernel("TfevoIndexedMatmul", use_op, [x, w])
    return op(x, w, idx) if op is not None else indexed_matmul_reference(x, w, idx)


def to_half_reference(params):
    """Pure-TensorFlow reference of :func:`to_half`."""
    params = tf.convert_to_tensor(params, tf.float32)
    finite = tf.math.is_finite(params)
    big = tf.reduce_max(tf.where(finite, tf.abs(params), tf.zeros_like(params))) if params.shape.num_elements() else 0.0
    return tf.cast(params, tf.float16), tf.cast(big, tf.float32)


def to_half(params, use_op=None):
    """``(float16(params), max |x| over the finite entries)`` in one pass.

    Rounds to nearest (ties to even) like ``tf.cast``: values beyond float16's
    range become +-inf, NaN stays NaN.  The C++ op (``TfevoToHalf``, F16C,
    split over TensorFlow's pool) is several times faster than ``tf.cast`` on
    a large population and needs no temporaries for the range check; the
    reference is ``tf.cast`` plus a masked ``reduce_max``.
    """
    params = tf.convert_to_tensor(params, tf.float32)
    op = kernels.kernel("TfevoToHalf", use_op, [params])
    return tuple(op(params)) if op is not None else to_half_reference(params)

