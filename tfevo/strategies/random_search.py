"""Random search: sample a population around a centre or uniformly in bounds, keep the best.

Such et al. (2017) use it as the baseline every neuroevolution method must
beat.  With ``adapt_center=True`` the sampling centre follows the best member
found so far, which turns it into a (1 + P) local random search.
"""

from __future__ import annotations

import tensorflow as tf

from tfevo.core import Algorithm, ConfigError
from tfevo.registry import register
from tfevo.strategies.shaping import _bounds, _center, _default_popsize, _normal, _per_dim

__all__ = ["RandomSearch"]


@register("strategy", "random_search")
class RandomSearch(Algorithm):
    """Pure random search that remembers the best member (``algo.best``).

    Args:
      num_dims: D, number of parameters.
      popsize: P, members sampled per generation (default ``4 + floor(3 ln D)``).
      init_params: sampling centre ``[D]`` (default zeros).
      sigma: standard deviation around the centre (scalar or ``[D]``).
      bounds: ``(low, high)`` (scalars or ``[D]``); if given, members are drawn
        uniformly in the box instead of around the centre.
      adapt_center: move the Gaussian centre to the best member found so far.
      seed: random seed.

    Example:

    >>> import tensorflow as tf
    >>> rs = RandomSearch(num_dims=3, popsize=100, bounds=(-5.0, 5.0), seed=0)
    >>> x = rs.ask(); rs.tell(x, -tf.reduce_sum(x * x, axis=1))
    >>> params, fitness = rs.best
    """

    jit_compile = False  # XLA on CPU measured 3-10x slower here (see benchmarks/results/strategies.md)

    def __init__(self, num_dims: int, popsize: int | None = None, init_params=None, sigma=1.0, bounds=None,
                 adapt_center: bool = False, seed: int = 0, name: str | None = None, dtype="float32"):
        if popsize is None:
            popsize = _default_popsize(int(num_dims)) if int(num_dims) >= 1 else 4
        super().__init__(num_dims, popsize, seed=seed, name=name, dtype=dtype)
        b = _bounds(bounds, self.num_dims, self.dtype)
        if b is not None and adapt_center:
            raise ConfigError("adapt_center applies to Gaussian sampling; it cannot be used with bounds")
        self.bounds = b
        self.adapt_center = bool(adapt_center)
        self.center = tf.Variable(_center(init_params, self.num_dims, dtype=self.dtype), trainable=False, name="center")
        self.sigma = tf.constant(_per_dim(sigma, self.num_dims, "sigma", self.dtype))
        self._init_best()

    @property
    def mean(self) -> tf.Tensor:
        """The sampling centre ``[D]`` (the box centre with bounds)."""
        if self.bounds is not None:
            return tf.constant(0.5 * (self.bounds[0] + self.bounds[1]))
        return tf.convert_to_tensor(self.center)

    def _ask(self):
        seed = self.seeds.next()
        shape = [self.popsize, self.num_dims]
        if self.bounds is not None:
            low, high = self.bounds
            return low + (high - low) * tf.random.stateless_uniform(shape, seed=seed, dtype=self.dtype)
        return self.center + _normal(shape, seed, scale=self.sigma, dtype=self.dtype)

    def _tell(self, x, fitness):
        self._update_best(x, fitness)
        if self.adapt_center:
            self.center.assign(tf.where(tf.math.is_finite(self.best_fitness), self.best_params, self.center))
