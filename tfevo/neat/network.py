"""Whole-population inference of NEAT genomes.

``transform`` runs once per generation and turns the genome tensors into a
:class:`Network`: a dense weight matrix ``W [P, N, N]`` (``W[p, i, j]`` is the
weight of the enabled connection from slot ``i`` to slot ``j``), per-node
attributes, and for feed-forward genomes each node's topological *level*
(inputs 0, every other node 1 + the largest level among its inputs).
``forward`` then computes the nodes level by level for all members and all
input rows at once (one batched matmul per level for sum aggregation).

Recurrent networks (:func:`recurrent_step`) carry the node values as state
across calls: each step every non-input node is recomputed from the previous
step's values (a real RNN, as neat-python's ``RecurrentNetwork``), optionally
``settle_steps`` times per input.

Node semantics (both kinds): ``value = act(bias + response * agg(w_i * x_i))``
over enabled incoming connections; a node without incoming connections
aggregates to 0.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import tensorflow as tf

from tfevo.neat import functions as F
from tfevo.neat.genome import (CONN_ENABLED, CONN_WEIGHT, NODE_ACT, NODE_AGG, NODE_BIAS,
                               NODE_RESPONSE, conn_slots, conn_valid, node_valid)

__all__ = ["Network", "as_dtype", "transform", "forward", "initial_state", "recurrent_step",
           "compute_levels", "reference_forward", "reference_recurrent"]


class Network(NamedTuple):
    """Transformed population, ready for inference (all leading axis P)."""

    weights: tf.Tensor  # [P, N, N]
    mask: tf.Tensor  # [P, N, N] bool, enabled connection i -> j
    bias: tf.Tensor  # [P, N]
    response: tf.Tensor  # [P, N]
    act: tf.Tensor  # [P, N] int32
    agg: tf.Tensor  # [P, N] int32
    level: tf.Tensor  # [P, N] int32 (-1 empty slot, 0 input); unused for recurrent
    num_levels: tf.Tensor  # scalar int32, largest level in the population


def compute_levels(adj: tf.Tensor, valid: tf.Tensor, is_input: tf.Tensor) -> tf.Tensor:
    """Longest-path level of each node in a DAG given ``adj [P, N, N]`` (bool).

    Iterates ``level_j = max(1, max_i adj_ij (level_i + 1))`` until nothing
    changes (at most N rounds).  Inputs have level 0, empty slots -1.
    """
    n = tf.shape(adj)[-1]
    base = tf.where(valid, tf.where(is_input, 0, 1), -1)
    base = tf.cast(base, tf.int32)

    def body(i, lev, changed):
        cand = tf.where(adj, lev[:, :, None] + 1, 0)
        new = tf.maximum(base, tf.reduce_max(cand, axis=1))
        new = tf.where(is_input | ~valid, base, new)
        return i + 1, new, tf.reduce_any(new != lev)

    _, lev, _ = tf.while_loop(lambda i, l, c: c & (i <= n), body, (0, base, True))
    return lev


def transform(nodes: tf.Tensor, conns: tf.Tensor, num_inputs: int, feed_forward: bool = True) -> Network:
    """Builds the dense per-member network tensors once per generation."""
    nodes = tf.convert_to_tensor(nodes, tf.float32)
    conns = tf.convert_to_tensor(conns, tf.float32)
    P = tf.shape(nodes)[0]
    N = nodes.shape[1]
    C = conns.shape[1]
    i_in, i_out = conn_slots(nodes, conns)
    on = conn_valid(conns) & (tf.where(tf.math.is_nan(conns[..., CONN_ENABLED]), 0.0, conns[..., CONN_ENABLED]) > 0.5)
    w = tf.where(on, conns[..., CONN_WEIGHT], 0.0)
    pidx = tf.broadcast_to(tf.range(P)[:, None], tf.shape(i_in))
    idx = tf.reshape(tf.stack([pidx, i_in, i_out], -1), [-1, 3])
    shape = tf.stack([P, N, N])
    W = tf.scatter_nd(idx, tf.reshape(w, [-1]), shape)
    M = tf.scatter_nd(idx, tf.reshape(tf.cast(on, tf.float32), [-1]), shape) > 0.5
    valid = node_valid(nodes)
    is_input = tf.broadcast_to(tf.range(N) < num_inputs, tf.shape(valid))
    nz = lambda x, d: tf.where(tf.math.is_nan(x), d, x)  # noqa: E731
    bias = nz(nodes[..., NODE_BIAS], 0.0)
    resp = nz(nodes[..., NODE_RESPONSE], 1.0)
    act = tf.cast(nz(nodes[..., NODE_ACT], 0.0), tf.int32)
    agg = tf.cast(nz(nodes[..., NODE_AGG], 0.0), tf.int32)
    if feed_forward:
        level = compute_levels(M, valid, is_input)
    else:
        level = tf.cast(tf.where(valid, tf.where(is_input, 0, 1), -1), tf.int32)
    return Network(W, M, bias, resp, act, agg, level, tf.reduce_max(level))


def as_dtype(net: Network, dtype) -> Network:
    """``net`` with its weights, biases and responses in ``dtype`` (float32 or
    float64: the value type of :func:`forward` / :func:`recurrent_step`)."""
    dtype = tf.as_dtype(dtype)
    if net.weights.dtype == dtype:
        return net
    return net._replace(weights=tf.cast(net.weights, dtype), bias=tf.cast(net.bias, dtype),
                        response=tf.cast(net.response, dtype))


def _node_update(net: Network, values: tf.Tensor, activations, aggregations) -> tf.Tensor:
    """act(bias + response * agg(incoming)) for every slot; values [P, B, N]."""
    if tuple(aggregations) == ("sum",):
        a = tf.linalg.matmul(values, net.weights)  # [P, B, N]
    else:
        contrib = values[:, :, :, None] * net.weights[:, None, :, :]  # [P, B, Nin, Nout]
        mask = tf.broadcast_to(net.mask[:, None], tf.shape(contrib))
        a = F.aggregate(contrib, mask, net.agg[:, None, :], tuple(aggregations))
    z = net.bias[:, None, :] + net.response[:, None, :] * a
    return F.apply_activation(z, net.act[:, None, :], tuple(activations))


def forward(net: Network, x: tf.Tensor, num_inputs: int, num_outputs: int,
            activations=("sigmoid",), aggregations=("sum",), dtype=tf.float32) -> tf.Tensor:
    """Feed-forward inference: ``x [P, B, I]`` -> outputs ``[P, B, O]``, computed
    in ``dtype`` (float32, or float64 for ``fitness_dtype="float64"``)."""
    x = tf.convert_to_tensor(x, dtype)
    net = as_dtype(net, dtype)
    N = net.weights.shape[-1]
    pad = tf.zeros(tf.concat([tf.shape(x)[:2], [N - num_inputs]], 0), dtype)
    values = tf.concat([x, pad], axis=-1)
    lev = net.level[:, None, :]

    def body(l, values):
        y = _node_update(net, values, activations, aggregations)
        return l + 1, tf.where(tf.equal(lev, l), y, values)

    _, values = tf.while_loop(lambda l, v: l <= net.num_levels, body, (tf.constant(1), values))
    return values[..., num_inputs:num_inputs + num_outputs]


def initial_state(net: Network, batch: int, dtype=tf.float32) -> tf.Tensor:
    """Zero node values ``[P, B, N]`` for a recurrent network."""
    return tf.zeros([tf.shape(net.weights)[0], batch, net.weights.shape[-1]], dtype)


def recurrent_step(net: Network, state: tf.Tensor, x: tf.Tensor, num_inputs: int, num_outputs: int,
                   activations=("sigmoid",), aggregations=("sum",), settle_steps: int = 1, dtype=tf.float32):
    """One step of a recurrent population: returns ``(new_state, outputs [P, B, O])``.

    Every non-input node is recomputed from the previous values (inputs set to
    ``x``) ``settle_steps`` times, in ``dtype`` (as :func:`forward`).
    """
    x = tf.convert_to_tensor(x, dtype)
    state = tf.convert_to_tensor(state, dtype)
    net = as_dtype(net, dtype)
    upd = (net.level > 0)[:, None, :]
    values = tf.concat([x, state[..., num_inputs:]], axis=-1)
    for _ in range(int(settle_steps)):
        y = _node_update(net, values, activations, aggregations)
        values = tf.where(upd, y, values)
    return values, values[..., num_inputs:num_inputs + num_outputs]


# ---------------------------------------------------------------------------
# Straightforward per-genome reference (Python dicts), for tests and export.
def _genome_dicts(nodes: np.ndarray, conns: np.ndarray):
    nodes = np.asarray(nodes, np.float64)
    conns = np.asarray(conns, np.float64)
    nd = {}
    for r in nodes:
        if not np.isnan(r[0]):
            nd[int(r[0])] = (float(r[1]), float(r[2]), F.aggregation_name(int(r[3])), F.activation_name(int(r[4])))
    cd = []
    for r in conns:
        if not np.isnan(r[0]) and r[2] > 0.5:
            cd.append((int(r[0]), int(r[1]), float(r[3])))
    return nd, cd


def _eval_node(k, nd, incoming, values, float32: bool = True):
    bias, resp, agg, act = nd[k]
    if not float32:
        ins = [values[a] * w for a, w in incoming.get(k, [])]
        s = F.PY_AGGREGATIONS[agg](ins) if ins else F.empty_aggregation(agg)
        return F.PY_ACTIVATIONS[act](bias + resp * s)
    # float32 arithmetic, operation by operation, as in the networks: the
    # reference then ties where they tie (e.g. two sigmoids saturated at 1.0)
    f = np.float32
    ins = [f(values[a]) * f(w) for a, w in incoming.get(k, [])]
    if not ins:
        s = f(F.empty_aggregation(agg))
    elif agg in ("sum", "mean"):
        s = f(0)
        for v in ins:
            s = s + v
        s = s / f(len(ins)) if agg == "mean" else s
    elif agg == "product":
        s = f(1)
        for v in ins:
            s = s * v
    else:
        s = f(F.PY_AGGREGATIONS[agg](ins))
    z = f(bias) + f(resp) * s
    fn = F.PY32_ACTIVATIONS.get(act)
    return float(f(fn(z)) if fn is not None else f(F.PY_ACTIVATIONS[act](float(z))))


def reference_forward(nodes, conns, x, num_inputs: int, num_outputs: int, float32: bool = True) -> np.ndarray:
    """Evaluates ONE feed-forward genome on rows ``x [B, I]`` node by node in
    topological order (Kahn's algorithm) with Python floats.  With ``float32``
    (default) the inputs and every node value are rounded to float32, as they
    are in the population networks, so outputs that tie there (saturated
    activations) tie here too and an argmax picks the same action; False
    keeps every value in float64."""
    nd, cd = _genome_dicts(nodes, conns)
    incoming: dict[int, list] = {}
    for a, b, w in cd:
        incoming.setdefault(b, []).append((a, w))
    order, done = [], set(range(num_inputs))
    rest = [k for k in nd if k >= num_inputs]
    while rest:
        ready = [k for k in rest if all(a in done for a, _ in incoming.get(k, []))]
        if not ready:
            raise ValueError("genome has a cycle")
        for k in ready:
            order.append(k)
            done.add(k)
        rest = [k for k in rest if k not in done]
    out = []
    x = np.asarray(x, np.float32 if float32 else np.float64)
    for row in x.astype(np.float64):
        values = {i: float(row[i]) for i in range(num_inputs)}
        for k in order:
            values[k] = _eval_node(k, nd, incoming, values, float32)
        out.append([values[k] for k in range(num_inputs, num_inputs + num_outputs)])
    return np.asarray(out)


def reference_recurrent(nodes, conns, xs, num_inputs: int, num_outputs: int, settle_steps: int = 1,
                        float32: bool = True) -> np.ndarray:
    """Runs ONE recurrent genome over a sequence ``xs [T, I]`` (batch of one);
    ``float32`` as in :func:`reference_forward`."""
    nd, cd = _genome_dicts(nodes, conns)
    incoming: dict[int, list] = {}
    for a, b, w in cd:
        incoming.setdefault(b, []).append((a, w))
    values = {k: 0.0 for k in nd}
    outs = []
    for row in np.asarray(xs, np.float32 if float32 else np.float64).astype(np.float64):
        for i in range(num_inputs):
            values[i] = float(row[i])
        for _ in range(settle_steps):
            new = dict(values)
            for k in nd:
                if k >= num_inputs:
                    new[k] = _eval_node(k, nd, incoming, values, float32)
            values = new
        outs.append([values[k] for k in range(num_inputs, num_inputs + num_outputs)])
    return np.asarray(outs)
