"""SNES: separable natural evolution strategy (Schaul, Glasmachers & Schmidhuber 2011).

Search distribution ``N(mu, diag(sigma^2))``.  With standard-normal samples
``z_i``, ``x_i = mu + sigma * z_i`` and NES utilities ``u_i`` assigned by rank
(:func:`tfevo.strategies.shaping.nes_utilities`), one generation is

    mu    <- mu + eta_mu * sigma * sum_i u_i z_i
    sigma <- sigma * exp(eta_sigma / 2 * sum_i u_i (z_i^2 - 1))

with the defaults of Wierstra et al. (2014): ``P = 4 + floor(3 ln D)``,
``eta_mu = 1`` and ``eta_sigma = (3 + ln D) / (5 sqrt(D))``.

Members of equal fitness share the mean utility of their ranks
(:func:`~tfevo.strategies.shaping.utility_weights`), so a generation whose
members all tie moves nothing; evosax instead gives each tied member the
utility of its mean rank truncated to an integer (a step along ``sum_i z_i``).

``tell`` uses the ``z`` drawn at ``ask`` (:class:`~tfevo.strategies.shaping.KeptNoise`:
recovered as ``(x - mu) / sigma`` in float32 they would keep only
``ulp(mu) / sigma`` of their value), so it takes exactly the asked population,
rows in that order, once; any other raises :class:`~tfevo.core.AskTellError`.
"""

from __future__ import annotations

import math

import tensorflow as tf

from tfevo.core import Algorithm, ConfigError
from tfevo.registry import register
from tfevo.strategies.shaping import (
    KeptNoise, _center, _default_popsize, _per_dim, _positive, nes_utilities, utility_weights,
)

__all__ = ["SNES"]

_MIN_SIGMA = 1e-30  # keeps sigma a normal positive float32


@register("strategy", "snes")
class SNES(KeptNoise, Algorithm):
    """Separable NES with utility-weights fitness shaping and the default learning rates.

    Args:
      num_dims: D, number of parameters.
      popsize: P (default ``4 + floor(3 ln D)``).
      sigma: initial standard deviation, scalar or ``[D]``.
      learning_rate: eta_mu, the learning rate of the mean (default 1).
      sigma_learning_rate: eta_sigma (default ``(3 + ln D) / (5 sqrt(D))``).
      mirrored: draw ``z`` in antithetic pairs (P must be even); off by default as in the paper.
      init_params: initial mean ``[D]`` (default zeros).
      seed: random seed.

    Example:

    >>> import tensorflow as tf
    >>> es = SNES(num_dims=10, sigma=1.0, seed=0)
    >>> for _ in range(200):
    ...     x = es.ask()
    ...     es.tell(x, -tf.reduce_sum(x * x, axis=1))
    """

    # ask draws Gaussian noise (XLA's CPU random kernels are several times slower:
    # graph mode); tell has no random ops and fuses ~40 small ops into one XLA
    # executable (measured 1.4-2.4x faster than graph mode at D >= 1000, see benchmarks/results/strategies.md).
    jit_compile = False
    jit_compile_tell = True

    def __init__(self, num_dims: int, popsize: int | None = None, sigma=1.0,
                 learning_rate: float = 1.0, sigma_learning_rate: float | None = None, mirrored: bool = False,
                 init_params=None, seed: int = 0, name: str | None = None, dtype="float32"):
        num_dims = int(num_dims)
        if popsize is None:
            popsize = _default_popsize(num_dims, even=mirrored) if num_dims >= 1 else 2
        super().__init__(num_dims, popsize, seed=seed, name=name, dtype=dtype)
        if self.popsize < 2:
            raise ConfigError(f"popsize must be >= 2, got {self.popsize}")
        self.mirrored = bool(mirrored)
        if self.mirrored and self.popsize % 2:
            raise ConfigError(f"popsize must be even with mirrored sampling, got {self.popsize}")
        self.learning_rate = _positive(learning_rate, "learning_rate")
        d = self.num_dims
        self.sigma_learning_rate = (3.0 + math.log(d)) / (5.0 * math.sqrt(d)) if sigma_learning_rate is None \
            else _positive(sigma_learning_rate, "sigma_learning_rate")
        self.utilities = tf.constant(nes_utilities(self.popsize, self.dtype), self.dtype)
        self.center = tf.Variable(_center(init_params, d, dtype=self.dtype), trainable=False, name="center")
        self.sigma = tf.Variable(_per_dim(sigma, d, "sigma", self.dtype), trainable=False, name="sigma")
        self._init_kept_noise(self.mirrored)
        self._init_best()

    @property
    def mean(self) -> tf.Tensor:
        """The search mean ``mu`` ``[D]``."""
        return tf.convert_to_tensor(self.center)

    def _ask(self):
        return self._ask_kept_noise(self.center, self.sigma)

    def _tell(self, x, fitness):
        self._update_best(x, fitness)
        u = utility_weights(fitness, self.utilities)
        grad_mu = self._weighted_noise(u)  # the z's drawn at ask, not (x - mu) / sigma (see KeptNoise)
        grad_sigma = self._weighted_noise(u, square=True)  # sum(u) = 0 drops the -1
        self.center.assign_add(self.learning_rate * self.sigma * grad_mu)
        self.sigma.assign(tf.maximum(self.sigma * tf.exp(0.5 * self.sigma_learning_rate * grad_sigma), _MIN_SIGMA))
