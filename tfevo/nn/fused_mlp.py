"""One-kernel forward pass of a small population MLP (``TfevoPopulationMlp``).

For a template made only of ``Dense`` layers (plus an optional leading
``Flatten`` and ``Dropout``) with activations in :data:`FUSED_ACTIVATIONS`,
:class:`tfevo.nn.PopulationModel` runs the whole forward pass of the active
members as ONE C++ op (``custom_ops/pop_mlp.cc``) that reads each member's
weights in place from the flat ``params [P, D]``.  A rollout step of a few
hundred 64x64 members then costs one op dispatch instead of a dozen (products,
bias adds, activations), which is what dominated the step: the arithmetic is
only ~5.6k multiply-adds per member.

The dispatcher follows the package rules: the pure-TensorFlow path (the
model's ordinary layer-by-layer forward, :func:`population_mlp_reference` here)
runs instead inside XLA-compiled functions, when
``TFEVO_DISABLE_CUSTOM_OPS=1``, when the op cannot be built, or when a GPU is
visible.  Both agree to float rounding (the op's summation order differs from
the matmul's); a member's result never depends on the other members, on the
batch composition or on the number of threads.
"""

from __future__ import annotations

import dataclasses

import keras
import tensorflow as tf

from tfevo import kernels
from tfevo.core import ShapeError

__all__ = ["MlpPlan", "FUSED_ACTIVATIONS", "population_mlp", "population_mlp_reference"]

#: Keras activations the fused kernel computes, by the op's attribute name.
FUSED_ACTIVATIONS = {
    "none": keras.activations.linear,
    "relu": keras.activations.relu,
    "tanh": keras.activations.tanh,
    "sigmoid": keras.activations.sigmoid,
    "elu": keras.activations.elu,
}
_TF_ACT = {"none": None, "relu": tf.nn.relu, "tanh": tf.math.tanh, "sigmoid": tf.math.sigmoid, "elu": tf.nn.elu}


def activation_name(act) -> str | None:
    """The op's name of a Keras activation function, or ``None`` if the kernel lacks it."""
    if act is None:
        return "none"
    for name, fn in FUSED_ACTIVATIONS.items():
        if act is fn:
            return name
    return None


@dataclasses.dataclass(frozen=True)
class MlpPlan:
    """Where each Dense layer's weights sit in the flat parameter row, and its activation."""

    in_features: int  # k0: features per input row after the (optional) leading Flatten
    flatten: bool  # the template starts with Flatten (inputs [n, B, *shape] -> [n, B, k0])
    units: tuple
    w_offsets: tuple
    bias_offsets: tuple  # -1: no bias
    activations: tuple  # op names, see FUSED_ACTIVATIONS

    @property
    def op_attrs(self) -> dict:
        """The kernel's attributes."""
        return dict(units=list(self.units), w_offsets=list(self.w_offsets), bias_offsets=list(self.bias_offsets),
                    activations=list(self.activations))

    @property
    def macs(self) -> int:
        """Multiply-adds per input row."""
        k, total = self.in_features, 0
        for m in self.units:
            total += k * m
            k = m
        return total


def can_fuse(*inputs) -> bool:
    """Whether a forward being traced (or run eagerly) now may use the kernel
    (:func:`tfevo.kernels.kernel`: built, not under XLA, inputs on the host)."""
    return kernels.kernel("TfevoPopulationMlp", None, inputs) is not None


def population_mlp_reference(x, params, idx, plan: MlpPlan):
    """Pure-TensorFlow forward of :func:`population_mlp`: gather the members' rows, then layer by layer."""
    rows = tf.gather(params, idx)
    k = plan.in_features
    h = x
    for m, wo, bo, act in zip(plan.units, plan.w_offsets, plan.bias_offsets, plan.activations):
        w = tf.reshape(rows[:, wo:wo + k * m], [-1, k, m])
        h = tf.matmul(h, w)
        if bo >= 0:
            h = h + rows[:, None, bo:bo + m]
        if _TF_ACT[act] is not None:
            h = _TF_ACT[act](h)
        k = m
    return h


def run_op(x, params, idx, plan: MlpPlan):
    """The kernel itself on checked float32 tensors (no dispatch rules, no checks)."""
    return kernels.kernel("TfevoPopulationMlp", True, [x, params])(x, params, idx, **plan.op_attrs)


def population_mlp(x, params, idx, plan: MlpPlan, use_op: bool | None = None):
    """``y[i] = MLP(x[i]; weights of member idx[i])`` for ``x [n, b, k0]`` -> ``[n, b, units[-1]]``.

    Args:
      x: float32 ``[n, b, k0]``.
      params: float32 ``[P, D]``, the whole population (read in place).
      idx: int32 ``[n]`` member of each row-block, in ``[0, P)``.
      plan: the layer layout (:class:`MlpPlan`).
      use_op: force (``True``) or forbid (``False``) the C++ kernel; by
        default it runs where :func:`tfevo.kernels.kernel` allows.
    """
    x = tf.convert_to_tensor(x, tf.float32)
    params = tf.convert_to_tensor(params, tf.float32)
    idx = tf.cast(tf.convert_to_tensor(idx), tf.int32)
    if x.shape.rank != 3 or params.shape.rank != 2 or idx.shape.rank != 1:
        raise ShapeError(f"population_mlp expects x [n, b, k], params [P, D], idx [n]; got x {x.shape.as_list()}, "
                         f"params {params.shape.as_list()}, idx {idx.shape.as_list()}")
    if x.shape[2] is not None and x.shape[2] != plan.in_features:
        raise ShapeError(f"population_mlp: x has {x.shape[2]} features per row, the MLP takes {plan.in_features}")
    op = kernels.kernel("TfevoPopulationMlp", use_op, [x, params])
    if op is None:
        return population_mlp_reference(x, params, idx, plan)
    return op(x, params, idx, **plan.op_attrs)
