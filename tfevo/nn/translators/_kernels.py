"""The in-place C++ ops shared by the Dense and Conv2D translators' fast paths."""

from __future__ import annotations

import keras
import tensorflow as tf


def flat_ops():
    """``(dense, conv)`` in-place op functions, or ``None`` when they cannot run here.

    The in-place path needs both C++ modules built, a caller that is not
    XLA-compiled and no GPU to place ops on.
    """
    from tfevo import ops

    if ops.in_xla_context():
        return None
    dense = ops.op_module("indexed_matmul", "tfevo_indexed_dense_flat")
    conv = ops.op_module("pop_conv", "tfevo_population_conv2d_flat")
    if dense is None or conv is None or tf.config.list_logical_devices("GPU"):
        return None
    return dense.tfevo_indexed_dense_flat, conv.tfevo_population_conv2d_flat


def fused_activation(act):
    """(op activation attr, activation still to apply afterwards or None)."""
    if act is None or act is keras.activations.linear:
        return "none", None
    if act is keras.activations.relu:
        return "relu", None
    return "none", act
