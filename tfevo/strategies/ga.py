"""GaussianGA: the deep-neuroevolution genetic algorithm of Such et al. (2017).

A simple, mutation-only GA that scales to millions of parameters: truncation
selection (the top ``T`` members are parents), Gaussian mutation
``x' = x + sigma * eps`` of a uniformly chosen parent, no crossover, and
elitism with re-evaluated elite candidates.

The exact elitism rule (noisy fitness is why elites are re-evaluated):

1. Every member carries the mean of all evaluations it has received (a new
   child has one; a member copied unmodified into the next population adds
   one evaluation per generation it survives).
2. In generation 0 the *elite* is the member with the best fitness.  In later
   generations the elite is the member with the best mean fitness **among the
   rows copied over from the previous generation** (the previous elite and the
   previous ``num_elite_candidates`` candidates, all just re-evaluated).  So a
   newly mutated child can only become the elite after at least one
   re-evaluation.
3. The next population is ``[elite, E candidates, P - 1 - E children]``: the
   candidates are the ``E = num_elite_candidates`` best members by mean fitness
   other than the elite; children are mutated copies of parents drawn uniformly
   from the top ``T`` members by mean fitness (the elite and re-evaluated rows
   compete with their means).
4. The run's best is that elite with its mean fitness, not the luckiest
   single evaluation (:class:`EliteBest`).

``tell`` must receive the population returned by ``ask``, in the same order
(rows are matched with their evaluation history); any other population raises
:class:`~tfevo.core.AskTellError`.  The state is the population tensor itself;
the same GA with genomes stored as seed lists (Such et al.'s compression) is
:class:`~tfevo.strategies.SeedGA`, which shares :func:`elitist_truncation`
and :class:`EliteBest` with this class, so both encodings select the same rows
and report the same best for the same fitness.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from tfevo.core import Algorithm, ConfigError, SeedStream, ShapeError
from tfevo.registry import register
from tfevo.strategies.shaping import _ga_sizes, _normal, _positive

__all__ = ["EliteBest", "GaussianGA", "elitist_truncation"]

_WORST = -1e30  # fitness of a failed (NaN/+-inf) evaluation inside the running means
_MASKED = -3e30  # below any real mean


def elitist_truncation(eval_sum, eval_count, fitness, generation, num_elite_candidates: int, truncation: int):
    """Selection of the deep-neuroevolution GA (shared by :class:`GaussianGA` and ``SeedGA``).

    Adds this generation's (sanitized) fitness to each row's running sums,
    picks the elite among the rows carried over unmodified (rows
    ``0..num_elite_candidates``; any row in generation 0), the
    ``num_elite_candidates`` best other rows, and the top ``truncation``
    parents, all by mean fitness.

    Returns ``(total, count, score, elite, keep, parents)``: new running sums
    and counts ``[P]``, mean fitness ``[P]``, the elite's row, the rows kept
    unmodified ``[1 + E]`` (elite first) and the parent rows ``[T]``.
    """
    e = int(num_elite_candidates)
    f = tf.maximum(fitness, _WORST)  # sanitized: NaN/+-inf -> -1e30, stays finite
    total = eval_sum + f
    count = eval_count + 1.0
    score = total / count
    idx = tf.range(tf.shape(score)[0])
    carried = tf.logical_or(idx <= e, tf.equal(generation, 0))
    elite = tf.argmax(tf.where(carried, score, _MASKED), output_type=tf.int32)
    keep = elite[None]
    if e > 0:
        others = tf.tensor_scatter_nd_update(score, elite[None, None], [_MASKED])
        keep = tf.concat([keep, tf.math.top_k(others, k=e).indices], axis=0)
    parents = tf.math.top_k(score, k=int(truncation)).indices
    return total, count, score, elite, keep, parents


class EliteBest:
    """The run's best of the Deep GA (shared by :class:`GaussianGA` and ``SeedGA``).

    The best (:attr:`best_genome`, :attr:`best_fitness`, :attr:`best`, and
    what a :class:`~tfevo.training.Trainer` logs as ``best_ever``, checkpoints
    and exports through :meth:`reported_best`) is the **elite** that
    :func:`elitist_truncation` just chose, with its **mean fitness over all
    its evaluations**; :attr:`best_evaluations` is how many evaluations that
    mean rests on (it grows as the elite is re-evaluated, and the mean can go
    down).  The luckiest single evaluation of the run, an optimistic pick on
    noisy tasks (the maximum of ``P`` noisy draws), is kept apart as
    :attr:`best_single_genome`, :attr:`best_single_fitness`
    (:attr:`best_single`).

    A class using it calls :meth:`_init_elite_best` in its constructor (after
    ``eval_sum``/``eval_count`` exist) and :meth:`_track_best` in its
    tell with the sanitized fitness and :func:`elitist_truncation`'s outputs;
    it implements ``_genome_params(genome) -> [D]`` (identity for parameter
    vectors, decoding for seed lists).  All state is in checkpointed variables.
    """

    def _init_elite_best(self, genome0) -> None:
        """Creates the variables of the run's best; ``genome0`` is a row of the initial population."""
        genome0 = tf.convert_to_tensor(genome0)
        # the run's best: the elite, with its mean over all its evaluations
        self.best_genome = tf.Variable(genome0, trainable=False, name="best_genome")
        self.best_fitness = tf.Variable(-np.inf, dtype=self.dtype, trainable=False, name="best_fitness")
        self.best_evaluations = tf.Variable(tf.zeros([], self.dtype), trainable=False, name="best_evaluations")
        # the luckiest single evaluation of the run
        self.best_single_genome = tf.Variable(genome0, trainable=False, name="best_single_genome")
        self.best_single_fitness = tf.Variable(-np.inf, dtype=self.dtype, trainable=False, name="best_single_fitness")

    def _track_best(self, g, fitness, score, count, elite) -> None:
        """After selection: the elite and its mean become the best; the luckiest evaluation is kept apart.

        ``g`` is the population told, ``fitness`` its sanitized fitness, ``score``/``count``/``elite``
        what :func:`elitist_truncation` returned for it.
        """
        i = tf.argmax(fitness, output_type=tf.int32)
        f_i = tf.gather(fitness, i)
        better = f_i > self.best_single_fitness
        self.best_single_genome.assign(tf.where(better, tf.gather(g, i), self.best_single_genome))
        self.best_single_fitness.assign(tf.where(better, f_i, self.best_single_fitness))
        self.best_genome.assign(tf.gather(g, elite))
        self.best_fitness.assign(tf.gather(score, elite))
        self.best_evaluations.assign(tf.gather(count, elite))

    def reported_best(self):
        """``(genome, fitness)``: the member a :class:`~tfevo.training.Trainer` logs, checkpoints and
        exports as the run's best (:attr:`best_genome`, :attr:`best_fitness`: the elite and its mean
        over all its evaluations, not the luckiest single evaluation)."""
        return tf.identity(self.best_genome), tf.identity(self.best_fitness)

    def metrics(self) -> dict:
        """The elite's mean fitness and evaluation count, and those of the run's best (Trainer logs)."""
        n = float(self.eval_count[0].numpy())
        return {"elite_mean": float(self.eval_sum[0].numpy()) / n if n > 0 else float("nan"),
                "elite_evaluations": n, "best_evaluations": float(self.best_evaluations.numpy())}

    @property
    def best(self):
        """``(parameters [D], fitness)`` of the elite, with its mean fitness over all its evaluations."""
        return self._genome_params(self.best_genome), self.best_fitness

    @property
    def best_single(self):
        """``(parameters [D], fitness)`` of the luckiest single evaluation of the run."""
        return self._genome_params(self.best_single_genome), self.best_single_fitness


