"""The documentation is part of the product: the site builds strictly, the
docstring examples run, and every README code block runs as written."""

from __future__ import annotations

import doctest
import importlib
import os
import pkgutil
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _docstring_modules():
    """Every tfevo module whose docstrings hold an interactive example."""
    found = []
    for path in sorted((ROOT / "tfevo").rglob("*.py")):
        if ">>>" in path.read_text(encoding="utf-8"):
            rel = path.relative_to(ROOT).with_suffix("")
            parts = list(rel.parts)
            if parts[-1] == "__init__":
                parts.pop()
            found.append(".".join(parts))
    return found


def _readme_blocks():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


@pytest.mark.skipif(shutil.which("mkdocs") is None, reason="mkdocs is in the test extra")
def test_docs_site_builds_strictly(tmp_path):
    """Broken links, missing pages and bad API references fail the build."""
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "-d", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / "site" / "index.html").exists()
    # the API reference is rendered from the docstrings, not left empty
    api = (tmp_path / "site" / "api" / "strategies" / "index.html").read_text(encoding="utf-8")
    assert "tfevo.strategies.open_es.OpenES" in api


def test_every_docstring_module_is_found():
    mods = _docstring_modules()
    assert "tfevo.core" in mods and len(mods) >= 10
    names = {m.name for m in pkgutil.walk_packages([str(ROOT / "tfevo")], "tfevo.")}
    assert set(mods) <= names | {"tfevo"}


@pytest.mark.parametrize("module", _docstring_modules())
def test_docstring_examples_run(module, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # examples that write files write them here
    mod = importlib.import_module(module)
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    tests = [t for t in finder.find(mod, module) if t.examples]
    # only the docstrings written in this module, not ones of names it imports
    tests = [t for t in tests if t.filename and Path(t.filename).resolve() == Path(mod.__file__).resolve()]
    report = []
    # an example may register GP functions in the global table (register_function's does): put the
    # table back afterwards, or later tests would meet functions whose example globals are gone
    from tfevo.gp import functions as gp_functions
    table, by_id = dict(gp_functions._TABLE), dict(gp_functions._BY_ID)
    try:
        for t in tests:
            runner.run(t, out=report.append)
    finally:
        gp_functions._TABLE.clear(), gp_functions._TABLE.update(table)
        gp_functions._BY_ID.clear(), gp_functions._BY_ID.update(by_id)
    failed = sum(r.failed for r in [runner.summarize(verbose=False)])
    assert failed == 0, f"docstring examples of {module} failed:\n" + "".join(report)[-4000:]


def test_readme_has_one_example_per_family():
    blocks = "\n".join(_readme_blocks())
    for family in ("tfevo.strategies", "tfevo.nn", "tfevo.neat", "tfevo.gp", "tfevo.qd", "tfevo.rollout"):
        assert f"from {family} import" in blocks, family
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 400


# The README blocks run in two batches, each one fresh interpreter running its blocks one after the
# other as ``python -c BLOCK`` would (tests/_script_batch.py: own ``__main__`` globals and working
# directory per block): Python, TensorFlow and tfevo start twice instead of once per block.
README_BATCHES = 2


@pytest.mark.parametrize("batch", range(README_BATCHES))
def test_readme_code_block_runs(batch, tmp_path):
    """Each README example runs as a fresh script, as a reader would paste it."""
    from _script_batch import run_batch

    blocks = _readme_blocks()
    indices = list(range(len(blocks)))[batch::README_BATCHES]
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    specs = [{"name": f"block{i}", "code": blocks[i], "cwd": str(tmp_path / f"block{i}")} for i in indices]
    results = run_batch(specs, str(tmp_path), env, timeout=600 * len(indices))
    assert [r["name"] for r in results] == [s["name"] for s in specs]
    failed = [f"README block {i} failed:\n{blocks[i]}\n{r['output'][-1000:]}\n{r['error'][-3000:]}"
              for i, r in zip(indices, results) if r["returncode"] != 0]
    assert not failed, "\n\n".join(failed)


# The docs pages' examples (tests/_docs_blocks.py): every ```python block and every `tfevo ...` line of a
# ```bash block, a page's blocks in page order in one namespace, with the test sizes its
# <!-- test: replace ... --> comments give.  Two interpreters share the pages out; a page that sets up
# devices before any TensorFlow op (make_strategy, --devices) goes first in its interpreter.
DOCS_BATCHES = (("distribute.md",), ("multi_machine.md",))


def _docs_batches():
    from _docs_blocks import DOCS

    batches = [list(b) for b in DOCS_BATCHES]
    fixed = {p for b in DOCS_BATCHES for p in b}
    rest = [p.name for p in sorted(DOCS.glob("*.md")) if p.name not in fixed]
    for i, page in enumerate(rest):
        batches[i % len(batches)].append(page)
    return batches


def test_docs_directives_are_current():
    """Every replace comment names text its block holds, and the skips are few and give a reason."""
    from _docs_blocks import blocks, command_lines, suite_code

    python, bash = blocks("python"), [b for b in blocks("bash") if command_lines(b)]
    for b in python + bash:
        suite_code(b)  # ValueError on a stale OLD
    skipped = [(b["page"], b["line"], b["skip"]) for b in python + bash if b["skip"]]
    assert all(reason and reason != "no reason given" for *_, reason in skipped), skipped
    assert len(python) >= 30 and len(skipped) <= 3, (len(python), skipped)


@pytest.mark.parametrize("batch", range(len(DOCS_BATCHES)))
def test_docs_code_blocks_run(batch, tmp_path):
    """Each docs page's examples run as a reader pastes them (at the sizes the test comments give)."""
    from _docs_blocks import page_specs
    from _script_batch import run_batch

    specs, skipped = [], []
    for page in _docs_batches()[batch]:
        page_spec, page_skipped = page_specs(page, str(tmp_path), full=False)
        specs += page_spec
        skipped += page_skipped
    env = {**os.environ, "MPLBACKEND": "Agg",
           "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    results = run_batch(specs, str(tmp_path), env, timeout=1800)
    assert [r["name"] for r in results] == [s["name"] for s in specs]
    code = {s["name"]: s["code"] for s in specs}
    failed = [f"{r['name']} failed:\n{code[r['name']]}\n{r['output'][-1000:]}\n{r['error'][-3000:]}"
              for r in results if r["returncode"] != 0]
    assert not failed, "\n\n".join(failed)


def _skipped_docs_blocks():
    from _docs_blocks import blocks, command_lines

    return [(f"{b['page']}:{b['line']}", b["skip"]) for b in blocks(None)
            if b["skip"] and (b["lang"] == "python" or (b["lang"] == "bash" and command_lines(b)))]


@pytest.mark.parametrize("name, reason", _skipped_docs_blocks())
def test_docs_block_not_run(name, reason):
    """The blocks marked <!-- test: skip REASON -->, listed with their reason in the skip summary."""
    pytest.skip(f"docs example {name} not run: {reason}")
