"""Random tree generation: full, grow and ramped half-and-half.

All trees of a population are generated together by one ``tf.while_loop``
over prefix positions (vectorised over trees).  Each tree keeps a stack of
the depths of its still-open child slots; a node becomes a function only if
its depth is below the tree's depth limit *and* the tree still fits into the
length budget after reserving one leaf per open slot, so no generated tree
ever exceeds ``max_len``.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np
import tensorflow as tf

from tfevo.core import ConfigError
from tfevo.gp.trees import CONST, FUNC, OUT, PAD, VAR, FunctionSet, Trees, compute_sizes

__all__ = ["TerminalSet", "generate", "grow_probability", "METHODS", "DEFAULT_DEPTH", "GROW_RULES"]

METHODS = ("full", "grow", "half_and_half")

#: ``(min, max)`` depth limits of random trees, both ends included: the
#: default of :func:`generate`, of subtree mutation's donor trees and of
#: ``GPConfig.init_depth`` / the estimators' ``init_depth``.  The range
#: means what gplearn 0.4's ``init_depth`` means (its ``_Program`` draws
#: ``randint(min, max + 1)``); gplearn's default ``(2, 6)`` is one level
#: deeper, which recovered fewer Nguyen targets here (docs/gp.md).
DEFAULT_DEPTH = (2, 5)

#: named rules for grow's probability of a function at an internal node
#: (see :func:`grow_probability`).
GROW_RULES = ("gplearn", "deap")


@dataclasses.dataclass
class TerminalSet:
    """Leaves a tree may use.

    Attributes:
      num_vars: number of input variables ``x0..x{num_vars-1}``.
      p_const: probability that a new leaf is a constant (else a variable),
        or ``"auto"`` (the default): ``1 / (num_vars + 1)``, gplearn's
        uniform draw among the ``num_vars`` variables and "a constant".
      const_range: ``(low, high)`` of ephemeral random constants, or None.
      constants: fixed constants drawn uniformly (used when
        ``const_range`` is None), e.g. ``(1.0, 2.0, 3.14159)``.
    """

    num_vars: int
    p_const: float | str = "auto"
    const_range: tuple | None = (-1.0, 1.0)
    constants: Sequence[float] = ()

    def __post_init__(self):
        if int(self.num_vars) < 0:
            raise ConfigError(f"num_vars must be >= 0, got {self.num_vars}")
        if isinstance(self.p_const, str):
            if self.p_const != "auto":
                raise ConfigError(f"p_const must be a number in [0, 1] or 'auto', got {self.p_const!r}")
        elif not (0.0 <= float(self.p_const) <= 1.0):
            raise ConfigError(f"p_const must be a number in [0, 1] or 'auto', got {self.p_const}")
        has_const = self.const_range is not None or len(self.constants) > 0
        if self.const_range is not None:
            lo, hi = self.const_range
            if not (np.isfinite(lo) and np.isfinite(hi) and lo <= hi):
                raise ConfigError(f"const_range must be finite (low, high) with low <= high, got {self.const_range}")
        if self.num_vars == 0 and not has_const:
            raise ConfigError("terminal set is empty: no variables and no constants")
        if self.num_vars == 0:
            self.p_const = 1.0
        if not has_const:
            self.p_const = 0.0

    #: an int32 scalar tensor that replaces ``num_vars`` while a graph is
    #: traced (lets one traced program serve every data width); not a field.
    runtime_num_vars = None

    def n_vars(self):
        """``num_vars`` (>= 1) as used for sampling: an int or a tensor."""
        if self.runtime_num_vars is not None:
            return tf.maximum(self.runtime_num_vars, 1)
        return max(int(self.num_vars), 1)

    def has_constants(self) -> bool:
        """True when a leaf can be a constant."""
        return self.p_const == "auto" or float(self.p_const) > 0

    def const_prob(self):
        """The probability of a constant leaf: a float, or a float32 tensor
        while ``runtime_num_vars`` is set and ``p_const`` is ``"auto"``."""
        if self.p_const != "auto":
            return float(self.p_const)
        if self.runtime_num_vars is not None:
            return 1.0 / (tf.cast(self.n_vars(), tf.float32) + 1.0)
        return 1.0 / (self.n_vars() + 1.0)

    def sample(self, seed, shape) -> tuple[tf.Tensor, tf.Tensor]:
        """Random leaves: (types int32, values float32) of ``shape``."""
        seeds = tf.random.experimental.stateless_split(seed, 3)
        u = tf.random.stateless_uniform(shape, seeds[0])
        is_const = u < self.const_prob()
        var = tf.random.stateless_uniform(shape, seeds[1], 0, self.n_vars(), dtype=tf.int32)
        if self.const_range is not None:
            lo, hi = self.const_range
            c = tf.random.stateless_uniform(shape, seeds[2], lo, hi)
        elif len(self.constants):
            k = tf.random.stateless_uniform(shape, seeds[2], 0, len(self.constants), dtype=tf.int32)
            c = tf.gather(tf.constant(np.asarray(self.constants, np.float32)), k)
        else:
            c = tf.zeros(shape)
        types = tf.where(is_const, CONST, VAR)
        values = tf.where(is_const, c, tf.cast(var, tf.float32))
        return types, values


def _generate_single(seed, popsize, max_len, fset: FunctionSet, terms: TerminalSet,
                     depth, full, p_func):
    """Core loop: trees of one output; ``depth`` int32 [P], ``full`` bool [P]."""
    P, L = int(popsize), int(max_len)
    S = L + 1
    fids = tf.constant(np.asarray(fset.ids, np.float32))
    fars = tf.constant(np.asarray(fset.arities, np.int32))
    nf = len(fset)
    kpos = tf.range(S)[None, :]

    # every random draw is made before the position loop (one op each), so
    # the loop body is a handful of small ops per position
    s3 = tf.random.experimental.stateless_split(seed, 3)
    fi_all = tf.random.stateless_uniform([L, P], s3[0], 0, nf, dtype=tf.int32)
    u_all = tf.random.stateless_uniform([L, P], s3[1])
    lt_all, lv_all = terms.sample(s3[2], [L, P])
    a_all = tf.gather(fars, fi_all)
    f_all = tf.gather(fids, fi_all)

    def body(i, stack, sp, ta_t, ta_v):
        active = sp > 0
        top = tf.maximum(sp - 1, 0)
        d = tf.gather(stack, top, batch_dims=1)
        a = a_all[i]
        fits = i + sp + a <= L
        want = (d < depth) & (full | tf.equal(d, 0) | (u_all[i] < p_func))
        is_f = active & want & fits
        typ = tf.where(is_f, FUNC, tf.where(active, lt_all[i], PAD))
        val = tf.where(is_f, f_all[i], tf.where(active, lv_all[i], 0.0))
        push = (kpos >= top[:, None]) & (kpos < (top + a)[:, None]) & is_f[:, None]
        stack = tf.where(push, (d + 1)[:, None], stack)
        sp = tf.where(active, sp - 1 + tf.where(is_f, a, 0), 0)
        return i + 1, stack, sp, ta_t.write(i, typ), ta_v.write(i, val)

    stack0 = tf.zeros([P, S], tf.int32)
    sp0 = tf.ones([P], tf.int32)
    # positions the loop stops before (every tree complete) stay zero: PAD
    ta_t = tf.TensorArray(tf.int32, size=L, element_shape=[P])
    ta_v = tf.TensorArray(tf.float32, size=L, element_shape=[P])
    _, _, _, ta_t, ta_v = tf.while_loop(
        lambda i, stack, sp, *_: (i < L) & tf.reduce_any(sp > 0), body, (tf.constant(0), stack0, sp0, ta_t, ta_v))
    types = tf.transpose(ta_t.stack())
    values = tf.transpose(ta_v.stack())
    types = tf.ensure_shape(types, [P, L])
    values = tf.ensure_shape(values, [P, L])
    return types, values


def _assemble_outputs(types, values, P, K, glue_fid):
    """Joins K subtrees per tree as add(out0(t0), add(out1(t1), ... outK-1(tK-1)))."""
    Ls = types.shape[1]
    t = tf.reshape(types, [P, K, Ls])
    v = tf.reshape(values, [P, K, Ls])
    n = tf.reduce_sum(tf.cast(tf.not_equal(t, PAD), tf.int32), axis=2)  # [P, K]
    is_last = tf.range(K) == K - 1
    head_t = tf.stack([tf.where(is_last, OUT, FUNC), tf.fill([K], OUT)], 1)  # [K, 2]
    head_v = tf.stack([tf.where(is_last, tf.cast(tf.range(K), tf.float32), float(glue_fid)),
                       tf.cast(tf.range(K), tf.float32)], 1)
    bt = tf.concat([tf.broadcast_to(head_t[None], [P, K, 2]), t], 2)  # [P, K, Ls+2]
    bv = tf.concat([tf.broadcast_to(head_v[None], [P, K, 2]), v], 2)
    blen = n + tf.where(is_last, 1, 2)[None, :]
    # for the last block, tokens are [OUT, t...]: shift its subtree left by one
    bt = tf.concat([bt[:, :-1], tf.concat([bt[:, -1:, :1], bt[:, -1:, 2:], bt[:, -1:, :1] * 0], 2)], 1)
    bv = tf.concat([bv[:, :-1], tf.concat([bv[:, -1:, :1], bv[:, -1:, 2:], bv[:, -1:, :1] * 0], 2)], 1)
    start = tf.cumsum(blen, axis=1, exclusive=True)  # [P, K]
    total = tf.reduce_sum(blen, axis=1)  # [P]
    L = K * (Ls + 2) - 1
    q = tf.range(L)[None, :]  # [1, L]
    blk = tf.reduce_sum(tf.cast(start[:, None, :] <= q[:, :, None], tf.int32), axis=2) - 1  # [P, L]
    off = q - tf.gather(start, blk, batch_dims=1)
    flat = tf.clip_by_value(blk * (Ls + 2) + off, 0, K * (Ls + 2) - 1)
    ot = tf.gather(tf.reshape(bt, [P, -1]), flat, batch_dims=1)
    ov = tf.gather(tf.reshape(bv, [P, -1]), flat, batch_dims=1)
    inside = q < total[:, None]
    return tf.where(inside, ot, PAD), tf.where(inside, ov, 0.0)


def grow_probability(rule, functions, terminals: TerminalSet, name: str = "p_func"):
    """grow's probability of a function at an internal node below the root.

    ``rule``:

    * ``"gplearn"`` (gplearn 0.4's ``randint(n_features + n_functions) <=
      n_functions``): ``min(1, (n_f + 1) / (n_f + n_vars))``; constants do
      not count, and with one variable grow makes full trees;
    * ``"deap"``: ``n_f / (n_f + n_terminals)``, the chance of drawing a
      function from the union of functions and terminals (the variables,
      plus one for "a constant" when constants are on);
    * a number in ``[0, 1]``: itself.

    Returns a float, or a float32 tensor while ``terminals.runtime_num_vars``
    is set (the width is then a runtime input).
    """
    if not isinstance(rule, str):
        try:
            p = float(rule)
        except (TypeError, ValueError):
            p = None
        if p is None or not 0.0 <= p <= 1.0:
            raise ConfigError(f"{name} must be a number in [0, 1] or one of {GROW_RULES}, got {rule!r}")
        return p
    if rule not in GROW_RULES:
        raise ConfigError(f"{name} must be a number in [0, 1] or one of {GROW_RULES}, got {rule!r}")
    nf = float(len(functions))
    runtime = terminals.runtime_num_vars is not None
    nv = tf.cast(terminals.n_vars(), tf.float32) if runtime else float(max(int(terminals.num_vars), 0))
    if rule == "gplearn":
        p = (nf + 1.0) / (nf + nv)
        return tf.minimum(p, 1.0) if runtime else min(p, 1.0)
    nt = nv + (1.0 if terminals.has_constants() else 0.0)
    return nf / (nf + (tf.maximum(nt, 1.0) if runtime else max(nt, 1.0)))


def generate(seed, popsize: int, max_len: int, functions, terminals: TerminalSet,
             depth: tuple = DEFAULT_DEPTH, method: str = "half_and_half", num_outputs: int = 1,
             p_func: float | str | None = "deap") -> Trees:
    """Generates ``popsize`` random trees of at most ``max_len`` nodes.

    Args:
      seed: int32 ``[2]`` stateless seed.
      popsize, max_len: ``P`` and ``L_max``.
      functions: a :class:`FunctionSet` (or list of names).
      terminals: a :class:`TerminalSet`.
      depth: ``(min, max)`` depth; each tree draws its own limit from this
        range, both ends included (ramped).  The root is depth 0.  Default
        :data:`DEFAULT_DEPTH`.
      method: ``"full"`` (every branch reaches the limit unless the length
        budget runs out), ``"grow"`` (internal nodes are functions with
        probability ``p_func``; the root is always a function) or
        ``"half_and_half"`` (half the trees each).
      num_outputs: ``K > 1`` builds trees
        ``add(out0(t0), add(out1(t1), ... out{K-1}(t{K-1})))`` with one
        random subtree per output.
      p_func: grow's probability of a function at an internal node: a
        number, or a rule of :func:`grow_probability`; default ``"deap"``
        (``n_functions / (n_functions + n_terminals)``); ``"gplearn"`` is
        ``min(1, (n_functions + 1) / (n_functions + n_variables))``, so its
        grow trees are full when there is one variable.  None is the default.

    Returns:
      :class:`Trees` with consistent sizes.

    Works eagerly and inside ``tf.function``.
    """
    if tf.executing_eagerly():  # run the position loop as a graph, not op by op
        args = (popsize, max_len, functions, terminals, depth, method, num_outputs, p_func)
        return tf.function(lambda s: generate(s, *args), autograph=False)(tf.convert_to_tensor(seed, tf.int32))
    fset = functions if isinstance(functions, FunctionSet) else FunctionSet(functions)
    dmin, dmax = int(depth[0]), int(depth[1])
    if dmin < 0 or dmax < dmin:
        raise ConfigError(f"depth must be (min, max) with 0 <= min <= max, got {depth}")
    if method not in METHODS:
        raise ConfigError(f"unknown generation method {method!r}; known: {', '.join(METHODS)}")
    P, K = int(popsize), int(num_outputs)
    if K < 1:
        raise ConfigError(f"num_outputs must be >= 1, got {num_outputs}")
    L = int(max_len)
    Lsub = L if K == 1 else (L - (2 * K - 1)) // K
    if Lsub < 1:
        raise ConfigError(f"max_len={L} is too small for {K} outputs (need >= {3 * K - 1})")
    p_func = grow_probability("deap" if p_func is None else p_func, fset, terminals)
    seed = tf.convert_to_tensor(seed, tf.int32)
    s = tf.random.experimental.stateless_split(seed, 3)
    n = P * K
    d = tf.random.stateless_uniform([n], s[0], dmin, dmax + 1, dtype=tf.int32)
    if method == "full":
        full = tf.ones([n], tf.bool)
    elif method == "grow":
        full = tf.zeros([n], tf.bool)
    else:
        full = tf.random.stateless_uniform([n], s[1]) < 0.5
    if not tf.is_tensor(p_func):
        p_func = float(p_func)
    types, values = _generate_single(s[2], n, Lsub, fset, terminals, d, full, p_func)
    if K > 1:
        from tfevo.gp.trees import get_function

        types, values = _assemble_outputs(types, values, P, K, get_function("add").fid)
        pad = L - types.shape[1]
        if pad > 0:
            types = tf.pad(types, [[0, 0], [0, pad]])
            values = tf.pad(values, [[0, 0], [0, pad]])
    sizes = compute_sizes(types, values)
    return Trees(types, values, sizes)
