"""Fitness shaping: turning raw fitness ``[P]`` into update weights.

Every function here takes fitness with **higher is better** and treats NaN,
``+inf`` and ``-inf`` as the worst possible value (through :func:`tfevo.core.sanitize_fitness`),
so a crashed or diverged evaluation never corrupts a strategy's state.  All are
pure TensorFlow and work eagerly, inside ``tf.function`` and under XLA.

Example:

>>> import tensorflow as tf
>>> from tfevo.strategies.shaping import centered_rank
>>> centered_rank(tf.constant([3.0, 1.0, float("nan"), 2.0])).numpy().round(4)
array([ 0.5   , -0.1667, -0.5   ,  0.1667], dtype=float32)
"""

from __future__ import annotations

import math

import numpy as np
import tensorflow as tf

from tfevo import kernels
from tfevo.core import ConfigError, ShapeError, sanitize_fitness, worst_to_finite

__all__ = ["ranks", "centered_rank", "z_score", "weight_decay", "nes_utilities", "utility_weights"]


def ranks(fitness) -> tf.Tensor:
    """Returns the rank of every member, ``int32 [P]``: 0 for the worst, P-1 for the best.

    NaN, ``+inf`` and ``-inf`` count as the worst values.  Ties are broken by position
    (the earlier member gets the lower rank), so the result is a permutation.
    """
    f = sanitize_fitness(fitness)
    order = tf.argsort(f, stable=True)  # ascending: worst first
    p = tf.shape(f)[0]
    return tf.scatter_nd(order[:, None], tf.range(p, dtype=tf.int32), [p])


def _tie_mean(fitness, values) -> tf.Tensor:
    """``values[k]`` belongs to the k-th worst member; returns each member's value ``[P]``,
    members of equal fitness (after sanitizing: all non-finite ones tie) sharing the mean
    of their block of ``values``, so the result does not depend on the members' order.
    A member without ties gets its own entry exactly.  Sort and segment sums: O(P log P)."""
    f = sanitize_fitness(fitness)
    order = tf.argsort(f, stable=True)  # ascending: worst first
    s = tf.gather(f, order)
    p = tf.shape(f)[0]
    first = tf.ones([tf.minimum(p, 1)], tf.int32)  # (no members: no block)
    starts = tf.concat([first, tf.cast(tf.not_equal(s[1:], s[:-1]), tf.int32)], axis=0)
    block = tf.cumsum(starts) - 1  # block id of each sorted position
    sums = tf.math.unsorted_segment_sum(values, block, p)
    counts = tf.math.unsorted_segment_sum(tf.ones_like(values), block, p)
    mean = tf.gather(sums / tf.maximum(counts, 1), block)  # x / 1 == x: untied members unchanged
    return tf.scatter_nd(order[:, None], mean, [p])


def centered_rank(fitness, dtype=tf.float32) -> tf.Tensor:
    """Centered ranks of Salimans et al. (2017): ranks scaled linearly to [-0.5, 0.5].

    The worst member gets -0.5, the best +0.5, the rest evenly in between
    (``rank / (P - 1) - 0.5``).  Members of equal fitness share the mean of
    their ranks (as ``scipy.stats.rankdata``, and evosax), so the weights do
    not depend on the order of the members: a generation whose members all
    tie gets all-zero weights and moves nothing (compiled by XLA, which
    rounds ``r / (P - 1) - 0.5`` differently, within a few float32 ulps of
    zero: ~2e-8).  With a single member the
    result is 0.  The values sum to zero, which makes the estimated gradient
    invariant to any monotone transformation of fitness.

    Args:
      fitness: float ``[P]``, higher is better; NaN/+-inf are worst.
      dtype: float dtype of the result (``float64`` for a float64 strategy).

    Returns:
      ``[P]`` of ``dtype`` (float32 by default).
    """
    dtype = tf.as_dtype(dtype)
    p_int = tf.shape(tf.convert_to_tensor(fitness))[0]
    r = _tie_mean(fitness, tf.cast(tf.range(p_int), dtype))
    p = tf.cast(p_int, dtype)
    return tf.where(p > 1.0, r / tf.maximum(p - 1.0, 1.0) - 0.5, tf.zeros_like(r))


