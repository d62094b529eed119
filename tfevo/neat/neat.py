"""NEAT as an ask/tell tf.Module (tensorized speciation and reproduction)."""

from __future__ import annotations

import time
from typing import Callable

import numpy as np
import tensorflow as tf

from tfevo import random_ops as _random_ops
from tfevo.core import ConfigError, SeedStream, ShapeError, TraceCounter, check_fitness, sanitize_fitness, worst_to_finite
from tfevo.neat import _breed_op, _speciate_op
from tfevo.neat import operators as ops
from tfevo.neat.config import NEATConfig
from tfevo.neat.genome import CONN_DIM, NODE_DIM, Population, conn_valid, initial_population, node_valid
from tfevo.registry import register

__all__ = ["NEAT"]

_INF = float("inf")


@register("strategy", "neat", doc="Tensorized NEAT (speciation, crossover by markers, structural mutation).")
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
    >>> algo.tell(pop, problem(pop, cfg))   # fitness float32 [150], higher is better

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
        self.species_best_fitness = tf.Variable(tf.fill([S], -_INF), trainable=False, name="species_best_fitness")
        self.species_last_improved = tf.Variable(tf.zeros([S], tf.int64), trainable=False, name="species_last_improved")
        self.species_created = tf.Variable(tf.zeros([S], tf.int64), trainable=False, name="species_created")
        self.species_size = tf.Variable(tf.zeros([S], tf.int32), trainable=False, name="species_size")
        self.species_fitness = tf.Variable(tf.fill([S], -_INF), trainable=False, name="species_fitness")
        self.member_species = tf.Variable(tf.fill([P], -1), trainable=False, name="member_species")
        # genome ids as neat-python's genome keys: children get fresh increasing
        # ids, elites keep theirs; among equal fitness the newer genome ranks first
        self.member_key = tf.Variable(tf.range(P, dtype=tf.int64), trainable=False, name="member_key")
        self.next_member_key = tf.Variable(P, dtype=tf.int64, trainable=False, name="next_member_key")
        self.best_nodes = tf.Variable(nodes[0], trainable=False, name="best_nodes")
        self.best_conns = tf.Variable(conns[0], trainable=False, name="best_conns")
        self.best_fitness = tf.Variable(-_INF, trainable=False, name="best_fitness")
        self.skipped_node_slots = tf.Variable(0, dtype=tf.int64, trainable=False, name="skipped_node_slots")
        self.skipped_conn_slots = tf.Variable(0, dtype=tf.int64, trainable=False, name="skipped_conn_slots")
        self._trace_counter = TraceCounter()
        self._tell_fn = None
        self._tell_flat = None  # _FlatTell after the first eager tell
        self._breed_fn = self._breed

    # ------------------------------------------------------------------
    @property
    def traces(self) -> dict[str, int]:
        """How many times ``tell`` was traced (should stay 1)."""
        return dict(self._trace_counter.counts)

    @property
    def num_species(self) -> int:
        """Number of live species."""
        return int(tf.reduce_sum(tf.cast(self.species_active, tf.int32)))

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
        fitness = check_fitness(fitness, cfg.pop_size)
        if self._tell_fn is None:
            self._tell_fn, self._trace_counter = _shared_tell(cfg, self.jit_compile)
        if self._tell_flat is not None and tf.executing_eagerly():
            # the traced program, fed directly: the state's variable handles
            # (fixed for the life of this object) and the three tensors
            self._tell_flat(nodes, conns, fitness)
            return
        state = [getattr(self, n) for n in _STATE_NAMES]
        seeds = [self.seeds.seed, self.seeds.counter]
        self._tell_fn(state, seeds, nodes, conns, fitness)
        if tf.executing_eagerly() and nodes.dtype == fitness.dtype == tf.float32:
            self._tell_flat = _FlatTell.make(self._tell_fn, (state, seeds, nodes, conns, fitness))

    # ------------------------------------------------------------------
    def _speciate(self, nodes, conns):
        """neat-python's speciation (rules in
        :func:`tfevo.neat._speciate_op.speciate_reference`): the C++ kernel
        ``TfevoNeatSpeciate`` when built and not inside XLA, else the
        pure-TensorFlow reference; both give the same result bit for bit.
        Stores the new representatives and next species key; returns (species
        id per genome [P], live [S], keys, created, best fitness, last
        improved)."""
        sp, alive, keys, created, best_f, last_imp, nkey, rep_idx = _speciate_op.speciate(
            self.config, nodes, conns, self.species_rep_nodes.read_value(), self.species_rep_conns.read_value(),
            self.species_active.read_value(), self.species_key.read_value(), self.species_created.read_value(),
            self.species_best_fitness.read_value(), self.species_last_improved.read_value(),
            self.next_species_key.read_value(), self.generation.read_value())
        safe = tf.maximum(rep_idx, 0)
        self.species_rep_nodes.assign(tf.where(alive[:, None, None], tf.gather(nodes, safe), np.nan))
        self.species_rep_conns.assign(tf.where(alive[:, None, None], tf.gather(conns, safe), np.nan))
        self.next_species_key.assign(nkey)
        return sp, alive, keys, created, best_f, last_imp

    def _spawn(self, alive, size, fit_s, adj_s, rank, keys):
        """Offspring per species [S] (int32, sums to P), neat-python's
        ``compute_spawn`` followed by its exact adjustment (see
        :func:`tfevo.neat._speciate_op.spawn_reference`)."""
        return _speciate_op.spawn_reference(self.config, alive, size, fit_s, adj_s, rank, keys)

    def _tell(self, nodes, conns, fitness):
        cfg = self.config
        P = cfg.pop_size
        gen = self.generation.read_value()
        f = sanitize_fitness(fitness)
        ff = worst_to_finite(f)
        # best genome ever
        i = tf.argmax(f, output_type=tf.int32)
        better = f[i] > self.best_fitness
        self.best_nodes.assign(tf.where(better, nodes[i], self.best_nodes))
        self.best_conns.assign(tf.where(better, conns[i], self.best_conns))
        self.best_fitness.assign(tf.where(better, f[i], self.best_fitness))

        with tf.name_scope("speciate"):
            sp, alive, keys, created, best_f, last_imp = self._speciate(nodes, conns)
        self.member_species.assign(sp)
        # stagnation, offspring allotment and parents: the C++ kernel
        # TfevoNeatPlan or its reference (tfevo.neat._speciate_op.plan_reference)
        seeds = tf.random.experimental.stateless_split(self.seeds.next(), 8)
        # tf.random.stateless_uniform's numbers bit for bit, by the Philox kernel
        # (TensorFlow's own kernel takes ~0.3 ms of CPU for [10000, 5])
        u = _random_ops.stateless_uniform([P, 5], seeds[0])
        size, alive, fit_s, best_f, last_imp, extinct, _, p1, p2, is_elite = _speciate_op.plan(
            cfg, sp, alive, keys, best_f, last_imp, ff, self.member_key.read_value(), gen, u, seeds[1])
        with tf.name_scope("breed"):
            cn, cc, nk, nm, skn, skc = self._breed_fn(nodes, conns, p1, p2, is_elite, seeds[2], seeds[3],
                                                      self.next_node_key.read_value(), self.next_marker.read_value())
        if cfg.reset_on_extinction:
            cn, cc = tf.cond(extinct, lambda: initial_population(cfg, seeds[4])[:2], lambda: (cn, cc))
            alive = alive & ~extinct
        self.nodes.assign(cn)
        self.conns.assign(cc)
        self.next_node_key.assign(nk)
        self.next_marker.assign(nm)
        self.skipped_node_slots.assign_add(skn)
        self.skipped_conn_slots.assign_add(skc)
        # species bookkeeping (stagnant species die)
        self.species_active.assign(alive)
        self.species_key.assign(tf.where(alive, keys, -1))
        self.species_created.assign(created)
        self.species_best_fitness.assign(tf.where(alive, best_f, -_INF))
        self.species_last_improved.assign(last_imp)
        self.species_size.assign(tf.where(alive, size, 0))
        self.species_fitness.assign(fit_s)
        self.species_rep_nodes.assign(tf.where(alive[:, None, None], self.species_rep_nodes, np.nan))
        self.species_rep_conns.assign(tf.where(alive[:, None, None], self.species_rep_conns, np.nan))
        fresh = self.next_member_key + tf.cumsum(tf.cast(~is_elite, tf.int64), exclusive=True)
        self.member_key.assign(tf.where(is_elite, tf.gather(self.member_key, p1), fresh))
        self.next_member_key.assign_add(tf.reduce_sum(tf.cast(~is_elite, tf.int64)))
        self.generation.assign_add(1)
        return tf.constant(0)

    def _breed(self, nodes, conns, p1, p2, is_elite, s_cross, s_mut, next_key, next_marker):
        """Crossover + mutation on the used slot range only (+1 node slot and
        +3 connection slots, all that one mutation call can add), then the
        children are compacted (genes first) and padded back to full size.

        The random numbers are drawn here by TensorFlow's stateless kernels
        (XLA's CPU generator is ~100x slower) and passed to the two breed
        programs (:func:`_breed_programs`).  With ``jit_compile=True`` the
        widths are rounded up to buckets (8, 16, 24, 32, 48, ..., full) and the
        programs run as XLA, compiled once per bucket pair; otherwise they
        are plain graph code on the exact widths."""
        cfg = self.config
        N, C = cfg.max_nodes, cfg.max_conns
        jit = bool(getattr(self, "jit_compile", False))
        if not jit and _breed_op.use_breed_op():  # C++ kernels (custom_ops/neat_breed.cc), same children bit for bit
            return _breed_op.breed_population(cfg, nodes, conns, p1, p2, is_elite, s_cross, s_mut, next_key,
                                              next_marker)
        wn = tf.minimum(ops.used_width(node_valid(nodes)) + 1, N)
        wc = tf.minimum(ops.used_width(conn_valid(conns)) + 3, C)
        if jit:
            wn, wc = _bucket(wn, N), _bucket(wc, C)
        n, c = nodes[:, :wn], conns[:, :wc]
        P = cfg.pop_size
        words = ops.crossover_words(P, wn, wc, s_cross)
        u_all = ops.mutation_uniforms(cfg, P, wn, wc, s_mut)
        pre, post = _breed_programs(cfg, jit)
        cn, cc, nk, nm, skn, skc, pm, wr = pre(n, c, p1, p2, is_elite, words, u_all, next_key, next_marker)
        marker, nm = ops.pair_markers(pm, nm)  # TensorFlow kernels (see ops.pair_markers)
        wr = None if pm is None else (*wr, pm[4])
        cn, cc = post(cn, cc, is_elite, u_all, marker, wr)
        return (tf.ensure_shape(cn, [P, N, NODE_DIM]), tf.ensure_shape(cc, [P, C, CONN_DIM]), nk, nm, skn, skc)

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
_STATE_NAMES = ["nodes", "conns", "generation", "next_node_key", "next_marker", "next_species_key",
                "species_active", "species_key", "species_rep_nodes", "species_rep_conns", "species_best_fitness",
                "species_last_improved", "species_created", "species_size", "species_fitness", "member_species",
                "member_key", "next_member_key",
                "best_nodes", "best_conns", "best_fitness", "skipped_node_slots", "skipped_conn_slots"]
