"""xNES: exponential natural evolution strategy (Glasmachers et al. 2010; Wierstra et al. 2014).

Search distribution ``N(mu, sigma^2 B B^T)`` with ``det(B) = 1``.  With
standard-normal ``z_i``, ``x_i = mu + sigma B z_i`` and NES utilities ``u_i`` by
rank, one generation computes

    G_delta = sum_i u_i z_i
    G_M     = sum_i u_i (z_i z_i^T - I)
    G_sigma = tr(G_M) / D,   G_B = G_M - G_sigma I

and updates ``mu += eta_mu sigma B G_delta``, ``sigma *= exp(eta_sigma/2 G_sigma)``,
``B <- B expm(eta_B/2 G_B)``.  Defaults: ``P = 4 + floor(3 ln D)``,
``eta_mu = 1``, ``eta_sigma = eta_B = 3 (3 + ln D) / (5 D sqrt(D))``.
Members of equal fitness share the mean utility of their ranks (as SNES).
The samples ``z`` of the last ``ask`` are kept in a variable, so ``tell`` must
receive that population (in order), once; any other raises
:class:`~tfevo.core.AskTellError`.
The full matrix costs O(D^2) memory and O(D^3) per generation: use SNES, OpenES
or PGPE beyond a few hundred dimensions.
"""

from __future__ import annotations

import math

import tensorflow as tf

from tfevo.core import Algorithm, ConfigError
from tfevo.registry import register
from tfevo.strategies.shaping import (
    _center, _default_popsize, _normal, _positive, nes_utilities, utility_weights,
)

__all__ = ["XNES"]

_MIN_SIGMA = 1e-30  # keeps sigma a normal positive float32


@register("strategy", "xnes")
class XNES(Algorithm):
    """Exponential NES with full covariance, utility weights and the default learning rates.

    Args:
      num_dims: D, number of parameters.
      popsize: P (default ``4 + floor(3 ln D)``).
      sigma: initial global step size.
      learning_rate: eta_mu, the learning rate of the mean (default 1).
      sigma_learning_rate: eta_sigma (default ``3 (3 + ln D) / (5 D sqrt(D))``).
      B_learning_rate: eta_B (default equal to the sigma default).
      init_params: initial mean ``[D]`` (default zeros).
      seed: random seed.

    Example:

    >>> import tensorflow as tf
    >>> es = XNES(num_dims=5, sigma=1.0, seed=0)
    >>> x = es.ask(); es.tell(x, -tf.reduce_sum(x * x, axis=1))
    """

    # tf.linalg.expm has no XLA kernel; the graph (non-XLA) path is used.
    jit_compile = False
    tell_needs_last_ask = True  # tell uses the z's of the last ask
    tell_once_per_ask = True

    def __init__(self, num_dims: int, popsize: int | None = None, sigma: float = 1.0,
                 learning_rate: float = 1.0, sigma_learning_rate: float | None = None,
                 B_learning_rate: float | None = None,
                 init_params=None, seed: int = 0, name: str | None = None, dtype="float32"):
        num_dims = int(num_dims)
        if popsize is None:
            popsize = _default_popsize(num_dims) if num_dims >= 1 else 2
        super().__init__(num_dims, popsize, seed=seed, name=name, dtype=dtype)
        if self.popsize < 2:
            raise ConfigError(f"popsize must be >= 2, got {self.popsize}")
        d = self.num_dims
        default = 3.0 * (3.0 + math.log(d)) / (5.0 * d * math.sqrt(d))
        self.learning_rate = _positive(learning_rate, "learning_rate")
        self.sigma_learning_rate = default if sigma_learning_rate is None else \
            _positive(sigma_learning_rate, "sigma_learning_rate")
        self.B_learning_rate = default if B_learning_rate is None else _positive(B_learning_rate, "B_learning_rate")
        dt = self.dtype
        self.utilities = tf.constant(nes_utilities(self.popsize, dt), dt)
        self.center = tf.Variable(_center(init_params, d, dtype=dt), trainable=False, name="center")
        self.sigma = tf.Variable(_positive(sigma, "sigma"), dtype=dt, trainable=False, name="sigma")
        self.B = tf.Variable(tf.eye(d, dtype=dt), trainable=False, name="B")
        # The standard-normal samples of the last ask (needed by tell: recovering
        # them from x would take a linear solve and lose precision as sigma shrinks).
        self.z = tf.Variable(tf.zeros([self.popsize, d], dt), trainable=False, name="z")
        # the population those z's produced (NaN before the first ask: equal to nothing)
        self.x_last = tf.Variable(tf.fill([self.popsize, d], tf.constant(float("nan"), dt)), trainable=False,
                                  name="x_last")
        self._init_best()

    @property
    def mean(self) -> tf.Tensor:
        """The search mean ``mu`` ``[D]``."""
        return tf.convert_to_tensor(self.center)

    @property
    def covariance(self) -> tf.Tensor:
        """The search covariance ``sigma^2 B B^T`` ``[D, D]``."""
        return tf.square(self.sigma) * tf.matmul(self.B, self.B, transpose_b=True)

    def _ask(self):
        z = self.z.assign(_normal([self.popsize, self.num_dims], self.seeds.next(), dtype=self.dtype))
        return tf.identity(self.x_last.assign(self.center + self.sigma * tf.matmul(z, self.B, transpose_b=True)))

    def _last_asked(self):
        return self.x_last

    def _tell(self, x, fitness):
        self._update_best(x, fitness)
        u = utility_weights(fitness, self.utilities)
        z = tf.convert_to_tensor(self.z)
        d = float(self.num_dims)
        g_delta = tf.linalg.matvec(z, u, transpose_a=True)
        g_m = tf.matmul(z * u[:, None], z, transpose_a=True) - tf.reduce_sum(u) * tf.eye(self.num_dims, dtype=self.dtype)
        g_sigma = tf.linalg.trace(g_m) / d
        g_b = g_m - g_sigma * tf.eye(self.num_dims, dtype=self.dtype)
        self.center.assign_add(self.learning_rate * self.sigma * tf.linalg.matvec(self.B, g_delta))
        self.sigma.assign(tf.maximum(self.sigma * tf.exp(0.5 * self.sigma_learning_rate * g_sigma), _MIN_SIGMA))
        self.B.assign(tf.matmul(self.B, tf.linalg.expm(0.5 * self.B_learning_rate * g_b)))
