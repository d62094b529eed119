"""Differential evolution (Storn & Price 1997): DE/rand/1/bin and DE/best/1/bin.

The state is a population ``[P, D]`` with its fitness.  ``ask`` returns one
trial vector per member: a mutant

    rand/1:  v_i = x_r1 + F (x_r2 - x_r3)
    best/1:  v_i = x_best + F (x_r1 - x_r2)

(``r1, r2, r3`` distinct and different from ``i``) crossed binomially with
``x_i`` (each coordinate from the mutant with probability ``CR``, at least one
coordinate ``j_rand`` always from it).  ``tell`` keeps each trial that is at
least as good as its target.  The first ``ask`` returns the initial population
itself so it gets evaluated.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from tfevo.core import Algorithm, ConfigError
from tfevo.registry import register
from tfevo.strategies.shaping import _bounds, _center

__all__ = ["DifferentialEvolution", "distinct_indices"]


def distinct_indices(seed, popsize: int, k: int) -> tf.Tensor:
    """Draws ``k`` indices per row ``i`` of ``[popsize]``, distinct and all != ``i``.

    Whole-population tensor program: the j-th index is drawn uniformly from the
    ``P - 1 - j`` allowed values and shifted past the (sorted) already excluded
    ones.

    Returns:
      int32 ``[popsize, k]``.
    """
    if popsize < k + 1:
        raise ConfigError(f"need popsize >= {k + 1} to draw {k} distinct partners, got {popsize}")
    seeds = tf.random.experimental.stateless_split(seed, k)
    excluded = tf.range(popsize, dtype=tf.int32)[:, None]  # [P, 1] (the member itself)
    out = []
    for j in range(k):  # k <= 3: a fixed unrolled loop over partners, not over members
        r = tf.random.stateless_uniform([popsize], seed=seeds[j], minval=0, maxval=popsize - 1 - j,
                                        dtype=tf.int32)
        srt = tf.sort(excluded, axis=1)
        for c in range(j + 1):  # shift past each excluded value in increasing order
            r = r + tf.cast(r >= srt[:, c], tf.int32)
        out.append(r)
        excluded = tf.concat([excluded, r[:, None]], axis=1)
    return tf.stack(out, axis=1)


@register("strategy", "de")
class DifferentialEvolution(Algorithm):
    """Differential evolution, DE/rand/1/bin or DE/best/1/bin.

    Args:
      num_dims: D, number of parameters.
      popsize: P (>= 4 for rand/1, >= 3 for best/1); default ``10 D`` (Storn & Price),
        at most 100 (so large D stays affordable) and at least 4.
      variant: ``"rand/1/bin"`` (default) or ``"best/1/bin"``.
      F: differential weight in (0, 2] (default 0.5).
      CR: crossover probability in [0, 1] (default 0.9).
      bounds: ``(low, high)``; the initial population is uniform in the box and
        trial vectors are clipped to it.
      init_params: ``[P, D]`` initial population, or ``[D]`` centre sampled with
        ``init_sigma`` (used when no bounds are given; default zeros).
      init_sigma: spread of the initial population around a ``[D]`` centre.
      seed: random seed.

    Example:

    >>> import tensorflow as tf
    >>> de = DifferentialEvolution(num_dims=5, popsize=40, bounds=(-5.0, 5.0), seed=0)
    >>> x = de.ask(); de.tell(x, -tf.reduce_sum(x * x, axis=1))
    """

    jit_compile = False  # XLA on CPU measured 3-10x slower here (see benchmarks/results/strategies.md)

    def __init__(self, num_dims: int, popsize: int | None = None, variant: str = "rand/1/bin", F: float = 0.5,
                 CR: float = 0.9, bounds=None, init_params=None, init_sigma: float = 1.0, seed: int = 0,
                 name: str | None = None, dtype="float32"):
        if popsize is None:
            popsize = max(4, min(10 * int(num_dims), 100))
        super().__init__(num_dims, popsize, seed=seed, name=name, dtype=dtype)
        if variant not in ("rand/1/bin", "best/1/bin"):
            raise ConfigError(f"variant must be 'rand/1/bin' or 'best/1/bin', got {variant!r}")
        self.variant = variant
        need = 4 if variant == "rand/1/bin" else 3
        if self.popsize < need:
            raise ConfigError(f"popsize must be >= {need} for {variant}, got {self.popsize}")
        if not 0.0 < float(F) <= 2.0:
            raise ConfigError(f"F must be in (0, 2], got {F}")
        if not 0.0 <= float(CR) <= 1.0:
            raise ConfigError(f"CR must be in [0, 1], got {CR}")
        self.F, self.CR = float(F), float(CR)
        self.bounds = _bounds(bounds, self.num_dims, self.dtype)
        p, d, dt = self.popsize, self.num_dims, self.dtype
        init_seed = tf.random.experimental.stateless_split(tf.constant([int(seed), 7], tf.int32), 1)[0]
        init = None if init_params is None else np.asarray(init_params, dt.as_numpy_dtype)
        if init is not None and init.shape == (p, d):
            pop = tf.constant(init)
        elif self.bounds is not None and init is None:
            low, high = self.bounds
            pop = low + (high - low) * tf.random.stateless_uniform([p, d], seed=init_seed, dtype=dt)
        else:
            c = _center(init, d, dtype=dt)
            pop = c + float(init_sigma) * tf.random.stateless_normal([p, d], seed=init_seed, dtype=dt)
        self.population = tf.Variable(pop, trainable=False, name="population")
        self.fitness = tf.Variable(tf.fill([p], -dt.max), trainable=False, name="fitness")
        self._init_best()

    @property
    def mean(self) -> tf.Tensor:
        """The population mean ``[D]``."""
        return tf.reduce_mean(self.population, axis=0)

    def _ask(self):
        p, d = self.popsize, self.num_dims
        s_idx, s_cr, s_j = tf.unstack(tf.random.experimental.stateless_split(self.seeds.next(), 3))
        pop = self.population
        if self.variant == "rand/1/bin":
            r = distinct_indices(s_idx, p, 3)
            base = tf.gather(pop, r[:, 0])
            diff = tf.gather(pop, r[:, 1]) - tf.gather(pop, r[:, 2])
        else:
            r = distinct_indices(s_idx, p, 2)
            best = tf.gather(pop, tf.argmax(self.fitness, output_type=tf.int32))
            base = tf.broadcast_to(best, [p, d])
            diff = tf.gather(pop, r[:, 0]) - tf.gather(pop, r[:, 1])
        mutant = base + self.F * diff
        cross = tf.random.stateless_uniform([p, d], seed=s_cr) < self.CR
        j_rand = tf.random.stateless_uniform([p], seed=s_j, minval=0, maxval=d, dtype=tf.int32)
        cross = tf.logical_or(cross, tf.one_hot(j_rand, d, on_value=True, off_value=False))
        trial = tf.where(cross, mutant, pop)
        if self.bounds is not None:
            trial = tf.clip_by_value(trial, self.bounds[0], self.bounds[1])
        return tf.where(tf.equal(self.generation, 0), pop, trial)

    def _tell(self, x, fitness):
        self._update_best(x, fitness)
        f = tf.maximum(fitness, -self.dtype.max)  # NaN/+-inf -> worst finite value
        accept = tf.logical_or(f >= self.fitness, tf.equal(self.generation, 0))
        self.population.assign(tf.where(accept[:, None], x, self.population))
        self.fitness.assign(tf.where(accept, f, self.fitness))
