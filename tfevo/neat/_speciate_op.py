"""NEAT speciation and reproduction plan as C++ kernels: ``TfevoNeatSpeciate``
and ``TfevoNeatPlan`` (custom_ops/neat_speciate.cc).

:func:`speciate` runs the kernel when it is built and we are not inside an XLA
program, else the pure-TensorFlow reference
(:func:`tfevo.neat.speciation.speciate_reference`);
``TFEVO_DISABLE_CUSTOM_OPS=1`` forces the reference.  :func:`plan` does the
same for :func:`tfevo.neat.reproduction.plan_reference`.  Both return the same species, keys, representatives and
counters, bit for bit: the kernel computes every distance with the
reference's float operations in the reference's order (homologous-gene
distances summed in slot order; the reference uses a cumulative sum along the
slot axis for that, which TensorFlow evaluates sequentially, whereas
``reduce_sum`` would pick an order by shape).

The reference is one traced graph of a few hundred ops plus two
``while_loop``\\ s (one iteration per live species, one per new founder); the
kernel does the same work in one op: the population's genes are packed once,
a hash of the representatives' gene ids gives, per gene, its attributes in
every representative, and the distance passes run over genomes on
TensorFlow's intra-op thread pool.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from tfevo import kernels
from tfevo.neat.reproduction import plan_reference, spawn_reference
from tfevo.neat.speciation import distance_matrix, speciate_reference

__all__ = ["speciate", "speciate_used", "speciate_reference", "distance_matrix", "plan", "plan_reference",
           "spawn_reference"]


def speciate(cfg, nodes, conns, rep_nodes, rep_conns, active, keys, created, best_f, last_imp, nkey, gen,
             use_op=None):
    """Speciation of ``nodes [P, N, 5]``, ``conns [P, C, 5]`` against the old
    representatives ``rep_nodes [S, N, 5]``, ``rep_conns [S, C, 5]`` and the
    species state (``active [S]`` bool, ``keys``/``created``/``last_imp [S]``
    int64, ``best_f [S]`` float32 or float64, ``nkey`` and ``gen`` int64 scalars); see
    :func:`speciate_reference` for the rules and the returned tuple.

    ``use_op``: ``None`` = the C++ kernel where :func:`tfevo.kernels.kernel`
    allows, ``False`` = the reference, ``True`` = the kernel or an error."""
    return speciate_used(cfg, nodes, conns, rep_nodes, rep_conns, active, keys, created, best_f, last_imp, nkey, gen,
                         use_op)[0]


def speciate_used(cfg, nodes, conns, rep_nodes, rep_conns, active, keys, created, best_f, last_imp, nkey, gen,
                  use_op=None):
    """(:func:`speciate`'s tuple, ``used``): ``used`` int32 [2] is 1 + the last
    valid node / connection slot of any genome, which the kernel finds in its
    pass over every row (what ``TfevoNeatBreedWidths`` would scan for again);
    ``None`` on the reference path."""
    args = [tf.convert_to_tensor(nodes, tf.float32), tf.convert_to_tensor(conns, tf.float32),
            tf.convert_to_tensor(rep_nodes, tf.float32), tf.convert_to_tensor(rep_conns, tf.float32),
            tf.convert_to_tensor(active, tf.bool), tf.convert_to_tensor(keys, tf.int64),
            tf.convert_to_tensor(created, tf.int64), fitness_tensor(best_f, cfg),
            tf.convert_to_tensor(last_imp, tf.int64), tf.convert_to_tensor(nkey, tf.int64),
            tf.convert_to_tensor(gen, tf.int64)]
    op = kernels.kernel("TfevoNeatSpeciate", use_op, args[:2])
    if op is None:
        return speciate_reference(cfg, *args), None
    bits = lambda x: int(np.float64(x).view(np.int64))  # noqa: E731
    out = op(*args, num_inputs=int(cfg.num_inputs),
             threshold=float(cfg.compatibility_threshold),
             disjoint_coefficient=float(cfg.compatibility_disjoint_coefficient),
             weight_coefficient=float(cfg.compatibility_weight_coefficient),
             double_distances=cfg.distance_dtype == "float64",
             threshold_bits=bits(cfg.compatibility_threshold),
             disjoint_coefficient_bits=bits(cfg.compatibility_disjoint_coefficient),
             weight_coefficient_bits=bits(cfg.compatibility_weight_coefficient))
    return tuple(out[:8]), out[8]


def fitness_tensor(x, cfg, dtype=None):
    """``x`` as a float tensor: float32 and float64 kept (the kernels run in
    either), anything else cast to ``dtype`` or the config's ``fitness_dtype``."""
    x = tf.convert_to_tensor(x)
    if dtype is not None:
        return tf.cast(x, dtype)
    return x if x.dtype in (tf.float32, tf.float64) else tf.cast(x, cfg.fitness_tf_dtype)


# ---------------------------------------------------------------------------
# After speciation: species fitness, stagnation, offspring allotment, parents


def plan(cfg, sp, alive, keys, best_f, last_imp, ff, member_key, gen, u, seed_other=None, use_op=None):
    """:func:`plan_reference` as the C++ kernel ``TfevoNeatPlan`` when it is
    allowed (:func:`tfevo.kernels.kernel`) and ``interspecies_crossover_prob == 0`` (the
    other species' draw is TensorFlow's categorical sampler, so that case
    always runs the reference).  Same outputs bit for bit."""
    why = "interspecies_crossover_prob > 0" if cfg.interspecies_crossover_prob > 0 else None
    op = kernels.kernel("TfevoNeatPlan", use_op, [t for t in (ff, u) if isinstance(t, tf.Tensor)], unsupported=why)
    ff = fitness_tensor(ff, cfg)  # float32 or float64: the kernel's T, the reference's arithmetic
    fdt = ff.dtype
    best_f = fitness_tensor(best_f, cfg, fdt)
    if op is None:
        return plan_reference(cfg, sp, alive, keys, best_f, last_imp, ff, member_key, gen, u, seed_other)
    out = op(
        tf.convert_to_tensor(sp, tf.int32), tf.convert_to_tensor(alive, tf.bool), tf.convert_to_tensor(keys, tf.int64),
        best_f, tf.convert_to_tensor(last_imp, tf.int64),
        ff, tf.convert_to_tensor(member_key, tf.int64),
        tf.convert_to_tensor(gen, tf.int64), tf.convert_to_tensor(u, tf.float32),
        species_fitness=cfg.species_fitness_func, max_stagnation=int(cfg.max_stagnation),
        species_elitism=int(cfg.species_elitism), reset_on_extinction=bool(cfg.reset_on_extinction),
        min_size=int(max(cfg.min_species_size, cfg.elitism)), rank_allotment=cfg.allotment == "rank",
        change_rate=float(cfg.spawn_number_change_rate), elitism=int(cfg.elitism),
        change_rate_bits=int(np.float64(cfg.spawn_number_change_rate).view(np.int64)),
        survival_threshold_bits=int(np.float64(cfg.survival_threshold).view(np.int64)), crossover_prob=float(cfg.crossover_prob))
    return tuple(out)
