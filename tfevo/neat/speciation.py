"""neat-python's speciation (``DefaultSpeciesSet.speciate``) on the
population tensors: the compatibility distance of genomes to species
representatives and the assignment of genomes to species.

This is the pure-TensorFlow reference; :mod:`tfevo.neat._speciate_op` runs the
same rules as one C++ kernel and gives the same species bit for bit.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from tfevo.neat.config import NEATConfig
from tfevo.neat.genome import (CONN_ENABLED, CONN_IN, CONN_OUT, CONN_WEIGHT, NODE_KEY, conn_valid, node_valid,
                               used_width)

__all__ = ["distance_matrix", "distance_one_to_many", "speciate_reference"]

_INF = float("inf")


def distance_one_to_many(cfg: NEATConfig, rep_nodes, rep_conns, nodes, conns) -> tf.Tensor:
    """Compatibility distance of one genome (``[N,5]``, ``[C,5]``) to each of
    ``nodes [P,N,5]``, ``conns [P,C,5]`` -> ``[P]`` (neat-python's formula,
    see :func:`distance_matrix`)."""
    return distance_matrix(cfg, rep_nodes[None], rep_conns[None], nodes, conns)[0]


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

    ``query [P, Q]`` gene ids (node keys / connection pair ids, NaN = empty),
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
    flat_b = tf.where(tf.math.is_nan(flat), tf.constant(np.inf, flat.dtype), flat)
    L = tf.concat([tf.sort(flat_b), tf.constant([np.inf], flat.dtype)], 0)  # sentinel: never empty
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
    qb = tf.where(tf.math.is_nan(q), tf.constant(-1.0, q.dtype), q)
    qpos = tf.minimum(tf.searchsorted(L, qb, side="left", out_type=tf.int32), n - 1)
    hit = tf.equal(tf.gather(L, qpos), qb) & ~tf.math.is_nan(q)
    out = tf.gather(table, tf.where(hit, qpos, dummy))  # [P*Q, S, A]
    return tf.reshape(out, tf.concat([tf.shape(query), tf.stack([S, A])], 0))


def _pair_id(conns):
    """Exact float64 id ``in * 2**25 + out`` of each connection's key pair
    (node keys are integers < 2**24), NaN for an empty slot."""
    c = tf.cast(conns, tf.float64)
    return c[..., CONN_IN] * 2.0**25 + c[..., CONN_OUT]


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
    connections are aligned by their (in, out) key pair as neat-python's
    ``DefaultGenome.distance`` does, not by innovation marker (see
    :func:`_rep_tables`).
    Homologous-gene distances are summed in slot order (:func:`_ordered_sum`),
    in the config's ``distance_dtype`` (float32, or double from the float32
    gene values)."""
    I = cfg.num_inputs
    dt = tf.float64 if getattr(cfg, "distance_dtype", "float32") == "float64" else tf.float32
    dc, wc = cfg.compatibility_disjoint_coefficient, cfg.compatibility_weight_coefficient
    gn = nodes[:, I:]
    rn = rep_nodes[:, I:]
    other = _rep_tables(gn[..., NODE_KEY], rn[..., NODE_KEY], rn[..., 1:])  # [P, Nh, S, 4]
    found = ~tf.math.is_nan(other[..., 0])
    diff = tf.abs(tf.cast(gn[:, :, None, 1:], dt) - tf.cast(other, dt))
    d = diff[..., 0] + diff[..., 1] + tf.cast(diff[..., 2] > 0, dt) + tf.cast(diff[..., 3] > 0, dt)
    hom = _ordered_sum(tf.where(found, d, tf.zeros([], dt)))  # [P, S]
    nm = tf.reduce_sum(tf.cast(found, dt), 1)
    na = tf.reduce_sum(tf.cast(node_valid(gn), dt), -1)[:, None]
    nb = tf.reduce_sum(tf.cast(node_valid(rn), dt), -1)[None, :]
    nd = (wc * hom + dc * (na + nb - 2.0 * nm)) / tf.maximum(tf.maximum(na, nb), 1.0)
    other = _rep_tables(_pair_id(conns), _pair_id(rep_conns),
                        rep_conns[..., CONN_ENABLED:CONN_WEIGHT + 1])  # [P, C, S, 2]
    found = ~tf.math.is_nan(other[..., 1])
    diff = tf.abs(tf.cast(conns[:, :, None, CONN_ENABLED:CONN_WEIGHT + 1], dt) - tf.cast(other, dt))
    d = diff[..., 1] + tf.cast(diff[..., 0] > 0.5, dt)
    hom = _ordered_sum(tf.where(found, d, tf.zeros([], dt)))
    cm = tf.reduce_sum(tf.cast(found, dt), 1)
    ca = tf.reduce_sum(tf.cast(conn_valid(conns), dt), -1)[:, None]
    cb = tf.reduce_sum(tf.cast(conn_valid(rep_conns), dt), -1)[None, :]
    cd = (wc * hom + dc * (ca + cb - 2.0 * cm)) / tf.maximum(tf.maximum(ca, cb), 1.0)
    cd = tf.where((ca + cb) > 0, cd, tf.zeros([], dt))
    return tf.transpose(nd + cd)



