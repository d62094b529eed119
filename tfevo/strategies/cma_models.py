"""Covariance models of the CMA family: how ``C`` is stored, sampled from and updated.

One CMA-ES (:class:`~tfevo.strategies.cma_base.CMABase`) runs the updates of
:mod:`tfevo.strategies.cma_updates`; a model holds ``C`` in one form:

* :class:`EigenCovariance` -- full ``C = B diag(D**2) B^T`` with a lazy
  eigendecomposition (``CMAES``);
* :class:`~tfevo.strategies.cma_cholesky.CholeskyCovariance` -- full ``C = A A^T``
  with a lazy Cholesky factor (``CholeskyCMAES``);
* :class:`DiagonalCovariance` -- ``C = diag(c)`` (``SepCMAES``);
* :class:`LimitedMemoryTransform` -- ``m`` direction vectors (``LMMAES``, which
  has its own update rule, MA-ES's).

A model's variables are attributes of the strategy (so their checkpoint names are
the strategy's); the model object itself is plain Python, not tracked.
"""

from __future__ import annotations

import abc

import numpy as np
import tensorflow as tf

from tfevo.linalg import eigen_refresh as _eigen_refresh
from tfevo.strategies import cma_updates as eq


class CovarianceModel(abc.ABC):
    """The interface the CMA-ES loop calls.

    * ``sample(z)``: ``y = C^{1/2} z`` per row (Eq. 39);
    * ``whiten(y)``: ``C^{-1/2} y`` per row; ``whitened_steps`` gives what Eq. (43)
      and (46) need (``C^{-1/2} <y>_w`` and the squared norms of the negative rows);
    * ``update(...)`` (:class:`AdaptedCovariance`; Eq. 47, inside the XLA numeric core) returns ``(pending,
      cdiag)``: tensors that ``finish(pending)`` applies in graph mode after the core
      (full models leave the ``[n, n]`` products to BLAS there), and diag(C) after
      the update (or None: read ``cov_diag()``);
    * ``refresh()``: refactorise ``C`` now;
    * stop-criteria views: ``cov_diag``, ``axis_scales``, ``no_effect_axis``.
    """

    #: principal axes other than the coordinates (full C)
    full_axes = False
    #: C is diagonal: its principal axes are the coordinates (no noeffectaxis, as pycma's CMA_diagonal)
    diagonal = False
    #: the tell is the XLA core plus graph-mode work (``prepare``, ``finish``); else one XLA program
    deferred = False

    def __init__(self, es):
        self.es = es

    def learning_rates(self, n: int, mueff: float) -> tuple[float, float]:
        """``(c_1, c_mu)``: Table 1's rates for a full covariance; models with fewer
        degrees of freedom learn faster and override this."""
        return eq.covariance_rates(n, mueff, self.es.popsize)

    @abc.abstractmethod
    def reset(self) -> None:
        """``C = I`` (and its factors)."""

    @abc.abstractmethod
    def sample(self, z):
        """Eq. (39): ``y_k = C^{1/2} z_k`` per row."""

    @abc.abstractmethod
    def whiten(self, y):
        """``C^{-1/2} y`` per row."""

    @abc.abstractmethod
    def cov_diag(self):
        """``diag(C)``."""

    @abc.abstractmethod
    def axis_scales(self):
        """Scales whose max/min ratio squared is (a lower bound of) ``cond(C)``."""

    def configure(self) -> None:
        """Called when the strategy (re)computes its constants for a population size."""
        return None  # (a body AutoGraph can convert)

    def build(self) -> None:
        """Creates the state that depends on the constants (end of the strategy's constructor)."""
        return None  # (a body AutoGraph can convert)

    def remember(self, z, x) -> None:
        """Called by ``ask`` with the draws ``z`` and the population ``x`` (in its graph)."""
        return None  # (a body AutoGraph can convert)

    def prepare(self, x):
        """Tensors computed in graph mode before the numeric core, passed to ``whitened_steps``."""
        return ()

    def whitened_steps(self, y, y_w, order, extra):
        """``(C^{-1/2} y_w, ||C^{-1/2} y_i||^2 for the negative-weight rows or None)``.

        ``y``: the sorted steps ``[P, D]``; ``order``: the sort permutation;
        ``extra``: the output of :meth:`prepare`.
        """
        es = self.es
        z_w = self.whiten(y_w[None, :])[0]
        sq = self.mahalanobis_sq(y[es.mu:]) if es.active else None
        return z_w, sq

    def mahalanobis_sq(self, y):
        """``||C^{-1/2} y_i||^2`` per row."""
        return tf.reduce_sum(tf.square(self.whiten(y)), axis=1)

    def finish(self, pending) -> None:
        """Graph-mode work after the numeric core (see :meth:`update`)."""
        return None  # (a body AutoGraph can convert)

    def refresh(self) -> None:
        """Refactorises ``C`` now (no-op for models without a factorisation)."""
        return None  # (a body AutoGraph can convert)

    def axis_vector(self, i):
        """Unit vector of principal axis ``i``."""
        return tf.one_hot(i, self.es.num_dims, dtype=self.es.dtype)

    def no_effect_axis(self, it):
        """pycma's noeffectaxis for axis ``it mod n`` (``it``: the run's iterations, this one
        included, pycma's ``countiter``): ``m == m + 0.1 sigma sqrt(lambda_i) b_i``."""
        es = self.es
        i = tf.cast(tf.math.floormod(it, es.num_dims), tf.int32)
        shift = 0.1 * es.sigma * tf.gather(self.axis_scales(), i) * self.axis_vector(i)
        return tf.reduce_all(tf.equal(es._mean, es._mean + shift))

    def _local_generation(self):
        es = self.es
        return es.generation - es.restart_generation


