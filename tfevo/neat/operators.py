"""Whole-population NEAT variation and distance as tensor programs.

All functions work on every genome at once (leading axis P) with masks and
``tf.where``; nothing loops over genomes or genes in Python.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from tfevo.neat import functions as F
from tfevo.neat.config import NEATConfig
from tfevo.neat.genome import (CONN_DIM, CONN_ENABLED, CONN_IN, CONN_MARKER, CONN_OUT, CONN_WEIGHT,
                               NODE_ACT, NODE_AGG, NODE_BIAS, NODE_DIM, NODE_KEY, NODE_RESPONSE,
                               conn_slots, conn_valid, init_attribute, node_valid, pair_hash)

__all__ = ["align", "distance_one_to_many", "crossover", "mutate", "reachable_from"]

_BIG = 3.0e38


def align(query: tf.Tensor, keys: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """Row-wise lookup: for each ``query [M, Q]`` value, whether it occurs in
    ``keys [M, K]`` and at which index (NaN never matches).  O(M K log K)."""
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
    ``nodes [P,N,5]``, ``conns [P,C,5]`` -> ``[P]`` (neat-python's formula)."""
    I = cfg.num_inputs
    dc, wc = cfg.compatibility_disjoint_coefficient, cfg.compatibility_weight_coefficient
    P = tf.shape(nodes)[0]
    # -- nodes (input nodes are not genes)
    gn = nodes[:, I:]
    rn = rep_nodes[I:]
    found, idx = align(gn[..., NODE_KEY], tf.broadcast_to(rn[None, :, NODE_KEY], tf.shape(gn[..., NODE_KEY])))
    other = tf.gather(rn, idx)  # [P, Nh, 5]
    d = (tf.abs(gn[..., NODE_BIAS] - other[..., NODE_BIAS]) + tf.abs(gn[..., NODE_RESPONSE] - other[..., NODE_RESPONSE])
         + tf.cast(tf.not_equal(gn[..., NODE_ACT], other[..., NODE_ACT]), tf.float32)
         + tf.cast(tf.not_equal(gn[..., NODE_AGG], other[..., NODE_AGG]), tf.float32))
    hom = tf.reduce_sum(tf.where(found, d, 0.0), -1)
    nm = tf.reduce_sum(tf.cast(found, tf.float32), -1)
    na = tf.reduce_sum(tf.cast(node_valid(gn), tf.float32), -1)
    nb = tf.reduce_sum(tf.cast(node_valid(rn), tf.float32))
    nd = (wc * hom + dc * (na + nb - 2.0 * nm)) / tf.maximum(tf.maximum(na, nb), 1.0)
    # -- connections, aligned by innovation marker
    found, idx = align(conns[..., CONN_MARKER], tf.broadcast_to(rep_conns[None, :, CONN_MARKER], tf.shape(conns[..., 0])))
    other = tf.gather(rep_conns, idx)
    d = tf.abs(conns[..., CONN_WEIGHT] - other[..., CONN_WEIGHT]) + tf.cast(
        tf.not_equal(conns[..., CONN_ENABLED], other[..., CONN_ENABLED]), tf.float32)
    hom = tf.reduce_sum(tf.where(found, d, 0.0), -1)
    cm = tf.reduce_sum(tf.cast(found, tf.float32), -1)
    ca = tf.reduce_sum(tf.cast(conn_valid(conns), tf.float32), -1)
    cb = tf.reduce_sum(tf.cast(conn_valid(rep_conns), tf.float32))
    cd = (wc * hom + dc * (ca + cb - 2.0 * cm)) / tf.maximum(tf.maximum(ca, cb), 1.0)
    cd = tf.where((ca + cb) > 0, cd, 0.0)
    del P
    return nd + cd


def _bits(u, k):
    """k independent fair coin flips [..., k] from one uniform per row."""
    scaled = tf.cast(tf.floor(u[..., None] * (2.0 ** tf.range(1, k + 1, dtype=tf.float32))), tf.int32)
    return tf.math.floormod(scaled, 2) == 1


