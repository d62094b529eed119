"""Preallocated MAP-Elites archives: :class:`GridArchive` and :class:`CVTArchive`.

An archive holds, for each of its ``cells``, one elite: its solution
``[cells, D]``, fitness ``[cells]`` and descriptor ``[cells, k]``, plus an
``occupied`` mask.  All of it lives in fixed-shape ``tf.Variable``s, so an
archive is checkpointable and every operation is one tensor program.

Insertion of a batch (:meth:`Archive.add`) resolves collisions in one pass:
candidates with a non-finite fitness (NaN/-inf: "dead") are dropped; among
candidates landing in the same cell only the best survives (ties: the first in
the batch); it enters only if the cell is empty or its fitness is strictly
higher than the incumbent's.  The returned status per candidate is
``0`` not added, ``1`` improved an occupied cell, ``2`` filled a new cell, and
the value is the fitness gain of a candidate that entered (fitness minus the
QD offset for a new cell) and 0 for every candidate that did not, including
the losers of a cell contested within the batch.  CMA-ME emitters rank by the
comparison with the archive *before* the batch instead
(:meth:`Archive.incumbents`).
"""

from __future__ import annotations

import abc
import hashlib
import os
from pathlib import Path
from typing import NamedTuple

import numpy as np
import tensorflow as tf

from tfevo._holder import Untracked
from tfevo.core import ConfigError, ShapeError, sanitize_fitness

__all__ = ["Archive", "GridArchive", "CVTArchive", "AddResult", "kmeans_centroids"]


class AddResult(NamedTuple):
    """Per-candidate outcome of :meth:`Archive.add`."""

    status: tf.Tensor  # int32 [B]: 0 not added, 1 improved, 2 new cell
    value: tf.Tensor  # float32 [B]: improvement (new: fitness - offset), 0 if not added (in-batch losers too)
    cell: tf.Tensor  # int32 [B]: the cell each candidate maps to