def z_score(fitness, eps: float = 1e-8) -> tf.Tensor:
    """Standardized fitness ``(f - mean) / std``.

    Non-finite (worst) entries are first replaced by the lowest finite value
    present (:func:`tfevo.core.worst_to_finite`), so they get the lowest score.
    Values are rescaled by their largest magnitude before the statistics are
    taken, so huge fitness values do not overflow.  If all values are equal
    the result is all zeros.

    Args:
      fitness: float ``[P]``, higher is better.
      eps: added to the standard deviation.

    Returns:
      ``[P]`` in the fitness's float dtype (float32 for other inputs) with mean 0
      and (unless constant) standard deviation ~1.
    """
    f = worst_to_finite(fitness)
    scale = tf.reduce_max(tf.abs(f))
    f = f / tf.where(scale > 0, scale, 1.0)
    centered = f - tf.reduce_mean(f)
    std = tf.sqrt(tf.reduce_mean(tf.square(centered)))
    return tf.where(std > 0, centered / (std + eps), tf.zeros_like(centered))


def weight_decay(x, coeff: float) -> tf.Tensor:
    """L2 penalty to add to fitness: ``-coeff * sum(x**2)`` per member.

    Fitness is maximised, so the term is negative; use
    ``fitness + weight_decay(x, 0.005)`` to prefer small parameters.

    Args:
      x: float ``[P, D]`` population (or ``[D]`` single vector).
      coeff: the L2 coefficient (>= 0).

    Returns:
      ``[P]`` (or a scalar for ``[D]`` input) in ``x``'s float dtype (float32
      for anything else), so a float64 strategy's population stays float64.
    """
    x = tf.convert_to_tensor(x)
    if x.dtype not in (tf.float32, tf.float64):
        x = tf.cast(x, tf.float32)
    coeff = tf.cast(tf.convert_to_tensor(coeff, dtype_hint=x.dtype), x.dtype)  # (a Python float: not via float32)
    return -coeff * tf.reduce_sum(tf.square(x), axis=-1)


def nes_utilities(popsize: int, dtype=np.float32) -> np.ndarray:
    """NES utility values by rank (Wierstra et al. 2014), best rank first.

    ``u_i = max(0, log(P/2 + 1) - log(i)) / sum_j max(0, log(P/2 + 1) - log(j)) - 1/P``
    for ``i = 1..P``: the better half gets positive weight decreasing with
    rank, the values sum to zero.

    Returns:
      numpy array ``[P]`` of ``dtype`` (float32 by default; computed in
      float64); entry 0 belongs to the best member.
    """
    popsize = int(popsize)
    if popsize < 1:
        raise ConfigError(f"popsize must be >= 1, got {popsize}")
    i = np.arange(1, popsize + 1, dtype=np.float64)
    u = np.maximum(0.0, math.log(popsize / 2.0 + 1.0) - np.log(i))
    u = u / u.sum() - 1.0 / popsize
    return u.astype(tf.as_dtype(dtype).as_numpy_dtype)


def utility_weights(fitness, utilities=None) -> tf.Tensor:
    """Assigns NES utilities (see :func:`nes_utilities`) to members by fitness rank.

    Members of equal fitness share the mean utility of their ranks, so the
    weights do not depend on the order of the members (all members tied:
    every weight is ``sum(u) / P = 0``, no update).

    Args:
      fitness: float ``[P]``, higher is better; NaN/+-inf are worst.
      utilities: optional ``[P]`` table, best rank first (default
        ``nes_utilities(P)``; P must then be known statically).

    Returns:
      ``[P]`` in the table's dtype (float32 for the default table): the utility of each member.
    """
    fitness = tf.convert_to_tensor(fitness)
    if utilities is None:
        p = fitness.shape[0]
        if p is None:
            raise ShapeError("utility_weights needs a static population size or an explicit table")
        utilities = nes_utilities(p)
    utilities = tf.convert_to_tensor(utilities)
    if not utilities.dtype.is_floating:
        utilities = tf.cast(utilities, tf.float32)
    return _tie_mean(fitness, tf.reverse(utilities, [0]))  # worst first