def crossover(nodes1, conns1, nodes2, conns2, seed) -> tuple[tf.Tensor, tf.Tensor]:
    """Children of parent pairs (parent 1 is the fitter one, row-wise).

    A child has exactly parent 1's genes (its disjoint and excess genes
    included); each attribute of a homologous gene (same node key / same
    innovation marker) comes from either parent with probability 1/2.
    """
    s = tf.random.experimental.stateless_split(seed, 2)
    found, idx = align(nodes1[..., NODE_KEY], nodes2[..., NODE_KEY])
    other = tf.gather(nodes2, idx, batch_dims=1)
    coin = _bits(tf.random.stateless_uniform(tf.shape(nodes1)[:-1], s[0]), NODE_DIM)
    pick = found[..., None] & coin & (tf.range(NODE_DIM) != NODE_KEY)
    nodes = tf.where(pick, other, nodes1)
    found, idx = align(conns1[..., CONN_MARKER], conns2[..., CONN_MARKER])
    other = tf.gather(conns2, idx, batch_dims=1)
    coin = _bits(tf.random.stateless_uniform(tf.shape(conns1)[:-1], s[1]), CONN_DIM)
    pick = found[..., None] & coin & ((tf.range(CONN_DIM) == CONN_ENABLED) | (tf.range(CONN_DIM) == CONN_WEIGHT))
    conns = tf.where(pick, other, conns1)
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


def _mutate_float(cfg, name, v, mask, seed):
    s = tf.random.experimental.stateless_split(seed, 2)
    rate, rep = getattr(cfg, f"{name}_mutate_rate"), getattr(cfg, f"{name}_replace_rate")
    power = getattr(cfg, f"{name}_mutate_power")
    lo, hi = getattr(cfg, f"{name}_min_value"), getattr(cfg, f"{name}_max_value")
    if rate == 0.0 and rep == 0.0:
        return v
    r = tf.random.stateless_uniform(tf.shape(v), s[0])
    # one normal draw serves both branches (a gene is perturbed OR replaced)
    z = tf.random.stateless_normal(tf.shape(v), s[1])
    pert = tf.clip_by_value(v + power * z, lo, hi)
    if getattr(cfg, f"{name}_init_type") == "uniform":
        fresh = init_attribute(cfg, name, tf.shape(v), s[1])
    else:
        fresh = tf.clip_by_value(getattr(cfg, f"{name}_init_mean") + getattr(cfg, f"{name}_init_stdev") * z, lo, hi)
    out = tf.where(r < rate, pert, tf.where(r < rate + rep, fresh, v))
    return tf.where(mask, out, v)


def _mutate_choice(v, options_ids, rate, mask, seed):
    if rate == 0.0 or len(options_ids) < 2:
        return v
    s = tf.random.experimental.stateless_split(seed, 2)
    r = tf.random.stateless_uniform(tf.shape(v), s[0])
    pick = tf.random.stateless_uniform(tf.shape(v), s[1], 0, len(options_ids), dtype=tf.int32)
    new = tf.gather(tf.constant(options_ids, tf.float32), pick)
    return tf.where(mask & (r < rate), new, v)


def _first_free(valid):
    free = ~valid
    return tf.argmax(tf.cast(free, tf.int8), -1, output_type=tf.int32), tf.reduce_any(free, -1)


def _random_choice(mask, seed):
    score = tf.where(mask, tf.random.stateless_uniform(tf.shape(mask), seed), -1.0)
    return tf.argmax(score, -1, output_type=tf.int32), tf.reduce_any(mask, -1)


def _write_row(x, slot, ok, row):
    sel = (tf.one_hot(slot, tf.shape(x)[1], on_value=True, off_value=False) & ok[:, None])[..., None]
    return tf.where(sel, row[:, None, :], x)