class Archive(tf.Module, metaclass=abc.ABCMeta):
    """Base class: storage, batched insertion, sampling and metrics.

    Subclasses define ``num_cells``, ``descriptor_dim`` and :meth:`index_of`.

    Args:
      solution_dim: D.
      qd_offset: the fitness offset of the QD-score
        (``qd_score = sum over filled cells of (fitness - qd_offset)``); set it
        to a lower bound of the fitness so every elite counts positively.
    """

    #: whether the pure-TensorFlow insertion compiles with XLA (measured faster
    #: for the grid; the CVT bucket lookup has a data-dependent fallback, so it
    #: stays a graph).  Irrelevant when the C++ insertion kernel is used.
    _xla_insert_pref = False

    def __init__(self, solution_dim: int, num_cells: int, descriptor_dim: int, qd_offset: float = 0.0,
                 name: str | None = None, use_op: bool | None = None):
        super().__init__(name=name)
        if use_op:
            from tfevo.qd.emitters import _emit_op

            if _emit_op() is None:
                raise ConfigError("use_op=True but the qd_emit kernels could not be built or loaded "
                                  "(see the tfevo.ops warning)")
        self.use_op = use_op
        if int(solution_dim) < 1:
            raise ConfigError(f"solution_dim must be >= 1, got {solution_dim}")
        if int(num_cells) < 1:
            raise ConfigError(f"an archive needs at least one cell, got {num_cells}")
        self.solution_dim = int(solution_dim)
        self.num_cells = int(num_cells)
        self.descriptor_dim = int(descriptor_dim)
        self.qd_offset = float(qd_offset)
        # One extra "trash" row absorbs the writes of candidates that do not enter.
        self.solutions = tf.Variable(tf.zeros([self.num_cells + 1, self.solution_dim]), trainable=False,
                                     name="solutions")
        self.fitness = tf.Variable(tf.fill([self.num_cells + 1], -np.inf), trainable=False, name="fitness")
        self.descriptors = tf.Variable(tf.zeros([self.num_cells + 1, self.descriptor_dim]), trainable=False,
                                       name="descriptors")
        self.occupied = tf.Variable(tf.zeros([self.num_cells + 1], tf.bool), trainable=False, name="occupied")
        self._add_fn = None
        # running: None, or {graph: running count} while an ask is traced; xla: True while an
        # ask is traced for XLA (custom ops are skipped)
        self._trace = Untracked(running=None, xla=False)

    # -- to implement -------------------------------------------------------
    @abc.abstractmethod
    def index_of(self, descriptors: tf.Tensor) -> tf.Tensor:
        """Cell index ``int32 [B]`` of each descriptor ``[B, k]``."""

    def _descriptor_tensor(self, descriptors) -> tf.Tensor:
        """``descriptors`` as float32 ``[B, k]``; a wrong rank or ``k`` is a :class:`ShapeError`."""
        d = tf.convert_to_tensor(descriptors, tf.float32)
        if d.shape.rank != 2 or (d.shape[1] is not None and d.shape[1] != self.descriptor_dim):
            raise ShapeError(f"descriptors must have shape [B, {self.descriptor_dim}] (descriptor_dim="
                             f"{self.descriptor_dim}), got {d.shape.as_list()}")
        return d

    # -- insertion ----------------------------------------------------------
    def _check(self, solutions, fitness, descriptors):
        solutions = tf.convert_to_tensor(solutions, tf.float32)
        fitness = tf.convert_to_tensor(fitness, tf.float32)
        descriptors = tf.convert_to_tensor(descriptors, tf.float32)
        b = solutions.shape[0]
        if solutions.shape.rank != 2 or solutions.shape[1] != self.solution_dim:
            raise ShapeError(f"solutions must have shape [B, {self.solution_dim}], got {solutions.shape.as_list()}")
        if fitness.shape.as_list() != [b]:
            raise ShapeError(f"fitness must have shape [{b}], got {fitness.shape.as_list()}")
        if descriptors.shape.as_list() != [b, self.descriptor_dim]:
            raise ShapeError(
                f"descriptors must have shape [{b}, {self.descriptor_dim}], got {descriptors.shape.as_list()}")
        return solutions, fitness, descriptors

    @property
    def insert_op_enabled(self) -> bool:
        """Whether :meth:`add` runs the C++ kernel ``TfevoArchiveInsert`` (``custom_ops/qd_emit.cc``)."""
        if self.use_op is False:
            return False
        from tfevo.qd.emitters import _emit_op

        return _emit_op() is not None

    @property
    def xla_insert(self) -> bool:
        """Whether :meth:`add` compiles with XLA (only the pure-TensorFlow path does)."""
        return self._xla_insert_pref and not self.insert_op_enabled

    def _add(self, solutions, fitness, descriptors):
        if self.insert_op_enabled and not self._trace.xla:
            from tfevo.qd.emitters import _emit_op

            grid = self._kernel_grid()
            if grid is None:
                finite_desc = tf.reduce_all(tf.math.is_finite(descriptors), axis=1)
                cell = self.index_of(tf.where(finite_desc[:, None], descriptors, 0.0))
                grid = (tf.zeros([0]), tf.zeros([0]), tf.zeros([0], tf.int32))
            else:  # the kernel computes the grid cells itself (one op for the whole insertion)
                cell = tf.zeros([0], tf.int32)
            status, value, cell = _emit_op().tfevo_archive_insert(
                self.solutions.handle, self.fitness.handle, self.descriptors.handle, self.occupied.handle,
                solutions, fitness, descriptors, cell, *grid, qd_offset=self.qd_offset)
            # The kernel reports in-batch losers' gain over the old elite; a candidate that did not enter has 0.
            return AddResult(status=status, value=tf.where(status > 0, value, 0.0), cell=cell)
        return self._add_reference(solutions, fitness, descriptors)

    def _kernel_grid(self):
        """``(lo, hi, bins)`` when the insertion kernel can compute the cells itself (grids), else ``None``."""
        return None

    def _add_reference(self, solutions, fitness, descriptors):
        """The pure-TensorFlow insertion (XLA-compilable); same rule as the kernel."""
        n = self.num_cells
        b = tf.shape(fitness)[0]
        fitness = sanitize_fitness(fitness)
        finite_desc = tf.reduce_all(tf.math.is_finite(descriptors), axis=1)
        alive = tf.math.is_finite(fitness) & finite_desc
        cell = self.index_of(tf.where(finite_desc[:, None], descriptors, 0.0))
        masked = tf.where(alive, fitness, -np.inf)
        # (ii) best candidate per cell within the batch
        seg = tf.where(alive, cell, n)  # dead candidates go to the trash segment
        batch_best = tf.math.unsorted_segment_max(masked, seg, n + 1)
        is_best = alive & tf.equal(masked, tf.gather(batch_best, seg))
        order = tf.range(b)
        first = tf.math.unsorted_segment_min(tf.where(is_best, order, b), seg, n + 1)
        winner = is_best & tf.equal(order, tf.gather(first, seg))
        # (iii) against the incumbent
        inc_fit = tf.gather(self.fitness, cell)
        inc_occ = tf.gather(self.occupied, cell)
        better = winner & (tf.logical_not(inc_occ) | (masked > inc_fit))
        target = tf.where(better, cell, n)[:, None]
        self.solutions.scatter_nd_update(target, solutions)
        self.fitness.scatter_nd_update(target, masked)
        self.descriptors.scatter_nd_update(target, descriptors)
        self.occupied.scatter_nd_update(target, tf.ones([b], tf.bool))
        # keep the trash row empty
        self.fitness.scatter_nd_update([[n]], [-np.inf])
        self.occupied.scatter_nd_update([[n]], [False])
        # status/value for every candidate (also the non-winners, against the pre-batch incumbent)
        new = alive & tf.logical_not(inc_occ)
        improve = alive & inc_occ & (masked > inc_fit)
        status = tf.where(better & new, 2, tf.where(better & improve, 1, 0))
        value = tf.where(status == 2, masked - self.qd_offset, tf.where(status == 1, masked - inc_fit, 0.0))
        return AddResult(status=tf.cast(status, tf.int32), value=value, cell=cell)

    def incumbents(self, descriptors):
        """``(occupied [B], fitness [B])`` of the cell each descriptor maps to, as the archive is now.

        Read before an insertion, it tells how each candidate compares with its
        cell's elite before the batch (what improvement-ranked emitters rank by).
        A non-finite descriptor reads cell 0 (such candidates never enter)."""
        d = tf.convert_to_tensor(descriptors, tf.float32)
        finite = tf.reduce_all(tf.math.is_finite(d), axis=1)
        cell = self.index_of(tf.where(finite[:, None], d, 0.0))
        return tf.gather(self.occupied, cell), tf.gather(self.fitness, cell)

    def add(self, solutions, fitness, descriptors) -> AddResult:
        """Inserts a batch (see the module docstring for the exact rule)."""
        solutions, fitness, descriptors = self._check(solutions, fitness, descriptors)
        if self._add_fn is None:
            self._add_fn = tf.function(self._add, jit_compile=self.xla_insert, autograph=False)
        return self._add_fn(solutions, fitness, descriptors)

    # -- reading ------------------------------------------------------------
    def sample_indices(self, n: int, seed: tf.Tensor) -> tf.Tensor:
        """``n`` cell indices drawn uniformly (with replacement) among filled cells.

        O(cells + n): a uniform rank in ``[0, filled)`` is mapped to its cell by
        a binary search in the running count of filled cells (fixed shapes, so
        it also compiles with XLA).  An empty archive yields cell 0.
        """
        running = self._running_count()
        filled = running[-1]
        # A float uniform scaled to the count: the int32 stateless uniform with a
        # tensor maxval measured >10x slower on CPU.  Exact for < 2**24 cells.
        count = tf.maximum(filled, 1)
        u = tf.random.stateless_uniform([n], seed=seed)
        r = tf.minimum(tf.cast(u * tf.cast(count, tf.float32), tf.int32), count - 1)
        idx = tf.searchsorted(running, r + 1, side="left", out_type=tf.int32)
        return tf.where(filled > 0, tf.minimum(idx, self.num_cells - 1), 0)

    def _running_count(self) -> tf.Tensor:
        """Running count of filled cells ``int32 [cells]``.

        While a running count is shared (:meth:`_share_running_count`, during
        one ``MAPElites.ask`` trace) the cumsum is computed at most once per
        graph, on first use, so every parent sample of the emitters shares one
        pass over the cells (and emitters that do not need it, such as the
        fused Iso+LineDD kernel, cost none).
        """
        shared = self._trace.running
        if shared is None:
            return tf.cumsum(tf.cast(self.occupied[: self.num_cells], tf.int32))
        graph = tf.compat.v1.get_default_graph()
        if graph not in shared:
            shared[graph] = tf.cumsum(tf.cast(self.occupied[: self.num_cells], tf.int32))
        return shared[graph]

    def _share_running_count(self, share: bool):
        """Starts (``True``) or ends (``False``) sharing the running count; graph-trace use only."""
        self._trace.running = {} if share else None

    def sample(self, n: int, seed: tf.Tensor) -> tf.Tensor:
        """``n`` solutions drawn uniformly (with replacement) among filled cells.

        If the archive is empty, returns the (zero) solution of cell 0.
        """
        return tf.gather(self.solutions, self.sample_indices(n, seed))

    @property
    def size(self) -> tf.Tensor:
        return tf.reduce_sum(tf.cast(self.occupied[: self.num_cells], tf.int32))

    def metrics(self) -> dict[str, float]:
        """coverage (fraction of cells filled), qd_score, max_fitness, mean_fitness, size."""
        occ = self.occupied[: self.num_cells].numpy()
        fit = self.fitness[: self.num_cells].numpy().astype(np.float64)
        if not occ.any():
            return {"coverage": 0.0, "qd_score": 0.0, "max_fitness": float("nan"),
                    "mean_fitness": float("nan"), "size": 0}
        return {
            "coverage": float(occ.mean()),
            "qd_score": float(np.sum(fit[occ] - self.qd_offset)),
            "max_fitness": float(fit[occ].max()),
            "mean_fitness": float(fit[occ].mean()),
            "size": int(occ.sum()),
        }

    def elites(self):
        """(solutions, fitness, descriptors, cell indices) of the filled cells, as numpy."""
        occ = self.occupied[: self.num_cells].numpy()
        idx = np.nonzero(occ)[0]
        return (self.solutions.numpy()[idx], self.fitness.numpy()[idx], self.descriptors.numpy()[idx], idx)

    def best(self):
        """(solution, fitness) of the best elite."""
        fit = tf.where(self.occupied, self.fitness, -np.inf)
        i = tf.argmax(fit)
        return self.solutions[i], fit[i]


