"""The 24 noiseless BBOB functions (Hansen, Finck, Ros & Auger 2009) in TensorFlow.

Every function maps a population ``x [P, D] -> f [P]`` in one tensor program
(minimisation values, ``f_opt`` included).  An instance (``x_opt``, ``f_opt``,
rotations, sign vectors, Gallagher peaks) comes from one of two sources:

* ``instance=i`` -- **COCO's instance i** of the ``bbob`` suite.  The instance
  data are rebuilt with COCO's legacy generators (the Park-Miller/Bays-Durham
  uniform stream seeded with ``fid + 10000 * i``, its Box-Muller Gaussians,
  Gram-Schmidt rotations, the per-function special cases), so
  ``make(fid, dim, instance=i)(x)`` equals the value COCO's ``bbob`` suite
  (``cocoex``) gives for function ``fid``, dimension ``dim``, instance ``i``
  (checked to ~1e-12 relative in the tests).  COCO itself builds instances for
  ``dim <= 54``; the same generator is continued here for any ``dim >= 2``.
* ``seed=s`` (the default, ``seed=0``) -- a tfevo-specific instance drawn with
  NumPy from ``(fid, dim, seed)``, with the same distributions as BBOB's
  (``x_opt`` uniform in ``[-4, 4]^D`` on a 1e-4 grid, Cauchy-like ``f_opt``
  rounded to 1e-2 and clipped to +-1000, Haar-random rotations) but **not**
  COCO's numbers.  Kept for backward compatibility.

Use :func:`make`::

    p = bbob.make(fid=8, dim=10, instance=1)   # COCO's f8, 10-D, instance 1
    f = p(x)            # float32 [P], minimisation value incl. p.f_opt
    fit = p.fitness(x)  # -(f - f_opt) in float32: the maximising seam

Internally the evaluation runs in float64 (``dtype`` argument), so
``f - f_opt`` keeps precision down to 1e-12 although ``f_opt`` is ~100.
Each function is registered as problem ``bbob_f<id>``; plain ``sphere``,
``rosenbrock`` and ``rastrigin`` (optimum at 0 / 1 / 0, value 0) are provided too.
"""

from __future__ import annotations

import math
import numbers

import numpy as np
import tensorflow as tf

from tfevo.core import ConfigError, ShapeError
from tfevo.registry import register

__all__ = ["BBOBFunction", "make", "sphere", "rosenbrock", "rastrigin", "NAMES", "MAX_INSTANCE"]

NAMES = {
    1: "sphere", 2: "ellipsoid_separable", 3: "rastrigin_separable", 4: "bueche_rastrigin",
    5: "linear_slope", 6: "attractive_sector", 7: "step_ellipsoid", 8: "rosenbrock",
    9: "rosenbrock_rotated", 10: "ellipsoid", 11: "discus", 12: "bent_cigar",
    13: "sharp_ridge", 14: "different_powers", 15: "rastrigin", 16: "weierstrass",
    17: "schaffers_f7", 18: "schaffers_f7_ill", 19: "griewank_rosenbrock", 20: "schwefel",
    21: "gallagher_101", 22: "gallagher_21", 23: "katsuura", 24: "lunacek_bi_rastrigin",
}

#: Largest accepted COCO instance number (keeps every legacy seed below 2**31).
MAX_INSTANCE = 100_000

# Schwefel's optimum: COCO shifts with the first constant and reports the second
# (times 1/2, with the instance's signs) as the best parameter.
_SCHWEFEL_SHIFT = 4.2096874637
_SCHWEFEL_BEST = 4.2096874633


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


# -- COCO's legacy instance generators (NumPy; run once per instance) ----------
_LCG_MOD = 2147483647  # 2^31 - 1, multiplier 16807 (Park & Miller)
_LCG_MUL = 16807


def _lcg_states(seed: int, n: int) -> np.ndarray:
    """The first ``n`` states after ``seed`` of the minimal-standard LCG.

    ``s_k = seed * 16807^k mod (2^31 - 1)`` for ``k = 1..n``, computed by block
    doubling in int64 (each product stays below 2^62) instead of a Python loop.
    """
    out = np.empty(n, np.int64)
    out[0] = seed * _LCG_MUL % _LCG_MOD
    done, step = 1, _LCG_MUL  # step = 16807^done mod m
    while done < n:
        k = min(done, n - done)
        out[done:done + k] = out[:k] * step % _LCG_MOD
        done += k
        step = step * step % _LCG_MOD
    return out


