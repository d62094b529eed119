"""NEAT breeding as one C++ CPU kernel (``custom_ops/neat_breed.cc``).

:func:`breed_population` is what a NEAT generation calls on its default
(graph) path: crossover by markers, structural mutation (add/delete node,
add connection with the feed-forward cycle check, delete connection),
innovation markers of the new connections, attribute mutation and
compaction, for the whole population in one kernel, given the random
numbers drawn outside (:func:`tfevo.neat.crossover.crossover_words`,
:func:`tfevo.neat.mutation.mutation_uniforms`: ``tf.random.stateless_uniform``'s
numbers, computed by :mod:`tfevo.random_ops`'s Philox kernel).

The pure-TensorFlow reference is
:func:`tfevo.neat.reproduction.breed_reference`.  Both consume the same random numbers
the same way, and the kernel gives the reference's children bit for bit:
structure, node keys, innovation markers, counters, skip counts and every
float attribute (its float32 arithmetic follows the reference's order and
constants, divisions by constants as Grappler rewrites them, and the
Box-Muller normal uses Eigen's AVX packet log1p/cos as TensorFlow's CPU
kernels do; on a machine without AVX the normals agree to a few ulp).

The reference is used under XLA (``NEAT(..., jit_compile=True)``), with
``TFEVO_DISABLE_CUSTOM_OPS=1``, or when the kernel cannot be built.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from tfevo import kernels
from tfevo import random_ops as _random_ops
from tfevo.neat import functions as F
from tfevo.neat.config import NEATConfig
from tfevo.neat.genes import attr_columns, enabled_rates, replace_width
from tfevo.neat.mutation import structural_cuts
from tfevo.neat.genome import CONN_DIM, NODE_DIM
from tfevo.neat.reproduction import breed_reference

__all__ = ["breed", "breed_population", "breed_reference", "use_breed_op", "op_attrs"]

_ATTRS: dict = {}


def use_breed_op(*inputs) -> bool:
    """Whether :func:`breed` runs the kernel at this call site (:func:`tfevo.kernels.kernel`:
    built, not XLA-compiled, ``inputs`` on the host)."""
    return kernels.kernel("TfevoNeatBreed", None, inputs) is not None


def _f32(x) -> float:
    """The float32 value TensorFlow makes of a Python float constant."""
    return float(np.float32(x))


def _inv32(x) -> float:
    """``1 / float32(x)`` in float32: Grappler's constant folding turns the
    reference's ``t / c`` into ``t * (1 / c)``, which rounds differently."""
    return float(np.float32(1.0) / np.float32(x))


def _float_params(cfg: NEATConfig, name: str) -> list[float]:
    rate, rep = getattr(cfg, f"{name}_mutate_rate"), getattr(cfg, f"{name}_replace_rate")
    mean, std = getattr(cfg, f"{name}_init_mean"), getattr(cfg, f"{name}_init_stdev")
    lo, hi = getattr(cfg, f"{name}_min_value"), getattr(cfg, f"{name}_max_value")
    uniform = getattr(cfg, f"{name}_init_type") == "uniform"
    if uniform:  # genes.fresh_float: a + (b - a) * v01
        a, b = max(lo, mean - 2 * std), min(hi, mean + 2 * std)
        c0, c1 = a, b - a
    else:  # clip(mean + std * gauss, lo, hi)
        c0, c1 = mean, std
    return [float(rate > 0 or rep > 0), _f32(rate), _f32(rate + rep), _inv32(max(rate, 1e-30)),
            _inv32(max(replace_width(rate, rep), 1e-30)),
            _f32(getattr(cfg, f"{name}_mutate_power")), _f32(lo), _f32(hi), float(uniform), _f32(c0), _f32(c1), 0.0]


def op_attrs(cfg: NEATConfig) -> dict:
    """The kernel's attrs for ``cfg``: every constant as the float32 the
    reference's TensorFlow ops round it to (cached per config)."""
    key = repr(cfg)
    if key not in _ATTRS:
        ncols, kn, ccols, kc = attr_columns(cfg)
        col = lambda d, a: d[a][0] if a in d else -1  # noqa: E731
        en_on, en_off = enabled_rates(cfg)  # the enabled flag's rate for an enabled / disabled connection
        _ATTRS[key] = dict(
            max_nodes=cfg.max_nodes, max_conns=cfg.max_conns, num_inputs=cfg.num_inputs,
            num_outputs=cfg.num_outputs, feed_forward=bool(cfg.feed_forward),
            surer=bool(getattr(cfg, "structural_mutation_surer", False)),
            share_split=bool(getattr(cfg, "share_split_innovations", False)),
            single_structural=bool(getattr(cfg, "single_structural_mutation", False)),
            per_generation=bool(getattr(cfg, "per_generation_innovations", True)),
            cuts=structural_cuts(cfg),
            probs=[_f32(cfg.node_add_prob), _f32(cfg.node_delete_prob), _f32(cfg.conn_add_prob),
                   _f32(cfg.conn_delete_prob)],
            defaults=[float(F.aggregation_id(cfg.aggregation_default)), float(F.activation_id(cfg.activation_default)),
                      1.0 if cfg.enabled_default else 0.0],
            bias_params=_float_params(cfg, "bias"), response_params=_float_params(cfg, "response"),
            weight_params=_float_params(cfg, "weight"),
            activation_ids=[float(F.activation_id(n)) for n in cfg.activation_options],
            aggregation_ids=[float(F.aggregation_id(n)) for n in cfg.aggregation_options],
            rates=[_f32(cfg.activation_mutate_rate), _f32(cfg.aggregation_mutate_rate), _f32(en_on),
                   _f32(0.5 * min(en_on, 1.0)), _inv32(max(cfg.activation_mutate_rate, 1e-30)),
                   _inv32(max(cfg.aggregation_mutate_rate, 1e-30)), _f32(en_off), _f32(0.5 * min(en_off, 1.0))],
            columns=[kn, col(ncols, "bias"), col(ncols, "response"), col(ncols, "activation"),
                     col(ncols, "aggregation"), kc, col(ccols, "weight"), col(ccols, "enabled")])
    return _ATTRS[key]


