"""CMA-ES: covariance matrix adaptation evolution strategy (full covariance).

Implements the (mu/mu_w, lambda)-CMA-ES with the default parameters of
Hansen's tutorial ("The CMA Evolution Strategy: A Tutorial", arXiv:1604.00772,
2016): recombination weights including *negative* weights (active CMA), cumulative
step-size adaptation, rank-one plus rank-mu covariance update with the h_sigma
stall, and a lazily refreshed factorisation of ``C``.

The generation loop is :class:`~tfevo.strategies.cma_base.CMABase`, the update
equations are :mod:`~tfevo.strategies.cma_updates` (tagged with the tutorial's
equation numbers), the stop criteria :mod:`~tfevo.strategies.cma_stop`.  The two
classes here differ only in their covariance model: :class:`CMAES` keeps
``C = B diag(D**2) B^T`` from an eigendecomposition
(:class:`~tfevo.strategies.cma_models.EigenCovariance`), :class:`CholeskyCMAES` a
Cholesky factor ``C = A A^T``
(:class:`~tfevo.strategies.cma_cholesky.CholeskyCovariance`).  Both refactorise
``C`` every ``lazy_gap`` generations, Hansen's tutorial gap
``max(1, floor(1 / (10 n (c1 + cmu))))`` as pycma (settable with ``eigen_gap``),
sampling reusing the factors in between; the ``[n, n]`` update and the
factorisation run through BLAS/LAPACK ops in place on the variables
(:func:`tfevo.linalg.eigen_refresh`, :func:`tfevo.linalg.covariance_refresh`;
pure-TF references otherwise).

All state lives in ``tf.Variable`` attributes (checkpointable with
``tf.train.Checkpoint``); ``ask``/``tell`` are ``tf.function`` programs over the
whole population, traced once per population size.  Termination diagnostics
(pycma's: tolfun, tolx, conditioncov, noeffectaxis, noeffectcoord, stagnation,
tolupsigma, tolflatfitness, tolfacupx, tolfunhist, tolxstagnation) are evaluated in-graph at every ``tell`` and exposed as
:attr:`CMAES.stop_reasons`; the restart wrappers in
:mod:`tfevo.strategies.restarts` use them.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from tfevo.linalg import eigh as _eigh
from tfevo.registry import register
from tfevo.strategies.cma_base import CMABase
from tfevo.strategies.cma_cholesky import CholeskyCovariance
from tfevo.strategies.cma_models import EigenCovariance
from tfevo.strategies.cma_stop import STOP_REASONS
from tfevo.strategies.cma_updates import default_popsize

__all__ = ["CMAES", "CholeskyCMAES", "cma_default_popsize", "STOP_REASONS"]


def cma_default_popsize(num_dims: int) -> int:
    """The default population size ``4 + floor(3 ln n)`` of CMA-ES."""
    return default_popsize(num_dims)


@register("strategy", "cma_es")
class CMAES(CMABase):
    """CMA-ES with full covariance matrix (Hansen's tutorial defaults, active CMA).

    Args:
      num_dims: dimension ``n`` of the search space.
      popsize: ``lambda``; default ``4 + floor(3 ln n)``.
      sigma: initial step size ``sigma_0`` (> 0).
      init_params: initial mean (scalar or ``[n]``); default zeros.
      seed: seed of the :class:`~tfevo.core.SeedStream` (same seed, same run).
      bounds: optional ``(lower, upper)`` (scalars or ``[n]``; ``None`` or an infinite
        value, a side or an entry, for no bound there, as pycma): pycma's default
        ``BoundTransform``.  ``ask`` maps every sample into the box (:meth:`repair`:
        identity inside apart from thin quadratic margins at the bounds, mirrored
        beyond), ``tell`` learns from the untransformed samples behind the asked rows;
        :attr:`mean` may lie outside the box, ``repair(mean)`` is the point it stands for.
      active: use negative recombination weights (active CMA, default True).
      dtype: ``"float64"`` (default) or ``"float32"``: the dtype of the state,
        of ``ask()``'s population, of the population ``tell`` takes and of
        ``best``.  float64 reaches ``f - f_opt <= 1e-8`` wherever pycma does
        (ill-conditioned problems need the resolution); float32 halves memory and
        is faster at large ``n`` -- the choice for neuroevolution-sized
        ``n`` (thousands of weights), where float32 resolution is far below what
        the fitness can distinguish.
      tolfun, tolx: thresholds of the ``tolfun``/``tolx`` stop criteria
        (absolute, as pycma's).
      eigen_gap: generations between eigendecompositions of ``C`` (sampling
        reuses ``B``, ``D`` in between).  Default ``max(1, floor(1 / (10 n
        (c1 + cmu))))`` from Hansen's tutorial, the same as pycma; larger values
        trade adaptation accuracy for speed at large ``n``.

    Attributes (tf.Variables): ``sigma``, ``C``, ``B``, ``D`` (square roots of
    the eigenvalues), ``p_sigma``, ``p_c``, ``best_params``, ``best_fitness``,
    ``stop_flags``; :attr:`mean` is the centre, :attr:`stop_reasons`
    the names of the met termination criteria.

    Example:

    >>> es = CMAES(num_dims=10, sigma=0.5, seed=1)
    >>> for _ in range(300):
    ...     x = es.ask()
    ...     es.tell(x, -tf.reduce_sum(x**2, axis=1))   # maximise -||x||^2
    """

    _model_class = EigenCovariance

    def covariance(self) -> tf.Tensor:
        """The current covariance matrix ``C``, symmetric (the variable ``C`` holds its lower triangle)."""
        return _symmetric(self.C)


@register("strategy", "cholesky_cma_es")
class CholeskyCMAES(CMAES):
    """CMA-ES with a Cholesky factor instead of an eigendecomposition (Krause,
    Arbones & Igel, NeurIPS 2016: "CMA-ES with optimal covariance update and
    storage complexity").

    Same arguments, defaults, weights, learning rates, step-size adaptation and
    covariance update (rank-one + rank-mu with active negative weights and
    pycma's Mahalanobis rescaling) as :class:`CMAES`; what differs:

    * **Sampling** ``y_i = A z_i`` with ``A`` the lower Cholesky factor of
      ``C`` (``C = A A^T``): the same distribution ``N(0, C)`` as ``B D z``.
    * **Step-size path** from ``A^{-1} (m' - m) / sigma = sum_i w_i z_i`` (the
      recombined standard-normal steps) instead of ``C^{-1/2} y_w``; the
      negative weights are rescaled with ``||z_i||^2 = y_i^T C^{-1} y_i``.
      When ``tell`` gets exactly the rows of the last ``ask`` (checked
      entry by entry, O(P D)), it uses the ``z_i`` that produced them (kept in
      a variable, checkpointed); otherwise (with ``bounds``, or rows
      repaired, re-ordered, or from elsewhere) it recomputes
      ``z_i = A^{-1} (x_i - m) / sigma`` with one triangular solve, so every
      row is whitened exactly as given, as in ``CMAES``.  The path is the same as the
      eigen variant's up to a rotation that changes at each refactorisation
      (``C^{-1/2} A`` is orthogonal); Krause et al. show that the step-size
      adaptation is unaffected, and the tests check the evaluation counts
      against pycma.
    * **Refactorisation** ``A = chol(C)`` (LAPACK ``?potrf`` through
      :func:`tfevo.linalg.cholesky`, ~n^3/3 flops, far cheaper than ``?syevd``
      at n = 1000) on the same lazy schedule as ``CMAES`` (``eigen_gap``,
      default Hansen's gap).  ``A`` and the z-space stay consistent between
      refactorisations because every ``z`` is drawn for (or solved with) the
      current ``A``.  If ``C`` is not numerically positive definite (float32,
      condition ~1e7 and more), the factorisation is retried on
      ``C + delta I`` with ``delta`` growing from ``eps * max diag(C)`` by 10x
      per try (up to 12 tries); if all fail, ``A`` is kept.  The update flush
      and the factorisation are one in-place call,
      :func:`tfevo.linalg.covariance_refresh` (op ``TfevoCovarianceRefresh``:
      computed into a scratch ``[D, D]`` variable, not checkpointed, whose
      buffer is swapped with ``C``'s and ``A``'s, so no ``[D, D]`` tensor is
      allocated per refactorisation).
    * **Deferred covariance update.**  Between two refactorisations nothing
      reads ``C`` (sampling and whitening use ``A``), so the rank-(P+1) terms
      of the generations of one gap are kept in a buffer (``[gap (P+1), D]``
      rows with their weights, and the product of the decays) and added to
      ``C`` as one ``[D, gap (P+1)] x [gap (P+1), D]`` product just before the
      factorisation: the same sum as applying them one generation at a time,
      one pass over the ``[D, D]`` matrix instead of ``gap`` passes.  Only the
      lower triangle of ``C`` is computed and stored (BLAS ``?syrk``, half the
      flops; ``?potrf`` reads only that triangle): the attribute ``C`` holds
      the lower triangle (upper triangle zero).  ``diag(C)``
      (for the stop criteria) is updated every generation in O(P D).  The
      attribute ``C`` is therefore up to ``gap - 1`` generations old;
      :meth:`covariance` returns the current, symmetric matrix.  (When a popsize set
      after construction, e.g. by IPOP, would overflow the buffer, the update
      is applied every generation instead.)

    **Stop criteria without eigenvalues.**  ``conditioncov`` and ``tolupsigma``
    use bounds from the factor instead of the extreme eigenvalues:
    ``lambda_max >= max_i C_ii`` and ``lambda_min <= min_i A_ii^2`` (each
    ``A_ii^2`` is a ratio of leading principal minors, which interlacing bounds
    below by ``lambda_min``), so the condition number used,
    ``max_i C_ii / min_i A_ii^2``, is a *lower bound* of ``cond(C)``: the
    criterion never fires early, it may fire later.  ``noeffectaxis`` tests the
    columns of ``A`` (the images of the z-space axes) in turn instead of the
    principal axes.  Exact eigenvalues are computed only on request:
    :meth:`eigenvalues`, :meth:`axis_ratio`.

    State (tf.Variables, all checkpointed): ``sigma``, ``C``, ``A``,
    ``c_diag``, ``a_diag``, the update buffer, ``p_sigma``, ``p_c``, histories, seeds.

    Example:

    >>> es = CholeskyCMAES(num_dims=1000, seed=1)    # less time per generation than CMAES at this n
    >>> x = es.ask(); es.tell(x, -tf.reduce_sum(x**2, axis=1))
    """

    _model_class = CholeskyCovariance

    def __init__(
        self,
        num_dims: int,
        popsize: int | None = None,
        sigma: float = 1.0,
        init_params=None,
        seed: int = 0,
        bounds=None,
        active: bool = True,
        dtype="float64",
        tolfun: float = 1e-11,
        tolx: float = 1e-11,
        name: str | None = None,
        eigen_gap: int | None = None,
    ):
        # (the signature is spelled out, as CMAES's, so config builders see every parameter)
        super().__init__(num_dims, popsize=popsize, sigma=sigma, init_params=init_params, seed=seed,
                         bounds=bounds, active=active, dtype=dtype, tolfun=tolfun, tolx=tolx, name=name,
                         eigen_gap=eigen_gap)

    @property
    def _buf_gens(self) -> int:
        """Generations per flush of the update buffer (1: ``C`` is updated every generation)."""
        return self._model.buffer_gens

    # -- on-request diagnostics (eager, not on the hot path) ---------------------------------
    def covariance(self) -> tf.Tensor:
        """The current covariance matrix ``C`` (including the buffered updates), symmetrised."""
        return _symmetric(self._model.covariance())

    def eigenvalues(self) -> tf.Tensor:
        """Eigenvalues of the current ``C`` (ascending), computed on request (O(n^3))."""
        return _eigh(self.covariance())[0]

    def axis_ratio(self) -> float:
        """``sqrt(lambda_max / lambda_min)`` of the current ``C`` (on request)."""
        e = self.eigenvalues().numpy()
        return float(np.sqrt(e[-1] / max(e[0], np.finfo(e.dtype).tiny)))


def _symmetric(c):
    """The symmetric matrix whose lower triangle is that of ``c``."""
    lower = tf.linalg.band_part(c, -1, 0)
    return lower + tf.transpose(lower) - tf.linalg.diag(tf.linalg.diag_part(c))
