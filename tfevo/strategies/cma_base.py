"""One CMA-ES generation loop over a covariance model.

:class:`CMABase` holds the state every CMA variant shares (mean, step size,
paths, histories), computes the default parameters (Table 1 of Hansen's
tutorial, :mod:`tfevo.strategies.cma_updates`) and runs one generation of
Eq. (41)-(47) in ``tell``; how ``C`` is stored, sampled and updated is its
covariance model's business (:mod:`tfevo.strategies.cma_models`).

``tell`` is one call: for a model with a factorisation (``model.deferred``), a
graph whose numeric core (ranking, mean, paths, step size, stop criteria) is a
nested XLA cluster, with the model's graph-mode work before (``prepare``) and
after (``finish``: the ``[n, n]`` update and, on schedule, the factorisation,
through custom BLAS/LAPACK ops that beat XLA's CPU code); otherwise the whole
tell compiled by XLA.  ``ask`` runs as a plain graph (TensorFlow's CPU normal
generator is faster than XLA's).  Both are called through
:class:`tfevo.core.FastCall`, which skips ``tf.function``'s per-call argument
binding.
"""

from __future__ import annotations

import math

import numpy as np
import tensorflow as tf

from tfevo._holder import Untracked
from tfevo.core import Algorithm, ConfigError, FastCall, ShapeError, check_fitness, check_population, sanitize_fitness
from tfevo.strategies import cma_updates as eq
from tfevo.strategies.cma_bounds import box_constants, check_bounds, match_asked, reflect, unreflect
from tfevo.strategies.cma_stop import (NUM_COUNTERS, STOP_REASONS, stagnation_samples, stagnation_window,
                                       update_stop_flags)
from tfevo.strategies.shaping import _normal as _box_muller


