"""Tensor layout of NEAT genomes and population initialisation.

A population is two NaN-padded float32 tensors:

* ``nodes [P, N_max, 5]`` with columns ``(key, bias, response, aggregation id,
  activation id)``.  Slots ``0..I-1`` always hold the input nodes (keys
  ``0..I-1``), slots ``I..I+O-1`` the output nodes (keys ``I..I+O-1``); hidden
  nodes live in the other slots.  An empty slot is a row of NaN.
* ``conns [P, C_max, 5]`` with columns ``(in key, out key, enabled, weight,
  innovation marker)``.  An empty slot is a row of NaN.

Node keys are global (a counter shared by the population), and innovation
markers are global too: within a population the same ``(in, out)`` pair always
carries the same marker, so crossover and the compatibility distance align
homologous genes by marker.  Adding a gene writes the first NaN row; deleting
writes NaN.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import tensorflow as tf

from tfevo.neat import functions as F
from tfevo.neat.config import NEATConfig

__all__ = [
    "NODE_KEY", "NODE_BIAS", "NODE_RESPONSE", "NODE_AGG", "NODE_ACT", "NODE_DIM",
    "CONN_IN", "CONN_OUT", "CONN_ENABLED", "CONN_WEIGHT", "CONN_MARKER", "CONN_DIM",
    "Population", "init_attribute", "initial_population", "conn_slots", "node_valid",
    "conn_valid", "pair_hash", "initial_pairs", "initial_connections",
]

NODE_KEY, NODE_BIAS, NODE_RESPONSE, NODE_AGG, NODE_ACT = range(5)
NODE_DIM = 5
CONN_IN, CONN_OUT, CONN_ENABLED, CONN_WEIGHT, CONN_MARKER = range(5)
CONN_DIM = 5


class Population(NamedTuple):
    """The population tensors returned by ``NEAT.ask()``."""

    nodes: tf.Tensor  # float32 [P, N_max, 5]
    conns: tf.Tensor  # float32 [P, C_max, 5]


def node_valid(nodes: tf.Tensor) -> tf.Tensor:
    """bool [..., N]: which node slots hold a node."""
    return tf.logical_not(tf.math.is_nan(nodes[..., NODE_KEY]))


def conn_valid(conns: tf.Tensor) -> tf.Tensor:
    """bool [..., C]: which connection slots hold a connection."""
    return tf.logical_not(tf.math.is_nan(conns[..., CONN_IN]))


def pair_hash(in_key: tf.Tensor, out_key: tf.Tensor) -> tf.Tensor:
    """int64 id of an (in, out) key pair (keys are exact integers < 2**24)."""
    a = tf.cast(tf.where(tf.math.is_nan(in_key), -1.0, in_key), tf.int64)
    b = tf.cast(tf.where(tf.math.is_nan(out_key), -1.0, out_key), tf.int64)
    return a * (2**25) + b


def init_attribute(cfg: NEATConfig, name: str, shape, seed) -> tf.Tensor:
    """Fresh values of ``bias``/``response``/``weight`` as neat-python's
    FloatAttribute (gaussian clipped, or uniform within mean +- 2 stdev
    clipped to the bounds)."""
    mean = getattr(cfg, f"{name}_init_mean")
    std = getattr(cfg, f"{name}_init_stdev")
    lo, hi = getattr(cfg, f"{name}_min_value"), getattr(cfg, f"{name}_max_value")
    kind = getattr(cfg, f"{name}_init_type")
    if kind == "uniform":
        a, b = max(lo, mean - 2 * std), min(hi, mean + 2 * std)
        return tf.random.stateless_uniform(shape, seed, minval=a, maxval=b)
    v = mean + std * tf.random.stateless_normal(shape, seed)
    return tf.clip_by_value(v, lo, hi)


def conn_slots(nodes: tf.Tensor, conns: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """Node-slot indices (int32 [..., C]) of each connection's in and out node.

    Empty connection slots get an arbitrary index; mask them with
    :func:`conn_valid`.  Sorted lookup, O(C log N) per genome.
    """
    N = tf.shape(nodes)[-2]
    C = tf.shape(conns)[-2]
    lead = tf.shape(nodes)[:-2]
    keys = tf.reshape(nodes[..., NODE_KEY], tf.stack([-1, N]))
    kb = tf.where(tf.math.is_nan(keys), tf.constant(np.inf, tf.float32), keys)
    order = tf.argsort(kb, axis=-1, stable=True)
    sk = tf.gather(kb, order, batch_dims=1)
    q = tf.reshape(tf.stack([conns[..., CONN_IN], conns[..., CONN_OUT]], -2), tf.stack([-1, 2 * C]))
    q = tf.where(tf.math.is_nan(q), tf.constant(-1.0, tf.float32), q)
    pos = tf.minimum(tf.searchsorted(sk, q, side="left", out_type=tf.int32), N - 1)
    slot = tf.reshape(tf.gather(order, pos, batch_dims=1), tf.concat([lead, tf.stack([2, C])], 0))
    return slot[..., 0, :], slot[..., 1, :]


def initial_pairs(cfg: NEATConfig) -> list[tuple[int, int]]:
    """Every connection an initial genome of ``cfg`` may hold, in
    neat-python's order (inputs->hidden, hidden->outputs, inputs->outputs,
    then the self-connections of recurrent genomes); the pair at position
    ``m`` carries innovation marker ``m``.  Which of them a genome holds is
    :func:`initial_connections`' choice."""
    I, O, H = cfg.num_inputs, cfg.num_outputs, cfg.num_hidden
    mode = cfg.initial_connection
    if mode in ("unconnected", "none"):
        return []
    inputs, outputs = range(I), range(I, I + O)
    hidden = range(I + O, I + O + H)
    ih = [(i, h) for i in inputs for h in hidden]
    ho = [(h, o) for h in hidden for o in outputs]
    io = [(i, o) for i in inputs for o in outputs]
    if mode.startswith("fs_neat"):
        return io + (ih if mode == "fs_neat_hidden" else [])
    direct = mode.endswith("_direct") or H == 0
    selfs = [] if cfg.feed_forward else [(n, n) for n in list(outputs) + list(hidden)]
    return ih + ho + (io if direct else []) + selfs


