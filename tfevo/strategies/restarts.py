"""IPOP and BIPOP restart wrappers for CMA-ES (Auger & Hansen 2005; Hansen 2009).

Contract (chosen over "preallocate the largest population and mask"): the
population size **changes at a restart**.  ``ask()`` returns ``[popsize, D]``
where :attr:`popsize` is the size of the *current* run; after a ``tell`` that
triggered a restart, ``popsize`` (and the next ``ask`` shape) is the new size.
Each distinct population size is traced once (``traces`` counts them) and its
compiled functions are cached, so BIPOP's alternation between small and large
runs never retraces.  Masking a preallocated maximum population would make every
generation of the early, small runs pay for the largest population (up to 512x
for IPOP's default 9 restarts); a changing shape costs one trace per size.

Restarts happen when any termination criterion of the inner strategy fires
(``tolfun``, ``tolx``, ``conditioncov``, ``noeffectaxis``, ``noeffectcoord``,
``stagnation``, ``tolupsigma``, ``tolflatfitness``, ``tolfacupx``, ``tolfunhist``,
``tolxstagnation``; see
:attr:`CMAES.stop_reasons`) or when a run reaches its iteration limit
(``maxiter`` in :attr:`history`: pycma's default ``100 + 150 (n + 3)^2 /
sqrt(lambda_0)`` generations, ``lambda_0`` the first run's popsize before ``int()``,
``4 + 3 ln n`` unfloored by default; BIPOP's
small runs have a tighter one).  A restart draws
a new mean uniformly in ``init_range`` (if given; else reuses ``init_params``) and
resets sigma, C and the paths; the best-so-far is kept.

Randomness: the inner strategy samples from its own :class:`~tfevo.core.SeedStream`
(``seed``: the first run is that of ``CMAES(..., seed=seed)`` from the same start
point).  The wrapper draws every start point (the first one included, when
``init_range`` is given) and BIPOP's regime uniforms from a second stream of the same
seed whose keys are ``[-1 - seed, counter]`` (:class:`RestartSeedStream`).  Every
``SeedStream`` key has a first word in ``[0, 2**31)``, so the two streams never share
a key: the start points are independent of the samples of every run.

Checkpointing: the whole state (inner strategy, restart counters, regime
budgets, current popsize) is in ``tf.Variable``s; after
``tf.train.Checkpoint.restore`` the wrapper re-selects the restored popsize on
the next ``ask``/``tell``.
"""

from __future__ import annotations

import math

import numpy as np
import tensorflow as tf

from tfevo._holder import Untracked
from tfevo.core import Algorithm, ConfigError, SeedStream, _argument_error, check_fitness
from tfevo.registry import register
from tfevo.strategies.cma_es import CMAES, cma_default_popsize

__all__ = ["IPOP", "BIPOP"]


class RestartSeedStream(SeedStream):
    """The restart wrappers' stream: ``next()`` returns ``[-1 - seed, counter]``.

    A :class:`~tfevo.core.SeedStream` of the same seed returns ``[seed, counter]``
    with ``seed`` in ``[0, 2**31)``: the first words differ in sign, so no key of
    this stream is a key of any ``SeedStream`` (of this seed or another one).
    Stateless random ops hash their key, so the two streams are independent.
    """

    def _key(self, c) -> tf.Tensor:
        return SeedStream.mix(tf.bitwise.invert(tf.cast(self.seed, tf.int32)), c)  # -1 - seed: negative


