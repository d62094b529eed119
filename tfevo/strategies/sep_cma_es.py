"""Sep-CMA-ES: CMA-ES with a diagonal covariance matrix (Ros & Hansen, 2008).

Same weights, cumulation and step-size adaptation as :class:`~tfevo.strategies.CMAES`
but ``C = diag(c)``, so ask and tell cost O(P*D) and no eigendecomposition is
needed; the covariance learning rates are multiplied by ``(n + 2) / 3`` as in
Ros & Hansen (PPSN 2008).  Suited to large, roughly separable problems.
"""

from __future__ import annotations

import math

import numpy as np
import tensorflow as tf

from tfevo import ops
from tfevo._holder import Untracked
from tfevo.core import ConfigError, check_fitness, check_population, eager_op_runner
from tfevo.registry import register
from tfevo.strategies.cma_base import CMABase
from tfevo.strategies.cma_models import DiagonalCovariance
from tfevo.strategies.shaping import _gaussian_population

__all__ = ["SepCMAES"]


@register("strategy", "sep_cma_es")
class SepCMAES(CMABase):
    """Separable (diagonal-covariance) CMA-ES.

    Args are those of :class:`~tfevo.strategies.CMAES` (``num_dims``,
    ``popsize``, ``sigma``, ``init_params``, ``seed``, ``bounds``, ``active``,
    ``dtype``, ``tolfun``, ``tolx``).  State: ``sigma``, ``c_diag`` (the
    diagonal of C), ``p_sigma``, ``p_c``.

    Example:

    >>> es = SepCMAES(num_dims=1000, sigma=0.3, seed=0)
    >>> x = es.ask()                        # float64 [P, 1000] (dtype="float32": float32)
    >>> es.tell(x, -tf.reduce_sum(x**2, 1))
    """

    _model_class = DiagonalCovariance

    def __init__(self, *args, use_op: bool | None = None, **kwargs):
        # use_op: the float32 tell as one C++ kernel (custom_ops/sep_cma.cc; None =
        # when it builds and the state is on the CPU, True = required, False = the
        # pure-TF reference, compiled by XLA).  Same arithmetic, equal to float rounding.
        if use_op not in (None, True, False):
            raise ConfigError(f"use_op must be None, True or False, got {use_op!r}")
        self.use_op = use_op
        self._eager_tells = Untracked(d={})  # popsize -> eager tell (not checkpointed)
        super().__init__(*args, **kwargs)
        if use_op is True and not self._tell_op_usable():
            raise ConfigError(
                "SepCMAES(use_op=True) needs dtype float32, state on the CPU and the custom op "
                "'sep_cma' (custom_ops/sep_cma.cc), which could not be used here"
            )

    def _tell_op_usable(self) -> bool:
        usable = self._eager_tells.d.get("usable")
        if usable is None:
            device = self._mean.device.upper()
            usable = (
                self.use_op is not False and self.dtype == tf.float32 and "GPU" not in device and "TPU" not in device
                and ops.op_module("sep_cma", "tfevo_sep_cma_tell") is not None
            )
            self._eager_tells.d["usable"] = usable
        return usable

    def _tell_consts(self) -> np.ndarray:
        """The float64 constants of the tell op, in the order of custom_ops/sep_cma.cc."""
        n, cs, cc = self.num_dims, self.c_sigma, self.c_c
        return np.array(
            [
                self.mu, 1.0 - cs, math.sqrt(cs * (2.0 - cs) * self.mueff), 1.0 - cc,
                math.sqrt(cc * (2.0 - cc) * self.mueff), (1.4 + 2.0 / (n + 1.0)) * self.chi_n, self.c1, self.cmu,
                cc, 2.0 - cc, self.cmu * float(self.weights_np.sum()), self.c_sigma / self.d_sigma, self.chi_n,
                self.tolfun, self.tolx, 1e20 * self.sigma_init, self.hist_len,
                self.tolfun_window, self.stag_window, 1.0 if self.active else 0.0,
            ],
            np.float64,
        )

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
        if ops.op_module("normal", "tfevo_gaussian_from_state") is None:
            return False
        raw = eager_op_runner("TfevoGaussianFromState", 1, ("rows", self.popsize, "dim", self.num_dims))
        if raw is None:  # pragma: no cover - TensorFlow internals moved
            return False
        handles = [v.handle for v in (self.seeds.seed, self.seeds.counter, self._mean, self.sigma, self.c_diag)]

        def run():
            return raw(handles)[0]

        return run

    def tell(self, x, fitness) -> None:
        """As :meth:`CMAES.tell`; called eagerly with the op available, the whole
        update is one eager kernel call (no function call around it)."""
        if tf.executing_eagerly() and self._tell_op_usable():
            run = self._eager_tells.d.get(self.popsize)
            if run is None:
                run = self._eager_tells.d[self.popsize] = self._make_eager_tell()
            if run is not False:
                fitness = check_fitness(fitness, self.popsize)
                self._note_nonfinite(fitness)
                run(check_population(x, (self.popsize, self.num_dims), "population"), fitness)
                return
        super().tell(x, fitness)

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
            self.best_params, self.best_fitness, self.best_f_hist, self.median_f_hist, self.stop_flags,
        )

    def _whole_tell(self):
        if not self._tell_op_usable():
            return self._tell_core, True
        op = ops.op_module("sep_cma", "tfevo_sep_cma_tell").tfevo_sep_cma_tell
        consts = self._tell_consts()
        weights = self.weights_np.astype(np.float32)
        state = self._tell_state()

        def tell_op(x, fitness):
            op(x, fitness, tf.constant(weights), tf.constant(consts), *[v.handle for v in state])
            return tf.constant(0)

        return tell_op, False

    def _ask_body(self):
        # x = m + sigma * sqrt(c) * z with the per-coordinate scale folded into the draw;
        # float32: one fused sampler call (C++ op when built, same stream as the reference)
        scale = self.sigma * tf.sqrt(self.c_diag)
        if self.dtype == tf.float32:
            x = _gaussian_population(self._mean, scale, self.popsize, False, self.seeds.next())
        else:
            x = self._mean[None, :] + self._normal(scale)
        if self.bounds is not None:
            x = tf.clip_by_value(x, tf.constant(self.bounds[0], self.dtype), tf.constant(self.bounds[1], self.dtype))
        return x

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
