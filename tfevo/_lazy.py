"""Import the modules of a subpackage that exist, re-exporting their ``__all__``."""

from __future__ import annotations

import importlib


def import_parts(package: str, modules: tuple, namespace: dict, keep=None) -> list:
    """Imports ``package.<module>`` for each module that exists and re-exports its
    ``__all__`` (only the objects for which ``keep(obj)`` holds, if given)."""
    exported = []
    for mod in modules:
        try:
            m = importlib.import_module(f"{package}.{mod}")
        except ModuleNotFoundError as e:
            if e.name == f"{package}.{mod}":  # that part is not written/installed
                continue
            raise
        for name in getattr(m, "__all__", ()):
            if keep is not None and not keep(getattr(m, name)):
                continue
            namespace[name] = getattr(m, name)
            exported.append(name)
    return exported