def _new_ids(key: tf.Tensor, ok: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """Compact ids (0..U-1, order of first occurrence) of the distinct ``key``
    values among rows ``ok``; returns (id per row, U)."""
    k = tf.where(ok, key, tf.constant(-1, key.dtype))
    y, idx = tf.unique(k)
    real = tf.not_equal(y, -1)
    rank = tf.cumsum(tf.cast(real, tf.int64)) - 1
    return tf.gather(rank, idx), tf.reduce_sum(tf.cast(real, tf.int64))


def mutate(cfg: NEATConfig, nodes, conns, active, seed, next_key, next_marker):
    """Mutates the genomes where ``active [P]`` (elites are left alone).

    Structural mutations (each with its probability, in this order): add node
    (split a random enabled connection: it is disabled, the new node gets bias
    0 and the default activation/aggregation, in-weight 1 and out-weight the old
    weight; genomes splitting the same marker in one call share the new node key
    and markers), delete a random hidden node (and its connections), add a
    connection from a random input/hidden node to a random hidden/output node
    (an existing one is re-enabled; feed-forward genomes reject cycles; output
    to output is rejected; the marker is the one the pair already has anywhere
    in the population, else a fresh one), delete a random connection.  Then
    attribute mutation of every gene.

    A structural mutation that finds no free slot is skipped.  Returns
    ``(nodes, conns, next_key, next_marker, skipped_node_slots, skipped_conn_slots)``.
    """
    P, N, C = nodes.shape[0], nodes.shape[1], conns.shape[1]
    P = tf.shape(nodes)[0]
    I, O = cfg.num_inputs, cfg.num_outputs
    s = tf.random.experimental.stateless_split(seed, 24)
    slot_n = tf.range(N)
    is_out_slot = (slot_n >= I) & (slot_n < I + O)
    is_in_slot = slot_n < I
    skip_n = tf.constant(0, tf.int64)
    skip_c = tf.constant(0, tf.int64)
    u = tf.random.stateless_uniform([P, 4], s[0])

    # -- add node ------------------------------------------------------------
    if cfg.node_add_prob > 0:
        want = active & (u[:, 0] < cfg.node_add_prob)
        cv = conn_valid(conns)
        en = cv & (conns[..., CONN_ENABLED] > 0.5)
        csel, has = _random_choice(en, s[1])
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
        nid, nnew = _new_ids(tf.cast(split[:, CONN_MARKER], tf.int64), ok)
        key = tf.cast(next_key + nid, tf.float32)
        mk1 = tf.cast(next_marker + 2 * nid, tf.float32)
        next_key = next_key + nnew
        next_marker = next_marker + 2 * nnew
        resp = init_attribute(cfg, "response", [P], s[2])
        row = tf.stack([key, tf.zeros([P]), resp,
                        tf.fill([P], float(F.aggregation_id(cfg.aggregation_default))),
                        tf.fill([P], float(F.activation_id(cfg.activation_default)))], -1)
        nodes = _write_row(nodes, nslot, ok, row)
        dis = tf.one_hot(csel, C, on_value=True, off_value=False) & ok[:, None]
        conns = tf.where(dis[..., None] & (tf.range(CONN_DIM) == CONN_ENABLED), 0.0, conns)
        ones = tf.ones([P])
        conns = _write_row(conns, c1, ok, tf.stack([split[:, CONN_IN], key, ones, ones, mk1], -1))
        conns = _write_row(conns, c2, ok, tf.stack([key, split[:, CONN_OUT], ones, split[:, CONN_WEIGHT], mk1 + 1.0], -1))

    # -- delete node ---------------------------------------------------------
    if cfg.node_delete_prob > 0:
        want = active & (u[:, 1] < cfg.node_delete_prob)
        hidden = node_valid(nodes) & (slot_n >= I + O)
        ns, has = _random_choice(hidden, s[3])
        ok = want & has
        k = tf.gather(nodes[..., NODE_KEY], ns, batch_dims=1)
        nodes = _write_row(nodes, ns, ok, tf.fill([P, NODE_DIM], np.nan))
        dead = ((tf.equal(conns[..., CONN_IN], k[:, None]) | tf.equal(conns[..., CONN_OUT], k[:, None]))
                & ok[:, None])
        conns = tf.where(dead[..., None], np.nan, conns)

    # -- add connection ------------------------------------------------------
    if cfg.conn_add_prob > 0:
        want = active & (u[:, 2] < cfg.conn_add_prob)
        nv = node_valid(nodes)
        cv = conn_valid(conns)
        a, _ = _random_choice(nv & ~is_out_slot, s[4])
        b, hasb = _random_choice(nv & ~is_in_slot, s[5])
        keys = nodes[..., NODE_KEY]
        ka = tf.gather(keys, a, batch_dims=1)
        kb = tf.gather(keys, b, batch_dims=1)
        same = tf.equal(conns[..., CONN_IN], ka[:, None]) & tf.equal(conns[..., CONN_OUT], kb[:, None])
        exists = tf.reduce_any(same, -1)
        want = want & hasb
        # re-enable an existing connection
        conns = tf.where((same & want[:, None])[..., None] & (tf.range(CONN_DIM) == CONN_ENABLED), 1.0, conns)
        bad = is_out_slot[None, :] & tf.ones([P, 1], tf.bool)
        both_out = tf.gather(bad, a, batch_dims=1) & tf.gather(bad, b, batch_dims=1)
        ok = want & ~exists & ~both_out
        if cfg.feed_forward:
            i_in, i_out = conn_slots(nodes, conns)
            pidx = tf.broadcast_to(tf.range(P)[:, None], tf.shape(i_in))
            idx = tf.reshape(tf.stack([pidx, i_in, i_out], -1), [-1, 3])
            adj = tf.scatter_nd(idx, tf.reshape(tf.cast(cv, tf.float32), [-1]), tf.stack([P, N, N])) > 0.5
            reach = reachable_from(adj, b)
            cyc = tf.gather(reach, a, batch_dims=1)  # b reaches a (or a == b)
            ok = ok & ~cyc
        cslot, hasc = _first_free(cv)
        skip_c += tf.reduce_sum(tf.cast(ok & ~hasc, tf.int64))
        ok = ok & hasc
        # marker: the pair's marker anywhere in the population, else fresh
        h_exist = tf.reshape(tf.where(cv, pair_hash(conns[..., CONN_IN], conns[..., CONN_OUT]), -1), [-1])
        m_exist = tf.reshape(tf.where(cv, conns[..., CONN_MARKER], _BIG), [-1])
        h_new = tf.where(ok, pair_hash(ka, kb), -1)
        y, idx = tf.unique(tf.concat([h_exist, h_new], 0))
        nseg = tf.size(y)
        seg_m = tf.math.unsorted_segment_min(tf.concat([m_exist, tf.fill([P], _BIG)], 0), idx, nseg)
        idx_new = tf.slice(idx, [tf.size(h_exist)], [P])
        m_found = tf.gather(seg_m, idx_new)
        need = ok & (m_found >= _BIG)
        seg_need = tf.math.unsorted_segment_max(tf.cast(need, tf.int32), idx_new, nseg) > 0
        rank = tf.cumsum(tf.cast(seg_need, tf.int64)) - 1
        marker = tf.where(need, tf.cast(next_marker + tf.gather(rank, idx_new), tf.float32), m_found)
        next_marker = next_marker + tf.reduce_sum(tf.cast(seg_need, tf.int64))
        w = init_attribute(cfg, "weight", [P], s[6])
        en = tf.fill([P], 1.0 if cfg.enabled_default else 0.0)
        conns = _write_row(conns, cslot, ok, tf.stack([ka, kb, en, w, marker], -1))

    # -- delete connection ---------------------------------------------------
    if cfg.conn_delete_prob > 0:
        want = active & (u[:, 3] < cfg.conn_delete_prob)
        cs, has = _random_choice(conn_valid(conns), s[7])
        conns = _write_row(conns, cs, want & has, tf.fill([P, CONN_DIM], np.nan))

    nodes, conns = mutate_attributes(cfg, nodes, conns, active, s[8])
    return nodes, conns, next_key, next_marker, skip_n, skip_c


def mutate_attributes(cfg: NEATConfig, nodes, conns, active, seed):
    """Attribute mutation of every gene of the ``active`` genomes."""
    I = cfg.num_inputs
    is_in_slot = tf.range(nodes.shape[1]) < I
    s = tf.random.experimental.stateless_split(seed, 8)
    gene = node_valid(nodes) & ~is_in_slot[None, :] & active[:, None]
    bias = _mutate_float(cfg, "bias", nodes[..., NODE_BIAS], gene, s[0])
    resp = _mutate_float(cfg, "response", nodes[..., NODE_RESPONSE], gene, s[1])
    act = _mutate_choice(nodes[..., NODE_ACT], [F.activation_id(n) for n in cfg.activation_options],
                         cfg.activation_mutate_rate, gene, s[2])
    agg = _mutate_choice(nodes[..., NODE_AGG], [F.aggregation_id(n) for n in cfg.aggregation_options],
                         cfg.aggregation_mutate_rate, gene, s[3])
    nodes = tf.stack([nodes[..., NODE_KEY], bias, resp, agg, act], -1)
    cgene = conn_valid(conns) & active[:, None]
    w = _mutate_float(cfg, "weight", conns[..., CONN_WEIGHT], cgene, s[4])
    en = conns[..., CONN_ENABLED]
    if cfg.enabled_mutate_rate > 0:
        r = tf.random.stateless_uniform(tf.shape(en), s[5])
        newv = tf.cast(tf.random.stateless_uniform(tf.shape(en), s[6]) < 0.5, tf.float32)
        en = tf.where(cgene & (r < cfg.enabled_mutate_rate), newv, en)
    conns = tf.stack([conns[..., CONN_IN], conns[..., CONN_OUT], en, w, conns[..., CONN_MARKER]], -1)
    return nodes, conns


def _align_many(query: tf.Tensor, keys: tf.Tensor):
    """``query [P, Q]`` looked up in each row of ``keys [S, K]`` -> found,
    idx ``[S, P, Q]`` (vectorised over S and P)."""
    S = tf.shape(keys)[0]
    P = tf.shape(query)[0]
    K = keys.shape[-1]
    kb = tf.where(tf.math.is_nan(keys), tf.constant(np.inf, tf.float32), keys)
    order = tf.argsort(kb, axis=-1, stable=True)
    sorted_b = tf.gather(kb, order, batch_dims=1)  # [S, K]
    q = tf.where(tf.math.is_nan(query), tf.constant(-1.0, tf.float32), query)
    seq = tf.reshape(tf.repeat(sorted_b[:, None, :], P, axis=1), [-1, K])
    qq = tf.reshape(tf.tile(q[None], [S, 1, 1]), [S * P, -1])
    pos = tf.searchsorted(seq, qq, side="left", out_type=tf.int32)
    pos = tf.reshape(tf.minimum(pos, K - 1), [S, P, -1])
    found = tf.equal(tf.gather(sorted_b, pos, batch_dims=1), q[None]) & ~tf.math.is_nan(query)[None]
    return found, tf.gather(order, pos, batch_dims=1)


def distance_matrix(cfg: NEATConfig, rep_nodes, rep_conns, nodes, conns) -> tf.Tensor:
    """Compatibility distances ``[S, P]`` of representatives ``[S, N, 5]``,
    ``[S, C, 5]`` to a population (same formula as :func:`distance_one_to_many`)."""
    I = cfg.num_inputs
    dc, wc = cfg.compatibility_disjoint_coefficient, cfg.compatibility_weight_coefficient
    gn = nodes[:, I:]
    rn = rep_nodes[:, I:]
    found, idx = _align_many(gn[..., NODE_KEY], rn[..., NODE_KEY])
    g = gn[None]
    d = tf.zeros_like(found, tf.float32)
    for col in (NODE_BIAS, NODE_RESPONSE):
        d += tf.abs(g[..., col] - tf.gather(rn[..., col], idx, batch_dims=1))
    for col in (NODE_ACT, NODE_AGG):
        d += tf.cast(tf.not_equal(g[..., col], tf.gather(rn[..., col], idx, batch_dims=1)), tf.float32)
    hom = tf.reduce_sum(tf.where(found, d, 0.0), -1)
    nm = tf.reduce_sum(tf.cast(found, tf.float32), -1)
    na = tf.reduce_sum(tf.cast(node_valid(gn), tf.float32), -1)[None]
    nb = tf.reduce_sum(tf.cast(node_valid(rn), tf.float32), -1)[:, None]
    nd = (wc * hom + dc * (na + nb - 2.0 * nm)) / tf.maximum(tf.maximum(na, nb), 1.0)
    found, idx = _align_many(conns[..., CONN_MARKER], rep_conns[..., CONN_MARKER])
    g = conns[None]
    d = tf.abs(g[..., CONN_WEIGHT] - tf.gather(rep_conns[..., CONN_WEIGHT], idx, batch_dims=1)) + tf.cast(
        tf.not_equal(g[..., CONN_ENABLED], tf.gather(rep_conns[..., CONN_ENABLED], idx, batch_dims=1)), tf.float32)
    hom = tf.reduce_sum(tf.where(found, d, 0.0), -1)
    cm = tf.reduce_sum(tf.cast(found, tf.float32), -1)
    ca = tf.reduce_sum(tf.cast(conn_valid(conns), tf.float32), -1)[None]
    cb = tf.reduce_sum(tf.cast(conn_valid(rep_conns), tf.float32), -1)[:, None]
    cd = (wc * hom + dc * (ca + cb - 2.0 * cm)) / tf.maximum(tf.maximum(ca, cb), 1.0)
    cd = tf.where((ca + cb) > 0, cd, 0.0)
    return nd + cd
