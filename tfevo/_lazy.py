"""Import the listed modules of a subpackage, re-exporting their ``__all__``."""

from __future__ import annotations

import importlib


def import_parts(package: str, modules: tuple, namespace: dict, keep=None) -> list:
    """Imports ``package.<m>`` for every ``m`` in ``modules`` into ``namespace``.

    Only the objects for which ``keep(obj)`` holds are re-exported, if ``keep``
    is given. A listed module that cannot be imported is an error, never
    skipped: a misspelt or missing module would otherwise leave its algorithms
    silently unregistered.
    """
    exported = []
    for mod in modules:
        m = importlib.import_module(f"{package}.{mod}")
        for name in getattr(m, "__all__", ()):
            if keep is not None and not keep(getattr(m, name)):
                continue
            namespace[name] = getattr(m, name)
            exported.append(name)
    return exported
