"""LM-MA-ES: limited-memory matrix adaptation evolution strategy.

Loshchilov, Glasmachers & Beyer, "Large Scale Black-box Optimization by
Limited-Memory Matrix Adaptation" (IEEE TEC 2019 / arXiv 1705.06693).  Instead
of a D x D covariance, ``m`` direction vectors ``M_j`` (``m = 4 + floor(3 ln n)``)
define the sampling transform ``d = A_m ... A_1 z`` with
``A_j = (1 - c_d_j) I + c_d_j M_j M_j^T``; ask and tell cost O(m P D) and memory
O(m D), so it scales to very large D.

``tell`` reconstructs ``z`` from the given population exactly (each ``A_j`` is
a scaled identity plus a rank-one term and is inverted in closed form with the
Sherman-Morrison formula), so clipped or re-ordered populations are learned
from correctly.  Step size: cumulative step-size adaptation with the CMA-ES
constants ``c_sigma``, ``d_sigma`` (as in MA-ES).
"""

from __future__ import annotations

import math

import numpy as np
import tensorflow as tf

from tfevo.core import ConfigError, sanitize_fitness
from tfevo.registry import register
from tfevo.strategies.cma_es import _CMABase, cma_default_popsize

__all__ = ["LMMAES"]


@register("strategy", "lm_ma_es")
class LMMAES(_CMABase):
    """Limited-memory matrix adaptation ES for large dimensions.

    Args: those of :class:`~tfevo.strategies.CMAES` plus ``memory`` (number of
    direction vectors ``m``; default ``4 + floor(3 ln n)``).  Only positive
    recombination weights are used (``active`` is ignored).  State: ``sigma``,
    ``M`` ``[m, D]``, ``p_sigma``.

    Example:

    >>> es = LMMAES(num_dims=10000, sigma=0.3, seed=0)
    >>> x = es.ask()
    >>> es.tell(x, -tf.reduce_sum(x**2, 1))
    """

    _lazy_eigen = False

    def __init__(self, num_dims, popsize=None, sigma=1.0, init_params=None, seed=0, bounds=None,
                 memory=None, dtype="float64", tolfun=1e-11, tolx=1e-11, name=None):
        if int(num_dims) < 2:
            raise ConfigError(f"LM-MA-ES needs num_dims >= 2, got {num_dims}")
        self.memory = int(memory) if memory is not None else cma_default_popsize(int(num_dims))
        if self.memory < 1:
            raise ConfigError(f"memory must be >= 1, got {memory}")
        super().__init__(num_dims, popsize, sigma, init_params, seed, bounds, False, dtype, tolfun, tolx, name)

    def _learning_rates(self, n, mueff):
        j = np.arange(self.memory, dtype=np.float64)
        self.c_d = np.minimum(1.0 / (np.power(1.5, j) * n), 0.999)
        self.c_cm = np.minimum(self.popsize / (np.power(4.0, j) * n), 1.0)
        return 0.0, 0.0

    def _init_cov(self):
        self.M = tf.Variable(tf.zeros([self.memory, self.num_dims], self.dtype), trainable=False, name="M")

    def _reset_cov(self):
        self.M.assign(tf.zeros_like(self.M))

    def _active(self):
        t = self.generation - self.restart_generation
        return tf.cast(tf.range(self.memory, dtype=tf.int64) < t, self.dtype)

    def _sample_y(self, z):
        act = self._active()
        d = z
        for j in range(self.memory):
            c = self.c_d[j] * act[j]
            mj = self.M[j]
            d = (1.0 - c) * d + c * tf.linalg.matvec(d, mj)[:, None] * mj[None, :]
        return d

    def _inv_sqrt(self, d):
        act = self._active()
        z = d
        for j in reversed(range(self.memory)):
            c = self.c_d[j] * act[j]
            mj = self.M[j]
            a = 1.0 - c
            k = c / (a + c * tf.reduce_sum(tf.square(mj)))
            z = (z - k * tf.linalg.matvec(z, mj)[:, None] * mj[None, :]) / a
        return z

    def _tell_core(self, x, fitness):
        n, dt = self.num_dims, self.dtype
        fitness = sanitize_fitness(fitness)
        self._update_best(x, fitness)
        xd = x  # (in the state's dtype: tell's signature)
        row_ok = tf.reduce_all(tf.math.is_finite(xd), axis=1)
        fitness = tf.where(row_ok, fitness, -np.inf)
        any_finite = tf.reduce_any(tf.math.is_finite(fitness))
        order = tf.argsort(fitness, direction="DESCENDING", stable=True)
        f_sorted = tf.gather(fitness, order)
        sel = order[: self.mu]
        m, sigma = self._mean, self.sigma
        d = (tf.gather(xd, sel) - m[None, :]) / sigma
        d = tf.where(tf.gather(row_ok, sel)[:, None], d, tf.zeros_like(d))
        z = self._inv_sqrt(d)
        w = self.weights[: self.mu]
        d_w = tf.linalg.matvec(d, w, transpose_a=True)
        z_w = tf.linalg.matvec(z, w, transpose_a=True)
        cs = self.c_sigma
        p_sigma = (1.0 - cs) * self.p_sigma + math.sqrt(cs * (2.0 - cs) * self.mueff) * z_w
        cc = tf.constant(self.c_cm, dt)[:, None]
        M_new = (1.0 - cc) * self.M + tf.sqrt(self.mueff * cc * (2.0 - cc)) * z_w[None, :]
        m_new = m + sigma * d_w
        sigma_new = self._csa_sigma(sigma, tf.norm(p_sigma))
        keep = (any_finite & tf.math.is_finite(sigma_new) & tf.reduce_all(tf.math.is_finite(m_new))
                & tf.reduce_all(tf.math.is_finite(M_new)))
        self._mean.assign(tf.where(keep, m_new, m))
        self.p_sigma.assign(tf.where(keep, p_sigma, self.p_sigma))
        self.M.assign(tf.where(keep, M_new, self.M))
        self.sigma.assign(tf.where(keep, sigma_new, sigma))
        self._update_stop(f_sorted)
        self.generation.assign_add(1)
        return tf.constant(0)

    def _refresh(self):
        pass

    def _cov_diag(self):
        # diag of A A^T is not tracked; the stop criteria use the isotropic scale.
        return tf.ones([self.num_dims], self.dtype)

    def _axis_scales(self):
        return tf.ones([self.num_dims], self.dtype)

    def _axis_vector(self, i):
        return tf.one_hot(i, self.num_dims, dtype=self.dtype)
