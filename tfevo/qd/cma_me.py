"""CMA-ME's emitter: many CMA-ES searches ranked by archive improvement, as one batched program."""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import tensorflow as tf

from tfevo._holder import Untracked
from tfevo._tf_private import is_eager_tensor
from tfevo.core import AskTellError, ConfigError, ShapeError, check_int, check_seed
from tfevo.qd.archive_base import pre_batch_status
from tfevo.qd.emitter_base import Emitter
from tfevo.strategies.shaping import _normal

__all__ = ["ESEmitter", "RANKERS"]

#: pyribs' ranker names (short and class names) -> tfevo's short name.  pyribs' novelty, density and NSLC
#: rankers read fields that only its ProximityArchive/DensityArchive return, which tfevo does not have.
RANKERS = {"2imp": "2imp", "imp": "imp", "2obj": "2obj", "obj": "obj", "2rd": "2rd", "rd": "rd",
           "TwoStageImprovementRanker": "2imp", "ImprovementRanker": "imp", "TwoStageObjectiveRanker": "2obj",
           "ObjectiveRanker": "obj", "TwoStageRandomDirectionRanker": "2rd", "RandomDirectionRanker": "rd"}


class AddResultLike(NamedTuple):
    """The fields of an :class:`~tfevo.qd.archives.AddResult` (rebuilt inside compiled functions)."""

    status: tf.Tensor
    value: tf.Tensor
    cell: tf.Tensor