class _Restarts(Algorithm):
    """Common machinery: holds an inner CMA-ES and restarts it."""

    _kwargs_forwarded_to = CMAES  # (for the argument check: **strategy_kwargs go to the inner strategy)

    def __init__(self, num_dims, popsize=None, sigma=1.0, init_params=None, seed=0, bounds=None,
                 init_range=None, max_restarts=9, inc_popsize=2, strategy=CMAES, name=None, dtype="float64",
                 **strategy_kwargs):
        inner_accepts = getattr(strategy, "accepted_arguments", None)
        unknown = [k for k in strategy_kwargs if inner_accepts is not None and k not in inner_accepts()]
        if unknown:  # checked here so that the error names the wrapper the user built
            raise _argument_error(type(self), f"unknown argument(s) {', '.join(map(repr, unknown))}", unknown)
        # pycma's popsize option before int(): 4 + 3 ln n (unfloored) by default. cma.fmin
        # multiplies this value at each restart and floors the product (10.9, 21.8, 43.6 -> 10,
        # 21, 43 at n = 10), and evaluates maxiter and tolstagnation with it once for all runs.
        popsize0 = float(popsize) if popsize is not None else 4.0 + 3.0 * math.log(int(num_dims))
        base = int(popsize) if popsize is not None else cma_default_popsize(int(num_dims))
        super().__init__(num_dims, base, seed=seed, name=name, dtype=dtype)
        self.seeds = RestartSeedStream(seed)  # start points and BIPOP's draws; the inner strategy has its own
        if int(max_restarts) < 0:
            raise ConfigError(f"max_restarts must be >= 0, got {max_restarts}")
        if inc_popsize <= 1:
            raise ConfigError(f"inc_popsize must be > 1, got {inc_popsize}")
        self.base_popsize = base
        self.popsize0 = popsize0
        self.max_restarts = int(max_restarts)
        self.inc_popsize = float(inc_popsize)
        self.sigma_init = float(sigma)
        self.init_range = None
        if init_range is not None:
            lo, hi = init_range
            lo = np.broadcast_to(np.asarray(lo, np.float64), [self.num_dims]).copy()
            hi = np.broadcast_to(np.asarray(hi, np.float64), [self.num_dims]).copy()
            if np.any(lo >= hi):
                raise ConfigError("init_range must satisfy lower < upper")
            self.init_range = (lo, hi)
        if init_params is None and self.init_range is not None:
            init_params = self._draw_mean()  # the first draw of the wrapper's stream
        self.inner = strategy(num_dims, popsize=base, sigma=sigma, init_params=init_params, seed=seed,
                              bounds=bounds, dtype=dtype, **strategy_kwargs)
        self.inner._nonfinite_warned = True  # the wrapper warns about non-finite fitness, under its own name
        # cma.fmin's tolstagnation is evaluated with the first run's popsize and kept for every run
        self.inner.stagnation_popsize = popsize0
        self.inner.stagnation_popsize_fixed = True
        self.inner._configure(self.inner.popsize)
        self.restarts = tf.Variable(0, dtype=tf.int64, trainable=False, name="restarts")
        self.current_popsize = tf.Variable(base, dtype=tf.int64, trainable=False, name="current_popsize")
        self.evaluations = tf.Variable(0, dtype=tf.int64, trainable=False, name="evaluations")
        # pycma's default iteration limit of a run, ``100 + 150 (n + 3)^2 // sqrt(lambda)`` with the
        # first run's (unfloored) lambda (fmin keeps that value for every restart)
        self.max_generations = int(100 + 150 * (self.num_dims + 3) ** 2 // math.sqrt(popsize0))
        self.run_generations = tf.Variable(0, dtype=tf.int64, trainable=False, name="run_generations")
        self.run_max_generations = tf.Variable(self.max_generations, dtype=tf.int64, trainable=False,
                                               name="run_max_generations")
        self.last_stop_reasons: list[str] = []
        self._log = Untracked(history=[])
        #: ``None`` or ``f(mean) -> fitness`` (higher is better) for a ``[D]`` float64 NumPy mean:
        #: when set, the mean of every run that ends is evaluated once before the restart, as
        #: ``cma.fmin`` does (``eval_final_mean``); the evaluation counts in :attr:`evaluations`
        #: and in BIPOP's regime budgets, and may become :attr:`best`. ``minimize.fmin`` sets it.
        self.evaluate_final_mean = None

    @classmethod
    def accepted_arguments(cls, resolved_only: bool = False):
        """The wrapper's arguments and, forwarded through ``**strategy_kwargs``, the
        inner strategy's (``CMAES``'s for a listing; with ``resolved_only``, ``None``:
        the inner strategy, chosen at run time, checks its own arguments)."""
        if resolved_only:
            return None
        names = Algorithm.accepted_arguments.__func__(cls)
        return names + [n for n in CMAES.accepted_arguments() if n not in names]

    # -- public ---------------------------------------------------------------
    @property
    def history(self) -> list:
        """``(restart number, new popsize, stop reasons)`` of the restarts made
        by this Python object (not checkpointed; counters are)."""
        return self._log.history

    @property
    def traces(self):
        """Trace counts of the inner strategy (one per distinct popsize)."""
        return self.inner.traces

    @property
    def mean(self):
        """Mean of the current run (``[D]`` in :attr:`dtype`)."""
        return self.inner.mean

    @property
    def sigma(self):
        """Step size of the current run (a variable of the inner strategy)."""
        return self.inner.sigma

    @property
    def best(self):
        """(best parameters, best fitness) over all runs."""
        return self.inner.best_params, self.inner.best_fitness

    @property
    def stop_reasons(self) -> list[str]:
        """The inner run's termination criteria once no restart is left (the run is over), else none."""
        return [] if self._can_restart() else self.inner.stop_reasons

    @property
    def num_nonfinite(self) -> int:
        """Members with non-finite fitness over all runs (see :class:`~tfevo.core.Algorithm`)."""
        return self.inner.num_nonfinite

    def _sync(self):
        p = int(self.current_popsize.numpy())
        if p != self.inner.popsize:
            self.inner._configure(p)
        self.popsize = p

    def ask(self) -> tf.Tensor:
        """Population of the current run: ``[popsize, D]`` in :attr:`dtype`."""
        self._sync()
        return self.inner.ask()

    def tell(self, x, fitness) -> None:
        """Tells the current run; restarts it (changing ``popsize``) on a stop criterion."""
        self._sync()
        fitness = check_fitness(fitness, self.popsize, dtype=self.dtype)
        self._note_nonfinite(fitness)
        self.inner.tell(x, fitness)
        self.generation.assign_add(1)
        self.evaluations.assign_add(self.popsize)
        self._account(self.popsize)
        self.run_generations.assign_add(1)
        out_of_iterations = int(self.run_generations.numpy()) >= int(self.run_max_generations.numpy())
        if (int(self.inner.stop_flags.numpy()) != 0 or out_of_iterations) and self._can_restart():
            self.last_stop_reasons = self.inner.stop_reasons + (["maxiter"] if out_of_iterations else [])
            self._final_mean()
            self._restart()

    # -- restart machinery ------------------------------------------------------
    def _final_mean(self):
        """``cma.fmin``'s evaluation of the ended run's mean (see :attr:`evaluate_final_mean`)."""
        if self.evaluate_final_mean is None:
            return
        # (the point of the box the mean stands for: pycma repairs it into the bounds before evaluating it)
        m = np.asarray(self.inner.repair(self.inner.mean).numpy(), np.float64)
        f = float(self.evaluate_final_mean(m.copy()))
        self.evaluations.assign_add(1)
        self._account(1)  # (to the regime of the run that ended, before the next one is chosen)
        inner = self.inner
        if np.isfinite(f) and f > float(inner.best_fitness.numpy()):
            inner.best_fitness.assign(tf.cast(f, inner.dtype))
            inner.best_params.assign(tf.cast(m, inner.dtype))

    def _account(self, n):
        pass

    def _can_restart(self):
        return int(self.restarts.numpy()) < self.max_restarts

    def _draw_mean(self):
        """A start point uniform in ``init_range`` (float64 NumPy ``[D]``), from the wrapper's stream."""
        lo, hi = self.init_range
        u = tf.random.stateless_uniform([self.num_dims], seed=self.seeds.next(), dtype=tf.float64).numpy()
        return lo + u * (hi - lo)

    def _new_mean(self):
        if self.init_range is None:
            return self.inner.init_params
        return self._draw_mean()

    def _restart_with(self, popsize, sigma, max_generations=None):
        self.restarts.assign_add(1)
        self.current_popsize.assign(int(popsize))
        self.run_generations.assign(0)
        self.run_max_generations.assign(self.max_generations if max_generations is None else int(max_generations))
        self._log.history.append((int(self.restarts.numpy()), int(popsize), list(self.last_stop_reasons)))
        self._sync()
        self.inner.reset(mean=self._new_mean(), sigma=sigma)


@register("strategy", "ipop_cma_es")
class IPOP(_Restarts):
    """IPOP-CMA-ES: restart with the population size multiplied by ``inc_popsize``.

    Args:
      num_dims, popsize, sigma, init_params, seed, bounds, dtype: as
        :class:`~tfevo.strategies.CMAES` (``popsize`` is that of the first run;
        ``dtype`` default float64).
      init_range: optional ``(lower, upper)`` box; the first and every restart
        mean are drawn uniformly in it (recommended, as in the IPOP paper).
      max_restarts: at most this many restarts (default 9).
      inc_popsize: population growth factor per restart (default 2).
      strategy: the inner strategy class (``CMAES`` or ``SepCMAES``).
      **strategy_kwargs: passed on to the inner strategy (``active``, ``tolfun``, ``tolx``, ...).

    ``popsize`` changes at a restart (see the module docstring).

    Example:

    >>> import math
    >>> import tensorflow as tf
    >>> def rastrigin(x):
    ...     return 10 * x.shape[1] + tf.reduce_sum(x ** 2 - 10 * tf.cos(2 * math.pi * x), axis=1)
    >>> es = IPOP(10, sigma=2.0, init_range=(-5, 5), seed=0)
    >>> for _ in range(50):
    ...     x = es.ask()                      # shape [es.popsize, 10]
    ...     es.tell(x, -rastrigin(x))
    """

    def _restart(self):
        p = int(self.popsize0 * self.inc_popsize ** (int(self.restarts.numpy()) + 1))
        self._restart_with(p, self.sigma_init)


@register("strategy", "bipop_cma_es")
class BIPOP(_Restarts):
    """BIPOP-CMA-ES (Hansen 2009) with pycma's regime schedule (``cma.fmin(...,
    bipop=True)``): interleaves large-population IPOP runs with
    small-population runs of random size and small step size.

    * Budgets: the evaluations of the *first* run (default popsize) count to the
      small regime.  After each run, a small run follows while the small regime
      has used fewer evaluations than the large one (at least 1), else a large run.
    * Large runs: ``popsize = floor(popsize0 * inc_popsize**k)`` for the ``k``-th large run
      (``popsize0``: pycma's popsize option before ``int()``, ``4 + 3 ln n`` by default),
      ``sigma``.
    * Small runs: ``popsize = floor(popsize0 * (inc_popsize**k) ** (U1**2))`` with ``k``
      the number of large runs so far (the multiplier of the last large run),
      ``sigma * 0.01**U2``, with ``U1, U2 ~ U(0, 1)`` independent draws from the
      seed stream; a small run stops after at most ``0.5 * E_large / popsize``
      generations (``E_large``: the evaluations of all large runs so far), so that
      it never uses more than half the large regime's budget.

    Worked example (``n = 10``: ``popsize0 = 10.9``, ``inc_popsize = 2``): the first run uses 3000
    evaluations (small: 3000, large: 0) -> large run 1 with popsize 21, say 8000
    evaluations (small 3000 < large 8000) -> a small run with popsize
    ``floor(10.9 * 2**(U1**2))`` in 10..21 and at most ``0.5 * 8000 / popsize``
    generations -> while small < large, further small runs; then large run 2 with
    popsize 43.

    Args as :class:`IPOP`; ``max_restarts`` limits the number of large-population
    restarts (small runs are not counted).
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.evals_large = tf.Variable(0, dtype=tf.int64, trainable=False, name="evals_large")
        self.evals_small = tf.Variable(0, dtype=tf.int64, trainable=False, name="evals_small")
        self.n_large = tf.Variable(0, dtype=tf.int64, trainable=False, name="n_large")
        # the first run's evaluations count to the small regime (as pycma)
        self.regime_small = tf.Variable(True, trainable=False, name="regime_small")

    def _can_restart(self):
        # max_restarts bounds the large-population restarts (Hansen 2009); small
        # runs are interleaved without limit (their budget follows the large ones).
        return int(self.n_large.numpy()) < self.max_restarts

    def _account(self, n):
        if bool(self.regime_small.numpy()):
            self.evals_small.assign_add(n)
        else:
            self.evals_large.assign_add(n)

    def _next_is_small(self) -> bool:
        """The regime of the next run: small while it has used fewer evaluations than the large one."""
        return int(self.evals_small.numpy()) < max(1, int(self.evals_large.numpy()))

    def _uniform(self) -> float:
        return float(tf.random.stateless_uniform([], seed=self.seeds.next(), dtype=tf.float64).numpy())

    def _restart(self):
        if self._next_is_small():
            u_sigma, u_pop = self._uniform(), self._uniform()
            multiplier = self.inc_popsize ** int(self.n_large.numpy())  # that of the last large run
            p = max(2, int(math.floor(self.popsize0 * multiplier ** (u_pop * u_pop))))
            budget = 0.5 * int(self.evals_large.numpy()) / p
            self.regime_small.assign(True)
            self._restart_with(p, self.sigma_init * 0.01**u_sigma,
                               max_generations=max(1, min(self.max_generations, math.ceil(budget))))
        else:
            self.n_large.assign_add(1)
            p = int(self.popsize0 * self.inc_popsize ** int(self.n_large.numpy()))
            self.regime_small.assign(False)
            self._restart_with(p, self.sigma_init)
