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

_RUNS = {}


def _run_group(cases, tmp_path_factory):
    """The uninterrupted runs (this process) and the restored ones (one fresh process for all cases)."""
    key = tuple(cases)
    if key not in _RUNS:
        root = tmp_path_factory.mktemp("neat_resume")
        full = {c: R.first(c, str(root)) for c in cases}
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(os.path.dirname(HERE)), os.environ.get("PYTHONPATH", "")]))
        out = root / "resumed.npz"
        proc = subprocess.run([sys.executable, os.path.join(HERE, "_neat_resume.py"), str(out), str(root), *cases],
                              env=env, timeout=900, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr[-4000:]
        data = np.load(out)
        res = {c: {} for c in cases}
        for k in data.files:
            c, name = k.split("::", 1)
            res[c][name] = data[k]
        _RUNS[key] = full, res
    return _RUNS[key]


def _check(full, res, case):
    a, b = full[case], res[case]
    assert sorted(a) == sorted(b)
    differ = [k for k in a if not np.array_equal(a[k], b[k], equal_nan=a[k].dtype.kind == "f")]
    assert not differ, f"{case}: {len(differ)} of {len(a)} entries differ: {differ[:8]}"
    if "log" in a:
        assert a["log"].shape[0] == R.STOP + R.MORE
    if case in ("xor", "xor3_recurrent", "function_fit", "xor_f32"):  # both fitness types are covered
        want = np.float32 if case.endswith("_f32") else np.float64
        assert a["fit0"].dtype == want
        assert [a[k].dtype for k in a if k.endswith("/best_fitness:0")] == [want]


@pytest.mark.parametrize("case", R.CASES)
def test_restored_run_in_new_process_is_bit_identical(tmp_path_factory, case):
    _check(*_run_group(R.CASES, tmp_path_factory), case)


@pytest.mark.slow
@pytest.mark.parametrize("case", R.SLOW_CASES)
def test_restored_xla_run_in_new_process_is_bit_identical(tmp_path_factory, case):
    _check(*_run_group(R.SLOW_CASES, tmp_path_factory), case)


def test_trimmed_rollouts_share_one_seed_stream_and_equal_full_width(tmp_path):
    """Every per-width evaluator of a ControlProblem draws from the problem's one seed
    stream: a trimmed run's fitness equals the full-width run's bit for bit, and the
    problem's checkpoint holds that stream."""
    import tensorflow as tf

    from tfevo.neat.policy import ControlProblem

    algo, _, _ = R.build("cartpole_ff_trim")
    cfg = algo.config
    trim = ControlProblem("CartPole-v1", cfg, episodes=2, max_steps=40, seed=7)
    full = ControlProblem("CartPole-v1", cfg, episodes=2, max_steps=40, seed=7, trim=False)
    widths = set()
    for _ in range(4):
        pop = algo.ask()
        ev, n, _ = trim._evaluator_for(pop.nodes, pop.conns)
        widths.add(n.shape[1])
        f = trim(pop).numpy()
        np.testing.assert_array_equal(f, full(pop).numpy())
        assert trim.last_frames == full.last_frames > 0
        algo.tell(pop, f)
    assert len(trim._trimmed) >= 1 and all(e.seeds is trim.seeds for e in trim._trimmed.values())
    assert int(trim.seeds.counter.numpy()) == 4
    names = [n for n, _ in tf.train.list_variables(tf.train.Checkpoint(p=trim).write(str(tmp_path / "p")))]
    assert any("seeds/counter" in n for n in names)
