"""Tensorized prefix encoding of GP trees.

A population of ``P`` trees is three tensors of shape ``[P, L_max]``
(:class:`Trees`):

* ``types``  (int32): :data:`PAD`, :data:`CONST`, :data:`VAR`, :data:`FUNC`
  or :data:`OUT`;
* ``values`` (float32): the constant, the variable index, the function id or
  the output index;
* ``sizes``  (int32): the number of nodes of the subtree rooted at each
  position (0 on padding).

Nodes are stored in prefix order, so the subtree rooted at position ``i`` is
the slice ``[i, i + sizes[i])`` and the whole tree occupies
``[0, sizes[0])``.  Positions after the tree are padding.

Output nodes (:data:`OUT`, value = output index ``k``) have one child.  They
pass their child's value up unchanged and add it to output ``k``; a tree with
``num_outputs > 1`` returns those sums (the root value is not an output).

Functions come from one global table (:mod:`tfevo.gp.functions`, re-exported
here).
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import numpy as np
import tensorflow as tf

from tfevo.core import ShapeError
from tfevo.gp.functions import (  # noqa: F401  (the function table is part of this module's API)
    _BY_ID, _TABLE, EXP_CLIP, MAX_ARITY, PROTECT_EPS, FunctionSet, GPFunction, _f32, _sympy_table, arity_table,
    builtin_functions, get_function, register_function)

__all__ = [
    "PAD", "CONST", "VAR", "FUNC", "OUT", "fold_prefix",
    "Trees", "GPFunction", "FunctionSet", "register_function", "get_function",
    "builtin_functions", "validate", "check_trees", "tree_lengths",
    "compute_sizes", "from_prefix", "to_prefix", "to_infix", "to_gplearn",
    "interpret", "PROTECT_EPS", "EXP_CLIP",
]

PAD, CONST, VAR, FUNC, OUT = 0, 1, 2, 3, 4


class Trees(NamedTuple):
    """A population of prefix-encoded trees, each field ``[P, L_max]``."""

    types: tf.Tensor
    values: tf.Tensor
    sizes: tf.Tensor


def node_arity(types: tf.Tensor, values: tf.Tensor) -> tf.Tensor:
    """Arity of every node (0 for leaves and padding), same shape as ``types``."""
    ids, ar = arity_table()
    fid = tf.cast(values, tf.int32)
    if ids.max() < 64:
        lut = np.zeros(64, np.int32)
        lut[ids] = ar
        a = tf.gather(tf.constant(lut), tf.clip_by_value(fid, 0, 63))
    else:
        a = tf.zeros_like(fid)
        for i, k in zip(ids, ar):
            a = tf.where(tf.equal(fid, int(i)), int(k), a)
    a = tf.where(tf.equal(types, FUNC), a, 0)
    return tf.where(tf.equal(types, OUT), 1, a)


def tree_lengths(trees: Trees) -> tf.Tensor:
    """Number of nodes of each tree, int32 [P]."""
    return trees.sizes[:, 0]


def compute_sizes(types: tf.Tensor, values: tf.Tensor) -> tf.Tensor:
    """Subtree sizes ``int32 [P, L]`` of prefix sequences (PAD => 0).

    Uses the prefix-sum characterisation: with ``d_j = sum_{k<=j} (1 - arity_k)``,
    the subtree at ``i`` ends at the first ``j >= i`` with
    ``d_j = d_{i-1} + 1``.  One right-to-left scan over positions keeps, for
    each level, the nearest position reaching it (vectorised over trees).
    """
    types = tf.convert_to_tensor(types, tf.int32)
    values = tf.convert_to_tensor(values, tf.float32)
    if tf.executing_eagerly():  # run the position loop as a graph, not op by op
        return tf.function(compute_sizes, autograph=False)(types, values)
    P = tf.shape(types)[0]
    L = types.shape[1] if types.shape[1] is not None else tf.shape(types)[1]
    ar = node_arity(types, values)
    real = tf.not_equal(types, PAD)
    step = tf.where(real, 1 - ar, 0)
    d = tf.cumsum(step, axis=1)  # d_j
    d_prev = d - step  # d_{i-1}
    # levels lie in [-(L), 1]; index = level + L
    Lt = tf.shape(types)[1]
    big = Lt + 1
    table0 = tf.fill([P, 2 * Lt + 2], big)
    rows = tf.range(P)
    dT = tf.transpose(d)
    dpT = tf.transpose(d_prev)
    realT = tf.transpose(real)

    def body(j, table, ends):
        lvl = dT[j] + Lt
        table = tf.tensor_scatter_nd_update(
            table, tf.stack([rows, lvl], 1), tf.fill([P], j))
        tgt = dpT[j] + 1 + Lt
        e = tf.gather(table, tgt, batch_dims=1)
        ends = ends.write(j, tf.where(realT[j], e - j + 1, 0))
        return j - 1, table, ends

    start = Lt - 1
    if types.shape[0] is not None:
        # positions after the last real node of every tree are padding (size
        # 0, the TensorArray's zero fill): the scan starts at that node
        last = tf.reduce_max(tf.where(real, tf.range(Lt)[None, :], -1))
        start = tf.maximum(last, 0)
        ends = tf.TensorArray(tf.int32, size=Lt, element_shape=[types.shape[0]])
    else:
        ends = tf.TensorArray(tf.int32, size=Lt)
    _, _, ends = tf.while_loop(lambda j, *_: j >= 0, body, (start, table0, ends))
    sizes = tf.transpose(ends.stack())
    sizes = tf.where(sizes > Lt, 0, sizes)  # incomplete trees => 0 (invalid)
    return tf.ensure_shape(sizes, types.shape)


def check_trees(trees, popsize: int | None = None, max_len: int | None = None,
                name: str = "trees") -> Trees:
    """Converts to :class:`Trees` and checks dtypes/shapes (not validity)."""
    if not isinstance(trees, (tuple, list)) or len(trees) != 3:
        raise ShapeError(f"{name} must be a (types, values, sizes) triple")
    t = tf.convert_to_tensor(trees[0])
    v = tf.convert_to_tensor(trees[1])
    s = tf.convert_to_tensor(trees[2])
    if not t.dtype.is_integer or not s.dtype.is_integer:
        raise ShapeError(f"{name}: types and sizes must be integer tensors, got {t.dtype.name}, {s.dtype.name}")
    if not v.dtype.is_floating:
        raise ShapeError(f"{name}: values must be a float tensor, got {v.dtype.name}")
    t, v, s = tf.cast(t, tf.int32), tf.cast(v, tf.float32), tf.cast(s, tf.int32)
    if t.shape.rank != 2 or t.shape != v.shape or t.shape != s.shape:
        raise ShapeError(
            f"{name}: types, values, sizes must all be [P, L_max], got "
            f"{t.shape.as_list()}, {v.shape.as_list()}, {s.shape.as_list()}")
    if popsize is not None and t.shape[0] != popsize:
        raise ShapeError(f"{name} must have {popsize} trees, got {t.shape[0]}")
    if max_len is not None and t.shape[1] != max_len:
        raise ShapeError(f"{name} must have L_max={max_len}, got {t.shape[1]}")
    return Trees(t, v, s)


def validate(trees, num_vars: int | None = None, num_outputs: int | None = None) -> np.ndarray:
    """Which trees are valid, ``bool [P]`` (NumPy).

    A tree is valid iff it is a non-empty prefix sequence whose stored sizes
    equal the sizes recomputed from the node arities, every position after
    the tree is padding, every function id is known, variable indices are
    in ``[0, num_vars)`` and output indices in ``[0, num_outputs)`` (when
    given).  Used by the tests after every operator.
    """
    t, v, s = (np.asarray(x) for x in trees)
    P, L = t.shape
    ok = np.ones(P, bool)
    ids, ar = arity_table()
    amap = dict(zip(ids.tolist(), ar.tolist()))
    for p in range(P):
        n = int(s[p, 0])
        if n < 1 or n > L or t[p, 0] == PAD:
            ok[p] = False
            continue
        if np.any(t[p, n:] != PAD) or np.any(s[p, n:] != 0) or np.any(t[p, :n] == PAD):
            ok[p] = False
            continue
        good = True
        arity = np.zeros(n, int)
        for i in range(n):
            ty = t[p, i]
            if ty == FUNC:
                fid = int(v[p, i])
                if fid != v[p, i] or fid not in amap:
                    good = False
                    break
                arity[i] = amap[fid]
            elif ty == OUT:
                arity[i] = 1
                if num_outputs is not None and not (0 <= v[p, i] < num_outputs and v[p, i] == int(v[p, i])):
                    good = False
                    break
            elif ty == VAR:
                if num_vars is not None and not (0 <= v[p, i] < num_vars and v[p, i] == int(v[p, i])):
                    good = False
                    break
            elif ty == CONST:
                pass
            else:
                good = False
                break
        if not good:
            ok[p] = False
            continue
        # recompute sizes by a right-to-left stack
        stack = []
        sizes = np.zeros(n, int)
        for i in range(n - 1, -1, -1):
            a = arity[i]
            if len(stack) < a:
                good = False
                break
            sz = 1 + sum(stack.pop() for _ in range(a))
            sizes[i] = sz
            stack.append(sz)
        if not good or len(stack) != 1 or not np.array_equal(sizes, s[p, :n]):
            ok[p] = False
    return ok


def from_prefix(nodes: Sequence[Sequence], max_len: int) -> Trees:
    """Builds :class:`Trees` from Python prefix lists.

    Each tree is a list of tokens: a function name (``"add"``), ``"x3"`` for
    variable 3, ``"out1"`` for an output node, or a number (a constant).

    >>> t = from_prefix([["add", "x0", 1.5]], max_len=8)
    >>> t.sizes.numpy()[0, :3].tolist()
    [3, 1, 1]
    """
    P = len(nodes)
    types = np.zeros((P, max_len), np.int32)
    values = np.zeros((P, max_len), np.float32)
    for p, toks in enumerate(nodes):
        if len(toks) > max_len:
            raise ShapeError(f"tree {p} has {len(toks)} nodes > max_len={max_len}")
        for i, tok in enumerate(toks):
            if isinstance(tok, str) and tok.startswith("x") and tok[1:].isdigit():
                types[p, i], values[p, i] = VAR, int(tok[1:])
            elif isinstance(tok, str) and tok.startswith("out") and tok[3:].isdigit():
                types[p, i], values[p, i] = OUT, int(tok[3:])
            elif isinstance(tok, str):
                types[p, i], values[p, i] = FUNC, get_function(tok).fid
            else:
                types[p, i], values[p, i] = CONST, float(tok)
    sizes = compute_sizes(tf.constant(types), tf.constant(values))
    return Trees(tf.constant(types), tf.constant(values), sizes)


def to_prefix(trees, index: int = 0) -> list:
    """The tokens of one tree (inverse of :func:`from_prefix`)."""
    t, v, s = (np.asarray(x)[index] for x in trees)
    out = []
    for i in range(int(s[0])):
        if t[i] == FUNC:
            out.append(get_function(int(v[i])).name)
        elif t[i] == VAR:
            out.append(f"x{int(v[i])}")
        elif t[i] == OUT:
            out.append(f"out{int(v[i])}")
        else:
            out.append(float(v[i]))
    return out


def _fmt_const(c: float, precision: int) -> str:
    s = f"{c:.{precision}g}"
    return f"({s})" if c < 0 else s


def _write(trees, index, var_names, const, var, call, out) -> str:
    """One tree as text: ``const(value)``, ``var(k)`` (unless ``var_names``
    names it), ``call(function, args)`` and ``out(k, text)`` write the nodes."""
    t, v, s = (np.asarray(x)[index] for x in trees)
    if int(s[0]) == 0:
        return "<empty>"

    def rec(i):
        ty = t[i]
        if ty == CONST:
            return const(float(v[i]))
        if ty == VAR:
            return var_names[int(v[i])] if var_names is not None else var(int(v[i]))
        if ty == OUT:
            return out(int(v[i]), rec(i + 1))
        f = get_function(int(v[i]))
        args, c = [], i + 1
        for _ in range(f.arity):
            args.append(rec(c))
            c += int(s[c])
        return call(f, args)

    return rec(0)


def _call_form(f, args):
    return f"{f.name}({', '.join(args)})"


def to_infix(trees, index: int = 0, var_names: Sequence[str] | None = None,
             precision: int = 4) -> str:
    """Readable infix string of one tree (``"(x0 + sin(x1))"``)."""
    return _write(trees, index, var_names, lambda c: _fmt_const(c, precision), lambda k: f"x{k}",
                  lambda f, a: f.infix.format(*a) if f.infix else _call_form(f, a), lambda k, x: f"out{k}<- {x}")


def to_gplearn(trees, index: int = 0, var_names: Sequence[str] | None = None) -> str:
    """One tree in gplearn's ``_Program`` syntax: every function in call form,
    variables ``X0``, ``X1``, ... (or ``var_names``), constants with three
    decimals (``"add(X0, mul(X1, 0.500))"``).  An output node of a
    multi-output tree reads ``out0(...)``."""
    return _write(trees, index, var_names, lambda c: f"{c:.3f}", lambda k: f"X{k}", _call_form,
                  lambda k, x: f"out{k}({x})")


def fold_prefix(types, values, sizes, num_outputs: int, leaf, call, add):
    """Evaluates one prefix-order tree with the caller's arithmetic.

    ``leaf(type, value)`` gives a constant's or a variable's value, ``call(f, args)``
    applies function ``f`` (a :class:`~tfevo.gp.functions.Function`) and ``add(a, b)``
    sums the subtrees under one output node. Returns ``(root, outs)``: the root's value and
    the ``num_outputs`` per-output sums (``None`` where no output node writes). The NumPy
    oracle, the Keras layer and the ``keras.ops`` export all walk trees through it.
    """
    outs = [None] * int(num_outputs)

    def rec(i):
        ty = types[i]
        if ty == CONST or ty == VAR:
            return leaf(ty, values[i])
        if ty == OUT:
            val = rec(i + 1)
            k = int(values[i])
            outs[k] = val if outs[k] is None else add(outs[k], val)
            return val
        f = get_function(int(values[i]))
        args, c = [], i + 1
        for _ in range(f.arity):
            args.append(rec(c))
            c += int(sizes[c])
        return call(f, args)

    return rec(0), outs


def interpret(trees, x, index: int, num_outputs: int = 1) -> np.ndarray:
    """Straightforward recursive NumPy interpreter of one tree (test oracle).

    ``x``: float32 ``[N, F]``.  Returns ``[N]`` (one output) or
    ``[num_outputs, N]``.
    """
    t, v, s = (np.asarray(a)[index] for a in trees)
    x = np.asarray(x, np.float32)
    N = x.shape[0]

    def leaf(ty, value):
        return np.full(N, value, np.float32) if ty == CONST else x[:, int(value)].astype(np.float32)

    root, outs = fold_prefix(t, v, s, num_outputs, leaf, lambda f, args: _f32(f.np_fn(*args)),
                             lambda a, b: (a + b).astype(np.float32))
    if num_outputs == 1:
        return root
    return np.stack([np.zeros(N, np.float32) if o is None else o for o in outs])
