"""The 24 BBOB functions as one TensorFlow program each (:mod:`tfevo.problems.bbob`).

BBOB's transformations (``T_osz``, ``T_asy``, the boundary penalty), the
function bodies ``f(x) - f_opt`` over a population ``x [P, D]``, and the one
shared ``tf.function`` per function, dimension and dtype that every instance
runs.
"""

from __future__ import annotations

import math

import numpy as np
import tensorflow as tf

__all__ = []


# -- transformations (TF) -------------------------------------------------------
def _t_osz(x):
    """BBOB's oscillation T_osz, elementwise (0 stays 0)."""
    xh = tf.where(x != 0, tf.math.log(tf.where(x != 0, tf.abs(x), tf.ones_like(x))), tf.zeros_like(x))
    pos = x > 0
    # constants built in x.dtype: float32 literals (7.9f, 3.1f) would shift the
    # oscillation by ~1e-8 relative in float64
    c1 = tf.where(pos, tf.constant(10.0, x.dtype), tf.constant(5.5, x.dtype))
    c2 = tf.where(pos, tf.constant(7.9, x.dtype), tf.constant(3.1, x.dtype))
    return tf.sign(x) * tf.exp(xh + 0.049 * (tf.sin(c1 * xh) + tf.sin(c2 * xh)))


def _t_asy(x, beta):
    """BBOB's asymmetry T_asy^beta on the last axis."""
    d = x.shape[-1]
    e = tf.constant(np.arange(d) / max(d - 1, 1), x.dtype)
    pos = x > 0
    xp = tf.where(pos, x, tf.ones_like(x))
    return tf.where(pos, tf.pow(xp, 1.0 + beta * e * tf.sqrt(xp)), x)


def _f_pen(x):
    """BBOB's boundary penalty ``sum max(0, |x_i| - 5)^2``."""
    return tf.reduce_sum(tf.square(tf.maximum(tf.abs(x) - 5.0, 0.0)), axis=-1)


def _round_half_up(x):
    """``floor(x + 0.5)``: COCO's rounding (ties go up, unlike ``tf.round``)."""
    return tf.floor(x + 0.5)


