"""Every script in examples/ runs, at a toy budget (TFEVO_EXAMPLE_TOY=1), as a user would run it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted(p.name for p in (ROOT / "examples").glob("*.py") if not p.name.startswith("_"))


def test_every_example_has_a_toy_budget():
    """An example without a toy budget would run its full length in the suite (or be skipped)."""
    missing = [name for name in EXAMPLES if "budget(" not in (ROOT / "examples" / name).read_text()]
    assert not missing, f"examples without a toy budget (use examples/_toy.budget): {missing}"


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_runs(name, tmp_path):
    env = {**os.environ, "TFEVO_EXAMPLE_TOY": "1", "MPLBACKEND": "Agg",
           "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / name)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"examples/{name} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