# -- helpers shared by the strategies (not public API) ----------------------


#: the fitness shapings of the rank-based gradient strategies (OpenAI-ES, PGPE)
_SHAPINGS = ("centered_rank", "z_score", "raw")


def _check_shaping(fitness_shaping) -> str:
    if fitness_shaping not in _SHAPINGS:
        raise ConfigError(f"fitness_shaping must be 'centered_rank', 'z_score' or 'raw', got {fitness_shaping!r}")
    return fitness_shaping


def _shaped(fitness, fitness_shaping: str, dtype) -> tf.Tensor:
    """The weights ``[P]`` in ``dtype`` of ``fitness`` under one of :data:`_SHAPINGS` (non-finite: worst)."""
    if fitness_shaping == "centered_rank":
        w = centered_rank(fitness, dtype)
    elif fitness_shaping == "z_score":
        w = z_score(fitness)
    else:
        w = worst_to_finite(fitness)
    return tf.cast(w, dtype)


def _center(init_params, num_dims: int, name: str = "init_params", dtype=np.float32) -> np.ndarray:
    """Validates an initial centre ``[D]`` (None -> zeros)."""
    dtype = tf.as_dtype(dtype).as_numpy_dtype
    if init_params is None:
        return np.zeros([num_dims], dtype)
    c = np.asarray(init_params, dtype)
    if c.shape != (num_dims,):
        raise ShapeError(f"{name} must have shape [{num_dims}], got {list(c.shape)}")
    if not np.all(np.isfinite(c)):
        raise ConfigError(f"{name} must be finite")
    return c


def _positive(value, name: str, allow_zero: bool = False) -> float:
    v = float(value)
    if not (v > 0 or (allow_zero and v == 0)) or not math.isfinite(v):
        raise ConfigError(f"{name} must be {'>= 0' if allow_zero else '> 0'}, got {value}")
    return v


def _per_dim(value, num_dims: int, name: str, dtype=np.float32) -> np.ndarray:
    """A positive scalar or ``[D]`` vector -> ``[D]`` of ``dtype`` (float32 by default)."""
    dtype = tf.as_dtype(dtype).as_numpy_dtype
    v = np.asarray(value, dtype)
    if v.ndim == 0:
        v = np.full([num_dims], v, dtype)
    if v.shape != (num_dims,):
        raise ShapeError(f"{name} must be a scalar or have shape [{num_dims}], got {list(v.shape)}")
    if not np.all(v > 0) or not np.all(np.isfinite(v)):
        raise ConfigError(f"{name} must be finite and > 0")
    return v


def _bounds(bounds, num_dims: int, dtype=np.float32):
    """``(low, high)`` scalars or ``[D]`` each -> two ``[D]`` arrays of ``dtype``, or None."""
    if bounds is None:
        return None
    try:
        low, high = bounds
    except (TypeError, ValueError):
        raise ConfigError("bounds must be a pair (low, high)") from None
    dtype = tf.as_dtype(dtype).as_numpy_dtype
    low, high = np.asarray(low, dtype), np.asarray(high, dtype)
    low = np.full([num_dims], low, dtype) if low.ndim == 0 else low
    high = np.full([num_dims], high, dtype) if high.ndim == 0 else high
    if low.shape != (num_dims,) or high.shape != (num_dims,):
        raise ShapeError(f"bounds must be scalars or have shape [{num_dims}]")
    if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high)) and np.all(low < high)):
        raise ConfigError("bounds must be finite with low < high in every dimension")
    return low, high


#: default population of the GAs (GaussianGA, SeedGA) when ``popsize`` is not given
GA_DEFAULT_POPSIZE = 100