class GridArchive(Archive):
    """A regular grid over a box of descriptor space.

    Args:
      solution_dim: D.
      dims: bins per descriptor dimension, e.g. ``[100, 100]``.
      ranges: ``[(low, high), ...]`` per descriptor dimension.  Descriptors
        outside are clipped into the border cells (as pyribs does).
      qd_offset: see :class:`Archive`.

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
                 use_op: bool | None = None):
        dims = [int(d) for d in dims]
        if not dims or any(d < 1 for d in dims):
            raise ConfigError(f"dims must be a non-empty list of positive bin counts, got {dims}")
        ranges = [tuple(float(v) for v in r) for r in ranges]
        if len(ranges) != len(dims):
            raise ConfigError(f"ranges has {len(ranges)} entries but dims has {len(dims)}")
        for lo, hi in ranges:
            if not hi > lo:
                raise ConfigError(f"each range needs high > low, got ({lo}, {hi})")
        super().__init__(solution_dim, int(np.prod(dims)), len(dims), qd_offset, name=name, use_op=use_op)
        self.dims = dims
        self.ranges = ranges
        self._lo = tf.constant([r[0] for r in ranges], tf.float32)
        self._hi = tf.constant([r[1] for r in ranges], tf.float32)
        self._bins = tf.constant(dims, tf.int32)
        strides = np.cumprod([1] + dims[::-1])[:-1][::-1].copy()  # row-major
        self._strides = tf.constant(strides, tf.int32)

    def _kernel_grid(self):
        return self._lo, self._hi, self._bins

    def grid_index(self, descriptors: tf.Tensor) -> tf.Tensor:
        """Per-dimension bin ``int32 [B, k]``."""
        d = self._descriptor_tensor(descriptors)
        frac = (d - self._lo) / (self._hi - self._lo)
        b = tf.cast(tf.floor(frac * tf.cast(self._bins, tf.float32)), tf.int32)
        return tf.clip_by_value(b, 0, self._bins - 1)

    def index_of(self, descriptors: tf.Tensor) -> tf.Tensor:
        return tf.reduce_sum(self.grid_index(descriptors) * self._strides, axis=1)

    def cell_centers(self) -> np.ndarray:
        axes = [np.linspace(lo, hi, d + 1)[:-1] + (hi - lo) / d / 2 for (lo, hi), d in zip(self.ranges, self.dims)]
        mesh = np.meshgrid(*axes, indexing="ij")
        return np.stack([m.reshape(-1) for m in mesh], axis=1)


def kmeans_centroids(samples: np.ndarray | tf.Tensor, k: int, iterations: int = 30, seed: int = 0) -> np.ndarray:
    """Lloyd's k-means in TensorFlow (init: k distinct samples drawn from the seed)."""
    x = tf.convert_to_tensor(samples, tf.float32)
    n = int(x.shape[0])
    if n < k:
        raise ConfigError(f"k-means needs at least k={k} samples, got {n}")
    perm = tf.argsort(tf.random.stateless_uniform([n], seed=[seed, 17]))[:k]
    c = tf.gather(x, perm)
    x2 = tf.reduce_sum(x * x, 1, keepdims=True)

    @tf.function(autograph=False)
    def step(c):
        d = x2 - 2.0 * tf.matmul(x, c, transpose_b=True) + tf.reduce_sum(c * c, 1)[None]
        a = tf.argmin(d, 1, output_type=tf.int32)
        s = tf.math.unsorted_segment_sum(x, a, k)
        cnt = tf.math.unsorted_segment_sum(tf.ones([n]), a, k)
        return tf.where(cnt[:, None] > 0, s / tf.maximum(cnt[:, None], 1.0), c)

    for _ in range(int(iterations)):
        c = step(c)
    return c.numpy()


