"""Quality-diversity: MAP-Elites archives, emitters, the ask/tell scheduler, tasks and plots."""

from tfevo._lazy import import_parts

_MODULES = ("archives", "emitters", "map_elites", "tasks", "plots")
__all__ = import_parts(__name__, _MODULES, globals())
