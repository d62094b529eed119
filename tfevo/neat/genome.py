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

from tfevo.core import ConfigError
from tfevo.neat import functions as F
from tfevo.neat.config import NEATConfig, initial_pairs

__all__ = [
    "NODE_KEY", "NODE_BIAS", "NODE_RESPONSE", "NODE_AGG", "NODE_ACT", "NODE_DIM",
    "CONN_IN", "CONN_OUT", "CONN_ENABLED", "CONN_WEIGHT", "CONN_MARKER", "CONN_DIM",
    "Population", "init_attribute", "initial_population", "conn_slots", "node_valid",
    "conn_valid", "pair_hash", "initial_pairs", "initial_connections", "align", "used_width", "compact",
    "first_free", "random_choice", "write_row",
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
    picks (first slots of each genome), fresh random attributes.  As in
    neat-python, whose node counter is shared by the genomes it creates, every
    genome's hidden nodes get their own keys (genome ``p``'s are
    ``I+O+p*H .. I+O+p*H+H-1``), so no initial hidden node (or connection to
    or from one) is homologous to another genome's; a possible initial
    connection at position ``m`` of :func:`initial_pairs` carries marker
    ``m`` when it joins inputs and outputs only, and a marker of its genome's
    own otherwise.
    """
    P, N, C = cfg.pop_size, cfg.max_nodes, cfg.max_conns
    I, O, H = cfg.num_inputs, cfg.num_outputs, cfg.num_hidden
    seeds = tf.random.experimental.stateless_split(seed, 6)
    n_real = I + O + H
    # hidden node keys as neat-python's shared node counter gives them: genome
    # p's hidden nodes are I+O+p*H .. I+O+p*H+H-1 (no two genomes share one)
    next_key = I + O + P * H
    pairs = initial_pairs(cfg)
    n = len(pairs)
    hid_pair = np.array([a >= I + O or b >= I + O for a, b in pairs], bool)
    n_hid = int(hid_pair.sum())
    next_marker = n + P * n_hid  # a pair with a hidden node: one marker per genome, as its keys differ
    if max(next_key, next_marker) >= 2**24:
        raise ConfigError(f"pop_size * num_hidden = {P * H} initial hidden nodes ({P * n_hid} initial connections "
                          "to or from them) exceed the 2**24 node keys / innovation markers a genome tensor holds "
                          "exactly; use fewer hidden nodes or a smaller population")
    slot = tf.range(N, dtype=tf.float32)[None, :]
    row = tf.range(P, dtype=tf.float32)[:, None]
    keys = slot + tf.where(slot >= I + O, row * H, 0.0)  # [P, N]; slots past n_real become NaN below
    bias = init_attribute(cfg, "bias", [P, N], seeds[0])
    resp = init_attribute(cfg, "response", [P, N], seeds[1])
    is_input = tf.range(N) < I
    bias = tf.where(is_input, 0.0, bias)
    resp = tf.where(is_input, 1.0, resp)
    agg = tf.fill([P, N], float(F.aggregation_id(cfg.aggregation_default)))
    act = tf.fill([P, N], float(F.activation_id(cfg.activation_default)))
    nodes = tf.stack([keys, bias, resp, agg, act], axis=-1)
    nodes = tf.where((tf.range(N) < n_real)[None, :, None], nodes, np.nan)

    w = init_attribute(cfg, "weight", [P, C], seeds[2])
    en = tf.fill([P, C], 1.0 if cfg.enabled_default else 0.0)
    if n == 0:
        return nodes, tf.fill([P, C, 5], np.nan), next_key, 0
    keep = initial_connections(cfg, seeds[3])  # [P, n]
    # the kept pairs of each genome move to its first slots, in pair order
    dest = tf.where(keep, tf.cumsum(tf.cast(keep, tf.int32), axis=-1) - 1, C)  # C = dropped
    ends = tf.constant(pairs, tf.float32)  # [n, 2]
    ends = ends[None] + tf.where(ends[None] >= I + O, row[..., None] * H, 0.0)  # the genome's own hidden keys
    hid_rank = np.cumsum(hid_pair) - 1  # position among the pairs with a hidden node
    marker = tf.where(tf.constant(hid_pair)[None, :], n + row * n_hid + tf.constant(hid_rank, tf.float32)[None, :],
                      tf.range(n, dtype=tf.float32)[None, :])  # [P, n]
    rows = tf.concat([ends, marker[..., None]], -1)  # [P, n, 3]
    ij = tf.stack([tf.broadcast_to(tf.range(P)[:, None], [P, n]), dest], -1)
    ij = tf.boolean_mask(ij, keep)
    placed = tf.scatter_nd(ij, tf.boolean_mask(rows, keep), [P, C, 3])
    held = tf.scatter_nd(ij, tf.ones([tf.shape(ij)[0]], tf.bool), [P, C])
    conns = tf.stack([placed[..., 0], placed[..., 1], en, w, placed[..., 2]], axis=-1)
    conns = tf.where(held[..., None], conns, np.nan)
    return nodes, conns, next_key, next_marker


# ---------------------------------------------------------------------------
# Slot-level helpers shared by the variation and distance code

_BRUTE_MAX = 4096  # align() on static widths: all-pairs compare up to this many per row


def align(query: tf.Tensor, keys: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """Row-wise lookup: for each ``query [M, Q]`` value, whether it occurs in
    ``keys [M, K]`` and at which index (NaN never matches).  O(M K log K)."""
    Q, K = query.shape[-1], keys.shape[-1]
    if Q is not None and K is not None and Q * K <= _BRUTE_MAX:
        # static small widths (the XLA breed programs): compare all pairs,
        # which XLA fuses into one loop; its CPU sort is several times slower.
        # Same answer: the first match (ids are unique within a genome).
        eq = tf.equal(query[..., :, None], keys[..., None, :])  # NaN never equal
        return tf.reduce_any(eq, -1), tf.argmax(tf.cast(eq, tf.int8), -1, output_type=tf.int32)
    kb = tf.where(tf.math.is_nan(keys), tf.constant(np.inf, tf.float32), keys)
    order = tf.argsort(kb, axis=-1, stable=True)
    sorted_b = tf.gather(kb, order, batch_dims=1)
    q = tf.where(tf.math.is_nan(query), tf.constant(-1.0, tf.float32), query)
    pos = tf.searchsorted(sorted_b, q, side="left", out_type=tf.int32)
    pos = tf.minimum(pos, tf.shape(keys)[-1] - 1)
    found = tf.equal(tf.gather(sorted_b, pos, batch_dims=1), q) & ~tf.math.is_nan(query)
    return found, tf.gather(order, pos, batch_dims=1)


def used_width(valid: tf.Tensor) -> tf.Tensor:
    """int32 scalar: 1 + the largest slot index holding a gene in any row of
    ``valid [P, K]`` (0 if none); slicing ``[:, :used_width]`` drops only
    empty slots."""
    K = tf.shape(valid)[1]
    last = tf.reduce_max(tf.where(valid, tf.range(K)[None, :] + 1, 0))
    return last


def compact(x: tf.Tensor, valid: tf.Tensor, width=None) -> tf.Tensor:
    """Moves the gene rows of each genome ``x [P, K, D]`` to the front,
    keeping their order (empty rows after them), into a NaN tensor with
    ``width`` (default K) slots.  Fixed slots at the front (inputs/outputs)
    stay where they are because they are always valid."""
    v = tf.cast(valid, tf.int32)
    n = tf.reduce_sum(v, -1, keepdims=True)
    dest = tf.where(valid, tf.cumsum(v, -1) - 1, n + tf.cumsum(1 - v, -1) - 1)  # [P, K] new position
    P, K, D = tf.shape(x)[0], tf.shape(x)[1], x.shape[-1]
    ij = tf.stack([tf.broadcast_to(tf.range(P)[:, None], tf.shape(dest)), dest], -1)
    out = tf.fill(tf.stack([P, K if width is None else width, D]), tf.constant(np.nan, x.dtype))
    return tf.tensor_scatter_nd_update(out, ij, x)


def first_free(valid):
    free = ~valid
    return tf.argmax(tf.cast(free, tf.int8), -1, output_type=tf.int32), tf.reduce_any(free, -1)


def random_choice(mask, u):
    """A uniformly random True slot of each row of ``mask [P, K]`` from one
    uniform ``u [P]`` per row (the ``floor(u * count)``-th True slot)."""
    m = tf.cast(mask, tf.int32)
    cnt = tf.reduce_sum(m, -1)
    k = tf.minimum(tf.cast(u * tf.cast(cnt, tf.float32), tf.int32), cnt - 1)
    hit = mask & tf.equal(tf.cumsum(m, axis=-1), (k + 1)[:, None])
    return tf.argmax(tf.cast(hit, tf.int8), -1, output_type=tf.int32), cnt > 0


def write_row(x, slot, ok, row):
    """x[p, slot[p]] = row[p] where ok[p]: one O(P) scatter, not a pass over x."""
    P = tf.shape(x)[0]
    ij = tf.stack([tf.range(P), slot], -1)
    cur = tf.gather_nd(x, ij)
    return tf.tensor_scatter_nd_update(x, ij, tf.where(ok[:, None], row, cur))

