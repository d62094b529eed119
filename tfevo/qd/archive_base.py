"""The archive base class (:mod:`tfevo.qd.archives`): storage, batched insertion, sampling, metrics."""

from __future__ import annotations

import abc
from typing import NamedTuple

import numpy as np
import tensorflow as tf

from tfevo import kernels
from tfevo._holder import Untracked
from tfevo.core import ConfigError, ShapeError, check_int, sanitize_fitness

__all__ = ["Archive", "AddResult", "pre_batch_status"]


def checked_ranges(ranges) -> list[tuple[float, float]]:
    """``ranges`` as a non-empty list of ``(low, high)`` floats, finite with ``high > low``; else a
    :class:`ConfigError` naming the value."""
    try:
        if isinstance(ranges, (str, bytes)):
            raise TypeError
        out = [tuple(float(v) for v in r) for r in ranges]
        if not out or any(len(r) != 2 for r in out):
            raise ValueError
    except (TypeError, ValueError):
        raise ConfigError(f"ranges must be a list of (low, high) pairs, one per descriptor, got {ranges!r}") from None
    for lo, hi in out:
        if not (hi > lo and np.isfinite(lo) and np.isfinite(hi)):
            raise ConfigError(f"ranges: each (low, high) needs finite values with high > low, got ({lo}, {hi})")
    return out


def soft_settings(learning_rate, threshold_min):
    """Checked ``(learning_rate, threshold_min)`` of an archive (pyribs' rules, see :class:`Archive`)."""
    def number(name, v):
        if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) or np.isnan(v):
            raise ConfigError(f"{name} must be a number, got {v!r}")
        return float(v)

    threshold_min = number("threshold_min", threshold_min)
    if threshold_min > -np.inf and abs(threshold_min) > float(np.finfo(np.float32).max):
        raise ConfigError(f"threshold_min must be finite in float32 (CMA-MAE; the thresholds are float32) or -inf "
                          f"(plain MAP-Elites), got {threshold_min}")
    if learning_rate is None:
        if threshold_min > -np.inf:
            raise ConfigError(f"threshold_min={threshold_min} was set without learning_rate; threshold_min is "
                              "CMA-MAE's initial cell threshold and needs learning_rate in [0, 1] (e.g. 0.01)")
        return 1.0, -np.inf
    learning_rate = number("learning_rate", learning_rate)
    if not 0.0 <= learning_rate <= 1.0:
        raise ConfigError(f"learning_rate must be in [0, 1] (CMA-MAE's threshold step), got {learning_rate}")
    if threshold_min == -np.inf and learning_rate != 1.0:
        raise ConfigError(f"learning_rate={learning_rate} needs a finite threshold_min (CMA-MAE, e.g. 0 or a lower "
                          "bound of the fitness); threshold_min=-inf is only valid with learning_rate 1")
    return learning_rate, threshold_min


def power_by_squaring(base: tf.Tensor, k: tf.Tensor, max_k: int) -> tf.Tensor:
    """``base ** k`` (float64) for integer ``0 <= k <= max_k`` by repeated squaring, the order of
    products the C++ insertion kernel uses, so both round alike."""
    result = tf.ones_like(base)
    p = base
    bit = 1
    while bit <= max_k:
        result = tf.where(tf.bitwise.bitwise_and(k, bit) != 0, result * p, result)
        p = p * p
        bit *= 2
    return result


