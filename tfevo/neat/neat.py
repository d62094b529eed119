"""NEAT as an ask/tell tf.Module (tensorized speciation and reproduction)."""

from __future__ import annotations

import time
from typing import Callable

import numpy as np
import tensorflow as tf

from tfevo.core import ConfigError, FastCall, SeedStream, ShapeError, TraceCounter, arguments_checked, check_fitness, note_nonfinite, sanitize_fitness
from tfevo.neat import generation
from tfevo.neat.config import NEATConfig
from tfevo.neat.genome import CONN_DIM, NODE_DIM, Population, initial_population
from tfevo.registry import register

__all__ = ["NEAT"]

_INF = float("inf")


@register("strategy", "neat", doc="Tensorized NEAT (speciation, crossover by markers, structural mutation).")
@arguments_checked
class NEAT(tf.Module):
    """NeuroEvolution of Augmenting Topologies on NaN-padded population tensors.

    ``ask()`` returns the population ``(nodes [P,N,5], conns [P,C,5])``;
    ``tell(population, fitness [P])`` speciates it, removes stagnant species,
    allots offspring, and breeds the next population (elites, crossover by
    innovation markers, structural and attribute mutation), all as one
    compiled TensorFlow program.  All state lives in ``tf.Variable``s, so
    ``tf.train.Checkpoint(neat=algo)`` saves/restores a run exactly.

    Example:

    >>> from tfevo.neat import XOR
    >>> problem = XOR()
    >>> cfg = problem.config(pop_size=150)
    >>> algo = NEAT(cfg, seed=0)
    >>> pop = algo.ask()
    >>> algo.tell(pop, problem(pop, cfg))   # fitness [150] (float64 by default), higher is better

    ``jit_compile=True`` runs breeding (crossover, mutation, compaction) as
    XLA programs on bucketed slot widths (8, 16, 24, 32, 48, ..., full; one compile of
    a few seconds per new bucket pair, cached per config), with the random
    numbers drawn outside XLA by TensorFlow's stateless kernels.  It gives
    a different (equally reproducible) random stream than the default.

    Attributes (variables): ``nodes``, ``conns``, ``generation``,
    ``next_node_key``, ``next_marker``, species tensors ``species_*``,
    ``best_nodes``/``best_conns``/``best_fitness`` (best genome ever told),
    ``skipped_node_slots``/``skipped_conn_slots`` (structural mutations skipped
    because a genome had no free slot).
    """

    def __init__(self, config: NEATConfig, seed: int = 0, jit_compile: bool = False, name: str | None = None):
        super().__init__(name=name)
        self.jit_compile = bool(jit_compile)
        if not isinstance(config, NEATConfig):
            raise ConfigError(f"config must be a NEATConfig, got {type(config).__name__}")
        self.config = config.validate()
        cfg = self.config
        P, N, C, S = cfg.pop_size, cfg.max_nodes, cfg.max_conns, cfg.max_species
        self.popsize = P
        self.seeds = SeedStream(seed)
        nodes, conns, nk, nm = initial_population(cfg, self.seeds.next())
        self.nodes = tf.Variable(nodes, trainable=False, name="nodes")
        self.conns = tf.Variable(conns, trainable=False, name="conns")
        self.generation = tf.Variable(0, dtype=tf.int64, trainable=False, name="generation")
        self.next_node_key = tf.Variable(nk, dtype=tf.int64, trainable=False, name="next_node_key")
        self.next_marker = tf.Variable(nm, dtype=tf.int64, trainable=False, name="next_marker")
        self.next_species_key = tf.Variable(0, dtype=tf.int64, trainable=False, name="next_species_key")
        self.species_active = tf.Variable(tf.zeros([S], tf.bool), trainable=False, name="species_active")
        self.species_key = tf.Variable(tf.fill([S], tf.constant(-1, tf.int64)), trainable=False, name="species_key")
        self.species_rep_nodes = tf.Variable(tf.fill([S, N, NODE_DIM], np.nan), trainable=False, name="species_rep_nodes")
        self.species_rep_conns = tf.Variable(tf.fill([S, C, CONN_DIM], np.nan), trainable=False, name="species_rep_conns")
        fdt = cfg.fitness_tf_dtype  # fitness, species fitness and their ranking (fitness_dtype)
        self.species_best_fitness = tf.Variable(tf.fill([S], tf.constant(-_INF, fdt)), trainable=False,
                                                name="species_best_fitness")
        self.species_last_improved = tf.Variable(tf.zeros([S], tf.int64), trainable=False, name="species_last_improved")
        self.species_created = tf.Variable(tf.zeros([S], tf.int64), trainable=False, name="species_created")
        self.species_size = tf.Variable(tf.zeros([S], tf.int32), trainable=False, name="species_size")
        self.species_fitness = tf.Variable(tf.fill([S], tf.constant(-_INF, fdt)), trainable=False, name="species_fitness")
        self.member_species = tf.Variable(tf.fill([P], -1), trainable=False, name="member_species")
        # genome ids as neat-python's genome keys: children get fresh increasing
        # ids, elites keep theirs; among equal fitness the newer genome ranks first
        self.member_key = tf.Variable(tf.range(P, dtype=tf.int64), trainable=False, name="member_key")
        self.next_member_key = tf.Variable(P, dtype=tf.int64, trainable=False, name="next_member_key")
        self.best_nodes = tf.Variable(nodes[0], trainable=False, name="best_nodes")
        self.best_conns = tf.Variable(conns[0], trainable=False, name="best_conns")
        self.best_fitness = tf.Variable(tf.constant(-_INF, fdt), trainable=False, name="best_fitness")
        self.skipped_node_slots = tf.Variable(0, dtype=tf.int64, trainable=False, name="skipped_node_slots")
        self.skipped_conn_slots = tf.Variable(0, dtype=tf.int64, trainable=False, name="skipped_conn_slots")
        self._trace_counter = TraceCounter()
        self._tell_fn = None  # the traced tell shared by every NEAT with this config
        self._tell_call = None  # a FastCall of it on this object's variables (a plain object: not checkpointed)

    # ------------------------------------------------------------------
    @property
    def traces(self) -> dict[str, int]:
        """How many times ``tell`` was traced (should stay 1)."""
        return dict(self._trace_counter.counts)

    @property
    def fitness_dtype(self) -> tf.DType:
        """The type ``tell`` ranks fitness in (the config's ``fitness_dtype``)."""
        return self.config.fitness_tf_dtype

    @property
    def num_species(self) -> int:
        """Number of live species."""
        return int(tf.reduce_sum(tf.cast(self.species_active, tf.int32)))

    @property
    def num_nonfinite(self) -> int:
        """How many members had non-finite fitness in the ``tell`` calls made eagerly so far."""
        return getattr(self, "_num_nonfinite", 0)

    @property
    def best(self) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """(best nodes [N,5], best conns [C,5], its fitness) seen so far."""
        return self.best_nodes, self.best_conns, self.best_fitness

    def ask(self) -> Population:
        """The current population ``Population(nodes [P,N,5], conns [P,C,5])``."""
        return Population(tf.identity(self.nodes), tf.identity(self.conns))

    def tell(self, population, fitness) -> None:
        """Speciates ``population`` with its ``fitness [P]`` (higher is better;
        NaN/-inf = worst) and breeds the next population."""
        cfg = self.config
        if isinstance(population, (tuple, list)) and len(population) == 2:
            nodes, conns = population
        else:
            raise ShapeError("population must be the (nodes, conns) pair returned by ask()")
        nodes = tf.convert_to_tensor(nodes, tf.float32)
        conns = tf.convert_to_tensor(conns, tf.float32)
        if nodes.shape.as_list() != [cfg.pop_size, cfg.max_nodes, NODE_DIM]:
            raise ShapeError(f"nodes must have shape {[cfg.pop_size, cfg.max_nodes, NODE_DIM]}, got {nodes.shape.as_list()}")
        if conns.shape.as_list() != [cfg.pop_size, cfg.max_conns, CONN_DIM]:
            raise ShapeError(f"conns must have shape {[cfg.pop_size, cfg.max_conns, CONN_DIM]}, got {conns.shape.as_list()}")
        fitness = check_fitness(fitness, cfg.pop_size, dtype=cfg.fitness_tf_dtype)
        note_nonfinite(self, fitness)
        state = [getattr(self, n) for n in generation.State._fields]
        seeds = [self.seeds.seed, self.seeds.counter]
        if self._tell_fn is None:
            self._tell_fn, self._trace_counter = _shared_tell(cfg, self.jit_compile)
        if not tf.executing_eagerly():  # inside another tf.function: the shared program, inlined there
            self._tell_fn(state, seeds, nodes, conns, fitness)
            return
        if self._tell_call is None:
            self._tell_call = _bound_tell(self._tell_fn, state, seeds, cfg)
        try:
            self._tell_call(nodes, conns, tf.cast(fitness, cfg.fitness_tf_dtype))
        except tf.errors.InvalidArgumentError as e:
            if generation.KEY_ROOM_MESSAGE not in e.message:
                raise
            raise ConfigError(f"{generation.KEY_ROOM_MESSAGE} (node keys used: {int(self.next_node_key.numpy())}, "
                              f"markers used: {int(self.next_marker.numpy())}, pop_size={cfg.pop_size})") from None

    # ------------------------------------------------------------------
    def run(self, evaluate: Callable, generations: int, fitness_threshold: float | None = None,
            verbose: bool = False) -> dict:
        """Host loop: ``evaluate(population) -> fitness [P]`` for up to
        ``generations`` generations, stopping once the config's
        ``fitness_criterion`` (max, min or mean) of a generation's fitness
        reaches ``fitness_threshold`` (default: the config's).  Returns a summary dict
        with ``generations`` run, ``solved`` and ``best_fitness``."""
        thr = self.config.fitness_threshold if fitness_threshold is None else fitness_threshold
        if self.config.no_fitness_termination:
            thr = _INF
        solved, g = False, 0
        t0 = time.perf_counter()
        for g in range(1, int(generations) + 1):
            pop = self.ask()
            fit = evaluate(pop)
            stat = {"max": tf.reduce_max, "min": tf.reduce_min, "mean": tf.reduce_mean}[self.config.fitness_criterion]
            best_now = float(stat(sanitize_fitness(fit)))
            if best_now >= thr:
                self.tell(pop, fit)
                solved = True
                break
            self.tell(pop, fit)
            if verbose:
                print(f"gen {g}: {self.config.fitness_criterion} {best_now:.4f} species {self.num_species}")
        return {"generations": g, "solved": solved, "best_fitness": float(self.best_fitness.numpy()),
                "seconds": time.perf_counter() - t0}


