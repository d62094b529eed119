"""NEAT network inference through the C++ kernels of ``custom_ops/neat_forward.cc``.

The pure-TensorFlow reference is :mod:`tfevo.neat.network`
(:func:`~tfevo.neat.network.transform` builds dense ``[P, N, N]`` networks and
node levels once per generation; :func:`~tfevo.neat.network.forward` and
:func:`~tfevo.neat.network.recurrent_step` evaluate them).  The kernels turn
each member into a short *program* instead -- its evaluated nodes in
(level, slot) order, each with its incoming edges -- and run the programs of
all members on TensorFlow's intra-op thread pool:

* :func:`prepare` -> a :class:`Program` (op) or a
  :class:`~tfevo.neat.network.Network` (reference), once per generation;
* :func:`forward` / :func:`recurrent_step` accept either;
* :func:`evaluate`: genomes straight to feed-forward outputs, for a network
  that runs once per generation (a supervised fitness): one kernel,
  ``TfevoNeatEvaluate``, builds each member's program in per-thread scratch
  and runs it at once, so the program tensors are never written out (at pop
  10000 x 32 node x 64 connection slots they are ~12 MB per generation);
  outputs bit for bit those of :func:`prepare` + :func:`forward`.

Dispatch (:func:`op_enabled`, through :func:`tfevo.kernels.kernel`): the
kernels run when the library is built, the code is not being traced for XLA
(``jit_compile=True``: custom ops have no XLA kernels), no GPU holds the
inputs, ``TFEVO_DISABLE_CUSTOM_OPS`` is not set, and every activation and
aggregation option is a built-in one (user-registered functions are
TensorFlow code the kernel cannot run).  Otherwise the reference runs.

Equality: the programs make the same discrete decisions as the reference
(connection-to-slot lookup, enabled mask, duplicate pairs merged, levels,
evaluation order, option resolution); node values agree to float rounding
(sums in source-slot order against the reference's matmul, C library
``exp``/``tanh`` against Eigen's), tested at ``rtol=1e-5`` in float32 and
``1e-12`` in float64 (``dtype=tf.float64``: the value type of ``forward``,
``evaluate`` and ``recurrent_step``, for ``NEATConfig.fitness_dtype``; the
genomes and programs stay float32).
"""

from __future__ import annotations

from typing import NamedTuple

import tensorflow as tf

from tfevo import kernels
from tfevo.neat import functions as F
from tfevo.neat import network as net

__all__ = ["Program", "op_enabled", "compile_programs", "prepare", "forward", "evaluate",
           "recurrent_step", "to_network"]

# Ids of the built-in functions the kernel implements (functions.py insertion order).
_BUILTIN_ACT = ("sigmoid", "tanh", "sin", "gauss", "relu", "elu", "lelu", "selu", "softplus", "identity",
                "clamped", "inv", "log", "exp", "abs", "hat", "square", "cube")
_BUILTIN_AGG = ("sum", "product", "max", "min", "maxabs", "median", "mean")


class Program(NamedTuple):
    """Compiled population (leading axis P everywhere; see ``custom_ops/neat_forward.cc``)."""

    prog: tf.Tensor  # int32 [P, N, 4]: (slot, activation, aggregation, end of edges) per evaluated node
    coef: tf.Tensor  # float32 [P, N, 2]: (bias, response) per evaluated node
    src: tf.Tensor  # int32 [P, C]: edge source slots, grouped by evaluated node
    weight: tf.Tensor  # float32 [P, C]
    count: tf.Tensor  # int32 [P]: evaluated nodes per member

    @property
    def num_slots(self) -> int:
        """N, the node slots (the recurrent state width)."""
        return self.prog.shape[1]


def _tensors(*xs):
    return [x for x in xs if isinstance(x, (tf.Tensor, tf.Variable))]


def _why_not(activations, aggregations):
    if all(a in _BUILTIN_ACT for a in activations) and all(a in _BUILTIN_AGG for a in aggregations):
        return None
    return "a user-registered activation or aggregation is among the options"


def op_enabled(activations=("sigmoid",), aggregations=("sum",), use_op=None, inputs=()) -> bool:
    """Whether the kernels run here (:func:`tfevo.kernels.kernel` for ``inputs``, and
    built-in options only): ``use_op`` None = automatic, False = reference, True =
    kernels or a :class:`~tfevo.kernels.KernelUnavailableError` saying why not."""
    return kernels.kernel("TfevoNeatForward", use_op, _tensors(*inputs),
                          unsupported=_why_not(activations, aggregations)) is not None


