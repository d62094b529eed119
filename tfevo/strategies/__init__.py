"""Ask/tell evolution strategies and genetic algorithms on flat vectors ``[P, D]``.

Every strategy is a :class:`tfevo.core.Algorithm` (a ``tf.Module``; checkpoint it
with ``tf.train.Checkpoint``), registered under a short name for configs and
``tfevo list``.
"""

from tfevo._lazy import import_parts

_MODULES = (
    "shaping", "optimizers",
    "open_es", "pgpe", "ars", "snes", "xnes", "ga", "random_search", "de", "pso",
    "cma_es", "sep_cma_es", "restarts", "lm_ma_es", "seed_ga",
)
__all__ = import_parts(__name__, _MODULES, globals())
