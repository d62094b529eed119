"""The generation loop (:class:`Trainer`), run configs and the ``tfevo`` CLI."""

from tfevo._lazy import import_parts

_MODULES = ("trainer", "config", "builders")
__all__ = import_parts(__name__, _MODULES, globals())
