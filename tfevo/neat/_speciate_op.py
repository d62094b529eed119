"""NEAT speciation: the C++ kernel ``TfevoNeatSpeciate`` (custom_ops/neat_speciate.cc)
and its pure-TensorFlow reference.

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

from tfevo import kernels
from tfevo.neat import operators as _nops
from tfevo.neat.genome import conn_valid, node_valid

__all__ = ["speciate", "speciate_reference", "distance_matrix", "plan", "plan_reference",
           "spawn_reference"]

_INF = float("inf")


# the pure-TF distances (homologous-gene distances summed in slot order, as the kernel does)
distance_matrix = _nops.distance_matrix


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

    ``use_op``: ``None`` = the C++ kernel where :func:`tfevo.kernels.kernel`
    allows, ``False`` = the reference, ``True`` = the kernel or an error."""
    args = [tf.convert_to_tensor(nodes, tf.float32), tf.convert_to_tensor(conns, tf.float32),
            tf.convert_to_tensor(rep_nodes, tf.float32), tf.convert_to_tensor(rep_conns, tf.float32),
            tf.convert_to_tensor(active, tf.bool), tf.convert_to_tensor(keys, tf.int64),
            tf.convert_to_tensor(created, tf.int64), tf.convert_to_tensor(best_f, tf.float32),
            tf.convert_to_tensor(last_imp, tf.int64), tf.convert_to_tensor(nkey, tf.int64),
            tf.convert_to_tensor(gen, tf.int64)]
    op = kernels.kernel("TfevoNeatSpeciate", use_op, args[:2])
    if op is None:
        return speciate_reference(cfg, *args)
    out = op(*args, num_inputs=int(cfg.num_inputs),
                                    threshold=float(cfg.compatibility_threshold),
                                    disjoint_coefficient=float(cfg.compatibility_disjoint_coefficient),
                                    weight_coefficient=float(cfg.compatibility_weight_coefficient))
    return tuple(out)



# ---------------------------------------------------------------------------
# After speciation: species fitness, stagnation, offspring allotment, parents

def _segment_median(x, seg, size):
    o1 = tf.argsort(x, stable=True)
    o2 = tf.argsort(tf.gather(seg, o1), stable=True)
    xs = tf.gather(x, tf.gather(o1, o2))
    start = tf.cumsum(size, exclusive=True)
    lo = start + tf.maximum(size - 1, 0) // 2
    hi = start + size // 2
    n = tf.shape(x)[0] - 1
    return 0.5 * (tf.gather(xs, tf.minimum(lo, n)) + tf.gather(xs, tf.minimum(hi, n)))