def _legacy_uniform(n: int, seed: int) -> np.ndarray:
    """COCO's ``bbob2009`` uniform numbers in (0, 1]: ``n`` draws from ``seed``.

    The LCG is warmed up for 40 steps, the last 32 states fill a shuffle table,
    and each output is the table entry picked by the previous output (Bays &
    Durham shuffling), divided by 2^31 - 1.  Only the table walk is sequential.
    """
    seed = max(abs(int(seed)), 1)
    states = _lcg_states(seed, 40 + n)
    table = states[8:40][::-1].tolist()  # table[i] holds warm-up state 40 - i
    out = [0] * n
    last = table[0]
    for k, s in enumerate(states[40:].tolist()):
        j = last // 67108865
        last = table[j]
        table[j] = s
        out[k] = last
    r = np.asarray(out, np.float64) / 2.147483647e9
    r[r == 0.0] = 1e-99
    return r


def _legacy_gauss(n: int, seed: int) -> np.ndarray:
    """COCO's legacy standard normals: Box-Muller on ``2n`` legacy uniforms.

    Evaluated with the C library's ``log``/``cos`` (Python's ``math``), as COCO
    does, rather than NumPy's SIMD versions, which may differ in the last bit.
    """
    u = _legacy_uniform(2 * n, seed).tolist()
    two_pi, log, cos, sqrt = 2.0 * math.pi, math.log, math.cos, math.sqrt
    g = np.array([sqrt(-2.0 * log(a)) * cos(two_pi * b) for a, b in zip(u[:n], u[n:])], np.float64)
    g[g == 0.0] = 1e-99
    return g


def _legacy_rotation(seed: int, d: int) -> np.ndarray:
    """COCO's legacy ``d x d`` orthogonal matrix for ``seed``.

    The Gaussian stream fills the matrix column by column and the columns are
    orthonormalised left to right by modified Gram-Schmidt.  Here it runs in
    its right-looking form (each normalised column is projected out of all
    later columns at once: the same operations per column as the sequential
    form), with every dot product summed strictly in index order (``cumsum``)
    as in COCO's C loops, so the matrix agrees with COCO's to the last bits
    rather than to ~1e-14.
    """
    B = _legacy_gauss(d * d, seed).reshape(d, d).T.copy()
    for j in range(d):
        B[:, j] /= math.sqrt(float(np.cumsum(B[:, j] * B[:, j])[-1]))
        if j + 1 < d:
            dots = np.cumsum(B[:, j:j + 1] * B[:, j + 1:], axis=0)[-1]
            B[:, j + 1:] -= B[:, j:j + 1] * dots[None, :]
    return B


def _legacy_xopt(seed: int, d: int) -> np.ndarray:
    """COCO's generic optimum: uniform in [-4, 4) on a 1e-4 grid, 0 -> -1e-5."""
    x = 8.0 * np.floor(1e4 * _legacy_uniform(d, seed)) / 1e4 - 4.0
    x[x == 0.0] = -1e-5
    return x


def _legacy_fopt(fid: int, instance: int) -> float:
    """COCO's optimal value: ratio of two legacy normals, rounded to 1e-2, in [-1000, 1000].

    f4 and f18 share the seeds of f3 and f17.
    """
    rseed = {4: 3, 18: 17}.get(fid, fid) + 10000 * instance
    ratio = 100.0 * _legacy_gauss(1, rseed)[0] / _legacy_gauss(1, rseed + 1)[0]
    return float(min(1000.0, max(-1000.0, math.floor(100.0 * ratio + 0.5) / 100.0)))


def _lam(alpha, d):
    """Diagonal of BBOB's Lambda^alpha: ``alpha^(0.5 i / (d-1))``."""
    return alpha ** (0.5 * np.arange(d) / max(d - 1, 1))


def _gallagher_coco(d, npk, rseed, R):
    """COCO's Gallagher peaks for f21 (101 peaks) / f22 (21 peaks).

    Returns ``(x_opt, peaks in rotated coordinates [K, D], scales [K, D], heights [K])``.
    """
    b, c = (10.0, 5.0) if npk == 101 else (9.8, 4.9)
    first_cond = math.sqrt(1000.0) if npk == 101 else 1000.0
    order = np.argsort(_legacy_uniform(npk - 1, rseed), kind="stable")
    cond = np.concatenate([[first_cond], 1000.0 ** (order / (npk - 2.0))])
    heights = np.concatenate([[10.0], 1.1 + 8.0 * np.arange(npk - 1) / (npk - 2.0)])
    scales = np.empty((npk, d))
    for i in range(npk):
        perm = np.argsort(_legacy_uniform(d, rseed + 1000 * i), kind="stable")
        scales[i] = cond[i] ** (perm / (d - 1.0) - 0.5)
    u = _legacy_uniform(d * npk, rseed).reshape(npk, d)
    y = b * u - c
    x_opt = 0.8 * y[0]
    peaks = y @ R.T
    peaks[0] *= 0.8
    return x_opt, peaks, scales, heights