_TELL_CACHE: dict = {}


class _SeedView:
    """SeedStream interface over passed-in variables."""

    next = SeedStream.next

    def __init__(self, seed, counter):
        self.seed, self.counter = seed, counter


class _StateView:
    """Stands in for a NEAT instance inside the shared traced ``tell``."""

    def __init__(self, config, state, seed_vars):
        self.config = config
        for n, v in zip(_STATE_NAMES, state):
            setattr(self, n, v)
        self.seeds = _SeedView(*seed_vars)
        self._breed_fn = self._breed

    def __getattr__(self, name):
        attr = getattr(NEAT, name)
        return attr.__get__(self) if callable(attr) else attr


class _FlatTell:
    """The concrete ``tell`` program of one NEAT object, fed directly: its
    state's variable handles (fixed for the life of the object) and the three
    tensors, without ``tf.function``'s per-call argument binding (~0.3-0.6 ms
    per ``tell`` at pop 1000, a tenth of a generation).  A plain object, so
    checkpoint tracking ignores it."""

    __slots__ = ("_call", "_captures", "_handles")

    def __init__(self, call, captures, handles):
        self._call, self._captures, self._handles = call, captures, handles

    def __call__(self, nodes, conns, fitness):
        self._call(self._handles + [nodes, conns, fitness], self._captures)

    @staticmethod
    def make(fn, args):
        """For ``fn`` traced with ``args`` = (state variables, seed variables,
        nodes, conns, fitness); ``None`` if TensorFlow's internals differ from
        what this relies on (callers then keep the ordinary call)."""
        try:
            concrete = fn.get_concrete_function(*args)
            captures = list(concrete.captured_inputs)
            handles = [v.handle for v in tf.nest.flatten(list(args[:2]))]
            if len(handles) + 3 != len(concrete.inputs) - len(captures):
                return None
            return _FlatTell(concrete._call_flat, captures, handles)
        except Exception:  # noqa: BLE001 - private API moved: keep the ordinary call
            return None


