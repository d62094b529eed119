"""The CMA-ES update equations, one named function each.

Equation numbers are those of Hansen, "The CMA Evolution Strategy: A
Tutorial" (arXiv:1604.00772, 2016): the algorithm summary (38)-(47) and the
default parameters of its Table 1 (48)-(58) in the 2016 version, except the
step-size rates, ``c_1``, ``c_mu`` and the ``h_sigma`` test, which are pycma 4's
(``c_sigma``, and a damping that grows faster with ``mu_eff``: the tutorial's lets
large IPOP populations shrink sigma too fast).  The constants are Python floats
computed once per population size; the updates are tensor expressions traced
into the strategy's ``tell``.  Every CMA variant of :mod:`tfevo.strategies`
(full eigen, Cholesky, diagonal) runs these same updates; they differ only in
how the covariance is stored (:mod:`tfevo.strategies.cma_models`).
"""

from __future__ import annotations

import math

import numpy as np
import tensorflow as tf


# -- default strategy parameters (Table 1) ---------------------------------------------------
def default_popsize(n: int) -> int:
    """Eq. (48): ``lambda = 4 + floor(3 ln n)``."""
    return 4 + int(math.floor(3 * math.log(int(n))))


def raw_weights(lam: int) -> np.ndarray:
    """Eq. (49): ``w'_i = ln((lambda + 1) / 2) - ln i``, i = 1..lambda (the first mu positive)."""
    return math.log((lam + 1) / 2.0) - np.log(np.arange(1, lam + 1, dtype=np.float64))


def effective_mass(w: np.ndarray) -> float:
    """``mu_eff = (sum w)^2 / sum w^2`` of the positive (or negative) weights (Sect. 2, Eq. 8)."""
    return float(w.sum() ** 2 / (w**2).sum())


def step_size_rates(n: int, mueff: float) -> tuple[float, float]:
    """pycma 4's cumulation and damping of the step size (close to Eq. 54-55):
    ``c_sigma = (mu_eff + 2) / (n + mu_eff + 3)`` and
    ``d_sigma = 1 + 2 max(0, a_n sqrt((mu_eff - 1) / (n + 1)) - 1) + c_sigma`` with
    ``a_n = max(1, 3 (1 - 2^(-n / 9)))``: large populations (IPOP's restarts) damp
    the step-size change more than the tutorial's ``a_n = 1``, ``n + mu_eff + 5``."""
    c_sigma = min(0.5, (mueff + 2.0) / (n + mueff + 3.0))
    a_n = max(1.0, 3.0 * (1.0 - 0.5 ** (n / 9.0)))
    d_sigma = 1.0 + 2.0 * max(0.0, a_n * math.sqrt((mueff - 1.0) / (n + 1.0)) - 1.0) + c_sigma
    return c_sigma, d_sigma


def path_rate(n: int, mueff: float) -> float:
    """Eq. (56): ``c_c = (4 + mu_eff / n) / (n + 4 + 2 mu_eff / n)``."""
    return (4.0 + mueff / n) / (n + 4.0 + 2.0 * mueff / n)


def covariance_rates(n: int, mueff: float, popsize: int | None = None) -> tuple[float, float]:
    """Eq. (57)-(58) as pycma 4 computes them (``alpha_cov = 2``):
    ``c_1 = min(1, lambda / 6) 2 / ((n + 1.3)^2 + mu_eff)`` and
    ``c_mu = min(1 - c_1, 2 (0.25 + mu_eff - 2 + 1 / mu_eff) / ((n + 2)^2 + mu_eff))``
    (pycma's rank-mu offset 0.25; its factor ``min(1, lambda / 6)`` only matters below
    ``lambda = 6``; ``popsize=None`` leaves it out)."""
    fac = 1.0 if popsize is None else min(1.0, popsize / 6.0)
    c1 = fac * 2.0 / ((n + 1.3) ** 2 + mueff)
    cmu = min(1.0 - c1, 2.0 * (0.25 + mueff - 2.0 + 1.0 / mueff) / ((n + 2.0) ** 2 + mueff))
    return c1, cmu


def recombination_weights(wp: np.ndarray, mu: int, n: int, c1: float, cmu: float, active: bool) -> np.ndarray:
    """Eq. (50)-(53): positive weights normalised to sum 1; with ``active``, the negative ones
    scaled to ``min(alpha_mu, alpha_mueff, alpha_posdef) / sum |w'^-|`` (else zero)."""
    pos, neg = wp[:mu], wp[mu:]
    w = np.zeros(len(wp))
    w[:mu] = pos / pos.sum()
    if active and len(neg) and abs(neg.sum()) > 0:
        mueff = pos.sum() ** 2 / (pos**2).sum()
        mueff_neg = neg.sum() ** 2 / max((neg**2).sum(), 1e-300)
        alpha_mu = 1.0 + c1 / cmu  # Eq. (50)
        alpha_mueff = 1.0 + 2.0 * mueff_neg / (mueff + 2.0)  # Eq. (51)
        alpha_posdef = (1.0 - c1 - cmu) / (n * cmu)  # Eq. (52)
        w[mu:] = min(alpha_mu, alpha_mueff, alpha_posdef) * neg / np.abs(neg).sum()  # Eq. (53)
    return w


