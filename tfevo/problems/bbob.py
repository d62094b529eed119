"""The 24 noiseless BBOB functions (Hansen, Finck, Ros & Auger 2009) in TensorFlow.

Every function maps a population ``x [P, D] -> f [P]`` in one tensor program
(minimisation values, ``f_opt`` included).  Instances (``x_opt``, ``f_opt``,
rotations ``R``/``Q``, sign vectors, Gallagher peaks) are drawn with NumPy from
``seed``: the same ``(fid, dim, seed)`` always gives the same instance.  They
follow the distributions of the BBOB definitions (``x_opt`` uniform in
``[-4, 4]^D`` on a 1e-4 grid, Cauchy-distributed ``f_opt`` rounded to 1e-2 and
clipped to +-1000, Haar-random orthogonal ``R`` and ``Q``) but are **not** COCO's
instance generator: values differ from COCO's instance numbers.

Use :func:`make`::

    p = bbob.make(fid=8, dim=10, seed=1)
    f = p(x)            # float32 [P], minimisation value incl. p.f_opt
    fit = p.fitness(x)  # -(f - f_opt) in float32: the maximising seam

Internally the evaluation runs in float64 (``dtype`` argument), so
``f - f_opt`` keeps precision down to 1e-12 although ``f_opt`` is ~100.
Each function is registered as problem ``bbob_f<id>``; plain ``sphere``,
``rosenbrock`` and ``rastrigin`` (optimum at 0 / 1 / 0, value 0) are provided too.
"""

from __future__ import annotations

import math

import numpy as np
import tensorflow as tf

from tfevo.core import ConfigError, ShapeError
from tfevo.registry import register

__all__ = ["BBOBFunction", "make", "sphere", "rosenbrock", "rastrigin", "NAMES"]

NAMES = {
    1: "sphere", 2: "ellipsoid_separable", 3: "rastrigin_separable", 4: "bueche_rastrigin",
    5: "linear_slope", 6: "attractive_sector", 7: "step_ellipsoid", 8: "rosenbrock",
    9: "rosenbrock_rotated", 10: "ellipsoid", 11: "discus", 12: "bent_cigar",
    13: "sharp_ridge", 14: "different_powers", 15: "rastrigin", 16: "weierstrass",
    17: "schaffers_f7", 18: "schaffers_f7_ill", 19: "griewank_rosenbrock", 20: "schwefel",
    21: "gallagher_101", 22: "gallagher_21", 23: "katsuura", 24: "lunacek_bi_rastrigin",
}


# -- plain test functions ----------------------------------------------------
def sphere(x):
    """sum(x^2) per row: ``[P, D] -> [P]`` (minimum 0 at 0)."""
    return tf.reduce_sum(tf.square(x), axis=-1)


def rosenbrock(x):
    """Rosenbrock's banana per row (minimum 0 at all ones)."""
    return tf.reduce_sum(100.0 * tf.square(x[..., 1:] - tf.square(x[..., :-1])) + tf.square(1.0 - x[..., :-1]), axis=-1)


def rastrigin(x):
    """Rastrigin per row: ``10 D + sum(x^2 - 10 cos(2 pi x))`` (minimum 0 at 0)."""
    d = tf.cast(tf.shape(x)[-1], x.dtype)
    return 10.0 * d + tf.reduce_sum(tf.square(x) - 10.0 * tf.cos(2.0 * math.pi * x), axis=-1)


# -- transformations -----------------------------------------------------------
def _t_osz(x):
    xh = tf.where(x != 0, tf.math.log(tf.where(x != 0, tf.abs(x), tf.ones_like(x))), tf.zeros_like(x))
    c1 = tf.where(x > 0, 10.0, 5.5)
    c2 = tf.where(x > 0, 7.9, 3.1)
    c1, c2 = tf.cast(c1, x.dtype), tf.cast(c2, x.dtype)
    return tf.sign(x) * tf.exp(xh + 0.049 * (tf.sin(c1 * xh) + tf.sin(c2 * xh)))


def _t_asy(x, beta):
    d = x.shape[-1]
    e = np.arange(d) / max(d - 1, 1)
    expo = 1.0 + beta * tf.constant(e, x.dtype) * tf.sqrt(tf.maximum(x, tf.zeros_like(x)))
    return tf.where(x > 0, tf.pow(tf.maximum(x, 1e-300 if x.dtype == tf.float64 else 1e-30), expo), x)


def _lam(alpha, d):
    return alpha ** (0.5 * np.arange(d) / max(d - 1, 1))


