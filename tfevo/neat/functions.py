"""Activation and aggregation functions of NEAT nodes, by name and integer id.

Genome tensors store a node's activation and aggregation as integer ids (as
floats) into the global tables below, so a genome is self-describing.  The
built-in set follows neat-python's documented definitions (including its
input scaling, e.g. ``sigmoid(z) = 1 / (1 + exp(-5 z))``) so that evolved
networks mean the same thing in both libraries.

Users can add their own with :func:`register_activation` /
:func:`register_aggregation`; the function must accept and return TensorFlow
tensors (elementwise for activations).
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np
import tensorflow as tf

from tfevo.core import ConfigError

__all__ = [
    "ACTIVATIONS",
    "AGGREGATIONS",
    "register_activation",
    "register_aggregation",
    "activation_id",
    "aggregation_id",
    "activation_name",
    "aggregation_name",
    "apply_activation",
    "aggregate",
]


def _clip(z, lo, hi):
    return tf.clip_by_value(z, lo, hi)


def _sigmoid(z):
    return tf.math.sigmoid(_clip(5.0 * z, -60.0, 60.0))


def _tanh(z):
    return tf.math.tanh(_clip(2.5 * z, -60.0, 60.0))


def _sin(z):
    return tf.math.sin(_clip(5.0 * z, -60.0, 60.0))


def _gauss(z):
    z = _clip(z, -3.4, 3.4)
    return tf.math.exp(-5.0 * z * z)


def _relu(z):
    return tf.maximum(z, 0.0)


def _elu(z):
    return tf.where(z > 0.0, z, tf.math.expm1(tf.minimum(z, 0.0)))


def _lelu(z):
    return tf.where(z > 0.0, z, 0.005 * z)


_SELU_L = 1.0507009873554804934193349852946
_SELU_A = 1.6732632423543772848170429916717


def _selu(z):
    return tf.where(z > 0.0, _SELU_L * z, _SELU_L * _SELU_A * tf.math.expm1(tf.minimum(z, 0.0)))


def _softplus(z):
    return 0.2 * tf.math.softplus(_clip(5.0 * z, -60.0, 60.0))


def _identity(z):
    return z


def _clamped(z):
    return _clip(z, -1.0, 1.0)


def _inv(z):
    safe = tf.where(tf.equal(z, 0.0), tf.ones_like(z), z)
    return tf.where(tf.equal(z, 0.0), tf.zeros_like(z), 1.0 / safe)


def _log(z):
    return tf.math.log(tf.maximum(z, 1e-7))


def _exp(z):
    return tf.math.exp(_clip(z, -60.0, 60.0))


def _abs(z):
    return tf.abs(z)


def _hat(z):
    return tf.maximum(0.0, 1.0 - tf.abs(z))


def _square(z):
    return z * z


def _cube(z):
    return z * z * z


# name -> tensor function (ids are insertion order; never reorder).
ACTIVATIONS: dict[str, Callable] = {
    "sigmoid": _sigmoid,
    "tanh": _tanh,
    "sin": _sin,
    "gauss": _gauss,
    "relu": _relu,
    "elu": _elu,
    "lelu": _lelu,
    "selu": _selu,
    "softplus": _softplus,
    "identity": _identity,
    "clamped": _clamped,
    "inv": _inv,
    "log": _log,
    "exp": _exp,
    "abs": _abs,
    "hat": _hat,
    "square": _square,
    "cube": _cube,
}

# Python (math) versions used by the reference evaluator and sympy export.
PY_ACTIVATIONS: dict[str, Callable[[float], float]] = {
    "sigmoid": lambda z: 1.0 / (1.0 + math.exp(-max(-60.0, min(60.0, 5.0 * z)))),
    "tanh": lambda z: math.tanh(max(-60.0, min(60.0, 2.5 * z))),
    "sin": lambda z: math.sin(max(-60.0, min(60.0, 5.0 * z))),
    "gauss": lambda z: math.exp(-5.0 * max(-3.4, min(3.4, z)) ** 2),
    "relu": lambda z: z if z > 0.0 else 0.0,
    "elu": lambda z: z if z > 0.0 else math.exp(z) - 1.0,
    "lelu": lambda z: z if z > 0.0 else 0.005 * z,
    "selu": lambda z: _SELU_L * z if z > 0.0 else _SELU_L * _SELU_A * (math.exp(z) - 1.0),
    "softplus": lambda z: 0.2 * math.log1p(math.exp(max(-60.0, min(60.0, 5.0 * z)))),
    "identity": lambda z: z,
    "clamped": lambda z: max(-1.0, min(1.0, z)),
    "inv": lambda z: 0.0 if z == 0.0 else 1.0 / z,
    "log": lambda z: math.log(max(1e-7, z)),
    "exp": lambda z: math.exp(max(-60.0, min(60.0, z))),
    "abs": abs,
    "hat": lambda z: max(0.0, 1.0 - abs(z)),
    "square": lambda z: z * z,
    "cube": lambda z: z * z * z,
}


_f32 = np.float32


def _c32(z, lo, hi):
    return min(max(z, _f32(lo)), _f32(hi))


# float32 scalar versions (every operation rounded to float32, the order of the
# inference kernels), used by the reference evaluators in float32 mode
PY32_ACTIVATIONS: dict[str, Callable] = {
    "sigmoid": lambda z: _f32(1) / (_f32(1) + np.exp(-_c32(_f32(5) * z, -60, 60))),
    "tanh": lambda z: np.tanh(_c32(_f32(2.5) * z, -60, 60)),
    "sin": lambda z: np.sin(_c32(_f32(5) * z, -60, 60)),
    "gauss": lambda z: np.exp(_f32(-5) * _c32(z, -3.4, 3.4) * _c32(z, -3.4, 3.4)),
    "relu": lambda z: max(z, _f32(0)),
    "elu": lambda z: z if z > 0 else np.expm1(min(z, _f32(0))),
    "lelu": lambda z: z if z > 0 else _f32(0.005) * z,
    "selu": lambda z: _f32(_SELU_L) * z if z > 0 else _f32(_SELU_L) * _f32(_SELU_A) * np.expm1(min(z, _f32(0))),
    "softplus": lambda z: _f32(0.2) * _f32(_softplus32(_c32(_f32(5) * z, -60, 60))),
    "identity": lambda z: z,
    "clamped": lambda z: _c32(z, -1, 1),
    "inv": lambda z: _f32(0) if z == 0 else _f32(1) / z,
    "log": lambda z: np.log(max(z, _f32(1e-7))),
    "exp": lambda z: np.exp(_c32(z, -60, 60)),
    "abs": lambda z: abs(z),
    "hat": lambda z: max(_f32(0), _f32(1) - abs(z)),
    "square": lambda z: z * z,
    "cube": lambda z: z * z * z,
}


def _softplus32(x):
    """tf.math.softplus's branches (thresholds log(float eps) + 2) in float32."""
    t = _f32(math.log(float(np.finfo(np.float32).eps)) + 2.0)
    return x if x > -t else (np.exp(x) if x < t else np.log1p(np.exp(x)))


