"""The in-place C++ ops shared by the Dense and Conv2D translators' fast paths."""

from __future__ import annotations

import keras


def flat_ops(*inputs):
    """``(dense, conv)`` in-place op functions, or ``None`` when they cannot run here.

    The in-place path needs both C++ kernels allowed by :func:`tfevo.kernels.kernel`
    (built, a caller that is not XLA-compiled, ``inputs`` on the host).
    """
    from tfevo import kernels

    dense = kernels.kernel("TfevoIndexedDenseFlat", None, inputs)
    conv = kernels.kernel("TfevoPopulationConv2DFlat", None, inputs)
    if dense is None or conv is None:
        return None
    return dense, conv


def fused_activation(act):
    """(op activation attr, activation still to apply afterwards or None)."""
    if act is None or act is keras.activations.linear:
        return "none", None
    if act is keras.activations.relu:
        return "relu", None
    from tfevo.nn.layers import sample_activation

    return "none", sample_activation(act)
