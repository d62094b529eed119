"""CMA-ES: covariance matrix adaptation evolution strategy (full covariance).

Implements the (mu/mu_w, lambda)-CMA-ES with the default parameters of
Hansen's tutorial ("The CMA Evolution Strategy: A Tutorial", arXiv:1604.00772,
2016): recombination weights including *negative* weights (active CMA), cumulative
step-size adaptation, rank-one plus rank-mu covariance update with the h_sigma
stall, and a lazily refreshed eigendecomposition ``C = B diag(D**2) B^T``.

All state lives in ``tf.Variable`` attributes (checkpointable with
``tf.train.Checkpoint``); ``ask``/``tell`` are ``tf.function`` programs over the
whole population, traced once per population size.  ``tell`` is one call:
a graph whose numeric core (ranking, mean, paths, step size, stop criteria) is
a nested XLA cluster, then one call of :func:`tfevo.linalg.eigen_refresh`: the
rank-one and rank-mu update as a single rank-(P+1) update of C's lower triangle
(BLAS; XLA's CPU dot is slower there) and, only every ``lazy_gap`` generations,
the eigendecomposition (LAPACK's ``?syevd``, ~2x faster than TensorFlow's
Eigen-based ``tf.linalg.eigh`` kernel, which is itself far faster than XLA's),
both in place on the variables through one custom op (``TfevoEigenRefresh``;
pure-TF reference otherwise).  The gap is Hansen's tutorial gap
``max(1, floor(1 / (10 n (c1 + cmu))))``, as pycma (settable with
``eigen_gap``), sampling reusing ``B`` and ``D`` in between.  ``ask`` runs as a
plain graph (XLA's CPU random normal generator is ~10x slower than
TensorFlow's kernel).  Both are called through
:class:`tfevo.core.FastCall`, which skips ``tf.function``'s per-call argument
binding.

Fitness is maximised (higher is better); NaN/-inf count as worst.  ``tell``
derives every update from the population it is given (``y = (x - m) / sigma``),
so rows may be clipped, repaired or re-ordered by the caller.

Termination diagnostics (tolfun, tolx, conditioncov, noeffectaxis,
noeffectcoord, stagnation, tolupsigma) are evaluated in-graph at every ``tell``
and exposed as :attr:`CMAES.stop_reasons`; the restart wrappers in
:mod:`tfevo.strategies.restarts` use them.
"""

from __future__ import annotations

import abc

import math

import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp

from tfevo.core import (
    Algorithm, ConfigError, FastCall, ShapeError, check_fitness, check_population, sanitize_fitness,
)
from tfevo.linalg import all_equal as _all_equal
from tfevo.linalg import covariance_refresh as _covariance_refresh
from tfevo.linalg import covariance_refresh_op_available as _covariance_refresh_op_available
from tfevo.linalg import eigen_refresh as _eigen_refresh
from tfevo.linalg import syrk_update as _syrk_update
from tfevo.linalg import triangular_rows as _triangular_rows
from tfevo.linalg import eigh as _eigh
from tfevo.registry import register
from tfevo.strategies.shaping import _normal as _box_muller

__all__ = ["CMAES", "CholeskyCMAES", "cma_default_popsize", "STOP_REASONS"]

#: bit positions of :attr:`CMAES.stop_flags`.
STOP_REASONS = (
    "tolfun",
    "tolx",
    "conditioncov",
    "noeffectaxis",
    "noeffectcoord",
    "stagnation",
    "tolupsigma",
)


def cma_default_popsize(num_dims: int) -> int:
    """The default population size ``4 + floor(3 ln n)`` of CMA-ES."""
    return 4 + int(math.floor(3 * math.log(int(num_dims))))


def _stagnation_window(n: int, lam: int) -> int:
    """Generations of the stagnation criterion: pycma's ``tolstagnation``
    ``100 + 100 n**1.5 / lambda`` (a shorter window fires on ill-conditioned
    problems while they still make progress)."""
    return int(100 + 100.0 * n**1.5 / lam)


class _Untracked:
    """A plain holder that tf.Module does not track (kept out of checkpoints)."""

    def __init__(self):
        self.d = {}


