"""Reachability on the population's connection lists (neat-python's
``graphs.creates_cycle`` for every genome at once): the feed-forward
add-connection check rejects a new connection ``a -> b`` when ``b`` already
reaches ``a``."""

from __future__ import annotations

import tensorflow as tf

__all__ = ["reachable_from", "reachable_along", "reachable_along_dense"]


def reachable_from(adj: tf.Tensor, start: tf.Tensor) -> tf.Tensor:
    """bool [P, N]: nodes reachable from slot ``start [P]`` along ``adj [P,N,N]``."""
    n = adj.shape[-1]
    r0 = tf.one_hot(start, n, dtype=tf.float32)
    a = tf.cast(adj, tf.float32)

    def body(i, r, changed):
        nr = tf.cast((r + tf.squeeze(tf.matmul(r[:, None, :], a), 1)) > 0.0, tf.float32)
        return i + 1, nr, tf.reduce_any(nr != r)

    _, r, _ = tf.while_loop(lambda i, r, c: c & (i < n), body, (0, r0, True))
    return r > 0.0


def reachable_along_dense(i_in: tf.Tensor, i_out: tf.Tensor, edge: tf.Tensor, start: tf.Tensor, num_nodes: int) -> tf.Tensor:
    """:func:`reachable_along` without scatters (for XLA, whose CPU scatter is
    serial): each step is ``any over connections of (source reached AND
    target == node)`` on a ``[P, C, N]`` one-hot of the targets, which XLA
    fuses into one loop nest."""
    n = num_nodes
    r0 = tf.one_hot(start, n, on_value=True, off_value=False)
    to = tf.equal(i_out[..., None], tf.range(n)) & edge[..., None]  # [P, C, N]

    def body(i, r, changed):
        src = tf.gather(r, i_in, batch_dims=1)  # [P, C]
        nr = r | tf.reduce_any(to & src[..., None], 1)
        return i + 1, nr, tf.reduce_any(nr != r)

    _, r, _ = tf.while_loop(lambda i, r, c: c & (i < n), body, (0, r0, True))
    return r


def reachable_along(i_in: tf.Tensor, i_out: tf.Tensor, edge: tf.Tensor, start: tf.Tensor, num_nodes) -> tf.Tensor:
    """bool [P, N]: node slots reachable from slot ``start [P]`` along the
    connection list (slot indices ``i_in``/``i_out [P, C]``, ``edge [P, C]``
    bool).  Works on the [P, C] list (no [P, N, N] matrix), one gather and one
    segment sum per step, at most N steps (stops when nothing changes)."""
    P = tf.shape(i_in)[0]
    n = num_nodes
    r0 = tf.one_hot(start, n, on_value=True, off_value=False)
    flat_out = tf.reshape(i_out + tf.range(P)[:, None] * n, [-1])

    def body(i, r, changed):
        src = tf.gather(r, i_in, batch_dims=1) & edge
        hit = tf.math.unsorted_segment_max(tf.reshape(tf.cast(src, tf.int32), [-1]), flat_out, P * n)
        nr = r | (tf.reshape(hit, tf.stack([P, n])) > 0)
        return i + 1, nr, tf.reduce_any(nr != r)

    _, r, _ = tf.while_loop(lambda i, r, c: c & (i < n), body, (0, r0, True))
    return r