class CVTArchive(Archive):
    """A centroidal Voronoi tessellation archive (Vassiliades et al. 2018).

    Centroids come from k-means on ``num_samples`` points drawn uniformly in
    the descriptor box (TensorFlow k-means, seeded) and are cached on disk
    (``$TFEVO_CACHE`` or ``~/.cache/tfevo/cvt``) keyed by all their parameters,
    so the next run with the same settings loads them.  A descriptor's cell is
    its nearest centroid.

    Args:
      solution_dim: D.
      cells: number of centroids.
      ranges: ``[(low, high), ...]`` per descriptor dimension.
      num_samples: points for k-means (default ``max(100_000, 10*cells)``).
      centroids: optionally, an array ``[cells, k]`` to use directly.
      lookup: ``"auto"`` (bucket lookup for 1-4 descriptor dimensions,
        brute force otherwise), ``"buckets"`` or ``"brute"``.

    Nearest-centroid lookup is exact either way.  With buckets, centroids are
    binned on a regular grid over the box (``G`` bins per axis, width ``w``
    about twice the centroid spacing; border bins extend to infinity).  A
    query only compares the centroids of its ``3^k`` neighbouring bins
    (padded to the fullest bin).  Any centroid outside that neighbourhood is
    at least ``w_min`` away, so when the best candidate is closer than
    ``w_min`` it is the true nearest centroid; the rare queries where it is
    not (e.g. far outside the box) fall back to brute force.  Ties go to the
    lowest centroid index, as with a brute-force ``argmin``.
    """

    def __init__(self, solution_dim: int, cells: int, ranges, qd_offset: float = 0.0, num_samples: int | None = None,
                 iterations: int = 30, seed: int = 0, centroids=None, cache: bool = True, lookup: str = "auto",
                 name: str | None = None, use_op: bool | None = None):
        if isinstance(cells, bool) or not isinstance(cells, (int, np.integer)) or int(cells) < 1:
            raise ConfigError(f"CVTArchive cells must be a positive integer (number of centroids), got {cells!r}")
        if lookup not in ("auto", "buckets", "brute"):
            raise ConfigError(f"lookup must be 'auto', 'buckets' or 'brute', got {lookup!r}")
        ranges = [tuple(float(v) for v in r) for r in ranges]
        for lo, hi in ranges:
            if not hi > lo:
                raise ConfigError(f"each range needs high > low, got ({lo}, {hi})")
        k = len(ranges)
        if centroids is None:
            centroids = self._centroids(int(cells), ranges, num_samples or max(100_000, 10 * int(cells)),
                                        iterations, seed, cache)
        centroids = np.asarray(centroids, np.float32)
        if centroids.shape != (int(cells), k):
            raise ShapeError(f"centroids must have shape [{cells}, {k}], got {list(centroids.shape)}")
        super().__init__(solution_dim, int(cells), k, qd_offset, name=name, use_op=use_op)
        self.ranges = ranges
        self.centroids = tf.constant(centroids)
        self._c2 = tf.reduce_sum(self.centroids * self.centroids, 1)
        self._buckets = None
        if lookup == "buckets" or (lookup == "auto" and k <= 4 and int(cells) >= 64):
            self._buckets = self._build_buckets(centroids, ranges)

    @staticmethod
    def _build_buckets(centroids, ranges):
        """Bins the centroids; returns the lookup tables (see the class docstring)."""
        n, k = centroids.shape
        lo = np.array([r[0] for r in ranges], np.float64)
        hi = np.array([r[1] for r in ranges], np.float64)
        g = max(1, int(np.floor((n ** (1.0 / k)) / 1.4)))
        w = (hi - lo) / g
        b = np.clip(np.floor((centroids.astype(np.float64) - lo) / w), 0, g - 1).astype(np.int64)
        strides = np.cumprod([1] + [g + 2] * (k - 1))  # padded grid: one empty bin on each side
        flat = ((b + 1) * strides).sum(1)
        nb = (g + 2) ** k
        counts = np.bincount(flat, minlength=nb)
        m = int(counts.max())
        table = np.full((nb, m), n, np.int32)  # index n = a sentinel centroid far away
        order = np.argsort(flat, kind="stable")  # within a bin, by centroid index
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        pos = np.arange(n) - starts[flat[order]]
        table[flat[order], pos] = order
        offsets = np.stack(np.meshgrid(*[[-1, 0, 1]] * k, indexing="ij"), -1).reshape(-1, k)
        nbr = (offsets * strides).sum(1)
        padded = np.concatenate([centroids, np.full((1, k), 1e15, np.float32)], 0)
        return {"lo": tf.constant(lo, tf.float32), "w": tf.constant(w, tf.float32), "g": g,
                "strides": tf.constant(strides, tf.int32), "nbr": tf.constant(nbr, tf.int32),
                "table": tf.constant(table), "padded": tf.constant(padded),
                "wmin2": float(np.min(w) ** 2 * (1.0 - 1e-5)), "max_per_bin": m}

    @staticmethod
    def _pick(dist, cand, big):
        """Nearest among candidates ``[B, m]``; ties to the lowest centroid index."""
        best = tf.reduce_min(dist, 1)
        idx = tf.reduce_min(tf.where(tf.equal(dist, best[:, None]), cand, big), 1)
        return idx, best

    def _brute(self, d):
        """Exact brute force: the 8 nearest by the fast expanded form, refined by direct differences."""
        dist = self._c2[None] - 2.0 * tf.matmul(d, self.centroids, transpose_b=True)
        kk = min(8, self.num_cells)
        cand = tf.math.top_k(-dist, kk).indices
        diff = d[:, None, :] - tf.gather(self.centroids, cand)
        return self._pick(tf.reduce_sum(diff * diff, -1), cand, self.num_cells)[0]

    @staticmethod
    def _centroids(cells, ranges, num_samples, iterations, seed, cache):
        key = hashlib.sha256(repr((cells, ranges, num_samples, iterations, seed)).encode()).hexdigest()[:16]
        root = os.environ.get("TFEVO_CACHE") or os.path.join(Path.home(), ".cache", "tfevo")
        path = Path(root) / "cvt" / f"cvt-{key}.npy"
        if cache and path.is_file():
            return np.load(path)
        lo = np.array([r[0] for r in ranges], np.float32)
        hi = np.array([r[1] for r in ranges], np.float32)
        u = tf.random.stateless_uniform([num_samples, len(ranges)], seed=[seed, 3]).numpy()
        c = kmeans_centroids(lo + u * (hi - lo), cells, iterations, seed)
        if cache:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(path.name + f".{os.getpid()}.tmp.npy")
            np.save(tmp, c)
            os.replace(tmp, path)
        return c

    def index_of(self, descriptors: tf.Tensor) -> tf.Tensor:
        """Nearest centroid ``int32 [B]`` of each descriptor (exact; ties to the lowest index).

        With buckets it runs the C++ kernel ``TfevoNearestCentroid`` when it is
        built (same tables, same acceptance test, exact scan fallback), else
        the TensorFlow bucket lookup below."""
        d = self._descriptor_tensor(descriptors)
        t = self._buckets
        if t is None:
            return self._brute(d)
        if self.insert_op_enabled and not self._trace.xla:
            from tfevo.qd.emitters import _emit_op

            return _emit_op().tfevo_nearest_centroid(d, self.centroids, t["table"], t["nbr"], t["lo"], t["w"],
                                                     t["strides"], g=t["g"], wmin2=t["wmin2"])
        return self._index_of_reference(d)

    def _index_of_reference(self, d):
        """The pure-TensorFlow bucket lookup."""
        t = self._buckets
        b = tf.clip_by_value(tf.cast(tf.floor((d - t["lo"]) / t["w"]), tf.int32), 0, t["g"] - 1)
        home = tf.reduce_sum((b + 1) * t["strides"], 1)
        bins = home[:, None] + t["nbr"][None]  # [B, 3^k]
        cand = tf.reshape(tf.gather(t["table"], bins), [tf.shape(d)[0], -1])  # [B, 3^k * m]
        diff = d[:, None, :] - tf.gather(t["padded"], cand)
        idx, best = self._pick(tf.reduce_sum(diff * diff, -1), cand, self.num_cells)
        ok = best < t["wmin2"]
        # Rare: the best candidate is not provably the nearest; brute force for those queries only.
        bad = tf.where(tf.logical_not(ok))
        fixed = self._brute(tf.gather_nd(d, bad))
        return tf.tensor_scatter_nd_update(idx, bad, fixed)
