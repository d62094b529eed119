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

import numpy as np
import tensorflow as tf

from tfevo.core import ConfigError, sanitize_fitness
from tfevo.registry import register
from tfevo.strategies import cma_updates as eq
from tfevo.strategies.cma_base import CMABase
from tfevo.strategies.cma_models import LimitedMemoryTransform
from tfevo.strategies.cma_stop import update_stop_flags

__all__ = ["LMMAES"]


@register("strategy", "lm_ma_es")
class LMMAES(CMABase):
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

    _model_class = LimitedMemoryTransform

    def __init__(self, num_dims, popsize=None, sigma=1.0, init_params=None, seed=0, bounds=None,
                 memory=None, dtype="float64", tolfun=1e-11, tolx=1e-11, name=None):
        if int(num_dims) < 2:
            raise ConfigError(f"num_dims must be >= 2 for LM-MA-ES, got {num_dims}")
        self.memory = int(memory) if memory is not None else eq.default_popsize(int(num_dims))
        if self.memory < 1:
            raise ConfigError(f"memory must be >= 1, got {memory}")
        super().__init__(num_dims, popsize, sigma, init_params, seed, bounds, False, dtype, tolfun, tolx, name)

    def _tell_core(self, x, fitness):
        dt = self.dtype
        fitness = sanitize_fitness(fitness)
        if self.bounds is None:  # (with bounds, tell recorded it from the evaluated rows)
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
        z = self._model.whiten(d)
        w = self.weights[: self.mu]
        d_w = eq.weighted_step(d, w)  # Eq. (41), and its z-space twin
        z_w = eq.weighted_step(z, w)
        p_sigma = eq.sigma_path(self.p_sigma, self.c_sigma, self.mueff, z_w)  # Eq. (43)
        # MA-ES: the direction vectors follow the z-space path (instead of Eq. 45-47)
        cc = tf.constant(self.c_cm, dt)[:, None]
        M_new = (1.0 - cc) * self.M + tf.sqrt(self.mueff * cc * (2.0 - cc)) * z_w[None, :]
        m_new = eq.move_mean(m, sigma, d_w)  # Eq. (42)
        sigma_new = eq.step_size(sigma, tf.norm(p_sigma), self.c_sigma, self.d_sigma, self.chi_n)  # Eq. (44)
        keep = (any_finite & tf.math.is_finite(sigma_new) & tf.reduce_all(tf.math.is_finite(m_new))
                & tf.reduce_all(tf.math.is_finite(M_new)))
        self._mean.assign(tf.where(keep, m_new, m))
        self.p_sigma.assign(tf.where(keep, p_sigma, self.p_sigma))
        self.M.assign(tf.where(keep, M_new, self.M))
        self.sigma.assign(tf.where(keep, sigma_new, sigma))
        update_stop_flags(self, f_sorted, order)
        self.generation.assign_add(1)
        return tf.constant(0)
