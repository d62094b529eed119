"""Variation operators built on one primitive, :func:`subtree_exchange`.

Every operator works on the whole population at once (``[P, L_max]``
tensors, no loop over trees or positions) and returns ``(children, ok)``:
``ok[p]`` is False when child ``p`` would exceed ``L_max`` (or the operator
had nothing to act on, e.g. no constant to mutate); then the parent is
returned unchanged in that row.  Operators take an ``int32 [2]`` stateless
seed.

Operators (EvoGP's table):

==========================  ==============================================
:func:`one_point_crossover`  random subtree of the recipient <- random
                             subtree of the donor (points biased to
                             function nodes, 90/10 by default)
:func:`leaf_biased_crossover` same, points are leaves w.p. ``p_leaf``
:func:`subtree_mutation`     crossover with a freshly generated tree
                             (headless chicken)
:func:`hoist_mutation`       the child is a random subtree of the parent
:func:`point_mutation`       one node -> another of the same arity/leaf
:func:`multi_point_mutation` each node w.p. ``p`` as above
:func:`insert_mutation`      a new function is inserted above a node
:func:`delete_mutation`      a function node is replaced by one child
:func:`constant_mutation`    one constant += N(0, sigma)
:func:`multi_constant_mutation` each constant w.p. ``p`` += N(0, sigma)
==========================  ==============================================
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from tfevo.gp.generation import DEFAULT_DEPTH, TerminalSet, generate
from tfevo.gp.trees import CONST, FUNC, MAX_ARITY, OUT, PAD, VAR, FunctionSet, Trees, node_arity

__all__ = [
    "subtree_exchange", "random_node", "weighted_node", "one_point_crossover", "leaf_biased_crossover",
    "subtree_mutation", "hoist_mutation", "point_mutation", "multi_point_mutation",
    "insert_mutation", "delete_mutation", "constant_mutation", "multi_constant_mutation",
    "child_positions",
]


def _g(a, idx):
    """Row-wise gather with clipped indices: a [P, L], idx [P, M] -> [P, M]."""
    L = tf.shape(a)[1]
    return tf.gather(a, tf.clip_by_value(idx, 0, L - 1), batch_dims=1)


def subtree_exchange(trees: Trees, node, donor: Trees, donor_node):
    """Replaces the subtree at ``node`` of each tree by the donor's subtree.

    Args:
      trees: recipients ``[P, L]``.
      node: int32 ``[P]``, root of the subtree to replace in each recipient.
      donor: donor trees ``[P, L_d]`` (any ``L_d``).
      donor_node: int32 ``[P]``, root of the inserted subtree in each donor.

    Returns:
      ``(children, ok)``: children ``[P, L]``; ``ok`` is False where the
      child would exceed ``L`` (that row keeps the recipient).

    The subtree sizes of the recipient's ancestors of ``node`` change by
    ``size_new - size_old``; everything else is a shifted copy, so the whole
    exchange is a few row-wise gathers.
    """
    t, v, s = trees
    dt, dv, ds = donor
    L = t.shape[1] or tf.shape(t)[1]
    node = tf.cast(node, tf.int32)[:, None]
    dnode = tf.cast(donor_node, tf.int32)[:, None]
    n = s[:, :1]
    s_old = _g(s, node)
    s_new = _g(ds, dnode)
    n_new = n - s_old + s_new
    ok = n_new[:, 0] <= L
    q = tf.range(L)[None, :]
    pre = q < node
    sub = (q >= node) & (q < node + s_new)
    post = (q >= node + s_new) & (q < n_new)
    anc = pre & (q + s > node)
    # one packed gather per source: (type, value, size) as float32 (exact for ints < 2**24)
    pd = tf.stack([tf.cast(dt, tf.float32), dv, tf.cast(ds, tf.float32)], -1)
    pr = tf.stack([tf.cast(t, tf.float32), v, tf.cast(s, tf.float32)], -1)
    Ld = tf.shape(dt)[1]
    gs = tf.gather(pd, tf.clip_by_value(dnode + q - node, 0, Ld - 1), batch_dims=1)
    gp = tf.gather(pr, tf.clip_by_value(q - s_new + s_old, 0, L - 1), batch_dims=1)
    src = tf.where(sub[..., None], gs, tf.where(post[..., None], gp, 0.0))
    ct = tf.where(pre, t, tf.cast(src[..., 0], tf.int32))
    cv = tf.where(pre, v, src[..., 1])
    cs = tf.where(pre, s + tf.where(anc, s_new - s_old, 0), tf.cast(src[..., 2], tf.int32))
    keep = ok[:, None]
    return Trees(tf.where(keep, ct, t), tf.where(keep, cv, v), tf.where(keep, cs, s)), ok


def random_node(seed, trees: Trees, mask=None):
    """A random node index per tree, int32 [P].

    Uniform over the tree's nodes, or over the nodes where ``mask`` (bool
    ``[P, L]``) is True.  Returns ``(index, found)``; ``found`` is False
    where no node qualifies (then index 0).
    """
    sizes = trees.sizes
    P = tf.shape(sizes)[0]
    u = tf.random.stateless_uniform([P], seed)
    if mask is None:
        n = sizes[:, 0]
        idx = tf.minimum(tf.cast(u * tf.cast(n, tf.float32), tf.int32), tf.maximum(n - 1, 0))
        return idx, n > 0
    m = tf.cast(mask & tf.not_equal(trees.types, PAD), tf.int32)
    cnt = tf.cumsum(m, axis=1)
    total = cnt[:, -1]
    k = tf.minimum(tf.cast(u * tf.cast(total, tf.float32), tf.int32), tf.maximum(total - 1, 0))
    idx = tf.cast(tf.argmax(tf.cast(cnt > k[:, None], tf.int32), axis=1), tf.int32)
    found = total > 0
    return tf.where(found, idx, 0), found


def weighted_node(seed, trees: Trees, p_func: float = 0.9, mask=None):
    """A random node index per tree, int32 [P], where every function (or
    output) node has weight ``p_func`` and every leaf ``1 - p_func``
    (gplearn's and Koza's bias towards internal crossover points;
    ``p_func = 0.5`` is uniform).

    With ``mask`` (bool ``[P, L]``) only the nodes where it is True are
    candidates, and ``(index, found)`` is returned (``found`` False where no
    node qualifies, then index 0).  Without it a tree of one leaf gives 0."""
    t = trees.types
    P = tf.shape(t)[0]
    internal = tf.equal(t, FUNC) | tf.equal(t, OUT)
    leaf = tf.equal(t, CONST) | tf.equal(t, VAR)
    w = tf.where(internal, float(p_func), tf.where(leaf, 1.0 - float(p_func), 0.0))
    if mask is not None:
        w = tf.where(mask, w, 0.0)
    cum = tf.cumsum(w, axis=1)
    total = cum[:, -1]
    u = tf.random.stateless_uniform([P], seed) * total
    idx = tf.reduce_sum(tf.cast(cum <= u[:, None], tf.int32), axis=1)  # first index with cum > u
    if mask is None:
        n = trees.sizes[:, 0]
        return tf.minimum(idx, tf.maximum(n - 1, 0))
    # the last candidate position bounds idx when rounding puts u at the top
    cand = tf.cast(mask & (internal | leaf), tf.int32)
    last = tf.shape(t)[1] - 1 - tf.argmax(tf.reverse(cand, [1]), axis=1, output_type=tf.int32)
    found = total > 0
    return tf.where(found, tf.minimum(idx, last), 0), found


def child_positions(trees: Trees, node):
    """Positions of the (up to 4) children of ``node``: int32 [P, 4]."""
    s = trees.sizes
    node = tf.cast(node, tf.int32)[:, None]
    c = [node + 1]
    for _ in range(MAX_ARITY - 1):
        c.append(c[-1] + _g(s, c[-1]))
    return tf.concat(c, axis=1)


def one_point_crossover(seed, trees: Trees, donors: Trees, p_func: float | None = 0.9):
    """Replaces a random subtree of each tree by a random subtree of the
    matching donor.

    The crossover points are drawn with :func:`weighted_node` (function
    nodes weigh ``p_func``, leaves ``1 - p_func``: gplearn's choice with the
    default 0.9); ``p_func=None`` draws them uniformly over the nodes
    (DEAP's ``cxOnePoint``)."""
    s = tf.random.experimental.stateless_split(seed, 2)
    return _exchange_at_drawn_points(s[0], s[1], trees, donors, p_func)


def _exchange_at_drawn_points(seed_i, seed_j, trees: Trees, donors: Trees, p_func: float | None):
    """:func:`subtree_exchange` at a point of each tree drawn with ``p_func``
    weighting (``None``: uniform over the nodes)."""
    if p_func is None:
        i, _ = random_node(seed_i, trees)
        j, _ = random_node(seed_j, donors)
    else:
        i = weighted_node(seed_i, trees, p_func)
        j = weighted_node(seed_j, donors, p_func)
    return subtree_exchange(trees, i, donors, j)


def leaf_biased_crossover(seed, trees: Trees, donors: Trees, p_leaf: float = 0.1):
    """One-point crossover whose points are leaves with probability
    ``p_leaf`` (same choice in both parents) and internal nodes otherwise
    (Koza's 90/10 rule; DEAP's ``cxOnePointLeafBiased``)."""
    s = tf.random.experimental.stateless_split(seed, 3)
    P = tf.shape(trees.types)[0]
    leaf = tf.random.stateless_uniform([P], s[0]) < p_leaf

    def pick(seed, tr):
        is_leaf = tf.equal(tr.types, CONST) | tf.equal(tr.types, VAR)
        internal = tf.equal(tr.types, FUNC) | tf.equal(tr.types, OUT)
        want = tf.where(leaf[:, None], is_leaf, internal)
        idx, found = random_node(seed, tr, want)
        alt, _ = random_node(seed, tr)  # no internal node: fall back to any
        return tf.where(found, idx, alt)

    return subtree_exchange(trees, pick(s[1], trees), donors, pick(s[2], donors))


def subtree_mutation(seed, trees: Trees, functions: FunctionSet, terminals: TerminalSet,
                     depth: tuple = DEFAULT_DEPTH, max_subtree_len: int | None = None,
                     method: str = "half_and_half", p_func: float | None = 0.9,
                     grow_p_func: float | str = "deap"):
    """Headless-chicken subtree mutation: a crossover with a freshly
    generated random tree as the donor.

    The donor is made like an initial tree (``method`` over the ``depth``
    range, both ends included, default :data:`~tfevo.gp.generation.DEFAULT_DEPTH`
    as for the initial trees; at most ``max_subtree_len`` nodes, default
    the trees' ``L_max``); the replaced subtree and the
    inserted one are drawn as in :func:`one_point_crossover` (``p_func``
    weighting, ``None`` for uniform; ``grow_p_func`` is the donor's
    :func:`~tfevo.gp.generation.generate` ``p_func``).  With
    ``method="grow"`` and ``p_func=None`` this is the classic "replace a
    random node by a random subtree"."""
    s = tf.random.experimental.stateless_split(seed, 3)
    P, L = trees.types.shape
    new = generate(s[0], P, L if max_subtree_len is None else max_subtree_len, functions, terminals, depth, method,
                   p_func=grow_p_func)
    return _exchange_at_drawn_points(s[1], s[2], trees, new, p_func)


def hoist_mutation(seed, trees: Trees, root_only: bool = True, p_func: float | None = None):
    """Hoist mutation.

    With ``root_only`` (Koza/DEAP semantics) the child *is* a random proper
    subtree of the parent (a single-node tree is returned unchanged, ``ok``
    False).  Otherwise (gplearn) a random subtree is replaced by a random
    subtree of itself, which may be that subtree itself (the child is then
    a copy, as in gplearn, ``ok`` True).  Both points are drawn with the
    :func:`weighted_node` bias ``p_func`` (``None``: uniform).
    """
    s = tf.random.experimental.stateless_split(seed, 2)
    t, _, sz = trees
    P, L = tf.shape(t)[0], tf.shape(t)[1]
    if root_only:
        i = tf.zeros([P], tf.int32)
    elif p_func is None:
        i, _ = random_node(s[0], trees)
    else:
        i = weighted_node(s[0], trees, p_func)
    si = tf.gather(sz, i, batch_dims=1)
    q = tf.range(L)[None, :]
    first = i + 1 if root_only else i  # gplearn's inner point may be the subtree's own root
    inside = (q >= first[:, None]) & (q < (i + si)[:, None])
    if p_func is None:
        j, found = random_node(s[1], trees, inside)
    else:
        j, found = weighted_node(s[1], trees, p_func, inside)
    child, ok = subtree_exchange(trees, i, trees, tf.where(found, j, i))
    return child, ok & found


def _same_arity_table(functions: FunctionSet):
    counts = np.zeros(MAX_ARITY + 1, np.int32)
    table = np.zeros((MAX_ARITY + 1, len(functions)), np.float32)
    for fid, a in zip(functions.ids, functions.arities):
        table[a, counts[a]] = fid
        counts[a] += 1
    return tf.constant(table), tf.constant(counts)


def _replacement_nodes(seed, trees: Trees, functions: FunctionSet, terminals: TerminalSet):
    """A same-arity replacement for every node: (types, values) [P, L]."""
    s = tf.random.experimental.stateless_split(seed, 2)
    t, v = trees.types, trees.values
    table, counts = _same_arity_table(functions)
    ar = node_arity(t, v)
    cnt = tf.gather(counts, ar)
    u = tf.random.stateless_uniform(tf.shape(v), s[0])
    k = tf.minimum(tf.cast(u * tf.cast(cnt, tf.float32), tf.int32), tf.maximum(cnt - 1, 0))
    new_f = tf.gather_nd(table, tf.stack([ar, k], -1))
    is_f = tf.equal(t, FUNC) & (cnt > 0)
    lt, lv = terminals.sample(s[1], tf.shape(v))
    is_leaf = tf.equal(t, CONST) | tf.equal(t, VAR)
    nt = tf.where(is_leaf, lt, t)
    nv = tf.where(is_f, new_f, tf.where(is_leaf, lv, v))
    return nt, nv


def point_mutation(seed, trees: Trees, functions: FunctionSet, terminals: TerminalSet):
    """Replaces one random node: a function by a random function of the same
    arity, a leaf by a random leaf.  Sizes never change."""
    s = tf.random.experimental.stateless_split(seed, 2)
    i, _ = random_node(s[0], trees, tf.not_equal(trees.types, OUT))
    nt, nv = _replacement_nodes(s[1], trees, functions, terminals)
    hit = tf.equal(tf.range(tf.shape(nt)[1])[None, :], i[:, None])
    P = tf.shape(nt)[0]
    return Trees(tf.where(hit, nt, trees.types), tf.where(hit, nv, trees.values), trees.sizes), tf.ones([P], tf.bool)


def multi_point_mutation(seed, trees: Trees, functions: FunctionSet, terminals: TerminalSet,
                         p: float = 0.05):
    """Replaces every node independently with probability ``p`` (gplearn's
    point mutation with ``p_point_replace``)."""
    s = tf.random.experimental.stateless_split(seed, 2)
    nt, nv = _replacement_nodes(s[1], trees, functions, terminals)
    hit = (tf.random.stateless_uniform(tf.shape(nv), s[0]) < p) & tf.not_equal(trees.types, PAD)
    P = tf.shape(nt)[0]
    return Trees(tf.where(hit, nt, trees.types), tf.where(hit, nv, trees.values), trees.sizes), tf.ones([P], tf.bool)


def insert_mutation(seed, trees: Trees, functions: FunctionSet, terminals: TerminalSet):
    """Inserts a random function above a random node; the old subtree becomes
    one (random) child of it and its other children are random leaves."""
    s = tf.random.experimental.stateless_split(seed, 4)
    t, v, sz = trees
    P, L = tf.shape(t)[0], t.shape[1]
    Ld = L + MAX_ARITY
    i, _ = random_node(s[0], trees)
    fids = tf.constant(np.asarray(functions.ids, np.float32))
    fars = tf.constant(np.asarray(functions.arities, np.int32))
    fi = tf.random.stateless_uniform([P], s[1], 0, len(functions), dtype=tf.int32)
    a = tf.gather(fars, fi)[:, None]
    c = tf.cast(tf.random.stateless_uniform([P, 1], s[2]) * tf.cast(a, tf.float32), tf.int32)
    c = tf.minimum(c, a - 1)
    si = _g(sz, i[:, None])
    q = tf.range(Ld)[None, :]
    lt, lv = terminals.sample(s[3], [P, Ld])
    head = tf.equal(q, 0)
    sub = (q >= c + 1) & (q < c + 1 + si)
    leaf = ((q >= 1) & (q < c + 1)) | ((q >= c + 1 + si) & (q < si + a))
    src = i[:, None] + q - c - 1
    dt = tf.where(head, FUNC, tf.where(sub, _g(t, src), tf.where(leaf, lt, PAD)))
    dv = tf.where(head, tf.gather(fids, fi)[:, None], tf.where(sub, _g(v, src), tf.where(leaf, lv, 0.0)))
    ds = tf.where(head, si + a, tf.where(sub, _g(sz, src), tf.where(leaf, 1, 0)))
    return subtree_exchange(trees, i, Trees(dt, dv, ds), tf.zeros_like(i))


def delete_mutation(seed, trees: Trees):
    """Replaces a random function node by one of its children (chosen
    uniformly).  Trees without function nodes are unchanged (``ok`` False)."""
    s = tf.random.experimental.stateless_split(seed, 2)
    i, found = random_node(s[0], trees, tf.equal(trees.types, FUNC))
    a = tf.gather(node_arity(trees.types, trees.values), i, batch_dims=1)
    k = tf.cast(tf.random.stateless_uniform(tf.shape(a), s[1]) * tf.cast(a, tf.float32), tf.int32)
    k = tf.clip_by_value(k, 0, tf.maximum(a - 1, 0))
    j = tf.gather(child_positions(trees, i), k, batch_dims=1)
    child, ok = subtree_exchange(trees, i, trees, tf.where(found, j, i))
    return child, ok & found


def constant_mutation(seed, trees: Trees, sigma: float = 0.1):
    """Adds ``N(0, sigma)`` to one random constant of each tree (``ok`` False
    for trees without constants)."""
    s = tf.random.experimental.stateless_split(seed, 2)
    i, found = random_node(s[0], trees, tf.equal(trees.types, CONST))
    P = tf.shape(i)[0]
    noise = tf.random.stateless_normal([P], s[1]) * sigma
    hit = tf.equal(tf.range(tf.shape(trees.values)[1])[None, :], i[:, None]) & found[:, None]
    return Trees(trees.types, tf.where(hit, trees.values + noise[:, None], trees.values), trees.sizes), found


def multi_constant_mutation(seed, trees: Trees, sigma: float = 0.1, p: float = 0.5):
    """Adds ``N(0, sigma)`` to every constant independently w.p. ``p``."""
    s = tf.random.experimental.stateless_split(seed, 2)
    is_c = tf.equal(trees.types, CONST)
    hit = is_c & (tf.random.stateless_uniform(tf.shape(trees.values), s[0]) < p)
    noise = tf.random.stateless_normal(tf.shape(trees.values), s[1]) * sigma
    found = tf.reduce_any(is_c, axis=1)
    return Trees(trees.types, tf.where(hit, trees.values + noise, trees.values), trees.sizes), found
