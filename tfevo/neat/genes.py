"""Attribute mutation of node and connection genes (neat-python's
``attributes``/``genes``): float attributes are perturbed by
``N(0, *_mutate_power)`` with ``*_mutate_rate`` or replaced by a fresh
initial value with ``*_replace_rate`` (one uniform decides, so the two never
both happen), clipped to the bounds; activation/aggregation are replaced by a
random option; ``enabled`` is set to a random state."""

from __future__ import annotations

import tensorflow as tf

from tfevo.neat import functions as F
from tfevo.neat.config import NEATConfig
from tfevo.neat.genome import (CONN_ENABLED, CONN_IN, CONN_MARKER, CONN_OUT, CONN_WEIGHT, NODE_ACT, NODE_AGG,
                               NODE_BIAS, NODE_KEY, NODE_RESPONSE, conn_valid, node_valid)

__all__ = ["attr_columns", "enabled_rates", "fresh_float", "mutate_attributes", "mutate_attributes_given", "replace_width"]

_TWO_PI = 6.283185307179586
_ONE_MINUS = 1.0 - 2.0 ** -24


def _gauss(v01, u2):
    """Standard normal from a uniform ``v01`` in [0, 1) and an independent
    uniform ``u2`` (Box-Muller)."""
    v = tf.minimum(v01, _ONE_MINUS)
    return tf.sqrt(-2.0 * tf.math.log1p(-v)) * tf.cos(_TWO_PI * u2)


def fresh_float(cfg, name, v01, u2):
    """neat-python FloatAttribute initial value from two uniforms."""
    mean, std = getattr(cfg, f"{name}_init_mean"), getattr(cfg, f"{name}_init_stdev")
    lo, hi = getattr(cfg, f"{name}_min_value"), getattr(cfg, f"{name}_max_value")
    if getattr(cfg, f"{name}_init_type") == "uniform":
        a, b = max(lo, mean - 2 * std), min(hi, mean + 2 * std)
        return a + (b - a) * v01
    return tf.clip_by_value(mean + std * _gauss(v01, u2), lo, hi)


def replace_width(rate: float, rep: float) -> float:
    """Length of the replace interval ``[rate, rate + rep)`` of the decision
    uniform within ``[0, 1)``: ``min(rep, 1 - rate)``."""
    return min(rep, 1.0 - rate)


def _mutate_float(cfg, name, v, mask, r, u2):
    """Perturb (prob ``rate``) by N(0, power) or replace (prob ``replace``)
    with a fresh value.  ``r`` decides; given the decision, ``r`` rescaled to
    its interval is again uniform and (with ``u2``) gives the normal draw, so a
    gene costs two uniforms."""
    rate, rep = getattr(cfg, f"{name}_mutate_rate"), getattr(cfg, f"{name}_replace_rate")
    power = getattr(cfg, f"{name}_mutate_power")
    lo, hi = getattr(cfg, f"{name}_min_value"), getattr(cfg, f"{name}_max_value")
    if rate == 0.0 and rep == 0.0:
        return v
    pert_hit = r < rate
    rep_hit = (r >= rate) & (r < rate + rep)
    # the replace interval is [rate, min(rate + rep, 1)) (neat-python accepts rate + rep > 1)
    v01 = tf.where(pert_hit, r / max(rate, 1e-30), (r - rate) / max(replace_width(rate, rep), 1e-30))
    pert = tf.clip_by_value(v + power * _gauss(v01, u2), lo, hi)
    fresh = fresh_float(cfg, name, v01, u2)
    out = tf.where(pert_hit, pert, tf.where(rep_hit, fresh, v))
    return tf.where(mask, out, v)


def _mutate_choice(v, options_ids, rate, mask, r):
    """With probability ``rate`` a random option (the decision uniform,
    rescaled, picks it)."""
    if rate == 0.0 or len(options_ids) < 2:
        return v
    k = len(options_ids)
    pick = tf.minimum(tf.cast(r / rate * k, tf.int32), k - 1)
    new = tf.gather(tf.constant(options_ids, tf.float32), pick)
    return tf.where(mask & (r < rate), new, v)


def enabled_rates(cfg: NEATConfig) -> tuple[float, float]:
    """The enabled flag's mutation rate for an enabled and for a disabled
    connection: ``enabled_mutate_rate`` plus ``enabled_rate_to_false_add``
    or ``enabled_rate_to_true_add`` (neat-python's BoolAttribute)."""
    rate = cfg.enabled_mutate_rate
    return rate + cfg.enabled_rate_to_false_add, rate + cfg.enabled_rate_to_true_add