def _evaluate(fid, d, x, c):
    """``f(x) - f_opt`` of BBOB function ``fid`` for a population ``x [P, d]``.

    ``c`` holds the instance's constants (tensors from :meth:`BBOBFunction._derive`);
    every instance of one ``(fid, d, dtype)`` has the same structure, so one
    traced graph serves them all.
    """
    dt = x.dtype
    xo = c["xo"]

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
        f = tf.reduce_sum(c["w"] * tf.square(_t_osz(x - xo)), -1)
    elif fid == 3:
        f = rastr(c["lam"] * _t_asy(_t_osz(x - xo), 0.2))
    elif fid == 4:
        z = _t_osz(x - xo)
        base = c["brs"]
        s = tf.where((z > 0) & (c["odd"] > 0), 10.0 * base, base)
        f = rastr(s * z) + 100.0 * _f_pen(x)
    elif fid == 5:
        s = c["s"]
        z = tf.where(xo * x < 25.0, x, xo + tf.zeros_like(x))
        f = tf.reduce_sum(5.0 * tf.abs(s) - s * z, -1)
    elif fid == 6:
        z = rot(c["M"], x - xo)
        s = tf.where(z * xo > 0, K(1e4), K(1.0))
        f = tf.pow(_t_osz(tf.reduce_sum(s * tf.square(z), -1)), 0.9)
    elif fid == 7:
        zh = rot(c["M1"], x - xo)
        zt = tf.where(tf.abs(zh) > 0.5, _round_half_up(zh), _round_half_up(10.0 * zh) / 10.0)
        z = rot(c["M2"], zt)
        f = 0.1 * tf.maximum(tf.abs(zh[:, 0]) * 1e-4, tf.reduce_sum(c["w"] * tf.square(z), -1)) + _f_pen(x)
    elif fid == 8:
        f = rosen(c["scale"] * (x - xo) + 1.0)
    elif fid == 9:
        f = rosen(rot(c["M"], x) + 0.5)
    elif fid == 10:
        f = tf.reduce_sum(c["w"] * tf.square(_t_osz(rot(c["A"], x - xo))), -1)
    elif fid == 11:
        z = _t_osz(rot(c["A"], x - xo))
        f = 1e6 * tf.square(z[:, 0]) + tf.reduce_sum(tf.square(z[:, 1:]), -1)
    elif fid == 12:
        A = c["A"]
        z = rot(A, _t_asy(rot(A, x - xo), 0.5))
        f = tf.square(z[:, 0]) + 1e6 * tf.reduce_sum(tf.square(z[:, 1:]), -1)
    elif fid == 13:
        z = rot(c["M"], x - xo)
        f = tf.square(z[:, 0]) + 100.0 * tf.sqrt(tf.reduce_sum(tf.square(z[:, 1:]), -1))
    elif fid == 14:
        z = rot(c["A"], x - xo)
        f = tf.sqrt(tf.reduce_sum(tf.pow(tf.abs(z), c["e"]), -1))
    elif fid == 15:
        f = rastr(rot(c["M"], _t_asy(_t_osz(rot(c["A"], x - xo)), 0.2)))
    elif fid == 16:
        z = rot(c["M"], _t_osz(rot(c["A"], x - xo)))
        # sum_k 0.5^k cos(2 pi 3^k (z + 1/2)), k = 0..11, with one cosine per
        # coordinate: cos(3t) = 4 cos^3 t - 3 cos t gives the next term.  The
        # recurrence's rounding grows like 3^k (as does the rounding of the
        # direct argument 2 pi 3^k (z + 1/2)), damped by the 0.5^k weights.
        ck = tf.cos(2 * math.pi * (z + 0.5))
        s = ck
        for k in range(1, 12):
            ck = ck * (4.0 * tf.square(ck) - 3.0)
            s = s + 0.5**k * ck
        f0 = float(np.sum(0.5 ** np.arange(12) * np.cos(math.pi * 3.0 ** np.arange(12))))
        f = 10.0 * tf.pow(tf.reduce_sum(s, -1) / d - f0, 3) + 10.0 / d * _f_pen(x)
    elif fid in (17, 18):
        z = rot(c["M"], _t_asy(rot(c["A"], x - xo), 0.5))
        t = tf.square(z[:, :-1]) + tf.square(z[:, 1:])
        inner = tf.sqrt(tf.sqrt(t)) * (1.0 + tf.square(tf.sin(50.0 * tf.pow(t, 0.1))))
        f = tf.square(tf.reduce_sum(inner, -1) / (d - 1)) + 10.0 * _f_pen(x)
    elif fid == 19:
        z = rot(c["M"], x) + 0.5
        s = 100.0 * tf.square(tf.square(z[:, :-1]) - z[:, 1:]) + tf.square(1.0 - z[:, :-1])
        f = 10.0 + 10.0 * tf.reduce_sum(s / 4000.0 - tf.cos(s), -1) / (d - 1)
    elif fid == 20:
        sh = c["shift"]
        xh = 2.0 * c["signs"] * x
        zh = tf.concat([xh[:, :1], xh[:, 1:] + 0.25 * (xh[:, :-1] - sh[:-1])], 1)
        z = 100.0 * (c["lam"] * (zh - sh) + sh)
        pen = tf.reduce_sum(tf.square(tf.maximum(tf.abs(z) - 500.0, 0.0)), -1)
        f = 0.01 * (pen + 418.9828872724339 - tf.reduce_sum(z * tf.sin(tf.sqrt(tf.abs(z))), -1) / d)
    elif fid in (21, 22):
        # q_k = sum_j s_kj (xr_j - y_kj)^2 for all K peaks by two matmuls (no
        # [P, K, D] tensor) picks the highest peak; its q is then recomputed
        # directly, so the value keeps full precision next to the optimum.
        xr = rot(c["R"], x)
        q_all = (tf.matmul(tf.square(xr), c["scales"], transpose_b=True)
                 - 2.0 * tf.matmul(xr, c["sy"], transpose_b=True) + c["syy"])
        best = tf.argmax(tf.math.log(c["heights"]) - tf.maximum(q_all, 0.0) * (0.5 / d), axis=-1)
        diff = xr - tf.gather(c["peaks"], best)
        q = tf.reduce_sum(tf.gather(c["scales"], best) * tf.square(diff), -1)
        g = tf.gather(c["heights"], best) * tf.exp(q * (-0.5 / d))
        f = tf.square(_t_osz(10.0 - g)) + _f_pen(x)
    elif fid == 23:
        z = rot(c["M"], x - xo)
        j = K(2.0 ** np.arange(1, 33))
        t = z[:, :, None] * j
        s = tf.reduce_sum(tf.abs(t - _round_half_up(t)) / j, -1)
        i = K(np.arange(1, d + 1, dtype=float))
        prod = tf.reduce_prod(1.0 + i * s, -1)
        f = 10.0 / d**2 * (tf.pow(prod, 10.0 / d**1.2) - 1.0) + _f_pen(x)
    else:  # 24
        mu0, dd = 2.5, 1.0
        s = 1.0 - 0.5 / (math.sqrt(d + 20.0) - 4.1)
        mu1 = -math.sqrt((mu0**2 - dd) / s)
        xh = 2.0 * c["signs"] * x
        z = rot(c["M"], xh - mu0)
        f = (tf.minimum(tf.reduce_sum(tf.square(xh - mu0), -1), dd * d + s * tf.reduce_sum(tf.square(xh - mu1), -1))
             + 10.0 * (d - tf.reduce_sum(tf.cos(2 * math.pi * z), -1)) + 1e4 * _f_pen(x))
    return f



_COMPILED: dict = {}


def _compiled(fid: int, d: int, dtype, consts: dict, jit_compile: bool = False):
    """The shared ``tf.function`` of ``(fid, d, dtype, jit_compile)``.

    ``(x, consts, f_opt) -> (f, f as float32, -(f - f_opt) as float32)``.

    The input signature is fixed (``x [None, d]``, the constants' shapes), so
    every population size and every instance of a function and dimension run
    the one graph traced on first use (with XLA: compiled once per population
    size).
    """
    key = (fid, d, tf.as_dtype(dtype).name, jit_compile)
    fn = _COMPILED.get(key)
    if fn is None:
        def run(x, c, f_opt):
            g = _evaluate(fid, d, x, c)  # f - f_opt
            f = g + f_opt
            return f, tf.cast(f, tf.float32), tf.cast(-g, tf.float32)

        run.__name__ = f"bbob_f{fid}_d{d}"
        signature = (tf.TensorSpec([None, d], dtype, name="x"),
                     {k: tf.TensorSpec(v.shape, dtype, name=k) for k, v in consts.items()},
                     tf.TensorSpec([], dtype, name="f_opt"))
        fn = _COMPILED[key] = tf.function(run, input_signature=signature, jit_compile=jit_compile)
    return fn
