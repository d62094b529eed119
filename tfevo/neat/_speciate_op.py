"""NEAT speciation: the C++ kernel ``TfevoNeatSpeciate`` (custom_ops/neat_speciate.cc)
and its pure-TensorFlow reference (issue #5).

:func:`speciate` runs the kernel when it is built and we are not inside an XLA
program, else :func:`speciate_reference`; ``TFEVO_DISABLE_CUSTOM_OPS=1`` forces
the reference.  Both return the same species, keys, representatives and
counters, bit for bit: the kernel computes every distance with the
reference's float operations in the reference's order (homologous-gene
distances summed in slot order; the reference uses a cumulative sum along the
slot axis for that, which TensorFlow evaluates sequentially, whereas
``reduce_sum`` would pick an order by shape).

The reference is one traced graph of a few hundred ops plus two
``while_loop``\\ s (one iteration per live species, one per new founder); the
kernel does the same work in one op: the population's genes are packed once,
a hash of the representatives' gene ids gives, per gene, its attributes in
every representative, and the distance passes run over genomes on
TensorFlow's intra-op thread pool.
"""

from __future__ import annotations

import tensorflow as tf

from tfevo import ops as _ops
from tfevo.neat import operators as _nops
from tfevo.neat.genome import CONN_ENABLED, CONN_MARKER, CONN_WEIGHT, NODE_KEY, conn_valid, node_valid

__all__ = ["speciate", "speciate_reference", "distance_matrix", "speciate_op_available"]

_INF = float("inf")


def _op():
    return _ops.op_module("neat_speciate", "tfevo_neat_speciate")


def speciate_op_available() -> bool:
    """Whether the C++ speciation kernel is built and loaded (``TFEVO_DISABLE_CUSTOM_OPS=1`` -> False)."""
    return _op() is not None


def _use_op(use_op) -> bool:
    if use_op is False:
        return False
    ok = _op() is not None and not _ops.in_xla_context()
    if use_op is True and not ok:
        raise RuntimeError("the TfevoNeatSpeciate custom op is not available here (not built, "
                           "TFEVO_DISABLE_CUSTOM_OPS set, or inside an XLA program)")
    return ok


def _ordered_sum(x):
    """Sum of ``x [P, Q, S]`` over axis 1 in index order, starting from 0
    (a cumulative sum, which TensorFlow's CPU kernel evaluates sequentially;
    ``reduce_sum``'s order depends on the shape)."""
    z = tf.zeros(tf.stack([tf.shape(x)[0], 1, tf.shape(x)[2]]), x.dtype)  # also for an empty axis 1
    return tf.math.cumsum(tf.concat([z, x], 1), axis=1)[:, -1]


