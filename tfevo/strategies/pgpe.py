"""PGPE: policy gradients with parameter-based exploration (Sehnke et al. 2010).

Search distribution ``N(mu, diag(sigma^2))``.  Each generation draws ``P/2``
perturbations ``eps ~ N(0, diag(sigma^2))`` and evaluates the symmetric pairs
``mu + eps`` and ``mu - eps``.  With (shaped) fitness ``f+`` and ``f-`` of a pair
and baseline ``b`` (the mean shaped fitness), the gradient estimates are

    grad_mu    = mean_pairs( eps * (f+ - f-) / 2 )
    grad_sigma = mean_pairs( ((f+ + f-) / 2 - b) * (eps^2 - sigma^2) / sigma )

``grad_mu`` goes to an optimizer (ClipUp by default, as recommended by Toklu et
al. 2020), ``sigma`` takes a plain ascent step ``sigma_learning_rate * grad_sigma`` whose
relative size is clipped to ``sigma_max_change`` (Toklu et al. defaults:
0.1 and 0.2).

Row ``k`` and row ``k + P/2`` of ``ask`` are ``mu + eps_k`` and ``mu - eps_k``
(as in evosax).  ``tell`` uses the ``eps`` drawn at ``ask``
(:class:`~tfevo.strategies.shaping.KeptNoise`), so it takes exactly the
asked population, rows in that order, once; any other (re-ordered rows would
pair unrelated members) raises :class:`~tfevo.core.AskTellError`.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from tfevo.core import Algorithm, ConfigError
from tfevo.registry import register
from tfevo.strategies.optimizers import get_optimizer
from tfevo.strategies.shaping import (
    KeptNoise, _center, _check_shaping, _default_popsize, _per_dim, _positive, _shaped,
)

__all__ = ["PGPE"]


@register("strategy", "pgpe")
class PGPE(KeptNoise, Algorithm):
    """PGPE with symmetric sampling and per-dimension sigma adaptation.

    Args:
      num_dims: D, number of parameters.
      popsize: P, must be even (P/2 symmetric pairs); default ``4 + floor(3 ln D)`` rounded to even.
      learning_rate: step size of the centre optimizer (for ClipUp,
        Toklu et al. recommend ``max_speed / 2``).
      sigma: initial standard deviation, scalar or ``[D]``; alternatively
        give ``radius_init`` (then ``sigma = radius_init / sqrt(D)`` per dimension).
      sigma_learning_rate: learning rate of sigma (Toklu et al.: 0.1).
      sigma_max_change: sigma changes by at most this fraction per generation (0.2).
      optimizer: ``"clipup"`` (default), ``"adam"``, ``"sgd"`` or an Optimizer instance.
      max_speed: ClipUp's velocity limit (default ``2 * learning_rate``).
      momentum: ClipUp/SGD momentum (default 0.9 for ClipUp, 0 for SGD).
      fitness_shaping: ``"centered_rank"`` (default), ``"z_score"`` or ``"raw"``.
      init_params: initial centre ``[D]`` (default zeros).
      seed: random seed.

    Example:

    >>> import tensorflow as tf
    >>> es = PGPE(num_dims=10, popsize=50, learning_rate=0.1, sigma=0.5, seed=0)
    >>> x = es.ask(); es.tell(x, -tf.reduce_sum(x * x, axis=1))
    """

    jit_compile = False  # XLA on CPU measured 3-10x slower here (see benchmarks/results/strategies.md)

    def __init__(self, num_dims: int, popsize: int | None = None, learning_rate: float = 0.15,
                 sigma=0.1, radius_init: float | None = None, sigma_learning_rate: float = 0.1,
                 sigma_max_change: float = 0.2, optimizer="clipup", max_speed: float | None = None,
                 momentum: float | None = None, fitness_shaping: str = "centered_rank",
                 init_params=None, seed: int = 0, name: str | None = None, dtype="float32"):
        num_dims = int(num_dims)
        if popsize is None:
            popsize = _default_popsize(num_dims, even=True) if num_dims >= 1 else 2
        super().__init__(num_dims, popsize, seed=seed, name=name, dtype=dtype)
        if self.popsize % 2:
            raise ConfigError(f"popsize must be even (symmetric pairs), got {self.popsize}")
        self.fitness_shaping = _check_shaping(fitness_shaping)
        lr = _positive(learning_rate, "learning_rate")
        kwargs = {}
        if isinstance(optimizer, str) and optimizer.lower() == "clipup":
            kwargs["max_speed"] = max_speed
            kwargs["momentum"] = 0.9 if momentum is None else momentum
        elif isinstance(optimizer, str) and optimizer.lower() == "sgd" and momentum is not None:
            kwargs["momentum"] = momentum
        self.optimizer = get_optimizer(optimizer, lr, self.num_dims, self.dtype, **kwargs)
        self.sigma_learning_rate = _positive(sigma_learning_rate, "sigma_learning_rate", allow_zero=True)
        self.sigma_max_change = _positive(sigma_max_change, "sigma_max_change")
        if radius_init is not None:
            sigma0 = np.full([self.num_dims], _positive(radius_init, "radius_init") / np.sqrt(self.num_dims),
                             self.dtype.as_numpy_dtype)
        else:
            sigma0 = _per_dim(sigma, self.num_dims, "sigma", self.dtype)
        self.center = tf.Variable(_center(init_params, self.num_dims, dtype=self.dtype), trainable=False, name="center")
        self.sigma = tf.Variable(sigma0, trainable=False, name="sigma")
        self._init_kept_noise(True)
        self._init_best()

    @property
    def mean(self) -> tf.Tensor:
        """The search centre ``mu`` ``[D]``."""
        return tf.convert_to_tensor(self.center)

    def _ask(self):
        return self._ask_kept_noise(self.center, self.sigma)

    def _tell(self, x, fitness):
        self._update_best(x, fitness)
        w = _shaped(fitness, self.fitness_shaping, self.dtype)
        n = self.popsize // 2
        s = self.sigma
        # eps_k = sigma * noise_k, the perturbation drawn at ask (not recovered from x: see KeptNoise)
        grad_mu = s * self._weighted_noise(0.5 * w) / n  # sum_k eps_k (f+ - f-) / 2, mean over pairs
        # sum_k ((f+ + f-)/2 - b) (eps_k^2 - sigma^2) / sigma = sigma * sum_k ((f+ + f-)/2 - b) (noise_k^2 - 1)
        centered = 0.5 * w - 0.5 * tf.reduce_mean(w)  # the halves' sum is (f+ + f-)/2 - b
        grad_sigma = s * (self._weighted_noise(centered, square=True) - tf.reduce_sum(centered)) / n
        self.center.assign_add(self.optimizer.step(grad_mu))
        new_sigma = s + self.sigma_learning_rate * grad_sigma
        self.sigma.assign(tf.clip_by_value(new_sigma, s * (1.0 - self.sigma_max_change),
                                           s * (1.0 + self.sigma_max_change)))
