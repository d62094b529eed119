"""Symbolic-regression problems for tree GP (fitness = -MSE, higher is better).

:class:`SymbolicRegression` wraps any data set ``(x [N, F], y [N])``; the
benchmark factories build the classic ones:

* ``pagie1``: ``1/(1+x^-4) + 1/(1+y^-4)`` on ``[-5, 5]^2``.
* ``nguyen1`` .. ``nguyen12`` (Uy et al. 2011) and ``koza1`` .. ``koza3``.

Each is registered as a ``problem`` (``tfevo.registry.get("problem", "pagie1")``).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from tfevo.core import ConfigError, ShapeError
from tfevo.registry import register

__all__ = ["SymbolicRegression", "pagie1", "nguyen", "koza", "REGRESSION_BENCHMARKS"]


class SymbolicRegression:
    """Fitness of GP trees on a regression data set.

    Args:
      x: float ``[N, F]`` inputs.
      y: float ``[N]`` targets.
      functions: the function set a run should use (recommendation, also
        used to evaluate).
      x_test, y_test: optional held-out data (:meth:`test_mse`).
      use_op: the C++ evaluator (``None`` where allowed, ``True``, ``False``; :mod:`tfevo.kernels`).
      name: a label.

    ``evaluate(trees)`` returns ``-MSE`` per tree, float32 ``[P]`` (``-inf``
    for trees with non-finite predictions).

    Example:

    >>> from tfevo.gp import GeneticProgramming, GPConfig
    >>> prob = pagie1(n_points=256)
    >>> gp = GeneticProgramming(GPConfig(popsize=500, num_vars=prob.num_vars,
    ...                                  functions=prob.functions), seed=0)
    >>> trees = gp.ask(); gp.tell(trees, prob.evaluate(trees))
    """

    def __init__(self, x, y, functions=("add", "sub", "mul", "div"), x_test=None, y_test=None,
                 use_op: bool | None = None, name: str = "regression"):
        x = np.asarray(x, np.float32)
        y = np.asarray(y, np.float32)
        if x.ndim == 1:
            x = x[:, None]
        if x.ndim != 2:
            raise ShapeError(f"x must be [N, F], got shape {x.shape}")
        if y.shape != (x.shape[0],):
            raise ShapeError(f"y must be [N] with N = {x.shape[0]}, got shape {y.shape}")
        if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
            raise ConfigError("x and y must be finite")
        self.x, self.y = tf.constant(x), tf.constant(y)
        self.x_test = None if x_test is None else tf.constant(np.asarray(x_test, np.float32).reshape(-1, x.shape[1]))
        self.y_test = None if y_test is None else tf.constant(np.asarray(y_test, np.float32))
        self.functions = tuple(functions)
        self.num_vars = int(x.shape[1])
        self.use_op = use_op
        self.name = name

    def mse(self, trees) -> tf.Tensor:
        """MSE of every tree on the training data, ``[P]``."""
        from tfevo.gp.evaluate import mse

        return mse(trees, self.x, self.y, None, self.use_op)

    def evaluate(self, trees) -> tf.Tensor:
        """Fitness ``-MSE`` per tree (higher is better)."""
        return -self.mse(trees)

    __call__ = evaluate

    def test_mse(self, trees) -> tf.Tensor:
        """MSE on the held-out data (or the training data if none)."""
        from tfevo.gp.evaluate import mse

        if self.x_test is None:
            return self.mse(trees)
        return mse(trees, self.x_test, self.y_test, None, self.use_op)

    def __repr__(self):
        return f"SymbolicRegression({self.name!r}, N={int(self.x.shape[0])}, F={self.num_vars})"


def _pagie(x):
    with np.errstate(divide="ignore"):
        return 1.0 / (1.0 + np.power(x[:, 0], -4.0)) + 1.0 / (1.0 + np.power(x[:, 1], -4.0))


@register("problem", "pagie1", "Pagie-1 symbolic regression: 1/(1+x^-4) + 1/(1+y^-4) on [-5,5]^2")
def pagie1(n_points: int = 1024, seed: int = 0, grid: bool = False, **kw) -> SymbolicRegression:
    """Pagie-1.  ``grid=True`` uses the classic 26x26 grid (step 0.4);
    otherwise ``n_points`` uniform random points (seeded)."""
    if grid:
        g = np.arange(-5.0, 5.0 + 1e-9, 0.4)
        x = np.stack(np.meshgrid(g, g), -1).reshape(-1, 2)
    else:
        x = np.random.RandomState(seed).uniform(-5.0, 5.0, (int(n_points), 2))
    y = _pagie(x)
    ok = np.isfinite(y)
    kw.setdefault("functions", ("add", "sub", "mul", "div"))
    return SymbolicRegression(x[ok], y[ok], name="pagie1", **kw)


# name: (target, n_vars, low, high, n_points)
_NGUYEN = {
    1: (lambda x: x[:, 0] ** 3 + x[:, 0] ** 2 + x[:, 0], 1, -1, 1, 20),
    2: (lambda x: x[:, 0] ** 4 + x[:, 0] ** 3 + x[:, 0] ** 2 + x[:, 0], 1, -1, 1, 20),
    3: (lambda x: sum(x[:, 0] ** k for k in range(1, 6)), 1, -1, 1, 20),
    4: (lambda x: sum(x[:, 0] ** k for k in range(1, 7)), 1, -1, 1, 20),
    5: (lambda x: np.sin(x[:, 0] ** 2) * np.cos(x[:, 0]) - 1, 1, -1, 1, 20),
    6: (lambda x: np.sin(x[:, 0]) + np.sin(x[:, 0] + x[:, 0] ** 2), 1, -1, 1, 20),
    7: (lambda x: np.log(x[:, 0] + 1) + np.log(x[:, 0] ** 2 + 1), 1, 0, 2, 20),
    8: (lambda x: np.sqrt(x[:, 0]), 1, 0, 4, 20),
    9: (lambda x: np.sin(x[:, 0]) + np.sin(x[:, 1] ** 2), 2, -1, 1, 100),
    10: (lambda x: 2 * np.sin(x[:, 0]) * np.cos(x[:, 1]), 2, -1, 1, 100),
    11: (lambda x: np.power(x[:, 0], x[:, 1]), 2, 0, 1, 100),
    12: (lambda x: x[:, 0] ** 4 - x[:, 0] ** 3 + 0.5 * x[:, 1] ** 2 - x[:, 1], 2, -1, 1, 100),
}
_KOZA = {
    1: lambda x: x[:, 0] ** 4 + x[:, 0] ** 3 + x[:, 0] ** 2 + x[:, 0],
    2: lambda x: x[:, 0] ** 5 - 2 * x[:, 0] ** 3 + x[:, 0],
    3: lambda x: x[:, 0] ** 6 - 2 * x[:, 0] ** 4 + x[:, 0] ** 2,
}
_SR_FUNCS = ("add", "sub", "mul", "div", "sin", "cos", "exp", "log")


def nguyen(k: int, n_points: int | None = None, seed: int = 0, **kw) -> SymbolicRegression:
    """Nguyen-``k`` (1..12) with uniform random training points (seeded)."""
    if k not in _NGUYEN:
        raise ConfigError(f"nguyen problem must be 1..12, got {k}")
    f, nv, lo, hi, n = _NGUYEN[k]
    rng = np.random.RandomState(seed)
    x = rng.uniform(lo, hi, (int(n_points or n), nv))
    kw.setdefault("functions", _SR_FUNCS)
    return SymbolicRegression(x, f(x), name=f"nguyen{k}", **kw)


def koza(k: int, n_points: int = 20, seed: int = 0, **kw) -> SymbolicRegression:
    """Koza-``k`` (1..3) on ``U[-1, 1]``."""
    if k not in _KOZA:
        raise ConfigError(f"koza problem must be 1..3, got {k}")
    x = np.random.RandomState(seed).uniform(-1, 1, (int(n_points), 1))
    kw.setdefault("functions", _SR_FUNCS)
    return SymbolicRegression(x, _KOZA[k](x), name=f"koza{k}", **kw)


REGRESSION_BENCHMARKS = {"pagie1": pagie1}
for _k in _NGUYEN:
    def _mk(_k=_k, **kw):
        return nguyen(_k, **kw)
    _mk.__doc__ = f"Nguyen-{_k} symbolic regression benchmark."
    REGRESSION_BENCHMARKS[f"nguyen{_k}"] = register("problem", f"nguyen{_k}", f"Nguyen-{_k} symbolic regression")(_mk)
for _k in _KOZA:
    def _mk(_k=_k, **kw):
        return koza(_k, **kw)
    _mk.__doc__ = f"Koza-{_k} symbolic regression benchmark."
    REGRESSION_BENCHMARKS[f"koza{_k}"] = register("problem", f"koza{_k}", f"Koza-{_k} symbolic regression")(_mk)
