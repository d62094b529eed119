"""ARS: augmented random search (Mania, Guy & Recht 2018).

Each generation draws ``N = P/2`` directions ``delta_k ~ N(0, I)`` and evaluates
``theta + nu delta_k`` (first half of the population) and ``theta - nu delta_k``
(second half).  Directions are scored by ``max(r+_k, r-_k)``; the ``b`` best
(``num_top``) are kept and

    theta <- theta + alpha / (b * sigma_R) * sum_top (r+_k - r-_k) delta_k

(``alpha`` is ``learning_rate``, ``nu`` is ``sigma``) where ``sigma_R`` is the standard deviation of the ``2b`` rewards used
(reward-std normalization; switch off with ``normalize_rewards=False``).

Row ``k`` and row ``k + N`` of ``ask`` share ``delta_k`` (as in evosax).  ``tell``
uses the ``delta`` drawn at ``ask`` (:class:`~tfevo.strategies.shaping.KeptNoise`),
so it takes exactly the asked population, rows in that order, once; any other
raises :class:`~tfevo.core.AskTellError`.

Variants of the paper:
  * V1: ``num_top = P/2`` (all directions); V1-t: ``num_top < P/2``.
  * V2 / V2-t: the same update; the additional *observation normalization*
    (running mean/std of states applied to the linear policy's input) belongs
    to the evaluator/policy, not to this strategy.
"""

from __future__ import annotations

import tensorflow as tf

from tfevo.core import Algorithm, ConfigError, worst_to_finite
from tfevo.registry import register
from tfevo.strategies.shaping import KeptNoise, _center, _default_popsize, _positive

__all__ = ["ARS"]


@register("strategy", "ars")
class ARS(KeptNoise, Algorithm):
    """Augmented random search (Mania et al. 2018), V1/V1-t update with reward-std scaling.

    Args:
      num_dims: D, number of parameters.
      popsize: P = 2N, must be even (N directions, each evaluated both ways).
      learning_rate: alpha, the step size of the update.
      sigma: nu, the exploration noise.
      num_top: b, the number of best directions used (default all: V1/V2).
      normalize_rewards: divide the step by the std of the used rewards.
      init_params: initial parameters ``[D]`` (default zeros, as in the paper).
      seed: random seed.

    Raw rewards are used (no ranking); NaN/+-inf rewards are replaced by the
    lowest finite reward of the generation before any arithmetic.

    Example:

    >>> import tensorflow as tf
    >>> ars = ARS(num_dims=10, popsize=32, learning_rate=0.02, sigma=0.03, num_top=8, seed=0)
    >>> x = ars.ask(); ars.tell(x, -tf.reduce_sum(x * x, axis=1))
    """

    jit_compile = False  # XLA on CPU measured 3-10x slower here (see benchmarks/results/strategies.md)

    def __init__(self, num_dims: int, popsize: int | None = None, learning_rate: float = 0.02,
                 sigma: float = 0.03, num_top: int | None = None, normalize_rewards: bool = True,
                 init_params=None, seed: int = 0, name: str | None = None, dtype="float32"):
        num_dims = int(num_dims)
        if popsize is None:
            popsize = _default_popsize(num_dims, even=True) if num_dims >= 1 else 2
        super().__init__(num_dims, popsize, seed=seed, name=name, dtype=dtype)
        if self.popsize % 2:
            raise ConfigError(f"popsize must be even (each direction is evaluated +/-), got {self.popsize}")
        n = self.popsize // 2
        self.num_top = n if num_top is None else int(num_top)
        if not 1 <= self.num_top <= n:
            raise ConfigError(f"num_top must be in [1, popsize/2 = {n}], got {num_top}")
        self.learning_rate = _positive(learning_rate, "learning_rate")
        self.sigma = _positive(sigma, "sigma")
        self.normalize_rewards = bool(normalize_rewards)
        self.center = tf.Variable(_center(init_params, self.num_dims, dtype=self.dtype), trainable=False, name="center")
        self._init_kept_noise(True)
        self._init_best()

    @property
    def mean(self) -> tf.Tensor:
        """The current parameters ``theta`` ``[D]``."""
        return tf.convert_to_tensor(self.center)

    def _ask(self):
        return self._ask_kept_noise(self.center, self.sigma)

    def _tell(self, x, fitness):
        self._update_best(x, fitness)
        r = tf.cast(worst_to_finite(fitness), self.dtype)
        n = self.popsize // 2
        rp, rm = r[:n], r[n:]
        delta = tf.convert_to_tensor(self.noise)  # drawn at ask, not recovered from x (see KeptNoise)
        b = self.num_top
        if b < n:
            top = tf.math.top_k(tf.maximum(rp, rm), k=b, sorted=False).indices
            rp, rm, delta = tf.gather(rp, top), tf.gather(rm, top), tf.gather(delta, top)
        step = tf.linalg.matvec(delta, rp - rm, transpose_a=True) * (self.learning_rate / b)
        if self.normalize_rewards:
            used = tf.concat([rp, rm], axis=0)
            std = tf.math.reduce_std(used)
            step = tf.math.divide_no_nan(step, std)  # all rewards equal -> no step
        self.center.assign_add(step)