def distance_matrix(cfg, rep_nodes, rep_conns, nodes, conns) -> tf.Tensor:
    """:func:`tfevo.neat.operators.distance_matrix` (compatibility distances
    ``[S, P]``, neat-python's formula) with the homologous-gene distances
    summed in slot order, the order the C++ kernel uses."""
    I = cfg.num_inputs
    dc, wc = cfg.compatibility_disjoint_coefficient, cfg.compatibility_weight_coefficient
    gn = nodes[:, I:]
    rn = rep_nodes[:, I:]
    other = _nops._rep_tables(gn[..., NODE_KEY], rn[..., NODE_KEY], rn[..., 1:])  # [P, Nh, S, 4]
    found = ~tf.math.is_nan(other[..., 0])
    diff = tf.abs(gn[:, :, None, 1:] - other)
    d = diff[..., 0] + diff[..., 1] + tf.cast(diff[..., 2] > 0, tf.float32) + tf.cast(diff[..., 3] > 0, tf.float32)
    hom = _ordered_sum(tf.where(found, d, 0.0))  # [P, S]
    nm = tf.reduce_sum(tf.cast(found, tf.float32), 1)
    na = tf.reduce_sum(tf.cast(node_valid(gn), tf.float32), -1)[:, None]
    nb = tf.reduce_sum(tf.cast(node_valid(rn), tf.float32), -1)[None, :]
    nd = (wc * hom + dc * (na + nb - 2.0 * nm)) / tf.maximum(tf.maximum(na, nb), 1.0)
    other = _nops._rep_tables(conns[..., CONN_MARKER], rep_conns[..., CONN_MARKER],
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


def speciate_reference(cfg, nodes, conns, rep_nodes, rep_conns, active, keys, created, best_f, last_imp, nkey, gen):
    """neat-python's speciation on fixed-size tensors (pure TensorFlow).

    1) Each live species, in order of species key, takes the genome closest
       to its old representative (and not yet taken) as its new one.
    2) The other genomes, in population order, join the closest species
       (representatives of step 1 and of species founded by EARLIER genomes)
       nearer than the threshold, else found a new species.  Step 2 is exact
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
    wn = tf.maximum(_nops.used_width(node_valid(nodes)), _nops.used_width(node_valid(rep_n)))
    wc = tf.maximum(_nops.used_width(conn_valid(conns)), _nops.used_width(conn_valid(rep_c)))
    nodes, conns, rep_n, rep_c = nodes[:, :wn], conns[:, :wc], rep_n[:, :wn], rep_c[:, :wc]
    # -- 1) new representatives, species in key order
    order = tf.argsort(tf.where(active, keys, tf.int64.max), stable=True)
    n_live = tf.reduce_sum(tf.cast(active, tf.int32))
    live = order[:n_live]
    D = distance_matrix(cfg, tf.gather(rep_n, live), tf.gather(rep_c, live), nodes, conns)  # [n_live, P]

    def pick(i, taken, rep_idx):
        d = tf.where(taken, _INF, D[i])
        j = tf.argmin(d, output_type=tf.int32)
        ok = d[j] < _INF
        rep_idx = tf.tensor_scatter_nd_update(rep_idx, [[live[i]]], [tf.where(ok, j, -1)])
        taken = taken | (tf.one_hot(j, P, on_value=True, off_value=False) & ok)
        return i + 1, taken, rep_idx

    _, taken, rep_idx = tf.while_loop(lambda i, t, r: i < n_live, pick,
                                      (0, tf.zeros([P], tf.bool), tf.fill([S], -1)))
    alive = rep_idx >= 0
    ids = tf.cast(tf.where(alive)[:, 0], tf.int32)
    rep = tf.gather(rep_idx, ids)
    D = distance_matrix(cfg, tf.gather(nodes, rep), tf.gather(conns, rep), nodes, conns)
    D = tf.concat([D, tf.fill([1, P], _INF)], 0)  # a row for "no species"
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


def speciate(cfg, nodes, conns, rep_nodes, rep_conns, active, keys, created, best_f, last_imp, nkey, gen,
             use_op=None):
    """Speciation of ``nodes [P, N, 5]``, ``conns [P, C, 5]`` against the old
    representatives ``rep_nodes [S, N, 5]``, ``rep_conns [S, C, 5]`` and the
    species state (``active [S]`` bool, ``keys``/``created``/``last_imp [S]``
    int64, ``best_f [S]`` float32, ``nkey`` and ``gen`` int64 scalars); see
    :func:`speciate_reference` for the rules and the returned tuple.

    ``use_op``: ``None`` = the C++ kernel when available and not inside XLA,
    ``False`` = the reference, ``True`` = the kernel or an error."""
    args = [tf.convert_to_tensor(nodes, tf.float32), tf.convert_to_tensor(conns, tf.float32),
            tf.convert_to_tensor(rep_nodes, tf.float32), tf.convert_to_tensor(rep_conns, tf.float32),
            tf.convert_to_tensor(active, tf.bool), tf.convert_to_tensor(keys, tf.int64),
            tf.convert_to_tensor(created, tf.int64), tf.convert_to_tensor(best_f, tf.float32),
            tf.convert_to_tensor(last_imp, tf.int64), tf.convert_to_tensor(nkey, tf.int64),
            tf.convert_to_tensor(gen, tf.int64)]
    if not _use_op(use_op):
        return speciate_reference(cfg, *args)
    out = _op().tfevo_neat_speciate(*args, num_inputs=int(cfg.num_inputs),
                                    threshold=float(cfg.compatibility_threshold),
                                    disjoint_coefficient=float(cfg.compatibility_disjoint_coefficient),
                                    weight_coefficient=float(cfg.compatibility_weight_coefficient))
    return tuple(out)

