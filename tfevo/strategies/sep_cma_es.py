"""Sep-CMA-ES: CMA-ES with a diagonal covariance matrix (Ros & Hansen, 2008).

Same weights, cumulation and step-size adaptation as :class:`~tfevo.strategies.CMAES`
but ``C = diag(c)``, so ask and tell cost O(P*D) and no eigendecomposition is
needed; the covariance learning rates are multiplied by ``(n + 2) / 3`` as in
Ros & Hansen (PPSN 2008).  Suited to large, roughly separable problems.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import tensorflow as tf

from tfevo import kernels
from tfevo._holder import Untracked
from tfevo.core import ConfigError, check_fitness, check_population, eager_op_runner
from tfevo.registry import register
from tfevo.strategies.cma_base import CMABase
from tfevo.strategies.cma_models import DiagonalCovariance
from tfevo.strategies.cma_stop import TOL_FAC_UP_X, TOL_X_STAGNATION
from tfevo.strategies.shaping import _gaussian_population

__all__ = ["SepCMAES"]


class TellConstants(NamedTuple):
    """The constants of the ``TfevoSepCmaTell`` kernel, passed as one float64 vector.

    The field order is the kernel's ``enum Const`` (``custom_ops/sep_cma.cc``:
    ``kMu`` is ``mu``, ``kOneMinusCs`` is ``one_minus_cs``, ...);
    ``tests/kernels/test_sep_cma_op.py`` checks that the two lists agree.
    """

    mu: float  # number of positive weights
    one_minus_cs: float  # 1 - c_sigma
    ps_coef: float  # sqrt(c_sigma (2 - c_sigma) mueff)
    one_minus_cc: float  # 1 - c_c
    pc_coef: float  # sqrt(c_c (2 - c_c) mueff)
    hsig_limit: float  # (1.4 + 2 / (n + 1)) chi_n
    c1: float
    cmu: float
    cc: float
    two_minus_cc: float  # 2 - c_c
    cmu_wsum: float  # cmu * sum(weights)
    cs_over_ds: float  # c_sigma / d_sigma
    chi_n: float  # E||N(0, I)||
    tolfun: float
    tolx_abs: float  # tolx (absolute, as pycma)
    up_limit: float  # 1e20 * the run's initial sigma (tolupsigma; follows reset(sigma=...))
    hist_len: float  # length of the best-fitness history (tolfun, tolfunhist)
    tolfun_window: float  # generations of the tolfun window
    stag_window: float  # pycma's tolstagnation (iterations)
    active: float  # 1: negative weights rescaled (active CMA)
    fac_up_limit: float  # TOL_FAC_UP_X * the run's initial sigma (tolfacupx; follows reset(sigma=...))
    stag_samples: float  # length of the sampled best/median histories of tolstagnation
    stag_min_iter: float  # n (5 + 100 / lambda): tolstagnation only after more iterations
    xstag_delta: float  # tolxstagnation's delta, offset and fraction (TOL_X_STAGNATION)
    xstag_offset: float
    xstag_frac: float

    def vector(self) -> np.ndarray:
        """The float64 ``consts`` input of the kernel."""
        return np.array(self, np.float64)


@register("strategy", "sep_cma_es")
class SepCMAES(CMABase):
    """Separable (diagonal-covariance) CMA-ES.

    Args are those of :class:`~tfevo.strategies.CMAES` (``num_dims``,
    ``popsize``, ``sigma``, ``init_params``, ``seed``, ``bounds``, ``active``,
    ``dtype``, ``tolfun``, ``tolx``).  State: ``sigma``, ``c_diag`` (the
    diagonal of C), ``p_sigma``, ``p_c``.  Its stop criteria are those of
    :class:`~tfevo.strategies.CMAES` without ``noeffectaxis`` (the principal axes are
    the coordinates; pycma's ``CMA_diagonal=True`` does not check it either), in the C++
    tell and in the reference alike (``docs/cma.md`` has the table).

    Example:

    >>> es = SepCMAES(num_dims=1000, sigma=0.3, seed=0)
    >>> x = es.ask()                        # float64 [P, 1000] (dtype="float32": float32)
    >>> es.tell(x, -tf.reduce_sum(x**2, 1))
    """

    _model_class = DiagonalCovariance

    def __init__(self, *args, use_op: bool | None = None, **kwargs):
        # use_op: the float32 tell as one C++ kernel (custom_ops/sep_cma.cc; None =
        # where tfevo.kernels allows, True = required, False = the pure-TF
        # reference, compiled by XLA).  Same arithmetic, equal to float rounding.
        self.use_op = kernels.check_use_op(use_op)
        self._eager_tells = Untracked(d={})  # popsize -> eager tell (not checkpointed)
        super().__init__(*args, **kwargs)
        if use_op is True:
            self._tell_op()  # raises KernelUnavailableError (a ConfigError) naming the reason

    def _tell_op(self):
        """The ``TfevoSepCmaTell`` kernel when the whole tell runs as it (decided once per object:
        float32 state on the host, the op built), else ``None``."""
        d = self._eager_tells.d
        if "op" not in d:
            why = None if self.dtype == tf.float32 else "the kernel is float32 only"
            d["op"] = kernels.kernel("TfevoSepCmaTell", self.use_op, [self._mean], unsupported=why)
        return d["op"]

    def _tell_op_usable(self) -> bool:
        return self._tell_op() is not None

    def _tell_consts(self, sigma0: float | None = None) -> np.ndarray:
        """The kernel's ``consts`` input (:class:`TellConstants` as a float64 vector); the limits of
        tolupsigma and tolfacupx follow ``sigma0``, by default the run's initial sigma (read eagerly)."""
        n, cs, cc = self.num_dims, self.c_sigma, self.c_c
        sigma0 = float(self.run_sigma0.numpy()) if sigma0 is None else sigma0
        return TellConstants(
            mu=self.mu,
            one_minus_cs=1.0 - cs,
            ps_coef=math.sqrt(cs * (2.0 - cs) * self.mueff),
            one_minus_cc=1.0 - cc,
            pc_coef=math.sqrt(cc * (2.0 - cc) * self.mueff),
            hsig_limit=(1.4 + 2.0 / (n + 1.0)) * self.chi_n,
            c1=self.c1,
            cmu=self.cmu,
            cc=cc,
            two_minus_cc=2.0 - cc,
            cmu_wsum=self.cmu * float(self.weights_np.sum()),
            cs_over_ds=cs / self.d_sigma,
            chi_n=self.chi_n,
            tolfun=self.tolfun,
            tolx_abs=self.tolx,
            up_limit=1e20 * sigma0,
            hist_len=self.hist_len,
            tolfun_window=self.tolfun_window,
            stag_window=self.stag_window,
            active=1.0 if self.active else 0.0,
            fac_up_limit=TOL_FAC_UP_X * sigma0,
            stag_samples=self.stag_samples,
            stag_min_iter=self.stag_min_iter,
            xstag_delta=TOL_X_STAGNATION[0],
            xstag_offset=TOL_X_STAGNATION[1],
            xstag_frac=TOL_X_STAGNATION[2],
        ).vector()

    def ask(self) -> tf.Tensor:
        """As :meth:`CMAES.ask`; called eagerly with the ops available (and no
        bounds), one eager kernel reads the state and samples (same numbers)."""
        if tf.executing_eagerly() and self.bounds is None and self._tell_op_usable():
            key = ("ask", self.popsize)
            run = self._eager_tells.d.get(key)
            if run is None:
                run = self._eager_tells.d[key] = self._make_eager_ask()
            if run is not False:
                return run()
        return super().ask()

    def _make_eager_ask(self):
        if kernels.kernel("TfevoGaussianFromState", self.use_op if self.use_op is not True else None,
                          [self._mean]) is None:
            return False
        raw = eager_op_runner("TfevoGaussianFromState", 1, ("rows", self.popsize, "dim", self.num_dims))
        if raw is None:  # pragma: no cover - TensorFlow internals moved
            return False
        handles = [v.handle for v in (self.seeds.seed, self.seeds.counter, self._mean, self.sigma, self.c_diag)]

        def run():
            return raw(handles)[0]

        return run

    def tell(self, x, fitness) -> None:
        """As :meth:`CMAES.tell`; called eagerly with the op available (and no bounds), the whole
        update is one eager kernel call (no function call around it)."""
        if tf.executing_eagerly() and self.bounds is None and self._tell_op_usable():
            run = self._eager_tells.d.get(self.popsize)
            if run is None:
                run = self._eager_tells.d[self.popsize] = self._make_eager_tell()
            if run is not False:
                fitness = check_fitness(fitness, self.popsize, dtype=self.dtype)
                self._note_nonfinite(fitness)
                run(check_population(x, (self.popsize, self.num_dims), "population"), fitness)
                return
        super().tell(x, fitness)

    def reset(self, mean=None, sigma=None) -> None:
        super().reset(mean, sigma)
        self._eager_tells.d.clear()  # their constants hold limits that follow the new sigma

    def _make_eager_tell(self):
        raw = eager_op_runner("TfevoSepCmaTell")
        if raw is None:  # pragma: no cover - TensorFlow internals moved
            return False
        head = [tf.constant(self.weights_np.astype(np.float32)), tf.constant(self._tell_consts())]
        tail = [v.handle for v in self._tell_state()]

        def run(x, fitness):
            raw([x, fitness] + head + tail)

        return run

    def _tell_state(self):
        """The variables of the tell op, in its input order."""
        return (
            self._mean, self.sigma, self.p_sigma, self.p_c, self.c_diag, self.generation, self.restart_generation,
            self.best_params, self.best_fitness, self.best_f_hist, self.stag_best_hist, self.stag_median_hist,
            self.run_best_f, self.xstag_mean, self.stop_counters, self.stop_flags,
        )

    def _whole_tell(self):
        if self.bounds is not None or not self._tell_op_usable():  # (the op learns from the rows as given)
            return self._tell_core, True
        op = self._tell_op()
        consts = self._tell_consts(0.0)  # the limits: set from run_sigma0 at every call
        weights = self.weights_np.astype(np.float32)
        state = self._tell_state()

        at = [[TellConstants._fields.index("up_limit")], [TellConstants._fields.index("fac_up_limit")]]

        def tell_op(x, fitness):
            # tolupsigma's and tolfacupx's limits read from the variable, so a reset() needs no retrace
            sigma0 = tf.cast(self.run_sigma0, tf.float64)
            c = tf.tensor_scatter_nd_update(tf.constant(consts), at, tf.stack([1e20 * sigma0, TOL_FAC_UP_X * sigma0]))
            op(x, fitness, tf.constant(weights), c, *[v.handle for v in state])
            return tf.constant(0)

        return tell_op, False

    def _sample(self, seed):
        # x = m + sigma * sqrt(c) * z with the per-coordinate scale folded into the draw;
        # float32: one fused sampler call (C++ op when built, same stream as the reference)
        scale = self.sigma * tf.sqrt(self.c_diag)
        if self.dtype == tf.float32:
            return _gaussian_population(self._mean, scale, self.popsize, False, seed), None
        return self._mean[None, :] + self._normal(scale, seed), None

    def _ask_body(self):
        return self._reflect(self._sample(self.seeds.next())[0])

    def _tell_core(self, x, fitness):
        out = super()._tell_core(x, fitness)
        # sigma and the scale of C can drift apart (sigma up, C down) on
        # non-separable problems; move the common scale of C into sigma.  The
        # sampling distribution is unchanged (sigma^2 C, and p_c in y-space).
        s = tf.reduce_max(self.c_diag)
        far = (s < 1e-4) | (s > 1e4)
        s = tf.where(far, s, tf.ones_like(s))
        self.c_diag.assign(self.c_diag / s)
        self.sigma.assign(self.sigma * tf.sqrt(s))
        self.p_c.assign(self.p_c / tf.sqrt(s))
        return out
