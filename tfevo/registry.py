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
import re
from typing import Any, Callable

from tfevo.core import ConfigError, close_names

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
    "tfevo.neat.hyperneat_policy",
    "tfevo.gp",
    "tfevo.qd",
)


_ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|attr|data|obj|exc|const|ref|doc):`~?([^`]*)`")
_NO_BREAK = ("e.g.", "i.e.", "et al.", "etc.", "vs.", "cf.", "approx.")


def plain_text(rst: str) -> str:
    """reStructuredText inline markup -> plain text (``x`` -> x, :class:`a.B` -> a.B, *x* -> x)."""
    text = _ROLE.sub(lambda m: m.group(1).split(" <")[0], rst)
    text = re.sub(r"``([^`]*)``", r"\1", text)
    text = re.sub(r"`([^`]*)`_?", r"\1", text)
    text = re.sub(r"(?<![\w*])\*\*?([^*\s][^*]*?)\*\*?(?![\w*])", r"\1", text)
    return " ".join(text.split())


def summary(doc: str) -> str:
    """The first sentence of a docstring's first paragraph, as plain text (never cut mid-sentence)."""
    para = []
    for line in (doc or "").strip().splitlines():
        if not line.strip():
            break
        para.append(line.strip())
    text = plain_text(" ".join(para))
    for m in re.finditer(r"[.!?](?=\s+[A-Z(\[])", text):
        head = text[: m.end()]
        if not head.endswith(_NO_BREAK):
            return head
    return text


def natural_key(name: str):
    """Sort key putting bbob_f2 before bbob_f10 (digit runs compare as numbers)."""
    return [(0, int(t), "") if t.isdigit() else (1, 0, t.lower()) for t in re.split(r"(\d+)", name) if t]


def register(kind: str, name: str, doc: str | None = None) -> Callable:
    if kind not in _REGISTRY:
        raise ConfigError(f"unknown registry kind {kind!r}; known: {', '.join(KINDS)}")

    def deco(obj):
        _REGISTRY[kind][name] = obj
        _DOCS[kind][name] = plain_text(doc) if doc else summary(obj.__doc__ or "")
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
        known = ", ".join(sorted(table, key=natural_key)) or "(none)"
        close = close_names(str(name), table, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ConfigError(f"unknown {kind} {name!r}{hint}; known: {known}")
    return table[name]



def names(kind: str) -> dict[str, str]:
    """{name: one-sentence plain-text description} for a kind, in natural order (f2 before f10)."""
    load_all()
    return {k: _DOCS[kind][k] for k in sorted(_DOCS[kind], key=natural_key)}