class AdaptedCovariance(CovarianceModel):
    """A model whose ``C`` follows the CMA update, Eq. (47)."""

    @abc.abstractmethod
    def update(self, decay, p_c, y, w_eff, ok):
        """Eq. (47); returns ``(pending, cdiag)`` (see :class:`CovarianceModel`)."""


class EigenCovariance(AdaptedCovariance):
    """Full ``C`` with ``B``, ``D`` from its eigendecomposition, refreshed every ``lazy_gap``
    generations.  Variables ``C`` (lower triangle), ``B``, ``D`` (square roots of the eigenvalues).

    The rank-(P+1) update of Eq. (47) and, on schedule, the eigendecomposition are one
    call of :func:`tfevo.linalg.eigen_refresh` after the XLA core (BLAS ``?gemm`` strips of
    the lower triangle and LAPACK ``?syevd``, in place on the variables).
    """

    full_axes = True
    deferred = True

    def __init__(self, es):
        super().__init__(es)
        n, dt = es.num_dims, es.dtype
        es.C = tf.Variable(tf.eye(n, dtype=dt), trainable=False, name="C")
        es.B = tf.Variable(tf.eye(n, dtype=dt), trainable=False, name="B")
        es.D = tf.Variable(tf.ones([n], dt), trainable=False, name="D")

    def reset(self):
        es = self.es
        n, dt = es.num_dims, es.dtype
        es.C.assign(tf.eye(n, dtype=dt))
        es.B.assign(tf.eye(n, dtype=dt))
        es.D.assign(tf.ones([n], dt))

    def sample(self, z):
        es = self.es
        return tf.matmul(z * es.D[None, :], es.B, transpose_b=True)

    def whiten(self, y):
        es = self.es
        return tf.matmul(tf.matmul(y, es.B) / es.D[None, :], es.B, transpose_b=True)

    def mahalanobis_sq(self, y):
        # ||B D^-1 B^T y|| = ||D^-1 B^T y||: B is orthogonal, one [k, D] x [D, D] product suffices
        es = self.es
        return tf.reduce_sum(tf.square(tf.matmul(y, es.B) / es.D[None, :]), axis=1)

    def update(self, decay, p_c, y, w_eff, ok):
        # Only diag(C) after the update (for the stop criteria, O(PD)) is computed here;
        # the [n, n] product is left to finish(), outside the XLA core (XLA's CPU dot is
        # slower there, benchmarks/results/cma.md).
        es = self.es
        dt = es.dtype
        ys, v = eq.rank_one_mu_rows(y, p_c, w_eff, es.c1, es.cmu, dt)
        decay = tf.cast(decay, dt)
        old_diag = tf.linalg.diag_part(es.C)
        cdiag = decay * old_diag + tf.reduce_sum(v[:, None] * tf.square(ys), axis=0)
        ok = ok & tf.reduce_all(tf.math.is_finite(cdiag)) & tf.reduce_all(tf.math.is_finite(v))
        return (ys, v, decay, ok), tf.where(ok, cdiag, old_diag)

    def finish(self, pending):
        self._apply(*pending)

    def _apply(self, ys, v, decay, ok):
        """``C <- lower(decay C + ys^T diag(v) ys)`` (kept only when ``ok`` and finite), then,
        every ``lazy_gap`` generations, ``B``, ``D`` from C's eigendecomposition."""
        es = self.es
        need = tf.math.floormod(self._local_generation(), es.lazy_gap) == 0  # (generation already counted)
        _eigen_refresh(es.C, es.B, es.D, ys, v, decay, ok=ok, refresh=need)

    def refresh(self):
        """Eigendecomposition of C (its lower triangle); eigenvalues floored at ``1e-12 max``
        (float64: ``1e-14``); B, D kept when it fails."""
        es = self.es
        _eigen_refresh(es.C, es.B, es.D, refresh=True)

    def cov_diag(self):
        return tf.linalg.diag_part(self.es.C)

    def axis_scales(self):
        return self.es.D

    def axis_vector(self, i):
        return tf.gather(self.es.B, i, axis=1)