def _f_pen(x):
    return tf.reduce_sum(tf.square(tf.maximum(tf.abs(x) - 5.0, 0.0)), axis=-1)


def _rot(rng, d):
    q, r = np.linalg.qr(rng.standard_normal((d, d)))
    return q * np.sign(np.diag(r))[None, :]


class BBOBFunction:
    """One instance of a BBOB function: ``f(x [P, D]) -> [P]`` (minimisation).

    Attributes:
      fid, dim, seed, name: identity of the instance.
      x_opt: float64 numpy ``[D]``, the optimum.
      f_opt: float, the optimal value.

    Calling the object returns ``f(x)`` as float32; :meth:`fitness` returns
    ``-(f(x) - f_opt)`` (higher is better, 0 at the optimum); :meth:`value`
    returns ``f(x)`` in the internal dtype (float64 by default).
    """

    def __init__(self, fid: int, dim: int, seed: int = 0, dtype="float64"):
        fid, dim = int(fid), int(dim)
        if fid not in NAMES:
            raise ConfigError(f"BBOB function id must be in 1..24, got {fid}")
        if dim < 2:
            raise ConfigError(f"BBOB functions need dim >= 2, got {dim}")
        self.fid, self.dim, self.seed, self.name = fid, dim, int(seed), NAMES[fid]
        self.dtype = tf.as_dtype(dtype)
        rng = np.random.default_rng([fid, dim, int(seed)])
        d = dim
        x_opt = 8.0 * np.floor(1e4 * rng.random(d)) / 1e4 - 4.0
        x_opt[x_opt == 0] = -1e-5
        f_opt = float(np.clip(np.round(100.0 * rng.standard_cauchy()) / 100.0, -1000.0, 1000.0))
        R, Q = _rot(rng, d), _rot(rng, d)
        signs = np.where(rng.random(d) < 0.5, -1.0, 1.0)
        self._c = {}
        scale = max(1.0, math.sqrt(d) / 8.0)
        if fid == 4:
            x_opt[::2] = np.abs(x_opt[::2])
        elif fid == 5:
            x_opt = 5.0 * signs
        elif fid == 8:
            x_opt = 0.75 * x_opt
        elif fid in (9, 19):
            x_opt = R.T @ (0.5 * np.ones(d)) / scale
        elif fid == 20:
            x_opt = 4.2096874633 / 2.0 * signs
        elif fid == 24:
            x_opt = 2.5 / 2.0 * signs
        elif fid in (21, 22):
            npk = 101 if fid == 21 else 21
            y = rng.uniform(-4.9, 4.9, size=(npk, d))
            y[0] = rng.uniform(-3.92, 3.92, size=d) if fid == 22 else rng.uniform(-4.0, 4.0, size=d)
            x_opt = y[0].copy()
            w = np.empty(npk)
            w[0] = 10.0
            w[1:] = 1.1 + 8.0 * np.arange(npk - 1) / (npk - 2)
            a0 = 1000.0 if fid == 21 else 1000.0**2
            alphas = np.empty(npk)
            alphas[0] = a0
            alphas[1:] = rng.permutation(1000.0 ** (2.0 * np.arange(npk - 1) / (npk - 2)))
            cdiag = np.stack([rng.permutation(_lam(a, d)) / a**0.25 for a in alphas])
            self._c.update(y=y, w=w, cdiag=cdiag)
        self.x_opt = x_opt
        self.f_opt = f_opt
        self._c.update(x_opt=x_opt, R=R, Q=Q, signs=signs, scale=scale)
        self._consts = {k: tf.constant(v, self.dtype) if isinstance(v, np.ndarray) else v for k, v in self._c.items()}
        self._fn = tf.function(self._eval, jit_compile=False, reduce_retracing=True)

    # -- public -----------------------------------------------------------------
    def value(self, x) -> tf.Tensor:
        """f(x) in the internal dtype, x ``[P, D]`` (or ``[D]``)."""
        x = tf.convert_to_tensor(x)
        single = x.shape.rank == 1
        if single:
            x = x[None]
        if x.shape.rank != 2 or x.shape[-1] != self.dim:
            raise ShapeError(f"x must have shape [P, {self.dim}], got {x.shape.as_list()}")
        f = self._fn(tf.cast(x, self.dtype))
        return f[0] if single else f

    def __call__(self, x) -> tf.Tensor:
        return tf.cast(self.value(x), tf.float32)

    def fitness(self, x) -> tf.Tensor:
        """``-(f(x) - f_opt)`` as float32 ``[P]``: higher is better, 0 at optimum."""
        return tf.cast(-(self.value(x) - self.f_opt), tf.float32)

    def __repr__(self):
        return f"BBOBFunction(f{self.fid} {self.name}, dim={self.dim}, seed={self.seed})"

    # -- the functions -------------------------------------------------------------
    def _eval(self, x):
        c, d, dt = self._consts, self.dim, self.dtype
        fid = self.fid
        R, Q, xo = c.get("R"), c.get("Q"), c.get("x_opt")
        ar = np.arange(d) / (d - 1)

        def K(v):
            return tf.constant(v, dt)

        def rot(M, v):  # rows: v @ M^T
            return tf.matmul(v, M, transpose_b=True)

        def rastr(z):
            return 10.0 * (d - tf.reduce_sum(tf.cos(2 * math.pi * z), -1)) + tf.reduce_sum(tf.square(z), -1)

        def rosen(z):
            return tf.reduce_sum(100.0 * tf.square(tf.square(z[:, :-1]) - z[:, 1:]) + tf.square(z[:, :-1] - 1.0), -1)

        if fid == 1:
            f = tf.reduce_sum(tf.square(x - xo), -1)
        elif fid == 2:
            z = _t_osz(x - xo)
            f = tf.reduce_sum(K(10.0 ** (6 * ar)) * tf.square(z), -1)
        elif fid == 3:
            z = K(_lam(10.0, d)) * _t_asy(_t_osz(x - xo), 0.2)
            f = rastr(z)
        elif fid == 4:
            z = _t_osz(x - xo)
            base = K(10.0 ** (0.5 * ar))
            odd = K((np.arange(d) % 2 == 0).astype(float))  # 1-based odd indices
            s = tf.where((z > 0) & (odd > 0), 10.0 * base, base)
            z = s * z
            f = rastr(z) + 100.0 * _f_pen(x)
        elif fid == 5:
            z = tf.where(xo * x < 25.0, x, xo + tf.zeros_like(x))
            s = K(np.sign(self.x_opt) * 10.0 ** ar)
            f = tf.reduce_sum(5.0 * tf.abs(s) - s * z, -1)
        elif fid == 6:
            z = rot(Q, K(_lam(10.0, d)) * rot(R, x - xo))
            s = tf.where(z * xo > 0, K(100.0), K(1.0))
            f = tf.pow(_t_osz(tf.reduce_sum(tf.square(s * z), -1)), 0.9)
        elif fid == 7:
            zh = K(_lam(10.0, d)) * rot(R, x - xo)
            zt = tf.where(tf.abs(zh) > 0.5, tf.floor(0.5 + zh), tf.floor(0.5 + 10.0 * zh) / 10.0)
            z = rot(Q, zt)
            f = 0.1 * tf.maximum(tf.abs(zh[:, 0]) / 1e4, tf.reduce_sum(K(10.0 ** (2 * ar)) * tf.square(z), -1)) + _f_pen(x)
        elif fid == 8:
            f = rosen(c["scale"] * (x - xo) + 1.0)
        elif fid == 9:
            f = rosen(c["scale"] * rot(R, x) + 0.5)
        elif fid == 10:
            z = _t_osz(rot(R, x - xo))
            f = tf.reduce_sum(K(10.0 ** (6 * ar)) * tf.square(z), -1)
        elif fid == 11:
            z = _t_osz(rot(R, x - xo))
            f = 1e6 * tf.square(z[:, 0]) + tf.reduce_sum(tf.square(z[:, 1:]), -1)
        elif fid == 12:
            z = rot(R, _t_asy(rot(R, x - xo), 0.5))
            f = tf.square(z[:, 0]) + 1e6 * tf.reduce_sum(tf.square(z[:, 1:]), -1)
        elif fid == 13:
            z = rot(Q, K(_lam(10.0, d)) * rot(R, x - xo))
            f = tf.square(z[:, 0]) + 100.0 * tf.sqrt(tf.reduce_sum(tf.square(z[:, 1:]), -1))
        elif fid == 14:
            z = rot(R, x - xo)
            f = tf.sqrt(tf.reduce_sum(tf.pow(tf.abs(z), K(2.0 + 4.0 * ar)), -1))
        elif fid == 15:
            z = rot(R, K(_lam(10.0, d)) * rot(Q, _t_asy(_t_osz(rot(R, x - xo)), 0.2)))
            f = rastr(z)
        elif fid == 16:
            z = rot(R, K(_lam(0.01, d)) * rot(Q, _t_osz(rot(R, x - xo))))
            k = np.arange(12)
            a, b = K(0.5**k), K(3.0**k)
            f0 = float(np.sum(0.5**k * np.cos(math.pi * 3.0**k)))
            s = tf.reduce_sum(a * tf.cos(2 * math.pi * b * (z[:, :, None] + 0.5)), -1)
            f = 10.0 * tf.pow(tf.reduce_sum(s, -1) / d - f0, 3) + 10.0 / d * _f_pen(x)
        elif fid in (17, 18):
            cond = 10.0 if fid == 17 else 1000.0
            z = K(_lam(cond, d)) * rot(Q, _t_asy(rot(R, x - xo), 0.5))
            s = tf.sqrt(tf.square(z[:, :-1]) + tf.square(z[:, 1:]))
            inner = tf.sqrt(s) + tf.sqrt(s) * tf.square(tf.sin(50.0 * tf.pow(s, 0.2)))
            f = tf.square(tf.reduce_sum(inner, -1) / (d - 1)) + 10.0 * _f_pen(x)
        elif fid == 19:
            z = c["scale"] * rot(R, x) + 0.5
            s = 100.0 * tf.square(tf.square(z[:, :-1]) - z[:, 1:]) + tf.square(z[:, :-1] - 1.0)
            f = 10.0 / (d - 1) * tf.reduce_sum(s / 4000.0 - tf.cos(s), -1) + 10.0
        elif fid == 20:
            sg = c["signs"]
            xh = 2.0 * sg * x
            ax = K(2.0 * np.abs(self.x_opt))
            zh = tf.concat([xh[:, :1], xh[:, 1:] + 0.25 * (xh[:, :-1] - ax[:-1])], 1)
            z = 100.0 * (K(_lam(10.0, d)) * (zh - ax) + ax)
            f = (-tf.reduce_sum(z * tf.sin(tf.sqrt(tf.abs(z))), -1) / (100.0 * d) + 4.189828872724339
                 + 100.0 * _f_pen(z / 100.0))
        elif fid in (21, 22):
            y, w, cd = c["y"], c["w"], c["cdiag"]
            diff = rot(R, x)[:, None, :] - rot(R, y)[None, :, :]  # [P, K, D]
            q = tf.reduce_sum(cd[None] * tf.square(diff), -1)
            g = tf.reduce_max(w[None] * tf.exp(-q / (2.0 * d)), -1)
            f = tf.square(_t_osz(10.0 - g)) + _f_pen(x)
        elif fid == 23:
            z = rot(Q, K(_lam(100.0, d)) * rot(R, x - xo))
            j = K(2.0 ** np.arange(1, 33))
            t = z[:, :, None] * j
            s = tf.reduce_sum(tf.abs(t - tf.round(t)) / j, -1)
            i = K(np.arange(1, d + 1, dtype=float))
            prod = tf.reduce_prod(tf.pow(1.0 + i * s, 10.0 / d**1.2), -1)
            f = 10.0 / d**2 * prod - 10.0 / d**2 + _f_pen(x)
        else:  # 24
            mu0, dd = 2.5, 1.0
            s = 1.0 - 1.0 / (2.0 * math.sqrt(d + 20.0) - 8.2)
            mu1 = -math.sqrt((mu0**2 - dd) / s)
            xh = 2.0 * c["signs"] * x
            z = rot(Q, K(_lam(100.0, d)) * rot(R, xh - mu0))
            f = (tf.minimum(tf.reduce_sum(tf.square(xh - mu0), -1), dd * d + s * tf.reduce_sum(tf.square(xh - mu1), -1))
                 + 10.0 * (d - tf.reduce_sum(tf.cos(2 * math.pi * z), -1)) + 1e4 * _f_pen(x))
        return f + self.f_opt


def make(fid: int, dim: int, seed: int = 0, dtype="float64") -> BBOBFunction:
    """Returns BBOB function ``fid`` (1..24) in dimension ``dim``, instance ``seed``."""
    return BBOBFunction(fid, dim, seed, dtype)


def _register(fid):
    def factory(dim: int, seed: int = 0, dtype="float64"):
        return BBOBFunction(fid, dim, seed, dtype)

    factory.__doc__ = f"BBOB f{fid} ({NAMES[fid]}): make(dim, seed) -> BBOBFunction."
    factory.__name__ = f"bbob_f{fid}"
    register("problem", f"bbob_f{fid}")(factory)


for _fid in NAMES:
    _register(_fid)
