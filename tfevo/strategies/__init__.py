"""Ask/tell evolution strategies and genetic algorithms on flat vectors ``[P, D]``.

Every strategy is a :class:`tfevo.core.Algorithm` (a ``tf.Module``; checkpoint it
with ``tf.train.Checkpoint``), registered under a short name for configs and
``tfevo list``.  This namespace holds the algorithms only; their building blocks
live in their own modules (``tfevo.strategies.shaping.ranks``,
``tfevo.strategies.optimizers.Adam``, ``tfevo.strategies.ga.elitist_truncation``, ...).
"""

from tfevo._lazy import import_parts

_MODULES = (
    "open_es", "pgpe", "ars", "snes", "xnes", "ga", "random_search", "de", "pso",
    "cma_es", "sep_cma_es", "restarts", "lm_ma_es", "seed_ga",
)


def _is_algorithm(obj) -> bool:
    from tfevo.core import Algorithm

    return isinstance(obj, type) and issubclass(obj, Algorithm)


__all__ = import_parts(__name__, _MODULES, globals(), keep=_is_algorithm)
