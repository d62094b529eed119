"""The Cholesky covariance model of :class:`~tfevo.strategies.CholeskyCMAES`.

``C = A A^T`` with ``A`` lower triangular, refactorised every ``lazy_gap``
generations; between two refactorisations the update terms of Eq. (47) wait in
a buffer and reach ``C`` as one product (see the ``CholeskyCMAES`` docstring for
the design).  Variables (attributes of the strategy, checkpointed): ``C`` (lower
triangle), ``A``, ``c_diag``, ``a_diag``, the buffer ``_ybuf``, ``_vbuf``,
``_cscale`` and the last ask's ``_z_last``, ``_x_last``.
"""

from __future__ import annotations

import tensorflow as tf

from tfevo.linalg import all_equal as _all_equal
from tfevo.linalg import covariance_refresh as _covariance_refresh
from tfevo.linalg import covariance_refresh_op_available as _covariance_refresh_op_available
from tfevo.linalg import syrk_update as _syrk_update
from tfevo.linalg import triangular_rows as _triangular_rows
from tfevo.strategies import cma_updates as eq
from tfevo.strategies.cma_models import AdaptedCovariance


class CholeskyCovariance(AdaptedCovariance):
    """Full ``C`` with a lazily refreshed Cholesky factor ``A`` and a deferred update buffer."""

    full_axes = True
    deferred = True
    #: the update buffer may hold at most max(this many times D, 4096) rows
    MAX_BUFFER_FACTOR = 4

    def __init__(self, es):
        super().__init__(es)
        n, dt = es.num_dims, es.dtype
        es.C = tf.Variable(tf.eye(n, dtype=dt), trainable=False, name="C")
        es.A = tf.Variable(tf.eye(n, dtype=dt), trainable=False, name="A")
        es.c_diag = tf.Variable(tf.ones([n], dt), trainable=False, name="c_diag")
        # diag(A), kept with A (read by the stop criteria every generation, instead of a
        # strided pass over the [n, n] matrix)
        es.a_diag = tf.Variable(tf.ones([n], dt), trainable=False, name="a_diag")
        self.kcap = None  # buffer capacity (rows), set by build()
        self.buffer_gens = 1  # generations per buffer flush (1: C is updated every generation)
        self.scratch = None

    def build(self):
        es = self.es
        n, dt, gap, p = es.num_dims, es.dtype, es.lazy_gap, es.popsize
        # fixed at construction so checkpoints have fixed shapes
        self.kcap = gap * (p + 1) if gap > 1 and gap * (p + 1) <= max(self.MAX_BUFFER_FACTOR * n, 4096) else 0
        k = max(self.kcap, 1)
        es._ybuf = tf.Variable(tf.zeros([k, n], dt), trainable=False, name="cov_buffer_rows")
        es._vbuf = tf.Variable(tf.zeros([k], dt), trainable=False, name="cov_buffer_weights")
        es._cscale = tf.Variable(tf.constant(1.0, dt), trainable=False, name="cov_buffer_scale")
        self.configure()
        # The z's and x's of the last ask (for the initial popsize): tell reuses those z's
        # when it gets exactly the asked rows, instead of solving A z = (x - m) / sigma.
        self.zcache_p = p
        es._z_last = tf.Variable(tf.zeros([p, n], dt), trainable=False, name="z_last")
        es._x_last = tf.Variable(tf.fill([p, n], tf.constant(float("nan"), dt)), trainable=False, name="x_last")
        # Work buffer of the in-place refactorisation op (linalg.covariance_refresh): on this
        # plain object, so not checkpointed (its contents are never read); None without the op.
        self.scratch = (tf.Variable(tf.zeros([n, n], dt), trainable=False, name="refresh_scratch")
                        if _covariance_refresh_op_available() else None)

    def configure(self):
        if self.kcap is None:  # during the strategy's constructor: set by build()
            self.buffer_gens = 1
            return
        g = self.es.lazy_gap
        self.buffer_gens = g if (g > 1 and g * (self.es.popsize + 1) <= self.kcap) else 1

    def reset(self):
        es = self.es
        n, dt = es.num_dims, es.dtype
        es.C.assign(tf.eye(n, dtype=dt))
        es.A.assign(tf.eye(n, dtype=dt))
        es.c_diag.assign(tf.ones([n], dt))
        es.a_diag.assign(tf.ones([n], dt))
        es._x_last.assign(tf.fill(tf.shape(es._x_last), tf.constant(float("nan"), dt)))  # the last ask's z's are void
        es._vbuf.assign(tf.zeros_like(es._vbuf))
        es._cscale.assign(tf.constant(1.0, dt))

    # -- sampling and whitening -------------------------------------------------------
    def sample(self, z):
        # y_i = A z_i: BLAS ?trmm (half the flops of a general product) via tfevo.linalg
        return _triangular_rows(self.es.A, z)

    def whiten(self, y):
        """``A^{-1} y`` per row (whitening in the Cholesky frame)."""
        return tf.transpose(tf.linalg.triangular_solve(self.es.A, tf.transpose(y), lower=True))

    def use_zcache(self):
        # (not with bounds: the asked rows are transformed into the box, not m + sigma A z)
        return self.es.bounds is None and self.es.popsize == self.zcache_p

    def remember(self, z, x):
        """Keeps the z's of this ask, for tell (see :meth:`prepare`)."""
        if self.use_zcache():
            self.es._z_last.assign(z)
            self.es._x_last.assign(x)

    def prepare(self, x):
        # z_i = A^{-1} (x_i - m) / sigma for all rows at once, in graph mode (Eigen's
        # triangular solve; XLA's CPU triangular solve is slower here) -- or, when x is
        # exactly the last asked population, the z's that produced it.
        es = self.es

        def solve():
            y = (x - es._mean[None, :]) / es.sigma
            y = tf.where(tf.reduce_all(tf.math.is_finite(y), axis=1, keepdims=True), y, tf.zeros_like(y))
            return self.whiten(y)

        if not self.use_zcache():
            return (solve(),)
        same = _all_equal(x, es._x_last)
        return (tf.cond(same, lambda: tf.identity(es._z_last), solve),)

    def whitened_steps(self, y, y_w, order, extra):
        es = self.es
        z = tf.gather(extra[0], order)  # non-finite rows were zeroed in prepare (and in y)
        z_w = tf.linalg.matvec(z[: es.mu], es.weights[: es.mu], transpose_a=True)  # sum_i w_i z_i
        sq = tf.reduce_sum(tf.square(z[es.mu:]), axis=1) if es.active else None
        return z_w, sq

    # -- covariance update (Eq. 47) -------------------------------------------------------
    def update(self, decay, p_c, y, w_eff, ok):
        # In the XLA core: the rank-(P+1) rows and weights, and diag(C) after the update
        # (O(P D)); finish() writes the rows to the buffer or applies them to C.
        es = self.es
        dt = es.dtype
        ys, v = eq.rank_one_mu_rows(y, p_c, w_eff, es.c1, es.cmu, dt)
        decay = tf.cast(decay, dt)
        old = es.c_diag
        cdiag = decay * old + tf.reduce_sum(v[:, None] * tf.square(ys), axis=0)
        ok = ok & tf.reduce_all(tf.math.is_finite(cdiag)) & tf.reduce_all(tf.math.is_finite(v))
        cdiag = tf.where(ok, cdiag, old)
        es.c_diag.assign(cdiag)
        if self.buffer_gens == 1:
            return (ys, v, decay, ok), cdiag
        # Buffered: C_t = S_t (C_0 + sum_j U_j / S_j), S_t = product of the decays since the
        # last flush: this generation's rows (zero if not ok) go to slot g mod gap with the
        # weights v_j / S_j -- computed here, in XLA; finish() only writes them.
        k = es.popsize + 1
        slot = tf.math.floormod(self._local_generation(), self.buffer_gens)  # gen not yet counted
        idx = tf.cast(slot, tf.int32) * k + tf.range(k)
        s_new = tf.where(ok, es._cscale * decay, es._cscale)
        rows = tf.where(ok, ys, tf.zeros_like(ys))
        w = tf.where(ok, v / s_new, tf.zeros_like(v))
        return (idx, rows, w, s_new), cdiag

    def finish(self, pending):
        self._apply(*pending)
        need = tf.math.floormod(self._local_generation(), self.es.lazy_gap) == 0
        if self.buffer_gens > 1:  # (then buffer_gens == lazy_gap: flush and refactorise together)
            tf.cond(need, self._flush_refresh, lambda: tf.constant(0))
        elif not self._refresh_every_generation():  # (else done in _apply)
            tf.cond(need, self._refresh_op, lambda: tf.constant(0))

    def _apply(self, *pending):
        """The update of every generation: buffer write, or ``C`` update (with the refresh at gap 1)."""
        es = self.es
        if self.buffer_gens > 1:
            idx, rows, w, s_new = pending
            es._ybuf.scatter_update(tf.IndexedSlices(rows, idx))
            es._vbuf.scatter_update(tf.IndexedSlices(w, idx))
            es._cscale.assign(s_new)
            return
        ys, v, decay, ok = pending
        if self._refresh_every_generation():
            # update and refactorisation in one in-place call; not ok: the identity update
            self._refactor(tf.where(ok, ys, tf.zeros_like(ys)), tf.where(ok, v, tf.zeros_like(v)),
                           tf.where(ok, decay, tf.ones_like(decay)))
            return
        # lower triangle of decay C + ys^T diag(v) ys (BLAS ?syrk via tfevo.linalg)
        c_new = _syrk_update(es.C, ys, v, decay)
        # syrk_update returns an all-NaN matrix when any entry is not finite: one entry tells
        ok = ok & tf.math.is_finite(c_new[0, 0])

        def commit():
            es.C.assign(c_new)
            return tf.constant(0)

        tf.cond(ok, commit, lambda: tf.constant(0))

    def _refresh_every_generation(self):
        """Gap 1 with the in-place op: _apply updates and refactorises in one call."""
        return self.es.lazy_gap == 1 and self.scratch is not None

    def _flush_refresh(self):
        """``C <- S (C + sum rows^T diag(weights) rows)`` over the buffer (which is then emptied),
        then ``A = chol(C)``: one in-place call (see :meth:`_refactor`)."""
        es = self.es
        k = self.buffer_gens * (es.popsize + 1)
        self._refactor(es._ybuf[:k], es._vbuf[:k] * es._cscale, es._cscale)
        es._vbuf.assign(tf.zeros_like(es._vbuf))
        es._cscale.assign(tf.ones_like(es._cscale))
        es.c_diag.assign(tf.linalg.diag_part(es.C))
        return tf.constant(0)

    def _refresh_op(self):
        self.refresh()
        return tf.constant(0)

    def refresh(self):
        self._refactor()

    def _refactor(self, rows=None, weights=None, scale=1.0):
        """(With ``rows``: ``C <- lower(scale C + rows^T diag(weights) rows)`` if finite, then)
        ``A = chol(C)``; on failure retried with growing diagonal loading; kept if all fail
        (:func:`tfevo.linalg.covariance_refresh`: in place on the variables with the op);
        ``a_diag`` follows ``A``."""
        es = self.es
        _covariance_refresh(es.C, es.A, self.scratch, rows, weights, scale)
        es.a_diag.assign(tf.linalg.diag_part(es.A))

    # -- stop-criteria views ---------------------------------------------------------------
    def cov_diag(self):
        return self.es.c_diag

    def axis_scales(self):
        # max = sqrt(max C_ii) <= sqrt(lambda_max); min = min A_ii >= sqrt(lambda_min):
        # (max/min)^2 is a lower bound of cond(C) (see the CholeskyCMAES docstring).
        return tf.concat([tf.sqrt(tf.maximum(self.es.c_diag, 0.0)), tf.abs(self.es.a_diag)], 0)

    def no_effect_axis(self, it):
        es = self.es
        i = tf.cast(tf.math.floormod(it, es.num_dims), tf.int32)
        shift = 0.1 * es.sigma * tf.gather(es.A, i, axis=1)
        return tf.reduce_all(tf.equal(es._mean, es._mean + shift))

    def axis_vector(self, i):
        return tf.gather(self.es.A, i, axis=1)

    def covariance(self):
        """The current ``C`` including the buffered updates (lower triangle meaningful)."""
        es = self.es
        c = es.C
        if self.buffer_gens > 1:
            k = self.buffer_gens * (es.popsize + 1)
            rows, v = es._ybuf[:k], es._vbuf[:k] * es._cscale
            c = es._cscale * c + tf.matmul(rows * v[:, None], rows, transpose_a=True)
        return c