def attr_columns(cfg: NEATConfig):
    """Which per-gene uniforms attribute mutation needs: (node cols, conn cols)."""
    ncols, ccols = {}, {}
    k = 0
    for a in ("bias", "response"):
        if getattr(cfg, f"{a}_mutate_rate") > 0 or getattr(cfg, f"{a}_replace_rate") > 0:
            ncols[a] = (k, k + 1)
            k += 2
    if cfg.activation_mutate_rate > 0 and len(cfg.activation_options) > 1:
        ncols["activation"] = (k,)
        k += 1
    if cfg.aggregation_mutate_rate > 0 and len(cfg.aggregation_options) > 1:
        ncols["aggregation"] = (k,)
        k += 1
    j = 0
    if cfg.weight_mutate_rate > 0 or cfg.weight_replace_rate > 0:
        ccols["weight"] = (0, 1)
        j = 2
    if max(enabled_rates(cfg)) > 0:
        ccols["enabled"] = (j,)
        j += 1
    return ncols, k, ccols, j


def mutate_attributes_given(cfg, nodes, conns, active, un, uc, ncols, ccols):
    I = cfg.num_inputs
    is_in_slot = tf.range(tf.shape(nodes)[1]) < I
    gene = node_valid(nodes) & ~is_in_slot[None, :] & active[:, None]
    cols = [nodes[..., NODE_KEY], nodes[..., NODE_BIAS], nodes[..., NODE_RESPONSE], nodes[..., NODE_AGG],
            nodes[..., NODE_ACT]]
    for a, col in (("bias", NODE_BIAS), ("response", NODE_RESPONSE)):
        if a in ncols:
            i, j = ncols[a]
            cols[col] = _mutate_float(cfg, a, cols[col], gene, un[..., i], un[..., j])
    if "activation" in ncols:
        cols[NODE_ACT] = _mutate_choice(cols[NODE_ACT], [F.activation_id(n) for n in cfg.activation_options],
                                        cfg.activation_mutate_rate, gene, un[..., ncols["activation"][0]])
    if "aggregation" in ncols:
        cols[NODE_AGG] = _mutate_choice(cols[NODE_AGG], [F.aggregation_id(n) for n in cfg.aggregation_options],
                                        cfg.aggregation_mutate_rate, gene, un[..., ncols["aggregation"][0]])
    if len(ncols):
        nodes = tf.stack(cols, -1)
    cgene = conn_valid(conns) & active[:, None]
    w = conns[..., CONN_WEIGHT]
    if "weight" in ccols:
        i, j = ccols["weight"]
        w = _mutate_float(cfg, "weight", w, cgene, uc[..., i], uc[..., j])
    en = conns[..., CONN_ENABLED]
    if "enabled" in ccols:
        r = uc[..., ccols["enabled"][0]]
        on, off = enabled_rates(cfg)
        on_now = tf.not_equal(en, 0.0)
        rate = tf.where(on_now, on, off)
        # a hit sets a random state: given r < min(rate, 1), r < min(rate, 1) / 2 is a fair coin
        half = tf.where(on_now, 0.5 * min(on, 1.0), 0.5 * min(off, 1.0))
        en = tf.where(cgene & (r < rate), tf.cast(r < half, tf.float32), en)
    if len(ccols):
        conns = tf.stack([conns[..., CONN_IN], conns[..., CONN_OUT], en, w, conns[..., CONN_MARKER]], -1)
    return nodes, conns


def mutate_attributes(cfg: NEATConfig, nodes, conns, active, seed):
    """Attribute mutation of every gene of the ``active`` genomes (perturb or
    replace bias/response/weight, replace activation/aggregation, flip
    enabled), all uniforms from one stateless draw."""
    P, N, C = tf.shape(nodes)[0], tf.shape(nodes)[1], tf.shape(conns)[1]
    ncols, kn, ccols, kc = attr_columns(cfg)
    u_all = tf.random.stateless_uniform(tf.stack([P, N * kn + C * kc]), seed)
    un = tf.reshape(u_all[:, :N * kn], tf.stack([P, N, kn]))
    uc = tf.reshape(u_all[:, N * kn:], tf.stack([P, C, kc]))
    return mutate_attributes_given(cfg, nodes, conns, active, un, uc, ncols, ccols)

