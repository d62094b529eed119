"""TensorFlow's stateless uniform draws on a faster kernel (custom_ops/normal.cc).

:func:`stateless_uniform` and :func:`stateless_int32_bits` return exactly
``tf.random.stateless_uniform(shape, seed)`` (float32 in ``[0, 1)``) and
``tf.random.stateless_uniform(shape, seed, minval=None, maxval=None,
dtype=tf.int32)`` (full-range int32 bits), bit for bit, for any shape known at
run time (a 1-D int32/int64 tensor) and any ``[2]`` int32/int64 seed.

The kernel ``TfevoStatelessUniform`` re-implements TensorFlow's stateless
Philox-4x32-10 stream (key and counter derivation from the seed, element
``i`` of the flattened output = word ``i % 4`` of Philox counter ``i // 4``,
and the uint32 -> float mapping, or the raw word as int32).  It runs 16
counters per AVX-512 step, writes the output in place and splits large draws
over TensorFlow's intra-op thread pool; every element depends only on its
index, so the result does not depend on the thread count.

The pure-TensorFlow reference (the ``tf.random.stateless_uniform`` calls
themselves) is used wherever :func:`tfevo.kernels.kernel` says the kernel
cannot run: under XLA (``jit_compile=True``: no XLA kernel), with a GPU, with
``TFEVO_DISABLE_CUSTOM_OPS=1``, or when the kernel cannot be built.  Under XLA
TensorFlow's own call compiles to XLA's generator, a different stream; the
dispatch keeps exactly what the plain TensorFlow call gives in each context.
"""

from __future__ import annotations

import tensorflow as tf

from tfevo import kernels
from tfevo.core import ShapeError

__all__ = [
    "stateless_uniform",
    "stateless_int32_bits",
    "stateless_uniform_reference",
    "stateless_int32_bits_reference",
]


def _shape_seed(shape, seed):
    shape = tf.convert_to_tensor(shape, dtype_hint=tf.int32)
    if shape.dtype not in (tf.int32, tf.int64):
        if shape.shape.rank == 1 and shape.shape[0] == 0:  # [] -> a scalar draw
            shape = tf.zeros([0], tf.int32)
        else:
            raise ShapeError(f"shape must be an int32/int64 vector, got dtype {shape.dtype.name}")
    if shape.shape.rank is not None and shape.shape.rank != 1:
        raise ShapeError(f"shape must be a 1-D tensor, got rank {shape.shape.rank}")
    seed = tf.convert_to_tensor(seed, dtype_hint=tf.int32)
    if seed.dtype not in (tf.int32, tf.int64):
        raise ShapeError(f"seed must be int32 or int64, got {seed.dtype.name}")
    if seed.shape.rank is not None and (seed.shape.rank != 1 or seed.shape[0] not in (None, 2)):
        raise ShapeError(f"seed must have shape [2], got {seed.shape}")
    return shape, seed


def stateless_uniform_reference(shape, seed) -> tf.Tensor:
    """``tf.random.stateless_uniform(shape, seed)`` (float32 in [0, 1))."""
    return tf.random.stateless_uniform(shape, seed)


def stateless_int32_bits_reference(shape, seed) -> tf.Tensor:
    """``tf.random.stateless_uniform(shape, seed, minval=None, maxval=None,
    dtype=tf.int32)``: the raw Philox words as int32."""
    return tf.random.stateless_uniform(shape, seed, minval=None, maxval=None, dtype=tf.int32)


def _draw(shape, seed, dtype, use_op, reference):
    op = kernels.kernel("TfevoStatelessUniform", use_op, [t for t in (shape, seed) if isinstance(t, tf.Tensor)])
    if op is None:
        return reference(shape, seed)
    shape, seed = _shape_seed(shape, seed)
    return op(shape, seed, dtype=dtype)


def stateless_uniform(shape, seed, use_op: bool | None = None) -> tf.Tensor:
    """Float32 uniforms in ``[0, 1)``, bit-identical to
    ``tf.random.stateless_uniform(shape, seed)``.

    ``shape``: 1-D int32/int64 tensor or list (values may be known only at
    run time); ``seed``: ``[2]`` int32/int64.  ``use_op``: ``None`` runs the
    kernel where :func:`tfevo.kernels.kernel` allows, ``False`` the TensorFlow
    call, ``True`` requires the kernel."""
    return _draw(shape, seed, tf.float32, use_op, stateless_uniform_reference)


def stateless_int32_bits(shape, seed, use_op: bool | None = None) -> tf.Tensor:
    """Full-range int32 random bits, bit-identical to
    ``tf.random.stateless_uniform(shape, seed, minval=None, maxval=None,
    dtype=tf.int32)`` (arguments as :func:`stateless_uniform`)."""
    return _draw(shape, seed, tf.int32, use_op, stateless_int32_bits_reference)
