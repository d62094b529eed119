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
``stagnation``, ``tolupsigma``; see :attr:`CMAES.stop_reasons`).  A restart draws
a new mean uniformly in ``init_range`` (if given; else reuses ``init_params``) and
resets sigma, C and the paths; the best-so-far is kept.

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
from tfevo.core import Algorithm, ConfigError, _argument_error, check_fitness
from tfevo.registry import register
from tfevo.strategies.cma_es import CMAES, cma_default_popsize

__all__ = ["IPOP", "BIPOP"]


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
        base = int(popsize) if popsize is not None else cma_default_popsize(int(num_dims))
        super().__init__(num_dims, base, seed=seed, name=name, dtype=dtype)
        if int(max_restarts) < 0:
            raise ConfigError(f"max_restarts must be >= 0, got {max_restarts}")
        if inc_popsize <= 1:
            raise ConfigError(f"inc_popsize must be > 1, got {inc_popsize}")
        self.base_popsize = base
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
            u = np.random.default_rng(int(seed)).random(self.num_dims)
            init_params = self.init_range[0] + u * (self.init_range[1] - self.init_range[0])
        self.inner = strategy(num_dims, popsize=base, sigma=sigma, init_params=init_params, seed=seed,
                              bounds=bounds, dtype=dtype, **strategy_kwargs)
        self.inner._nonfinite_warned = True  # the wrapper warns about non-finite fitness, under its own name
        self.restarts = tf.Variable(0, dtype=tf.int64, trainable=False, name="restarts")
        self.current_popsize = tf.Variable(base, dtype=tf.int64, trainable=False, name="current_popsize")
        self.evaluations = tf.Variable(0, dtype=tf.int64, trainable=False, name="evaluations")
        self.last_stop_reasons: list[str] = []
        self._log = Untracked(history=[])

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
        fitness = check_fitness(fitness, self.popsize)
        self._note_nonfinite(fitness)
        self.inner.tell(x, fitness)
        self.generation.assign_add(1)
        self.evaluations.assign_add(self.popsize)
        self._account(self.popsize)
        if int(self.inner.stop_flags.numpy()) != 0 and self._can_restart():
            self.last_stop_reasons = self.inner.stop_reasons
            self._restart()

    # -- restart machinery ------------------------------------------------------
    def _account(self, n):
        pass

    def _can_restart(self):
        return int(self.restarts.numpy()) < self.max_restarts

    def _new_mean(self):
        if self.init_range is None:
            return self.inner.init_params
        lo, hi = self.init_range
        u = tf.random.stateless_uniform([self.num_dims], seed=self.seeds.next(), dtype=tf.float64).numpy()
        return lo + u * (hi - lo)

    def _restart_with(self, popsize, sigma):
        self.restarts.assign_add(1)
        self.current_popsize.assign(int(popsize))
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
        p = int(round(self.base_popsize * self.inc_popsize ** (int(self.restarts.numpy()) + 1)))
        self._restart_with(p, self.sigma_init)


@register("strategy", "bipop_cma_es")
class BIPOP(_Restarts):
    """BIPOP-CMA-ES (Hansen 2009): interleaves large-population IPOP runs with
    small-population runs of random size and small step size.

    The first run uses the default popsize.  Afterwards, whichever regime has
    used fewer evaluations runs next: *large* runs use
    ``popsize = base * inc_popsize**i_large`` (``i_large`` counts large runs)
    and ``sigma``; *small* runs use
    ``popsize = floor(base * (lambda_large / (2 base)) ** (U**2))`` and
    ``sigma * 10 ** (-2 U)`` with ``U ~ U(0, 1)`` drawn from the seed
    stream.  Args as :class:`IPOP`; ``max_restarts`` limits the number of
    large-population restarts.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.evals_large = tf.Variable(0, dtype=tf.int64, trainable=False, name="evals_large")
        self.evals_small = tf.Variable(0, dtype=tf.int64, trainable=False, name="evals_small")
        self.n_large = tf.Variable(0, dtype=tf.int64, trainable=False, name="n_large")
        self.regime_small = tf.Variable(False, trainable=False, name="regime_small")

    def _can_restart(self):
        # max_restarts bounds the large-population restarts (Hansen 2009); small
        # runs are interleaved without limit (their budget follows the large ones).
        return int(self.n_large.numpy()) < self.max_restarts

    def _account(self, n):
        if bool(self.regime_small.numpy()):
            self.evals_small.assign_add(n)
        else:
            self.evals_large.assign_add(n)

    def _restart(self):
        lam_large = self.base_popsize * self.inc_popsize ** int(self.n_large.numpy())
        if int(self.restarts.numpy()) >= 1 and int(self.evals_small.numpy()) < int(self.evals_large.numpy()):
            u = float(tf.random.stateless_uniform([], seed=self.seeds.next(), dtype=tf.float64).numpy())
            p = int(math.floor(self.base_popsize * max(1.0, 0.5 * lam_large / self.base_popsize) ** (u * u)))
            sigma = self.sigma_init * 10.0 ** (-2.0 * u)
            self.regime_small.assign(True)
            self._restart_with(max(p, 2), sigma)
        else:
            self.n_large.assign_add(1)
            p = int(round(self.base_popsize * self.inc_popsize ** int(self.n_large.numpy())))
            self.regime_small.assign(False)
            self._restart_with(p, self.sigma_init)
