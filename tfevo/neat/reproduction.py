"""neat-python's reproduction (``DefaultReproduction.reproduce``) on the
population tensors: offspring per species, elites and parents
(:func:`plan_reference`), then the children by crossover and mutation
(:func:`breed_used_range`).

These are the pure-TensorFlow references; the C++ kernels of
:mod:`tfevo.neat._speciate_op` (``TfevoNeatPlan``) and
:mod:`tfevo.neat._breed_op` give the same results bit for bit.
"""

from __future__ import annotations

import tensorflow as tf

from tfevo.neat import stagnation
from tfevo.neat.config import NEATConfig
from tfevo.neat.crossover import crossover_given, crossover_words
from tfevo.neat.genome import CONN_DIM, NODE_DIM, compact, conn_valid, node_valid, used_width
from tfevo.neat.mutation import mutate_post, mutate_pre, mutation_uniforms, pair_markers

__all__ = ["spawn_reference", "plan_reference", "breed_programs", "breed_reference", "breed_used_range", "bucket"]

_INF = float("inf")


def spawn_reference(cfg, alive, size, fit_s, adj_s, rank, keys):
    """Offspring per species [S] (int32, sums to P), neat-python's
    ``compute_spawn`` followed by its exact adjustment: missing members go
    one at a time to the smallest species first, surplus is taken one at a
    time from the largest (never below the minimum size); ties in species
    order (fitness ascending, then key).  The shares are summed in slot order
    (as the C++ kernel)."""
    P, S = cfg.pop_size, cfg.max_species
    min_size = float(max(cfg.min_species_size, cfg.elitism))
    dt = tf.convert_to_tensor(adj_s).dtype  # the fitness type: float32, or float64 as neat-python
    rate = tf.constant(cfg.spawn_number_change_rate, dt)
    if cfg.allotment == "rank":
        n_alive = tf.reduce_sum(tf.cast(alive, dt))
        share = tf.where(alive, n_alive - tf.cast(rank, dt), 0.0)
    else:
        share = tf.where(alive, adj_s, 0.0)
    tot = tf.math.cumsum(share)[-1]
    ms = tf.constant(min_size, dt)
    target = tf.where(tot > 0, tf.maximum(ms, share / tf.maximum(tot, 1e-12) * P), ms)
    prev = tf.cast(size, dt)
    d = (target - prev) * rate
    c = tf.round(d)
    spawn = prev + tf.where(tf.abs(c) > 0, c, tf.sign(d))
    spawn = tf.where(alive, spawn, 0.0)
    total = tf.reduce_sum(spawn)
    spawn = tf.where(alive, tf.maximum(ms, tf.round(spawn * P / tf.maximum(total, 1.0))), 0.0)
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



def plan_reference(cfg: NEATConfig, sp, alive, keys, best_f, last_imp, ff, member_key, gen, u, seed_other=None):
    """Species sizes and fitness, stagnation (protecting the best
    ``species_elitism`` species), neat-python's adjusted fitness and offspring
    allotment, then each child's species, elite flag and parents (members
    ranked by fitness, ties: newest genome first; parents drawn with the
    uniforms ``u [P, 5]`` from the best ``survival_threshold`` of the
    species; parent 1 is the fitter).  The children are laid out in
    neat-python's genome-id order: the elites by genome id, then the new
    children species by species (fitness ascending, then key).  ``seed_other`` draws the other
    species for ``interspecies_crossover_prob > 0``.

    Returns ``(size [S] int32, alive [S], species fitness [S], best fitness
    [S], last improved [S], extinct (bool scalar), spawn [S] int32, parent1
    [P] int32, parent2 [P] int32, is_elite [P])``."""
    P, S = cfg.pop_size, cfg.max_species
    size, alive, fit_s, best_f, last_imp, extinct = stagnation.update(cfg, sp, alive, best_f, last_imp, ff, gen, keys)
    # adjusted fitness (neat-python): mean member fitness scaled by the range
    member_alive = tf.gather(alive, sp)
    fmin = tf.reduce_min(tf.where(member_alive, ff, _INF))
    fmax = tf.reduce_max(tf.where(member_alive, ff, -_INF))
    frange = tf.maximum(fmax - fmin, tf.ones([], ff.dtype))
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
    # neat-python's cutoff max(ceil(threshold * size), 2) in double precision (0.3 * 50 is 15.000000000000002)
    surv = tf.math.ceil(tf.constant(cfg.survival_threshold, tf.float64) * tf.cast(size, tf.float64))
    k = tf.minimum(size, tf.maximum(tf.cast(surv, tf.int32), 2))
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
    # neat-python's genome-id order of the new population: the elites (they keep
    # their ids) by id, then the new children species by species in its species
    # order (fitness ascending, then key); speciation visits the population in
    # this order, as neat-python visits it by genome id
    so = tf.argsort(tf.where(alive, keys, tf.int64.max), stable=True)
    so = tf.gather(so, tf.argsort(tf.gather(tf.where(alive, fit_s, _INF), so), stable=True))
    spos = tf.cast(tf.math.invert_permutation(so), tf.int64)
    big = tf.constant(2**62, tf.int64)
    lay = tf.where(is_elite, tf.gather(member_key, p1),
                   big + tf.gather(spos, child_sp) * P + tf.range(P, dtype=tf.int64))
    perm = tf.argsort(lay, stable=True)
    p1, p2, is_elite = tf.gather(p1, perm), tf.gather(p2, perm), tf.gather(is_elite, perm)
    return size, alive, fit_s, best_f, last_imp, extinct, spawn, p1, p2, is_elite


