"""Stateless, population-wide sampling of Keras initializers.

``sample_population(initializer, shape, popsize, seed)`` draws ``popsize``
independent tensors of ``shape`` from the *family* of a Keras initializer
(Glorot/He/LeCun variance scaling, normal, truncated normal, uniform,
orthogonal, identity, constants) with ``tf.random.stateless_*`` ops, so the same seed
always gives the same population.  Fans are computed per member exactly as
Keras does, so each member is distributed like a freshly built Keras layer.
"""

from __future__ import annotations

import math

import keras
import tensorflow as tf

from tfevo.core import ConfigError

__all__ = ["sample_population", "compute_fans", "as_seed"]

_TRUNC_STD = 0.87962566103423978  # std of a unit normal truncated to [-2, 2]


def compute_fans(shape) -> tuple[int, int]:
    """(fan_in, fan_out) of one weight tensor, following Keras's convention."""
    shape = tuple(int(s) for s in shape)
    if len(shape) < 1:
        return 1, 1
    if len(shape) == 1:
        return shape[0], shape[0]
    if len(shape) == 2:
        return shape[0], shape[1]
    receptive = 1
    for d in shape[:-2]:
        receptive *= d
    return shape[-2] * receptive, shape[-1] * receptive


def as_seed(seed) -> tf.Tensor:
    """Turns a Python int or an ``int32 [2]`` tensor into a stateless-op seed."""
    if isinstance(seed, int) or (hasattr(seed, "shape") and len(getattr(seed, "shape", ())) == 0):
        s = int(seed)
        if not (0 <= s < 2**31):
            raise ConfigError(f"seed must be an integer in [0, 2**31), got {s}")
        return tf.constant([s, 0x5EED], tf.int32)
    seed = tf.convert_to_tensor(seed)
    if seed.shape.as_list() != [2] or not seed.dtype.is_integer:
        raise ConfigError(f"seed must be an int or an integer tensor of shape [2], got {seed.shape} {seed.dtype.name}")
    return tf.cast(seed, tf.int32)


def _orthogonal(shape, popsize, seed, gain):
    if len(shape) < 2:
        raise ConfigError(f"Orthogonal initializer needs a weight of rank >= 2, got shape {shape}")
    rows = int(math.prod(shape[:-1]))
    cols = int(shape[-1])
    flat = (max(rows, cols), min(rows, cols))
    a = tf.random.stateless_normal((popsize,) + flat, seed=seed)
    q, r = tf.linalg.qr(a)
    d = tf.sign(tf.linalg.diag_part(r))
    q = q * d[:, None, :]
    if rows < cols:
        q = tf.transpose(q, [0, 2, 1])
    return gain * tf.reshape(q, (popsize,) + tuple(shape))


def sample_population(initializer, shape, popsize: int, seed) -> tf.Tensor:
    """Samples ``[popsize, *shape]`` float32 from a Keras initializer's family.

    Args:
      initializer: a Keras initializer (object, name or config).
      shape: the shape of one member's weight.
      popsize: P, the number of independent draws.
      seed: int or ``int32 [2]``.

    Raises:
      ConfigError: for an initializer family that has no stateless sampler here.

    Example:

    >>> w = sample_population("glorot_uniform", (4, 3), popsize=8, seed=0)  # [8, 4, 3]
    """
    init = keras.initializers.get(initializer)
    shape = tuple(int(s) for s in shape)
    full = (int(popsize),) + shape
    seed = as_seed(seed)
    I = keras.initializers
    if isinstance(init, I.Zeros):
        return tf.zeros(full, tf.float32)
    if isinstance(init, I.Ones):
        return tf.ones(full, tf.float32)
    if isinstance(init, I.Constant):
        value = tf.cast(tf.convert_to_tensor(init.value), tf.float32)
        return tf.broadcast_to(value, full)
    if isinstance(init, I.VarianceScaling):
        if getattr(init, "input_axes", None) is not None or getattr(init, "output_axes", None) is not None:
            raise ConfigError("VarianceScaling with input_axes/output_axes is not supported")
        fan_in, fan_out = compute_fans(shape)
        scale = float(init.scale)
        mode = init.mode
        if mode == "fan_in":
            scale /= max(1.0, fan_in)
        elif mode == "fan_out":
            scale /= max(1.0, fan_out)
        else:
            scale /= max(1.0, (fan_in + fan_out) / 2.0)
        dist = init.distribution
        if dist == "truncated_normal":
            return tf.random.stateless_truncated_normal(full, seed, stddev=math.sqrt(scale) / _TRUNC_STD)
        if dist == "untruncated_normal":
            return tf.random.stateless_normal(full, seed, stddev=math.sqrt(scale))
        limit = math.sqrt(3.0 * scale)
        return tf.random.stateless_uniform(full, seed, minval=-limit, maxval=limit)
    if isinstance(init, I.TruncatedNormal):
        return tf.random.stateless_truncated_normal(full, seed, mean=init.mean, stddev=init.stddev)
    if isinstance(init, I.RandomNormal):
        return tf.random.stateless_normal(full, seed, mean=init.mean, stddev=init.stddev)
    if isinstance(init, I.RandomUniform):
        return tf.random.stateless_uniform(full, seed, minval=init.minval, maxval=init.maxval)
    if isinstance(init, I.Orthogonal):
        return _orthogonal(shape, int(popsize), seed, float(init.gain))
    if isinstance(init, I.Identity):
        if len(shape) != 2:
            raise ConfigError(f"Identity initializer needs a weight of rank 2, got shape {shape}")
        return tf.broadcast_to(float(init.gain) * tf.eye(*shape, dtype=tf.float32), full)
    raise ConfigError(
        f"initializer {type(init).__name__} has no stateless population sampler; supported: "
        "Zeros, Ones, Constant, Identity, VarianceScaling (Glorot*/He*/Lecun*), RandomNormal, "
        "TruncatedNormal, RandomUniform, Orthogonal"
    )
