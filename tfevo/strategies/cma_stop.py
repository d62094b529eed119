"""The termination criteria of the CMA family, evaluated in-graph at every ``tell``.

pycma's definitions (tolfun, tolx, conditioncov, noeffectaxis, noeffectcoord,
stagnation, tolupsigma, tolflatfitness, tolfacupx, tolfunhist), as bit flags in the
strategy's ``stop_flags``; the restart wrappers of
:mod:`tfevo.strategies.restarts` read them.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp

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


def stagnation_window(n: int, lam: int) -> int:
    """Generations of the stagnation criterion: pycma's ``tolstagnation``
    ``100 + 100 n**1.5 / lambda`` (a shorter window fires on ill-conditioned
    problems while they still make progress)."""
    return int(100 + 100.0 * n**1.5 / lam)


def _median(v):
    return tfp.stats.percentile(v, 50.0, interpolation="midpoint")


def update_stop_flags(es, f_sorted, cdiag=None) -> None:
    """Records this generation's best and median fitness and sets ``es.stop_flags``.

    ``f_sorted``: the fitness, best first; ``cdiag``: diag(C) after this
    generation's update when the covariance model applies it later (default:
    the model's current diagonal).
    """
    model, dt = es._model, es.dtype
    g = es.generation - es.restart_generation  # generations since (re)start, before increment
    hist_len = es.hist_len
    slot = tf.cast(tf.math.floormod(g, hist_len), tf.int32)
    finite = tf.math.is_finite(f_sorted)
    es.best_f_hist.scatter_nd_update([[slot]], [f_sorted[0]])
    es.median_f_hist.scatter_nd_update([[slot]], [f_sorted[es.popsize // 2]])
    count = tf.minimum(g + 1, hist_len)
    # ordered history, oldest first: positions slot-count+1 .. slot
    idx = tf.math.floormod(slot - tf.range(hist_len - 1, -1, -1), hist_len)

    # tolfun: range of recent bests and of this generation below tolfun.
    win = min(es.tolfun_window, hist_len)
    recent = tf.gather(es.best_f_hist, idx[hist_len - win:])
    cur_range = tf.where(tf.reduce_all(finite), f_sorted[0] - f_sorted[-1], np.inf)
    if es._plateau_criteria:
        # pycma: the range over the bests recorded so far (up to the window), from the first generation
        known = tf.range(win, dtype=count.dtype) >= win - tf.minimum(count, win)
        hist_range = (tf.reduce_max(tf.where(known, recent, -np.inf))
                      - tf.reduce_min(tf.where(known, recent, np.inf)))
        tolfun = (cur_range < es.tolfun) & (hist_range < es.tolfun)
        tolfunhist = (tf.minimum(count, win) > 9) & (hist_range < TOL_FUN_HIST)
    else:  # SepCMAES: its C++ tell waits for the full window and has no tolfunhist
        hist_range = tf.reduce_max(recent) - tf.reduce_min(recent)
        tolfun = (count >= es.tolfun_window) & (cur_range < es.tolfun) & (hist_range < es.tolfun)
        tolfunhist = tf.constant(False)
    sigma = es.sigma
    scales = model.axis_scales()  # sqrt of eigenvalues (or diag) of C
    cdiag = model.cov_diag() if cdiag is None else cdiag
    tolx = tf.reduce_all(sigma * tf.maximum(tf.abs(es.p_c), tf.sqrt(cdiag)) < es.tolx)
    cond_lim = 1e14 if dt == tf.float64 else 1e12
    floor = 1e-300 if dt == tf.float64 else 1e-37
    cond = tf.square(tf.reduce_max(scales) / tf.maximum(tf.reduce_min(scales), floor)) > cond_lim
    m = es._mean
    coord_still = tf.equal(m, m + 0.2 * sigma * tf.sqrt(cdiag))
    if dt == tf.float64:
        # pycma's definitions: axis g mod n (0.1 sigma along it) or any coordinate
        # (0.2 sigma sqrt(C_ii)) no longer moves the mean
        noeffectaxis = model.no_effect_axis(g)
        noeffectcoord = tf.reduce_any(coord_still)
    else:
        # float32 resolution (eps 6e-8) is reached on the short axes of an
        # ill-conditioned C while the long ones still make progress: the
        # criteria fire only when *no* axis, *no* coordinate moves the mean
        noeffectaxis = _no_effect_all_axes(es, g)
        noeffectcoord = tf.reduce_all(coord_still)
    # stagnation: medians of the last 20% of best and median histories no
    # better than those of the first 20% of the window.
    k = es.stag_window
    q = max(1, int(0.2 * k))
    bh = tf.gather(es.best_f_hist, idx[hist_len - k:])
    mh = tf.gather(es.median_f_hist, idx[hist_len - k:])
    # (the four medians are only computed once the window is full)
    stagn = tf.cond(
        count >= k,
        lambda: (_median(bh[-q:]) <= _median(bh[:q])) & (_median(mh[-q:]) <= _median(mh[:q])),
        lambda: tf.constant(False),
    )
    sigma0 = es.run_sigma0  # this run's initial step size (a restart may choose another)
    tolupsigma = sigma > 1e20 * sigma0 * tf.reduce_max(scales)
    # tolflatfitness: a plateau (the best quarter of the population not better than
    # the member at rank 0.75 lambda) gives the ranking no information; pycma stops
    # the run after more than TOL_FLAT_FITNESS such generations in a row.
    if es._plateau_criteria:
        flat = f_sorted[0] <= f_sorted[int(0.75 * es.popsize)]
        flat_run = tf.where(flat, es.flat_run + 1, 0)
        es.flat_run.assign(flat_run)
        tolflat = flat_run > TOL_FLAT_FITNESS
        tolfacupx = tf.reduce_any(sigma * tf.sqrt(cdiag) > TOL_FAC_UP_X * sigma0)
    else:  # SepCMAES: its C++ tell does not compute these two
        tolflat = tolfacupx = tf.constant(False)
    flags = [tolfun, tolx, cond, noeffectaxis, noeffectcoord, stagn, tolupsigma, tolflat, tolfacupx, tolfunhist]
    es.stop_flags.assign(tf.add_n([tf.cast(f, tf.int32) * (1 << i) for i, f in enumerate(flags)]))


def _no_effect_all_axes(es, g):
    """``m == m + 0.1 sigma e_i`` for every principal axis ``e_i`` (scaled).

    Diagonal C: the axes are the coordinates, all checked at once in O(n).
    Full C: one axis per generation, ``g mod n`` as pycma, and the criterion
    holds once ``n`` consecutive generations found no effect (a whole cycle of
    axes, O(n) per generation instead of O(n^2)).
    """
    model = es._model
    if not model.full_axes:
        return tf.reduce_all(tf.equal(es._mean, es._mean + 0.1 * es.sigma * model.axis_scales()))
    run = tf.where(model.no_effect_axis(g), es.no_effect_run + 1, 0)
    es.no_effect_run.assign(run)
    return run >= es.num_dims
