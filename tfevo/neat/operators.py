"""Whole-population NEAT variation and distance as tensor programs.

All functions work on every genome at once (leading axis P) with masks and
``tf.where``; nothing loops over genomes or genes in Python.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from tfevo import random_ops as _random_ops
from tfevo.neat import functions as F
from tfevo.neat.config import NEATConfig
from tfevo.neat.genome import (CONN_DIM, CONN_ENABLED, CONN_IN, CONN_MARKER, CONN_OUT, CONN_WEIGHT,
                               NODE_ACT, NODE_AGG, NODE_BIAS, NODE_DIM, NODE_KEY, NODE_RESPONSE,
                               conn_slots, conn_valid, node_valid, pair_hash)

__all__ = ["align", "distance_one_to_many", "distance_matrix", "crossover", "crossover_given", "crossover_words",
           "mutate", "mutate_given", "mutate_pre", "mutate_post", "pair_markers", "mutation_uniforms", "mutate_attributes",
           "reachable_from", "reachable_along"]

_BIG = 3.0e38
_BRUTE_MAX = 4096  # align() on static widths: all-pairs compare up to this many per row


def align(query: tf.Tensor, keys: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """Row-wise lookup: for each ``query [M, Q]`` value, whether it occurs in
    ``keys [M, K]`` and at which index (NaN never matches).  O(M K log K)."""
    Q, K = query.shape[-1], keys.shape[-1]
    if Q is not None and K is not None and Q * K <= _BRUTE_MAX:
        # static small widths (the XLA breed programs): compare all pairs,
        # which XLA fuses into one loop; its CPU sort is several times slower.
        # Same answer: the first match (ids are unique within a genome).
        eq = tf.equal(query[..., :, None], keys[..., None, :])  # NaN never equal
        return tf.reduce_any(eq, -1), tf.argmax(tf.cast(eq, tf.int8), -1, output_type=tf.int32)
    kb = tf.where(tf.math.is_nan(keys), tf.constant(np.inf, tf.float32), keys)
    order = tf.argsort(kb, axis=-1, stable=True)
    sorted_b = tf.gather(kb, order, batch_dims=1)
    q = tf.where(tf.math.is_nan(query), tf.constant(-1.0, tf.float32), query)
    pos = tf.searchsorted(sorted_b, q, side="left", out_type=tf.int32)
    pos = tf.minimum(pos, tf.shape(keys)[-1] - 1)
    found = tf.equal(tf.gather(sorted_b, pos, batch_dims=1), q) & ~tf.math.is_nan(query)
    return found, tf.gather(order, pos, batch_dims=1)


def distance_one_to_many(cfg: NEATConfig, rep_nodes, rep_conns, nodes, conns) -> tf.Tensor:
    """Compatibility distance of one genome (``[N,5]``, ``[C,5]``) to each of
    ``nodes [P,N,5]``, ``conns [P,C,5]`` -> ``[P]`` (neat-python's formula,
    see :func:`distance_matrix`)."""
    return distance_matrix(cfg, rep_nodes[None], rep_conns[None], nodes, conns)[0]


_TWO_PI = 6.283185307179586
_ONE_MINUS = 1.0 - 2.0 ** -24


def _coin_bits(seed, shape_p, n: int) -> tf.Tensor:
    """``n`` independent fair coins per row ``[P, n]`` (bool) from one draw
    of ``ceil(n / 32)`` random 32-bit words per row."""
    words = (n + 31) // 32
    raw = tf.random.stateless_uniform(tf.stack([shape_p, words]), seed, minval=None, maxval=None, dtype=tf.int32)
    return _bits(raw, n)


def crossover_words(P, N, C, seed) -> tf.Tensor:
    """The random 32-bit words ``[P, ceil((4N + 2C) / 32)]`` one crossover
    call of ``N`` node and ``C`` connection slots consumes: exactly
    TensorFlow's full-range int32 stateless draw, computed by
    :func:`tfevo.random_ops.stateless_int32_bits` (see :func:`crossover_given`)."""
    words = (4 * N + 2 * C + 31) // 32
    # = tf.random.stateless_uniform(..., minval=None, maxval=None, dtype=tf.int32), on tfevo's Philox kernel
    return _random_ops.stateless_int32_bits(tf.stack([P, words]), seed)


def _bits(raw, n):
    """``n`` coins per row from the random int32 words ``raw [P, W]``."""
    j = tf.range(n)
    w = tf.gather(raw, j // 32, axis=1)
    return tf.equal(tf.bitwise.bitwise_and(tf.bitwise.right_shift(w, (j % 32)[None, :]), 1), 1)


def crossover(nodes1, conns1, nodes2, conns2, seed) -> tuple[tf.Tensor, tf.Tensor]:
    """Children of parent pairs (parent 1 is the fitter one, row-wise).

    A child has exactly parent 1's genes (its disjoint and excess genes
    included); each attribute of a homologous gene (same node key / same
    innovation marker) comes from either parent with probability 1/2.  All
    coins of a generation come from one draw of random bits.
    """
    P, N = tf.shape(nodes1)[0], tf.shape(nodes1)[1]
    C = tf.shape(conns1)[1]
    return crossover_given(nodes1, conns1, nodes2, conns2, crossover_words(P, N, C, seed))


def crossover_given(nodes1, conns1, nodes2, conns2, words) -> tuple[tf.Tensor, tf.Tensor]:
    """:func:`crossover` with its random words ``[P, ceil((4N + 2C) / 32)]``
    passed in (from :func:`crossover_words`); no random op inside, so it
    compiles with XLA."""
    P, N = tf.shape(nodes1)[0], tf.shape(nodes1)[1]
    C = tf.shape(conns1)[1]
    coins = _bits(words, 4 * N + 2 * C)
    f = tf.zeros(tf.stack([P, N, 1]), tf.bool)
    ncoin = tf.concat([f, tf.reshape(coins[:, :4 * N], tf.stack([P, N, 4]))], -1)  # key column never swaps
    found, idx = align(nodes1[..., NODE_KEY], nodes2[..., NODE_KEY])
    other = tf.gather(nodes2, idx, batch_dims=1)
    nodes = tf.where(found[..., None] & ncoin, other, nodes1)
    fc = tf.zeros(tf.stack([P, C, 2]), tf.bool)
    ccoin = tf.concat([fc, tf.reshape(coins[:, 4 * N:], tf.stack([P, C, 2])), fc[..., :1]], -1)  # enabled, weight
    found, idx = align(conns1[..., CONN_MARKER], conns2[..., CONN_MARKER])
    other = tf.gather(conns2, idx, batch_dims=1)
    conns = tf.where(found[..., None] & ccoin, other, conns1)
    return nodes, conns


def reachable_from(adj: tf.Tensor, start: tf.Tensor) -> tf.Tensor:
    """bool [P, N]: nodes reachable from slot ``start [P]`` along ``adj [P,N,N]``."""
    n = adj.shape[-1]
    r0 = tf.one_hot(start, n, dtype=tf.float32)
    a = tf.cast(adj, tf.float32)

    def body(i, r, changed):
        nr = tf.cast((r + tf.squeeze(tf.matmul(r[:, None, :], a), 1)) > 0.0, tf.float32)
        return i + 1, nr, tf.reduce_any(nr != r)

    _, r, _ = tf.while_loop(lambda i, r, c: c & (i < n), body, (0, r0, True))
    return r > 0.0


def reachable_along_dense(i_in: tf.Tensor, i_out: tf.Tensor, edge: tf.Tensor, start: tf.Tensor, num_nodes: int) -> tf.Tensor:
    """:func:`reachable_along` without scatters (for XLA, whose CPU scatter is
    serial): each step is ``any over connections of (source reached AND
    target == node)`` on a ``[P, C, N]`` one-hot of the targets, which XLA
    fuses into one loop nest."""
    n = num_nodes
    r0 = tf.one_hot(start, n, on_value=True, off_value=False)
    to = tf.equal(i_out[..., None], tf.range(n)) & edge[..., None]  # [P, C, N]

    def body(i, r, changed):
        src = tf.gather(r, i_in, batch_dims=1)  # [P, C]
        nr = r | tf.reduce_any(to & src[..., None], 1)
        return i + 1, nr, tf.reduce_any(nr != r)

    _, r, _ = tf.while_loop(lambda i, r, c: c & (i < n), body, (0, r0, True))
    return r


def reachable_along(i_in: tf.Tensor, i_out: tf.Tensor, edge: tf.Tensor, start: tf.Tensor, num_nodes) -> tf.Tensor:
    """bool [P, N]: node slots reachable from slot ``start [P]`` along the
    connection list (slot indices ``i_in``/``i_out [P, C]``, ``edge [P, C]``
    bool).  Works on the [P, C] list (no [P, N, N] matrix), one gather and one
    segment sum per step, at most N steps (stops when nothing changes)."""
    P = tf.shape(i_in)[0]
    n = num_nodes
    r0 = tf.one_hot(start, n, on_value=True, off_value=False)
    flat_out = tf.reshape(i_out + tf.range(P)[:, None] * n, [-1])

    def body(i, r, changed):
        src = tf.gather(r, i_in, batch_dims=1) & edge
        hit = tf.math.unsorted_segment_max(tf.reshape(tf.cast(src, tf.int32), [-1]), flat_out, P * n)
        nr = r | (tf.reshape(hit, tf.stack([P, n])) > 0)
        return i + 1, nr, tf.reduce_any(nr != r)

    _, r, _ = tf.while_loop(lambda i, r, c: c & (i < n), body, (0, r0, True))
    return r


def _gauss(v01, u2):
    """Standard normal from a uniform ``v01`` in [0, 1) and an independent
    uniform ``u2`` (Box-Muller)."""
    v = tf.minimum(v01, _ONE_MINUS)
    return tf.sqrt(-2.0 * tf.math.log1p(-v)) * tf.cos(_TWO_PI * u2)


def _fresh_float(cfg, name, v01, u2):
    """neat-python FloatAttribute initial value from two uniforms."""
    mean, std = getattr(cfg, f"{name}_init_mean"), getattr(cfg, f"{name}_init_stdev")
    lo, hi = getattr(cfg, f"{name}_min_value"), getattr(cfg, f"{name}_max_value")
    if getattr(cfg, f"{name}_init_type") == "uniform":
        a, b = max(lo, mean - 2 * std), min(hi, mean + 2 * std)
        return a + (b - a) * v01
    return tf.clip_by_value(mean + std * _gauss(v01, u2), lo, hi)


def _mutate_float(cfg, name, v, mask, r, u2):
    """Perturb (prob ``rate``) by N(0, power) or replace (prob ``replace``)
    with a fresh value.  ``r`` decides; given the decision, ``r`` rescaled to
    its interval is again uniform and (with ``u2``) gives the normal draw, so a
    gene costs two uniforms."""
    rate, rep = getattr(cfg, f"{name}_mutate_rate"), getattr(cfg, f"{name}_replace_rate")
    power = getattr(cfg, f"{name}_mutate_power")
    lo, hi = getattr(cfg, f"{name}_min_value"), getattr(cfg, f"{name}_max_value")
    if rate == 0.0 and rep == 0.0:
        return v
    pert_hit = r < rate
    rep_hit = (r >= rate) & (r < rate + rep)
    v01 = tf.where(pert_hit, r / max(rate, 1e-30), (r - rate) / max(rep, 1e-30))
    pert = tf.clip_by_value(v + power * _gauss(v01, u2), lo, hi)
    fresh = _fresh_float(cfg, name, v01, u2)
    out = tf.where(pert_hit, pert, tf.where(rep_hit, fresh, v))
    return tf.where(mask, out, v)


def _mutate_choice(v, options_ids, rate, mask, r):
    """With probability ``rate`` a random option (the decision uniform,
    rescaled, picks it)."""
    if rate == 0.0 or len(options_ids) < 2:
        return v
    k = len(options_ids)
    pick = tf.minimum(tf.cast(r / rate * k, tf.int32), k - 1)
    new = tf.gather(tf.constant(options_ids, tf.float32), pick)
    return tf.where(mask & (r < rate), new, v)


def _first_free(valid):
    free = ~valid
    return tf.argmax(tf.cast(free, tf.int8), -1, output_type=tf.int32), tf.reduce_any(free, -1)


def _random_choice(mask, u):
    """A uniformly random True slot of each row of ``mask [P, K]`` from one
    uniform ``u [P]`` per row (the ``floor(u * count)``-th True slot)."""
    m = tf.cast(mask, tf.int32)
    cnt = tf.reduce_sum(m, -1)
    k = tf.minimum(tf.cast(u * tf.cast(cnt, tf.float32), tf.int32), cnt - 1)
    hit = mask & tf.equal(tf.cumsum(m, axis=-1), (k + 1)[:, None])
    return tf.argmax(tf.cast(hit, tf.int8), -1, output_type=tf.int32), cnt > 0


def _write_row(x, slot, ok, row):
    """x[p, slot[p]] = row[p] where ok[p]: one O(P) scatter, not a pass over x."""
    P = tf.shape(x)[0]
    ij = tf.stack([tf.range(P), slot], -1)
    cur = tf.gather_nd(x, ij)
    return tf.tensor_scatter_nd_update(x, ij, tf.where(ok[:, None], row, cur))


def _new_ids(key: tf.Tensor, ok: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """Compact ids (0..U-1, order of first occurrence) of the distinct ``key``
    values among rows ``ok``; returns (id per row, U)."""
    k = tf.where(ok, key, tf.constant(-1, key.dtype))
    y, idx = tf.unique(k)
    real = tf.not_equal(y, -1)
    rank = tf.cumsum(tf.cast(real, tf.int64)) - 1
    return tf.gather(rank, idx), tf.reduce_sum(tf.cast(real, tf.int64))


def used_width(valid: tf.Tensor) -> tf.Tensor:
    """int32 scalar: 1 + the largest slot index holding a gene in any row of
    ``valid [P, K]`` (0 if none); slicing ``[:, :used_width]`` drops only
    empty slots."""
    K = tf.shape(valid)[1]
    last = tf.reduce_max(tf.where(valid, tf.range(K)[None, :] + 1, 0))
    return last


def compact(x: tf.Tensor, valid: tf.Tensor, width=None) -> tf.Tensor:
    """Moves the gene rows of each genome ``x [P, K, D]`` to the front,
    keeping their order (empty rows after them), into a NaN tensor with
    ``width`` (default K) slots.  Fixed slots at the front (inputs/outputs)
    stay where they are because they are always valid."""
    v = tf.cast(valid, tf.int32)
    n = tf.reduce_sum(v, -1, keepdims=True)
    dest = tf.where(valid, tf.cumsum(v, -1) - 1, n + tf.cumsum(1 - v, -1) - 1)  # [P, K] new position
    P, K, D = tf.shape(x)[0], tf.shape(x)[1], x.shape[-1]
    ij = tf.stack([tf.broadcast_to(tf.range(P)[:, None], tf.shape(dest)), dest], -1)
    out = tf.fill(tf.stack([P, K if width is None else width, D]), tf.constant(np.nan, x.dtype))
    return tf.tensor_scatter_nd_update(out, ij, x)


def _pair_markers(h_exist, valid, m_exist, h_new, ok, next_marker):
    """Markers for new connections with pair hashes ``h_new [P]`` (rows ``ok``):
    the marker an existing connection (``h_exist``/``m_exist [P, C]`` where
    ``valid``) with the same pair carries, else a fresh marker shared by all
    new rows with that pair.  Sort-based, O(P C log P): the P new hashes are
    sorted once and every existing hash is binary-searched among them."""
    P = tf.shape(h_new)[0]
    big = tf.constant(_BIG, tf.float32)
    hn = tf.where(ok, h_new, tf.int64.max)
    o = tf.argsort(hn, stable=True)
    hs = tf.gather(hn, o)  # sorted new hashes
    he = tf.reshape(h_exist, [-1])
    pos = tf.minimum(tf.searchsorted(hs, he, side="left", out_type=tf.int32), P - 1)
    hit = tf.reshape(valid, [-1]) & tf.equal(tf.gather(hs, pos), he)
    # group = run of equal sorted hashes
    first = tf.concat([[True], tf.not_equal(hs[1:], hs[:-1])], 0)
    grp = tf.cumsum(tf.cast(first, tf.int32)) - 1
    m = tf.math.unsorted_segment_min(tf.where(hit, tf.reshape(m_exist, [-1]), big), tf.gather(grp, pos), P)
    m_grp = tf.minimum(m, big)  # [P] indexed by group
    # groups (ascending hash) of real new pairs without a marker anywhere get
    # fresh markers in that order (indexed by group, like m_grp)
    real = tf.math.unsorted_segment_max(tf.cast(hs < tf.int64.max, tf.int32), grp, P) > 0
    need = real & (m_grp >= big)
    fresh = tf.cumsum(tf.cast(need, tf.int64)) - 1  # rank among groups needing one
    mk_sorted = tf.where(tf.gather(m_grp, grp) < big, tf.gather(m_grp, grp),
                         tf.cast(next_marker + tf.gather(fresh, grp), tf.float32))
    marker = tf.scatter_nd(o[:, None], mk_sorted, [P])
    return marker, next_marker + tf.reduce_sum(tf.cast(need, tf.int64))


# per-genome uniform columns of one mutation call
_G_ADD_NODE, _G_SPLIT, _G_DEL_NODE, _G_DEL_WHICH, _G_ADD_CONN, _G_FROM, _G_TO, _G_W1, _G_W2, \
    _G_DEL_CONN, _G_DEL_CWHICH, _G_R1, _G_R2 = range(13)
_G_COLS = 13


def _attr_columns(cfg: NEATConfig):
    """Which per-gene uniforms attribute mutation needs: (node cols, conn cols)."""
    ncols, ccols = {}, {}
    k = 0
    for a in ("bias", "response"):
        if getattr(cfg, f"{a}_mutate_rate") > 0 or getattr(cfg, f"{a}_replace_rate") > 0:
            ncols[a] = (k, k + 1)
            k += 2
    if cfg.activation_mutate_rate > 0 and len(cfg.activation_options) > 1:
        ncols["activation"] = (k,)
        k += 1
    if cfg.aggregation_mutate_rate > 0 and len(cfg.aggregation_options) > 1:
        ncols["aggregation"] = (k,)
        k += 1
    j = 0
    if cfg.weight_mutate_rate > 0 or cfg.weight_replace_rate > 0:
        ccols["weight"] = (0, 1)
        j = 2
    if cfg.enabled_mutate_rate > 0:
        ccols["enabled"] = (j,)
        j += 1
    return ncols, k, ccols, j


def mutate(cfg: NEATConfig, nodes, conns, active, seed, next_key, next_marker):
    """Mutates the genomes where ``active [P]`` (elites are left alone).

    Structural mutations (each with its probability, in this order, as
    neat-python): add node (split a random connection, enabled or not: it is
    disabled, the new node gets bias 0 and the default activation/aggregation,
    in-weight 1 and out-weight the old weight; every new node gets a fresh key
    as in neat-python, or with ``share_split_innovations`` genomes splitting the
    same marker in one call share the new node key and markers), delete a random
    hidden node (and its connections), add a connection from a random
    input/hidden node to a random hidden/output node (nothing happens if it
    exists, unless ``structural_mutation_surer`` re-enables it; feed-forward
    genomes reject cycles; the marker is the one the pair already has anywhere
    in the population, else a fresh one), delete a random connection.  Then
    attribute mutation of every gene.

    All random numbers of the call come from ONE stateless draw ``[P, 13 +
    N * a + C * b]`` (a, b = uniforms per node / connection gene that the
    config's nonzero rates need), sliced per use.

    A structural mutation that finds no free slot is skipped.  Returns
    ``(nodes, conns, next_key, next_marker, skipped_node_slots, skipped_conn_slots)``.
    """
    return mutate_given(cfg, nodes, conns, active, mutation_uniforms(cfg, tf.shape(nodes)[0], tf.shape(nodes)[1],
                                                                        tf.shape(conns)[1], seed),
                        next_key, next_marker)


def mutation_uniforms(cfg: NEATConfig, P, N, C, seed) -> tf.Tensor:
    """The uniforms ``[P, 13 + N * a + C * b]`` one :func:`mutate` call on
    ``N`` node and ``C`` connection slots consumes: exactly
    ``tf.random.stateless_uniform``, computed by
    :func:`tfevo.random_ops.stateless_uniform` (see :func:`mutate_given`)."""
    _, kn, _, kc = _attr_columns(cfg)
    # = tf.random.stateless_uniform(shape, seed), on tfevo's Philox kernel
    return _random_ops.stateless_uniform(tf.stack([P, _G_COLS + N * kn + C * kc]), seed)


def mutate_pre(cfg: NEATConfig, nodes, conns, active, u_all, next_key, next_marker):
    """First part of :func:`mutate_given`: add node, delete node, and the
    add-connection choice up to its marker.  Returns ``(nodes, conns,
    next_key, next_marker, skipped_nodes, skipped_conns, pm, write)``, where
    ``pm`` feeds :func:`pair_markers` and ``write`` (plus ``pm[4]``, which
    genomes add) :func:`mutate_post` (both None without add-connection).  No
    random op inside, so it compiles with XLA (except with
    ``share_split_innovations``, which uses ``tf.unique``)."""
    P, N, C = tf.shape(nodes)[0], tf.shape(nodes)[1], tf.shape(conns)[1]
    I, O = cfg.num_inputs, cfg.num_outputs
    u = u_all[:, :_G_COLS]
    slot_n = tf.range(N)
    is_out_slot = (slot_n >= I) & (slot_n < I + O)
    is_in_slot = slot_n < I
    skip_n = tf.constant(0, tf.int64)
    skip_c = tf.constant(0, tf.int64)

    # -- add node ------------------------------------------------------------
    if cfg.node_add_prob > 0:
        want = active & (u[:, _G_ADD_NODE] < cfg.node_add_prob)
        cv = conn_valid(conns)
        csel, has = _random_choice(cv, u[:, _G_SPLIT])
        nslot, has_n = _first_free(node_valid(nodes))
        free_c = ~cv
        c1 = tf.argmax(tf.cast(free_c, tf.int8), -1, output_type=tf.int32)
        c2 = tf.argmax(tf.cast(free_c & (tf.range(C)[None] != c1[:, None]), tf.int8), -1, output_type=tf.int32)
        has_c = tf.reduce_sum(tf.cast(free_c, tf.int32), -1) >= 2
        ok = want & has
        skip_n += tf.reduce_sum(tf.cast(ok & ~has_n, tf.int64))
        skip_c += tf.reduce_sum(tf.cast(ok & has_n & ~has_c, tf.int64))
        ok = ok & has_n & has_c
        split = tf.gather(conns, csel, batch_dims=1)  # [P, 5]
        if getattr(cfg, "share_split_innovations", False):  # same split marker -> same node key
            nid, nnew = _new_ids(tf.cast(split[:, CONN_MARKER], tf.int64), ok)
        else:  # neat-python: every new node gets its own key (and its connections new markers)
            nid = tf.cumsum(tf.cast(ok, tf.int64), exclusive=True)
            nnew = tf.reduce_sum(tf.cast(ok, tf.int64))
        key = tf.cast(next_key + nid, tf.float32)
        mk1 = tf.cast(next_marker + 2 * nid, tf.float32)
        next_key = next_key + nnew
        next_marker = next_marker + 2 * nnew
        resp = _fresh_float(cfg, "response", u[:, _G_R1], u[:, _G_R2])
        row = tf.stack([key, tf.zeros([P]), resp,
                        tf.fill([P], float(F.aggregation_id(cfg.aggregation_default))),
                        tf.fill([P], float(F.activation_id(cfg.activation_default)))], -1)
        nodes = _write_row(nodes, nslot, ok, row)
        off = tf.constant([1.0, 1.0, 0.0, 1.0, 1.0]) * tf.ones([P, 1])
        conns = _write_row(conns, csel, ok, split * off)  # the split connection is disabled
        ones = tf.ones([P])
        conns = _write_row(conns, c1, ok, tf.stack([split[:, CONN_IN], key, ones, ones, mk1], -1))
        conns = _write_row(conns, c2, ok, tf.stack([key, split[:, CONN_OUT], ones, split[:, CONN_WEIGHT], mk1 + 1.0], -1))

    # -- delete node ---------------------------------------------------------
    if cfg.node_delete_prob > 0:
        want = active & (u[:, _G_DEL_NODE] < cfg.node_delete_prob)
        hidden = node_valid(nodes) & (slot_n >= I + O)
        ns, has = _random_choice(hidden, u[:, _G_DEL_WHICH])
        ok = want & has
        k = tf.gather(nodes[..., NODE_KEY], ns, batch_dims=1)
        nodes = _write_row(nodes, ns, ok, tf.fill([P, NODE_DIM], np.nan))
        dead = ((tf.equal(conns[..., CONN_IN], k[:, None]) | tf.equal(conns[..., CONN_OUT], k[:, None]))
                & ok[:, None])
        conns = tf.where(dead[..., None], np.nan, conns)

    # -- add connection ------------------------------------------------------
    if cfg.conn_add_prob > 0:
        want = active & (u[:, _G_ADD_CONN] < cfg.conn_add_prob)
        nv = node_valid(nodes)
        cv = conn_valid(conns)
        a, _ = _random_choice(nv & ~is_out_slot, u[:, _G_FROM])
        b, hasb = _random_choice(nv & ~is_in_slot, u[:, _G_TO])
        keys = nodes[..., NODE_KEY]
        ka = tf.gather(keys, a, batch_dims=1)
        kb = tf.gather(keys, b, batch_dims=1)
        same = tf.equal(conns[..., CONN_IN], ka[:, None]) & tf.equal(conns[..., CONN_OUT], kb[:, None])
        exists = tf.reduce_any(same, -1)
        want = want & hasb
        if getattr(cfg, "structural_mutation_surer", False):  # re-enable an existing connection
            conns = tf.where((same & want[:, None])[..., None] & (tf.range(CONN_DIM) == CONN_ENABLED), 1.0, conns)
        both_out = tf.gather(is_out_slot, a) & tf.gather(is_out_slot, b)
        ok = want & ~exists & ~both_out
        if cfg.feed_forward:
            static_n = nodes.shape[1]
            if static_n is not None:  # static width (XLA): the scatter- and sort-free forms
                _, i_in = align(conns[..., CONN_IN], keys)
                _, i_out = align(conns[..., CONN_OUT], keys)
                reach = reachable_along_dense(i_in, i_out, cv, b, static_n)
            else:
                i_in, i_out = conn_slots(nodes, conns)
                reach = reachable_along(i_in, i_out, cv, b, N)
            cyc = tf.gather(reach, a, batch_dims=1)  # b reaches a (or a == b)
            ok = ok & ~cyc
        cslot, hasc = _first_free(cv)
        skip_c += tf.reduce_sum(tf.cast(ok & ~hasc, tf.int64))
        ok = ok & hasc
        # marker: the pair's marker anywhere in the population, else a fresh one
        # (shared by genomes adding the same pair now); see mutate_post
        pm = (pair_hash(conns[..., CONN_IN], conns[..., CONN_OUT]), cv, conns[..., CONN_MARKER], pair_hash(ka, kb), ok)
        return nodes, conns, next_key, next_marker, skip_n, skip_c, pm, (cslot, ka, kb)
    return nodes, conns, next_key, next_marker, skip_n, skip_c, None, None


def mutate_post(cfg: NEATConfig, nodes, conns, active, u_all, marker, write):
    """Second part of :func:`mutate_given` (after the new connections' markers
    ``marker [P]`` are known, see :func:`pair_markers`): writes the added
    connections, deletes connections, mutates attributes."""
    P, N, C = tf.shape(nodes)[0], tf.shape(nodes)[1], tf.shape(conns)[1]
    ncols, kn, ccols, kc = _attr_columns(cfg)
    u = u_all[:, :_G_COLS]
    un = tf.reshape(u_all[:, _G_COLS:_G_COLS + N * kn], tf.stack([P, N, kn]))
    uc = tf.reshape(u_all[:, _G_COLS + N * kn:], tf.stack([P, C, kc]))
    if cfg.conn_add_prob > 0:
        cslot, ka, kb, ok = write
        w = _fresh_float(cfg, "weight", u[:, _G_W1], u[:, _G_W2])
        en = tf.fill([P], 1.0 if cfg.enabled_default else 0.0)
        conns = _write_row(conns, cslot, ok, tf.stack([ka, kb, en, w, marker], -1))

    # -- delete connection ---------------------------------------------------
    if cfg.conn_delete_prob > 0:
        want = active & (u[:, _G_DEL_CONN] < cfg.conn_delete_prob)
        cs, has = _random_choice(conn_valid(conns), u[:, _G_DEL_CWHICH])
        conns = _write_row(conns, cs, want & has, tf.fill([P, CONN_DIM], np.nan))

    return _mutate_attributes_u(cfg, nodes, conns, active, un, uc, ncols, ccols)


def pair_markers(pm, next_marker):
    """Markers of the connections added by one mutation call, from the
    ``pm`` tuple of :func:`mutate_pre` (TensorFlow's sort and binary search;
    XLA's CPU binary search compares every pair, so this part stays out of
    the XLA programs).  Returns ``(marker [P], next_marker)``."""
    if pm is None:
        return None, next_marker
    return _pair_markers(*pm, next_marker)


def mutate_given(cfg: NEATConfig, nodes, conns, active, u_all, next_key, next_marker):
    """:func:`mutate` with its uniforms passed in (from
    :func:`mutation_uniforms`): :func:`mutate_pre`, :func:`pair_markers`,
    :func:`mutate_post`."""
    nodes, conns, next_key, next_marker, skn, skc, pm, wr = mutate_pre(cfg, nodes, conns, active, u_all, next_key,
                                                                      next_marker)
    marker, next_marker = pair_markers(pm, next_marker)
    write = None if pm is None else (*wr, pm[4])
    nodes, conns = mutate_post(cfg, nodes, conns, active, u_all, marker, write)
    return nodes, conns, next_key, next_marker, skn, skc


def _mutate_attributes_u(cfg, nodes, conns, active, un, uc, ncols, ccols):
    I = cfg.num_inputs
    is_in_slot = tf.range(tf.shape(nodes)[1]) < I
    gene = node_valid(nodes) & ~is_in_slot[None, :] & active[:, None]
    cols = [nodes[..., NODE_KEY], nodes[..., NODE_BIAS], nodes[..., NODE_RESPONSE], nodes[..., NODE_AGG],
            nodes[..., NODE_ACT]]
    for a, col in (("bias", NODE_BIAS), ("response", NODE_RESPONSE)):
        if a in ncols:
            i, j = ncols[a]
            cols[col] = _mutate_float(cfg, a, cols[col], gene, un[..., i], un[..., j])
    if "activation" in ncols:
        cols[NODE_ACT] = _mutate_choice(cols[NODE_ACT], [F.activation_id(n) for n in cfg.activation_options],
                                        cfg.activation_mutate_rate, gene, un[..., ncols["activation"][0]])
    if "aggregation" in ncols:
        cols[NODE_AGG] = _mutate_choice(cols[NODE_AGG], [F.aggregation_id(n) for n in cfg.aggregation_options],
                                        cfg.aggregation_mutate_rate, gene, un[..., ncols["aggregation"][0]])
    if len(ncols):
        nodes = tf.stack(cols, -1)
    cgene = conn_valid(conns) & active[:, None]
    w = conns[..., CONN_WEIGHT]
    if "weight" in ccols:
        i, j = ccols["weight"]
        w = _mutate_float(cfg, "weight", w, cgene, uc[..., i], uc[..., j])
    en = conns[..., CONN_ENABLED]
    if "enabled" in ccols:
        r = uc[..., ccols["enabled"][0]]
        rate = cfg.enabled_mutate_rate
        # a hit sets a random state: given r < rate, r < rate / 2 is a fair coin
        en = tf.where(cgene & (r < rate), tf.cast(r < 0.5 * rate, tf.float32), en)
    if len(ccols):
        conns = tf.stack([conns[..., CONN_IN], conns[..., CONN_OUT], en, w, conns[..., CONN_MARKER]], -1)
    return nodes, conns


def mutate_attributes(cfg: NEATConfig, nodes, conns, active, seed):
    """Attribute mutation of every gene of the ``active`` genomes (perturb or
    replace bias/response/weight, replace activation/aggregation, flip
    enabled), all uniforms from one stateless draw."""
    P, N, C = tf.shape(nodes)[0], tf.shape(nodes)[1], tf.shape(conns)[1]
    ncols, kn, ccols, kc = _attr_columns(cfg)
    u_all = tf.random.stateless_uniform(tf.stack([P, N * kn + C * kc]), seed)
    un = tf.reshape(u_all[:, :N * kn], tf.stack([P, N, kn]))
    uc = tf.reshape(u_all[:, N * kn:], tf.stack([P, C, kc]))
    return _mutate_attributes_u(cfg, nodes, conns, active, un, uc, ncols, ccols)


def _align_many(query: tf.Tensor, keys: tf.Tensor):
    """``query [P, Q]`` looked up in each row of ``keys [S, K]`` -> found,
    idx ``[S, P, Q]`` (one sort of the S key rows, then one batched binary
    search of all P*Q queries per row; nothing of size S*P*K is built)."""
    S = tf.shape(keys)[0]
    P = tf.shape(query)[0]
    Q = query.shape[-1]
    K = keys.shape[-1]
    kb = tf.where(tf.math.is_nan(keys), tf.constant(np.inf, tf.float32), keys)
    order = tf.argsort(kb, axis=-1, stable=True)
    sorted_b = tf.gather(kb, order, batch_dims=1)  # [S, K]
    q = tf.where(tf.math.is_nan(query), tf.constant(-1.0, tf.float32), query)
    qq = tf.broadcast_to(tf.reshape(q, [1, -1]), tf.stack([S, P * Q]))
    pos = tf.searchsorted(sorted_b, qq, side="left", out_type=tf.int32)
    pos = tf.reshape(tf.minimum(pos, K - 1), tf.stack([S, P, Q]))
    found = tf.equal(tf.gather(sorted_b, pos, batch_dims=1), q[None]) & ~tf.math.is_nan(query)[None]
    return found, tf.gather(order, pos, batch_dims=1)


def _rep_tables(query, rep_keys, rep_attrs):
    """Homologous-gene lookup of a population against S representatives.

    ``query [P, Q]`` gene ids (node keys / markers, NaN = empty),
    ``rep_keys [S, K]`` the representatives' gene ids, ``rep_attrs [S, K, A]``
    their attributes.  Returns ``[P, Q, S, A]``: the attributes of the gene
    with the same id in each representative, NaN where it has none.

    The ids of all representatives are sorted once (S*K values); every query
    id is binary-searched ONCE in that list (not once per representative), and
    a small table ``[S*K + 1, S, A]`` (row = first position of an id in the
    sorted list) gives all S answers with one gather."""
    S, K = tf.shape(rep_keys)[0], tf.shape(rep_keys)[1]
    A = rep_attrs.shape[-1]
    flat = tf.reshape(rep_keys, [-1])
    flat_b = tf.where(tf.math.is_nan(flat), tf.constant(np.inf, tf.float32), flat)
    L = tf.concat([tf.sort(flat_b), [np.inf]], 0)  # sentinel: never empty
    n = tf.size(L)
    dummy = n  # an all-NaN row for "no such gene"
    # table rows of the representatives' genes
    rpos = tf.searchsorted(L, flat_b, side="left", out_type=tf.int32)
    rok = ~tf.math.is_nan(flat)
    rrow = tf.where(rok, rpos, dummy)
    rs = tf.repeat(tf.range(S), K)
    table = tf.tensor_scatter_nd_update(tf.fill(tf.stack([n + 1, S, A]), np.nan),
                                        tf.stack([rrow, rs], -1),
                                        tf.where(rok[:, None], tf.reshape(rep_attrs, [-1, A]), np.nan))
    q = tf.reshape(query, [-1])
    qb = tf.where(tf.math.is_nan(q), tf.constant(-1.0, tf.float32), q)
    qpos = tf.minimum(tf.searchsorted(L, qb, side="left", out_type=tf.int32), n - 1)
    hit = tf.equal(tf.gather(L, qpos), qb) & ~tf.math.is_nan(q)
    out = tf.gather(table, tf.where(hit, qpos, dummy))  # [P*Q, S, A]
    return tf.reshape(out, tf.concat([tf.shape(query), tf.stack([S, A])], 0))


def _ordered_sum(x):
    """Sum of ``x [P, Q, S]`` over axis 1 in index order, starting from 0
    (a cumulative sum, which TensorFlow's CPU kernel evaluates sequentially;
    ``reduce_sum``'s order depends on the shape).  The C++ speciation kernel
    adds in the same order, so the two give the same distances bit for bit."""
    z = tf.zeros(tf.stack([tf.shape(x)[0], 1, tf.shape(x)[2]]), x.dtype)  # also for an empty axis 1
    return tf.math.cumsum(tf.concat([z, x], 1), axis=1)[:, -1]


def distance_matrix(cfg: NEATConfig, rep_nodes, rep_conns, nodes, conns) -> tf.Tensor:
    """Compatibility distances ``[S, P]`` of representatives ``[S, N, 5]``,
    ``[S, C, 5]`` to a population ``[P, N, 5]``, ``[P, C, 5]``.

    neat-python's formula: node part + connection part, each
    ``(weight_coeff * sum of homologous gene distances + disjoint_coeff *
    #disjoint genes) / max(#genes)``; a node gene's distance is
    ``|dbias| + |dresponse| + [activation differs] + [aggregation differs]``,
    a connection's ``|dweight| + [enabled differs]``; input nodes are not genes,
    connections are aligned by innovation marker (see :func:`_rep_tables`).
    Homologous-gene distances are summed in slot order (:func:`_ordered_sum`)."""
    I = cfg.num_inputs
    dc, wc = cfg.compatibility_disjoint_coefficient, cfg.compatibility_weight_coefficient
    gn = nodes[:, I:]
    rn = rep_nodes[:, I:]
    other = _rep_tables(gn[..., NODE_KEY], rn[..., NODE_KEY], rn[..., 1:])  # [P, Nh, S, 4]
    found = ~tf.math.is_nan(other[..., 0])
    diff = tf.abs(gn[:, :, None, 1:] - other)
    d = diff[..., 0] + diff[..., 1] + tf.cast(diff[..., 2] > 0, tf.float32) + tf.cast(diff[..., 3] > 0, tf.float32)
    hom = _ordered_sum(tf.where(found, d, 0.0))  # [P, S]
    nm = tf.reduce_sum(tf.cast(found, tf.float32), 1)
    na = tf.reduce_sum(tf.cast(node_valid(gn), tf.float32), -1)[:, None]
    nb = tf.reduce_sum(tf.cast(node_valid(rn), tf.float32), -1)[None, :]
    nd = (wc * hom + dc * (na + nb - 2.0 * nm)) / tf.maximum(tf.maximum(na, nb), 1.0)
    other = _rep_tables(conns[..., CONN_MARKER], rep_conns[..., CONN_MARKER],
                        rep_conns[..., CONN_ENABLED:CONN_WEIGHT + 1])  # [P, C, S, 2]
    found = ~tf.math.is_nan(other[..., 1])
    diff = tf.abs(conns[:, :, None, CONN_ENABLED:CONN_WEIGHT + 1] - other)
    d = diff[..., 1] + tf.cast(diff[..., 0] > 0.5, tf.float32)
    hom = _ordered_sum(tf.where(found, d, 0.0))
    cm = tf.reduce_sum(tf.cast(found, tf.float32), 1)
    ca = tf.reduce_sum(tf.cast(conn_valid(conns), tf.float32), -1)[:, None]
    cb = tf.reduce_sum(tf.cast(conn_valid(rep_conns), tf.float32), -1)[None, :]
    cd = (wc * hom + dc * (ca + cb - 2.0 * cm)) / tf.maximum(tf.maximum(ca, cb), 1.0)
    cd = tf.where((ca + cb) > 0, cd, 0.0)
    return tf.transpose(nd + cd)
