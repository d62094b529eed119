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

import numpy as np
import tensorflow as tf

from tfevo.core import ConfigError, ShapeError, check_int
from tfevo.problems.bbob_functions import _compiled
from tfevo.problems.bbob_instances import _SCHWEFEL_SHIFT, _coco_instance, _lam, _seed_instance
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
        fid, dim = check_int(fid, "fid"), check_int(dim, "dim")
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
            instance = check_int(instance, "instance")
            if not 1 <= instance <= MAX_INSTANCE:
                raise ConfigError(f"COCO instance must be in 1..{MAX_INSTANCE}, got {instance}")
            self.instance, self.seed = instance, None
            raw = _coco_instance(fid, dim, instance)
        else:
            self.seed = 0 if seed is None else check_int(seed, "seed")
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