def breed(cfg: NEATConfig, nodes, conns, p1, p2, is_elite, words, u_all, next_key, next_marker,
          use_op: bool | None = None):
    """:func:`breed_reference` computed by the C++ kernel where :func:`tfevo.kernels.kernel`
    allows (``use_op=None``), else by the reference; ``use_op=True`` requires the kernel."""
    op = kernels.kernel("TfevoNeatBreed", use_op, [t for t in (nodes, conns) if isinstance(t, tf.Tensor)])
    if op is None:
        return breed_reference(cfg, nodes, conns, p1, p2, is_elite, words, u_all, next_key, next_marker)
    nodes = tf.convert_to_tensor(nodes, tf.float32)
    conns = tf.convert_to_tensor(conns, tf.float32)
    widths = tf.stack([tf.shape(nodes)[1], tf.shape(conns)[1]])
    return _call(op, cfg, nodes, conns, widths, p1, p2, is_elite, words, u_all, next_key, next_marker)


def _call(op, cfg, nodes, conns, widths, p1, p2, is_elite, words, u_all, next_key, next_marker):
    P = cfg.pop_size
    cn, cc, nk, nm, skn, skc = op(
        nodes, conns, widths, tf.cast(p1, tf.int32), tf.cast(p2, tf.int32), tf.cast(is_elite, tf.bool),
        tf.convert_to_tensor(words, tf.int32), tf.convert_to_tensor(u_all, tf.float32),
        tf.cast(next_key, tf.int64), tf.cast(next_marker, tf.int64), **op_attrs(cfg))
    return (tf.ensure_shape(cn, [P, cfg.max_nodes, NODE_DIM]), tf.ensure_shape(cc, [P, cfg.max_conns, CONN_DIM]),
            nk, nm, skn, skc)


def breed_population(cfg: NEATConfig, nodes, conns, p1, p2, is_elite, s_cross, s_mut, next_key, next_marker,
                     used=None):
    """The next population's breeding with the kernels (the default path of
    :func:`tfevo.neat.generation.breed`): the bred slot
    range (used width + 1 node and + 3 connection slots, one small kernel
    instead of ~10 TensorFlow ops), the random numbers of that range
    (exactly ``tf.random.stateless_uniform``'s, drawn by the Philox kernel of
    :mod:`tfevo.random_ops`), then :func:`breed` on the full-width tensors
    (no slicing copies).  ``used``: the speciation kernel's used slot counts
    of these same tensors (:func:`tfevo.neat._speciate_op.speciate_used`),
    which spares the widths kernel its scan of the padded rows."""
    nodes = tf.convert_to_tensor(nodes, tf.float32)
    conns = tf.convert_to_tensor(conns, tf.float32)
    op = kernels.kernel("TfevoNeatBreed", True, [nodes, conns])
    _, kn, _, kc = attr_columns(cfg)
    if used is None:
        widths, words_shape, u_shape = kernels.kernel("TfevoNeatBreedWidths", True, [nodes, conns])(
            nodes, conns, node_extra=1, conn_extra=3, kn=kn, kc=kc)
    else:
        widths, words_shape, u_shape = kernels.kernel("TfevoNeatBreedShapes", True, [nodes, conns])(
            used, node_width=int(nodes.shape[1]), conn_width=int(conns.shape[1]), pop_size=int(nodes.shape[0]),
            node_extra=1, conn_extra=3, kn=kn, kc=kc)
    # the draws of crossover_words / mutation_uniforms (same shapes, same seeds: same numbers),
    # tf.random.stateless_uniform's exact numbers on tfevo's Philox kernel (random_ops)
    words = _random_ops.stateless_int32_bits(words_shape, s_cross)
    u_all = _random_ops.stateless_uniform(u_shape, s_mut)
    return _call(op, cfg, nodes, conns, widths, p1, p2, is_elite, words, u_all, next_key, next_marker)


def bred_widths(nodes, conns):
    """The kernel's (wn, wc) for full-width populations (for tests)."""
    return kernels.kernel("TfevoNeatBreedWidths", True)(nodes, conns, node_extra=1, conn_extra=3, kn=0, kc=0)[0]
