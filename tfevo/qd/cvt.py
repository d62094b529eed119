"""The centroidal Voronoi tessellation archive (:class:`CVTArchive`) and its k-means."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
import tensorflow as tf

from tfevo.core import ConfigError, ShapeError, arguments_checked, check_int, check_seed
from tfevo.qd.archive_base import Archive, checked_ranges

__all__ = ["CVTArchive", "kmeans_centroids"]


#: most distances k-means computes at once (float32: 256 MB)
_KMEANS_BLOCK = 2**26


def kmeans_centroids(samples: np.ndarray | tf.Tensor, k: int, iterations: int = 30, seed: int = 0) -> np.ndarray:
    """Lloyd's k-means in TensorFlow (init: k distinct samples drawn from the seed)."""
    k = check_int(k, "k", 1, integral_float=True)
    iterations = check_int(iterations, "iterations", 0, integral_float=True)
    seed = check_seed(seed)
    x = tf.convert_to_tensor(samples, tf.float32)
    if x.shape.rank != 2:
        raise ShapeError(f"k-means samples must have shape [n, descriptor_dim], got {x.shape.as_list()}")
    if not np.all(np.isfinite(x.numpy())):
        raise ConfigError("k-means samples must be finite (a NaN sample makes NaN centroids)")
    n = int(x.shape[0])
    if n < k:
        raise ConfigError(f"k-means needs at least k={k} samples, got {n}")
    perm = tf.argsort(tf.random.stateless_uniform([n], seed=[seed, 17]))[:k]
    c = tf.gather(x, perm)
    x2 = tf.reduce_sum(x * x, 1, keepdims=True)
    # the distances [n, k] at once would need n*k floats (100_000 cells: 10**6 samples, 400 GB); past
    # _KMEANS_BLOCK of them the samples are assigned a block of rows at a time (same argmin per row)
    rows = max(1, _KMEANS_BLOCK // k)
    blocks = -(-n // rows)

    def nearest(xb, x2b, c):
        return tf.argmin(x2b - 2.0 * tf.matmul(xb, c, transpose_b=True) + tf.reduce_sum(c * c, 1)[None], 1,
                         output_type=tf.int32)

    def assign(c):
        if blocks == 1:
            return nearest(x, x2, c)
        pad = blocks * rows - n
        xb = tf.reshape(tf.pad(x, [[0, pad], [0, 0]]), [blocks, rows, -1])
        x2b = tf.reshape(tf.pad(x2, [[0, pad], [0, 0]]), [blocks, rows, 1])
        a = tf.map_fn(lambda t: nearest(t[0], t[1], c), (xb, x2b), fn_output_signature=tf.int32,
                      parallel_iterations=1)
        return tf.reshape(a, [-1])[:n]

    @tf.function(autograph=False)
    def step(c):
        a = assign(c)
        s = tf.math.unsorted_segment_sum(x, a, k)
        cnt = tf.math.unsorted_segment_sum(tf.ones([n]), a, k)
        return tf.where(cnt[:, None] > 0, s / tf.maximum(cnt[:, None], 1.0), c)

    for _ in range(int(iterations)):
        c = step(c)
    return c.numpy()


@arguments_checked
class CVTArchive(Archive):
    """A centroidal Voronoi tessellation archive (Vassiliades et al. 2018).

    Centroids come from k-means on ``num_samples`` points drawn uniformly in
    the descriptor box (TensorFlow k-means, seeded) and are cached on disk
    (``$TFEVO_CACHE`` or ``~/.cache/tfevo/cvt``) keyed by all their parameters,
    so the next run with the same settings loads them.  A descriptor's cell is
    its nearest centroid.

    Args:
      solution_dim: D.
      cells: number of centroids (may be left out when ``centroids`` gives it).
      ranges: ``[(low, high), ...]`` per descriptor dimension.
      num_samples: points for k-means (default ``max(100_000, 10*cells)``).
      centroids: optionally, an array ``[cells, k]`` to use directly, or, as
        pyribs' ``CVTArchive(centroids=n)``, the number of centroids.
      lookup: ``"auto"`` (bucket lookup for 1-4 descriptor dimensions,
        brute force otherwise), ``"buckets"`` or ``"brute"``.
      learning_rate, threshold_min: CMA-MAE's soft archive, see
        :class:`~tfevo.qd.archive_base.Archive`.

    Nearest-centroid lookup is exact either way.  With buckets, centroids are
    binned on a regular grid over the box (``G`` bins per axis, width ``w``
    about twice the centroid spacing; border bins extend to infinity).  A
    query only compares the centroids of its ``3^k`` neighbouring bins
    (padded to the fullest bin).  Any centroid outside that neighbourhood is
    at least ``w_min`` away, so when the best candidate is closer than
    ``w_min`` it is the true nearest centroid; the rare queries where it is
    not (e.g. far outside the box) fall back to an exact scan.  Distances are
    float64 (so a descriptor far outside the box still finds its nearest
    centroid) and ties go to the lowest centroid index, as with a brute-force
    ``argmin``; the C++ kernel and the TensorFlow lookup agree exactly.
    """

    def __init__(self, solution_dim: int, cells: int | None = None, ranges=None, qd_offset: float = 0.0,
                 num_samples: int | None = None, iterations: int = 30, seed: int = 0, centroids=None,
                 cache: bool = True, lookup: str = "auto", name: str | None = None, use_op: bool | None = None,
                 learning_rate: float | None = None, threshold_min: float = -np.inf):
        if isinstance(centroids, (int, np.integer)) and not isinstance(centroids, bool):
            # pyribs' CVTArchive(centroids=n): the number of centroids, computed by k-means
            if cells is not None and cells != centroids:
                raise ConfigError(f"cells={cells!r} and centroids={centroids!r} (a number of centroids, as pyribs "
                                  "takes it) disagree; give one of them")
            cells, centroids = centroids, None
        if cells is None and centroids is not None:
            cells = int(np.shape(centroids)[0]) if np.ndim(centroids) == 2 else None
        if cells is None:
            raise ConfigError("CVTArchive needs cells (the number of centroids) or centroids (an array [cells, "
                              f"descriptor_dim], or a number of centroids as in pyribs), got centroids={centroids!r}")
        if isinstance(cells, bool) or not isinstance(cells, (int, np.integer)) or int(cells) < 1:
            raise ConfigError(f"CVTArchive cells must be a positive integer (number of centroids), got {cells!r}")
        if lookup not in ("auto", "buckets", "brute"):
            raise ConfigError(f"lookup must be 'auto', 'buckets' or 'brute', got {lookup!r}")
        ranges = checked_ranges(ranges)
        k = len(ranges)
        if centroids is None:
            if num_samples is not None:
                num_samples = check_int(num_samples, "num_samples", int(cells), integral_float=True)
            iterations, seed = check_int(iterations, "iterations", 0, integral_float=True), check_seed(seed)
            centroids = self._centroids(int(cells), ranges, num_samples or max(100_000, 10 * int(cells)),
                                        iterations, seed, cache)
        centroids = np.asarray(centroids, np.float32)
        if centroids.shape != (int(cells), k):
            raise ShapeError(f"centroids must have shape [{cells}, {k}], got {list(centroids.shape)}")
        if not np.all(np.isfinite(centroids)):
            raise ConfigError("centroids must be finite (a NaN centroid is never the nearest: its cell stays "
                              "empty)")
        super().__init__(solution_dim, int(cells), k, qd_offset, name=name, use_op=use_op,
                         learning_rate=learning_rate, threshold_min=threshold_min)
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
                "wmin2": float(np.float32(np.min(w) ** 2 * (1.0 - 1e-5))), "max_per_bin": m}

    @staticmethod
    def _pick(dist, cand, big):
        """Nearest among candidates ``[B, m]``; ties to the lowest centroid index."""
        best = tf.reduce_min(dist, 1)
        idx = tf.reduce_min(tf.where(tf.equal(dist, best[:, None]), cand, big), 1)
        return idx, best

    @staticmethod
    def _dist2(d, c):
        """Squared distances ``[B, m]`` of queries ``[B, k]`` to candidates ``[B, m, k]``.

        In float64, summed over the k dimensions in order: a float32 query far
        outside the box loses the centroids' low bits in a float32 difference,
        and the C++ kernel sums the same way."""
        e = tf.cast(d, tf.float64)[:, None, :] - tf.cast(c, tf.float64)
        s = e[..., 0] * e[..., 0]
        for a in range(1, e.shape[-1]):
            s = s + e[..., a] * e[..., a]
        return s

    def _brute(self, d):
        """Exact brute force: the 8 nearest by the fast expanded form, refined by direct differences.

        The expanded form ``|c|^2 - 2 d.c`` ranks centroids to within float32
        rounding of ``|c|`` whatever ``|d|``, so the true nearest is among the
        8 unless 8 centroids tie to that precision."""
        dist = self._c2[None] - 2.0 * tf.matmul(d, self.centroids, transpose_b=True)
        kk = min(8, self.num_cells)
        cand = tf.math.top_k(-dist, kk).indices
        return self._pick(self._dist2(d, tf.gather(self.centroids, cand)), cand, self.num_cells)[0]

    def _scan(self, d):
        """The exact scan over all centroids (the kernel's fallback), in blocks of queries
        that keep the ``[block, cells, k]`` differences near 32 MiB."""
        n, k = self.num_cells, self.centroids.shape[1]
        block = max(1, (1 << 22) // (n * k))
        count = tf.shape(d)[0]
        padded = tf.concat([d, tf.zeros([(-count) % block, k], d.dtype)], 0)
        cand = tf.broadcast_to(tf.range(n, dtype=tf.int32)[None], [block, n])

        def one(q):
            return self._pick(self._dist2(q, tf.broadcast_to(self.centroids[None], [block, n, k])), cand, n)[0]

        out = tf.map_fn(one, tf.reshape(padded, [-1, block, k]), fn_output_signature=tf.int32)
        return tf.reshape(out, [-1])[:count]

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
        the TensorFlow bucket lookup below.  ``-1`` (no cell) for a descriptor with a NaN or
        infinite component."""
        d = self._descriptor_tensor(descriptors)
        return self._no_cell_if_nonfinite(d, self._nearest(d))

    def _nearest(self, d):
        t = self._buckets
        if t is None:
            return self._brute(d)
        nearest = None if self._trace.xla else self._kernel("TfevoNearestCentroid")
        if nearest is not None:
            return nearest(d, self.centroids, t["table"], t["nbr"], t["lo"], t["w"], t["strides"], g=t["g"],
                           wmin2=t["wmin2"])
        return self._index_of_reference(d)

    def _index_of_reference(self, d):
        """The pure-TensorFlow bucket lookup."""
        t = self._buckets
        b = tf.clip_by_value(tf.cast(tf.floor((d - t["lo"]) / t["w"]), tf.int32), 0, t["g"] - 1)
        home = tf.reduce_sum((b + 1) * t["strides"], 1)
        bins = home[:, None] + t["nbr"][None]  # [B, 3^k]
        cand = tf.reshape(tf.gather(t["table"], bins), [tf.shape(d)[0], -1])  # [B, 3^k * m]
        idx, best = self._pick(self._dist2(d, tf.gather(t["padded"], cand)), cand, self.num_cells)
        ok = best < t["wmin2"]
        # Rare: the best candidate is not provably the nearest; the exact scan for those queries only.
        bad = tf.where(tf.logical_not(ok))
        fixed = self._scan(tf.gather_nd(d, bad))
        return tf.tensor_scatter_nd_update(idx, bad, fixed)
