"""Evaluation of all trees on all data points at once.

Two implementations with the same results:

* :func:`evaluate_reference` -- pure TensorFlow: a stack machine that walks
  the prefix arrays right to left (one ``tf.while_loop`` step per position,
  vectorised over trees and data points; the population is processed in
  chunks to bound memory).
* the C++ op ``GpEval``/``GpMse`` from ``custom_ops/gp_eval.cc`` -- the same
  stack machine threaded over (tree, block of 64 points) work items, i.e.
  population x data "hybrid" parallelism.

:func:`evaluate` and :func:`mse` pick the op when it is built and every
function in use is a built-in and :func:`tfevo.kernels.kernel` allows it,
else the reference.  ``use_op=False`` or ``True`` forces one.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from tfevo import kernels
from tfevo.core import ShapeError
from tfevo.gp.trees import CONST, FUNC, OUT, PAD, VAR, FunctionSet, Trees, get_function, node_arity

__all__ = ["evaluate", "evaluate_reference", "mse", "mse_reference"]


def _all_functions() -> FunctionSet:
    from tfevo.gp.trees import _TABLE

    return FunctionSet(list(_TABLE))


def _stack_depth(L: int, fset: FunctionSet) -> int:
    a = max(fset.max_arity, 2)
    return 1 + ((a - 1) * (L - 1)) // a + 1


def _eval_chunk(types, values, sizes, x, fset: FunctionSet, K: int):
    """Reference stack machine for one chunk of trees; returns [C, K, N]."""
    C = tf.shape(types)[0]
    L = types.shape[1]
    per_tree = x.shape.rank == 3
    N = tf.shape(x)[-2]
    S = _stack_depth(L, fset)
    ar = node_arity(types, values)
    maxlen = tf.reduce_max(sizes[:, 0])
    xt = tf.transpose(x, [0, 2, 1]) if per_tree else tf.transpose(x)  # [C,F,N] / [F,N]
    F = tf.shape(x)[-1]
    rows = tf.range(C)
    fids = [f.fid for f in fset.functions]
    tT, vT, aT = tf.transpose(types), tf.transpose(values), tf.transpose(ar)
    nan = tf.constant(np.nan, tf.float32)

    def body(j, stack, sp, outs, bad):
        t, v, a = tT[j], vT[j], aT[j]
        real = tf.not_equal(t, PAD)
        args = []
        for q in range(max(fset.max_arity, 1)):
            idx = tf.clip_by_value(sp - 1 - q, 0, S)
            args.append(tf.gather(stack, idx, batch_dims=1))  # [C, N]
        vi = tf.cast(v, tf.int32)
        var_ok = (vi >= 0) & (vi < F)
        if per_tree:
            xv = tf.gather(xt, tf.clip_by_value(vi, 0, F - 1), batch_dims=1)
        else:
            xv = tf.gather(xt, tf.clip_by_value(vi, 0, F - 1))
        xv = tf.where(var_ok[:, None], xv, nan)
        res = tf.where(tf.equal(t, CONST)[:, None], v[:, None] * tf.ones_like(args[0]), xv)
        known = tf.zeros_like(real)
        for f, fid in zip(fset.functions, fids):
            sel = tf.equal(t, FUNC) & tf.equal(vi, fid)
            known = known | sel
            res = tf.where(sel[:, None], f.tf_fn(*args[: f.arity]), res)
        is_out = tf.equal(t, OUT)
        res = tf.where(is_out[:, None], args[0], res)
        bad = bad | (tf.equal(t, FUNC) & ~known) | (real & (sp < a))
        if K > 1:
            k = tf.clip_by_value(vi, 0, K - 1)
            add = tf.where(is_out[:, None], args[0], 0.0)
            outs = tf.tensor_scatter_nd_add(outs, tf.stack([rows, k], 1), add)
        new_sp = tf.where(real & ~is_out, sp - a + 1, sp)
        slot = tf.where(real & ~is_out, new_sp - 1, S)  # S = scratch slot
        stack = tf.tensor_scatter_nd_update(stack, tf.stack([rows, slot], 1), res)
        return j - 1, stack, new_sp, outs, bad

    stack0 = tf.zeros(tf.stack([C, S + 1, N]))
    outs0 = tf.zeros(tf.stack([C, K, N]))
    _, stack, sp, outs, bad = tf.while_loop(
        lambda j, *_: j >= 0, body,
        (maxlen - 1, stack0, tf.zeros([C], tf.int32), outs0, tf.zeros([C], tf.bool)))
    bad = bad | tf.not_equal(sp, 1) | (sizes[:, 0] <= 0)
    y = stack[:, 0:1, :] if K == 1 else outs
    return tf.where(bad[:, None, None], nan, y)


def _prep(trees, x):
    t = tf.convert_to_tensor(trees[0], tf.int32)
    v = tf.convert_to_tensor(trees[1], tf.float32)
    s = tf.convert_to_tensor(trees[2], tf.int32)
    x = tf.convert_to_tensor(x, tf.float32)
    if t.shape.rank != 2:
        raise ShapeError(f"trees must be [P, L_max], got {t.shape.as_list()}")
    if x.shape.rank not in (2, 3):
        raise ShapeError(f"x must be [N, F] or [P, N, F], got {x.shape.as_list()}")
    return t, v, s, x


def evaluate_reference(trees, x, num_outputs: int = 1, functions=None,
                       chunk_bytes: int = 64 << 20) -> tf.Tensor:
    """Pure-TensorFlow evaluation of every tree on every point.

    Args:
      trees: :class:`Trees` (or a (types, values, sizes) triple), ``[P, L]``.
      x: float32 ``[N, F]`` (shared data) or ``[P, N, F]`` (per tree).
      num_outputs: ``K``; with ``K > 1`` output ``k`` is the sum of the
        values reaching the ``out k`` nodes.
      functions: the functions that may occur (a :class:`FunctionSet` or
        names); default: the whole table (slower).
      chunk_bytes: memory budget of one chunk of trees' stacks.

    Returns:
      float32 ``[P, N]`` (``K == 1``) or ``[P, K, N]``; NaN for invalid
      trees.
    """
    t, v, s, x = _prep(trees, x)
    if tf.executing_eagerly():  # run the position loop as a graph, not op by op
        fn = tf.function(lambda a, b, c, d: evaluate_reference((a, b, c), d, num_outputs, functions, chunk_bytes),
                         autograph=False)
        return fn(t, v, s, x)
    fset = _all_functions() if functions is None else FunctionSet(functions)
    K = int(num_outputs)
    P, L = t.shape[0], t.shape[1]
    N = x.shape[-2]
    S = _stack_depth(L, fset)
    per = max(1, int(chunk_bytes // max(1, (S + 1 + K) * (N or 1) * 4)))
    if P is None or P <= per:
        y = _eval_chunk(t, v, s, x, fset, K)
    else:
        nch = -(-P // per)
        pad = nch * per - P
        def padit(a):
            return tf.pad(a, [[0, pad]] + [[0, 0]] * (a.shape.rank - 1))
        tp, vp, spd = padit(t), padit(v), padit(s)
        if x.shape.rank == 3:
            xp = tf.reshape(padit(x), [nch, per, N, x.shape[2]])
        else:
            xp = None
        def one(i):
            ti = tf.reshape(tp, [nch, per, L])[i]
            vi = tf.reshape(vp, [nch, per, L])[i]
            si = tf.reshape(spd, [nch, per, L])[i]
            xi = x if xp is None else xp[i]
            return _eval_chunk(ti, vi, si, xi, fset, K)
        ys = tf.map_fn(one, tf.range(nch), fn_output_signature=tf.TensorSpec([per, K, N], tf.float32),
                       parallel_iterations=1)
        y = tf.reshape(ys, [nch * per, K, N])[:P]
    return y[:, 0, :] if K == 1 else y


def _kernel(op: str, use_op, fset: FunctionSet | None, inputs):
    """The GP kernel ``op`` when it serves this call (built-in functions only), else ``None``."""
    why = None if (fset is None or fset.builtin_only) else "it cannot evaluate user-registered functions"
    return kernels.kernel(op, use_op, inputs, unsupported=why)


def evaluate(trees, x, num_outputs: int = 1, functions=None, use_op: bool | None = None) -> tf.Tensor:
    """Evaluates every tree on every point: ``[P, N]`` or ``[P, K, N]``.

    Uses the C++ op where the kernel dispatch allows (``use_op=None``), else
    :func:`evaluate_reference`; see there for the arguments.
    """
    fset = None if functions is None else FunctionSet(functions)
    t, v, s, x = _prep(trees, x)
    op = _kernel("GpEval", use_op, fset, [t, x])
    if op is not None:
        y = op(t, v, s, x, num_outputs=int(num_outputs))
        return y[:, 0, :] if int(num_outputs) == 1 else y
    return evaluate_reference((t, v, s), x, num_outputs, fset)


def _finite_loss(loss):
    return tf.where(tf.math.is_finite(loss), loss, tf.constant(np.inf, tf.float32))


def mse_reference(trees, x, y, functions=None) -> tf.Tensor:
    """Mean squared error per tree ``[P]`` (pure TF); non-finite => ``inf``.

    The errors are squared and averaged in float64, as the GpMse kernel does: a
    float32 square overflows from |error| ~1.8e19 on, which would make a finite
    mean ``inf`` on this path only."""
    pred = evaluate_reference(trees, x, 1, functions)
    y = tf.convert_to_tensor(y, tf.float32)
    err = tf.cast(pred, tf.float64) - tf.cast(y, tf.float64)[None, :]
    return _finite_loss(tf.cast(tf.reduce_mean(tf.square(err), axis=1), tf.float32))


def mse(trees, x, y, functions=None, use_op: bool | None = None) -> tf.Tensor:
    """Mean squared error of every tree on ``(x [N, F], y [N])``: ``[P]``.

    With the op this is fused (predictions are never materialised).  A tree
    whose predictions are not all finite gets ``inf``.
    """
    fset = None if functions is None else FunctionSet(functions)
    t, v, s, x = _prep(trees, x)
    y = tf.convert_to_tensor(y, tf.float32)
    if y.shape.rank != 1:
        raise ShapeError(f"y must be [N], got {y.shape.as_list()}")
    if x.shape.rank != 2:
        raise ShapeError(f"x must be [N, F] for mse, got {x.shape.as_list()}")
    op = _kernel("GpMse", use_op, fset, [t, x, y])
    if op is not None:
        return _finite_loss(op(t, v, s, x, y))
    return mse_reference((t, v, s), x, y, fset)