class DiagonalCovariance(AdaptedCovariance):
    """``C = diag(c)`` (variable ``c_diag``): O(P D) sampling and update, no factorisation.

    Learning rates ``c_1``, ``c_mu`` times ``(n + 2) / 3`` (Ros & Hansen, PPSN 2008).
    """

    diagonal = True

    def __init__(self, es):
        super().__init__(es)
        es.c_diag = tf.Variable(tf.ones([es.num_dims], es.dtype), trainable=False, name="c_diag")

    def learning_rates(self, n, mueff):
        c1, cmu = eq.covariance_rates(n, mueff, self.es.popsize)
        f = (n + 2.0) / 3.0
        c1s = min(1.0, c1 * f)
        return c1s, min(1.0 - c1s, cmu * f)

    def reset(self):
        self.es.c_diag.assign(tf.ones_like(self.es.c_diag))

    def sample(self, z):
        return z * tf.sqrt(self.es.c_diag)[None, :]

    def whiten(self, y):
        return y * tf.math.rsqrt(self.es.c_diag)[None, :]

    def update(self, decay, p_c, y, w_eff, ok):
        es = self.es
        rank_mu = tf.linalg.matvec(tf.square(y), w_eff, transpose_a=True)
        c_new = decay * es.c_diag + es.c1 * tf.square(p_c) + es.cmu * rank_mu
        tiny = np.finfo(es.dtype.as_numpy_dtype).tiny
        c_new = tf.maximum(c_new, tf.maximum(tf.reduce_max(c_new) * 1e-20, tiny))
        ok = ok & tf.reduce_all(tf.math.is_finite(c_new))
        es.c_diag.assign(tf.where(ok, c_new, es.c_diag))
        return (), None

    def cov_diag(self):
        return self.es.c_diag

    def axis_scales(self):
        return tf.sqrt(self.es.c_diag)


class LimitedMemoryTransform(CovarianceModel):
    """``m`` direction vectors ``M_j`` (variable ``M [m, D]``) defining ``d = A_m ... A_1 z``
    with ``A_j = (1 - c_d_j) I + c_d_j M_j M_j^T`` (LM-MA-ES); the update is the strategy's."""

    def __init__(self, es):
        super().__init__(es)
        es.M = tf.Variable(tf.zeros([es.memory, es.num_dims], es.dtype), trainable=False, name="M")

    def learning_rates(self, n, mueff):
        es = self.es
        j = np.arange(es.memory, dtype=np.float64)
        es.c_d = np.minimum(1.0 / (np.power(1.5, j) * n), 0.999)
        es.c_cm = np.minimum(es.popsize / (np.power(4.0, j) * n), 1.0)
        return 0.0, 0.0

    def reset(self):
        self.es.M.assign(tf.zeros_like(self.es.M))

    def _active(self):
        es = self.es
        return tf.cast(tf.range(es.memory, dtype=tf.int64) < self._local_generation(), es.dtype)

    def sample(self, z):
        es = self.es
        act = self._active()
        d = z
        for j in range(es.memory):
            c = es.c_d[j] * act[j]
            mj = es.M[j]
            d = (1.0 - c) * d + c * tf.linalg.matvec(d, mj)[:, None] * mj[None, :]
        return d

    def whiten(self, d):
        # each A_j is a scaled identity plus a rank-one term: inverted in closed form (Sherman-Morrison)
        es = self.es
        act = self._active()
        z = d
        for j in reversed(range(es.memory)):
            c = es.c_d[j] * act[j]
            mj = es.M[j]
            a = 1.0 - c
            k = c / (a + c * tf.reduce_sum(tf.square(mj)))
            z = (z - k * tf.linalg.matvec(z, mj)[:, None] * mj[None, :]) / a
        return z

    def cov_diag(self):
        # diag of A A^T is not tracked; the stop criteria use the isotropic scale.
        return tf.ones([self.es.num_dims], self.es.dtype)

    def axis_scales(self):
        return tf.ones([self.es.num_dims], self.es.dtype)
