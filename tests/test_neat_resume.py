"""Exact resume of every NEAT problem and evaluator: a run checkpointed after a few
generations and restored into fresh objects in a new process continues bit for bit
as the uninterrupted run (feed-forward and recurrent, trimmed and full-width
control rollouts, C++ kernels and XLA references, XLA breeding, the Trainer)."""

import os
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import _neat_resume as R  # noqa: E402


@pytest.fixture(scope="module")
def resumed(tmp_path_factory):
    root = tmp_path_factory.mktemp("neat_resume")
    full = {c: R.first(c, str(root)) for c in R.CASES}
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(HERE), os.environ.get("PYTHONPATH", "")]))
    out = root / "resumed.npz"
    proc = subprocess.run([sys.executable, os.path.join(HERE, "_neat_resume.py"), str(out), str(root), *R.CASES],
                          env=env, timeout=900, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-4000:]
    data = np.load(out)
    res = {c: {} for c in R.CASES}
    for k in data.files:
        c, name = k.split("::", 1)
        res[c][name] = data[k]
    return full, res


@pytest.mark.parametrize("case", R.CASES)
def test_restored_run_in_new_process_is_bit_identical(resumed, case):
    full, res = resumed
    a, b = full[case], res[case]
    assert sorted(a) == sorted(b)
    differ = [k for k in a if not np.array_equal(a[k], b[k], equal_nan=a[k].dtype.kind == "f")]
    assert not differ, f"{case}: {len(differ)} of {len(a)} entries differ: {differ[:8]}"
    if "log" in a:
        assert a["log"].shape[0] == R.STOP + R.MORE