def _coco_instance(fid: int, d: int, instance: int) -> dict:
    """The raw instance data of COCO's bbob function ``fid``, instance ``instance``.

    Keys: ``x_opt``, ``f_opt``, ``A`` (rotation from seed ``rseed + 1e6``),
    ``B`` (rotation from seed ``rseed``), plus ``peaks``/``scales``/``heights``
    for f21/f22.  ``rseed = fid + 10000 * instance`` (f4 and f18 use the seeds
    of f3 and f17).
    """
    rseed = {4: 3, 18: 17}.get(fid, fid) + 10000 * instance
    f_opt = _legacy_fopt(fid, instance)
    x_opt = _legacy_xopt(rseed + 1000000 if fid == 12 else rseed, d)
    c = {"f_opt": f_opt}
    if fid in (6, 7, 10, 11, 12, 13, 14, 15, 16, 17, 18, 23, 24):
        c["A"] = _legacy_rotation(rseed + 1000000, d)
    if fid in (6, 7, 9, 13, 15, 16, 17, 18, 19, 21, 22, 23, 24):
        c["B"] = _legacy_rotation(rseed, d)
    if fid == 4:
        x_opt[::2] = np.abs(x_opt[::2])
    elif fid == 5:
        x_opt = np.where(x_opt < 0.0, -5.0, 5.0)
    elif fid == 8:
        x_opt = 0.75 * x_opt
    elif fid in (9, 19):
        x_opt = c["B"].T @ np.full(d, 0.5) / max(1.0, math.sqrt(d) / 8.0)
    elif fid == 20:
        x_opt = np.where(_legacy_uniform(d, rseed) < 0.5, -0.5, 0.5) * _SCHWEFEL_BEST
    elif fid in (21, 22):
        x_opt, c["peaks"], c["scales"], c["heights"] = _gallagher_coco(d, 101 if fid == 21 else 21, rseed, c["B"])
    elif fid == 24:
        x_opt = np.where(_legacy_gauss(d, rseed) < 0.0, -1.25, 1.25)
    c["x_opt"] = x_opt
    return c


# -- tfevo's own seeded instances (backward-compatible "seed" mode) ------------
def _haar(rng, d):
    q, r = np.linalg.qr(rng.standard_normal((d, d)))
    return q * np.sign(np.diag(r))[None, :]


def _seed_instance(fid: int, d: int, seed: int) -> dict:
    """An instance drawn with NumPy from ``(fid, d, seed)`` (BBOB's distributions)."""
    rng = np.random.default_rng([fid, d, int(seed)])
    x_opt = 8.0 * np.floor(1e4 * rng.random(d)) / 1e4 - 4.0
    x_opt[x_opt == 0] = -1e-5
    f_opt = float(np.clip(np.round(100.0 * rng.standard_cauchy()) / 100.0, -1000.0, 1000.0))
    A, B = _haar(rng, d), _haar(rng, d)
    signs = np.where(rng.random(d) < 0.5, -1.0, 1.0)
    if fid in (9, 19, 21, 22):  # one rotation
        B = A
    elif fid in (6, 7, 13, 23, 24):  # the roles these functions had before COCO instances existed
        A, B = B, A
    c = {"f_opt": f_opt, "A": A, "B": B}
    if fid == 4:
        x_opt[::2] = np.abs(x_opt[::2])
    elif fid == 5:
        x_opt = 5.0 * signs
    elif fid == 8:
        x_opt = 0.75 * x_opt
    elif fid in (9, 19):
        x_opt = A.T @ (0.5 * np.ones(d)) / max(1.0, math.sqrt(d) / 8.0)
    elif fid == 20:
        x_opt = 0.5 * _SCHWEFEL_BEST * signs
    elif fid == 24:
        x_opt = 1.25 * signs
    elif fid in (21, 22):
        npk = 101 if fid == 21 else 21
        y = rng.uniform(-4.9, 4.9, size=(npk, d))
        y[0] = rng.uniform(-3.92, 3.92, size=d) if fid == 22 else rng.uniform(-4.0, 4.0, size=d)
        x_opt = y[0].copy()
        heights = np.empty(npk)
        heights[0] = 10.0
        heights[1:] = 1.1 + 8.0 * np.arange(npk - 1) / (npk - 2)
        alphas = np.empty(npk)
        alphas[0] = 1000.0 if fid == 21 else 1000.0**2
        alphas[1:] = rng.permutation(1000.0 ** (2.0 * np.arange(npk - 1) / (npk - 2)))
        scales = np.stack([rng.permutation(_lam(a, d)) / a**0.25 for a in alphas])
        c.update(peaks=y @ A.T, scales=scales, heights=heights)
    c["x_opt"] = x_opt
    return c


