"""Running observation statistics for policy inputs.

:class:`ObservationNormalizer` keeps the count, mean and sum of squared
deviations (``m2``) of every observation seen, in float64, and merges new
batches with the parallel (Chan et al.) form of Welford's update, so the
result equals the mean/variance of all data seen regardless of how it was
batched.  Its state is in ``tf.Variable``s: ``tf.train.Checkpoint`` saves and
restores it with the rest of a run.

Example:

>>> norm = ObservationNormalizer((17,), clip=5.0)
>>> norm.update(np.random.randn(100, 17))
>>> x = norm(np.random.randn(8, 17))           # float32, (x - mean) / std, clipped
>>> ckpt = tf.train.Checkpoint(obs_norm=norm)
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from tfevo.core import ConfigError, ShapeError

__all__ = ["ObservationNormalizer", "batch_moments"]


def batch_moments(x: np.ndarray, shape: tuple) -> tuple[float, np.ndarray, np.ndarray]:
    """(count, mean, m2) of a numpy batch ``[..., *shape]`` in float64."""
    x = np.asarray(x, np.float64).reshape(-1, *shape)
    n = x.shape[0]
    if n == 0:
        z = np.zeros(shape, np.float64)
        return 0.0, z, z.copy()
    mean = x.mean(axis=0)
    m2 = ((x - mean) ** 2).sum(axis=0)
    return float(n), mean, m2


def merge_moments(a, b):
    """Merges two (count, mean, m2) triples (parallel Welford / Chan et al.)."""
    na, ma, sa = a
    nb, mb, sb = b
    n = na + nb
    if n == 0:
        return a
    delta = mb - ma
    mean = ma + delta * (nb / n)
    m2 = sa + sb + delta * delta * (na * nb / n)
    return n, mean, m2


class ObservationNormalizer(tf.Module):
    """Running mean/std of observations, applied as ``(x - mean) / std``.

    Args:
      shape: shape of one observation (without batch axes).
      clip: if given, normalized values are clipped to ``[-clip, clip]``.
      epsilon: added to the variance before the square root.
      name: module name.

    Attributes:
      count, mean, m2: float64 ``tf.Variable``s (``m2`` = sum of squared
        deviations); ``variance = m2 / count`` (population variance, like
        ``np.var``).
    """

    def __init__(self, shape, clip: float | None = None, epsilon: float = 1e-8, name: str | None = None):
        super().__init__(name=name)
        shape = tuple(int(s) for s in (shape if isinstance(shape, (tuple, list)) else (shape,)))
        if any(s < 1 for s in shape):
            raise ConfigError(f"observation shape must be positive, got {shape}")
        if clip is not None and not float(clip) > 0:
            raise ConfigError(f"clip must be > 0 or None, got {clip}")
        self.shape = shape
        self.clip = None if clip is None else float(clip)
        self.epsilon = float(epsilon)
        self.count = tf.Variable(0.0, dtype=tf.float64, trainable=False, name="count")
        self.mean = tf.Variable(tf.zeros(shape, tf.float64), trainable=False, name="mean")
        self.m2 = tf.Variable(tf.zeros(shape, tf.float64), trainable=False, name="m2")
        spec = tf.TensorSpec([None, *shape], tf.float64)
        self._update_fn = tf.function(self._update, input_signature=[spec])
        self._merge_fn = tf.function(
            self._merge,
            input_signature=[
                tf.TensorSpec([], tf.float64),
                tf.TensorSpec(shape, tf.float64),
                tf.TensorSpec(shape, tf.float64),
            ],
        )

    # -- statistics -----------------------------------------------------------
    @property
    def variance(self) -> tf.Tensor:
        """Population variance ``m2 / count`` (0 before any data)."""
        return self.m2 / tf.maximum(self.count, 1.0)

    @property
    def std(self) -> tf.Tensor:
        """``sqrt(variance + epsilon)`` in float64."""
        return tf.sqrt(self.variance + self.epsilon)

    def _merge(self, n_b, mean_b, m2_b):
        n_a = self.count
        n = n_a + n_b
        safe_n = tf.maximum(n, 1.0)
        delta = mean_b - self.mean
        self.mean.assign(self.mean + delta * (n_b / safe_n))
        self.m2.assign(self.m2 + m2_b + delta * delta * (n_a * n_b / safe_n))
        self.count.assign(n)
        return n

    def _update(self, x):
        n_b = tf.cast(tf.shape(x)[0], tf.float64)
        mean_b = tf.reduce_mean(x, axis=0)
        mean_b = tf.where(n_b > 0, mean_b, tf.zeros_like(mean_b))
        m2_b = tf.reduce_sum(tf.square(x - mean_b), axis=0)
        return self._merge(n_b, mean_b, m2_b)

    def update(self, x) -> None:
        """Adds a batch of observations ``[..., *shape]`` to the statistics."""
        x = tf.convert_to_tensor(x)
        if tuple(x.shape[x.shape.rank - len(self.shape):]) != self.shape or x.shape.rank < len(self.shape):
            raise ShapeError(f"observations must end with shape {self.shape}, got {x.shape.as_list()}")
        x = tf.reshape(tf.cast(x, tf.float64), [-1, *self.shape])
        self._update_fn(x)

    def merge(self, count, mean, m2) -> None:
        """Merges precomputed moments (count, mean, m2) of other data."""
        mean = np.asarray(mean, np.float64).reshape(self.shape)
        m2 = np.asarray(m2, np.float64).reshape(self.shape)
        if float(count) <= 0:
            return
        self._merge_fn(tf.constant(float(count), tf.float64), mean, m2)

    # -- applying -------------------------------------------------------------
    def normalize(self, x) -> tf.Tensor:
        """``float32`` ``(x - mean) / std`` (clipped if ``clip`` was given); works in graphs."""
        x = tf.cast(x, tf.float32)
        mean = tf.cast(self.mean, tf.float32)
        std = tf.cast(self.std, tf.float32)
        y = (x - mean) / std
        if self.clip is not None:
            y = tf.clip_by_value(y, -self.clip, self.clip)
        return y

    def __call__(self, x) -> tf.Tensor:
        return self.normalize(x)
