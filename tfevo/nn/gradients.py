"""Gradients of the C++ population kernels, so population layers stay ordinary Keras layers.

Each kernel's gradient is its pure-TensorFlow reference's gradient: the reference forward is rebuilt
from the op's inputs and attributes under a ``tf.GradientTape`` and differentiated with the
incoming gradient (after the fused ReLU's mask, taken from the op's own output).  So ``model.fit``
with :class:`~tfevo.nn.PopulationDense` / :class:`~tfevo.nn.PopulationConv2D`, or a
``GradientTape`` over :class:`~tfevo.nn.PopulationModel`'s in-place forward, trains exactly as the
reference would (tested against it).  Importing this module registers the gradients once.
"""

from __future__ import annotations

import tensorflow as tf

from tfevo.nn.layers import population_conv2d

__all__ = ["REGISTERED"]

REGISTERED: list = []


def _register(name):
    def deco(fn):
        try:
            tf.RegisterGradient(name)(fn)
        except KeyError:  # registered already (module reloaded)
            pass
        REGISTERED.append(name)
        return fn

    return deco


def _relu_mask(op, dy):
    act = op.get_attr("activation")
    act = act.decode() if isinstance(act, bytes) else act
    return dy * tf.cast(op.outputs[0] > 0, dy.dtype) if act == "relu" else dy


def _tape_grads(fn, sources, dy):
    with tf.GradientTape() as tape:
        for s in sources:
            tape.watch(s)
        y = fn(*sources)
    grads = tape.gradient(y, sources, output_gradients=dy)
    return [None if g is None else tf.convert_to_tensor(g) for g in grads]  # IndexedSlices from gathers


@_register("TfevoIndexedMatmul")
def _indexed_matmul_grad(op, dy):
    """Reference ``x @ gather(w, idx)``: ``dx = dy @ w[idx]^T``, ``dw[m] = sum over rows of member m of
    x^T dy``."""
    x, w, idx = op.inputs
    dx = tf.matmul(dy, tf.gather(w, idx), transpose_b=True)
    dw = tf.math.unsorted_segment_sum(tf.matmul(x, dy, transpose_a=True), idx, tf.shape(w)[0])
    return dx, dw, None


@_register("TfevoPopulationConv2D")
def _population_conv2d_grad(op, dy):
    x, kernel, bias, idx = op.inputs
    strides = [int(s) for s in op.get_attr("strides")]
    padding = op.get_attr("padding")
    padding = (padding.decode() if isinstance(padding, bytes) else padding).lower()
    use_bias = bool(op.get_attr("use_bias"))
    dy = _relu_mask(op, dy)

    def ref(x, kernel, bias):
        return population_conv2d(x, kernel, bias if use_bias else None, strides, padding, None, idx, "im2col")

    dx, dk, db = _tape_grads(ref, [x, kernel, bias], dy)
    if db is None:
        db = tf.zeros_like(bias)
    return dx, dk, db, None


def _flat_rows(params, idx):
    return tf.gather(tf.cast(params, tf.float32), idx)


@_register("TfevoIndexedDenseFlat")
def _dense_flat_grad(op, dy):
    x, params, idx = op.inputs
    units, wo, bo = int(op.get_attr("units")), int(op.get_attr("w_offset")), int(op.get_attr("bias_offset"))
    dy = _relu_mask(op, dy)
    k = x.shape[-1]

    def ref(x, params):
        rows = _flat_rows(params, idx)
        y = tf.matmul(x, tf.reshape(rows[:, wo:wo + k * units], [-1, k, units]))
        return y + rows[:, None, bo:bo + units] if bo >= 0 else y

    dx, dp = _tape_grads(ref, [x, params], dy)
    return dx, tf.cast(tf.convert_to_tensor(dp), params.dtype), None


@_register("TfevoPopulationConv2DFlat")
def _conv_flat_grad(op, dy):
    x, params, idx = op.inputs
    kh, kw = [int(k) for k in op.get_attr("kernel_size")]
    f, ko, bo = int(op.get_attr("filters")), int(op.get_attr("kernel_offset")), int(op.get_attr("bias_offset"))
    strides = [int(s) for s in op.get_attr("strides")]
    padding = op.get_attr("padding")
    padding = (padding.decode() if isinstance(padding, bytes) else padding).lower()
    scale = float(op.get_attr("input_scale"))
    dy = _relu_mask(op, dy)
    c = x.shape[-1]
    float_x = x.dtype.is_floating

    def ref(xf, params):
        rows = _flat_rows(params, idx)
        kernel = tf.reshape(rows[:, ko:ko + kh * kw * c * f], [-1, kh, kw, c, f])
        bias = rows[:, bo:bo + f] if bo >= 0 else None
        return population_conv2d(xf * scale, kernel, bias, strides, padding, None, None, "im2col")

    xf = tf.cast(x, tf.float32)
    dx, dp = _tape_grads(ref, [xf, params], dy)
    return (dx if float_x else None), tf.cast(tf.convert_to_tensor(dp), params.dtype), None


@_register("TfevoPopulationMlp")
def _population_mlp_grad(op, dy):
    from tfevo.nn.fused_mlp import MlpPlan, population_mlp_reference

    x, params, idx = op.inputs
    acts = [a.decode() if isinstance(a, bytes) else a for a in op.get_attr("activations")]
    plan = MlpPlan(in_features=int(x.shape[-1]), flatten=False, units=tuple(int(u) for u in op.get_attr("units")),
                   w_offsets=tuple(int(o) for o in op.get_attr("w_offsets")),
                   bias_offsets=tuple(int(o) for o in op.get_attr("bias_offsets")), activations=tuple(acts))
    dx, dp = _tape_grads(lambda x, p: population_mlp_reference(x, p, idx, plan), [x, params], dy)
    return dx, tf.convert_to_tensor(dp), None