def _check_int(name, v):
    if isinstance(v, bool) or not isinstance(v, numbers.Integral):
        raise ConfigError(f"{name} must be an integer, got {v!r}")
    return int(v)


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


class BBOBFunction:
    """One instance of a BBOB function: ``f(x [P, D]) -> [P]`` (minimisation).

    Build it with :func:`make`.  ``instance=i`` gives COCO's ``bbob`` instance
    ``i`` (values equal to ``cocoex``); ``seed=s`` gives tfevo's own NumPy-drawn
    instance (the default, ``seed=0``).  Giving both is an error.

    Attributes:
      fid, dim, name: the function and dimension.
      instance: the COCO instance number, or ``None`` in seed mode.
      seed: the tfevo seed, or ``None`` in COCO-instance mode.
      x_opt: float64 numpy ``[D]``, the optimum (COCO's best parameter).
      f_opt: float, the optimal value (COCO's f_opt shift).

    Calling the object returns ``f(x)`` as float32; :meth:`fitness` returns
    ``-(f(x) - f_opt)`` (higher is better, 0 at the optimum); :meth:`value`
    returns ``f(x)`` in the internal dtype (float64 by default).  The search
    domain of the BBOB suite is ``[-5, 5]^D``; the functions are defined (with
    penalties where BBOB has them) everywhere.

    The evaluation is one tensor program over the population, traced once per
    ``(fid, dim, dtype, jit_compile)`` and shared by all instances;
    ``jit_compile=True`` compiles it with XLA.
    """

    def __init__(self, fid: int, dim: int, seed: int | None = None, dtype="float64", *,
                 instance: int | None = None, jit_compile: bool = False):
        fid, dim = _check_int("fid", fid), _check_int("dim", dim)
        if fid not in NAMES:
            raise ConfigError(f"BBOB function id must be in 1..24, got {fid}")
        if dim < 2:
            raise ConfigError(f"BBOB functions need dim >= 2, got {dim}")
        if seed is not None and instance is not None:
            raise ConfigError("give either seed= (tfevo's own instances) or instance= (COCO's instances), not both")
        try:
            self.dtype = tf.as_dtype(dtype)
        except TypeError as e:
            raise ConfigError(f"unknown dtype {dtype!r}") from e
        if not self.dtype.is_floating:
            raise ConfigError(f"dtype must be a floating type, got {self.dtype.name}")
        self.fid, self.dim, self.name = fid, dim, NAMES[fid]
        if instance is not None:
            instance = _check_int("instance", instance)
            if not 1 <= instance <= MAX_INSTANCE:
                raise ConfigError(f"COCO instance must be in 1..{MAX_INSTANCE}, got {instance}")
            self.instance, self.seed = instance, None
            raw = _coco_instance(fid, dim, instance)
        else:
            self.seed = 0 if seed is None else _check_int("seed", seed)
            self.instance = None
            raw = _seed_instance(fid, dim, self.seed)
        self.x_opt = np.asarray(raw["x_opt"], np.float64)
        self.f_opt = float(raw["f_opt"])
        self._consts = {k: tf.constant(v, self.dtype) for k, v in self._derive(raw).items()}
        self._f_opt_t = tf.constant(self.f_opt, self.dtype)
        self._fn = _compiled(fid, dim, self.dtype, self._consts, bool(jit_compile))
        self._cf = self._fn.get_concrete_function()  # skips tf.function's dispatch per call

    # -- public -----------------------------------------------------------------
    def _run(self, x, out: int) -> tf.Tensor:
        x = tf.convert_to_tensor(x)
        single = x.shape.rank == 1
        if single:
            x = x[None]
        if x.shape.rank != 2 or x.shape[-1] != self.dim:
            raise ShapeError(f"x must have shape [P, {self.dim}], got {x.shape.as_list()}")
        if x.dtype != self.dtype:
            x = tf.cast(x, self.dtype)
        f = self._cf(x, self._consts, self._f_opt_t)[out]
        return f[0] if single else f

    def value(self, x) -> tf.Tensor:
        """f(x) in the internal dtype, x ``[P, D]`` (or ``[D]``)."""
        return self._run(x, 0)

    def __call__(self, x) -> tf.Tensor:
        """f(x) as float32 ``[P]`` (minimisation value, ``f_opt`` included)."""
        return self._run(x, 1)

    def fitness(self, x) -> tf.Tensor:
        """``-(f(x) - f_opt)`` as float32 ``[P]``: higher is better, 0 at optimum."""
        return self._run(x, 2)

    def __repr__(self):
        src = f"instance={self.instance}" if self.instance is not None else f"seed={self.seed}"
        return f"BBOBFunction(f{self.fid} {self.name}, dim={self.dim}, {src})"

    # -- instance constants ------------------------------------------------------
    def _derive(self, raw):
        """Per-function matrices and vectors (NumPy float64) used by :func:`_evaluate`."""
        fid, d = self.fid, self.dim
        xo = self.x_opt
        A, B = raw.get("A"), raw.get("B")
        ar = np.arange(d) / (d - 1)
        c = {"xo": xo}
        if fid in (6, 13):
            c["M"] = A @ (_lam(10.0, d)[:, None] * B)
        elif fid == 7:
            c["M1"] = _lam(10.0, d)[:, None] * B
            c["M2"] = A
            c["w"] = 100.0 ** ar
        elif fid in (2, 10):
            c["w"] = 1e6 ** ar
            if fid == 10:
                c["A"] = A
        elif fid in (11, 12, 14):
            c["A"] = A
            if fid == 14:
                c["e"] = 2.0 + 4.0 * ar
        elif fid == 3:
            c["lam"] = _lam(10.0, d)
        elif fid == 4:
            c["brs"] = 10.0 ** (0.5 * ar)
            c["odd"] = (np.arange(d) % 2 == 0).astype(np.float64)  # 1-based odd coordinates
        elif fid == 5:
            c["s"] = np.sign(xo) * 10.0 ** ar
        elif fid == 8:
            c["scale"] = np.float64(max(1.0, math.sqrt(d) / 8.0))
        elif fid in (9, 19):
            c["M"] = max(1.0, math.sqrt(d) / 8.0) * B
        elif fid == 15:
            c["A"] = A
            c["M"] = A @ (_lam(10.0, d)[:, None] * B)
        elif fid == 16:
            c["A"] = A
            c["M"] = A @ (_lam(0.01, d)[:, None] * B)
        elif fid in (17, 18):
            c["A"] = A
            c["M"] = _lam(10.0 if fid == 17 else 1000.0, d)[:, None] * B
        elif fid == 20:
            c["signs"] = np.sign(xo)
            c["shift"] = np.full(d, _SCHWEFEL_SHIFT)
            c["lam"] = _lam(10.0, d)
        elif fid in (21, 22):
            peaks, scales = raw["peaks"], raw["scales"]
            c.update(R=B, peaks=peaks, scales=scales, heights=raw["heights"],
                     sy=scales * peaks, syy=np.sum(scales * peaks**2, axis=1))
        elif fid == 23:
            c["M"] = A @ (_lam(100.0, d)[:, None] * B)
        elif fid == 24:
            c["signs"] = np.sign(xo)
            c["M"] = A @ (_lam(100.0, d)[:, None] * B)
        return c

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


