"""Every script in examples/ runs, at a toy budget (TFEVO_EXAMPLE_TOY=1), as ``__main__`` with its own
argv, sys.path entry and working directory, as a user would run it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted(p.name for p in (ROOT / "examples").glob("*.py") if not p.name.startswith("_"))


def test_every_example_has_a_toy_budget():
    """An example without a toy budget would run its full length in the suite (or be skipped)."""
    missing = [name for name in EXAMPLES if "budget(" not in (ROOT / "examples" / name).read_text()]
    assert not missing, f"examples without a toy budget (use examples/_toy.budget): {missing}"


# The examples run in a few batches, each one fresh interpreter running its scripts one after the
# other as ``__main__`` (tests/_script_batch.py): Python, TensorFlow and tfevo start once per batch
# instead of once per example.  Three batches: the two test workers share them out.
BATCHES = 3


@pytest.mark.parametrize("batch", range(BATCHES))
def test_example_runs(batch, tmp_path):
    from _script_batch import run_batch

    names = EXAMPLES[batch::BATCHES]
    env = {**os.environ, "TFEVO_EXAMPLE_TOY": "1", "MPLBACKEND": "Agg",
           "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    specs = [{"name": n, "path": str(ROOT / "examples" / n), "cwd": str(tmp_path / n)} for n in names]
    results = run_batch(specs, str(tmp_path), env, timeout=600 * len(names))
    assert [r["name"] for r in results] == names
    failed = [f"examples/{r['name']} failed:\n{r['output'][-2000:]}\n{r['error'][-4000:]}"
              for r in results if r["returncode"] != 0]
    assert not failed, "\n\n".join(failed)
