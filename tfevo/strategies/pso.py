"""Particle swarm optimization (Kennedy & Eberhart 1995) with Clerc's constriction defaults.

Each particle has a position ``x``, a velocity ``v`` and a personal best
``p``; ``g`` is the swarm's best position.  After each evaluation::

    v <- w v + c1 r1 (p - x) + c2 r2 (g - x)      (r1, r2 ~ U[0, 1) per coordinate)
    x <- x + v

with the constriction coefficients of Clerc & Kennedy (2002):
``w = 0.7298``, ``c1 = c2 = 1.49618``.  ``ask`` returns the current positions.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from tfevo.core import Algorithm, ConfigError
from tfevo.registry import register
from tfevo.strategies.shaping import _bounds, _center, _positive

__all__ = ["PSO"]


@register("strategy", "pso")
class PSO(Algorithm):
    """Global-best particle swarm optimization.

    Args:
      num_dims: D, number of parameters.
      popsize: P, number of particles (default 40, the swarm size of SPSO 2011).
      inertia: w (default 0.7298).
      cognitive: c1 (default 1.49618).
      social: c2 (default 1.49618).
      bounds: ``(low, high)``: initial positions uniform in the box; positions
        are clipped to it (and the velocity component pushing outward is zeroed).
      max_velocity: optional per-coordinate speed limit.
      init_params: ``[P, D]`` initial positions, or a ``[D]`` centre sampled with
        ``init_sigma`` (used without bounds; default zeros).
      init_sigma: spread of initial positions around a ``[D]`` centre.
      seed: random seed.

    Example:

    >>> import tensorflow as tf
    >>> pso = PSO(num_dims=5, popsize=30, bounds=(-5.0, 5.0), seed=0)
    >>> x = pso.ask(); pso.tell(x, -tf.reduce_sum(x * x, axis=1))
    """

    jit_compile = False  # XLA on CPU measured 3-10x slower here (see benchmarks/results/strategies.md)

    def __init__(self, num_dims: int, popsize: int | None = None, inertia: float = 0.7298, cognitive: float = 1.49618,
                 social: float = 1.49618, bounds=None, max_velocity: float | None = None, init_params=None,
                 init_sigma: float = 1.0, seed: int = 0, name: str | None = None, dtype="float32"):
        super().__init__(num_dims, 40 if popsize is None else popsize, seed=seed, name=name, dtype=dtype)
        if not 0.0 <= float(inertia) < 1.0:
            raise ConfigError(f"inertia must be in [0, 1), got {inertia}")
        self.inertia = float(inertia)
        self.cognitive = _positive(cognitive, "cognitive", allow_zero=True)
        self.social = _positive(social, "social", allow_zero=True)
        self.max_velocity = None if max_velocity is None else _positive(max_velocity, "max_velocity")
        self.bounds = _bounds(bounds, self.num_dims, self.dtype)
        p, d, dt = self.popsize, self.num_dims, self.dtype
        init_seed = tf.random.experimental.stateless_split(tf.constant([int(seed), 11], tf.int32), 1)[0]
        init = None if init_params is None else np.asarray(init_params, dt.as_numpy_dtype)
        if init is not None and init.shape == (p, d):
            pos = tf.constant(init)
        elif self.bounds is not None and init is None:
            low, high = self.bounds
            pos = low + (high - low) * tf.random.stateless_uniform([p, d], seed=init_seed, dtype=dt)
        else:
            pos = _center(init, d, dtype=dt) + _positive(init_sigma, "init_sigma") * tf.random.stateless_normal(
                [p, d], seed=init_seed, dtype=dt)
        self.position = tf.Variable(pos, trainable=False, name="position")
        self.velocity = tf.Variable(tf.zeros([p, d], dt), trainable=False, name="velocity")
        self.personal_best = tf.Variable(pos, trainable=False, name="personal_best")
        self.personal_best_fitness = tf.Variable(tf.fill([p], -dt.max), trainable=False,
                                                 name="personal_best_fitness")
        self._init_best()

    @property
    def mean(self) -> tf.Tensor:
        """The swarm's best position (``global best``) ``[D]``."""
        return tf.gather(self.personal_best, tf.argmax(self.personal_best_fitness))

    def _ask(self):
        return tf.identity(self.position)

    def _tell(self, x, fitness):
        self._update_best(x, fitness)
        f = tf.maximum(fitness, -self.dtype.max)
        improved = tf.logical_or(f > self.personal_best_fitness, tf.equal(self.generation, 0))
        pbest = self.personal_best.assign(tf.where(improved[:, None], x, self.personal_best))
        pbest_f = self.personal_best_fitness.assign(tf.where(improved, f, self.personal_best_fitness))
        gbest = tf.gather(pbest, tf.argmax(pbest_f, output_type=tf.int32))
        s1, s2 = tf.unstack(tf.random.experimental.stateless_split(self.seeds.next(), 2))
        shape = [self.popsize, self.num_dims]
        r1 = tf.random.stateless_uniform(shape, seed=s1, dtype=self.dtype)
        r2 = tf.random.stateless_uniform(shape, seed=s2, dtype=self.dtype)
        v = self.inertia * self.velocity + self.cognitive * r1 * (pbest - x) + self.social * r2 * (gbest - x)
        if self.max_velocity is not None:
            v = tf.clip_by_value(v, -self.max_velocity, self.max_velocity)
        pos = x + v
        if self.bounds is not None:
            low, high = self.bounds
            out = tf.logical_or(pos < low, pos > high)
            pos = tf.clip_by_value(pos, low, high)
            v = tf.where(out, tf.zeros_like(v), v)
        self.velocity.assign(v)
        self.position.assign(pos)
