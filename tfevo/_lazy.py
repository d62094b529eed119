"""Import the listed modules of a subpackage, re-exporting their ``__all__``."""

from __future__ import annotations

import importlib


def import_parts(package: str, modules: tuple, namespace: dict) -> list:
    """Imports ``package.<m>`` for every ``m`` in ``modules`` into ``namespace``.

    A listed module that cannot be imported is an error, never skipped: a
    misspelt or missing module would otherwise leave its algorithms silently
    unregistered.
    """
    exported = []
    for mod in modules:
        m = importlib.import_module(f"{package}.{mod}")
        for name in getattr(m, "__all__", ()):
            namespace[name] = getattr(m, name)
            exported.append(name)
    return exported
