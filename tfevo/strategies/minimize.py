"""``fmin``: minimize a function with a CMA-family strategy in one call, as ``cma.fmin2`` does.

The loop a pycma user writes with ``es.optimize(f)`` or ``cma.fmin2`` (ask,
evaluate, tell until a stop criterion, a target value or the evaluation budget)
as one function.  The objective is *minimized*, takes float64 vectors and
returns a float; with ``parallel_objective`` it takes the whole population
``[P, D]`` at once and returns ``[P]`` values (a vectorized NumPy or TensorFlow
function is much faster this way).  Non-finite values and ``None`` count as the worst.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from tfevo.core import Algorithm, ConfigError, ShapeError

__all__ = ["fmin", "FminResult"]

_STRATEGIES = ("cma_es", "sep_cma_es", "cholesky_cma_es", "lm_ma_es")
_RESTARTS = (None, "ipop", "bipop")


@dataclass
class FminResult:
    """What :func:`fmin` found (pycma's ``es.result`` fields under plain names).

    Attributes:
      x: the best point evaluated, ``[D]`` float64 (``xbest``).
      f: its objective value (``fbest``).
      evaluations: objective evaluations made (``evaluations``).
      evals_best: the evaluation count at which ``x`` was found (``evals_best``).
      iterations: generations over all runs (``iterations``).
      restarts: restarts made (0 without ``restarts``).
      stop: why the run ended, ``{criterion: value}`` as pycma's ``es.stop()``:
        the strategy's own criteria (``tolfun``, ``tolx``, ...), ``ftarget``,
        ``maxfevals`` or ``maxiter``.
      es: the strategy object (its state, ``mean``, ``sigma``, checkpointable).
      xfavorite: the final mean of the last run, in the bounds (``es.repair(es.mean)``;
        pycma's ``xfavorite``).
      stds: the last run's standard deviation per coordinate, ``sigma sqrt(diag C)``
        (pycma's ``stds``).
    """

    x: np.ndarray
    f: float
    evaluations: int
    evals_best: int
    iterations: int
    restarts: int
    stop: dict = field(default_factory=dict)
    es: Any = None
    xfavorite: Any = None
    stds: Any = None


def _check_x0(x0) -> np.ndarray:
    try:
        x = np.array(x0, dtype=np.float64)
    except (TypeError, ValueError):
        raise ConfigError(f"x0 must be a vector of numbers, got {x0!r}") from None
    if x.ndim != 1 or x.size < 1:
        raise ShapeError(f"x0 must be a non-empty 1-D vector, got shape {list(x.shape)}")
    if not np.all(np.isfinite(x)):
        raise ConfigError(f"x0 must be finite, got {x.tolist()}")
    return x


def _positive(name, value, integer=False, allow_none=True):
    if value is None and allow_none:
        return None
    ok = isinstance(value, numbers.Integral if integer else numbers.Real) and not isinstance(value, bool)
    if not ok or not math.isfinite(float(value)) or value <= 0:
        kind = "a positive integer" if integer else "a positive finite number"
        raise ConfigError(f"{name} must be {kind}{' or None' if allow_none else ''}, got {value!r}")
    return int(value) if integer else float(value)


def _build(strategy, restarts, num_dims, x0, sigma0, popsize, bounds, seed, dtype, max_restarts, options):
    from tfevo import registry
    from tfevo.strategies.restarts import BIPOP, IPOP

    if isinstance(strategy, str):
        if strategy not in _STRATEGIES:
            raise ConfigError(f"strategy must be one of {', '.join(_STRATEGIES)} or an Algorithm class, "
                              f"got {strategy!r}")
        cls = registry.get("strategy", strategy)
    elif isinstance(strategy, type) and issubclass(strategy, Algorithm):
        cls = strategy
    else:
        raise ConfigError(f"strategy must be one of {', '.join(_STRATEGIES)} or an Algorithm class, "
                          f"got {strategy!r}")
    if restarts not in _RESTARTS:
        raise ConfigError(f"restarts must be None, 'ipop' or 'bipop', got {restarts!r}")
    kw = dict(sigma=sigma0, init_params=x0, seed=seed, bounds=bounds, dtype=dtype, **options)
    if popsize is not None:
        kw["popsize"] = popsize
    if restarts is None:
        return cls(num_dims, **kw)
    wrapper = IPOP if restarts == "ipop" else BIPOP
    return wrapper(num_dims, strategy=cls, max_restarts=max_restarts, **kw)


def _values(raw, popsize, what):
    try:
        f = np.asarray(raw, dtype=np.float64)
    except (TypeError, ValueError):
        raise ConfigError(f"{what} must return numbers (NaN for a failed evaluation), got {raw!r}"[:300]) from None
    if f.shape != (popsize,):
        raise ShapeError(f"{what} must return {popsize} values (one per solution), got shape {list(f.shape)}")
    return f


def fmin(objective: Callable | None, x0, sigma0: float, *, parallel_objective: Callable | None = None,
         strategy="cma_es", restarts: str | None = None, max_restarts: int = 9, popsize: int | None = None,
         ftarget: float | None = None, max_evals: int | None = None, max_iter: int | None = None,
         bounds=None, seed: int = 0, dtype="float64", callback: Callable | None = None,
         eval_final_mean: bool = True, **options) -> FminResult:
    """Minimizes ``objective`` from ``x0`` with initial step size ``sigma0``.

    Args:
      objective: ``f(x) -> float`` for one solution ``x [D]`` (float64 NumPy);
        ``None`` when ``parallel_objective`` is given.
      x0, sigma0: start point ``[D]`` and initial step size (pycma's ``x0``, ``sigma0``).
      parallel_objective: ``f(X) -> [P]`` for the whole population ``X [P, D]``
        (pycma's ``parallel_objective``).
      strategy: ``"cma_es"`` (default), ``"sep_cma_es"``, ``"cholesky_cma_es"``,
        ``"lm_ma_es"`` or an :class:`~tfevo.core.Algorithm` class taking
        ``sigma`` and ``init_params``.
      restarts: ``None``, ``"ipop"`` or ``"bipop"`` (pycma's ``restarts=9,
        bipop=True`` is ``restarts="bipop", max_restarts=9``); with restarts,
        a new run starts from ``x0`` again.
      popsize: lambda (default: the strategy's, ``4 + floor(3 ln D)``).
      ftarget: stop once a value ``<= ftarget`` is found.
      max_evals: evaluation budget (pycma's ``maxfevals``); the last
        generation is completed, so up to ``popsize - 1`` more may be made.
      max_iter: generation limit of a run without restarts (default pycma's
        ``100 + 150 (D + 3)^2 / sqrt(popsize)``; with restarts each run has it).
      bounds, seed, dtype: as the strategy's (float64 by default).
      callback: ``callback(es)`` after every generation; returning ``True`` stops.
      eval_final_mean: evaluate the mean of every run once when it ends (pycma's
        ``eval_final_mean``, default ``True``): one more evaluation per run, counted in
        ``evaluations`` (and in BIPOP's regime budgets); the mean is often better than
        every sample. A mean that reaches ``ftarget`` stops ``fmin`` (``cma.fmin`` only
        stops on a target its samples reach).
      **options: further strategy arguments (``tolfun``, ``tolx``, ``active``, ...).

    Returns:
      :class:`FminResult`.
    """
    if (objective is None) == (parallel_objective is None):
        raise ConfigError("give exactly one of objective (one solution -> float) and "
                          "parallel_objective (population [P, D] -> [P] values)")
    fn = objective if objective is not None else parallel_objective
    if not callable(fn):
        raise ConfigError(f"the objective must be callable, got {fn!r}")
    if callback is not None and not callable(callback):
        raise ConfigError(f"callback must be callable or None, got {callback!r}")
    x0 = _check_x0(x0)
    sigma0 = _positive("sigma0", sigma0, allow_none=False)
    popsize = _positive("popsize", popsize, integer=True)
    max_evals = _positive("max_evals", max_evals, integer=True)
    max_iter = _positive("max_iter", max_iter, integer=True)
    if not isinstance(max_restarts, numbers.Integral) or isinstance(max_restarts, bool) or max_restarts < 0:
        raise ConfigError(f"max_restarts must be an integer >= 0, got {max_restarts!r}")
    if ftarget is not None and (not isinstance(ftarget, numbers.Real) or math.isnan(ftarget)):
        raise ConfigError(f"ftarget must be a number or None, got {ftarget!r}")

    es = _build(strategy, restarts, x0.size, x0, sigma0, popsize, bounds, seed, dtype, max_restarts, options)
    if restarts is None:
        limit = max_iter if max_iter is not None else int(100 + 150 * (x0.size + 3) ** 2 / math.sqrt(es.popsize))
    else:
        limit = None
        if max_iter is not None:
            es.max_generations = max_iter
            es.run_max_generations.assign(max_iter)

    best_x, best_f, evals, evals_best, iterations = x0.copy(), math.inf, 0, 0, 0
    stop: dict = {}

    def evaluate_mean(m):
        """One evaluation of a run's final mean; returns the fitness tell would get (maximized)."""
        nonlocal best_x, best_f, evals, evals_best
        if parallel_objective is not None:
            v = float(_values(np.reshape(parallel_objective(m[None, :]), [-1]), 1, "parallel_objective")[0])
        else:
            v = float(_values([objective(m.copy())], 1, "objective")[0])
        evals += 1
        if math.isfinite(v) and v < best_f:
            best_x, best_f, evals_best = m.copy(), v, evals
        return -v if math.isfinite(v) else -math.inf

    if eval_final_mean and restarts is not None:
        es.evaluate_final_mean = evaluate_mean
    while not stop:
        x = es.ask()
        xs = np.array(x.numpy(), dtype=np.float64)  # a copy the objective may keep or change
        p = xs.shape[0]  # (a restart changes the population size)
        if parallel_objective is not None:
            f = _values(parallel_objective(xs), p, "parallel_objective")
        else:
            f = _values([objective(row) for row in xs], p, "objective")
        es.tell(x, -f)  # tell maximizes; non-finite values are the worst there
        evals += p
        iterations += 1
        finite = np.where(np.isfinite(f), f, np.inf)
        i = int(np.argmin(finite))
        if finite[i] < best_f:
            best_x, best_f, evals_best = xs[i].copy(), float(finite[i]), evals - p + i + 1
        if ftarget is not None and best_f <= ftarget:
            stop["ftarget"] = ftarget
        if max_evals is not None and evals >= max_evals:
            stop["maxfevals"] = max_evals
        if restarts is None:
            if iterations >= limit:
                stop["maxiter"] = limit
        elif int(es.restarts.numpy()) >= es.max_restarts and int(es.run_generations.numpy()) >= int(
                es.run_max_generations.numpy()):
            stop["maxiter"] = int(es.run_max_generations.numpy())  # the last run's limit, no restart left
        for reason in es.stop_reasons:
            stop[reason] = True
        if callback is not None and callback(es) is True:
            stop["callback"] = True
    if eval_final_mean:  # the last run's mean, as cma.fmin after every run (repaired into the bounds)
        inner = es.inner if restarts is not None else es
        m = inner.mean if not hasattr(inner, "repair") else inner.repair(inner.mean)
        evaluate_mean(np.asarray(m.numpy(), np.float64))
    if restarts is not None:
        es.evaluate_final_mean = None  # (the objective is not kept beyond this call)
    xfavorite, stds = _favorite_and_stds(es.inner if restarts is not None else es)
    return FminResult(x=best_x, f=best_f, evaluations=evals, evals_best=evals_best, iterations=iterations,
                      restarts=0 if restarts is None else int(es.restarts.numpy()), stop=stop, es=es,
                      xfavorite=xfavorite, stds=stds)


def _favorite_and_stds(es):
    """``(repaired mean, sigma sqrt(diag C))`` as float64 NumPy (``None`` for a strategy without them)."""
    mean = getattr(es, "mean", None)
    if mean is None:
        return None, None
    m = es.repair(mean) if hasattr(es, "repair") else mean
    model = getattr(es, "_model", None)
    stds = None
    if model is not None and hasattr(es, "sigma"):
        stds = np.asarray((es.sigma * np.sqrt(model.cov_diag())).numpy(), np.float64)
    return np.asarray(np.asarray(m), np.float64), stds
