"""Evaluators: in-graph rollouts and the pipelined host scheduler."""

from tfevo._lazy import import_parts

_MODULES = ("ingraph", "pipelined", "normalization", "decoded", "simulated")
__all__ = import_parts(__name__, _MODULES, globals())