def compile_programs(nodes, conns, num_inputs: int, feed_forward: bool = True, activations=("sigmoid",),
                     aggregations=("sum",)) -> Program:
    """Genomes ``nodes [P, N, 5]``, ``conns [P, C, 5]`` -> :class:`Program` (kernel only)."""
    nodes, conns = tf.convert_to_tensor(nodes, tf.float32), tf.convert_to_tensor(conns, tf.float32)
    out = kernels.kernel("TfevoNeatCompile", True, [nodes, conns])(
        nodes, conns,
        num_inputs=int(num_inputs), feed_forward=bool(feed_forward),
        activations=[F.activation_id(a) for a in activations],
        aggregations=[F.aggregation_id(a) for a in aggregations])
    return Program(*out)


def prepare(nodes, conns, num_inputs: int, feed_forward: bool = True, activations=("sigmoid",),
            aggregations=("sum",), use_op=None):
    """Once per generation: a :class:`Program` when the kernels run here, else
    the reference's :class:`~tfevo.neat.network.Network`."""
    if op_enabled(activations, aggregations, use_op, (nodes, conns)):
        return compile_programs(nodes, conns, num_inputs, feed_forward, activations, aggregations)
    return net.transform(nodes, conns, num_inputs, feed_forward)


def to_network(program: Program, num_inputs: int, feed_forward: bool = True) -> net.Network:
    """The dense reference :class:`~tfevo.neat.network.Network` of a :class:`Program`
    (pure TensorFlow, XLA-compatible): what :func:`forward` runs when a program
    meets XLA or a process without the kernels.  Feed-forward programs become
    one level per evaluated node (their order is topological), so the values
    are the program's."""
    prog, coef, src, weight, count = program
    P, N, C = tf.shape(prog)[0], prog.shape[1], src.shape[1]
    k_of_edge = tf.searchsorted(prog[..., 3], tf.broadcast_to(tf.range(C, dtype=tf.int32), [P, C]), side="right")
    evaluated = tf.range(N)[None, :] < count[:, None]
    dst = tf.gather(prog[..., 0], tf.minimum(k_of_edge, N - 1), batch_dims=1)
    real = src >= 0
    pidx = tf.broadcast_to(tf.range(P)[:, None], [P, C])
    idx = tf.reshape(tf.stack([pidx, tf.where(real, src, 0), tf.where(real, dst, 0)], -1), [-1, 3])
    W = tf.scatter_nd(idx, tf.reshape(tf.where(real, weight, 0.0), [-1]), tf.stack([P, N, N]))
    M = tf.scatter_nd(idx, tf.reshape(tf.cast(real, tf.float32), [-1]), tf.stack([P, N, N])) > 0.5
    slot = tf.where(evaluated, prog[..., 0], N)  # N: dropped by the scatter below
    pn = tf.broadcast_to(tf.range(P)[:, None], [P, N])
    sidx = tf.reshape(tf.stack([pn, slot], -1), [-1, 2])

    def per_slot(v, fill):
        out = tf.tensor_scatter_nd_update(tf.fill(tf.stack([P, N + 1]), fill), sidx, tf.reshape(v, [-1]))
        return out[:, :N]

    k1 = tf.broadcast_to(tf.range(1, N + 1, dtype=tf.int32)[None], [P, N])
    lev = per_slot(k1 if feed_forward else tf.ones_like(k1), -1)
    lev = tf.where(tf.range(N)[None, :] < num_inputs, 0, lev)
    return net.Network(W, M, per_slot(coef[..., 0], 0.0), per_slot(coef[..., 1], 1.0), per_slot(prog[..., 1], -1),
                       per_slot(prog[..., 2], -1), lev, tf.reduce_max(lev))


def _kernel_for(prepared, op: str):
    """The kernel ``op`` for a program, unless the dispatch says no here (XLA, kernels unavailable)."""
    return kernels.kernel(op, None, [prepared.prog]) if isinstance(prepared, Program) else None


def _active(active):
    return tf.zeros([0], tf.bool) if active is None else tf.convert_to_tensor(active, tf.bool)


