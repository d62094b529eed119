"""The termination criteria of the CMA family, evaluated in-graph at every ``tell``.

pycma's definitions (tolfun, tolx, conditioncov, noeffectaxis, noeffectcoord,
stagnation, tolupsigma, tolflatfitness, tolfacupx, tolfunhist, tolxstagnation), as
bit flags in the strategy's ``stop_flags``; the restart wrappers of
:mod:`tfevo.strategies.restarts` read them.  ``docs/cma.md`` has the table of
every criterion against pycma's, per class.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

#: bit positions of :attr:`CMAES.stop_flags`.
STOP_REASONS = (
    "tolfun",
    "tolx",
    "conditioncov",
    "noeffectaxis",
    "noeffectcoord",
    "stagnation",
    "tolupsigma",
    "tolflatfitness",
    "tolfacupx",
    "tolfunhist",
    "tolxstagnation",
)

#: pycma's ``tolfunhist``: at least 10 recorded bests whose range is below this
TOL_FUN_HIST = 1e-12

#: generations in a row with flat fitness (the best equal to the member at rank
#: ``floor(0.75 lambda)``) that are tolerated; one more fires ``tolflatfitness``
#: (pycma's default ``tolflatfitness=1``).
TOL_FLAT_FITNESS = 1
#: ``tolfacupx``: some coordinate's standard deviation ``sigma sqrt(C_ii)`` grew past
#: this factor times the run's initial ``sigma`` (pycma's default: sigma0 was far
#: too small, or the search diverges).
TOL_FAC_UP_X = 1e3
#: pycma's ``tolxstagnation`` ``[delta, offset, fraction]``: the run stops when the mean
#: has moved less than ``delta * sqrt(max(1, age / t))`` (Euclidean norm) from a reference
#: point for more than ``t = offset + fraction * iterations`` iterations.
TOL_X_STAGNATION = (1e-9, 20.0, 0.1)
#: pycma's stagnation histories: the best and the median of every 5th iteration, at most 20000 of each
STAG_SAMPLE_EVERY = 5
STAG_MAX_SAMPLES = 20000

#: entries of the int64 vector ``stop_counters``
RUN_BEST_EVAL = 0  # evaluations of this run up to its best member (pycma's es.best.evals)
XSTAG_SINCE = 1  # iteration at which the tolxstagnation reference was last set
STAG_MEDIANS = 2  # 1: the last sampled medians show no improvement (see stagnation)
FLAT_RUN = 3  # generations in a row with flat fitness (tolflatfitness)
NUM_COUNTERS = 4


def stagnation_window(n: int, lam: int) -> int:
    """Generations of the stagnation criterion: pycma's ``tolstagnation``
    ``100 + 100 n**1.5 / lambda``."""
    return int(100 + 100.0 * n**1.5 / lam)


def stagnation_samples(window: int) -> int:
    """Length of the sampled best/median ring buffers for a ``tolstagnation`` of at most
    ``window``: the newest ``2 l`` samples are compared, ``l = max(window, samples) // 10``
    and ``2 l`` below the number of samples (at most ``STAG_MAX_SAMPLES``)."""
    return int(min(STAG_MAX_SAMPLES, max(2 * (STAG_MAX_SAMPLES // 10), 2 * (int(window) // 10) + 2)))


def _masked_median(v, n):
    """The median of ``v[:n]`` as ``np.median`` (midpoint of the two middle order statistics)."""
    big = tf.constant(np.inf, v.dtype)
    s = tf.sort(tf.where(tf.range(tf.shape(v)[0]) < n, v, big))
    return 0.5 * (tf.gather(s, (n - 1) // 2) + tf.gather(s, n // 2))


def _stagnating_medians(es, k):
    """pycma's median test of ``tolstagnation`` after sample ``k`` (1-based): of the newest
    ``l`` sampled bests and medians, neither median better than that of the ``l`` before."""
    cap = es.stag_samples
    n_samples = tf.minimum(k, STAG_MAX_SAMPLES)
    l = tf.maximum(tf.constant(es.stag_window // 10, tf.int64), n_samples // 10)
    ready = (n_samples > 100) & (2 * l < n_samples)

    def compare():
        half = cap // 2
        newest = tf.range(half, dtype=tf.int64)
        slot_new = tf.math.floormod(k - 1 - newest, cap)
        slot_old = tf.math.floormod(k - 1 - l - newest, cap)
        li = tf.cast(l, tf.int32)
        out = tf.constant(True)
        for h in (es.stag_best_hist, es.stag_median_hist):
            new = _masked_median(tf.gather(h, slot_new), li)
            old = _masked_median(tf.gather(h, slot_old), li)
            out = out & (new <= old)  # (maximised: no better)
        return out

    return tf.cond(ready, compare, lambda: tf.constant(False))


def update_stop_flags(es, f_sorted, order, cdiag=None) -> None:
    """Records this generation's best and median fitness and sets ``es.stop_flags``.

    ``f_sorted``: the fitness, best first (``order``: the member indices, stably
    sorted); ``cdiag``: diag(C) after this generation's update when the covariance
    model applies it later (default: the model's current diagonal).  Reads the
    updated mean and step size.
    """
    model, dt = es._model, es.dtype
    g = es.generation - es.restart_generation  # generations since (re)start, before increment
    it = g + 1  # pycma's countiter
    lam = es.popsize
    hist_len = es.hist_len
    slot = tf.cast(tf.math.floormod(g, hist_len), tf.int32)
    finite = tf.math.is_finite(f_sorted)
    es.best_f_hist.scatter_nd_update([[slot]], [f_sorted[0]])
    count = tf.minimum(g + 1, hist_len)
    # ordered history, oldest first: positions slot-count+1 .. slot
    idx = tf.math.floormod(slot - tf.range(hist_len - 1, -1, -1), hist_len)
    counters = es.stop_counters

    # tolfun: range of the bests recorded so far (at most the window) and of this generation
    # below tolfun (pycma's: no minimum length); tolfunhist: at least 10 bests within 1e-12
    win = min(es.tolfun_window, hist_len)
    recent = tf.gather(es.best_f_hist, idx[hist_len - win:])
    cur_range = tf.where(tf.reduce_all(finite), f_sorted[0] - f_sorted[-1], np.inf)
    known = tf.range(win, dtype=count.dtype) >= win - tf.minimum(count, win)
    hist_range = (tf.reduce_max(tf.where(known, recent, -np.inf))
                  - tf.reduce_min(tf.where(known, recent, np.inf)))
    tolfun = (cur_range < es.tolfun) & (hist_range < es.tolfun)
    tolfunhist = (tf.minimum(count, win) > 9) & (hist_range < TOL_FUN_HIST)
    sigma = es.sigma
    scales = model.axis_scales()  # sqrt of eigenvalues (or diag) of C
    cdiag = model.cov_diag() if cdiag is None else cdiag
    tolx = tf.reduce_all(sigma * tf.maximum(tf.abs(es.p_c), tf.sqrt(cdiag)) < es.tolx)
    cond_lim = 1e14 if dt == tf.float64 else 1e12
    floor = 1e-300 if dt == tf.float64 else 1e-37
    cond = tf.square(tf.reduce_max(scales) / tf.maximum(tf.reduce_min(scales), floor)) > cond_lim
    m = es._mean
    coord_still = tf.equal(m, m + 0.2 * sigma * tf.sqrt(cdiag))
    if model.diagonal:
        # pycma's CMA_diagonal=True checks no principal axis (they are the coordinates)
        noeffectaxis = tf.constant(False)
        noeffectcoord = tf.reduce_any(coord_still) if dt == tf.float64 else tf.reduce_all(coord_still)
    elif dt == tf.float64:
        # pycma's definitions: axis countiter mod n (0.1 sigma along it; countiter counts
        # this generation) or any coordinate (0.2 sigma sqrt(C_ii)) no longer moves the mean
        noeffectaxis = model.no_effect_axis(it)
        noeffectcoord = tf.reduce_any(coord_still)
    else:
        # float32 resolution (eps 6e-8) is reached on the short axes of an
        # ill-conditioned C while the long ones still make progress: the
        # criteria fire only when *no* axis, *no* coordinate moves the mean
        noeffectaxis = _no_effect_all_axes(es, it)
        noeffectcoord = tf.reduce_all(coord_still)

    # stagnation (pycma's tolstagnation T): the best and median of every 5th iteration are
    # kept; the run stops when neither median of the newest l = max(T, samples) // 10 samples is
    # better than that of the l before, the run's best is more than T / 2 iterations old and the
    # run is longer than n (5 + 100 / lambda) iterations.
    f_median = 0.5 * (f_sorted[(lam - 1) // 2] + f_sorted[lam // 2])
    k = it // STAG_SAMPLE_EVERY  # samples recorded, this generation's included
    sample = tf.equal(it % STAG_SAMPLE_EVERY, 0)
    sslot = tf.cast(tf.math.floormod(k - 1, es.stag_samples), tf.int32)
    for h, v in ((es.stag_best_hist, f_sorted[0]), (es.stag_median_hist, f_median)):
        h.scatter_nd_update([[sslot]], [tf.where(sample, v, tf.gather(h, sslot))])  # (gather: no constant slice)
    stag_medians = tf.where(sample, tf.cast(_stagnating_medians(es, k), tf.int64), counters[STAG_MEDIANS])
    # the run's best (pycma's es.best, minimised there: the first member of the best value)
    improved = f_sorted[0] > es.run_best_f
    es.run_best_f.assign(tf.where(improved, f_sorted[0], es.run_best_f))
    best_eval = tf.where(improved, g * lam + tf.cast(order[0], tf.int64) + 1, counters[RUN_BEST_EVAL])
    best_old = 2 * (it * lam - best_eval) > es.stag_window * lam  # (evals - best.evals) / lambda > T / 2
    stagn = (stag_medians > 0) & best_old & (tf.cast(it, tf.float64) > es.stag_min_iter)

    # tolxstagnation: the mean stayed within delta * sqrt(max(1, age / t)) of a reference
    # point for more than t = offset + fraction * iterations iterations
    delta, offset, frac = TOL_X_STAGNATION
    itf = tf.cast(it, dt)
    t = offset + frac * itf
    since = counters[XSTAG_SINCE]
    age = itf - tf.cast(since, dt)
    moved = tf.norm(es.xstag_mean - m) > delta * tf.sqrt(tf.maximum(tf.constant(1.0, dt), age / t))
    es.xstag_mean.assign(tf.where(moved, m, es.xstag_mean))
    since = tf.where(moved, it, since)
    tolxstag = itf - tf.cast(since, dt) > t

    sigma0 = es.run_sigma0  # this run's initial step size (a restart may choose another)
    tolupsigma = sigma > 1e20 * sigma0 * tf.reduce_max(scales)
    # tolflatfitness: a plateau (the best quarter of the population not better than
    # the member at rank 0.75 lambda) gives the ranking no information; pycma stops
    # the run after more than TOL_FLAT_FITNESS such generations in a row.
    flat = f_sorted[0] <= f_sorted[int(0.75 * lam)]
    flat_run = tf.where(flat, counters[FLAT_RUN] + 1, 0)
    tolflat = flat_run > TOL_FLAT_FITNESS
    tolfacupx = tf.reduce_any(sigma * tf.sqrt(cdiag) > TOL_FAC_UP_X * sigma0)
    es.stop_counters.assign(tf.stack([best_eval, since, stag_medians, flat_run]))
    flags = [tolfun, tolx, cond, noeffectaxis, noeffectcoord, stagn, tolupsigma, tolflat, tolfacupx, tolfunhist,
             tolxstag]
    es.stop_flags.assign(tf.add_n([tf.cast(f, tf.int32) * (1 << i) for i, f in enumerate(flags)]))


def _no_effect_all_axes(es, it):
    """``m == m + 0.1 sigma e_i`` for every principal axis ``e_i`` (scaled).

    Full C: one axis per generation, ``it mod n`` as pycma, and the criterion
    holds once ``n`` consecutive generations found no effect (a whole cycle of
    axes, O(n) per generation instead of O(n^2)).  Isotropic scales (LM-MA-ES):
    all at once.
    """
    model = es._model
    if not model.full_axes:
        return tf.reduce_all(tf.equal(es._mean, es._mean + 0.1 * es.sigma * model.axis_scales()))
    run = tf.where(model.no_effect_axis(it), es.no_effect_run + 1, 0)
    es.no_effect_run.assign(run)
    return run >= es.num_dims