# ---------------------------------------------------------------------------
# One compiled ``tell`` per distinct config, shared by every NEAT instance with
# that config: the state variables are passed as arguments (tf.function keys a
# trace on their shapes/dtypes, not their identity), so a second run with
# another seed does not trace again.
_TELL_CACHE: dict = {}


def _shared_tell(cfg: NEATConfig, jit: bool):
    key = (repr(cfg), bool(jit))
    if key not in _TELL_CACHE:
        counter = TraceCounter()

        def body(state, seed_vars, nodes, conns, fitness):
            return generation.tell(cfg, bool(jit), generation.State(*state), generation.SeedVars(*seed_vars),
                                   nodes, conns, fitness)

        # the outer tell is a graph (it slices to data-dependent widths, which
        # XLA cannot); with ``jit`` its breeding part runs as XLA programs
        _TELL_CACHE[key] = (tf.function(counter.wrap("tell", body), autograph=False), counter)
    return _TELL_CACHE[key]


def _bound_tell(shared, state: list, seeds: list, cfg: NEATConfig) -> FastCall:
    """``call(nodes, conns, fitness)``: the shared traced ``tell`` on one
    object's variables, as a :class:`~tfevo.core.FastCall` (a fixed-signature
    function whose body is one call of the shared program; its captures are
    this object's variable handles)."""
    specs = [tf.TensorSpec([cfg.pop_size, cfg.max_nodes, NODE_DIM], tf.float32),
             tf.TensorSpec([cfg.pop_size, cfg.max_conns, CONN_DIM], tf.float32),
             tf.TensorSpec([cfg.pop_size], cfg.fitness_tf_dtype)]
    concrete = shared.get_concrete_function(state, seeds, *specs)

    def call(nodes, conns, fitness):
        return concrete(state, seeds, nodes, conns, fitness)

    return FastCall(tf.function(call, input_signature=specs, autograph=False))
