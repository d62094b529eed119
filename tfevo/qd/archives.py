"""Preallocated MAP-Elites archives: :class:`GridArchive` and :class:`CVTArchive`.

An archive holds, for each of its ``cells``, one elite: its solution
``[cells, D]``, fitness ``[cells]`` and descriptor ``[cells, k]``, plus an
``occupied`` mask.  All of it lives in fixed-shape ``tf.Variable``s, so an
archive is checkpointable and every operation is one tensor program.

Insertion of a batch (:meth:`Archive.add`) resolves collisions in one pass:
candidates with a non-finite fitness (NaN, +inf, -inf: "dead") are dropped; among
candidates landing in the same cell only the best survives (ties: the first in
the batch); it enters only if the cell is empty or its fitness is strictly
higher than the incumbent's.  The returned status per candidate is
``0`` not added, ``1`` improved an occupied cell, ``2`` filled a new cell, and
the value is the fitness gain of a candidate that entered (fitness minus the
QD offset for a new cell) and 0 for every candidate that did not, including
the losers of a cell contested within the batch.  CMA-ME emitters rank by the
comparison with the archive *before* the batch instead
(:meth:`Archive.incumbents`).

With ``learning_rate`` and ``threshold_min`` an archive is CMA-MAE's soft
archive: candidates compete with per-cell thresholds instead of the elites'
fitness (see :class:`~tfevo.qd.archive_base.Archive`); the value of an
entering candidate is then its fitness minus the cell's threshold before the
batch (``threshold_min`` for a new cell), as in pyribs.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from tfevo.core import ConfigError, arguments_checked
from tfevo.qd.archive_base import AddResult, Archive, checked_ranges
from tfevo.qd.cvt import CVTArchive, kmeans_centroids

__all__ = ["Archive", "GridArchive", "CVTArchive", "AddResult", "kmeans_centroids"]


@arguments_checked
class GridArchive(Archive):
    """A regular grid over a box of descriptor space.

    Args:
      solution_dim: D.
      dims: bins per descriptor dimension, e.g. ``[100, 100]``.
      ranges: ``[(low, high), ...]`` per descriptor dimension.  Descriptors
        outside are clipped into the border cells (as pyribs does).
      qd_offset: see :class:`Archive`.
      epsilon: pyribs' rounding guard: the bin along each axis is
        ``floor((bins * (d - low) + epsilon) / (high - low))``, computed in
        float64 and clipped to ``[0, bins - 1]``, so a descriptor on an interior
        bin edge goes to the upper bin and ``high`` to the last one, exactly as
        pyribs' ``GridArchive.index_of`` with the same ``epsilon`` (default
        ``1e-6``, as pyribs).
      learning_rate, threshold_min: CMA-MAE's soft archive, see
        :class:`~tfevo.qd.archive_base.Archive` (``learning_rate=0.01,
        threshold_min=0`` is pyribs' tutorial setting).

    Example:

    >>> import tensorflow as tf
    >>> archive = GridArchive(10, dims=[20, 20], ranges=[(0, 1), (0, 1)])
    >>> x = tf.random.stateless_uniform([64, 10], seed=[0, 1])
    >>> fitness = -tf.reduce_sum(tf.square(x - 0.5), axis=1)
    >>> res = archive.add(x, fitness, descriptors=x[:, :2])
    >>> int(tf.reduce_sum(tf.cast(res.status > 0, tf.int32))) == int(archive.size)
    True
    """

    _xla_insert_pref = True

    def __init__(self, solution_dim: int, dims, ranges, qd_offset: float = 0.0, name: str | None = None,
                 use_op: bool | None = None, epsilon: float = 1e-6, learning_rate: float | None = None,
                 threshold_min: float = -np.inf):
        if isinstance(dims, (int, np.integer)) or not all(
                isinstance(d, (int, np.integer)) or (isinstance(d, float) and d.is_integer()) for d in dims):
            raise ConfigError(f"dims must be a non-empty list of positive integer bin counts, got {dims!r}")
        dims = [int(d) for d in dims]
        if not dims or any(d < 1 for d in dims):
            raise ConfigError(f"dims must be a non-empty list of positive bin counts, got {dims}")
        ranges = checked_ranges(ranges)
        if len(ranges) != len(dims):
            raise ConfigError(f"ranges has {len(ranges)} entries but dims has {len(dims)}")
        if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float, np.floating, np.integer)) \
                or not np.isfinite(epsilon) or epsilon < 0:
            raise ConfigError(f"epsilon must be a finite number >= 0, got {epsilon!r}")
        super().__init__(solution_dim, int(np.prod(dims)), len(dims), qd_offset, name=name, use_op=use_op,
                         learning_rate=learning_rate, threshold_min=threshold_min)
        self.dims = dims
        self.ranges = ranges
        self.epsilon = float(epsilon)
        self._lo = tf.constant([r[0] for r in ranges], tf.float64)
        self._hi = tf.constant([r[1] for r in ranges], tf.float64)
        self._eps = tf.constant(self.epsilon, tf.float64)
        self._bins = tf.constant(dims, tf.int32)
        strides = np.cumprod([1] + dims[::-1])[:-1][::-1].copy()  # row-major
        self._strides = tf.constant(strides, tf.int32)

    def _kernel_grid(self):
        return self._lo, self._hi, self._bins, self._eps

    def grid_index(self, descriptors: tf.Tensor) -> tf.Tensor:
        """Per-dimension bin ``int32 [B, k]`` (pyribs' rule, see ``epsilon``); a row with a NaN or
        infinite component is ``-1`` throughout (no cell)."""
        d = tf.cast(self._descriptor_tensor(descriptors), tf.float64)
        bins = tf.cast(self._bins, tf.float64)
        x = tf.floor((bins * (d - self._lo) + self._eps) / (self._hi - self._lo))
        x = tf.where(tf.math.is_nan(x), tf.zeros_like(x), x)
        g = tf.cast(tf.clip_by_value(x, tf.zeros_like(bins), bins - 1.0), tf.int32)
        return tf.where(tf.reduce_all(tf.math.is_finite(d), axis=1, keepdims=True), g, -1)

    def index_of(self, descriptors: tf.Tensor) -> tf.Tensor:
        d = self._descriptor_tensor(descriptors)
        return self._no_cell_if_nonfinite(d, tf.reduce_sum(self.grid_index(d) * self._strides, axis=1))

    def cell_centers(self) -> np.ndarray:
        axes = [np.linspace(lo, hi, d + 1)[:-1] + (hi - lo) / d / 2 for (lo, hi), d in zip(self.ranges, self.dims)]
        mesh = np.meshgrid(*axes, indexing="ij")
        return np.stack([m.reshape(-1) for m in mesh], axis=1)