def initial_connections(cfg: NEATConfig, seed) -> tf.Tensor:
    """bool ``[P, len(initial_pairs(cfg))]``: which initial pairs each genome
    holds, with neat-python's meaning of ``initial_connection``: ``full*``
    all of them; ``partial*`` a uniformly random subset of exactly
    ``round(n * connection_fraction)`` pairs (Python's rounding);
    ``fs_neat``/``fs_neat_nohidden`` one random input connected to every
    output, ``fs_neat_hidden`` to every hidden and output node."""
    P, I = cfg.pop_size, cfg.num_inputs
    pairs = initial_pairs(cfg)
    n = len(pairs)
    mode = cfg.initial_connection
    if n == 0 or mode.startswith("full"):
        return tf.ones([P, n], tf.bool)
    if mode.startswith("partial"):
        k = int(round(n * cfg.connection_fraction))
        u = tf.random.stateless_uniform([P, n], seed)
        rank = tf.argsort(tf.argsort(u, axis=-1, stable=True), axis=-1, stable=True)
        return rank < k
    chosen = tf.minimum(tf.cast(tf.random.stateless_uniform([P], seed) * I, tf.int32), I - 1)
    pin = tf.constant([a for a, _ in pairs], tf.int32)
    return tf.equal(pin[None, :], chosen[:, None])


def initial_population(cfg: NEATConfig, seed: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, int, int]:
    """Builds the initial population.

    Returns ``(nodes, conns, next_node_key, next_marker)``: input, output and
    ``num_hidden`` hidden nodes, the connections :func:`initial_connections`
    picks (first slots of each genome), fresh random attributes; the
    possible initial connections carry markers ``0..n-1``
    (:func:`initial_pairs`).
    """
    P, N, C = cfg.pop_size, cfg.max_nodes, cfg.max_conns
    I, O, H = cfg.num_inputs, cfg.num_outputs, cfg.num_hidden
    seeds = tf.random.experimental.stateless_split(seed, 6)
    n_real = I + O + H
    keys = np.full([N], np.nan, np.float32)
    keys[:n_real] = np.arange(n_real)
    keys = tf.broadcast_to(tf.constant(keys), [P, N])
    bias = init_attribute(cfg, "bias", [P, N], seeds[0])
    resp = init_attribute(cfg, "response", [P, N], seeds[1])
    is_input = tf.range(N) < I
    bias = tf.where(is_input, 0.0, bias)
    resp = tf.where(is_input, 1.0, resp)
    agg = tf.fill([P, N], float(F.aggregation_id(cfg.aggregation_default)))
    act = tf.fill([P, N], float(F.activation_id(cfg.activation_default)))
    nodes = tf.stack([keys, bias, resp, agg, act], axis=-1)
    nodes = tf.where((tf.range(N) < n_real)[None, :, None], nodes, np.nan)

    pairs = initial_pairs(cfg)
    n = len(pairs)
    w = init_attribute(cfg, "weight", [P, C], seeds[2])
    en = tf.fill([P, C], 1.0 if cfg.enabled_default else 0.0)
    if n == 0:
        return nodes, tf.fill([P, C, 5], np.nan), n_real, 0
    keep = initial_connections(cfg, seeds[3])  # [P, n]
    # the kept pairs of each genome move to its first slots, in pair order
    dest = tf.where(keep, tf.cumsum(tf.cast(keep, tf.int32), axis=-1) - 1, C)  # C = dropped
    cand = tf.constant([[a, b, m] for m, (a, b) in enumerate(pairs)], tf.float32)  # [n, 3]
    rows = tf.broadcast_to(cand[None], [P, n, 3])
    ij = tf.stack([tf.broadcast_to(tf.range(P)[:, None], [P, n]), dest], -1)
    ij = tf.boolean_mask(ij, keep)
    placed = tf.scatter_nd(ij, tf.boolean_mask(rows, keep), [P, C, 3])
    held = tf.scatter_nd(ij, tf.ones([tf.shape(ij)[0]], tf.bool), [P, C])
    conns = tf.stack([placed[..., 0], placed[..., 1], en, w, placed[..., 2]], axis=-1)
    conns = tf.where(held[..., None], conns, np.nan)
    return nodes, conns, n_real, n
