"""Sep-CMA-ES: CMA-ES with a diagonal covariance matrix (Ros & Hansen, 2008).

Same weights, cumulation and step-size adaptation as :class:`~tfevo.strategies.CMAES`
but ``C = diag(c)``, so ask and tell cost O(P*D) and no eigendecomposition is
needed; the covariance learning rates are multiplied by ``(n + 2) / 3`` as in
Ros & Hansen (PPSN 2008).  Suited to large, roughly separable problems.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from tfevo.registry import register
from tfevo.strategies.cma_es import _CMABase
from tfevo.strategies.shaping import _gaussian_population

__all__ = ["SepCMAES"]


@register("strategy", "sep_cma_es")
class SepCMAES(_CMABase):
    """Separable (diagonal-covariance) CMA-ES.

    Args are those of :class:`~tfevo.strategies.CMAES` (``num_dims``,
    ``popsize``, ``sigma_init``, ``mean_init``, ``seed``, ``bounds``, ``active``,
    ``dtype``, ``tolfun``, ``tolx``).  State: ``sigma``, ``c_diag`` (the
    diagonal of C), ``p_sigma``, ``p_c``.

    Example:

    >>> es = SepCMAES(num_dims=1000, sigma_init=0.3, seed=0)
    >>> x = es.ask()                        # float32 [P, 1000]
    >>> es.tell(x, -tf.reduce_sum(x**2, 1))
    """

    _lazy_eigen = False

    def _learning_rates(self, n, mueff):
        c1 = 2.0 / ((n + 1.3) ** 2 + mueff)
        cmu = min(1.0 - c1, 2.0 * (mueff - 2.0 + 1.0 / mueff) / ((n + 2.0) ** 2 + mueff))
        f = (n + 2.0) / 3.0
        c1s = min(1.0, c1 * f)
        return c1s, min(1.0 - c1s, cmu * f)

    def _init_cov(self):
        self.c_diag = tf.Variable(tf.ones([self.num_dims], self.dtype), trainable=False, name="c_diag")

    def _reset_cov(self):
        self.c_diag.assign(tf.ones_like(self.c_diag))

    def _sample_y(self, z):
        return z * tf.sqrt(self.c_diag)[None, :]

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
        return tf.cast(x, tf.float32)

    def _inv_sqrt(self, y):
        return y * tf.math.rsqrt(self.c_diag)[None, :]

    def _update_cov(self, decay, p_c, y, w_eff, ok):
        rank_mu = tf.linalg.matvec(tf.square(y), w_eff, transpose_a=True)
        c_new = decay * self.c_diag + self.c1 * tf.square(p_c) + self.cmu * rank_mu
        tiny = np.finfo(self.dtype.as_numpy_dtype).tiny
        c_new = tf.maximum(c_new, tf.maximum(tf.reduce_max(c_new) * 1e-20, tiny))
        ok = ok & tf.reduce_all(tf.math.is_finite(c_new))
        self.c_diag.assign(tf.where(ok, c_new, self.c_diag))

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

    def _refresh(self):
        pass

    def _post_tell(self):
        return tf.constant(0)

    def _cov_diag(self):
        return self.c_diag

    def _axis_scales(self):
        return tf.sqrt(self.c_diag)

    def _axis_vector(self, i):
        return tf.one_hot(i, self.num_dims, dtype=self.dtype)