def pre_batch_status(fitness, descriptors, incumbent):
    """pyribs' ``add`` status and value of each candidate against the archive before the batch.

    ``incumbent=(occupied, threshold)`` from :meth:`Archive.incumbents`.  A
    candidate whose fitness beats its cell's threshold has status 2 (empty
    cell) or 1 (occupied), else 0; every candidate is judged alone, so the
    losers of a cell contested within the batch keep their status.  The value
    is the fitness minus the threshold, where an empty cell counts
    ``threshold_min`` (0 in a plain archive, whose empty cells have
    threshold ``-inf``).  A non-finite fitness or descriptor gets status -1
    and value 0.  Returns ``(status int32 [B], value float32 [B])``."""
    f = tf.convert_to_tensor(fitness, tf.float32)
    alive = tf.math.is_finite(f) & tf.reduce_all(tf.math.is_finite(tf.cast(descriptors, tf.float32)), axis=1)
    occ, thr = incumbent
    can = alive & (f > thr)
    status = tf.where(can & tf.logical_not(occ), 2, tf.where(can & occ, 1, 0))
    base = tf.where(occ | (thr > -np.inf), thr, 0.0)
    value = f - base
    return tf.where(alive, status, -1), tf.where(alive, value, 0.0)


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
      learning_rate, threshold_min: CMA-MAE's soft archive (Fontaine &
        Nikolaidis 2023), named as pyribs names them.  Each cell then has an
        acceptance threshold, ``threshold_min`` while it is empty; a candidate
        enters when its fitness beats its cell's threshold (the best such
        candidate of a batch per cell, first on ties, replacing the elite even
        when the elite's fitness is higher), and the threshold of a cell that
        ``k`` candidates of one batch beat moves to ``(1 - a)^k t + (1 - (1 -
        a)^k) * mean of their fitness`` (pyribs' batch rule; ``t <- (1 - a) t +
        a f`` for one).  The update is computed in float64 and stored in
        float32.  Defaults ``learning_rate=None`` (1) and ``threshold_min=-inf``:
        the plain MAP-Elites archive, whose threshold is the elite's fitness.
        A ``threshold_min`` without ``learning_rate``, a ``learning_rate``
        outside ``[0, 1]``, or one below 1 with ``threshold_min=-inf`` is a
        :class:`ConfigError`, as in pyribs.  The elites of a soft archive are
        not the best solutions found; keep those in a second, plain archive
        (``MAPElites(result_archive=...)``).
    """

    #: whether the pure-TensorFlow insertion compiles with XLA (measured faster
    #: for the grid; the CVT bucket lookup has a data-dependent fallback, so it
    #: stays a graph).  Irrelevant when the C++ insertion kernel is used.
    _xla_insert_pref = False

    def __init__(self, solution_dim: int, num_cells: int, descriptor_dim: int, qd_offset: float = 0.0,
                 name: str | None = None, use_op: bool | None = None, learning_rate: float | None = None,
                 threshold_min: float = -np.inf):
        learning_rate, threshold_min = soft_settings(learning_rate, threshold_min)
        super().__init__(name=name)
        if kernels.check_use_op(use_op):
            kernels.kernel("TfevoArchiveInsert", True)  # KernelUnavailableError (a ConfigError) naming why not
        self.use_op = use_op
        self.solution_dim = check_int(solution_dim, "solution_dim", 1, integral_float=True)
        if int(num_cells) < 1:
            raise ConfigError(f"an archive needs at least one cell, got {num_cells}")
        self.num_cells = int(num_cells)
        self.descriptor_dim = int(descriptor_dim)
        if isinstance(qd_offset, (bool, str, bytes)) or not isinstance(qd_offset, (int, float, np.integer,
                                                                                     np.floating)):
            raise ConfigError(f"qd_offset must be a finite number, got {qd_offset!r}")
        self.qd_offset = float(qd_offset)
        if not np.isfinite(self.qd_offset):
            raise ConfigError(f"qd_offset must be a finite number, got {qd_offset}")
        # One extra "trash" row absorbs the writes of candidates that do not enter.
        self.solutions = tf.Variable(tf.zeros([self.num_cells + 1, self.solution_dim]), trainable=False,
                                     name="solutions")
        self.fitness = tf.Variable(tf.fill([self.num_cells + 1], -np.inf), trainable=False, name="fitness")
        self.descriptors = tf.Variable(tf.zeros([self.num_cells + 1, self.descriptor_dim]), trainable=False,
                                       name="descriptors")
        self.occupied = tf.Variable(tf.zeros([self.num_cells + 1], tf.bool), trainable=False, name="occupied")
        self.learning_rate, self.threshold_min = learning_rate, threshold_min
        #: whether this is CMA-MAE's soft archive (per-cell thresholds, see the class docstring)
        self.soft = bool(threshold_min > -np.inf)
        if self.soft:
            self.threshold = tf.Variable(tf.fill([self.num_cells + 1], np.float32(threshold_min)), trainable=False,
                                         name="threshold")
        self._add_fn = None
        # running: None, or {graph: running count} while an ask is traced; xla: True while an
        # ask is traced for XLA (custom ops are skipped)
        self._trace = Untracked(running=None, xla=False)

    # -- to implement -------------------------------------------------------
    @abc.abstractmethod
    def index_of(self, descriptors: tf.Tensor) -> tf.Tensor:
        """Cell index ``int32 [B]`` of each descriptor ``[B, k]``; ``-1`` (no cell) for a descriptor
        with a NaN or infinite component, which :meth:`add` drops (pyribs' ``index_of`` raises)."""

    @staticmethod
    def _no_cell_if_nonfinite(d: tf.Tensor, cell: tf.Tensor) -> tf.Tensor:
        """``cell`` with ``-1`` where a row of ``d`` has a non-finite component."""
        return tf.where(tf.reduce_all(tf.math.is_finite(d), axis=1), cell, -1)

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

    def _kernel(self, op: str):
        """The C++ kernel ``op`` (``custom_ops/qd_emit.cc``) when :func:`tfevo.kernels.kernel` lets it
        run here on this archive's storage (never with ``use_op=False``), else ``None``."""
        if self.use_op is False:
            return None
        return kernels.kernel(op, None, [self.solutions])

    @property
    def insert_op_enabled(self) -> bool:
        """Whether :meth:`add` runs the C++ kernel ``TfevoArchiveInsert`` (``custom_ops/qd_emit.cc``)."""
        return self._kernel("TfevoArchiveInsert") is not None

    @property
    def xla_insert(self) -> bool:
        """Whether :meth:`add` compiles with XLA (only the pure-TensorFlow path does)."""
        return self._xla_insert_pref and not self.insert_op_enabled

    def _add(self, solutions, fitness, descriptors):
        insert = None if self._trace.xla else self._kernel("TfevoArchiveInsert")
        if insert is not None:
            grid = self._kernel_grid()
            if grid is None:
                finite_desc = tf.reduce_all(tf.math.is_finite(descriptors), axis=1)
                cell = self.index_of(tf.where(finite_desc[:, None], descriptors, 0.0))
                grid = (tf.zeros([0], tf.float64), tf.zeros([0], tf.float64), tf.zeros([0], tf.int32),
                        tf.zeros([], tf.float64))
            else:  # the kernel computes the grid cells itself (one op for the whole insertion)
                cell = tf.zeros([0], tf.int32)
            soft = ([self.threshold.handle], [tf.constant(1.0 - self.learning_rate, tf.float64)]) if self.soft \
                else ([], [])
            status, value, cell = insert(
                self.solutions.handle, self.fitness.handle, self.descriptors.handle, self.occupied.handle,
                *soft[:1], solutions, fitness, descriptors, cell, *grid, *soft[1:], qd_offset=self.qd_offset)
            # The kernel reports in-batch losers' gain over the old elite; a candidate that did not enter has 0.
            return AddResult(status=status, value=tf.where(status > 0, value, 0.0), cell=cell)
        return self._add_reference(solutions, fitness, descriptors)

    def _kernel_grid(self):
        """``(lo, hi, bins, epsilon)`` (float64, float64, int32, float64) when the insertion kernel can compute the cells itself (grids), else ``None``."""
        return None

    def _add_reference(self, solutions, fitness, descriptors):
        """The pure-TensorFlow insertion (XLA-compilable); same rule as the kernel."""
        if self.soft:
            return self._add_reference_soft(solutions, fitness, descriptors)
        n = self.num_cells
        cell, alive, masked = self._candidates(fitness, descriptors)
        # (ii) best candidate per cell within the batch
        winner, _ = self._batch_winners(masked, alive, cell)
        # (iii) against the incumbent
        inc_fit = tf.gather(self.fitness, cell)
        inc_occ = tf.gather(self.occupied, cell)
        better = winner & (tf.logical_not(inc_occ) | (masked > inc_fit))
        self._write(tf.where(better, cell, n)[:, None], solutions, masked, descriptors)
        # status/value for every candidate (also the non-winners, against the pre-batch incumbent)
        new = alive & tf.logical_not(inc_occ)
        improve = alive & inc_occ & (masked > inc_fit)
        status = tf.where(better & new, 2, tf.where(better & improve, 1, 0))
        value = tf.where(status == 2, masked - self.qd_offset, tf.where(status == 1, masked - inc_fit, 0.0))
        return AddResult(status=tf.cast(status, tf.int32), value=value, cell=cell)

    def _candidates(self, fitness, descriptors):
        """``(cell, alive, masked)`` of a batch: each candidate's cell (a non-finite descriptor reads
        cell 0), whether its fitness and descriptor are finite, and its fitness (``-inf`` if not)."""
        fitness = sanitize_fitness(fitness)
        finite_desc = tf.reduce_all(tf.math.is_finite(descriptors), axis=1)
        alive = tf.math.is_finite(fitness) & finite_desc
        cell = self.index_of(tf.where(finite_desc[:, None], descriptors, 0.0))
        return cell, alive, tf.where(alive, fitness, -np.inf)

    def _batch_winners(self, masked, can, cell):
        """``(winner [B], seg [B])``: the first best candidate of each cell among those with ``can``;
        ``seg`` is the candidate's cell, or the trash segment ``n`` without ``can``."""
        n, b = self.num_cells, tf.shape(masked)[0]
        seg = tf.where(can, cell, n)
        batch_best = tf.math.unsorted_segment_max(masked, seg, n + 1)
        is_best = can & tf.equal(masked, tf.gather(batch_best, seg))
        order = tf.range(b)
        first = tf.math.unsorted_segment_min(tf.where(is_best, order, b), seg, n + 1)
        return is_best & tf.equal(order, tf.gather(first, seg)), seg

    def _write(self, target, solutions, fitness, descriptors):
        """Writes each candidate into its ``target`` row ``[B, 1]`` (the trash row ``n`` for the
        others), then empties the trash row."""
        n = self.num_cells
        self.solutions.scatter_nd_update(target, solutions)
        self.fitness.scatter_nd_update(target, fitness)
        self.descriptors.scatter_nd_update(target, descriptors)
        self.occupied.scatter_nd_update(target, tf.ones([tf.shape(fitness)[0]], tf.bool))
        self.fitness.scatter_nd_update([[n]], [-np.inf])
        self.occupied.scatter_nd_update([[n]], [False])

    def _add_reference_soft(self, solutions, fitness, descriptors):
        """CMA-MAE's insertion against the cell thresholds (see the class docstring); same rule as the kernel."""
        n = self.num_cells
        b = int(fitness.shape[0]) if fitness.shape[0] is not None else None
        cell, alive, masked = self._candidates(fitness, descriptors)
        thr = tf.gather(self.threshold, cell)  # threshold_min in an empty cell
        occ = tf.gather(self.occupied, cell)
        can = alive & (masked > thr)
        winner, seg = self._batch_winners(masked, can, cell)  # (candidates that beat no threshold: trash)
        # pyribs' batch rule over the k candidates of each cell that beat its threshold
        count = tf.math.unsorted_segment_sum(tf.cast(can, tf.int32), seg, n + 1)
        total = tf.math.unsorted_segment_sum(tf.where(can, tf.cast(masked, tf.float64), 0.0), seg, n + 1)
        k = tf.gather(count, cell)
        keep = tf.constant(1.0 - self.learning_rate, tf.float64)
        ratio = power_by_squaring(tf.fill(tf.shape(k), keep), k, b if b is not None else 2**31 - 1)
        mean = tf.gather(total, cell) / tf.cast(tf.maximum(k, 1), tf.float64)
        new_thr = tf.cast(ratio * tf.cast(thr, tf.float64) + mean * (1.0 - ratio), tf.float32)
        target = tf.where(winner, cell, n)[:, None]
        self._write(target, solutions, masked, descriptors)
        self.threshold.scatter_nd_update(target, new_thr)
        self.threshold.scatter_nd_update([[n]], [np.float32(self.threshold_min)])  # the trash row's
        status = tf.where(winner, tf.where(occ, 1, 2), 0)
        value = tf.where(winner, masked - thr, 0.0)
        return AddResult(status=tf.cast(status, tf.int32), value=value, cell=cell)

    def incumbents(self, descriptors):
        """``(occupied [B], threshold [B])`` of the cell each descriptor maps to, as the archive is now.

        The threshold is what a candidate must beat to enter: the elite's
        fitness (``-inf`` in an empty cell) in a plain archive, the cell's
        threshold (``threshold_min`` in an empty cell) in a soft one.  Read
        before an insertion, it tells how each candidate compares with its
        cell before the batch (what improvement-ranked emitters rank by, see
        :func:`pre_batch_status`).  A non-finite descriptor reads cell 0 (such
        candidates never enter)."""
        d = tf.convert_to_tensor(descriptors, tf.float32)
        finite = tf.reduce_all(tf.math.is_finite(d), axis=1)
        cell = self.index_of(tf.where(finite[:, None], d, 0.0))
        return tf.gather(self.occupied, cell), tf.gather(self.threshold if self.soft else self.fitness, cell)

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
        """coverage (fraction of cells filled), qd_score, norm_qd_score (``qd_score / cells``),
        max_fitness, mean_fitness, size: pyribs' ``ArchiveStats`` coverage, qd_score, norm_qd_score,
        obj_max, obj_mean and num_elites, with one difference on a soft (CMA-MAE) archive, whose elites
        can be replaced by worse ones: max_fitness is the best elite held now, pyribs' obj_max the best
        objective ever inserted (a plain ``result_archive`` holds that one)."""
        occ = self.occupied[: self.num_cells].numpy()
        fit = self.fitness[: self.num_cells].numpy().astype(np.float64)
        if not occ.any():
            return {"coverage": 0.0, "qd_score": 0.0, "norm_qd_score": 0.0, "max_fitness": float("nan"),
                    "mean_fitness": float("nan"), "size": 0}
        qd_score = float(np.sum(fit[occ] - self.qd_offset))
        return {
            "coverage": float(occ.mean()),
            "qd_score": qd_score,
            "norm_qd_score": qd_score / self.num_cells,
            "max_fitness": float(fit[occ].max()),
            "mean_fitness": float(fit[occ].mean()),
            "size": int(occ.sum()),
        }

    # -- pyribs' reading API ------------------------------------------------
    @property
    def field_list(self) -> list[str]:
        """pyribs' field names: ``"objective"`` is the fitness, ``"measures"`` the descriptors,
        ``"threshold"`` what a candidate must beat (the elite's fitness in a plain archive), ``"index"``
        the cell."""
        return ["solution", "objective", "measures", "threshold", "index"]

    @property
    def lower_bounds(self) -> np.ndarray:
        """pyribs' name: the lower end of each descriptor range (float64 ``[k]``)."""
        return np.array([r[0] for r in self.ranges], np.float64)

    @property
    def upper_bounds(self) -> np.ndarray:
        """pyribs' name: the upper end of each descriptor range (float64 ``[k]``)."""
        return np.array([r[1] for r in self.ranges], np.float64)

    @property
    def empty(self) -> bool:
        """Whether no cell is filled (pyribs' ``empty``)."""
        return int(self.size.numpy()) == 0

    def __len__(self) -> int:
        """The number of elites, as ``len`` of a pyribs archive."""
        return int(self.size.numpy())

    def _fields_at(self, cells: np.ndarray, fields) -> dict:
        """Numpy copies of the requested fields at ``cells`` (int ``[n]``, valid cells)."""
        idx = tf.constant(cells, tf.int32)
        source = {"solution": self.solutions, "objective": self.fitness, "measures": self.descriptors,
                  "threshold": self.threshold if self.soft else self.fitness}
        out = {}
        for name in fields:
            out[name] = np.asarray(cells, np.int32).copy() if name == "index" else tf.gather(source[name],
                                                                                              idx).numpy()
        return out

    def _field_names(self, fields) -> tuple[list[str], bool]:
        """``(names, single)`` of pyribs' ``fields`` argument; a :class:`ConfigError` names an unknown field."""
        single = isinstance(fields, str)
        names = list(self.field_list) if fields is None else [fields] if single else list(fields)
        for name in names:
            if name not in self.field_list:
                raise ConfigError(f"unknown archive field {name!r}; the fields are {self.field_list} (pyribs' "
                                  "names: objective = fitness, measures = descriptors)")
        return names, single

    @staticmethod
    def _shaped(data: dict, names: list[str], single: bool, return_type):
        """pyribs' ``return_type`` forms of ``data`` (see :meth:`data`)."""
        if return_type is None:
            return_type = "single" if single else "dict"
        if return_type == "single":
            return data[names[0]]
        if return_type == "dict":
            return {n: data[n] for n in names}
        if return_type == "tuple":
            return tuple(data[n] for n in names)
        if return_type == "pandas":
            import pandas as pd

            cols = {}
            for n in names:
                a = data[n]
                if a.ndim == 1:
                    cols[n] = a
                else:
                    cols.update({f"{n}_{j}": a[:, j] for j in range(a.shape[1])})
            return pd.DataFrame(cols)
        raise ConfigError(f"return_type must be None, 'dict', 'tuple' or 'pandas', got {return_type!r}")

    def data(self, fields=None, return_type=None):
        """The elites' data, as pyribs' ``archive.data(fields, return_type)`` (numpy copies).

        ``fields``: a field name (one array back when ``return_type`` is
        ``None``), a list of names, or ``None`` for all of :attr:`field_list`;
        ``return_type``: ``"dict"`` (default for a list), ``"tuple"`` or
        ``"pandas"`` (a ``pandas.DataFrame`` with ``measures_0, ...`` columns
        for vector fields, as pyribs' ``ArchiveDataFrame``).  The elites come
        in cell order; pyribs lists them in the order their cells were first
        filled."""
        names, single = self._field_names(fields)
        cells = np.nonzero(self.occupied[: self.num_cells].numpy())[0]
        data = self._fields_at(cells, dict.fromkeys(names))
        return self._shaped(data, names, single, return_type)

    def retrieve(self, measures):
        """pyribs' ``retrieve``: ``(occupied [B] bool, data)`` of the elites in the cells of ``measures``
        ``[B, k]``.

        ``data`` maps every field of :attr:`field_list` to ``[B, ...]`` numpy
        arrays; where a cell is empty the entries are NaN (``index`` -1), as
        pyribs fills them.  A non-finite descriptor is a :class:`ConfigError`
        (pyribs raises a ``ValueError``)."""
        d = self._descriptor_tensor(measures)
        dn = d.numpy()
        if not np.all(np.isfinite(dn)):
            rows = np.nonzero(~np.all(np.isfinite(dn), axis=1))[0]
            raise ConfigError(f"retrieve: measures must be finite; rows {rows[:10].tolist()} have NaN or inf")
        cells = self.index_of(d).numpy()
        occupied = tf.gather(self.occupied, cells).numpy()
        data = self._fields_at(cells, self.field_list)
        for name, a in data.items():
            a[~occupied] = -1 if name == "index" else np.nan
        return occupied, data

    def retrieve_single(self, measures):
        """pyribs' ``retrieve_single``: ``(occupied, data)`` for one descriptor ``[k]``."""
        m = np.asarray(measures, np.float32)
        if m.shape != (self.descriptor_dim,):
            raise ShapeError(f"retrieve_single: measures must have shape [{self.descriptor_dim}], got "
                             f"{list(m.shape)}")
        occupied, data = self.retrieve(m[None])
        return bool(occupied[0]), {k: v[0] for k, v in data.items()}

    def sample_elites(self, n: int, replace: bool = True, seed=None) -> dict:
        """pyribs' ``sample_elites``: ``n`` elites drawn uniformly, as a dict of the fields of
        :attr:`field_list`.

        ``replace=False`` draws ``n`` distinct elites.  ``seed`` (an int, or a
        stateless ``[2]`` seed) makes the draw repeatable; ``None`` draws fresh
        entropy, as a pyribs archive without a seed.  An empty archive raises
        ``IndexError`` and ``n`` above the number of elites without
        replacement a :class:`ConfigError` (a ``ValueError``), as in pyribs."""
        n = check_int(n, "n", 0, integral_float=True)
        filled = np.nonzero(self.occupied[: self.num_cells].numpy())[0]
        if len(filled) == 0:
            raise IndexError("sample_elites: the archive is empty")
        if not replace and n > len(filled):
            raise ConfigError(f"sample_elites: cannot draw n={n} distinct elites (replace=False) from "
                              f"{len(filled)}")
        if seed is None:
            seed = np.random.SeedSequence().generate_state(2).astype(np.int64) % (2**31)
        elif isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
            seed = [0, check_int(seed, "seed", 0)]
        u = tf.random.stateless_uniform([len(filled)] if not replace else [n], seed=seed, dtype=tf.float64).numpy()
        if replace:
            pick = np.minimum((u * len(filled)).astype(np.int64), len(filled) - 1)
        else:
            pick = np.argsort(u, kind="stable")[:n]  # a uniformly random subset, in random order
        return self._fields_at(filled[pick], self.field_list)

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
