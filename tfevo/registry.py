"""Name -> object registries behind ``tfevo list`` and config files.

Each part of the package registers what a user may name in a config or on the
command line::

    @register("strategy", "cma_es")
    class CMAES(Algorithm): ...

``get("strategy", "cma_es")`` looks it up with a clear error listing the known
names; ``names("strategy")`` lists them.  Kinds: ``strategy``, ``env``,
``problem``, ``policy``, ``evaluator``.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable

from tfevo.core import ConfigError

KINDS = ("strategy", "env", "problem", "policy", "evaluator")
_REGISTRY: dict[str, dict[str, Any]] = {k: {} for k in KINDS}
_DOCS: dict[str, dict[str, str]] = {k: {} for k in KINDS}

# Modules imported by ``load_all`` so every registration has run.
_MODULES = (
    "tfevo.strategies",
    "tfevo.envs",
    "tfevo.problems",
    "tfevo.nn",
    "tfevo.rollout",
    "tfevo.neat",
    "tfevo.gp",
    "tfevo.qd",
)


def register(kind: str, name: str, doc: str | None = None) -> Callable:
    if kind not in _REGISTRY:
        raise ConfigError(f"unknown registry kind {kind!r}; known: {', '.join(KINDS)}")

    def deco(obj):
        _REGISTRY[kind][name] = obj
        text = doc or (obj.__doc__ or "").strip().splitlines()[0:1]
        _DOCS[kind][name] = text if isinstance(text, str) else (text[0] if text else "")
        return obj

    return deco


def load_all() -> None:
    """Imports every subpackage that registers names (missing ones are skipped)."""
    for mod in _MODULES:
        try:
            importlib.import_module(mod)
        except ModuleNotFoundError as e:  # a part not installed/built yet
            if not (e.name or "").startswith("tfevo"):
                raise


def get(kind: str, name: str) -> Any:
    load_all()
    table = _REGISTRY.get(kind)
    if table is None:
        raise ConfigError(f"unknown registry kind {kind!r}; known: {', '.join(KINDS)}")
    if name not in table:
        known = ", ".join(sorted(table)) or "(none)"
        raise ConfigError(f"unknown {kind} {name!r}; known {kind}s: {known}")
    return table[name]


def names(kind: str) -> dict[str, str]:
    """{name: one-line description} for a kind."""
    load_all()
    return dict(sorted(_DOCS[kind].items()))