def spawn_reference(cfg, alive, size, fit_s, adj_s, rank, keys):
    """Offspring per species [S] (int32, sums to P), neat-python's
    ``compute_spawn`` followed by its exact adjustment: missing members go
    one at a time to the smallest species first, surplus is taken one at a
    time from the largest (never below the minimum size); ties in species
    order (fitness ascending, then key).  The shares are summed in slot order
    (as the C++ kernel)."""
    P, S = cfg.pop_size, cfg.max_species
    min_size = float(max(cfg.min_species_size, cfg.elitism))
    if cfg.allotment == "rank":
        n_alive = tf.reduce_sum(tf.cast(alive, tf.float32))
        share = tf.where(alive, n_alive - tf.cast(rank, tf.float32), 0.0)
    else:
        share = tf.where(alive, adj_s, 0.0)
    tot = tf.math.cumsum(share)[-1]
    target = tf.where(tot > 0, tf.maximum(min_size, share / tf.maximum(tot, 1e-12) * P), min_size)
    prev = tf.cast(size, tf.float32)
    d = (target - prev) * cfg.spawn_number_change_rate
    c = tf.round(d)
    spawn = prev + tf.where(tf.abs(c) > 0, c, tf.sign(d))
    spawn = tf.where(alive, spawn, 0.0)
    total = tf.reduce_sum(spawn)
    spawn = tf.where(alive, tf.maximum(min_size, tf.round(spawn * P / tf.maximum(total, 1.0))), 0.0)
    spawn = tf.cast(spawn, tf.int32)
    mins = int(min_size)
    # species order of neat-python's list: fitness ascending, then key
    o = tf.argsort(tf.where(alive, keys, tf.int64.max), stable=True)
    o = tf.gather(o, tf.argsort(tf.gather(tf.where(alive, fit_s, _INF), o), stable=True))
    pos = tf.math.invert_permutation(o)  # position of each species in that order
    n = tf.maximum(tf.reduce_sum(tf.cast(alive, tf.int32)), 1)
    diff = P - tf.reduce_sum(spawn)

    def grow(spawn, diff):  # ascending by size, round robin
        key = tf.where(alive, spawn * S + pos, tf.int32.max)
        q = tf.math.invert_permutation(tf.argsort(key, stable=True))  # rank by (size, order)
        return spawn + tf.where(alive, diff // n + tf.cast(q < diff % n, tf.int32), 0)

    def shrink(spawn, diff):  # descending by size, one per species per pass
        def body(spawn, rem):
            el = alive & (spawn > mins)
            key = tf.where(el, -spawn * S + pos, tf.int32.max)
            q = tf.math.invert_permutation(tf.argsort(key, stable=True))
            take = el & (q < rem)
            return spawn - tf.cast(take, tf.int32), rem - tf.reduce_sum(tf.cast(take, tf.int32))

        return tf.while_loop(lambda s, r: (r > 0) & tf.reduce_any(alive & (s > mins)), body,
                             (spawn, -diff), maximum_iterations=P)[0]

    return tf.cond(diff > 0, lambda: grow(spawn, diff),
                   lambda: tf.cond(diff < 0, lambda: shrink(spawn, diff), lambda: spawn))


def plan_reference(cfg, sp, alive, keys, best_f, last_imp, ff, member_key, gen, u, seed_other=None):
    """Species sizes and fitness, stagnation (protecting the best
    ``species_elitism`` species), neat-python's adjusted fitness and offspring
    allotment, then each child's species, elite flag and parents (members
    ranked by fitness, ties: newest genome first; parents drawn with the
    uniforms ``u [P, 5]`` from the best ``survival_threshold`` of the
    species; parent 1 is the fitter).  ``seed_other`` draws the other
    species for ``interspecies_crossover_prob > 0``.

    Returns ``(size [S] int32, alive [S], species fitness [S], best fitness
    [S], last improved [S], extinct (bool scalar), spawn [S] int32, parent1
    [P] int32, parent2 [P] int32, is_elite [P])``."""
    P, S = cfg.pop_size, cfg.max_species
    size = tf.math.unsorted_segment_sum(tf.ones([P], tf.int32), sp, S)
    alive = alive & (size > 0)
    if cfg.species_fitness_func == "max":
        fit_s = tf.math.unsorted_segment_max(ff, sp, S)
    elif cfg.species_fitness_func == "min":
        fit_s = tf.math.unsorted_segment_min(ff, sp, S)
    elif cfg.species_fitness_func == "mean":
        fit_s = tf.math.unsorted_segment_mean(ff, sp, S)
    else:  # median via sorted order
        fit_s = _segment_median(ff, sp, size)
    fit_s = tf.where(alive, fit_s, -_INF)
    improved = alive & (fit_s > best_f)
    last_imp = tf.where(improved, gen, last_imp)
    best_f = tf.where(improved, fit_s, best_f)
    # stagnation, protecting the best species_elitism species
    rank = tf.argsort(tf.argsort(-fit_s, stable=True), stable=True)  # 0 = best
    protected = rank < cfg.species_elitism
    stagnant = alive & ((gen - last_imp) >= cfg.max_stagnation) & ~protected
    extinct = tf.reduce_all(stagnant | ~alive)
    if cfg.reset_on_extinction:
        # neat-python: every species stagnant -> a fresh population (bred as
        # if none were stagnant, then replaced by the caller) and no species
        stagnant = stagnant & ~extinct
    else:
        stagnant = stagnant & ~(extinct & tf.equal(rank, 0))
        extinct = tf.constant(False)
    alive = alive & ~stagnant
    # adjusted fitness (neat-python): mean member fitness scaled by the range
    member_alive = tf.gather(alive, sp)
    fmin = tf.reduce_min(tf.where(member_alive, ff, _INF))
    fmax = tf.reduce_max(tf.where(member_alive, ff, -_INF))
    frange = tf.maximum(1.0, fmax - fmin)
    mean_s = tf.math.unsorted_segment_mean(ff, sp, S)
    adj = tf.where(alive, (mean_s - fmin) / frange, 0.0)
    arank = tf.argsort(tf.argsort(tf.where(alive, -fit_s, _INF), stable=True), stable=True)
    spawn = spawn_reference(cfg, alive, size, fit_s, adj, arank, keys)

    o0 = tf.argsort(-member_key, stable=True)  # ties: newest genome first (neat-python)
    o1 = tf.gather(o0, tf.argsort(-tf.gather(ff, o0), stable=True))
    o2 = tf.argsort(tf.gather(sp, o1), stable=True)
    order = tf.gather(o1, o2)  # members grouped by species, best first
    start = tf.cumsum(size, exclusive=True)
    cum = tf.cumsum(spawn)
    child_sp = tf.searchsorted(cum, tf.range(P), side="right", out_type=tf.int32)
    child_sp = tf.minimum(child_sp, S - 1)
    j = tf.range(P) - tf.gather(cum - spawn, child_sp)
    n_elite = tf.minimum(size, cfg.elitism)
    is_elite = j < tf.gather(n_elite, child_sp)
    k = tf.minimum(size, tf.maximum(tf.cast(tf.math.ceil(cfg.survival_threshold * tf.cast(size, tf.float32)),
                                            tf.int32), 2))
    k = tf.maximum(k, 1)
    kc = tf.gather(k, child_sp)
    st = tf.gather(start, child_sp)
    r1 = tf.minimum(tf.cast(u[:, 0] * tf.cast(kc, tf.float32), tf.int32), kc - 1)
    r2 = tf.minimum(tf.cast(u[:, 1] * tf.cast(kc, tf.float32), tf.int32), kc - 1)
    p1 = tf.gather(order, st + tf.where(is_elite, j, r1))
    p2 = tf.gather(order, st + r2)
    if cfg.interspecies_crossover_prob > 0:
        logits = tf.where(alive, 0.0, -_INF)[None]
        other = tf.random.stateless_categorical(logits, P, seed_other, dtype=tf.int32)[0]
        ko = tf.gather(k, other)
        ro = tf.minimum(tf.cast(u[:, 2] * tf.cast(ko, tf.float32), tf.int32), ko - 1)
        p2 = tf.where(u[:, 3] < cfg.interspecies_crossover_prob, tf.gather(order, tf.gather(start, other) + ro), p2)
    if cfg.crossover_prob < 1.0:
        p2 = tf.where(u[:, 4] < cfg.crossover_prob, p2, p1)
    p2 = tf.where(is_elite, p1, p2)
    swap = tf.gather(ff, p2) > tf.gather(ff, p1)
    p1, p2 = tf.where(swap, p2, p1), tf.where(swap, p1, p2)
    return size, alive, fit_s, best_f, last_imp, extinct, spawn, p1, p2, is_elite


def plan(cfg, sp, alive, keys, best_f, last_imp, ff, member_key, gen, u, seed_other=None, use_op=None):
    """:func:`plan_reference` as the C++ kernel ``TfevoNeatPlan`` when it is
    allowed (:func:`tfevo.kernels.kernel`) and ``interspecies_crossover_prob == 0`` (the
    other species' draw is TensorFlow's categorical sampler, so that case
    always runs the reference).  Same outputs bit for bit."""
    why = "interspecies_crossover_prob > 0" if cfg.interspecies_crossover_prob > 0 else None
    op = kernels.kernel("TfevoNeatPlan", use_op, [t for t in (ff, u) if isinstance(t, tf.Tensor)], unsupported=why)
    if op is None:
        return plan_reference(cfg, sp, alive, keys, best_f, last_imp, ff, member_key, gen, u, seed_other)
    out = op(
        tf.convert_to_tensor(sp, tf.int32), tf.convert_to_tensor(alive, tf.bool), tf.convert_to_tensor(keys, tf.int64),
        tf.convert_to_tensor(best_f, tf.float32), tf.convert_to_tensor(last_imp, tf.int64),
        tf.convert_to_tensor(ff, tf.float32), tf.convert_to_tensor(member_key, tf.int64),
        tf.convert_to_tensor(gen, tf.int64), tf.convert_to_tensor(u, tf.float32),
        species_fitness=cfg.species_fitness_func, max_stagnation=int(cfg.max_stagnation),
        species_elitism=int(cfg.species_elitism), reset_on_extinction=bool(cfg.reset_on_extinction),
        min_size=int(max(cfg.min_species_size, cfg.elitism)), rank_allotment=cfg.allotment == "rank",
        change_rate=float(cfg.spawn_number_change_rate), elitism=int(cfg.elitism),
        survival_threshold=float(cfg.survival_threshold), crossover_prob=float(cfg.crossover_prob))
    return tuple(out)