def forward(prepared, x, num_inputs: int, num_outputs: int, activations=("sigmoid",), aggregations=("sum",),
            active=None, dtype=tf.float32) -> tf.Tensor:
    """Feed-forward outputs ``[P, B, O]`` for ``x [P, B, I]`` (or ``[B, I]`` shared),
    node values in ``dtype`` (float32 or float64; the genomes' float32 weights
    are widened).

    ``active [P]`` (bool, optional): members to compute; the others get 0
    (the kernel skips them; the reference computes and zeroes them).
    """
    x = tf.convert_to_tensor(x, dtype)
    op = _kernel_for(prepared, "TfevoNeatForward")
    if op is not None:
        return op(*prepared, x, _active(active), num_inputs=int(num_inputs), num_outputs=int(num_outputs))
    if isinstance(prepared, Program):
        prepared = to_network(prepared, num_inputs, True)
    if x.shape.rank == 2:
        x = tf.broadcast_to(x[None], tf.concat([tf.shape(prepared.weights)[:1], tf.shape(x)], 0))
    y = net.forward(prepared, x, num_inputs, num_outputs, activations, aggregations, dtype)
    if active is not None:
        y = tf.where(tf.convert_to_tensor(active, tf.bool)[:, None, None], y, tf.zeros([], y.dtype))
    return y


def evaluate(nodes, conns, x, num_inputs: int, num_outputs: int, activations=("sigmoid",), aggregations=("sum",),
             active=None, use_op=None, dtype=tf.float32) -> tf.Tensor:
    """Feed-forward outputs ``[P, B, O]`` of genomes ``nodes [P, N, 5]``,
    ``conns [P, C, 5]`` on ``x [P, B, I]`` (or ``[B, I]`` shared): the same
    values as ``forward(prepare(nodes, conns, ...), x, ...)``.

    With the kernels (``use_op`` as in :func:`op_enabled`) this is one
    ``TfevoNeatEvaluate`` call (compile and forward fused per member, equal
    bit for bit to the two kernels); otherwise the reference
    (:func:`tfevo.neat.network.transform` + :func:`~tfevo.neat.network.forward`).
    ``active [P]`` (optional): other members get 0.  ``dtype``: the node
    values' type, as in :func:`forward`."""
    op = kernels.kernel("TfevoNeatEvaluate", use_op, _tensors(nodes, conns),
                        unsupported=_why_not(activations, aggregations))
    if op is not None:
        return op(
            tf.convert_to_tensor(nodes, tf.float32), tf.convert_to_tensor(conns, tf.float32),
            tf.convert_to_tensor(x, dtype), _active(active), num_inputs=int(num_inputs),
            num_outputs=int(num_outputs), activations=[F.activation_id(a) for a in activations],
            aggregations=[F.aggregation_id(a) for a in aggregations])
    prepared = net.transform(nodes, conns, num_inputs, True)
    return forward(prepared, x, num_inputs, num_outputs, activations, aggregations, active, dtype)


def recurrent_step(prepared, state, x, num_inputs: int, num_outputs: int, activations=("sigmoid",),
                   aggregations=("sum",), settle_steps: int = 1, active=None, dtype=tf.float32):
    """One recurrent step: ``(new_state [P, B, N], outputs [P, B, O])``, values in
    ``dtype`` (as :func:`forward`).

    ``active [P]`` (optional): other members keep their state and output 0.
    """
    x = tf.convert_to_tensor(x, dtype)
    state = tf.convert_to_tensor(state, dtype)
    op = _kernel_for(prepared, "TfevoNeatRecurrentStep")
    if op is not None:
        return tuple(op(
            *prepared, state, x, _active(active), num_inputs=int(num_inputs), num_outputs=int(num_outputs),
            settle_steps=int(settle_steps)))
    if isinstance(prepared, Program):
        prepared = to_network(prepared, num_inputs, False)
    if x.shape.rank == 2:
        x = tf.broadcast_to(x[None], tf.concat([tf.shape(state)[:1], tf.shape(x)], 0))
    s, y = net.recurrent_step(prepared, state, x, num_inputs, num_outputs, activations, aggregations, settle_steps,
                              dtype)
    if active is not None:
        a = tf.convert_to_tensor(active, tf.bool)[:, None, None]
        s, y = tf.where(a, s, state), tf.where(a, y, tf.zeros([], y.dtype))
    return s, y