@register("strategy", "ga")
class GaussianGA(EliteBest, Algorithm):
    """Truncation-selection GA with Gaussian mutation and re-evaluated elites (Such et al. 2017).

    Args:
      num_dims: D, number of parameters.
      popsize: P (Such et al. used 1000 for Atari); default 100 (raised to fit
        ``truncation`` and ``num_elite_candidates + 2`` if those are larger).
      truncation: T, number of parents (Such et al.: 20); default 20 (``P // 2`` if ``P < 20``).
      sigma: mutation standard deviation (Such et al.: 0.002 for Atari).
      num_elite_candidates: E, members besides the elite copied unmodified into
        the next population to be re-evaluated (Such et al.: 10); 0 keeps only the elite.
        Default 10 (``P // 4`` if ``P < 12``).
      init_params: ``[P, D]`` initial population used as is, or ``[D]`` (member 0 is
        ``init_params``, the others ``init_params + init_sigma * N(0, I)``).  Default zeros ``[D]``.
      init_sigma: noise of the initial population for ``[D]`` init (default ``sigma``).
      init_fn: alternatively a function ``seed (int32 [2]) -> [P, D]`` building the
        initial population (e.g. a per-member network initializer).
      seed: random seed.

    ``tell`` must receive the population ``ask`` returned, in the same order.

    The run's best (:attr:`best_genome` = :attr:`best_params`,
    :attr:`best_fitness`, :attr:`best`, and what a
    :class:`~tfevo.training.Trainer` logs as ``best_ever``, checkpoints, and
    ``tfevo eval``/``export`` use) is the Deep GA's **elite** with its **mean
    fitness over all its evaluations**: after each ``tell``, the row carried
    over unmodified (so re-evaluated) with the highest mean (in generation 0,
    the best single evaluation).  :attr:`best_evaluations` is how many
    evaluations that mean rests on; it can go down as the elite is
    re-evaluated.  The luckiest single evaluation of the run, an optimistic
    pick on noisy tasks, is kept as :attr:`best_single_genome`,
    :attr:`best_single_fitness` (:attr:`best_single`).  This is the rule of
    :class:`~tfevo.strategies.SeedGA` (the same code, :class:`EliteBest`);
    other strategies report their highest single evaluation.

    Example:

    >>> import tensorflow as tf
    >>> ga = GaussianGA(num_dims=10, popsize=100, truncation=20, sigma=0.1, seed=0)
    >>> for _ in range(50):
    ...     x = ga.ask()
    ...     ga.tell(x, -tf.reduce_sum(x * x, axis=1))
    >>> elite = ga.elite
    """

    jit_compile = False  # XLA on CPU measured 3-10x slower here (see benchmarks/results/strategies.md)

    tell_needs_last_ask = True  # rows are matched with their evaluation history

    def __init__(self, num_dims: int, popsize: int | None = None, truncation: int | None = None, sigma: float = 0.002,
                 num_elite_candidates: int | None = None, init_params=None, init_sigma: float | None = None,
                 init_fn=None, seed: int = 0, name: str | None = None, dtype="float32"):
        popsize, truncation, num_elite_candidates = _ga_sizes(popsize, truncation, num_elite_candidates)
        super().__init__(num_dims, popsize, seed=seed, name=name, dtype=dtype)
        p, d = self.popsize, self.num_dims
        self.truncation = int(truncation)
        if not 1 <= self.truncation <= p:
            raise ConfigError(f"truncation must be in [1, popsize={p}], got {truncation}")
        self.num_elite_candidates = int(num_elite_candidates)
        if not 0 <= self.num_elite_candidates <= p - 2:
            raise ConfigError(
                f"num_elite_candidates must be in [0, popsize-2={p - 2}] (room for children), "
                f"got {num_elite_candidates}")
        self.sigma = _positive(sigma, "sigma")
        init_sigma = self.sigma if init_sigma is None else _positive(init_sigma, "init_sigma")
        pop = self._initial_population(init_params, init_sigma, init_fn, seed)
        self.population = tf.Variable(pop, trainable=False, name="population")
        self.eval_sum = tf.Variable(tf.zeros([p], self.dtype), trainable=False, name="eval_sum")
        self.eval_count = tf.Variable(tf.zeros([p], self.dtype), trainable=False, name="eval_count")
        self.elite_fitness = tf.Variable(-np.inf, dtype=self.dtype, trainable=False, name="elite_fitness")
        self._init_elite_best(pop[0])

    def _initial_population(self, init_params, init_sigma, init_fn, seed):
        p, d = self.popsize, self.num_dims
        init_seed = SeedStream(seed).split(2)[1]  # independent of the run's own stream
        if init_fn is not None:
            if init_params is not None:
                raise ConfigError("give either init_params or init_fn, not both")
            pop = tf.cast(init_fn(init_seed), self.dtype)
            if pop.shape.as_list() != [p, d]:
                raise ShapeError(f"init_fn must return shape [{p}, {d}], got {pop.shape.as_list()}")
            if not bool(tf.reduce_all(tf.math.is_finite(pop))):
                raise ConfigError("init_fn returned non-finite parameters")
            return pop
        if init_params is None:
            init_params = np.zeros([d])
        init = np.asarray(init_params, self.dtype.as_numpy_dtype)
        if not np.all(np.isfinite(init)):
            raise ConfigError("init_params must be finite")
        if init.shape == (p, d):
            return tf.constant(init)
        if init.shape != (d,):
            raise ShapeError(f"init_params must have shape [{d}] or [{p}, {d}], got {list(init.shape)}")
        noise = init_sigma * tf.random.stateless_normal([p, d], seed=init_seed, dtype=self.dtype)
        noise = tf.concat([tf.zeros([1, d], self.dtype), noise[1:]], axis=0)
        return tf.constant(init)[None, :] + noise

    @property
    def elite(self) -> tf.Tensor:
        """The current elite (member 0 of the next population) ``[D]``."""
        return tf.convert_to_tensor(self.population[0])

    @property
    def mean(self) -> tf.Tensor:
        """For a GA, the elite."""
        return self.elite

    @property
    def best_params(self) -> tf.Variable:
        """The parameters of the run's best, :attr:`best_genome` (the elite; see :class:`EliteBest`)."""
        return self.best_genome

    def _genome_params(self, genome):
        return tf.convert_to_tensor(genome)

    def _ask(self):
        return tf.identity(self.population)

    def _last_asked(self):
        return self.population

    def _tell(self, x, fitness):
        p, e, t = self.popsize, self.num_elite_candidates, self.truncation
        total, count, score, elite, keep, parents = elitist_truncation(
            self.eval_sum, self.eval_count, fitness, self.generation, e, t)
        self._track_best(x, fitness, score, count, elite)
        seed_choice, seed_noise = tf.unstack(tf.random.experimental.stateless_split(self.seeds.next(), 2))
        n_child = p - 1 - e
        choice = tf.random.stateless_uniform([n_child], seed=seed_choice, minval=0, maxval=t, dtype=tf.int32)
        children = tf.gather(x, tf.gather(parents, choice))
        children += _normal([n_child, self.num_dims], seed_noise, scale=self.sigma, dtype=self.dtype)
        self.population.assign(tf.concat([tf.gather(x, keep), children], axis=0))
        zeros = tf.zeros([n_child], self.dtype)
        self.eval_sum.assign(tf.concat([tf.gather(total, keep), zeros], axis=0))
        self.eval_count.assign(tf.concat([tf.gather(count, keep), zeros], axis=0))
        self.elite_fitness.assign(tf.gather(score, elite))