def _masked(x, mask, fill):
    return tf.where(mask, x, tf.cast(fill, x.dtype))


def _agg_sum(x, mask):
    return tf.reduce_sum(_masked(x, mask, 0.0), axis=-2)


def _agg_product(x, mask):
    return tf.reduce_prod(_masked(x, mask, 1.0), axis=-2)


def _agg_max(x, mask):
    return tf.reduce_max(_masked(x, mask, -float("inf")), axis=-2)


def _agg_min(x, mask):
    return tf.reduce_min(_masked(x, mask, float("inf")), axis=-2)


def _nan_if_any(x, mask, y):
    """``y``, NaN where a real input in ``x`` is NaN (as sum, product, max and min give)."""
    bad = tf.reduce_any(mask & tf.math.is_nan(x), axis=-2)
    return tf.where(bad, tf.constant(float("nan"), y.dtype), y)


def _agg_maxabs(x, mask):
    a = _masked(tf.abs(x), mask, -1.0)
    i = tf.argmax(a, axis=-2, output_type=tf.int32)
    return _nan_if_any(x, mask, _take(x, i))


def _take(x, i):
    """x[..., i[..., n], n] for x [..., K, N] and i [..., N]."""
    oh = tf.one_hot(i, tf.shape(x)[-2], axis=len(i.shape) - 1, dtype=x.dtype)
    return tf.reduce_sum(tf.where(oh > 0, x, tf.zeros_like(x)), axis=-2)


def _agg_mean(x, mask):
    n = tf.reduce_sum(tf.cast(mask, x.dtype), axis=-2)
    return _agg_sum(x, mask) / tf.maximum(n, 1.0)