def bucket(w, full: int):
    """Slot width ``w`` rounded up to the next bucket (8, 16, 24, 32, 48,
    64, 96, ... and ``full``), so the XLA breed programs are compiled for a
    few widths only, and never work on more than 1.5x the needed width above
    16 (plain powers of two cost up to 2x, which ate the XLA gain once
    genomes grew)."""
    pts = {min(full, 8 << i) for i in range(32) if (8 << i) < 2 * full} | {full}
    pts |= {min(full, 3 * (8 << i) // 2) for i in range(1, 32) if 3 * (8 << i) // 2 < full}  # 24, 48, 96, ...
    b = tf.constant(sorted(pts), tf.int32)
    return tf.gather(b, tf.searchsorted(b, tf.reshape(w, [1]), side="left", out_type=tf.int32)[0])


_BREED_CACHE: dict = {}


def breed_programs(cfg: NEATConfig, jit: bool):
    """Crossover + mutation + compaction given the random numbers, as two
    functions: ``pre`` (crossover, add/delete node, the add-connection
    choice) and ``post`` (write the new connections, delete connection,
    attribute mutation, compaction).  The new connections' markers are found
    between them with TensorFlow's sort and binary search
    (:func:`~tfevo.neat.mutation.pair_markers`; XLA's CPU binary search compares all pairs).
    With ``jit`` both are ``tf.function(jit_compile=True)`` programs (one XLA
    compile per input width); otherwise they are inlined as plain graph code.
    ``share_split_innovations`` needs ``tf.unique`` (no XLA kernel) and never
    uses XLA."""
    jit = bool(jit) and not getattr(cfg, "share_split_innovations", False)
    key = (repr(cfg), jit)
    if key not in _BREED_CACHE:
        N, C = cfg.max_nodes, cfg.max_conns

        def pre(n, c, p1, p2, is_elite, words, u_all, next_key, next_marker):
            with tf.name_scope("crossover"):
                cn, cc = crossover_given(tf.gather(n, p1), tf.gather(c, p1), tf.gather(n, p2), tf.gather(c, p2),
                                             words)
            with tf.name_scope("mutate"):
                return mutate_pre(cfg, cn, cc, ~is_elite, u_all, next_key, next_marker)

        def post(cn, cc, is_elite, u_all, marker, wr):
            with tf.name_scope("mutate"):
                cn, cc = mutate_post(cfg, cn, cc, ~is_elite, u_all, marker, wr)
            with tf.name_scope("compact"):
                return compact(cn, node_valid(cn), N), compact(cc, conn_valid(cc), C)

        if jit:
            _BREED_CACHE[key] = tuple(tf.function(f, autograph=False, jit_compile=True, reduce_retracing=True)
                                      for f in (pre, post))
        else:
            _BREED_CACHE[key] = (pre, post)
    return _BREED_CACHE[key]



def breed_reference(cfg: NEATConfig, nodes, conns, p1, p2, is_elite, words, u_all, next_key, next_marker):
    """The pure-TensorFlow breeding (what :func:`breed_used_range` runs without ``jit``) on the
    used slot range ``nodes [P, wn, 5]``, ``conns [P, wc, 5]``.  Returns
    ``(nodes [P, N, 5], conns [P, C, 5], next_key, next_marker,
    skipped_node_slots, skipped_conn_slots)``."""
    pre, post = breed_programs(cfg, False)
    cn, cc, nk, nm, skn, skc, pm, wr = pre(nodes, conns, p1, p2, is_elite, words, u_all, next_key, next_marker)
    marker, nm = pair_markers(pm, nm)
    wr = None if pm is None else (*wr, pm[4])
    cn, cc = post(cn, cc, is_elite, u_all, marker, wr)
    return cn, cc, nk, nm, skn, skc


def breed_used_range(cfg: NEATConfig, jit: bool, nodes, conns, p1, p2, is_elite, s_cross, s_mut, next_key,
                     next_marker):
    """The reference breeding of the next population: crossover + mutation on
    the used slot range only (+1 node slot and +3 connection slots, all that
    one mutation call can add), then the children are compacted (genes
    first) and padded back to full size.

    The random numbers are drawn by TensorFlow's stateless kernels (XLA's CPU
    generator is ~100x slower) and passed to the two breed programs
    (:func:`breed_programs`).  With ``jit`` the widths are rounded up to
    buckets (:func:`bucket`) and the programs run as XLA, compiled once per
    bucket pair; otherwise they are plain graph code on the exact widths.
    Returns ``(nodes, conns, next_key, next_marker, skipped_node_slots,
    skipped_conn_slots)``."""
    N, C, P = cfg.max_nodes, cfg.max_conns, cfg.pop_size
    wn = tf.minimum(used_width(node_valid(nodes)) + 1, N)
    wc = tf.minimum(used_width(conn_valid(conns)) + 3, C)
    if jit:
        wn, wc = bucket(wn, N), bucket(wc, C)
    n, c = nodes[:, :wn], conns[:, :wc]
    words = crossover_words(P, wn, wc, s_cross)
    u_all = mutation_uniforms(cfg, P, wn, wc, s_mut)
    pre, post = breed_programs(cfg, jit)
    cn, cc, nk, nm, skn, skc, pm, wr = pre(n, c, p1, p2, is_elite, words, u_all, next_key, next_marker)
    marker, nm = pair_markers(pm, nm)  # TensorFlow kernels (see pair_markers)
    wr = None if pm is None else (*wr, pm[4])
    cn, cc = post(cn, cc, is_elite, u_all, marker, wr)
    return (tf.ensure_shape(cn, [P, N, NODE_DIM]), tf.ensure_shape(cc, [P, C, CONN_DIM]), nk, nm, skn, skc)
