"""tfevo: population-batched neuroevolution in TensorFlow.

Subpackages are imported lazily (``tfevo.strategies``, ``tfevo.nn``, ...), so
``import tfevo`` is cheap and one missing optional dependency does not break
the others.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_SUBMODULES = (
    "core", "registry", "nn", "strategies", "neat", "gp", "qd", "envs", "distribute",
    "rollout", "problems", "training", "ops",
)


def __getattr__(name):
    if name in _SUBMODULES:
        return importlib.import_module(f"tfevo.{name}")
    raise AttributeError(f"module 'tfevo' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + list(_SUBMODULES))
