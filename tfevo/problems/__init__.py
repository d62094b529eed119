"""Fitness problems: BBOB, symbolic regression, classification, control tasks."""

from tfevo._lazy import import_parts

_MODULES = ("bbob", "control", "regression", "classification")
__all__ = import_parts(__name__, _MODULES, globals())
