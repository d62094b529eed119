"""OpenAI-ES: the evolution strategy of Salimans et al. (2017).

Search distribution ``N(theta, sigma^2 I)``.  Each generation samples ``P/2``
noise vectors ``eps`` and evaluates the mirrored pairs ``theta +- sigma eps``;
fitness is replaced by centered ranks ``w`` (see
:func:`tfevo.strategies.shaping.centered_rank`) and the gradient estimate

    g = 1 / (P sigma) * sum_i w_i eps_i  -  weight_decay * theta

is handed to an optimizer (Adam by default) whose step is added to ``theta``.
``sigma`` may decay geometrically to a floor.  ``tell`` uses the ``eps`` drawn at
``ask`` (:class:`~tfevo.strategies.shaping.KeptNoise`: recovered as
``(x - theta) / sigma`` in float32 they would keep only ``ulp(theta) / sigma`` of
their value), so it takes exactly the asked population, rows in that order,
once; any other raises :class:`~tfevo.core.AskTellError`.

Where this differs from Salimans et al.'s code: their gradient is
``sum_i w_i eps_i / P`` (no ``1 / sigma``; evosax divides by sigma as here), so
the same ``weight_decay`` weighs ``sigma`` times less against the fitness term
here (0.005 here is their 0.0001 at ``sigma = 0.02``).  Ties share the mean
rank (:func:`~tfevo.strategies.shaping.centered_rank`; their ranks break ties
arbitrarily).  The learning rate is constant (no decay schedule as evosax's
optax schedules); ``sigma_decay`` / ``sigma_limit`` are the only schedule, and a
``sigma_limit`` above ``sigma`` raises sigma to it at the first ``tell`` (as
optax's ``exponential_decay`` with ``end_value``).
"""

from __future__ import annotations

import tensorflow as tf

from tfevo.core import Algorithm, ConfigError
from tfevo.registry import register
from tfevo.strategies.optimizers import get_optimizer
from tfevo.strategies.shaping import (
    KeptNoise, _center, _check_shaping, _default_popsize, _positive, _shaped,
)

__all__ = ["OpenES"]


@register("strategy", "openai_es")
class OpenES(KeptNoise, Algorithm):
    """OpenAI evolution strategy (Salimans et al. 2017).

    Args:
      num_dims: D, number of parameters.
      popsize: P (even when ``mirrored``); default ``4 + floor(3 ln D)`` rounded up to even.
      sigma: initial noise standard deviation (Salimans et al. used 0.02).
      learning_rate: optimizer step size (Salimans et al.: 0.01).
      optimizer: ``"adam"`` (default), ``"sgd"``, ``"clipup"`` or an
        :class:`~tfevo.strategies.optimizers.Optimizer` instance.
      weight_decay: L2 coefficient applied to the centre in the gradient; 0
        disables it.  Salimans et al.'s 0.005 is ``0.005 / sigma`` on this
        gradient's scale (see above).
      sigma_decay: factor applied to sigma after each generation (1 = constant).
      sigma_limit: floor for the decayed sigma.
      mirrored: antithetic sampling (pairs ``theta +- sigma eps``).
      fitness_shaping: ``"centered_rank"`` (default), ``"z_score"`` or ``"raw"``.
      init_params: initial centre ``[D]`` (default zeros).
      seed: random seed.

    Example:

    >>> import tensorflow as tf
    >>> es = OpenES(num_dims=10, popsize=64, sigma=0.1, learning_rate=0.05, seed=0)
    >>> for _ in range(100):
    ...     x = es.ask()
    ...     es.tell(x, -tf.reduce_sum(x * x, axis=1))   # maximise -||x||^2
    """

    # ask draws Gaussian noise (XLA's CPU random kernels are far slower: graph
    # mode); tell has no random ops and runs as one XLA executable (measured
    # 1.3-2.6x faster than graph mode at D >= 1000, see benchmarks/results/strategies.md).
    jit_compile = False
    jit_compile_tell = True

    def __init__(self, num_dims: int, popsize: int | None = None, sigma: float = 0.02,
                 learning_rate: float = 0.01, optimizer="adam", weight_decay: float = 0.005,
                 sigma_decay: float = 1.0, sigma_limit: float = 0.0, mirrored: bool = True,
                 fitness_shaping: str = "centered_rank", init_params=None, seed: int = 0,
                 name: str | None = None, dtype="float32"):
        num_dims = int(num_dims)
        if popsize is None:
            popsize = _default_popsize(num_dims, even=mirrored) if num_dims >= 1 else 2
        super().__init__(num_dims, popsize, seed=seed, name=name, dtype=dtype)
        if mirrored and self.popsize % 2:
            raise ConfigError(f"popsize must be even with mirrored sampling, got {self.popsize}")
        fitness_shaping = _check_shaping(fitness_shaping)
        if not 0.0 < float(sigma_decay) <= 1.0:
            raise ConfigError(f"sigma_decay must be in (0, 1], got {sigma_decay}")
        self.mirrored = bool(mirrored)
        self.fitness_shaping = fitness_shaping
        self.weight_decay = _positive(weight_decay, "weight_decay", allow_zero=True)
        self.sigma_decay = float(sigma_decay)
        self.sigma_limit = _positive(sigma_limit, "sigma_limit", allow_zero=True)
        self.optimizer = get_optimizer(optimizer, _positive(learning_rate, "learning_rate"), self.num_dims, self.dtype)
        self.center = tf.Variable(_center(init_params, self.num_dims, dtype=self.dtype), trainable=False, name="center")
        self.sigma = tf.Variable(_positive(sigma, "sigma"), dtype=self.dtype, trainable=False, name="sigma")
        self._init_kept_noise(self.mirrored)
        self._init_best()

    @property
    def mean(self) -> tf.Tensor:
        """The search centre ``theta`` ``[D]``."""
        return tf.convert_to_tensor(self.center)

    def _ask(self):
        return self._ask_kept_noise(self.center, self.sigma)

    def _tell(self, x, fitness):
        self._update_best(x, fitness)
        w = _shaped(fitness, self.fitness_shaping, self.dtype)
        # the noise drawn at ask, not (x - theta) / sigma (see KeptNoise)
        grad = self._weighted_noise(w) / (self.popsize * self.sigma)
        if self.weight_decay > 0:
            grad = grad - self.weight_decay * self.center
        self.center.assign_add(self.optimizer.step(grad))
        if self.sigma_decay < 1.0:
            self.sigma.assign(tf.maximum(self.sigma * self.sigma_decay, self.sigma_limit))