class ESEmitter(Emitter):
    """CMA-ME (Fontaine et al. 2020): ``num_emitters`` CMA-ES searches ranked by archive improvement.

    All searches are one batched program: their state (mean, step size,
    covariance, evolution paths, eigensystem) carries the searches as a
    leading axis, so one ``emit`` samples every search's ``batch_size``
    candidates with one batched matrix product and one ``tell`` updates every
    search; :class:`MAPElites` compiles both into its ask and tell programs.
    The rules are pyribs' ``EvolutionStrategyEmitter`` with a CMA-ES:

    * ``ranker="2imp"`` (two-stage improvement): candidates that would fill a
      new cell rank first (by fitness), then those that would improve their
      cell's elite (by the gain), then the rest (by fitness minus the cell's
      elite, a negative number).  "Would" is judged against the archive before
      the batch, as pyribs does, so candidates that lost a cell to a better
      one of the same batch keep their rank.  Candidates with a non-finite
      fitness or descriptor rank last.
    * CMA-MAE (Fontaine & Nikolaidis 2023): on a soft archive
      (``GridArchive(..., learning_rate=0.01, threshold_min=0)``) "new",
      "improves" and the value are judged against the cells' thresholds
      instead of their elites (:func:`~tfevo.qd.archive_base.pre_batch_status`:
      value = fitness minus the threshold, ``threshold_min`` for an empty
      cell), as pyribs' rankers read its soft archive's ``add`` values;
      pyribs' CMA-MAE setting is ``ranker="imp"``, ``selection_rule="mu"``,
      ``restart_rule="basic"``.
    * ``ranker="imp"`` ranks by that value alone; ``"obj"`` by fitness alone and
      ``"2obj"`` by status, then fitness (CMA-ME's optimizing emitter);
      ``"rd"`` by the projection of the descriptors onto a random direction and
      ``"2rd"`` by status, then that projection (CMA-ME's random direction
      emitter).  pyribs' class names (``"TwoStageImprovementRanker"``,
      ``"RandomDirectionRanker"``, ...) are accepted too.  The direction of each
      search is drawn when the search starts and again at each of its
      restarts, as pyribs' ranker ``reset``: a standard normal vector scaled by
      the archive's descriptor ranges (``upper - lower``), held in the
      ``direction`` variable ``[num_emitters, descriptor_dim]`` (created by
      :meth:`attach`, which :class:`MAPElites` calls), so a checkpoint carries it.
    * ``selection_rule="mu"`` recombines the best half (``batch_size // 2``
      parents); ``"filter"`` recombines as many of the best-ranked candidates
      as would enter the archive (none: the search does not move); with
      ``"obj"`` or ``"rd"`` these are the best by fitness or projection, not
      necessarily the ones that enter, as in pyribs.  Weights ``log(k + 1/2) -
      log(i)``, normalized; the CMA-ES rates follow from their ``mu_eff``.
    * ``restart_rule="no_improvement"`` restarts a search when none of its
      candidates would enter the archive; ``"basic"`` only on the CMA-ES stop
      rules; an integer ``n`` every ``n`` tells.  The CMA-ES stop rules apply
      in every mode: covariance condition number above ``1e14`` (``1e7`` in
      float32, whose eigensolver resolves about 7 digits), ``sigma *
      sqrt(max eigenvalue) < 1e-11``, or the best and worst candidates ranked
      equal (pyribs: their ranking values differ by less than ``1e-12``).  A
      restarted search starts again from an elite drawn uniformly from the
      archive, with ``sigma`` and an identity covariance.
    * The covariance is factorized lazily, as in pycma and pyribs: every
      ``floor(g / batch_size) + 1`` iterations, with ``g = 0.5 D batch_size /
      (c1 + c_mu) / D^2`` pycma's evaluation gap, for all searches at once.
      ``decomposition="eigh"`` is pyribs' eigendecomposition (sampling with
      ``B diag(sqrt(l))``, evolution path whitened by ``C^-1/2``);
      ``"cholesky"`` (default) factorizes ``C = A A^T`` and whitens by
      ``A^-1`` (as the Cholesky CMA-ES of Krause et al. 2016): the same
      sampling distribution and the same path length ``y^T C^-1 y`` per step,
      for about a fifth of the CPU time at D=100.  The stop rules' largest and
      smallest eigenvalues then come from a few warm-started power iterations
      on ``C`` and ``C^-1``; a failed factorization (``C`` not numerically
      positive definite) counts as an infinite condition number.
    * ``bounds``: out-of-bounds candidates are resampled (up to
      ``resample_rounds`` rounds, all searches together), and whatever is
      still outside is clipped.

    Randomness: each ``emit`` draws from the seed :class:`MAPElites` passes
    in (derived from the run's seed) folded with this emitter's ``seed`` and
    its restart count, so two emitters with different seeds never emit the
    same noise, also after restarts, and the run's seed changes them too.

    Args:
      solution_dim: D.
      batch_size: candidates per search per iteration (default ``4 + floor(3 ln D)``).
        The emitter emits ``num_emitters * batch_size`` rows; its ``batch_size``
        attribute is that total and ``es_batch_size`` the per-search size.
      num_emitters: number of CMA-ES searches.
      sigma: initial step size (also after each restart).
      x0: optional initial mean ``[D]`` (or a scalar for every coordinate) of every search; by default each
        search starts from an elite drawn from the archive at its first emit.
      ranker: ``"2imp"`` (two-stage improvement, default), ``"imp"`` (improvement value only),
        ``"2obj"``/``"obj"`` (fitness), ``"2rd"``/``"rd"`` (random direction), pyribs' class names, or
        those pyribs classes themselves.
      selection_rule: ``"filter"`` (pyribs' default) or ``"mu"``.
      restart_rule: ``"no_improvement"`` (default), ``"basic"`` or a positive int.
      bounds: as :class:`~tfevo.qd.emitter_base.Emitter` (also pyribs' per-dimension pairs).
      seed: this emitter's seed (an int in ``[0, 2**31)``; default 0).
      dtype: ``"float32"`` (default) or ``"float64"`` for the search state.
      resample_rounds: resampling rounds for bounds (default 10).
      jit_compile: compile the update (``tell``) with XLA (default ``False``).
        XLA saves a fraction of a millisecond per update at 15 x 37, D=100,
        but compiling costs about a CPU-second per emitter, so it pays off
        only for runs of well over a thousand iterations.
      decomposition: ``"cholesky"`` (default) or ``"eigh"``, see above.
    """

    # Attributes whose values tracing never reads: the seed reaches the programs only as the captured
    # tensor ``_seed_key`` (an input of the traced graph, so instances differing in seed share it).
    _untraced_attrs = ("seed", "_seed_key")


    graph_safe = True
    #: the ask program runs an eigensolver, which XLA compiles very slowly on CPU
    xla_ask = False
    #: ``tell`` receives ``incumbent=(occupied, threshold)`` of each candidate's cell before the batch
    wants_incumbent = True
    #: the update treats the told solutions as samples of the search distributions at the last ``emit``,
    #: so only the batch that ``emit`` returned may be told (as pyribs' CMA optimizer uses its stored samples)
    tell_needs_last_ask = True

    def __init__(self, solution_dim, batch_size=None, num_emitters: int = 1, sigma: float = 0.1, x0=None,
                 ranker: str = "2imp", selection_rule: str = "filter", restart_rule="no_improvement", bounds=None,
                 seed: int | None = None, dtype: str = "float32", resample_rounds: int = 10, jit_compile: bool = False,
                 decomposition: str = "cholesky", name=None, **kwargs):
        if kwargs:
            raise ConfigError(f"ESEmitter got unexpected arguments {sorted(kwargs)}; accepted: solution_dim, "
                              "batch_size, num_emitters, sigma, x0, ranker, selection_rule, restart_rule, bounds, "
                              "seed, dtype, resample_rounds, jit_compile, decomposition, name")
        d = check_int(solution_dim, "solution_dim", 1, integral_float=True)
        lam = 4 + int(3 * math.log(d)) if batch_size is None else check_int(
            batch_size, "batch_size (candidates per search)", 2, integral_float=True)
        e = check_int(num_emitters, "num_emitters", 1, integral_float=True)
        super().__init__(d, e * lam, bounds, name)
        if not (float(sigma) > 0 and math.isfinite(float(sigma))):
            raise ConfigError(f"sigma must be a finite number > 0, got {sigma}")
        if isinstance(ranker, type) and ranker.__module__.startswith("ribs.") and ranker.__name__ in RANKERS:
            ranker = ranker.__name__  # pyribs' ranker class itself (pyribs also takes the class)
        if not isinstance(ranker, str) or ranker not in RANKERS:
            raise ConfigError(f"ranker must be one of pyribs' ranker names {', '.join(map(repr, RANKERS))}, got "
                              f"{ranker!r} (pyribs' novelty, density and NSLC rankers need its ProximityArchive or "
                              "DensityArchive, which tfevo does not have)")
        ranker = RANKERS[ranker]
        if selection_rule not in ("mu", "filter"):
            raise ConfigError(f"selection_rule must be 'mu' or 'filter', got {selection_rule!r}")
        if isinstance(restart_rule, bool) or not (
                restart_rule in ("no_improvement", "basic") or (isinstance(restart_rule, (int, np.integer))
                                                                and restart_rule > 0)):
            raise ConfigError(f"restart_rule must be 'no_improvement', 'basic' or a positive int, got {restart_rule!r}")
        if dtype not in ("float32", "float64"):
            raise ConfigError(f"dtype must be 'float32' or 'float64', got {dtype!r}")
        seed = 0 if seed is None else check_seed(seed)
        resample_rounds = check_int(resample_rounds, "resample_rounds", 0, integral_float=True)
        self.num_emitters, self.es_batch_size, self.sigma0 = e, lam, float(sigma)
        self.ranker, self.selection_rule, self.restart_rule = ranker, selection_rule, restart_rule
        self.seed, self.resample_rounds = seed, int(resample_rounds)
        # The seed enters the traced programs as a captured tensor, not a constant, so one traced step
        # serves every instance of the same configuration (tfevo/qd/_shared_step.py).
        self._seed_key = tf.constant(seed, tf.int32)
        self.jit_compile = bool(jit_compile)
        if decomposition not in ("cholesky", "eigh"):
            raise ConfigError(f"decomposition must be 'cholesky' or 'eigh', got {decomposition!r}")
        self.decomposition = decomposition
        self.power_steps = 2
        self._fns = Untracked(fns={})
        self.dtype = tf.as_dtype(dtype)
        self._cond_limit = 1e14 if dtype == "float64" else 1e7
        dt = self.dtype
        # Lazy eigendecomposition period (pycma/pyribs rule, with the mu-selection rates).
        self._mu_rates = self._rates(np.full([e], float(lam // 2)))
        c1, cmu = self._mu_rates[4][:1], self._mu_rates[5][:1]
        gap_evals = 0.5 * d * lam / float(c1[0] + cmu[0]) / d**2
        self.eigen_period = int(math.floor(gap_evals / lam)) + 1
        eye = np.broadcast_to(np.eye(d), [e, d, d])

        def var(value, name, dtype=dt):
            return tf.Variable(tf.constant(np.asarray(value), dtype), trainable=False, name=name)

        if x0 is not None:
            x0 = np.asarray(x0, np.float64)
            if x0.ndim == 0:  # one value for every coordinate (a config need not know D)
                x0 = np.full([d], float(x0))
            if x0.shape != (d,):
                raise ShapeError(f"x0 must have shape [{d}], got {list(x0.shape)}")
            if not np.all(np.isfinite(x0)):
                raise ConfigError(f"x0 must be finite, got {x0.tolist()}")
        self.x0 = x0
        self.mean = var(np.zeros([e, d]) if x0 is None else np.broadcast_to(x0, [e, d]), "mean")
        self.sigma = var(np.full([e], self.sigma0), "sigma")
        self.cov = var(eye, "cov")
        # A square root of the covariance (T T^T = C; sampling is one product) and the whitening matrix
        # W with W C W^T = I: (B diag(sqrt(l)), C^-1/2) from "eigh", (A, A^-1) from "cholesky" C = A A^T.
        self.transform = var(eye, "transform")
        self.invsqrt = var(eye, "invsqrt")
        self.extremes = var(np.ones([e, 2]), "extremes")  # largest and smallest eigenvalue of C
        unit = np.full([e, d], 1.0 / math.sqrt(d))
        self.power_vectors = var(np.stack([unit, unit], 1), "power_vectors")  # [E, 2, D] warm starts
        self.pc = var(np.zeros([e, d]), "pc")
        self.ps = var(np.zeros([e, d]), "ps")
        self.updates = var(np.zeros([e]), "updates")  # tells since the search's last (re)start
        self.restarts = var(np.zeros([e]), "restarts", tf.int64)
        self.tells = tf.Variable(tf.constant(0, tf.int64), trainable=False, name="tells")
        self.emits = tf.Variable(tf.constant(0, tf.int64), trainable=False, name="emits")
        # True: the search (re)starts from an archive elite at the next emit.
        self.pending = tf.Variable(tf.fill([e], x0 is None), trainable=False, name="pending")
        # The batch the last emit returned and whether it is still to be told (checked by tell).
        self.last_emitted = tf.Variable(tf.zeros([e * lam, d], tf.float32), trainable=False, name="last_emitted")
        self.emitted = tf.Variable(False, trainable=False, name="emitted")
        # "rd"/"2rd": each search's descriptor direction [E, k] and the archive's ranges (set by attach).
        self.direction = None
        self.direction_scale = None

    @property
    def random_direction(self) -> bool:
        """Whether the ranker projects onto a random direction (``"rd"``/``"2rd"``)."""
        return self.ranker in ("rd", "2rd")

    def attach(self, archive):
        """Prepares the emitter for ``archive`` (:class:`MAPElites` calls it at construction).

        With ``"rd"``/``"2rd"`` it creates the ``direction`` variable
        ``[num_emitters, descriptor_dim]`` (float64, drawn at the first ``emit``)
        and keeps the archive's descriptor ranges, which scale the directions
        (pyribs: ``upper_bounds - lower_bounds``).  Other rankers need nothing."""
        if not self.random_direction:
            return
        ranges = getattr(archive, "ranges", None)
        if ranges is None:
            raise ConfigError(f"ranker={self.ranker!r} scales its random directions by the archive's descriptor "
                              f"ranges, and {type(archive).__name__} has no ranges")
        scale = np.array([float(hi) - float(lo) for lo, hi in ranges], np.float64)
        if self.direction is not None:
            if self.direction.shape[1] != len(scale):
                raise ConfigError(f"this ESEmitter was attached to an archive with {self.direction.shape[1]} "
                                  f"descriptors; {type(archive).__name__} has {len(scale)}")
        else:
            with tf.init_scope():
                self.direction = tf.Variable(tf.zeros([self.num_emitters, len(scale)], tf.float64), trainable=False,
                                             name="direction")
        self.direction_scale = scale

    def _rates(self, k):
        """CMA-ES weights and rates for ``k`` parents per search (``k [E]`` float, may be 0).

        Returns ``(weights [E, L], mueff, cc, cs, c1, cmu, damps)``; numpy in, numpy out or tensors in, tensors out."""
        n = float(self.solution_dim)
        lib = np if isinstance(k, np.ndarray) else tf.math
        i = np.arange(1, self.es_batch_size + 1, dtype=np.float64)
        if lib is np:
            kk = np.maximum(k, 1.0)[:, None]
            raw = np.where(i[None] <= kk, np.log(kk + 0.5) - np.log(i)[None], 0.0)
        else:
            kk = tf.maximum(k, 1.0)[:, None]
            raw = tf.where(tf.constant(i, k.dtype)[None] <= kk,
                           tf.math.log(kk + 0.5) - tf.constant(np.log(i), k.dtype)[None], tf.zeros_like(kk))
        w = raw / lib.reduce_sum(raw, 1, keepdims=True) if lib is not np else raw / raw.sum(1, keepdims=True)
        mueff = 1.0 / (lib.reduce_sum(w * w, 1) if lib is not np else (w * w).sum(1))
        cc = (4 + mueff / n) / (n + 4 + 2 * mueff / n)
        cs = (mueff + 2) / (n + mueff + 5)
        c1 = 2 / ((n + 1.3) ** 2 + mueff)
        cmu = lib.minimum(1 - c1, 2 * (mueff - 2 + 1 / mueff) / ((n + 2) ** 2 + mueff))
        damps = 1 + 2 * lib.maximum(0.0 * mueff, lib.sqrt(lib.maximum(mueff - 1, 0.0 * mueff) / (n + 1)) - 1) + cs
        return w, mueff, cc, cs, c1, cmu, damps

    # -- ask ----------------------------------------------------------------
    def _restart_pending(self, archive, seed):
        """Restarts the pending searches from elites drawn uniformly from the archive."""
        e, d, dt = self.num_emitters, self.solution_dim, self.dtype
        p = self.pending
        elites = tf.cast(archive.sample(e, seed), dt)
        eye = tf.eye(d, batch_shape=[e], dtype=dt)
        p1, p2, p3 = p[:, None], p[:, None, None], p
        self.mean.assign(tf.where(p1, elites, self.mean))
        self.sigma.assign(tf.where(p3, tf.constant(self.sigma0, dt), self.sigma))
        for v in (self.cov, self.transform, self.invsqrt):
            v.assign(tf.where(p2, eye, v))
        self.extremes.assign(tf.where(p1, tf.ones_like(self.extremes), self.extremes))
        self.pc.assign(tf.where(p1, tf.zeros_like(self.pc), self.pc))
        self.ps.assign(tf.where(p1, tf.zeros_like(self.ps), self.ps))
        self.updates.assign(tf.where(p3, tf.zeros_like(self.updates), self.updates))
        self.pending.assign(tf.zeros_like(p))

    def _decompose(self):
        c = self.cov
        tiny = tf.constant(1e-30 if self.dtype == tf.float64 else 1e-20, self.dtype)
        if self.decomposition == "eigh":
            vals, vecs = tf.linalg.eigh(0.5 * (c + tf.linalg.matrix_transpose(c)))
            vals = tf.maximum(tf.abs(vals), tiny)
            self.extremes.assign(tf.stack([tf.reduce_max(vals, 1), tf.reduce_min(vals, 1)], 1))
            self.transform.assign(vecs * tf.sqrt(vals)[:, None, :])
            self.invsqrt.assign(tf.matmul(vecs * tf.math.rsqrt(vals)[:, None, :], vecs, transpose_b=True))
            return tf.constant(True)
        a = tf.linalg.cholesky(c)  # reads the lower triangle only
        # False: C is numerically not positive definite.  A non-finite entry of A reaches the diagonal of its
        # row (A_ii = sqrt(C_ii - sum_k A_ik^2)), and a factorization stopped early leaves its pivot <= 0 there.
        diag = tf.linalg.diag_part(a)
        ok = tf.reduce_all(tf.math.is_finite(diag) & (diag > 0), axis=1)
        a = tf.where(ok[:, None, None], a, self.transform)
        a_inv = tf.linalg.triangular_solve(a, tf.eye(self.solution_dim, batch_shape=[self.num_emitters],
                                                     dtype=self.dtype), lower=True)
        # Largest and smallest eigenvalues by power iteration on C and C^-1 = A^-T A^-1, warm-started from
        # the previous vectors (C changes little between decompositions); they feed the stop rules only.
        v, u = self.power_vectors[:, 0], self.power_vectors[:, 1]
        for _ in range(self.power_steps):
            v = tf.math.l2_normalize(tf.linalg.matvec(c, v), axis=1)
            u = tf.math.l2_normalize(tf.linalg.matvec(a_inv, tf.linalg.matvec(a_inv, u), transpose_a=True), axis=1)
        lmax = tf.reduce_sum(v * tf.linalg.matvec(c, v), 1)
        w = tf.linalg.matvec(a_inv, u)
        lmin = 1.0 / tf.maximum(tf.reduce_sum(w * w, 1), tiny)
        self.power_vectors.assign(tf.stack([v, u], 1))
        self.extremes.assign(tf.stack([tf.maximum(lmax, tiny), tf.where(ok, tf.maximum(lmin, tiny), 0.0)], 1))
        self.transform.assign(a)
        self.invsqrt.assign(a_inv)
        return tf.constant(True)

    def _sample(self, seed):
        e, lam, d = self.num_emitters, self.es_batch_size, self.solution_dim
        # TfevoGaussianPopulation (custom_ops/normal.cc) when it runs here: the stream of standard_normal.
        z = tf.reshape(_normal([e * lam, d], seed), [e, lam, d])
        y = tf.matmul(tf.cast(z, self.dtype), self.transform, transpose_b=True)
        return self.mean[:, None, :] + self.sigma[:, None, None] * y

    def emit(self, archive, seed):
        seed = tf.cast(seed, tf.int32)
        key = tf.random.experimental.stateless_fold_in(seed, self._seed_key)
        key = tf.random.experimental.stateless_fold_in(key, tf.cast(tf.reduce_sum(self.restarts), tf.int32))
        s = tf.random.experimental.stateless_split(key, 3)
        if self.random_direction:
            self._draw_directions(archive, key)
        tf.cond(tf.reduce_any(self.pending), lambda: (self._restart_pending(archive, s[0]), tf.constant(True))[1],
                lambda: tf.constant(False))
        # Lazy eigensystem, all searches at once (a restarted search already has its identity one).
        due = tf.equal(tf.math.floormod(self.emits, self.eigen_period), 0) & (self.emits > 0)
        tf.cond(due, self._decompose, lambda: tf.constant(False))
        self.emits.assign_add(1)
        # Not XLA: its stateless normals measured ~15x slower on CPU than TensorFlow's kernels.
        x = self._draw(s[1], s[2])
        self.last_emitted.assign(x)
        self.emitted.assign(True)
        return tf.identity(x)

    def _draw_directions(self, archive, key):
        """New directions for the searches that (re)start at this emit (pyribs' ranker ``reset``)."""
        if self.direction is None:
            if not tf.executing_eagerly():
                raise ConfigError(f"ranker={self.ranker!r}: call attach(archive) before tracing emit (MAPElites "
                                  "does it)")
            self.attach(archive)
        redraw = self.pending | tf.equal(self.emits, 0)  # a search that starts now (the first emit or a restart)
        unit = tf.random.stateless_normal(self.direction.shape, tf.random.experimental.stateless_fold_in(
            key, 0x7264), dtype=tf.float64)
        self.direction.assign(tf.where(redraw[:, None], unit * self.direction_scale, self.direction))

    def _draw(self, seed, resample_seed):
        """All searches' candidates ``[E * L, D]`` float32 (resampled/clipped into the bounds)."""
        e, lam, d = self.num_emitters, self.es_batch_size, self.solution_dim
        x = self._sample(seed)
        if self.bounds is not None:
            lo, hi = (tf.cast(b, self.dtype) for b in self.bounds)

            def outside(x):
                return tf.reduce_any((x < lo) | (x > hi), axis=-1)  # [E, L]

            def body(i, x):
                fresh = self._sample(tf.random.experimental.stateless_fold_in(resample_seed, i))
                return i + 1, tf.where(outside(x)[..., None], fresh, x)

            _, x = tf.while_loop(lambda i, x: (i < self.resample_rounds) & tf.reduce_any(outside(x)), body,
                                 [tf.constant(0), x])
            x = tf.clip_by_value(x, lo, hi)
        return tf.reshape(tf.cast(x, tf.float32), [e * lam, d])

    # -- tell ---------------------------------------------------------------
    def _ranking(self, fitness, descriptors, result, incumbent):
        """Status ``[E, L]`` (2 new cell, 1 improves, 0 neither, -1 dead) and value, against the pre-batch archive."""
        e, lam = self.num_emitters, self.es_batch_size
        status, value = pre_batch_status(fitness, descriptors, incumbent)
        return tf.reshape(status, [e, lam]), tf.reshape(value, [e, lam])

    def _take(self, t, order):
        """``t [E, L, ...]`` reordered along its second axis by ``order [E, L]``.

        One row gather on the flattened ``[E * L, ...]`` tensor: a ``batch_dims``
        gather measured ~20x slower on CPU for ``[15, 37, 100]``."""
        e, lam = self.num_emitters, self.es_batch_size
        flat = tf.reshape(t, [e * lam] + t.shape.as_list()[2:])
        offsets = tf.constant((np.arange(e) * lam)[:, None], order.dtype)
        return tf.gather(flat, order + offsets)

    def rank(self, fitness, descriptors, result, incumbent):
        """Each search's candidates best first: ``(order [E, L], status [E, L], value [E, L])``.

        ``status`` is pyribs' (2 new cell, 1 improves, 0 neither), judged
        against the archive before the batch (``incumbent``, see :meth:`tell`);
        -1 marks a non-finite fitness or descriptor.  ``value`` (float64) is
        what the ranker sorts by after the status stage: pyribs' improvement
        value for ``"2imp"``/``"imp"`` (new cell: fitness; improves: the gain;
        neither: fitness minus the elite), the fitness for ``"2obj"``/``"obj"``,
        the projection of the descriptors onto the search's ``direction`` for
        ``"2rd"``/``"rd"``; 0 for a dead candidate.  Two-stage rankers sort by
        status, then value; the others by value only (dead candidates last).
        Ties keep batch order."""
        e, lam = self.num_emitters, self.es_batch_size
        status, improvement = self._ranking(fitness, descriptors, result, incumbent)
        alive = status >= 0
        if self.ranker in ("2imp", "imp"):
            value = tf.cast(improvement, tf.float64)
        elif self.ranker in ("2obj", "obj"):
            value = tf.cast(tf.reshape(fitness, [e, lam]), tf.float64)
        else:
            if self.direction is None:
                raise ConfigError(f"ranker={self.ranker!r} needs the archive's descriptor ranges: call "
                                  "attach(archive) or emit() first (MAPElites attaches its archive)")
            d = tf.cast(tf.reshape(descriptors, [e, lam, -1]), tf.float64)
            value = tf.reduce_sum(d * self.direction[:, None, :], axis=2)
        value = tf.where(alive, value, tf.zeros_like(value))
        two_stage = self.ranker.startswith("2")
        key2 = value if two_stage else tf.where(alive, value, -np.inf)
        by_value = tf.argsort(key2, axis=1, direction="DESCENDING", stable=True)
        if two_stage:
            st_sorted = self._take(status, by_value)
            order = self._take(by_value, tf.argsort(st_sorted, axis=1, direction="DESCENDING", stable=True))
        else:
            order = by_value
        return order, status, value

    def tell(self, solutions, fitness, descriptors, result, incumbent=None):
        """Ranks each search's candidates, updates every search, and marks searches to restart.

        ``incumbent=(occupied [B], threshold [B])`` of each candidate's cell before
        the batch was inserted is required (:class:`MAPElites` passes it; by
        hand: ``archive.incumbents(descriptors)`` read before ``archive.add``).
        With ``jit_compile`` the update is one XLA-compiled function, which
        fuses its element-wise passes over the ``[E, D, D]`` covariances."""
        if incumbent is None:
            raise ConfigError("ESEmitter.tell needs incumbent=(occupied, threshold) of each candidate's cell before "
                              "the batch: archive.incumbents(descriptors), read before archive.add (MAPElites "
                              "passes it)")
        args = (tf.convert_to_tensor(solutions, tf.float32), tf.convert_to_tensor(fitness, tf.float32),
                tf.convert_to_tensor(descriptors, tf.float32), tuple(result),
                (tf.convert_to_tensor(incumbent[0], tf.bool), tf.convert_to_tensor(incumbent[1], tf.float32)))
        b = self.batch_size
        for name, t, shape in (("solutions", args[0], [b, self.solution_dim]), ("fitness", args[1], [b]),
                               ("descriptors", args[2], [b, None]), ("incumbent[0]", args[4][0], [b]),
                               ("incumbent[1]", args[4][1], [b])):
            got = t.shape.as_list() if t.shape.rank is not None else None
            if got is None or len(got) != len(shape) or any(
                    want is not None and g is not None and g != want for g, want in zip(got, shape)):
                raise ShapeError(f"ESEmitter.tell: {name} must have shape {shape} (num_emitters * batch_size "
                                 f"= {b} rows), got {got}")
        if is_eager_tensor(args[0]):  # (MAPElites checks its whole batch itself before inserting it)
            if not (bool(self.emitted.numpy()) and np.array_equal(args[0].numpy(), self.last_emitted.numpy())):
                raise AskTellError(
                    "ESEmitter.tell: the solutions are not the batch the last emit() returned (in the same order)"
                    + ("" if bool(self.emitted.numpy()) else ", or that batch was already told") +
                    "; the CMA-ES update treats them as samples of the searches' distributions at that emit, so "
                    "tell exactly that batch.  Nothing was updated.")
        if not self.jit_compile:
            return self._tell(*args)
        fn = self._fns.fns.get("tell")
        if fn is None:
            fn = self._fns.fns["tell"] = tf.function(self._tell, jit_compile=True, autograph=False)
        return fn(*args)

    def _tell(self, solutions, fitness, descriptors, result, incumbent):
        result = AddResultLike(*result)
        e, lam, d, dt = self.num_emitters, self.es_batch_size, self.solution_dim, self.dtype
        n = float(d)
        order, status, value = self.rank(fitness, descriptors, result, incumbent)
        added = tf.reduce_sum(tf.cast(status > 0, tf.int32), axis=1)  # [E]
        if self.selection_rule == "mu":  # fixed parent count: the rates are constants
            k = tf.fill([e], float(lam // 2))
            w, mueff, cc, cs, c1, cmu, damps = (tf.constant(t, dt) for t in self._mu_rates)
        else:
            k = tf.cast(added, tf.float64)
            w, mueff, cc, cs, c1, cmu, damps = (tf.cast(t, dt) for t in self._rates(k))
        mu_rule = self.selection_rule == "mu"
        top = lam // 2 if mu_rule else lam  # rows with a non-zero weight
        if top < lam:
            w = w[:, :top]
        x = tf.cast(tf.reshape(solutions, [e, lam, d]), dt)
        xs = self._take(x, order[:, :top] if top < lam else order)  # the parents, best first
        mean, sigma = self.mean, self.sigma
        y = (xs - mean[:, None, :]) / sigma[:, None, None]  # [E, top, D]
        yw = tf.linalg.matvec(y, w, transpose_a=True)
        self.updates.assign_add(tf.ones_like(self.updates))
        g = self.updates
        ps = (1 - cs)[:, None] * self.ps + tf.sqrt(cs * (2 - cs) * mueff)[:, None] * tf.linalg.matvec(
            self.invsqrt, yw)
        chi_n = math.sqrt(n) * (1 - 1 / (4 * n) + 1 / (21 * n * n))
        ps_norm = tf.norm(ps, axis=1)
        hsig = tf.cast(ps_norm / tf.sqrt(1 - tf.pow(1 - cs, 2 * g)) / chi_n < 1.4 + 2 / (n + 1), dt)
        pc = (1 - cc)[:, None] * self.pc + (hsig * tf.sqrt(cc * (2 - cc) * mueff))[:, None] * yw
        # Rank-one and rank-mu terms as one batched product: [y; pc]^T diag([cmu w; c1]) [y; pc].
        rows = tf.concat([y, pc[:, None, :]], 1)  # [E, top + 1, D]
        coef = tf.concat([cmu[:, None] * w, c1[:, None]], 1)
        c1a = c1 * (1 - (1 - hsig) * cc * (2 - cc))
        cov = (1 - c1a - cmu)[:, None, None] * self.cov + tf.matmul(rows * coef[:, :, None], rows, transpose_a=True)
        new_sigma = sigma * tf.exp(tf.minimum(tf.constant(1.0, dt), (cs / damps) * (ps_norm / chi_n - 1)))
        new_mean = mean + sigma[:, None] * yw
        if mu_rule:  # every search has parents
            self.mean.assign(new_mean)
            self.ps.assign(ps)
            self.pc.assign(pc)
            self.cov.assign(cov)
            self.sigma.assign(new_sigma)
        else:
            move = (k > 0)  # a search with no parents (filter, nothing entered) keeps its state
            m1, m2 = move[:, None], move[:, None, None]
            self.mean.assign(tf.where(m1, new_mean, mean))
            self.ps.assign(tf.where(m1, ps, self.ps))
            self.pc.assign(tf.where(m1, pc, self.pc))
            self.cov.assign(tf.where(m2, cov, self.cov))
            self.sigma.assign(tf.where(move, new_sigma, sigma))
        self.tells.assign_add(1)
        self.emitted.assign(False)
        # Restart rules (pyribs): CMA-ES stop criteria, then the emitter's rule.
        lmax, lmin = self.extremes[:, 0], self.extremes[:, 1]
        cond = lmax / lmin  # inf (stop) when the Cholesky factorization failed
        area = self.sigma * tf.sqrt(lmax)
        ends = tf.concat([order[:, :1], order[:, -1:]], 1)  # the best and the worst candidate
        # pyribs compares the ranking values (status and value for two-stage rankers); a dead candidate
        # (value 0) never ties with a live one ("imp" keeps the status, which marks the dead too).
        stage = status if self.ranker.startswith("2") or self.ranker == "imp" else tf.cast(status >= 0, tf.int32)
        st, va = self._take(stage, ends), self._take(value, ends)
        flat = tf.equal(st[:, 0], st[:, 1]) & (tf.abs(va[:, 0] - va[:, 1]) < 1e-12)
        stop = (cond > self._cond_limit) | (area < 1e-11) | flat | tf.logical_not(tf.reduce_all(
            tf.math.is_finite(self.mean), 1)) | tf.logical_not(tf.math.is_finite(self.sigma))
        if self.restart_rule == "no_improvement":
            stop = stop | tf.equal(added, 0)
        elif self.restart_rule != "basic":
            stop = stop | tf.equal(tf.math.floormod(self.tells, int(self.restart_rule)), 0)
        self.restarts.assign_add(tf.cast(stop, tf.int64))
        self.pending.assign(self.pending | stop)
