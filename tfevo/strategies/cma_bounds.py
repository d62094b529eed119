"""Box constraints of the CMA family: pycma's default ``BoundTransform``.

Samples are drawn on the whole space and mapped into the box for evaluation
(:func:`reflect`); the update learns from the unmapped samples, so the search
distribution is not distorted by points piling up on a bound.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from tfevo.core import ConfigError

__all__ = ["check_bounds", "box_constants", "reflect", "unreflect", "match_asked"]


def check_bounds(bounds, num_dims: int):
    """``(lo, hi)`` float64 arrays ``[num_dims]`` of ``bounds=(lower, upper)`` (scalars or per
    coordinate; ``None`` or an infinite value for no bound on that side, as pycma), or ``None``."""
    if bounds is None:
        return None
    try:
        lo, hi = bounds
    except (TypeError, ValueError):
        raise ConfigError(f"bounds must be a pair (lower, upper), got {bounds!r}"[:300]) from None
    lo, hi = _side(lo, -np.inf, "lower", num_dims), _side(hi, np.inf, "upper", num_dims)
    if np.any(lo >= hi):
        raise ConfigError("bounds must satisfy lower < upper in every coordinate")
    return lo, hi


def _side(v, unbounded, what, num_dims):
    """One side of ``bounds`` as float64 ``[num_dims]``; ``None`` (the side or an entry) is
    ``unbounded`` (+-inf), as in pycma."""
    if v is None:
        v = unbounded
    elif np.ndim(v) == 1:
        v = [unbounded if e is None else e for e in v]
    try:
        a = np.asarray(v, np.float64)
        a = np.broadcast_to(a, [num_dims]).copy() if a.ndim <= 1 else None
    except (TypeError, ValueError):
        a = None
    if a is None:
        raise ConfigError(f"bounds: the {what} bound must be a number or {num_dims} numbers (None or "
                          f"{unbounded} for no bound), got {v!r}"[:300])
    if np.any(np.isnan(a)):
        raise ConfigError(f"bounds: the {what} bound must not be NaN (None or {unbounded} for no bound), got {v!r}"[:300])
    return a


def box_constants(bounds, dtype):
    """``(lo, hi, a_lo, a_hi)`` constants: the bounds and the widths of pycma's quadratic margins,
    ``min((hi - lo) / 2, max(1, |bound|) / 20)``."""
    lo, hi = bounds
    a_lo = np.minimum((hi - lo) / 2.0, np.maximum(1.0, np.abs(lo)) / 20.0)
    a_hi = np.minimum((hi - lo) / 2.0, np.maximum(1.0, np.abs(hi)) / 20.0)
    return tuple(tf.constant(v, dtype) for v in (lo, hi, a_lo, a_hi))


def reflect(x, box):
    """``x`` mapped into the box by pycma's ``BoundTransform``
    (``BoxConstraintsLinQuadTransformation``): the identity on ``[lo + a_lo, hi - a_hi]``,
    quadratic on the margins (``lo + (x - lo + a_lo)^2 / (4 a_lo)``, smooth at the bound),
    mirrored beyond ``lo - a_lo`` and ``hi + a_hi`` and periodic with period
    ``2 (hi - lo + a_lo + a_hi)``."""
    lo, hi, al, au = box
    period = 2.0 * (hi - lo + al + au)
    start = lo - 2.0 * al - (hi - lo) / 2.0
    far = (x < start) | (x > hi + 2.0 * au + (hi - lo) / 2.0)
    y = tf.where(far, x - period * tf.math.floor((x - start) / period), x)
    y = tf.where(y > hi + au, y - 2.0 * (y - hi - au), y)
    y = tf.where(y < lo - al, y + 2.0 * (lo - al - y), y)
    y = tf.where(y < lo + al, lo + tf.square(y - (lo - al)) / (4.0 * al),
                 tf.where(y > hi - au, hi - tf.square(y - (hi + au)) / (4.0 * au), y))
    return tf.clip_by_value(y, lo, hi)  # (rounding)


def unreflect(x, box):
    """The point of ``[lo - a_lo, hi + a_hi]`` that :func:`reflect` maps to ``x`` (clipped into the box)."""
    lo, hi, al, au = box
    x = tf.clip_by_value(x, lo, hi)
    x = tf.where(x < lo + al, lo - al + 2.0 * tf.sqrt(al * (x - lo)), x)
    return tf.where(x > hi - au, hi + au - 2.0 * tf.sqrt(au * (hi - x)), x)


def match_asked(x, asked):
    """``(source [P], found [P])``: for every told row ``x[i]``, the row of ``asked`` it equals
    (entry by entry) and whether there is one.  A row in its own position is matched there; a
    moved row (the caller re-ordered the population, as pycma's ``tell`` allows) is matched
    with the first asked row that agrees with it on three coordinates, then checked whole."""
    n = x.shape[-1]
    same_place = tf.reduce_all(tf.equal(asked, x), axis=1)
    cols = sorted({0, n // 2, n - 1})
    agree = tf.reduce_all(tf.stack([tf.equal(x[:, c][:, None], asked[:, c][None, :]) for c in cols]), axis=0)
    first = tf.argmax(tf.cast(agree, tf.int32), axis=1, output_type=tf.int32)
    moved = tf.reduce_any(agree, axis=1) & tf.reduce_all(tf.equal(tf.gather(asked, first), x), axis=1)
    own = tf.range(tf.shape(x)[0], dtype=tf.int32)
    return tf.where(same_place, own, first), same_place | moved
