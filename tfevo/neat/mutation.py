"""Structural mutation of NEAT genomes (neat-python's ``DefaultGenome.mutate``:
add node, delete node, add connection, delete connection, each with its
probability), then attribute mutation (:mod:`tfevo.neat.genes`), for the whole
population from one draw of uniforms."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from tfevo import random_ops as _random_ops
from tfevo.neat import functions as F
from tfevo.neat.config import NEATConfig
from tfevo.neat.genes import attr_columns, fresh_float, mutate_attributes_given
from tfevo.neat.genome import (CONN_DIM, CONN_ENABLED, CONN_IN, CONN_MARKER, CONN_OUT, CONN_WEIGHT, NODE_DIM,
                               NODE_KEY, align, conn_slots, conn_valid, first_free, node_valid, pair_hash,
                               random_choice, write_row)
from tfevo.neat.graphs import reachable_along, reachable_along_dense

__all__ = ["mutate", "mutate_given", "mutate_pre", "mutate_post", "pair_markers", "mutation_uniforms"]

_BIG = 3.0e38


def _new_ids(key: tf.Tensor, ok: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """Compact ids (0..U-1, order of first occurrence) of the distinct ``key``
    values among rows ``ok``; returns (id per row, U)."""
    k = tf.where(ok, key, tf.constant(-1, key.dtype))
    y, idx = tf.unique(k)
    real = tf.not_equal(y, -1)
    rank = tf.cumsum(tf.cast(real, tf.int64)) - 1
    return tf.gather(rank, idx), tf.reduce_sum(tf.cast(real, tf.int64))


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
_G_WANT = (_G_ADD_NODE, _G_DEL_NODE, _G_ADD_CONN, _G_DEL_CONN)


def structural_cuts(cfg: NEATConfig) -> list[float]:
    """The float32 upper ends of the four structural mutations' intervals of
    the add-node uniform under ``single_structural_mutation`` (neat-python:
    cumulative probabilities divided by ``max(1, their sum)``)."""
    probs = [cfg.node_add_prob, cfg.node_delete_prob, cfg.conn_add_prob, cfg.conn_delete_prob]
    div = max(1.0, sum(probs))
    return [float(np.float32(sum(probs[:k + 1]) / div)) for k in range(4)]


def structural_wants(cfg: NEATConfig, u, k: int):
    """bool [P]: whether structural mutation ``k`` (0 add node, 1 delete node,
    2 add connection, 3 delete connection) is drawn, from the uniforms ``u
    [P, 13]``: each from its own uniform, or with ``single_structural_mutation``
    the one (at most) whose interval holds the add-node uniform."""
    if getattr(cfg, "single_structural_mutation", False):
        cuts = structural_cuts(cfg)
        r = u[:, _G_ADD_NODE]
        want = r < cuts[k]
        return want if k == 0 else want & (r >= cuts[k - 1])
    p = (cfg.node_add_prob, cfg.node_delete_prob, cfg.conn_add_prob, cfg.conn_delete_prob)[k]
    return u[:, _G_WANT[k]] < p


def adds_connections(cfg: NEATConfig) -> bool:
    """Whether a mutation call can add a connection: add-connection, or
    add-node on a genome without connections under ``structural_mutation_surer``."""
    return cfg.conn_add_prob > 0 or (bool(getattr(cfg, "structural_mutation_surer", False)) and cfg.node_add_prob > 0)
_G_COLS = 13


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
    genomes reject cycles; the marker is fresh, shared by the genomes adding
    the same pair in this call, or without ``per_generation_innovations`` the
    one the pair already has anywhere in the population), delete a random
    connection.  Then
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
    _, kn, _, kc = attr_columns(cfg)
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
    no_conns = None
    if cfg.node_add_prob > 0:
        want = active & structural_wants(cfg, u, 0)
        cv = conn_valid(conns)
        csel, has = random_choice(cv, u[:, _G_SPLIT])
        no_conns = want & ~has  # neat-python: add-node without connections tries add-connection when surer
        nslot, has_n = first_free(node_valid(nodes))
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
        resp = fresh_float(cfg, "response", u[:, _G_R1], u[:, _G_R2])
        row = tf.stack([key, tf.zeros([P]), resp,
                        tf.fill([P], float(F.aggregation_id(cfg.aggregation_default))),
                        tf.fill([P], float(F.activation_id(cfg.activation_default)))], -1)
        nodes = write_row(nodes, nslot, ok, row)
        off = tf.constant([1.0, 1.0, 0.0, 1.0, 1.0]) * tf.ones([P, 1])
        conns = write_row(conns, csel, ok, split * off)  # the split connection is disabled
        ones = tf.ones([P])
        conns = write_row(conns, c1, ok, tf.stack([split[:, CONN_IN], key, ones, ones, mk1], -1))
        conns = write_row(conns, c2, ok, tf.stack([key, split[:, CONN_OUT], ones, split[:, CONN_WEIGHT], mk1 + 1.0], -1))

    # -- delete node ---------------------------------------------------------
    if cfg.node_delete_prob > 0:
        want = active & structural_wants(cfg, u, 1)
        hidden = node_valid(nodes) & (slot_n >= I + O)
        ns, has = random_choice(hidden, u[:, _G_DEL_WHICH])
        ok = want & has
        k = tf.gather(nodes[..., NODE_KEY], ns, batch_dims=1)
        nodes = write_row(nodes, ns, ok, tf.fill([P, NODE_DIM], np.nan))
        dead = ((tf.equal(conns[..., CONN_IN], k[:, None]) | tf.equal(conns[..., CONN_OUT], k[:, None]))
                & ok[:, None])
        conns = tf.where(dead[..., None], np.nan, conns)

    # -- add connection ------------------------------------------------------
    if adds_connections(cfg):
        want = active & structural_wants(cfg, u, 2) if cfg.conn_add_prob > 0 else tf.zeros_like(active)
        if getattr(cfg, "structural_mutation_surer", False) and no_conns is not None:
            want = want | no_conns
        nv = node_valid(nodes)
        cv = conn_valid(conns)
        a, _ = random_choice(nv & ~is_out_slot, u[:, _G_FROM])
        b, hasb = random_choice(nv & ~is_in_slot, u[:, _G_TO])
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
        cslot, hasc = first_free(cv)
        skip_c += tf.reduce_sum(tf.cast(ok & ~hasc, tf.int64))
        ok = ok & hasc
        # marker: a fresh one shared by the genomes adding the same pair now
        # (per-generation innovations), or else the pair's marker anywhere in
        # the population; see mutate_post
        seen = cv & tf.constant(not getattr(cfg, "per_generation_innovations", True))
        pm = (pair_hash(conns[..., CONN_IN], conns[..., CONN_OUT]), seen, conns[..., CONN_MARKER], pair_hash(ka, kb), ok)
        return nodes, conns, next_key, next_marker, skip_n, skip_c, pm, (cslot, ka, kb)
    return nodes, conns, next_key, next_marker, skip_n, skip_c, None, None


def mutate_post(cfg: NEATConfig, nodes, conns, active, u_all, marker, write):
    """Second part of :func:`mutate_given` (after the new connections' markers
    ``marker [P]`` are known, see :func:`pair_markers`): writes the added
    connections, deletes connections, mutates attributes."""
    P, N, C = tf.shape(nodes)[0], tf.shape(nodes)[1], tf.shape(conns)[1]
    ncols, kn, ccols, kc = attr_columns(cfg)
    u = u_all[:, :_G_COLS]
    un = tf.reshape(u_all[:, _G_COLS:_G_COLS + N * kn], tf.stack([P, N, kn]))
    uc = tf.reshape(u_all[:, _G_COLS + N * kn:], tf.stack([P, C, kc]))
    if adds_connections(cfg):
        cslot, ka, kb, ok = write
        w = fresh_float(cfg, "weight", u[:, _G_W1], u[:, _G_W2])
        en = tf.fill([P], 1.0 if cfg.enabled_default else 0.0)
        conns = write_row(conns, cslot, ok, tf.stack([ka, kb, en, w, marker], -1))

    # -- delete connection ---------------------------------------------------
    if cfg.conn_delete_prob > 0:
        want = active & structural_wants(cfg, u, 3)
        cs, has = random_choice(conn_valid(conns), u[:, _G_DEL_CWHICH])
        conns = write_row(conns, cs, want & has, tf.fill([P, CONN_DIM], np.nan))

    return mutate_attributes_given(cfg, nodes, conns, active, un, uc, ncols, ccols)


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

