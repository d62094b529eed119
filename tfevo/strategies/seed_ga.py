"""Deep GA with genomes stored as lists of random seeds (Such et al. 2017).

A member of generation ``g`` is the seed of its initial parameters followed by
the seeds of the ``g'`` Gaussian mutations on its lineage::

    theta = init_fn(s_0) + sigma * (eps(s_1) + eps(s_2) + ... + eps(s_k))

so a genome costs ``4 * (k + 2)`` bytes however large the network is (the
Nature-DQN's ~4M parameters included), and checkpoints and tf.distribute
messages stay tiny.  The population is an ``int32 [P, L]`` tensor: column 0
holds the number of seeds ``k + 1``, columns ``1..k+1`` the seeds, the rest
``-1`` padding.  ``L = max_generations + 2``.

Materialization is cheap because :class:`SeedGA` keeps the parameters of the
current parents (the top ``T`` and the re-evaluated rows) in a cache: a child
is ``parent + sigma * eps(s_new)`` (one stateless normal draw) and a copied
elite is its parent exactly.  Genomes whose parent is not cached (e.g. right
after restoring a checkpoint) are rebuilt from their full seed list, so
``decode`` is correct for any genome.  Use :meth:`SeedGA.decode` on the slice
of the population an evaluator is about to run (see
:class:`tfevo.rollout.GenomeEvaluator`), so only that subset is ever held as
full parameter vectors.

Selection and elitism follow :class:`~tfevo.strategies.GaussianGA` exactly:
truncation selection of ``T`` parents by mean fitness, the elite and
``num_elite_candidates`` candidates copied unmodified so they are
re-evaluated, the elite chosen among re-evaluated rows.  The run's best is
that elite, with its mean fitness (see :class:`SeedGA`).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from tfevo._holder import Untracked
from tfevo.core import Algorithm, AskTellError, ConfigError, ShapeError, check_fitness, sanitize_fitness
from tfevo.registry import register
from tfevo.strategies.ga import EliteBest, elitist_truncation
from tfevo.strategies.shaping import _center, _ga_sizes

__all__ = ["SeedGA"]

_SALT = 0x5EED  # second word of every mutation's stateless seed


@register("strategy", "seed_ga")
class SeedGA(EliteBest, Algorithm):
    """Truncation GA whose genomes are seed lists (Such et al. 2017's compact encoding).

    Args:
      num_dims: D, parameters per network.
      popsize: P (the paper: 1000 on Atari); default as :class:`~tfevo.strategies.GaussianGA` (100).
      truncation: T parents (the paper: 20); defaults as :class:`~tfevo.strategies.GaussianGA`.
      sigma: mutation power (the paper: 0.002 on Atari).
      num_elite_candidates: rows copied unmodified for re-evaluation besides the elite.
      max_generations: the longest lineage the genome tensor can hold: ``max_generations``
        mutations after the initial seed, so exactly ``max_generations`` ``tell`` calls
        (a :class:`~tfevo.training.Trainer` budget of ``G`` generations needs
        ``max_generations >= G``; the Trainer checks this before the first generation).
        The ``ask`` or ``tell`` that would go further raises
        :class:`~tfevo.core.ConfigError` and changes nothing.
      init_params: centre ``[D]`` of the initial population: member ``i`` starts at
        ``init_params + init_sigma * N(0, I)`` (default zeros).
      init_fn: alternatively ``seed int32 [2] -> [D]``, the initial parameters of a member
        (e.g. ``lambda s: model.init_params(1, s)[0]``).
      init_sigma: scale of the default initializer.
      seed: random seed.
      dtype: ``"float32"`` (default) or ``"float64"``: the decoded parameters
        (:meth:`decode`, :attr:`best`, :attr:`mean`), their noise and initial
        draws, the fitness ``tell`` takes and the evaluation statistics.  The
        genomes stay ``int32`` seed lists; a float64 run draws its normals in
        float64, so it is a different run from the float32 one of the same seed.

    ``tell`` must receive the genomes ``ask`` returned, in the same order (rows
    are matched with their evaluation history); any other raises
    :class:`~tfevo.core.AskTellError`.

    The run's best (:attr:`best_genome`, :attr:`best_fitness`, :attr:`best`,
    and what a :class:`~tfevo.training.Trainer` logs as ``best_ever``,
    checkpoints, and ``tfevo eval``/``export`` use) is the Deep GA's **elite**
    with its **mean fitness over all its evaluations**: after each ``tell``,
    the row carried over unmodified (so re-evaluated) with the highest mean
    (in generation 0, when nothing has been re-evaluated yet, the best single
    evaluation).  The elite is re-evaluated every generation, so this mean
    rests on more evaluations as the run goes (:attr:`best_evaluations`) and
    can go down; it is replaced only by another re-evaluated row with a higher
    mean.  The luckiest single evaluation of the run, an optimistic pick on
    noisy tasks (the maximum of ``P`` noisy draws), is kept as
    :attr:`best_single_genome`, :attr:`best_single_fitness`
    (:attr:`best_single`).  :class:`~tfevo.strategies.GaussianGA` follows the
    same rule with the same code (:class:`~tfevo.strategies.ga.EliteBest`).

    Example:

    >>> ga = SeedGA(num_dims=1000, popsize=64, truncation=8, sigma=0.05, seed=0)
    >>> g = ga.ask()                      # int32 [64, L]: seed lists
    >>> params = ga.decode(g)             # float32 [64, 1000]
    >>> ga.tell(g, -tf.reduce_sum(params ** 2, axis=1))
    """

    tell_needs_last_ask = True

    def __init__(self, num_dims: int, popsize: int | None = None, truncation: int | None = None, sigma: float = 0.002,
                 num_elite_candidates: int | None = None, max_generations: int = 1000, init_params=None, init_fn=None,
                 init_sigma: float = 0.05, seed: int = 0, name: str | None = None, dtype="float32"):
        popsize, truncation, num_elite_candidates = _ga_sizes(popsize, truncation, num_elite_candidates)
        super().__init__(num_dims, popsize, seed=seed, name=name, dtype=dtype)
        if init_params is not None and init_fn is not None:
            raise ConfigError("give either init_params or init_fn, not both")
        self._init_center = None if init_params is None else tf.constant(_center(init_params, self.num_dims, dtype=self.dtype))
        p = self.popsize
        self.truncation = int(truncation)
        if not 1 <= self.truncation <= p:
            raise ConfigError(f"truncation must be in [1, popsize={p}], got {truncation}")
        self.num_elite_candidates = int(num_elite_candidates)
        if not 0 <= self.num_elite_candidates <= p - 2:
            raise ConfigError(f"num_elite_candidates must be in [0, popsize-2={p - 2}], got {num_elite_candidates}")
        if not sigma > 0:
            raise ConfigError(f"sigma must be > 0, got {sigma}")
        if int(max_generations) < 1:
            raise ConfigError(f"max_generations must be >= 1, got {max_generations}")
        self.sigma = float(sigma)
        self.max_generations = int(max_generations)
        self.genome_length = self.max_generations + 2
        self.init_sigma = float(init_sigma)
        self._init_fn = init_fn
        L = self.genome_length
        # generation 0: one init seed per member, drawn from the run's seed
        s0 = tf.random.stateless_uniform([p], seed=[int(seed), 1], minval=0, maxval=2**31 - 1, dtype=tf.int32)
        genomes = tf.concat([tf.ones([p, 1], tf.int32), s0[:, None], -tf.ones([p, L - 2], tf.int32)], axis=1)
        self.population = tf.Variable(genomes, trainable=False, name="population")
        self.eval_sum = tf.Variable(tf.zeros([p], self.dtype), trainable=False, name="eval_sum")
        self.eval_count = tf.Variable(tf.zeros([p], self.dtype), trainable=False, name="eval_count")
        c = self.truncation + 1 + self.num_elite_candidates
        self.parent_lineage = tf.Variable(-tf.ones([c, L], tf.int32), trainable=False, name="parent_lineage")
        self._init_elite_best(genomes[0])  # the run's best: the elite and its mean (see the class doc)
        self._cache = Untracked(params=None, lineage=None)  # parent cache, never checkpointed
        self._decode_fn = None

    # -- the ask/tell seam (genomes are int32, so ask/tell are overridden) ----
    @property
    def generations_left(self) -> int:
        """How many more ``tell`` calls the genome tensor can hold (``max_generations - generation``)."""
        return self.max_generations - int(self.generation.numpy())

    def check_generations(self, generations: int, done: int = 0, field: str = "generations") -> None:
        """:class:`~tfevo.core.ConfigError` unless ``generations - done`` more tells fit in the genomes.

        A run budgeted for ``generations`` generations of which ``done`` have
        run (e.g. a :class:`~tfevo.training.Trainer` resuming) calls this
        before evaluating anything; ``field`` names the budget in the message.
        """
        need = int(generations) - int(done)
        if need > self.generations_left:
            raise ConfigError(
                f"{field} = {int(generations)} needs {need} more SeedGA generations, but max_generations = "
                f"{self.max_generations} holds {self.generations_left} more (generation {int(self.generation.numpy())} "
                f"done); set max_generations >= {int(generations)}")

    def _check_limit(self, what: str) -> None:
        if int(self.generation.numpy()) >= self.max_generations:
            raise ConfigError(
                f"SeedGA.{what}: max_generations = {self.max_generations} reached (genomes hold "
                f"{self.max_generations} mutations and {int(self.generation.numpy())} tells have been made); "
                f"nothing was changed; build the SeedGA with a larger max_generations to run longer")

    def ask(self) -> tf.Tensor:
        """The population as seed lists ``int32 [P, L]``.

        Refused (:class:`~tfevo.core.ConfigError`) once ``max_generations``
        tells have been made: the ``tell`` of that population could not store
        its children's seeds.
        """
        self._check_limit("ask")
        return tf.identity(self.population)

    def tell(self, genomes, fitness) -> None:
        if tf.executing_eagerly():
            self._check_limit("tell")
        genomes = tf.convert_to_tensor(genomes)
        if genomes.dtype != tf.int32 or genomes.shape.as_list() != [self.popsize, self.genome_length]:
            raise ShapeError(f"genomes must be int32 [{self.popsize}, {self.genome_length}], "
                             f"got {genomes.dtype.name} {genomes.shape.as_list()}")
        fitness = check_fitness(fitness, self.popsize, dtype=self.dtype)
        self._note_nonfinite(fitness)
        if self._tell_fn is None:
            def tell_body(g, fitness):
                same = tf.reduce_all(tf.equal(g, self.population))
                def skip():  # every member failed: the state stays (see Algorithm.tell)
                    self.generation.assign_add(1)
                    return tf.constant(True)

                def update():
                    return tf.cond(tf.reduce_any(tf.math.is_finite(fitness)),
                                   lambda: self._tell_graph(g, fitness), skip)

                # inside a graph the eager check cannot run: never write past the genome's last column
                room = tf.debugging.assert_less(self.generation, tf.constant(self.max_generations, tf.int64),
                                                message=f"SeedGA.tell: max_generations = {self.max_generations} "
                                                        "reached; nothing was changed")
                with tf.control_dependencies([room]):
                    return tf.cond(same, update, lambda: tf.constant(False))

            self._tell_fn = tf.function(
                self._trace_counter.wrap("tell", tell_body),
                input_signature=[tf.TensorSpec([self.popsize, self.genome_length], tf.int32),
                                 tf.TensorSpec([self.popsize], self.dtype)],
            )
        ok = self._tell_fn(genomes, fitness)
        self._raise_if_not_last_ask(ok)
        if tf.executing_eagerly():
            # refresh the parent cache (materialize the new parents once)
            self._refresh_cache(genomes)

    def _tell_graph(self, g, fitness):
        fitness = sanitize_fitness(fitness)
        p, e, t = self.popsize, self.num_elite_candidates, self.truncation
        total, count, score, elite, keep, parents = elitist_truncation(
            self.eval_sum, self.eval_count, fitness, self.generation, e, t)
        self._track_best(g, fitness, score, count, elite)
        s_choice, s_mut = tf.unstack(tf.random.experimental.stateless_split(self.seeds.next(), 2))
        n_child = p - 1 - e
        choice = tf.random.stateless_uniform([n_child], seed=s_choice, minval=0, maxval=t, dtype=tf.int32)
        child_parent = tf.gather(g, tf.gather(parents, choice))
        new_seeds = tf.random.stateless_uniform([n_child], seed=s_mut, minval=0, maxval=2**31 - 1, dtype=tf.int32)
        n = child_parent[:, 0]  # seeds so far; the new one goes to column n + 1
        cols = tf.range(self.genome_length)[None]
        children = tf.where(tf.equal(cols, (n + 1)[:, None]), new_seeds[:, None], child_parent)
        children = tf.where(tf.equal(cols, 0), (n + 1)[:, None], children)
        self.population.assign(tf.concat([tf.gather(g, keep), children], axis=0))
        zeros = tf.zeros([n_child], self.dtype)
        self.eval_sum.assign(tf.concat([tf.gather(total, keep), zeros], axis=0))
        self.eval_count.assign(tf.concat([tf.gather(count, keep), zeros], axis=0))
        self.parent_lineage.assign(tf.concat([tf.gather(g, parents), tf.gather(g, keep)], axis=0))
        self.generation.assign_add(1)
        return tf.constant(True)

    # -- materialization -------------------------------------------------------
    def _init_params(self, seed_word):
        seed = tf.stack([seed_word, tf.constant(0, tf.int32)])
        if self._init_fn is None:
            theta = self.init_sigma * tf.random.stateless_normal([self.num_dims], seed=seed, dtype=self.dtype)
            return theta if self._init_center is None else self._init_center + theta
        return tf.reshape(tf.cast(self._init_fn(seed), self.dtype), [self.num_dims])

    def _eps(self, seed_word):
        return tf.random.stateless_normal([self.num_dims], seed=tf.stack([seed_word, tf.constant(_SALT, tf.int32)]),
                                          dtype=self.dtype)

    def _rebuild(self, genome):
        """Full reconstruction of one genome from its seed list."""
        n = genome[0]
        theta = self._init_params(genome[1])

        def body(j, acc):
            return j + 1, acc + self.sigma * self._eps(genome[j + 1])

        _, theta = tf.while_loop(lambda j, acc: j < n, body, (tf.constant(1), theta))
        return theta

    def _decode_graph(self, genomes, cache_params, cache_lineage):
        L = self.genome_length
        pos = tf.range(L)[None, None]  # [1, 1, L]
        g = genomes[:, None, :]  # [n, 1, L]
        c = cache_lineage[None]  # [1, C, L]
        n_g = genomes[:, 0][:, None]  # [n, 1]
        n_c = cache_lineage[:, 0][None]  # [1, C]
        same_seed = tf.equal(g, c)  # [n, C, L]
        # exact: same length and same seeds in columns 1..n
        in_g = (pos >= 1) & (pos <= n_g[..., None])
        exact = tf.equal(n_g, n_c) & tf.reduce_all(same_seed | ~in_g, axis=2)
        # prefix: cache row is the parent (one seed shorter, all its seeds equal)
        in_c = (pos >= 1) & (pos <= n_c[..., None])
        prefix = tf.equal(n_g, n_c + 1) & tf.reduce_all(same_seed | ~in_c, axis=2)
        has_exact = tf.reduce_any(exact, 1)
        has_prefix = tf.reduce_any(prefix, 1)
        ex_i = tf.argmax(tf.cast(exact, tf.int32), 1, output_type=tf.int32)
        pre_i = tf.argmax(tf.cast(prefix, tf.int32), 1, output_type=tf.int32)
        last_seed = tf.gather(genomes, genomes[:, 0], batch_dims=1)

        # fast path: cached parent (+ one mutation); rare path: rebuild from all seeds.
        # Written to keep few [n, D] temporaries alive (n x 16 MB for a Nature-DQN).
        eps = tf.map_fn(self._eps, last_seed, fn_output_signature=tf.TensorSpec([self.num_dims], self.dtype),
                        parallel_iterations=4)
        parent = tf.where(has_exact, ex_i, pre_i)
        scale = tf.where(has_exact, tf.constant(0.0, self.dtype), tf.constant(self.sigma, self.dtype))  # an exact match is its cached parent, unchanged
        fast = tf.gather(cache_params, parent) + scale[:, None] * eps
        need = ~(has_exact | has_prefix)
        return tf.cond(
            tf.reduce_any(need),
            lambda: tf.where(need[:, None], tf.map_fn(
                self._rebuild, genomes, fn_output_signature=tf.TensorSpec([self.num_dims], self.dtype)), fast),
            lambda: fast,
        )

    def _refresh_cache(self, genomes=None):
        lineage = self.parent_lineage
        if int(tf.reduce_min(lineage[:, 0])) < 1:
            return  # no parents yet (every tell so far had no finite fitness)
        if self._cache.lineage is not None and np.array_equal(self._cache.lineage, lineage.numpy()):
            return
        # decode the new parents with the old cache (children of old parents: one draw each)
        old_p = self._cache.params if self._cache.params is not None else tf.zeros([1, self.num_dims], self.dtype)
        old_l = self._cache.lineage if self._cache.lineage is not None else -np.ones([1, self.genome_length], np.int32)
        params = self._decode(tf.convert_to_tensor(lineage), old_p, tf.constant(old_l))
        self._cache.params = params
        self._cache.lineage = lineage.numpy()

    def _decode(self, genomes, cache_params, cache_lineage):
        if self._decode_fn is None:
            self._decode_fn = tf.function(
                self._decode_graph,
                input_signature=[tf.TensorSpec([None, self.genome_length], tf.int32),
                                 tf.TensorSpec([None, self.num_dims], self.dtype),
                                 tf.TensorSpec([None, self.genome_length], tf.int32)],
            )
        return self._decode_fn(genomes, cache_params, cache_lineage)

    def decode(self, genomes) -> tf.Tensor:
        """Parameters ``[n, D]`` (in :attr:`dtype`) of seed-list genomes ``int32 [n, L]``."""
        genomes = tf.convert_to_tensor(genomes)
        if genomes.dtype != tf.int32 or genomes.shape.rank != 2 or genomes.shape[1] != self.genome_length:
            raise ShapeError(f"genomes must be int32 [n, {self.genome_length}], "
                             f"got {genomes.dtype.name} {genomes.shape.as_list()}")
        if int(self.generation.numpy()) > 0:
            self._refresh_cache()
        if self._cache.params is None:
            return self._decode(genomes, tf.zeros([1, self.num_dims], self.dtype), -tf.ones([1, self.genome_length], tf.int32))
        return self._decode(genomes, self._cache.params, tf.constant(self._cache.lineage))

    @property
    def elite(self) -> tf.Tensor:
        """The elite's genome (row 0 of the next population)."""
        return tf.convert_to_tensor(self.population[0])

    @property
    def mean(self) -> tf.Tensor:
        """For a GA, the elite's parameters ``[D]`` (decoded from its seeds)."""
        return self.decode(self.population[:1])[0]

    def _genome_params(self, genome):
        """Parameters ``[D]`` of one genome (for :attr:`best`, :attr:`best_single`)."""
        return self.decode(tf.convert_to_tensor(genome)[None])[0]