def make(fid: int, dim: int, seed: int | None = None, dtype="float64", *, instance: int | None = None,
         jit_compile: bool = False) -> BBOBFunction:
    """Returns BBOB function ``fid`` (1..24) in dimension ``dim``.

    ``instance=i`` (1..:data:`MAX_INSTANCE`) gives COCO's ``bbob`` instance
    ``i``, identical to ``cocoex.Suite("bbob", "", "")``'s problem
    ``(fid, dim, i)``.  Otherwise ``seed`` (default 0) selects tfevo's own
    NumPy-drawn instance.  Giving both raises :class:`~tfevo.core.ConfigError`.
    ``jit_compile=True`` runs the evaluation through XLA: 1.5-5x faster per
    call, but about a second of compilation per function, dimension and
    population size, so it pays off for long runs or large populations; the
    default is a plain traced graph (one trace per function and dimension).
    """
    return BBOBFunction(fid, dim, seed, dtype, instance=instance, jit_compile=jit_compile)


def _register(fid):
    def factory(dim: int, seed: int | None = None, dtype="float64", instance: int | None = None,
                jit_compile: bool = False):
        return BBOBFunction(fid, dim, seed, dtype, instance=instance, jit_compile=jit_compile)

    factory.__doc__ = f"BBOB f{fid} ({NAMES[fid]}): make(dim, seed | instance) -> BBOBFunction."
    factory.__name__ = f"bbob_f{fid}"
    register("problem", f"bbob_f{fid}")(factory)


for _fid in NAMES:
    _register(_fid)
