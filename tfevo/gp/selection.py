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
           "survivors_mask", "parsimony", "covariant_parsimony", "demote_duplicates", "DEMOTE_RULES",
           "demote_rule"]

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


#: the selection fitness of the best demoted duplicate: below every finite
#: fitness a tree can have in practice; the others follow in their order,
#: down to ``1.1 * DUPLICATE_FITNESS``, above the -inf of an invalid tree
DUPLICATE_FITNESS = -3.0e38


#: ``demote_duplicates`` settings: True / ``"error"`` (equal raw fitness is a
#: duplicate, the shortest of a group stays), ``"error_and_length"`` (equal
#: raw fitness and equal length), False (off)
DEMOTE_RULES = (True, False, "error", "error_and_length")


def demote_rule(setting) -> str | None:
    """The rule a ``demote_duplicates`` setting names: ``"error"`` (True or ``"error"``),
    ``"error_and_length"``, or None (False: off); anything else is a :class:`ConfigError`."""
    if isinstance(setting, (bool, np.bool_)):
        return "error" if setting else None
    if isinstance(setting, str) and setting in ("error", "error_and_length"):
        return setting
    raise ConfigError(f"demote_duplicates must be True, False, 'error' or 'error_and_length', got {setting!r}")


def demote_duplicates(fitness, lengths, raw=None, rule="error") -> tf.Tensor:
    """``fitness`` (the selection fitness) with every duplicate set to
    :data:`DUPLICATE_FITNESS`.

    Members are ranked by raw fitness ``raw`` (``fitness`` when None),
    best first, equal raw fitness by length, shortest first (then by index).
    ``rule="error"``: a member of finite raw fitness equal to that of a
    member ranked before it is a duplicate, so of each group of equal error
    only the shortest keeps its selection fitness.  Equal error almost always
    means the same program, a longer spelling of it (a neutral addition such
    as ``+ (x - x)``) or the same function; demoting the copies keeps
    tournaments drawing on distinct programs once a population has converged,
    and demoting the longer spellings keeps parsimony's order (a shorter
    program beats a longer one of equal error, as in gplearn's tournaments)
    instead of letting a lone longer variant outrank the demoted copies of
    the shorter one.  The demoted members keep their order among themselves
    (their values run from :data:`DUPLICATE_FITNESS` down in the order of
    ``fitness``), so a tournament of duplicates only is won by the one of
    best selection fitness, as without demotion.

    ``rule="error_and_length"`` (tfevo's former rule, kept as it was): in
    the order of ``fitness``, a member whose ``fitness`` and length equal
    those of the member before it is a duplicate, and every duplicate gets
    :data:`DUPLICATE_FITNESS` (longer equal-error variants keep their
    fitness and outrank the demoted copies of the shorter one).
    """
    f = sanitize_fitness(fitness)
    n = f.shape[0]
    ln = tf.cast(lengths, tf.int32)
    if rule == "error_and_length":  # adjacent in the order of ``fitness``, all demoted to one value
        order = tf.argsort(f, direction="DESCENDING", stable=True)
        fs, ls = tf.gather(f, order), tf.gather(ln, order)
        same = (fs[1:] == fs[:-1]) & (ls[1:] == ls[:-1]) & tf.math.is_finite(fs[1:])
        dup = tf.scatter_nd(order[:, None], tf.concat([[False], same], 0), [n])
        return tf.where(dup, tf.constant(DUPLICATE_FITNESS, f.dtype), f)
    if rule not in (True, "error"):
        raise ConfigError(f"demote_duplicates must be one of {DEMOTE_RULES}, got {rule!r}")
    r = f if raw is None else sanitize_fitness(raw)
    by_len = tf.argsort(ln, stable=True)
    order = tf.gather(by_len, tf.argsort(tf.gather(r, by_len), direction="DESCENDING", stable=True))
    rs = tf.gather(r, order)
    same = (rs[1:] == rs[:-1]) & tf.math.is_finite(rs[1:])
    dup = tf.scatter_nd(order[:, None], tf.concat([[False], same], 0), [n])
    by_f = tf.argsort(f, direction="DESCENDING", stable=True)
    pos = tf.cast(tf.scatter_nd(by_f[:, None], tf.range(n), [n]), tf.float32)
    low = DUPLICATE_FITNESS * (1.0 + 0.1 * pos / max(n, 1))
    return tf.where(dup, low, f)


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