def expected_norm(n: int) -> float:
    """``E||N(0, I_n)||`` as pycma's step-size update uses it: exact,
    ``sqrt(2) Gamma((n + 1) / 2) / Gamma(n / 2)``, up to ``n = 100``, above that
    ``sqrt(n) (1 - 1 / (4n) + 1 / (32 n^2))`` (within 1e-9 of it there).  The tutorial's
    ``1 / (21 n^2)`` series is 3e-4 too large at ``n = 6``."""
    n = int(n)
    if n <= 100:
        return math.sqrt(2.0) * math.exp(math.lgamma((n + 1) / 2.0) - math.lgamma(n / 2.0))
    return math.sqrt(n) * (1.0 - 1.0 / (4.0 * n) + 1.0 / (32.0 * n * n))


def lazy_gap(n: int, c1: float, cmu: float) -> int:
    """Generations between two factorisations of C: ``max(1, floor(1 / (10 n (c_1 + c_mu))))``
    (Appendix B.2, the same default as pycma)."""
    return max(1, int(math.floor(1.0 / (10.0 * n * max(c1 + cmu, 1e-30)))))


# -- one generation (Eq. 41-47) ---------------------------------------------------------------
def weighted_step(y_sorted, w_pos):
    """Eq. (41): ``<y>_w = sum_{i <= mu} w_i y_{i:lambda}``."""
    return tf.linalg.matvec(y_sorted, w_pos, transpose_a=True)


def move_mean(m, sigma, y_w):
    """Eq. (42) with ``c_m = 1``: ``m + sigma <y>_w``."""
    return m + sigma * y_w


def sigma_path(p_sigma, c_sigma: float, mueff: float, z_w):
    """Eq. (43): ``(1 - c_sigma) p_sigma + sqrt(c_sigma (2 - c_sigma) mu_eff) C^{-1/2} <y>_w``
    (``z_w = C^{-1/2} <y>_w``, computed by the covariance model)."""
    return (1.0 - c_sigma) * p_sigma + math.sqrt(c_sigma * (2.0 - c_sigma) * mueff) * z_w


def step_size(sigma, ps_norm, c_sigma: float, d_sigma: float, chi_n: float):
    """Eq. (44): ``sigma exp(c_sigma / d_sigma (||p_sigma|| / E||N(0, I)|| - 1))``, the exponent
    capped at 1 (as pycma) so that one generation multiplies sigma by at most e."""
    log_step = (c_sigma / d_sigma) * (ps_norm / chi_n - 1.0)
    return sigma * tf.exp(tf.minimum(log_step, 1.0))


def stall(ps_norm, c_sigma: float, generations, n: int, chi_n: float, dtype):
    """``h_sigma`` of Eq. (45) in pycma's form: 1 if
    ``||p_sigma||^2 / (1 - (1 - c_sigma)^(2 g)) / n - 1 < 1 + 4 / (n + 1)``
    (``g`` counts this generation, from 1), else 0: stalls ``p_c`` while sigma grows
    fast.  (The tutorial's ``||p_sigma|| / sqrt(...) < (1.4 + 2 / (n + 1)) E||N(0, I)||``
    is close to it; ``chi_n`` is kept in the signature for it.)"""
    g1 = tf.cast(generations, dtype)
    sq = tf.square(ps_norm) / (1.0 - tf.pow(tf.constant(1.0 - c_sigma, dtype), 2.0 * g1))
    return tf.cast(sq / n - 1.0 < 1.0 + 4.0 / (n + 1.0), dtype)


def cov_path(p_c, c_c: float, h_sigma, mueff: float, y_w):
    """Eq. (45): ``(1 - c_c) p_c + h_sigma sqrt(c_c (2 - c_c) mu_eff) <y>_w``."""
    return (1.0 - c_c) * p_c + h_sigma * math.sqrt(c_c * (2.0 - c_c) * mueff) * y_w


def active_weights(w, mu: int, sq_neg, n: int, dtype):
    """Eq. (46): the negative weights times ``n / ||C^{-1/2} y_{i:lambda}||^2``
    (``sq_neg``: those squared norms of rows mu+1..lambda)."""
    scale = n / tf.maximum(sq_neg, tf.constant(1e-30, dtype))
    return tf.concat([w[:mu], w[mu:] * scale], 0)


def cov_decay(h_sigma, c_c: float, c1: float, cmu: float, weight_sum: float):
    """The factor of ``C`` in Eq. (47): ``1 + c_1 delta(h_sigma) - c_1 - c_mu sum_j w_j``
    with ``delta(h_sigma) = (1 - h_sigma) c_c (2 - c_c)``."""
    delta_h = (1.0 - h_sigma) * c_c * (2.0 - c_c)
    return 1.0 + c1 * delta_h - c1 - cmu * weight_sum


def rank_one_mu_rows(y_sorted, p_c, w_eff, c1: float, cmu: float, dtype):
    """The other two terms of Eq. (47) as one weighted sum of outer products:
    ``c_1 p_c p_c^T + c_mu sum_i w_i y_i y_i^T = Y^T diag(v) Y`` with ``Y = [y; p_c]``.
    Returns ``(Y, v)``; the models apply it without forming the ``[n, n]`` term."""
    ys = tf.concat([y_sorted, p_c[None, :]], axis=0)
    v = tf.concat([cmu * w_eff, tf.constant([c1], dtype)], axis=0)
    return ys, v