def _agg_median(x, mask):
    # Masked entries sort to the end; median of the k valid ones (mean of the
    # two middle values when k is even, as neat-python's median2).
    big = tf.where(mask, x, tf.cast(float("inf"), x.dtype))
    s = tf.sort(big, axis=-2)
    k = tf.reduce_sum(tf.cast(mask, tf.int32), axis=-2)
    lo = tf.maximum((k - 1) // 2, 0)
    hi = tf.maximum(k // 2, 0)
    return _nan_if_any(x, mask, 0.5 * (_take(s, lo) + _take(s, hi)))


# name -> f(x [..., K, N], mask [..., K, N]) -> [..., N], reducing over axis -2
# (the K incoming values of each of N nodes).  Empty inputs are handled by
# :func:`aggregate` (0, and 1 for product, as neat-python).
AGGREGATIONS: dict[str, Callable] = {
    "sum": _agg_sum,
    "product": _agg_product,
    "max": _agg_max,
    "min": _agg_min,
    "maxabs": _agg_maxabs,
    "median": _agg_median,
    "mean": _agg_mean,
}


def _py_median(v):
    v = sorted(v)
    n = len(v)
    return 0.5 * (v[(n - 1) // 2] + v[n // 2])


PY_AGGREGATIONS: dict[str, Callable] = {
    "sum": sum,
    "product": lambda v: math.prod(v),
    "max": max,
    "min": min,
    "maxabs": lambda v: max(v, key=abs),
    "median": _py_median,
    "mean": lambda v: sum(v) / len(v),
}


def register_activation(name: str, fn: Callable, py_fn: Callable | None = None) -> int:
    """Adds an activation ``fn(z: tf.Tensor) -> tf.Tensor`` (elementwise); returns its id.

    ``py_fn`` (float -> float) is used by the reference evaluator and export.
    Example::

        register_activation("swish", lambda z: z * tf.sigmoid(z))
    """
    if not callable(fn):
        raise ConfigError(f"activation {name!r} must be callable")
    if name in ACTIVATIONS and ACTIVATIONS[name] is not fn:
        raise ConfigError(f"activation {name!r} is already registered")
    ACTIVATIONS[name] = fn
    if py_fn is not None:
        PY_ACTIVATIONS[name] = py_fn
    return activation_id(name)


def register_aggregation(name: str, fn: Callable, py_fn: Callable | None = None) -> int:
    """Adds an aggregation ``fn(x [..., K, N], mask [..., K, N]) -> [..., N]``; returns its id."""
    if not callable(fn):
        raise ConfigError(f"aggregation {name!r} must be callable")
    if name in AGGREGATIONS and AGGREGATIONS[name] is not fn:
        raise ConfigError(f"aggregation {name!r} is already registered")
    AGGREGATIONS[name] = fn
    if py_fn is not None:
        PY_AGGREGATIONS[name] = py_fn
    return aggregation_id(name)


def activation_id(name: str) -> int:
    """Integer id of an activation name (ConfigError listing known names)."""
    names = list(ACTIVATIONS)
    if name not in ACTIVATIONS:
        raise ConfigError(f"unknown activation {name!r}; known: {', '.join(names)}")
    return names.index(name)


def aggregation_id(name: str) -> int:
    """Integer id of an aggregation name (ConfigError listing known names)."""
    names = list(AGGREGATIONS)
    if name not in AGGREGATIONS:
        raise ConfigError(f"unknown aggregation {name!r}; known: {', '.join(names)}")
    return names.index(name)


def output_low(name: str) -> float:
    """Lower end of an output activation's range, for rescaling outputs to action bounds: 0 for
    sigmoid, gauss and hat (range [0, 1]), else -1 (the range taken as [-1, 1])."""
    return 0.0 if name in ("sigmoid", "gauss", "hat") else -1.0


def activation_name(i: int) -> str:
    """Name of an activation id."""
    return list(ACTIVATIONS)[int(i)]


def aggregation_name(i: int) -> str:
    """Name of an aggregation id."""
    return list(AGGREGATIONS)[int(i)]


def apply_activation(z: tf.Tensor, act_ids: tf.Tensor, options: tuple[str, ...]) -> tf.Tensor:
    """Applies per-node activations: ``act_ids`` (int32, broadcastable to z) picks
    among the statically known ``options``; only those are computed."""
    if len(options) == 1:
        return ACTIVATIONS[options[0]](z)
    out = tf.zeros_like(z)
    for name in options:
        out = tf.where(tf.equal(act_ids, activation_id(name)), ACTIVATIONS[name](z), out)
    return out


def empty_aggregation(name: str) -> float:
    """An aggregation over no inputs: 1 for ``product`` (the empty product, as neat-python's
    ``product_aggregation([])``), else 0. Every forward and export of a node without enabled
    inputs uses this value."""
    return 1.0 if name == "product" else 0.0


def aggregate(x: tf.Tensor, mask: tf.Tensor, agg_ids: tf.Tensor, options: tuple[str, ...]) -> tf.Tensor:
    """Aggregates incoming values ``x [..., K, N]`` (``mask`` marks real inputs)
    per node with ``agg_ids [..., N]``; a node without inputs gets 0, or 1 with
    ``product`` (the empty product, as neat-python's ``product_aggregation([])``)."""
    if len(options) == 1:
        out = AGGREGATIONS[options[0]](x, mask)
    else:
        out = tf.zeros_like(tf.reduce_sum(x, -2))
        for name in options:
            out = tf.where(tf.equal(agg_ids, aggregation_id(name)), AGGREGATIONS[name](x, mask), out)
    has = tf.reduce_any(mask, axis=-2)
    empty = tf.zeros_like(out)
    for name in options:
        if empty_aggregation(name):
            empty = tf.where(tf.equal(agg_ids, aggregation_id(name)), tf.constant(empty_aggregation(name), out.dtype),
                             empty)
    return tf.where(has, out, empty)
