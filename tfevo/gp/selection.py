"""Parent selection over a fitness vector (higher is better, -inf = worst).

Each function returns ``int32 [n]`` indices into the population and uses a
stateless seed.  ``survival`` (a fraction in (0, 1]) first restricts the
pool to the best ``ceil(survival * P)`` members (EvoGP's survival rate).
"""

from __future__ import annotations

import math

import numpy as np
import tensorflow as tf

from tfevo.core import ConfigError, sanitize_fitness

__all__ = ["SELECTIONS", "select", "tournament", "truncation", "roulette", "rank_selection",
           "survivors_mask", "parsimony", "covariant_parsimony", "demote_duplicates"]

SELECTIONS = ("tournament", "truncation", "roulette", "rank")


def survivors_mask(fitness, survival: float) -> tf.Tensor:
    """bool [P]: members among the best ``ceil(survival * P)``."""
    P = fitness.shape[0]
    k = max(1, int(math.ceil(float(survival) * P)))
    if k >= P:
        return tf.ones([P], tf.bool)
    order = tf.argsort(fitness, direction="DESCENDING", stable=True)
    ranks = tf.scatter_nd(order[:, None], tf.range(P), [P])
    return ranks < k


def covariant_parsimony(fitness, lengths) -> tf.Tensor:
    """The population's parsimony coefficient (Poli and McPhee's covariant
    parsimony, gplearn's ``parsimony_coefficient="auto"``), float32 scalar.

    With the error ``e = -fitness`` it is ``cov(length, e) / var(length)``
    computed as gplearn does (``np.cov``, normalised by ``n - 1``, over
    ``np.var``, by ``n``), over the members of finite fitness; 0 when fewer
    than two members are finite or all their lengths are equal.  A negative
    value (longer trees have the lower error) rewards length, as in gplearn.
    """
    f = sanitize_fitness(fitness)
    ok = tf.math.is_finite(f)
    w = tf.cast(ok, tf.float64)
    n = tf.reduce_sum(w)
    e = tf.where(ok, -tf.cast(f, tf.float64), 0.0)
    ln = tf.cast(lengths, tf.float64) * w
    nn = tf.maximum(n, 1.0)
    dl = (ln - tf.reduce_sum(ln) / nn) * w
    de = (e - tf.reduce_sum(e) / nn) * w
    cov = tf.reduce_sum(dl * de) / tf.maximum(n - 1.0, 1.0)
    var = tf.reduce_sum(dl * dl) / nn
    c = tf.where((n >= 2.0) & (var > 0.0), cov / tf.where(var > 0.0, var, 1.0), 0.0)
    return tf.cast(c, tf.float32)


def parsimony(fitness, lengths, coefficient) -> tf.Tensor:
    """Fitness minus ``c * length`` (for selection only); ``c`` is
    ``coefficient``, or :func:`covariant_parsimony` of this population
    when ``coefficient == "auto"``."""
    f = sanitize_fitness(fitness)
    if isinstance(coefficient, str) and coefficient == "auto":
        c = covariant_parsimony(f, lengths)
    else:
        c = float(coefficient)
    return f - c * tf.cast(lengths, tf.float32)


#: the selection fitness given to a demoted duplicate: below every finite
#: fitness a tree can have in practice, above the -inf of an invalid tree
DUPLICATE_FITNESS = -3.0e38


def demote_duplicates(fitness, lengths) -> tf.Tensor:
    """``fitness`` with every duplicate set to :data:`DUPLICATE_FITNESS`.

    A duplicate is a member of finite fitness whose fitness and length are
    both equal to those of a member ranked before it (the ranking is a
    stable sort on fitness, so the first of each group, by index, keeps its
    value).  Equal error and equal size almost always means the same
    program, or the same function in another spelling; ranking the copies
    last keeps tournaments drawing on distinct programs once a population
    has converged on a few, instead of on hundreds of copies of them.
    """
    f = sanitize_fitness(fitness)
    n = f.shape[0]
    order = tf.argsort(f, direction="DESCENDING", stable=True)
    fs = tf.gather(f, order)
    ls = tf.gather(tf.cast(lengths, tf.int32), order)
    same = (fs[1:] == fs[:-1]) & (ls[1:] == ls[:-1]) & tf.math.is_finite(fs[1:])
    dup = tf.scatter_nd(order[:, None], tf.concat([[False], same], 0), [n])
    return tf.where(dup, tf.constant(DUPLICATE_FITNESS, f.dtype), f)


