"""Crossover of NEAT genomes (neat-python's ``configure_crossover``) for the
whole population: the child has exactly the fitter parent's genes, each
attribute of a homologous gene (same node key / innovation marker) comes
from either parent with probability 1/2, and a homologous connection that
either parent has disabled is disabled in the child with probability 3/4
(the NEAT paper's rule, as neat-python)."""

from __future__ import annotations

import tensorflow as tf

from tfevo import random_ops as _random_ops
from tfevo.neat.genome import CONN_ENABLED, CONN_MARKER, NODE_KEY, align

__all__ = ["crossover", "crossover_given", "crossover_words"]


def crossover_words(P, N, C, seed) -> tf.Tensor:
    """The random 32-bit words ``[P, ceil((4N + 4C) / 32)]`` one crossover
    call of ``N`` node and ``C`` connection slots consumes: exactly
    TensorFlow's full-range int32 stateless draw, computed by
    :func:`tfevo.random_ops.stateless_int32_bits` (see :func:`crossover_given`)."""
    words = (4 * N + 4 * C + 31) // 32
    # = tf.random.stateless_uniform(..., minval=None, maxval=None, dtype=tf.int32), on tfevo's Philox kernel
    return _random_ops.stateless_int32_bits(tf.stack([P, words]), seed)


def _bits(raw, n):
    """``n`` coins per row from the random int32 words ``raw [P, W]``."""
    j = tf.range(n)
    w = tf.gather(raw, j // 32, axis=1)
    return tf.equal(tf.bitwise.bitwise_and(tf.bitwise.right_shift(w, (j % 32)[None, :]), 1), 1)


def crossover(nodes1, conns1, nodes2, conns2, seed) -> tuple[tf.Tensor, tf.Tensor]:
    """Children of parent pairs (parent 1 is the fitter one, row-wise).

    A child has exactly parent 1's genes (its disjoint and excess genes
    included); each attribute of a homologous gene (same node key / same
    innovation marker) comes from either parent with probability 1/2; a
    homologous connection disabled in either parent is then disabled with
    probability 3/4 (two more coins: disabled unless both are set).  All
    coins of a generation come from one draw of random bits: per node slot
    4 (bias, response, aggregation, activation), per connection slot 4
    (enabled, weight, the two disable coins).
    """
    P, N = tf.shape(nodes1)[0], tf.shape(nodes1)[1]
    C = tf.shape(conns1)[1]
    return crossover_given(nodes1, conns1, nodes2, conns2, crossover_words(P, N, C, seed))


def crossover_given(nodes1, conns1, nodes2, conns2, words) -> tuple[tf.Tensor, tf.Tensor]:
    """:func:`crossover` with its random words ``[P, ceil((4N + 4C) / 32)]``
    passed in (from :func:`crossover_words`); no random op inside, so it
    compiles with XLA."""
    P, N = tf.shape(nodes1)[0], tf.shape(nodes1)[1]
    C = tf.shape(conns1)[1]
    coins = _bits(words, 4 * N + 4 * C)
    f = tf.zeros(tf.stack([P, N, 1]), tf.bool)
    ncoin = tf.concat([f, tf.reshape(coins[:, :4 * N], tf.stack([P, N, 4]))], -1)  # key column never swaps
    found, idx = align(nodes1[..., NODE_KEY], nodes2[..., NODE_KEY])
    other = tf.gather(nodes2, idx, batch_dims=1)
    nodes = tf.where(found[..., None] & ncoin, other, nodes1)
    cc4 = tf.reshape(coins[:, 4 * N:], tf.stack([P, C, 4]))
    fc = tf.zeros(tf.stack([P, C, 2]), tf.bool)
    ccoin = tf.concat([fc, cc4[..., :2], fc[..., :1]], -1)  # enabled, weight
    found, idx = align(conns1[..., CONN_MARKER], conns2[..., CONN_MARKER])
    other = tf.gather(conns2, idx, batch_dims=1)
    conns = tf.where(found[..., None] & ccoin, other, conns1)
    off = (tf.equal(conns1[..., CONN_ENABLED], 0.0) | tf.equal(other[..., CONN_ENABLED], 0.0))
    disable = found & off & ~(cc4[..., 2] & cc4[..., 3])
    enabled_col = tf.equal(tf.range(conns1.shape[-1]), CONN_ENABLED)
    conns = tf.where(disable[..., None] & enabled_col, 0.0, conns)
    return nodes, conns

