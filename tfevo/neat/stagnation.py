"""neat-python's stagnation (``DefaultStagnation.update``) on the species
tensors: each species' fitness (``species_fitness_func`` of its members),
its best fitness so far and the generation it last improved, and which
species are removed as stagnant (never the best ``species_elitism``)."""

from __future__ import annotations

import tensorflow as tf

from tfevo.neat.config import NEATConfig

__all__ = ["update"]

_INF = float("inf")


def _segment_median(x, seg, size, upper=False):
    """Median of ``x [P]`` within each segment ``seg [P]`` of sizes ``size [S]``:
    the mean of the two middle values (neat-python's ``median2``), or with
    ``upper`` the upper middle value (neat-python's ``median``)."""
    o1 = tf.argsort(x, stable=True)
    o2 = tf.argsort(tf.gather(seg, o1), stable=True)
    xs = tf.gather(x, tf.gather(o1, o2))
    start = tf.cumsum(size, exclusive=True)
    lo = start + tf.maximum(size - 1, 0) // 2
    hi = start + size // 2
    n = tf.shape(x)[0] - 1
    if upper:
        return tf.gather(xs, tf.minimum(hi, n))
    return 0.5 * (tf.gather(xs, tf.minimum(lo, n)) + tf.gather(xs, tf.minimum(hi, n)))


def update(cfg: NEATConfig, sp, alive, best_f, last_imp, ff, gen, keys=None):
    """Species sizes and fitness, improvement bookkeeping and stagnation for
    members' species ``sp [P]`` and finite fitness ``ff [P]`` at generation
    ``gen``.  The protected species are the best ``species_elitism`` by
    fitness; among equal fitness the newer species (larger key in ``keys
    [S]``; slot order without ``keys``) ranks higher, as neat-python sorts
    the species by fitness in key order and protects the last ones.  When every species is stagnant, ``reset_on_extinction`` keeps
    them for this generation's breeding and flags ``extinct`` (the caller
    replaces the population); otherwise the best species survives.

    Returns ``(size [S] int32, alive [S], species fitness [S], best fitness
    [S], last improved [S], extinct (bool scalar))``."""
    P, S = cfg.pop_size, cfg.max_species
    size = tf.math.unsorted_segment_sum(tf.ones([P], tf.int32), sp, S)
    alive = alive & (size > 0)
    if cfg.species_fitness_func == "max":
        fit_s = tf.math.unsorted_segment_max(ff, sp, S)
    elif cfg.species_fitness_func == "min":
        fit_s = tf.math.unsorted_segment_min(ff, sp, S)
    elif cfg.species_fitness_func == "mean":
        fit_s = tf.math.unsorted_segment_mean(ff, sp, S)
    else:  # median / median2 via sorted order
        fit_s = _segment_median(ff, sp, size, upper=cfg.species_fitness_func == "median")
    fit_s = tf.where(alive, fit_s, -_INF)
    improved = alive & (fit_s > best_f)
    last_imp = tf.where(improved, gen, last_imp)
    best_f = tf.where(improved, fit_s, best_f)
    # stagnation, protecting the best species_elitism species
    o = tf.range(S) if keys is None else tf.argsort(-tf.convert_to_tensor(keys, tf.int64), stable=True)
    o = tf.gather(o, tf.argsort(-tf.gather(fit_s, o), stable=True))  # best first, ties: newest species first
    rank = tf.math.invert_permutation(o)  # 0 = best
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
    return size, alive, fit_s, best_f, last_imp, extinct