class CMABase(Algorithm):
    """The CMA-ES loop shared by the CMA variants; ``_model_class`` chooses the covariance model.

    Fitness is maximised (higher is better); NaN/-inf count as worst.  ``tell``
    derives every update from the population it is given (``y = (x - m) / sigma``),
    so rows may be repaired or re-ordered by the caller; with ``bounds``, from the
    untransformed samples behind the asked rows (:meth:`_search_points`).
    """

    jit_compile = False  # the outer functions; the numeric cores are XLA-compiled
    _model_class = None  # a CovarianceModel subclass
    #: the stagnation window stays that of ``stagnation_popsize`` whatever the popsize (restart wrappers)
    stagnation_popsize_fixed = False

    def __init__(self, num_dims: int, popsize: int | None = None, sigma: float = 1.0, init_params=None,
                 seed: int = 0, bounds=None, active: bool = True, dtype="float64", tolfun: float = 1e-11,
                 tolx: float = 1e-11, name: str | None = None, eigen_gap: int | None = None):
        num_dims = int(num_dims)
        if num_dims < 1:
            raise ConfigError(f"num_dims must be >= 1, got {num_dims}")
        popsize_given = popsize is not None
        if popsize is None:
            popsize = eq.default_popsize(num_dims)
        if int(popsize) < 2:
            raise ConfigError(f"popsize must be >= 2 for CMA-ES, got {popsize}")
        super().__init__(num_dims, int(popsize), seed=seed, name=name, dtype=dtype)
        try:
            sigma_ok = bool(np.isfinite(sigma) and sigma > 0)
        except (TypeError, ValueError):  # (ValueError: an array of several values)
            sigma_ok = False
        if not sigma_ok:
            raise ConfigError(f"sigma must be a positive finite number (one step size; per-coordinate "
                              f"scales, pycma's CMA_stds, are not offered: scale the variables), got {sigma!r}")
        self.active = bool(active)
        self.sigma_init = float(sigma)  # the initial step size sigma_0 (restarts reuse it)
        self.tolfun = float(tolfun)
        self.tolx = float(tolx)
        if eigen_gap is not None and (int(eigen_gap) != eigen_gap or int(eigen_gap) < 1):
            raise ConfigError(f"eigen_gap must be a positive integer (generations) or None, got {eigen_gap}")
        self.eigen_gap = None if eigen_gap is None else int(eigen_gap)
        # the popsize in pycma's tolstagnation formula: its option value, 4 + 3 ln n unfloored
        # by default (the restart wrappers set the first run's for every run)
        self.stagnation_popsize = float(popsize) if popsize_given else 4.0 + 3.0 * math.log(num_dims)
        self.init_params = self._initial_mean(init_params)
        self.bounds = check_bounds(bounds, self.num_dims)
        n = num_dims
        dt = self.dtype
        self.chi_n = eq.expected_norm(n)
        # Histories long enough for the smallest sensible popsize: the bests of tolfun's window
        # (pycma's 10 + 30 n / lambda) and the sampled bests and medians of tolstagnation.
        lam_min = min(self.popsize, eq.default_popsize(n))
        self.hist_len = int(math.floor(10 + 30.0 * n / lam_min))
        self.stag_samples = stagnation_samples(stagnation_window(n, min(lam_min, self.stagnation_popsize)))
        # -- state --------------------------------------------------------
        self._mean = tf.Variable(tf.constant(self.init_params, dt), trainable=False, name="mean")
        self.sigma = tf.Variable(tf.constant(self.sigma_init, dt), trainable=False, name="sigma")
        # the step size this run started from (``reset`` may set another; tolupsigma/tolfacupx use it)
        self.run_sigma0 = tf.Variable(tf.constant(self.sigma_init, dt), trainable=False, name="run_sigma0")
        self.p_sigma = tf.Variable(tf.zeros([n], dt), trainable=False, name="p_sigma")
        self.p_c = tf.Variable(tf.zeros([n], dt), trainable=False, name="p_c")
        self._model = self._model_class(self)  # (its variables are attributes of self)
        self.best_f_hist = tf.Variable(tf.zeros([self.hist_len], dt), trainable=False, name="best_f_hist")
        self.stag_best_hist = tf.Variable(tf.zeros([self.stag_samples], dt), trainable=False, name="stag_best_hist")
        self.stag_median_hist = tf.Variable(tf.zeros([self.stag_samples], dt), trainable=False,
                                            name="stag_median_hist")
        # the run's best fitness (tolstagnation's age of the best) and the reference mean of tolxstagnation
        self.run_best_f = tf.Variable(tf.constant(-np.inf, dt), trainable=False, name="run_best_f")
        self.xstag_mean = tf.Variable(tf.constant(self.init_params, dt), trainable=False, name="xstag_mean")
        # int64 counters of the stop criteria (cma_stop.RUN_BEST_EVAL, XSTAG_SINCE, STAG_MEDIANS, FLAT_RUN)
        self.stop_counters = tf.Variable(tf.zeros([NUM_COUNTERS], tf.int64), trainable=False, name="stop_counters")
        self.stop_flags = tf.Variable(0, dtype=tf.int32, trainable=False, name="stop_flags")
        # consecutive generations whose checked axis had no effect (float32 noeffectaxis)
        self.no_effect_run = tf.Variable(0, dtype=tf.int32, trainable=False, name="no_effect_run")
        self.restart_generation = tf.Variable(0, dtype=tf.int64, trainable=False, name="restart_generation")
        self._init_best()
        self._search_points_fn = None  # tell's graph for bounds (traced once, any popsize)
        self._fn_cache = Untracked(fns={})  # popsize -> compiled functions (not checkpointed)
        self._configure(self.popsize)
        self._model.build()

    def _initial_mean(self, init_params):
        n = self.num_dims
        if init_params is None:
            return np.zeros([n])
        mean0 = np.asarray(init_params, dtype=np.float64)
        if mean0.ndim == 0:
            mean0 = np.full([n], float(mean0))
        if mean0.shape != (n,):
            raise ShapeError(f"init_params must have shape [{n}], got {list(mean0.shape)}")
        if not np.all(np.isfinite(mean0)):
            raise ConfigError("init_params must be finite")
        return mean0

    # ------------------------------------------------------------------
    # strategy parameters (Python constants per popsize)
    def _configure(self, popsize: int) -> None:
        """(Re)computes the popsize-dependent constants (Table 1) and selects the
        compiled functions for that popsize (traced once per popsize)."""
        if self._ask_fn is not None:
            self._fn_cache.fns[self.popsize] = (self._ask_fn, self._tell_fn, self._core_fn)
        self.popsize = int(popsize)
        self._ask_fn, self._tell_fn, self._core_fn = self._fn_cache.fns.get(self.popsize, (None, None, None))
        n, lam = self.num_dims, self.popsize
        mu = lam // 2
        wp = eq.raw_weights(lam)
        self.mu, self.mueff = mu, eq.effective_mass(wp[:mu])
        self.c_sigma, self.d_sigma = eq.step_size_rates(n, self.mueff)
        self.c_c = eq.path_rate(n, self.mueff)
        self.c1, self.cmu = self._model.learning_rates(n, self.mueff)
        self.weights_np = eq.recombination_weights(wp, mu, n, self.c1, self.cmu, self.active)
        self.weights = tf.constant(self.weights_np, self.dtype)
        self.lazy_gap = self.eigen_gap if self.eigen_gap is not None else eq.lazy_gap(n, self.c1, self.cmu)
        # tolfun / stagnation windows.
        # pycma's fitness history: at most 10 + 30 n / lambda entries (it pops while longer)
        self.tolfun_window = int(math.floor(10 + 30.0 * n / lam))
        self.stag_window = stagnation_window(n, self._stagnation_lambda(lam))
        self.stag_min_iter = n * (5.0 + 100.0 / lam)  # pycma: tolstagnation only after this many iterations
        self._model.configure()

    def _stagnation_lambda(self, lam: int) -> float:
        """The popsize pycma's ``tolstagnation`` is evaluated with: its unfloored option value
        while the population has the size it gives (for every size once the restart wrappers
        fixed it, as ``cma.fmin``), the population size otherwise."""
        sp = self.stagnation_popsize
        return sp if (self.stagnation_popsize_fixed or int(sp) == lam) else lam

    def __reduce_ex__(self, protocol):
        raise TypeError(
            f"{type(self).__name__} cannot be pickled or copied (pycma's es objects can): its state is "
            "TensorFlow variables and compiled functions. Save it with tf.train.Checkpoint(es=es).write(path) "
            "and restore it into a strategy built with the same arguments (bit for bit, also in a new process)")

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
        """Samples ``popsize`` members ``x = m + sigma * C^{1/2} z`` (Eq. 38-40): ``[P, D]`` in :attr:`dtype`."""
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
        fitness = check_fitness(fitness, self.popsize, dtype=self.dtype)
        self._note_nonfinite(fitness)
        if self.bounds is not None:
            x = self._search_points(x, fitness)
        if self._tell_fn is None:
            sig = [tf.TensorSpec([self.popsize, self.num_dims], self.dtype), tf.TensorSpec([self.popsize], self.dtype)]
            if self._model.deferred:
                core = tf.function(self._tell_core, jit_compile=True)

                def tell_body(x, fitness):
                    self._model.finish(core(x, fitness, *self._model.prepare(x)))
                    return tf.constant(0)

                self._core_fn = core
                self._tell_fn = tf.function(self._trace_counter.wrap("tell", tell_body), input_signature=sig)
            else:
                self._core_fn = None
                body, jit = self._whole_tell()
                self._tell_fn = tf.function(self._trace_counter.wrap("tell", body), input_signature=sig,
                                            jit_compile=jit)
        call = self._tell_call
        if call is None or call.fn is not self._tell_fn:
            call = self._tell_call = FastCall(self._tell_fn)
        call(x, fitness)

    def _whole_tell(self):
        """``(body, jit_compile)`` of the tell of a model without deferred work:
        by default ``_tell_core`` compiled whole by XLA."""
        return self._tell_core, True

    def reset(self, mean=None, sigma=None) -> None:
        """Resets the search distribution (mean, sigma, C = I, paths, histories).

        The seed stream, generation counter and best-so-far are kept.  Used by
        the restart wrappers; callable eagerly.
        """
        mean = self.init_params if mean is None else mean
        # (through float64 NumPy: tf.cast of a Python float would round it to float32 first)
        self._mean.assign(tf.cast(np.reshape(np.asarray(mean, np.float64), [self.num_dims]), self.dtype))
        self.sigma.assign(tf.cast(np.float64(self.sigma_init if sigma is None else sigma), self.dtype))
        self.run_sigma0.assign(self.sigma)
        self.p_sigma.assign(tf.zeros_like(self.p_sigma))
        self.p_c.assign(tf.zeros_like(self.p_c))
        self._model.reset()
        self.best_f_hist.assign(tf.zeros_like(self.best_f_hist))
        self.stag_best_hist.assign(tf.zeros_like(self.stag_best_hist))
        self.stag_median_hist.assign(tf.zeros_like(self.stag_median_hist))
        self.run_best_f.assign(tf.constant(-np.inf, self.dtype))
        self.xstag_mean.assign(self._mean)
        self.stop_counters.assign(tf.zeros_like(self.stop_counters))
        self.stop_flags.assign(0)
        self.no_effect_run.assign(0)
        self.restart_generation.assign(self.generation)

    # -- the covariance model's transforms, by their usual names ---------------------------
    def _sample_y(self, z):
        return self._model.sample(z)

    def _inv_sqrt(self, y):
        return self._model.whiten(y)

    def _refresh_op(self):
        self._model.refresh()
        return tf.constant(0)

    def _axis_scales(self):
        return self._model.axis_scales()

    # ------------------------------------------------------------------
    # compiled bodies
    def _normal(self, scale=None, seed=None):
        """Standard normal ``[P, D]`` (times ``scale`` ``[D]``) from the seed stream (Eq. 38).

        float32 uses the Box-Muller helper of :mod:`~tfevo.strategies.shaping`
        (faster on CPU than the stateless normal kernel); float64 uses
        ``tf.random.stateless_normal``.
        """
        shape = [self.popsize, self.num_dims]
        seed = self.seeds.next() if seed is None else seed
        if self.dtype == tf.float32:
            return _box_muller(shape, seed, scale)
        z = tf.random.stateless_normal(shape, seed=seed, dtype=self.dtype)
        return z if scale is None else z * scale

    def _reflect(self, x):
        """``x`` mapped into the box ``bounds`` (pycma's ``BoundTransform``, see
        :func:`~tfevo.strategies.cma_bounds.reflect`); ``x`` itself without bounds."""
        return x if self.bounds is None else reflect(x, box_constants(self.bounds, self.dtype))

    def _unreflect(self, x):
        """The point that :meth:`_reflect` maps to ``x`` (see :func:`~tfevo.strategies.cma_bounds.unreflect`)."""
        return unreflect(x, box_constants(self.bounds, self.dtype))

    def repair(self, x):
        """The point of the box ``bounds`` that a point ``x`` (``[D]`` or ``[P, D]``) of the
        search space stands for (pycma's ``BoundTransform``; ``x`` itself without bounds).  The
        search distribution lives on the whole space: :attr:`mean` may lie outside the box,
        ``repair(mean)`` is the point it represents (pycma's ``xfavorite`` with bounds)."""
        x = tf.cast(tf.convert_to_tensor(np.asarray(x, np.float64)), self.dtype)
        return self._reflect(x)

    def _sample(self, seed):
        """``(m + sigma C^{1/2} z, z)`` for the draws of ``seed`` (Eq. 38-40): the points of the
        search space, before ``bounds`` are applied."""
        z = self._normal(seed=seed)
        return self._mean[None, :] + self.sigma * self._model.sample(z), z

    def _search_points(self, x, fitness):
        """With ``bounds``: records the best of the evaluated rows ``x`` and returns the points of
        the search space the update learns from.  A row equal to a row of the last ``ask`` (in any
        position; the image of a sample, redrawn from the same seed) is replaced by that sample, so the
        update sees the Gaussian sample (pycma's ``BoundTransform``: evaluated in the box,
        learned untransformed).  Any other row (repaired or made by the caller) is learned from
        its preimage in ``[lo - a_lo, hi + a_hi]`` (as pycma's ``tell`` for solutions it did not
        ask), its step ``y`` limited to ``||C^{-1/2} y|| <= sqrt(n) + 2 n / (n + 2)``, Hansen's
        tutorial's rule for injected solutions."""
        if self._search_points_fn is None:
            self._search_points_fn = tf.function(self._search_points_body)
        return self._search_points_fn(x, fitness)

    def _search_points_body(self, x, fitness):
        n, dt = self.num_dims, self.dtype
        self._update_best(x, sanitize_fitness(fitness))
        g, _ = self._sample(self.seeds.last())  # the last ask's draw, redrawn
        source, asked = match_asked(x, self._reflect(g))
        g = tf.gather(g, source)
        m, sigma = self._mean[None, :], self.sigma
        x = self._unreflect(x)
        norms = tf.norm(self._model.whiten((x - m) / sigma), axis=1)
        limit = tf.constant(math.sqrt(n) + 2.0 * n / (n + 2.0), dt)
        long_step = norms > limit  # (False for a non-finite row: tell ranks it worst)
        shortened = m + (x - m) * (limit / tf.where(long_step, norms, tf.ones_like(norms)))[:, None]
        given = tf.where(long_step[:, None], shortened, x)
        return tf.where(asked[:, None], g, given)

    def _ask_body(self):
        g, z = self._sample(self.seeds.next())
        x = self._reflect(g)  # Eq. (39)-(40), mapped into the bounds
        self._model.remember(z, x)
        return x

    def _tell_core(self, x, fitness, *extra):
        """One generation, Eq. (41)-(47), in the XLA core; returns the model's pending work."""
        n, dt, mu, model = self.num_dims, self.dtype, self.mu, self._model
        fitness = sanitize_fitness(fitness)
        if self.bounds is None:  # (with bounds, tell recorded it from the evaluated rows)
            self._update_best(x, fitness)
        row_ok = tf.reduce_all(tf.math.is_finite(x), axis=1)
        fitness = tf.where(row_ok, fitness, -np.inf)
        any_finite = tf.reduce_any(tf.math.is_finite(fitness))
        order = tf.argsort(fitness, direction="DESCENDING", stable=True)
        f_sorted = tf.gather(fitness, order)
        m, sigma = self._mean, self.sigma
        y = (tf.gather(x, order) - m[None, :]) / sigma
        y = tf.where(tf.gather(row_ok, order)[:, None], y, tf.zeros_like(y))
        w = self.weights
        y_w = eq.weighted_step(y[:mu], w[:mu])  # Eq. (41)
        m_new = eq.move_mean(m, sigma, y_w)  # Eq. (42)
        z_w, sq_neg = model.whitened_steps(y, y_w, order, extra)
        p_sigma = eq.sigma_path(self.p_sigma, self.c_sigma, self.mueff, z_w)  # Eq. (43)
        ps_norm = tf.norm(p_sigma)
        h_sigma = eq.stall(ps_norm, self.c_sigma, self.generation - self.restart_generation + 1, n, self.chi_n, dt)
        p_c = eq.cov_path(self.p_c, self.c_c, h_sigma, self.mueff, y_w)  # Eq. (45)
        w_eff = eq.active_weights(w, mu, sq_neg, n, dt) if self.active else w  # Eq. (46)
        decay = eq.cov_decay(h_sigma, self.c_c, self.c1, self.cmu, float(self.weights_np.sum()))
        pending, cdiag = model.update(decay, p_c, y, w_eff, any_finite)  # Eq. (47)
        sigma_new = eq.step_size(sigma, ps_norm, self.c_sigma, self.d_sigma, self.chi_n)  # Eq. (44)
        keep = any_finite & tf.math.is_finite(sigma_new) & tf.reduce_all(tf.math.is_finite(m_new))
        self._mean.assign(tf.where(keep, m_new, m))
        self.p_sigma.assign(tf.where(keep, p_sigma, self.p_sigma))
        self.p_c.assign(tf.where(keep, p_c, self.p_c))
        self.sigma.assign(tf.where(keep, sigma_new, sigma))
        update_stop_flags(self, f_sorted, order, cdiag)
        self.generation.assign_add(1)
        return pending if pending else tf.constant(0)