class _CMABase(Algorithm):
    """Shared machinery of CMA-ES variants (weights, CSA, stop criteria).

    Subclasses define how the covariance is stored: ``_init_cov``,
    ``_sample_y(z)``, ``_inv_sqrt(y)``, ``_update_cov(...)``, ``_refresh``,
    ``_cov_diag``, ``_axis_scales`` and ``_learning_rates``.
    """

    jit_compile = False  # the outer functions; the numeric cores are XLA-compiled
    _lazy_eigen = True
    _full_axes = False  # principal axes other than the coordinates (full C)
    _core_jit = True  # XLA for the numeric core of a lazy-eigen tell

    def __init__(
        self,
        num_dims: int,
        popsize: int | None = None,
        sigma: float = 1.0,
        init_params=None,
        seed: int = 0,
        bounds=None,
        active: bool = True,
        dtype="float64",
        tolfun: float = 1e-11,
        tolx: float = 1e-11,
        name: str | None = None,
        eigen_gap: int | None = None,
    ):
        num_dims = int(num_dims)
        if num_dims < 1:
            raise ConfigError(f"num_dims must be >= 1, got {num_dims}")
        if popsize is None:
            popsize = cma_default_popsize(num_dims)
        if int(popsize) < 2:
            raise ConfigError(f"popsize must be >= 2 for CMA-ES, got {popsize}")
        super().__init__(num_dims, int(popsize), seed=seed, name=name, dtype=dtype)
        try:
            sigma_ok = bool(np.isfinite(sigma) and sigma > 0)
        except TypeError:
            sigma_ok = False
        if not sigma_ok:
            raise ConfigError(f"sigma must be a positive finite number, got {sigma!r}")
        self.active = bool(active)
        self.sigma_init = float(sigma)  # the initial step size sigma_0 (restarts reuse it)
        self.tolfun = float(tolfun)
        self.tolx = float(tolx)
        if eigen_gap is not None and (int(eigen_gap) != eigen_gap or int(eigen_gap) < 1):
            raise ConfigError(f"eigen_gap must be a positive integer (generations) or None, got {eigen_gap}")
        self.eigen_gap = None if eigen_gap is None else int(eigen_gap)
        if init_params is None:
            mean0 = np.zeros([num_dims])
        else:
            mean0 = np.asarray(init_params, dtype=np.float64)
            if mean0.ndim == 0:
                mean0 = np.full([num_dims], float(mean0))
            if mean0.shape != (num_dims,):
                raise ShapeError(f"init_params must have shape [{num_dims}], got {list(mean0.shape)}")
            if not np.all(np.isfinite(mean0)):
                raise ConfigError("init_params must be finite")
        self.init_params = mean0
        self.bounds = None
        if bounds is not None:
            lo, hi = bounds
            lo = np.broadcast_to(np.asarray(lo, np.float64), [num_dims]).copy()
            hi = np.broadcast_to(np.asarray(hi, np.float64), [num_dims]).copy()
            if np.any(lo >= hi):
                raise ConfigError("bounds must satisfy lower < upper in every coordinate")
            self.bounds = (lo, hi)
        n = num_dims
        dt = self.dtype
        self.chi_n = math.sqrt(n) * (1.0 - 1.0 / (4.0 * n) + 1.0 / (21.0 * n * n))
        # Stagnation history: long enough for the smallest sensible popsize.
        lam_min = min(self.popsize, cma_default_popsize(n))
        self.hist_len = int(min(20000, _stagnation_window(n, lam_min)))
        # -- state --------------------------------------------------------
        self._mean = tf.Variable(tf.constant(mean0, dt), trainable=False, name="mean")
        self.sigma = tf.Variable(tf.constant(self.sigma_init, dt), trainable=False, name="sigma")
        self.p_sigma = tf.Variable(tf.zeros([n], dt), trainable=False, name="p_sigma")
        self.p_c = tf.Variable(tf.zeros([n], dt), trainable=False, name="p_c")
        self._init_cov()
        self.best_f_hist = tf.Variable(tf.zeros([self.hist_len], tf.float32), trainable=False, name="best_f_hist")
        self.median_f_hist = tf.Variable(tf.zeros([self.hist_len], tf.float32), trainable=False, name="median_f_hist")
        self.stop_flags = tf.Variable(0, dtype=tf.int32, trainable=False, name="stop_flags")
        # consecutive generations whose checked axis had no effect (float32 noeffectaxis)
        self.no_effect_run = tf.Variable(0, dtype=tf.int32, trainable=False, name="no_effect_run")
        self.restart_generation = tf.Variable(0, dtype=tf.int64, trainable=False, name="restart_generation")
        self._init_best()
        self._fn_cache = _Untracked()  # popsize -> compiled functions (not checkpointed)
        self._configure(self.popsize)

    # ------------------------------------------------------------------
    # strategy parameters (Python constants per popsize)
    def _configure(self, popsize: int) -> None:
        """(Re)computes the popsize-dependent constants and selects the
        compiled functions for that popsize (traced once per popsize)."""
        if self._ask_fn is not None:
            self._fn_cache.d[self.popsize] = (self._ask_fn, self._tell_fn, self._core_fn)
        self.popsize = int(popsize)
        self._ask_fn, self._tell_fn, self._core_fn = self._fn_cache.d.get(self.popsize, (None, None, None))
        n, lam = self.num_dims, self.popsize
        mu = lam // 2
        wp = math.log((lam + 1) / 2.0) - np.log(np.arange(1, lam + 1, dtype=np.float64))
        pos, neg = wp[:mu], wp[mu:]
        mueff = pos.sum() ** 2 / (pos**2).sum()
        mueff_neg = neg.sum() ** 2 / max((neg**2).sum(), 1e-300) if len(neg) else 0.0
        self.mu, self.mueff = mu, float(mueff)
        self.c_sigma = (mueff + 2.0) / (n + mueff + 5.0)
        self.d_sigma = 1.0 + 2.0 * max(0.0, math.sqrt((mueff - 1.0) / (n + 1.0)) - 1.0) + self.c_sigma
        self.c_c = (4.0 + mueff / n) / (n + 4.0 + 2.0 * mueff / n)
        c1, cmu = self._learning_rates(n, mueff)
        self.c1, self.cmu = c1, cmu
        w = np.zeros(lam)
        w[:mu] = pos / pos.sum()
        if self.active and len(neg) and abs(neg.sum()) > 0:
            alpha_mu = 1.0 + c1 / cmu
            alpha_mueff = 1.0 + 2.0 * mueff_neg / (mueff + 2.0)
            alpha_posdef = (1.0 - c1 - cmu) / (n * cmu)
            w[mu:] = min(alpha_mu, alpha_mueff, alpha_posdef) * neg / np.abs(neg).sum()
        self.weights_np = w
        self.weights = tf.constant(w, self.dtype)
        # Lazy eigendecomposition gap (generations): Hansen's tutorial (and pycma's
        # default) max(1, floor(1 / (10 n (c1 + cmu)))), unless the user set one.
        if self.eigen_gap is not None:
            self.lazy_gap = self.eigen_gap
        else:
            self.lazy_gap = max(1, int(math.floor(1.0 / (10.0 * n * max(c1 + cmu, 1e-30)))))
        # tolfun / stagnation windows.
        self.tolfun_window = int(10 + math.ceil(30.0 * n / lam))
        self.stag_window = int(min(self.hist_len, _stagnation_window(n, lam)))

    @abc.abstractmethod
    def _learning_rates(self, n: int, mueff: float) -> tuple[float, float]:
        raise NotImplementedError

    def _csa_sigma(self, sigma, ps_norm):
        """Cumulative step-size adaptation: ``sigma * exp(min(1, cs/d_sigma (|p_sigma|/E|N| - 1)))``."""
        log_step = (self.c_sigma / self.d_sigma) * (ps_norm / self.chi_n - 1.0)
        return sigma * tf.exp(tf.minimum(log_step, 1.0))

    def _mahalanobis_sq(self, y):
        """``||C^{-1/2} y_i||^2`` per row (subclasses skip work the norm does not need)."""
        return tf.reduce_sum(tf.square(self._inv_sqrt(y)), axis=1)

    # ------------------------------------------------------------------
    # public API
    @property
    def mean(self) -> tf.Tensor:
        """The current search centre (``[D]`` in :attr:`dtype`)."""
        return tf.identity(self._mean)

    @property
    def stop_reasons(self) -> list[str]:
        """Names of the termination criteria met at the last ``tell``."""
        flags = int(self.stop_flags.numpy())
        return [r for i, r in enumerate(STOP_REASONS) if flags & (1 << i)]

    def ask(self) -> tf.Tensor:
        """Samples ``popsize`` members ``x = m + sigma * B D z``: ``[P, D]`` in :attr:`dtype`."""
        if self._ask_fn is None:
            self._ask_fn = tf.function(
                self._trace_counter.wrap("ask", self._ask_body), input_signature=[], jit_compile=False
            )
        call = self._ask_call
        if call is None or call.fn is not self._ask_fn:
            call = self._ask_call = FastCall(self._ask_fn)
        return call()

    def tell(self, x, fitness) -> None:
        """Updates mean, step size and covariance from ``x [P, D]`` and fitness
        ``[P]`` (higher is better; NaN and +-inf are worst).  ``x`` is taken in
        :attr:`dtype` (other float dtypes are cast)."""
        x = check_population(x, (self.popsize, self.num_dims), "population", self.dtype)
        fitness = check_fitness(fitness, self.popsize)
        self._note_nonfinite(fitness)
        if self._tell_fn is None:
            # One call per tell: a graph whose numeric core is a nested XLA
            # cluster, followed (full CMA) by the lazy eigendecomposition in a
            # tf.cond; TensorFlow's eigh kernel is far faster than XLA's on CPU,
            # so it stays outside the cluster.
            # (Variants without eigendecomposition compile the whole tell with XLA.)
            sig = [tf.TensorSpec([self.popsize, self.num_dims], self.dtype), tf.TensorSpec([self.popsize], tf.float32)]
            if self._lazy_eigen:
                core = tf.function(self._tell_core, jit_compile=self._core_jit)

                def tell_body(x, fitness):
                    out = core(x, fitness, *self._pre_core(x))
                    if isinstance(out, (tuple, list)):  # the big C update, deferred to graph mode
                        self._apply_cov(*out)
                    self._post_tell()
                    return tf.constant(0)

                self._core_fn = core
                self._tell_fn = tf.function(self._trace_counter.wrap("tell", tell_body), input_signature=sig)
            else:
                self._core_fn = None
                body, jit = self._whole_tell()
                self._tell_fn = tf.function(self._trace_counter.wrap("tell", body), input_signature=sig, jit_compile=jit)
        call = self._tell_call
        if call is None or call.fn is not self._tell_fn:
            call = self._tell_call = FastCall(self._tell_fn)
        call(x, fitness)

    def _whole_tell(self):
        """``(body, jit_compile)`` of the tell of a variant without a lazy
        factorisation: by default ``_tell_core`` compiled whole by XLA."""
        return self._tell_core, True

    def reset(self, mean=None, sigma=None) -> None:
        """Resets the search distribution (mean, sigma, C = I, paths, histories).

        The seed stream, generation counter and best-so-far are kept.  Used by
        the restart wrappers; callable eagerly.
        """
        mean = self.init_params if mean is None else mean
        self._mean.assign(tf.cast(tf.reshape(mean, [self.num_dims]), self.dtype))
        self.sigma.assign(tf.cast(self.sigma_init if sigma is None else sigma, self.dtype))
        self.p_sigma.assign(tf.zeros_like(self.p_sigma))
        self.p_c.assign(tf.zeros_like(self.p_c))
        self._reset_cov()
        self.best_f_hist.assign(tf.zeros_like(self.best_f_hist))
        self.median_f_hist.assign(tf.zeros_like(self.median_f_hist))
        self.stop_flags.assign(0)
        self.no_effect_run.assign(0)
        self.restart_generation.assign(self.generation)

    # ------------------------------------------------------------------
    # compiled bodies
    def _normal(self, scale=None):
        """Standard normal ``[P, D]`` (times ``scale`` ``[D]``) from the seed stream.

        float32 uses the Box-Muller helper of :mod:`~tfevo.strategies.shaping`
        (2-3x faster on CPU than the stateless normal kernel); float64 uses
        ``tf.random.stateless_normal``.
        """
        shape, seed = [self.popsize, self.num_dims], self.seeds.next()
        if self.dtype == tf.float32:
            return _box_muller(shape, seed, scale)
        z = tf.random.stateless_normal(shape, seed=seed, dtype=self.dtype)
        return z if scale is None else z * scale

    def _ask_body(self):
        z = self._normal()
        x = self._mean[None, :] + self.sigma * self._sample_y(z)
        if self.bounds is not None:
            x = tf.clip_by_value(x, tf.constant(self.bounds[0], self.dtype), tf.constant(self.bounds[1], self.dtype))
        return x

    def _post_tell(self):
        local_g = self.generation - self.restart_generation
        need = tf.math.floormod(local_g, self.lazy_gap) == 0
        return tf.cond(need, self._refresh_op, lambda: tf.constant(0))

    def _pre_core(self, x):
        """Tensors computed in graph mode before the (XLA) numeric core and passed
        to it as extra arguments (none here; see :meth:`_whiten`)."""
        return ()

    def _whiten(self, y, y_w, order, extra):
        """``(C^{-1/2} y_w, ||C^{-1/2} y_i||^2 for the negative-weight rows or None)``.

        ``y``: the sorted steps ``[P, D]``; ``order``: the sort permutation;
        ``extra``: the output of :meth:`_pre_core`.
        """
        z_w = self._inv_sqrt(y_w[None, :])[0]
        sq = self._mahalanobis_sq(y[self.mu :]) if self.active else None
        return z_w, sq

    def _tell_core(self, x, fitness, *extra):
        n, lam, dt = self.num_dims, self.popsize, self.dtype
        fitness = sanitize_fitness(fitness)
        self._update_best(x, fitness)
        xd = x  # (in the state's dtype: tell's signature)
        row_ok = tf.reduce_all(tf.math.is_finite(xd), axis=1)
        fitness = tf.where(row_ok, fitness, -np.inf)
        any_finite = tf.reduce_any(tf.math.is_finite(fitness))
        order = tf.argsort(fitness, direction="DESCENDING", stable=True)
        f_sorted = tf.gather(fitness, order)
        m, sigma = self._mean, self.sigma
        y = (tf.gather(xd, order) - m[None, :]) / sigma
        y = tf.where(tf.gather(row_ok, order)[:, None], y, tf.zeros_like(y))
        w = self.weights
        y_w = tf.linalg.matvec(y[: self.mu], w[: self.mu], transpose_a=True)
        m_new = m + sigma * y_w
        cs, cc = self.c_sigma, self.c_c
        z_w, sq_neg = self._whiten(y, y_w, order, extra)
        p_sigma = (1.0 - cs) * self.p_sigma + math.sqrt(cs * (2.0 - cs) * self.mueff) * z_w
        ps_norm = tf.norm(p_sigma)
        g1 = tf.cast(self.generation - self.restart_generation + 1, dt)
        h_sigma = tf.cast(
            ps_norm / tf.sqrt(1.0 - tf.pow(tf.constant(1.0 - cs, dt), 2.0 * g1))
            < (1.4 + 2.0 / (n + 1.0)) * self.chi_n,
            dt,
        )
        p_c = (1.0 - cc) * self.p_c + h_sigma * math.sqrt(cc * (2.0 - cc) * self.mueff) * y_w
        if self.active:
            scale = n / tf.maximum(sq_neg, tf.constant(1e-30, dt))
            w_neg = w[self.mu :] * scale
            w_eff = tf.concat([w[: self.mu], w_neg], 0)
        else:
            w_eff = w
        delta_h = (1.0 - h_sigma) * cc * (2.0 - cc)
        decay = 1.0 + self.c1 * delta_h - self.c1 - self.cmu * float(self.weights_np.sum())
        deferred = self._update_cov(decay, p_c, y, w_eff, any_finite)
        sigma_new = self._csa_sigma(sigma, ps_norm)
        keep = any_finite & tf.math.is_finite(sigma_new) & tf.reduce_all(tf.math.is_finite(m_new))
        self._mean.assign(tf.where(keep, m_new, m))
        self.p_sigma.assign(tf.where(keep, p_sigma, self.p_sigma))
        self.p_c.assign(tf.where(keep, p_c, self.p_c))
        self.sigma.assign(tf.where(keep, sigma_new, sigma))
        self._update_stop(f_sorted, None if deferred is None else deferred[-1])
        self.generation.assign_add(1)
        # A subclass may leave the heavy part of the covariance update to the graph
        # (``_apply_cov``): ``_update_cov`` then returns (operands..., new diag(C)).
        return tf.constant(0) if deferred is None else tuple(deferred[:-1])

    def _refresh_op(self):
        self._refresh()
        return tf.constant(0)

    def _update_stop(self, f_sorted, cdiag=None):
        """Evaluates the termination criteria (bit flags in ``stop_flags``).

        ``cdiag``: diag(C) after this generation's update when C itself is
        updated later (default: read ``C``).
        """
        n, dt = self.num_dims, self.dtype
        g = self.generation - self.restart_generation  # generations since (re)start, before increment
        slot = tf.cast(tf.math.floormod(g, self.hist_len), tf.int32)
        finite = tf.math.is_finite(f_sorted)
        best = f_sorted[0]
        med = f_sorted[self.popsize // 2]
        self.best_f_hist.scatter_nd_update([[slot]], [best])
        self.median_f_hist.scatter_nd_update([[slot]], [med])
        count = tf.minimum(g + 1, self.hist_len)
        # ordered history, oldest first: positions slot-count+1 .. slot
        idx = tf.math.floormod(slot - tf.range(self.hist_len - 1, -1, -1), self.hist_len)

        def window(k):
            return tf.gather(self.best_f_hist, idx[self.hist_len - k :])

        # tolfun: range of recent bests and of this generation below tolfun.
        recent = window(min(self.tolfun_window, self.hist_len))
        cur_range = tf.where(tf.reduce_all(finite), f_sorted[0] - f_sorted[-1], np.inf)
        hist_range = tf.reduce_max(recent) - tf.reduce_min(recent)
        tolfun = (count >= self.tolfun_window) & (cur_range < self.tolfun) & (hist_range < self.tolfun)
        sigma = self.sigma
        scales = self._axis_scales()  # sqrt of eigenvalues (or diag) of C
        cdiag = self._cov_diag() if cdiag is None else cdiag
        tolx = tf.reduce_all(sigma * tf.maximum(tf.abs(self.p_c), tf.sqrt(cdiag)) < self.tolx)
        cond_lim = 1e14 if dt == tf.float64 else 1e12
        cond = tf.square(tf.reduce_max(scales) / tf.maximum(tf.reduce_min(scales), 1e-300 if dt == tf.float64 else 1e-37)) > cond_lim
        m = self._mean
        coord_still = tf.equal(m, m + 0.2 * sigma * tf.sqrt(cdiag))
        if dt == tf.float64:
            # pycma's definitions: axis g mod n (0.1 sigma along it) or any coordinate
            # (0.2 sigma sqrt(C_ii)) no longer moves the mean
            noeffectaxis = self._no_effect_axis(g)
            noeffectcoord = tf.reduce_any(coord_still)
        else:
            # float32 resolution (eps 6e-8) is reached on the short axes of an
            # ill-conditioned C while the long ones still make progress: the
            # criteria fire only when *no* axis, *no* coordinate moves the mean
            noeffectaxis = self._no_effect_all_axes(g)
            noeffectcoord = tf.reduce_all(coord_still)
        # stagnation: medians of the last 20% of best and median histories no
        # better than those of the first 20% of the window.
        k = self.stag_window
        q = max(1, int(0.2 * k))
        bh = tf.gather(self.best_f_hist, idx[self.hist_len - k :])
        mh = tf.gather(self.median_f_hist, idx[self.hist_len - k :])

        def med_of(v):
            return tfp.stats.percentile(v, 50.0, interpolation="midpoint")

        # (the four medians are only computed once the window is full)
        stagn = tf.cond(
            count >= k,
            lambda: (med_of(bh[-q:]) <= med_of(bh[:q])) & (med_of(mh[-q:]) <= med_of(mh[:q])),
            lambda: tf.constant(False),
        )
        tolupsigma = sigma > 1e20 * self.sigma_init * tf.reduce_max(scales)
        flags = [tolfun, tolx, cond, noeffectaxis, noeffectcoord, stagn, tolupsigma]
        bits = tf.add_n([tf.cast(f, tf.int32) * (1 << i) for i, f in enumerate(flags)])
        self.stop_flags.assign(bits)

    def _no_effect_axis(self, g):
        i = tf.cast(tf.math.floormod(g, self.num_dims), tf.int32)
        shift = 0.1 * self.sigma * tf.gather(self._axis_scales(), i) * self._axis_vector(i)
        return tf.reduce_all(tf.equal(self._mean, self._mean + shift))

    def _no_effect_all_axes(self, g):
        """``m == m + 0.1 sigma e_i`` for every principal axis ``e_i`` (scaled).

        Diagonal C (here): the axes are the coordinates, all checked at once in
        O(n).  Full C: one axis per generation, ``g mod n`` as pycma, and the
        criterion holds once ``n`` consecutive generations found no effect (a whole
        cycle of axes, O(n) per generation instead of O(n^2)).
        """
        if not self._full_axes:
            return tf.reduce_all(tf.equal(self._mean, self._mean + 0.1 * self.sigma * self._axis_scales()))
        run = tf.where(self._no_effect_axis(g), self.no_effect_run + 1, 0)
        self.no_effect_run.assign(run)
        return run >= self.num_dims


@register("strategy", "cma_es")
class CMAES(_CMABase):
    """CMA-ES with full covariance matrix (Hansen's tutorial defaults, active CMA).

    Args:
      num_dims: dimension ``n`` of the search space.
      popsize: ``lambda``; default ``4 + floor(3 ln n)``.
      sigma: initial step size ``sigma_0`` (> 0).
      init_params: initial mean (scalar or ``[n]``); default zeros.
      seed: seed of the :class:`~tfevo.core.SeedStream` (same seed, same run).
      bounds: optional ``(lower, upper)`` (scalars or ``[n]``); sampled members
        are clipped into the box (``tell`` learns from the clipped points).
      active: use negative recombination weights (active CMA, default True).
      dtype: ``"float64"`` (default) or ``"float32"``: the dtype of the state,
        of ``ask()``'s population, of the population ``tell`` takes and of
        ``best``.  float64 reaches ``f - f_opt <= 1e-8`` wherever pycma does
        (ill-conditioned problems need the resolution); float32 halves memory and
        is ~2x faster at large ``n`` -- the choice for neuroevolution-sized
        ``n`` (thousands of weights), where float32 resolution is far below what
        the fitness can distinguish.
      tolfun, tolx: thresholds of the ``tolfun``/``tolx`` stop criteria
        (absolute, as pycma's).
      eigen_gap: generations between eigendecompositions of ``C`` (sampling
        reuses ``B``, ``D`` in between).  Default ``max(1, floor(1 / (10 n
        (c1 + cmu))))`` from Hansen's tutorial, the same as pycma; larger values
        trade adaptation accuracy for speed at large ``n``.

    Attributes (tf.Variables): ``sigma``, ``C``, ``B``, ``D`` (square roots of
    the eigenvalues), ``p_sigma``, ``p_c``, ``best_params``, ``best_fitness``,
    ``stop_flags``; :attr:`mean` is the centre, :attr:`stop_reasons`
    the names of the met termination criteria.

    Example:

    >>> es = CMAES(num_dims=10, sigma=0.5, seed=1)
    >>> for _ in range(300):
    ...     x = es.ask()
    ...     es.tell(x, -tf.reduce_sum(x**2, axis=1))   # maximise -||x||^2
    """

    _full_axes = True

    def _learning_rates(self, n, mueff):
        c1 = 2.0 / ((n + 1.3) ** 2 + mueff)
        cmu = min(1.0 - c1, 2.0 * (mueff - 2.0 + 1.0 / mueff) / ((n + 2.0) ** 2 + mueff))
        return c1, cmu

    def _init_cov(self):
        n, dt = self.num_dims, self.dtype
        self.C = tf.Variable(tf.eye(n, dtype=dt), trainable=False, name="C")
        self.B = tf.Variable(tf.eye(n, dtype=dt), trainable=False, name="B")
        self.D = tf.Variable(tf.ones([n], dt), trainable=False, name="D")

    def _reset_cov(self):
        n, dt = self.num_dims, self.dtype
        self.C.assign(tf.eye(n, dtype=dt))
        self.B.assign(tf.eye(n, dtype=dt))
        self.D.assign(tf.ones([n], dt))

    def _sample_y(self, z):
        return tf.matmul(z * self.D[None, :], self.B, transpose_b=True)

    def _inv_sqrt(self, y):
        return tf.matmul(tf.matmul(y, self.B) / self.D[None, :], self.B, transpose_b=True)

    def _mahalanobis_sq(self, y):
        # ||B D^-1 B^T y|| = ||D^-1 B^T y||: B is orthogonal, one [k, D] x [D, D] product suffices
        return tf.reduce_sum(tf.square(tf.matmul(y, self.B) / self.D[None, :]), axis=1)

    def _update_cov(self, decay, p_c, y, w_eff, ok):
        # rank-one and rank-mu terms as one rank-(P+1) update of C's lower triangle:
        # c1 p_c p_c^T + cmu sum_i w_i y_i y_i^T = Y^T diag(v) Y with Y = [y; p_c].
        # The product itself is left to _apply_cov, outside the XLA core (BLAS through
        # tfevo.linalg: ?gemm strips of the lower triangle; XLA's CPU dot was 1.5-5x
        # slower for it at D=1000, P=256, benchmarks/results/cma.md).  diag(C) after
        # the update (for the stop criteria) is computed here, O(PD).
        dt = self.dtype
        ys = tf.concat([y, p_c[None, :]], axis=0)
        v = tf.concat([self.cmu * w_eff, tf.constant([self.c1], dt)], axis=0)
        decay = tf.cast(decay, dt)
        old_diag = tf.linalg.diag_part(self.C)
        cdiag = decay * old_diag + tf.reduce_sum(v[:, None] * tf.square(ys), axis=0)
        ok = ok & tf.reduce_all(tf.math.is_finite(cdiag)) & tf.reduce_all(tf.math.is_finite(v))
        return ys, v, decay, ok, tf.where(ok, cdiag, old_diag)

    def _apply_cov(self, ys, v, decay, ok):
        """``C <- lower(decay C + ys^T diag(v) ys)`` (kept only when ``ok`` and finite), then,
        every ``lazy_gap`` generations, ``B``, ``D`` from C's eigendecomposition: one call of
        :func:`tfevo.linalg.eigen_refresh` (in place on the variables with the op)."""
        local_g = self.generation - self.restart_generation  # (already counted by the core)
        need = tf.math.floormod(local_g, self.lazy_gap) == 0
        _eigen_refresh(self.C, self.B, self.D, ys, v, decay, ok=ok, refresh=need)

    def _post_tell(self):
        return tf.constant(0)  # (the refresh is part of _apply_cov)

    def _refresh(self):
        """Eigendecomposition of C (its lower triangle); eigenvalues floored at ``1e-12 max``
        (float64: ``1e-14``); B, D kept when it fails."""
        _eigen_refresh(self.C, self.B, self.D, refresh=True)

    def _cov_diag(self):
        return tf.linalg.diag_part(self.C)

    def _axis_scales(self):
        return self.D

    def _axis_vector(self, i):
        return tf.gather(self.B, i, axis=1)


    def covariance(self) -> tf.Tensor:
        """The current covariance matrix ``C``, symmetric (the variable ``C`` holds its lower triangle)."""
        lower = tf.linalg.band_part(self.C, -1, 0)
        return lower + tf.transpose(lower) - tf.linalg.diag(tf.linalg.diag_part(self.C))



@register("strategy", "cholesky_cma_es")
class CholeskyCMAES(CMAES):
    """CMA-ES with a Cholesky factor instead of an eigendecomposition (Krause,
    Arbones & Igel, NeurIPS 2016: "CMA-ES with optimal covariance update and
    storage complexity").

    Same arguments, defaults, weights, learning rates, step-size adaptation and
    covariance update (rank-one + rank-mu with active negative weights and
    pycma's Mahalanobis rescaling) as :class:`CMAES`; what differs:

    * **Sampling** ``y_i = A z_i`` with ``A`` the lower Cholesky factor of
      ``C`` (``C = A A^T``): the same distribution ``N(0, C)`` as ``B D z``.
    * **Step-size path** from ``A^{-1} (m' - m) / sigma = sum_i w_i z_i`` (the
      recombined standard-normal steps) instead of ``C^{-1/2} y_w``; the
      negative weights are rescaled with ``||z_i||^2 = y_i^T C^{-1} y_i``.
      When ``tell`` gets exactly the rows of the last ``ask`` (checked
      entry by entry, O(P D)), it uses the ``z_i`` that produced them (kept in
      a variable, checkpointed); otherwise (rows clipped by ``bounds``,
      repaired, re-ordered, or from elsewhere) it recomputes
      ``z_i = A^{-1} (x_i - m) / sigma`` with one triangular solve, so every
      row is whitened exactly as given, as in ``CMAES``.  The path is the same as the
      eigen variant's up to a rotation that changes at each refactorisation
      (``C^{-1/2} A`` is orthogonal); Krause et al. show that the step-size
      adaptation is unaffected, and the tests check the evaluation counts
      against pycma.
    * **Refactorisation** ``A = chol(C)`` (LAPACK ``?potrf`` through
      :func:`tfevo.linalg.cholesky`, ~n^3/3 flops, ~15x cheaper than ``?syevd``
      at n = 1000) on the same lazy schedule as ``CMAES`` (``eigen_gap``,
      default Hansen's gap).  ``A`` and the z-space stay consistent between
      refactorisations because every ``z`` is drawn for (or solved with) the
      current ``A``.  If ``C`` is not numerically positive definite (float32,
      condition ~1e7 and more), the factorisation is retried on
      ``C + delta I`` with ``delta`` growing from ``eps * max diag(C)`` by 10x
      per try (up to 12 tries); if all fail, ``A`` is kept.  The update flush
      and the factorisation are one in-place call,
      :func:`tfevo.linalg.covariance_refresh` (op ``TfevoCovarianceRefresh``:
      computed into a scratch ``[D, D]`` variable, not checkpointed, whose
      buffer is swapped with ``C``'s and ``A``'s, so no ``[D, D]`` tensor is
      allocated per refactorisation).
    * **Deferred covariance update.**  Between two refactorisations nothing
      reads ``C`` (sampling and whitening use ``A``), so the rank-(P+1) terms
      of the generations of one gap are kept in a buffer (``[gap (P+1), D]``
      rows with their weights, and the product of the decays) and added to
      ``C`` as one ``[D, gap (P+1)] x [gap (P+1), D]`` product just before the
      factorisation: the same sum as applying them one generation at a time,
      one pass over the ``[D, D]`` matrix instead of ``gap`` passes.  Only the
      lower triangle of ``C`` is computed and stored (BLAS ``?syrk``, half the
      flops; ``?potrf`` reads only that triangle): the attribute ``C`` holds
      the lower triangle (upper triangle zero).  ``diag(C)``
      (for the stop criteria) is updated every generation in O(P D).  The
      attribute ``C`` is therefore up to ``gap - 1`` generations old;
      :meth:`covariance` returns the current, symmetric matrix.  (When a popsize set
      after construction, e.g. by IPOP, would overflow the buffer, the update
      is applied every generation instead.)

    **Stop criteria without eigenvalues.**  ``conditioncov`` and ``tolupsigma``
    use bounds from the factor instead of the extreme eigenvalues:
    ``lambda_max >= max_i C_ii`` and ``lambda_min <= min_i A_ii^2`` (each
    ``A_ii^2`` is a ratio of leading principal minors, which interlacing bounds
    below by ``lambda_min``), so the condition number used,
    ``max_i C_ii / min_i A_ii^2``, is a *lower bound* of ``cond(C)``: the
    criterion never fires early, it may fire later.  ``noeffectaxis`` tests the
    columns of ``A`` (the images of the z-space axes) in turn instead of the
    principal axes.  Exact eigenvalues are computed only on request:
    :meth:`eigenvalues`, :meth:`axis_ratio`.

    State (tf.Variables, all checkpointed): ``sigma``, ``C``, ``A``,
    ``c_diag``, ``a_diag``, the update buffer, ``p_sigma``, ``p_c``, histories, seeds.

    Example:

    >>> es = CholeskyCMAES(num_dims=1000, seed=1)    # ~3x less time per generation than CMAES here
    >>> x = es.ask(); es.tell(x, -tf.reduce_sum(x**2, axis=1))
    """

    #: the update buffer may hold at most max(this many times D, 4096) rows
    _MAX_BUFFER_FACTOR = 4

    def __init__(
        self,
        num_dims: int,
        popsize: int | None = None,
        sigma: float = 1.0,
        init_params=None,
        seed: int = 0,
        bounds=None,
        active: bool = True,
        dtype="float64",
        tolfun: float = 1e-11,
        tolx: float = 1e-11,
        name: str | None = None,
        eigen_gap: int | None = None,
    ):
        # (the signature is spelled out, as CMAES's, so config builders see every parameter)
        super().__init__(num_dims, popsize=popsize, sigma=sigma, init_params=init_params, seed=seed,
                         bounds=bounds, active=active, dtype=dtype, tolfun=tolfun, tolx=tolx, name=name,
                         eigen_gap=eigen_gap)
        n, dt, gap, p = self.num_dims, self.dtype, self.lazy_gap, self.popsize
        # buffer capacity (rows), fixed at construction so checkpoints have fixed shapes
        self._kcap = gap * (p + 1) if gap > 1 and gap * (p + 1) <= max(self._MAX_BUFFER_FACTOR * n, 4096) else 0
        k = max(self._kcap, 1)
        self._ybuf = tf.Variable(tf.zeros([k, n], dt), trainable=False, name="cov_buffer_rows")
        self._vbuf = tf.Variable(tf.zeros([k], dt), trainable=False, name="cov_buffer_weights")
        self._cscale = tf.Variable(tf.constant(1.0, dt), trainable=False, name="cov_buffer_scale")
        self._set_buffer_mode()
        # The z's and x's of the last ask (for the initial popsize): tell reuses those z's
        # when it gets exactly the asked rows, instead of solving A z = (x - m) / sigma.
        self._zcache_p = p
        self._z_last = tf.Variable(tf.zeros([p, n], dt), trainable=False, name="z_last")
        self._x_last = tf.Variable(tf.fill([p, n], tf.constant(float("nan"), dt)), trainable=False, name="x_last")
        # Work buffer of the in-place refactorisation op (linalg.covariance_refresh): not
        # checkpointed (its contents are never read), absent when the op is unavailable.
        self._aux = _Untracked()
        self._aux.d["scratch"] = (tf.Variable(tf.zeros([n, n], dt), trainable=False, name="refresh_scratch")
                                  if _covariance_refresh_op_available() else None)

    # -- configuration ----------------------------------------------------------
    def _configure(self, popsize: int) -> None:
        super()._configure(popsize)
        self._set_buffer_mode()

    def _set_buffer_mode(self):
        kcap = getattr(self, "_kcap", None)
        if kcap is None:  # during the base constructor: set right after
            self._buf_gens = 1
            return
        g = self.lazy_gap
        self._buf_gens = g if (g > 1 and g * (self.popsize + 1) <= kcap) else 1

    # -- state --------------------------------------------------------------------
    def _init_cov(self):
        n, dt = self.num_dims, self.dtype
        self.C = tf.Variable(tf.eye(n, dtype=dt), trainable=False, name="C")
        self.A = tf.Variable(tf.eye(n, dtype=dt), trainable=False, name="A")
        self.c_diag = tf.Variable(tf.ones([n], dt), trainable=False, name="c_diag")
        # diag(A), kept with A (read by the stop criteria every generation: a strided pass
        # over the [n, n] matrix each time cost ~0.1 ms at n = 1000)
        self.a_diag = tf.Variable(tf.ones([n], dt), trainable=False, name="a_diag")

    def _reset_cov(self):
        n, dt = self.num_dims, self.dtype
        self.C.assign(tf.eye(n, dtype=dt))
        self.A.assign(tf.eye(n, dtype=dt))
        self.c_diag.assign(tf.ones([n], dt))
        self.a_diag.assign(tf.ones([n], dt))
        self._x_last.assign(tf.fill(tf.shape(self._x_last), tf.constant(float("nan"), self.dtype)))  # the last ask's z's are void
        self._vbuf.assign(tf.zeros_like(self._vbuf))
        self._cscale.assign(tf.constant(1.0, dt))

    # -- sampling and whitening -------------------------------------------------------
    def _sample_y(self, z):
        # y_i = A z_i: BLAS ?trmm (half the flops of a general product) via tfevo.linalg
        return _triangular_rows(self.A, z)

    def _inv_sqrt(self, y):
        """``A^{-1} y`` per row (whitening in the Cholesky frame)."""
        return tf.transpose(tf.linalg.triangular_solve(self.A, tf.transpose(y), lower=True))

    def _mahalanobis_sq(self, y):
        return tf.reduce_sum(tf.square(self._inv_sqrt(y)), axis=1)

    def _use_zcache(self):
        # (not with bounds: ask clips x, and the clipped rows are not m + sigma A z)
        return self.bounds is None and self.popsize == self._zcache_p

    def _ask_body(self):
        z = self._normal()
        x = self._mean[None, :] + self.sigma * self._sample_y(z)
        if self.bounds is not None:
            x = tf.clip_by_value(x, tf.constant(self.bounds[0], self.dtype), tf.constant(self.bounds[1], self.dtype))
        if self._use_zcache():
            self._z_last.assign(z)
            self._x_last.assign(x)
        return x

    def _pre_core(self, x):
        # z_i = A^{-1} (x_i - m) / sigma for all rows at once, in graph mode (Eigen's
        # triangular solve; XLA's CPU triangular solve was ~3-8x slower here) -- or,
        # when x is exactly the last asked population, the z's that produced it.
        def solve():
            y = (x - self._mean[None, :]) / self.sigma
            y = tf.where(tf.reduce_all(tf.math.is_finite(y), axis=1, keepdims=True), y, tf.zeros_like(y))
            return self._inv_sqrt(y)

        if not self._use_zcache():
            return (solve(),)
        same = _all_equal(x, self._x_last)  # (TfevoAllEqual: one inline pass)
        return (tf.cond(same, lambda: tf.identity(self._z_last), solve),)

    def _whiten(self, y, y_w, order, extra):
        z = tf.gather(extra[0], order)  # non-finite rows were zeroed in _pre_core (and in y)
        z_w = tf.linalg.matvec(z[: self.mu], self.weights[: self.mu], transpose_a=True)  # sum_i w_i z_i
        sq = tf.reduce_sum(tf.square(z[self.mu :]), axis=1) if self.active else None
        return z_w, sq

    # -- covariance update -------------------------------------------------------------
    def _update_cov(self, decay, p_c, y, w_eff, ok):
        # In the XLA core: the rank-(P+1) rows and weights, and diag(C) after the
        # update (O(P D)); the rows go to the buffer (or into C) in _apply_cov.
        dt = self.dtype
        ys = tf.concat([y, p_c[None, :]], axis=0)
        v = tf.concat([self.cmu * w_eff, tf.constant([self.c1], dt)], axis=0)
        decay = tf.cast(decay, dt)
        old = self.c_diag
        cdiag = decay * old + tf.reduce_sum(v[:, None] * tf.square(ys), axis=0)
        ok = ok & tf.reduce_all(tf.math.is_finite(cdiag)) & tf.reduce_all(tf.math.is_finite(v))
        cdiag = tf.where(ok, cdiag, old)
        self.c_diag.assign(cdiag)
        if self._buf_gens == 1:
            return ys, v, decay, ok, cdiag
        # Buffered: C_t = S_t (C_0 + sum_j U_j / S_j), S_t = product of the decays since the
        # last flush: this generation's rows (zero if not ok) go to slot g mod gap with the
        # weights v_j / S_j -- computed here, in XLA; _apply_cov only writes them.
        k = self.popsize + 1
        slot = tf.math.floormod(self.generation - self.restart_generation, self._buf_gens)  # gen not yet counted
        idx = tf.cast(slot, tf.int32) * k + tf.range(k)
        s_new = tf.where(ok, self._cscale * decay, self._cscale)
        rows = tf.where(ok, ys, tf.zeros_like(ys))
        w = tf.where(ok, v / s_new, tf.zeros_like(v))
        return idx, rows, w, s_new, cdiag

    def _commit_c(self, c_new, ok=True):
        # syrk_update returns an all-NaN matrix when any entry is not finite: one entry tells
        # (a [D, D] is_finite + reduction cost ~0.5 ms per update at D = 1000)
        ok = ok & tf.math.is_finite(c_new[0, 0])

        def commit():
            self.C.assign(c_new)
            return tf.constant(0)

        tf.cond(ok, commit, lambda: tf.constant(0))

    def _apply_cov(self, *out):
        if self._buf_gens == 1:
            ys, v, decay, ok = out
            if self._refresh_every_generation():
                # update and refactorisation in one in-place call; not ok: the identity update
                self._refresh(tf.where(ok, ys, tf.zeros_like(ys)), tf.where(ok, v, tf.zeros_like(v)),
                              tf.where(ok, decay, tf.ones_like(decay)))
                return
            # lower triangle of decay C + ys^T diag(v) ys (BLAS ?syrk via tfevo.linalg)
            self._commit_c(_syrk_update(self.C, ys, v, decay), ok)
            return
        idx, rows, w, s_new = out  # (see _update_cov)
        self._ybuf.scatter_update(tf.IndexedSlices(rows, idx))
        self._vbuf.scatter_update(tf.IndexedSlices(w, idx))
        self._cscale.assign(s_new)

    def _flush_refresh(self):
        """``C <- S (C + sum rows^T diag(weights) rows)`` over the buffer (which is then emptied),
        then ``A = chol(C)``: one in-place call (see :meth:`_refresh`)."""
        k = self._buf_gens * (self.popsize + 1)
        self._refresh(self._ybuf[:k], self._vbuf[:k] * self._cscale, self._cscale)
        self._vbuf.assign(tf.zeros_like(self._vbuf))
        self._cscale.assign(tf.ones_like(self._cscale))
        self.c_diag.assign(tf.linalg.diag_part(self.C))
        return tf.constant(0)

    def _refresh_every_generation(self):
        """Gap 1 with the in-place op: _apply_cov updates and refactorises in one call."""
        return self.lazy_gap == 1 and self._aux.d["scratch"] is not None

    def _post_tell(self):
        local_g = self.generation - self.restart_generation
        need = tf.math.floormod(local_g, self.lazy_gap) == 0
        if self._buf_gens > 1:  # (then _buf_gens == lazy_gap: flush and refactorise together)
            return tf.cond(need, self._flush_refresh, lambda: tf.constant(0))
        if self._refresh_every_generation():  # (done in _apply_cov)
            return tf.constant(0)
        return tf.cond(need, self._refresh_op, lambda: tf.constant(0))

    def _refresh(self, rows=None, weights=None, scale=1.0):
        """(With ``rows``: ``C <- lower(scale C + rows^T diag(weights) rows)`` if finite, then)
        ``A = chol(C)``; on failure retried with growing diagonal loading; kept if all fail
        (:func:`tfevo.linalg.covariance_refresh`: in place on the variables with the op);
        ``a_diag`` follows ``A``."""
        _covariance_refresh(self.C, self.A, self._aux.d["scratch"], rows, weights, scale)
        self.a_diag.assign(tf.linalg.diag_part(self.A))

    # -- stop-criteria helpers ------------------------------------------------------------
    def _cov_diag(self):
        return self.c_diag

    def _axis_scales(self):
        # max = sqrt(max C_ii) <= sqrt(lambda_max); min = min A_ii >= sqrt(lambda_min):
        # (max/min)^2 is a lower bound of cond(C) (see the class docstring).
        return tf.concat([tf.sqrt(tf.maximum(self.c_diag, 0.0)), tf.abs(self.a_diag)], 0)

    def _no_effect_axis(self, g):
        i = tf.cast(tf.math.floormod(g, self.num_dims), tf.int32)
        shift = 0.1 * self.sigma * tf.gather(self.A, i, axis=1)
        return tf.reduce_all(tf.equal(self._mean, self._mean + shift))

    def _axis_vector(self, i):
        return tf.gather(self.A, i, axis=1)


    # -- on-request diagnostics (eager, not on the hot path) ---------------------------------
    def covariance(self) -> tf.Tensor:
        """The current covariance matrix ``C`` (including the buffered updates), symmetrised."""
        c = self.C
        if self._buf_gens > 1:
            k = self._buf_gens * (self.popsize + 1)
            rows, v = self._ybuf[:k], self._vbuf[:k] * self._cscale
            c = self._cscale * c + tf.matmul(rows * v[:, None], rows, transpose_a=True)
        lower = tf.linalg.band_part(c, -1, 0)
        return lower + tf.transpose(lower) - tf.linalg.diag(tf.linalg.diag_part(c))

    def eigenvalues(self) -> tf.Tensor:
        """Eigenvalues of the current ``C`` (ascending), computed on request (O(n^3))."""
        return _eigh(self.covariance())[0]

    def axis_ratio(self) -> float:
        """``sqrt(lambda_max / lambda_min)`` of the current ``C`` (on request)."""
        e = self.eigenvalues().numpy()
        return float(np.sqrt(e[-1] / max(e[0], np.finfo(e.dtype).tiny)))