def _shared_tell(cfg: NEATConfig, jit: bool):
    key = (repr(cfg), bool(jit))
    if key not in _TELL_CACHE:
        counter = TraceCounter()

        def body(state, seed_vars, nodes, conns, fitness):
            view = _StateView(cfg, state, seed_vars)
            view.jit_compile = bool(jit)
            return NEAT._tell(view, nodes, conns, fitness)

        # the outer tell is a graph (it slices to data-dependent widths, which
        # XLA cannot); with ``jit`` its breeding part runs as XLA programs
        _TELL_CACHE[key] = (tf.function(counter.wrap("tell", body), autograph=False), counter)
    return _TELL_CACHE[key]


def _bucket(w, full: int):
    """Slot width ``w`` rounded up to the next bucket (8, 16, 24, 32, 48,
    64, 96, ... and ``full``), so the XLA breed programs are compiled for a
    few widths only, and never work on more than 1.5x the needed width above
    16 (plain powers of two cost up to 2x, which ate the XLA gain once
    genomes grew)."""
    pts = {min(full, 8 << i) for i in range(32) if (8 << i) < 2 * full} | {full}
    pts |= {min(full, 3 * (8 << i) // 2) for i in range(1, 32) if 3 * (8 << i) // 2 < full}  # 24, 48, 96, ...
    b = tf.constant(sorted(pts), tf.int32)
    return tf.gather(b, tf.searchsorted(b, tf.reshape(w, [1]), side="left", out_type=tf.int32)[0])


_BREED_CACHE: dict = {}


def _breed_programs(cfg: NEATConfig, jit: bool):
    """Crossover + mutation + compaction given the random numbers, as two
    functions: ``pre`` (crossover, add/delete node, the add-connection
    choice) and ``post`` (write the new connections, delete connection,
    attribute mutation, compaction).  The new connections' markers are found
    between them with TensorFlow's sort and binary search
    (:func:`ops.pair_markers`; XLA's CPU binary search compares all pairs).
    With ``jit`` both are ``tf.function(jit_compile=True)`` programs (one XLA
    compile per input width); otherwise they are inlined as plain graph code.
    ``share_split_innovations`` needs ``tf.unique`` (no XLA kernel) and never
    uses XLA."""
    jit = bool(jit) and not getattr(cfg, "share_split_innovations", False)
    key = (repr(cfg), jit)
    if key not in _BREED_CACHE:
        N, C = cfg.max_nodes, cfg.max_conns

        def pre(n, c, p1, p2, is_elite, words, u_all, next_key, next_marker):
            with tf.name_scope("crossover"):
                cn, cc = ops.crossover_given(tf.gather(n, p1), tf.gather(c, p1), tf.gather(n, p2), tf.gather(c, p2),
                                             words)
            with tf.name_scope("mutate"):
                return ops.mutate_pre(cfg, cn, cc, ~is_elite, u_all, next_key, next_marker)

        def post(cn, cc, is_elite, u_all, marker, wr):
            with tf.name_scope("mutate"):
                cn, cc = ops.mutate_post(cfg, cn, cc, ~is_elite, u_all, marker, wr)
            with tf.name_scope("compact"):
                return ops.compact(cn, node_valid(cn), N), ops.compact(cc, conn_valid(cc), C)

        if jit:
            _BREED_CACHE[key] = tuple(tf.function(f, autograph=False, jit_compile=True, reduce_retracing=True)
                                      for f in (pre, post))
        else:
            _BREED_CACHE[key] = (pre, post)
    return _BREED_CACHE[key]
