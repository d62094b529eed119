"""Evaluating compact genomes chunk by chunk.

:class:`GenomeEvaluator` wraps any parameter evaluator (in-graph or
pipelined) for algorithms whose population is not a ``[P, D]`` matrix but a
compact encoding with a ``decode`` (e.g. :class:`tfevo.strategies.SeedGA`'s
seed lists): the population is decoded and evaluated ``chunk_size`` members
at a time, so at most ``chunk_size x D`` parameters exist at once (a
population of 1000 Nature-DQN networks never does).
"""

from __future__ import annotations

import inspect

import numpy as np
import tensorflow as tf

from tfevo.core import ConfigError
from tfevo.rollout.normalization import merge_moments
from tfevo.registry import register

__all__ = ["GenomeEvaluator"]


def _parameters(fn) -> tuple:
    """Parameter names of ``fn`` (none if it has no inspectable signature)."""
    try:
        return tuple(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return ()


def _member_moments_total(count, mean, m2):
    """``(count, mean, m2)`` of all members' observations from per-member moments
    ``(count [n], mean [n, ...], m2 [n, ...])`` (one vectorized reduction in member order)."""
    n, mean, m2 = (np.asarray(v, np.float64) for v in (count, mean, m2))
    total = float(n.sum())
    if total <= 0:
        return 0.0, np.zeros(mean.shape[1:]), np.zeros(mean.shape[1:])
    w = n.reshape(-1, *([1] * (mean.ndim - 1)))
    mu = (w * mean).sum(axis=0) / total
    return total, mu, m2.sum(axis=0) + (w * (mean - mu) ** 2).sum(axis=0)


@register("evaluator", "genome", doc="decode compact genomes chunk by chunk, then evaluate with another evaluator")
class GenomeEvaluator:
    """``evaluate(genomes) -> fitness`` through ``decode`` and an inner evaluator.

    Args:
      evaluator: object with ``evaluate(params [n, D])`` (or a callable).
      decode: ``genomes [n, ...] -> params [n, D]`` (e.g. ``SeedGA.decode``).
      chunk_size: members decoded at once (default: all).  The result does
        not depend on it: an evaluator with per-call episode seeds
        (:class:`~tfevo.rollout.PipelinedEvaluator`) runs each member on the
        seeds one whole-population call would give it, and its ``calls``
        counter advances by one per population; an
        :class:`~tfevo.rollout.InGraphEvaluator` runs each member from the
        start states of one whole-population call (one seed per population).
        An observation normalizer that the evaluator updates stays fixed for
        the whole population and takes its observations once, after the last
        chunk (equal to an unchunked call's update up to float64 rounding).

    Attributes:
      last_frames: environment frames of the last call (summed over chunks).
    """

    def __init__(self, evaluator, decode, chunk_size: int | None = None):
        if chunk_size is not None and int(chunk_size) < 1:
            raise ConfigError(f"chunk_size must be >= 1, got {chunk_size}")
        self.evaluator = evaluator
        self.decode = decode
        self.chunk_size = None if chunk_size is None else int(chunk_size)
        self.last_frames = 0

    def _inner(self, params, seeds=None, rows=None, obs_moments=False):
        ev = self.evaluator
        if seeds is not None:
            out = ev.evaluate(params, episode_seeds=seeds, **({"obs_moments": True} if obs_moments else {}))
        elif rows is not None:
            out = ev.evaluate(params, member_offset=rows[0], popsize=rows[1])
        else:
            out = ev.evaluate(params) if hasattr(ev, "evaluate") else ev(params)
        from tfevo.training.trainer import frames_of

        return out, frames_of(ev, params.shape[0])

    def _population_seeds(self, p: int):
        """``(episode seeds [p, E], call counter)`` of an evaluator that draws them per call, else ``(None, None)``."""
        ev = self.evaluator
        calls = getattr(ev, "calls", None)
        if not (callable(getattr(ev, "episode_seeds", None)) and isinstance(calls, tf.Variable)
                and "episode_seeds" in _parameters(ev.evaluate)):
            return None, None
        return np.asarray(ev.episode_seeds(p)), calls

    def evaluate(self, genomes):
        genomes = tf.convert_to_tensor(genomes)
        p = int(genomes.shape[0])
        step = self.chunk_size or p
        # An evaluator that draws episode seeds per call (PipelinedEvaluator)
        # gets the seeds of one call for the whole population, sliced per
        # chunk, and counts one call: the chunk size changes no member's
        # episodes (common random numbers stay common across chunks).
        seeds, calls = self._population_seeds(p) if step < p else (None, None)
        call0 = None if calls is None else int(calls.numpy())
        # An in-graph evaluator (InGraphEvaluator) is told which rows of the population each
        # chunk holds: it draws one seed per population and each member's own start states.
        ev = self.evaluator
        evaluate_params = _parameters(getattr(ev, "evaluate", None))
        by_rows = seeds is None and step < p and "member_offset" in evaluate_params
        # Its observation normalizer stays as it was for the whole population (as in one call) and
        # takes the population's observation moments once, after the last chunk.
        hold_norm = (seeds is not None and getattr(ev, "obs_norm", None) is not None
                     and getattr(ev, "update_obs_norm", False) and "obs_moments" in evaluate_params)
        moments = (0.0, 0.0, 0.0)
        outs, frames = [], 0
        if hold_norm:
            ev.update_obs_norm = False
        try:
            for start in range(0, p, step):
                out, fr = self._inner(self.decode(genomes[start:start + step]),
                                      None if seeds is None else seeds[start:start + step],
                                      (start, p) if by_rows else None, hold_norm)
                if hold_norm:
                    moments = merge_moments(moments, _member_moments_total(*ev.last_stats["member_obs_moments"]))
                outs.append(out)
                frames += fr
        finally:
            if hold_norm:
                ev.update_obs_norm = True
        if hold_norm and moments[0] > 0:
            ev.obs_norm.merge(*moments)
        if calls is not None:
            calls.assign(call0 + 1)
        self.last_frames = frames
        if isinstance(outs[0], (tuple, list)):
            return tuple(tf.concat([o[i] for o in outs], axis=0) for i in range(len(outs[0])))
        return tf.concat(outs, axis=0)

    __call__ = evaluate