def tournament(seed, fitness, n: int, size: int = 7) -> tf.Tensor:
    """Best of ``size`` uniformly drawn members, ``n`` times."""
    P = fitness.shape[0]
    idx = tf.random.stateless_uniform([n, int(size)], seed, 0, P, dtype=tf.int32)
    f = tf.gather(fitness, idx)
    return tf.gather(idx, tf.cast(tf.argmax(f, axis=1), tf.int32), batch_dims=1)


def truncation(seed, fitness, n: int, ratio: float = 0.2) -> tf.Tensor:
    """Uniform choice among the best ``ceil(ratio * P)`` members."""
    P = fitness.shape[0]
    k = max(1, int(math.ceil(float(ratio) * P)))
    top = tf.argsort(fitness, direction="DESCENDING", stable=True)[:k]
    j = tf.random.stateless_uniform([n], seed, 0, k, dtype=tf.int32)
    return tf.gather(top, j)


def roulette(seed, fitness, n: int) -> tf.Tensor:
    """Fitness-proportional choice after shifting the worst finite fitness to
    a small positive weight; -inf members are never chosen."""
    finite = tf.math.is_finite(fitness)
    lo = tf.reduce_min(tf.where(finite, fitness, np.inf))
    hi = tf.reduce_max(tf.where(finite, fitness, -np.inf))
    w = tf.where(finite, fitness - lo + 1e-3 * (hi - lo) + 1e-12, 0.0)
    w = tf.where(tf.reduce_any(finite), w, tf.ones_like(w))
    logits = tf.math.log(w)[None, :]
    return tf.cast(tf.random.stateless_categorical(logits, n, seed)[0], tf.int32)


def rank_selection(seed, fitness, n: int, pressure: float = 1.5) -> tf.Tensor:
    """Linear ranking: the best has ``pressure`` times the mean probability,
    the worst ``2 - pressure`` times (``1 <= pressure <= 2``)."""
    P = fitness.shape[0]
    order = tf.argsort(fitness, direction="ASCENDING", stable=True)
    r = tf.cast(tf.scatter_nd(order[:, None], tf.range(P), [P]), tf.float32)  # 0 = worst
    sp = float(pressure)
    w = (2.0 - sp) / P + 2.0 * r * (sp - 1.0) / (P * max(P - 1, 1))
    w = tf.where(tf.math.is_finite(fitness), w, 0.0)
    w = tf.where(tf.reduce_any(w > 0), w, tf.ones_like(w))
    return tf.cast(tf.random.stateless_categorical(tf.math.log(w)[None, :], n, seed)[0], tf.int32)


def select(method: str, seed, fitness, n: int, survival: float = 1.0, **kw) -> tf.Tensor:
    """Dispatches to a selection method by name (see :data:`SELECTIONS`)."""
    fitness = sanitize_fitness(fitness)
    P = fitness.shape[0]
    k = max(1, int(math.ceil(float(survival) * P)))
    if k < P:  # select among the survivors only, then map back
        pool = tf.argsort(fitness, direction="DESCENDING", stable=True)[:k]
        return tf.gather(pool, _select(method, seed, tf.gather(fitness, pool), n, **kw))
    return _select(method, seed, fitness, n, **kw)


def _select(method, seed, fitness, n, **kw):
    if method == "tournament":
        return tournament(seed, fitness, n, kw.get("tournament_size", 7))
    if method == "truncation":
        return truncation(seed, fitness, n, kw.get("truncation_ratio", 0.2))
    if method == "roulette":
        return roulette(seed, fitness, n)
    if method == "rank":
        return rank_selection(seed, fitness, n, kw.get("rank_pressure", 1.5))
    raise ConfigError(f"unknown selection {method!r}; known: {', '.join(SELECTIONS)}")
