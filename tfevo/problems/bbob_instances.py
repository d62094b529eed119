"""BBOB instance data (:mod:`tfevo.problems.bbob`): ``x_opt``, ``f_opt``, rotations, Gallagher peaks.

Two sources, both NumPy and run once per instance: COCO's legacy generators
(the Park-Miller/Bays-Durham uniform stream, its Box-Muller Gaussians,
Gram-Schmidt rotations and the per-function special cases), so an instance
equals COCO's ``bbob`` suite's; and tfevo's own seeded draw with BBOB's
distributions but not COCO's numbers.
"""

from __future__ import annotations

import math

import numpy as np


__all__ = []

# Schwefel's optimum: COCO shifts with the first constant and reports the second
# (times 1/2, with the instance's signs) as the best parameter.
_SCHWEFEL_SHIFT = 4.2096874637
_SCHWEFEL_BEST = 4.2096874633

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