def speciate_reference(cfg, nodes, conns, rep_nodes, rep_conns, active, keys, created, best_f, last_imp, nkey, gen):
    """neat-python's speciation on fixed-size tensors (pure TensorFlow).

    1) Each live species, in order of species key, takes the genome closest
       to its old representative (and not yet taken) as its new one.
    2) The other genomes, in population order, join the closest species
       (representatives of step 1 and of species founded by EARLIER genomes)
       nearer than the threshold, else found a new species.  Among species at
       the same distance the one with the lowest key wins (neat-python takes
       the first of its species in key order).  Step 2 is exact
       without a loop over genomes: a running minimum distance per genome is
       kept, and each new species (one ``[P]`` distance pass) only updates
       the genomes after its founder.
    3) With no free species slot left, a genome joins its closest species
       regardless of the threshold.

    Returns ``(species per genome [P] int32, alive [S], keys [S], created [S],
    best fitness [S], last improved [S], next species key, representative
    genome per species [S] int32, -1 if dead)``."""
    S, P = cfg.max_species, cfg.pop_size
    thr = cfg.compatibility_threshold
    # distances only look at the used slot range (genomes are kept compact)
    rep_n, rep_c = rep_nodes, rep_conns
    wn = tf.maximum(used_width(node_valid(nodes)), used_width(node_valid(rep_n)))
    wc = tf.maximum(used_width(conn_valid(conns)), used_width(conn_valid(rep_c)))
    nodes, conns, rep_n, rep_c = nodes[:, :wn], conns[:, :wc], rep_n[:, :wn], rep_c[:, :wc]
    # -- 1) new representatives, species in key order
    order = tf.argsort(tf.where(active, keys, tf.int64.max), stable=True)
    n_live = tf.reduce_sum(tf.cast(active, tf.int32))
    live = order[:n_live]
    D = distance_matrix(cfg, tf.gather(rep_n, live), tf.gather(rep_c, live), nodes, conns)  # [n_live, P]

    def pick(i, taken, rep_idx):
        d = tf.where(taken, tf.constant(_INF, D.dtype), D[i])
        j = tf.argmin(d, output_type=tf.int32)
        ok = d[j] < _INF
        rep_idx = tf.tensor_scatter_nd_update(rep_idx, [[live[i]]], [tf.where(ok, j, -1)])
        taken = taken | (tf.one_hot(j, P, on_value=True, off_value=False) & ok)
        return i + 1, taken, rep_idx

    _, taken, rep_idx = tf.while_loop(lambda i, t, r: i < n_live, pick,
                                      (0, tf.zeros([P], tf.bool), tf.fill([S], -1)))
    alive = rep_idx >= 0
    ids = tf.cast(tf.where(alive)[:, 0], tf.int32)
    ids = tf.gather(ids, tf.argsort(tf.gather(keys, ids), stable=True))  # ties: the lowest key (neat-python)
    rep = tf.gather(rep_idx, ids)
    D = distance_matrix(cfg, tf.gather(nodes, rep), tf.gather(conns, rep), nodes, conns)
    D = tf.concat([D, tf.fill([1, P], tf.constant(_INF, D.dtype))], 0)  # a row for "no species"
    best_d = tf.reduce_min(D, 0)
    best_s = tf.gather(tf.concat([ids, [-1]], 0), tf.argmin(D, 0, output_type=tf.int32))
    idx = tf.range(P)

    # -- 2) founders, in population order
    def cand(best_d, taken, last):
        return ~taken & (best_d >= thr) & (idx > last)

    def found(best_d, best_s, taken, last, alive, rep_idx, keys, created, best_f, last_imp, nkey):
        f = tf.argmax(tf.cast(cand(best_d, taken, last), tf.int8), output_type=tf.int32)
        s = tf.argmax(tf.cast(~alive, tf.int8), output_type=tf.int32)
        d = distance_matrix(cfg, nodes[f][None], conns[f][None], nodes, conns)[0]
        better = (idx > f) & (d < best_d)
        best_s = tf.where(better, s, best_s)
        best_d = tf.where(better, d, best_d)
        one = tf.one_hot(f, P, on_value=True, off_value=False)
        best_s = tf.where(one, s, best_s)
        taken = taken | one
        upd = lambda x, v: tf.tensor_scatter_nd_update(x, [[s]], [v])  # noqa: E731
        return (best_d, best_s, taken, f, upd(alive, True), upd(rep_idx, f), upd(keys, nkey), upd(created, gen),
                upd(best_f, -_INF), upd(last_imp, gen), nkey + 1)

    best_d, best_s, taken, _, alive, rep_idx, keys, created, best_f, last_imp, nkey = tf.while_loop(
        lambda best_d, best_s, taken, last, alive, *rest: tf.reduce_any(cand(best_d, taken, last))
        & tf.reduce_any(~alive),
        found, (best_d, best_s, taken, tf.constant(-1), alive, rep_idx, keys, created, best_f, last_imp, nkey))
    # -- members: own species for representatives/founders, else the closest
    # visible species within the threshold, else (no free slot) the closest
    sp = tf.maximum(best_s, 0)
    safe = tf.maximum(rep_idx, 0)
    sp = tf.tensor_scatter_nd_update(sp, tf.boolean_mask(safe, alive)[:, None],
                                     tf.cast(tf.where(alive)[:, 0], tf.int32))
    return sp, alive, keys, created, best_f, last_imp, nkey, rep_idx