def _ga_sizes(popsize, truncation, num_elite_candidates) -> tuple:
    """``(P, T, E)`` of the GAs with their defaults filled in.

    ``P``: 100 (raised to fit the ``T`` and ``E`` given); ``T``: 20 parents
    (``P // 2`` for ``P < 20``); ``E``: 10 elite candidates (``P // 4`` for ``P < 12``).
    """
    if popsize is None:
        popsize = max(GA_DEFAULT_POPSIZE, int(truncation or 0), int(num_elite_candidates or 0) + 2)
    p = int(popsize)
    if p < 2:
        raise ConfigError(f"popsize must be >= 2 for a GA (the elite and at least one child), got {popsize}")
    if truncation is None:
        truncation = 20 if p >= 20 else max(1, p // 2)
    if num_elite_candidates is None:
        num_elite_candidates = 10 if p >= 12 else p // 4
    return popsize, truncation, num_elite_candidates


def _default_popsize(num_dims: int, even: bool = False) -> int:
    """The usual NES/CMA default ``4 + floor(3 ln D)`` (rounded up to even if asked)."""
    p = 4 + int(math.floor(3 * math.log(num_dims)))
    if even and p % 2:
        p += 1
    return p


def _gaussian_op(use_op, *inputs):
    """The ``TfevoGaussianPopulation`` kernel (``custom_ops/normal.cc``) when it runs here, else ``None``."""
    return kernels.kernel("TfevoGaussianPopulation", use_op, [t for t in inputs if isinstance(t, (tf.Tensor, tf.Variable))])


def _normal_reference(shape, seed, scale=None, dtype=tf.float32) -> tf.Tensor:
    """Pure-TensorFlow reference of :func:`_normal` (the random stream the op reproduces).

    ``u = stateless_uniform([2, h, d], seed)`` with ``h = ceil(n / 2)``;
    ``r = sqrt(-2 log1p(-u[0])) * scale``, ``t = 2 pi u[1]``; rows ``[0, h)`` are
    ``r cos t`` and rows ``[h, n)`` are ``r sin t``.
    """
    n, d = int(shape[0]), int(shape[1])
    h = (n + 1) // 2
    u = tf.random.stateless_uniform([2, h, d], seed=seed, dtype=dtype)
    r = tf.sqrt(-2.0 * tf.math.log1p(-u[0]))  # u in [0, 1): log1p(-u) is finite
    if scale is not None:
        r = r * scale
    t = (2.0 * math.pi) * u[1]
    z = tf.concat([r * tf.cos(t), r * tf.sin(t)], axis=0)
    return z if 2 * h == n else z[:n]


def _op_call(op, n: int, d: int, seed, scale, center, mirrored: bool) -> tf.Tensor:
    scale = tf.constant(1.0, tf.float32) if scale is None else tf.convert_to_tensor(scale, tf.float32)
    center = tf.zeros([0], tf.float32) if center is None else tf.convert_to_tensor(center, tf.float32)
    return op(tf.convert_to_tensor(seed, tf.int32), scale, center, rows=n, dim=d, mirrored=mirrored)


def _normal(shape, seed, scale=None, use_op=None, dtype=tf.float32) -> tf.Tensor:
    """Standard normal samples ``[n, d]`` (times ``scale``) by Box-Muller from stateless uniforms.

    Same distribution as ``tf.random.stateless_normal`` (also Box-Muller; tails
    reach ~5.8 sigma with float32 uniforms).  Fully determined by ``seed``.
    ``scale`` (scalar or ``[d]``) is applied to the radius.

    Runs the C++ kernel ``TfevoGaussianPopulation`` (``custom_ops/normal.cc``:
    TensorFlow's stateless Philox stream re-implemented bit for bit, 16
    counters per AVX-512 step, fused Box-Muller, multi-threaded) when it is
    allowed here (:func:`tfevo.kernels.kernel`: built, not inside XLA, no GPU
    in the way), else :func:`_normal_reference`.  Both give
    the same uniforms; normals agree to float rounding (a few ulp).
    ``use_op``: ``None`` = automatic, ``False`` = reference, ``True`` = op or error.
    ``dtype`` float64: the reference with float64 uniforms (the op is float32).
    """
    n, d = int(shape[0]), int(shape[1])
    op = _gaussian_op(use_op, seed, scale) if tf.as_dtype(dtype) == tf.float32 else None
    if op is not None:
        return _op_call(op, n, d, seed, scale, None, False)
    return _normal_reference([n, d], seed, scale, dtype)


def _gaussian_population(center, sigma, popsize: int, mirrored: bool, seed, use_op=None) -> tf.Tensor:
    """``center + sigma * eps`` for ``popsize`` members; mirrored: ``[c + e, c - e]`` halves.

    One fused kernel call when the Gaussian op is available (see :func:`_normal`).
    """
    d = int(center.shape[0])
    op = _gaussian_op(use_op, center, seed, sigma) if center.dtype == tf.float32 else None
    if op is not None:
        if mirrored:
            return _op_call(op, popsize // 2, d, seed, sigma, center, True)
        return _op_call(op, popsize, d, seed, sigma, center, False)
    if mirrored:
        e = _normal_reference([popsize // 2, d], seed, scale=sigma, dtype=center.dtype)
        return tf.concat([center + e, center - e], axis=0)
    return center + _normal_reference([popsize, d], seed, scale=sigma, dtype=center.dtype)


class KeptNoise:
    """Mixin of the Gaussian strategies whose ``tell`` uses the noise their ``ask`` drew.

    ``ask`` draws standard normals ``eps`` (``[P/2, D]`` mirrored, else ``[P, D]``),
    keeps them in the variable ``noise`` and returns ``center + scale * eps``
    (mirrored: the ``+eps`` half, then the ``-eps`` half, as evosax), also kept
    as ``x_last``.  ``tell`` reads ``noise`` instead of recovering it as
    ``(x - center) / scale``: in float32 that difference keeps only
    ``ulp(center) / scale`` of it (at ``|center| = 1e4``, ``scale = 1e-3``, about
    one bit), and the rows must be the asked ones in the asked order (pairs are
    rows ``k`` and ``k + P/2``).  So ``tell`` accepts exactly the last asked
    population, once (``tell_needs_last_ask``); any other raises
    :class:`~tfevo.core.AskTellError` and changes nothing.  Memory: the two
    variables hold ``1.5 P D`` (mirrored) or ``2 P D`` numbers beside the population.
    """

    tell_needs_last_ask = True
    tell_once_per_ask = True

    def _init_kept_noise(self, mirrored: bool) -> None:
        p, d, dt = self.popsize, self.num_dims, self.dtype
        self._noise_rows = p // 2 if mirrored else p
        self.noise = tf.Variable(tf.zeros([self._noise_rows, d], dt), trainable=False, name="noise")
        # NaN: equal to nothing, so a tell before the first ask is refused
        self.x_last = tf.Variable(tf.fill([p, d], tf.constant(np.nan, dt)), trainable=False, name="x_last")

    def _ask_kept_noise(self, center, scale) -> tf.Tensor:
        eps = self.noise.assign(_normal([self._noise_rows, self.num_dims], self.seeds.next(), dtype=self.dtype))
        step = scale * eps
        x = tf.concat([center + step, center - step], axis=0) if self._noise_rows < self.popsize else center + step
        return tf.identity(self.x_last.assign(x))

    def _last_asked(self) -> tf.Tensor:
        return self.x_last

    def _weighted_noise(self, w, square: bool = False) -> tf.Tensor:
        """``sum_i w_i eps_i`` (``square``: ``sum_i w_i eps_i^2``) ``[D]`` over the rows of the last ask,
        one matrix-vector product over the kept ``noise`` (mirrored: the halves' weights combined)."""
        eps = tf.convert_to_tensor(self.noise)
        if square:
            eps = tf.square(eps)
        if self._noise_rows < self.popsize:
            n = self._noise_rows
            w = w[:n] + w[n:] if square else w[:n] - w[n:]
        return tf.linalg.matvec(eps, w, transpose_a=True)
