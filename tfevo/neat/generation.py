"""One NEAT generation as a function of the run's state variables.

:func:`tell` is the body of :meth:`tfevo.neat.NEAT.tell` (neat-python's loop
after evaluation): remember the best genome, speciate
(:mod:`~tfevo.neat.speciation`), update stagnation and plan the offspring
(:mod:`~tfevo.neat.stagnation`, :mod:`~tfevo.neat.reproduction`), breed,
and write everything back.  It reads and assigns the variables of a
:class:`State` passed in, so one traced program serves every NEAT object
with the same config (the variables are arguments, not captures).

Speciation, the plan and breeding run on the C++ kernels where they can
(:mod:`~tfevo.neat._speciate_op`, :mod:`~tfevo.neat._breed_op`), else on
their pure-TensorFlow references; both give the same run bit for bit.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import tensorflow as tf

from tfevo import random_ops as _random_ops
from tfevo.core import SeedStream, sanitize_fitness, worst_to_finite
from tfevo.neat import _breed_op, _speciate_op
from tfevo.neat.config import NEATConfig
from tfevo.neat.genome import initial_population
from tfevo.neat.reproduction import breed_used_range

__all__ = ["State", "SeedVars", "tell", "breed", "next_seed"]

_INF = float("inf")


KEY_LIMIT = 2**24  # node keys and innovation markers are exact float32 integers below this
KEY_ROOM_MESSAGE = ("the next NEAT generation could number a node or connection past 2**24, the integers a float32 "
                    "genome tensor holds exactly, so two genes would share a number; the run stops here. Restart "
                    "from its best genomes with a smaller population or fewer structural mutations.")


class State(NamedTuple):
    """The ``tf.Variable``\\ s of a NEAT run that a generation reads and writes
    (see :class:`tfevo.neat.NEAT` for their meaning)."""

    nodes: tf.Variable
    conns: tf.Variable
    generation: tf.Variable
    next_node_key: tf.Variable
    next_marker: tf.Variable
    next_species_key: tf.Variable
    species_active: tf.Variable
    species_key: tf.Variable
    species_rep_nodes: tf.Variable
    species_rep_conns: tf.Variable
    species_best_fitness: tf.Variable
    species_last_improved: tf.Variable
    species_created: tf.Variable
    species_size: tf.Variable
    species_fitness: tf.Variable
    member_species: tf.Variable
    member_key: tf.Variable
    next_member_key: tf.Variable
    best_nodes: tf.Variable
    best_conns: tf.Variable
    best_fitness: tf.Variable
    skipped_node_slots: tf.Variable
    skipped_conn_slots: tf.Variable


class SeedVars(NamedTuple):
    """The two variables of a :class:`tfevo.core.SeedStream` (seed, counter)."""

    seed: tf.Variable
    counter: tf.Variable


def next_seed(seeds: SeedVars) -> tf.Tensor:
    """The next seed of the stream held by ``seeds``: what :meth:`SeedStream.next`
    returns, on the passed-in variables."""
    return SeedStream.mix(seeds.seed, seeds.counter.assign_add(1))


def speciate(cfg: NEATConfig, s: State, nodes, conns):
    """neat-python's speciation of the told population (kernel or reference,
    see :mod:`tfevo.neat._speciate_op`); stores the new representatives and
    next species key.  Returns (species per genome [P], live [S], keys,
    created, best fitness, last improved, used slot counts [2] or None)."""
    (sp, alive, keys, created, best_f, last_imp, nkey, rep_idx), used = _speciate_op.speciate_used(
        cfg, nodes, conns, s.species_rep_nodes.read_value(), s.species_rep_conns.read_value(),
        s.species_active.read_value(), s.species_key.read_value(), s.species_created.read_value(),
        s.species_best_fitness.read_value(), s.species_last_improved.read_value(),
        s.next_species_key.read_value(), s.generation.read_value())
    safe = tf.maximum(rep_idx, 0)
    s.species_rep_nodes.assign(tf.where(alive[:, None, None], tf.gather(nodes, safe), np.nan))
    s.species_rep_conns.assign(tf.where(alive[:, None, None], tf.gather(conns, safe), np.nan))
    s.next_species_key.assign(nkey)
    return sp, alive, keys, created, best_f, last_imp, used


def breed(cfg: NEATConfig, jit: bool, nodes, conns, p1, p2, is_elite, s_cross, s_mut, next_key, next_marker,
          used=None):
    """The children of parents ``p1``/``p2`` (elites copied): the breed kernel
    on the default path (``used``: the speciation kernel's used slot counts of
    ``nodes``/``conns``, if it ran), the reference programs with ``jit`` or
    without the kernel (:func:`tfevo.neat.reproduction.breed_used_range`)."""
    if not jit and _breed_op.use_breed_op():  # same children bit for bit
        return _breed_op.breed_population(cfg, nodes, conns, p1, p2, is_elite, s_cross, s_mut, next_key,
                                          next_marker, used)
    return breed_used_range(cfg, jit, nodes, conns, p1, p2, is_elite, s_cross, s_mut, next_key, next_marker)


def tell(cfg: NEATConfig, jit: bool, s: State, seeds: SeedVars, nodes, conns, fitness):
    """One generation: speciate the told population ``nodes``/``conns`` with
    ``fitness [P]``, remove stagnant species, allot offspring and breed the
    next population into ``s``."""
    P = cfg.pop_size
    # Keys and markers live in float32 genome tensors, exact below 2**24; one generation adds at
    # most P node keys and 3P markers (a split: a key and two markers; a new connection: one).
    # Every op of the generation waits for the check, so a refused generation writes nothing.
    nk, nm = s.next_node_key.read_value(), s.next_marker.read_value()
    room = tf.debugging.Assert((nk + P < KEY_LIMIT) & (nm + 3 * P < KEY_LIMIT),
                               [KEY_ROOM_MESSAGE, "node keys used:", nk, "markers used:", nm, "pop_size:", P])
    with tf.control_dependencies([room]):
        return _generation(cfg, jit, s, seeds, nodes, conns, fitness)


def _generation(cfg: NEATConfig, jit: bool, s: State, seeds: SeedVars, nodes, conns, fitness):
    """The body of :func:`tell`."""
    P = cfg.pop_size
    gen = s.generation.read_value()
    f = sanitize_fitness(fitness, cfg.fitness_tf_dtype)
    ff = worst_to_finite(f)
    # best genome ever
    i = tf.argmax(f, output_type=tf.int32)
    better = f[i] > s.best_fitness
    s.best_nodes.assign(tf.where(better, nodes[i], s.best_nodes))
    s.best_conns.assign(tf.where(better, conns[i], s.best_conns))
    s.best_fitness.assign(tf.where(better, f[i], s.best_fitness))

    with tf.name_scope("speciate"):
        sp, alive, keys, created, best_f, last_imp, used = speciate(cfg, s, nodes, conns)
    s.member_species.assign(sp)
    # stagnation, offspring allotment and parents: the C++ kernel
    # TfevoNeatPlan or its reference (tfevo.neat.reproduction.plan_reference)
    rnd = tf.random.experimental.stateless_split(next_seed(seeds), 8)
    # tf.random.stateless_uniform's numbers bit for bit, by the Philox kernel
    u = _random_ops.stateless_uniform([P, 5], rnd[0])
    size, alive, fit_s, best_f, last_imp, extinct, _, p1, p2, is_elite = _speciate_op.plan(
        cfg, sp, alive, keys, best_f, last_imp, ff, s.member_key.read_value(), gen, u, rnd[1])
    with tf.name_scope("breed"):
        cn, cc, nk, nm, skn, skc = breed(cfg, jit, nodes, conns, p1, p2, is_elite, rnd[2], rnd[3],
                                         s.next_node_key.read_value(), s.next_marker.read_value(), used)
    if cfg.reset_on_extinction:
        cn, cc = tf.cond(extinct, lambda: initial_population(cfg, rnd[4])[:2], lambda: (cn, cc))
        alive = alive & ~extinct
    s.nodes.assign(cn)
    s.conns.assign(cc)
    s.next_node_key.assign(nk)
    s.next_marker.assign(nm)
    s.skipped_node_slots.assign_add(skn)
    s.skipped_conn_slots.assign_add(skc)
    # species bookkeeping (stagnant species die)
    s.species_active.assign(alive)
    s.species_key.assign(tf.where(alive, keys, -1))
    s.species_created.assign(created)
    s.species_best_fitness.assign(tf.where(alive, best_f, -_INF))
    s.species_last_improved.assign(last_imp)
    s.species_size.assign(tf.where(alive, size, 0))
    s.species_fitness.assign(fit_s)
    s.species_rep_nodes.assign(tf.where(alive[:, None, None], s.species_rep_nodes, np.nan))
    s.species_rep_conns.assign(tf.where(alive[:, None, None], s.species_rep_conns, np.nan))
    fresh = s.next_member_key + tf.cumsum(tf.cast(~is_elite, tf.int64), exclusive=True)
    s.member_key.assign(tf.where(is_elite, tf.gather(s.member_key, p1), fresh))
    s.next_member_key.assign_add(tf.reduce_sum(tf.cast(~is_elite, tf.int64)))
    s.generation.assign_add(1)
    return tf.constant(0)
