import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

sys.path.insert(0, str(Path(__file__).parent))
from _toy_run import NoisySphere, ToyES, build  # noqa: E402

from tfevo.core import ConfigError
from tfevo.training import Trainer
from tfevo.training.trainer import FitnessError

HERE = Path(__file__).parent


def test_trainer_improves_and_logs(tmp_path):
    trainer, algo = build(tmp_path / "run", 25)
    hist = trainer.run()
    assert len(hist) == 25
    assert hist[-1].best > hist[0].best + 10  # sphere from m=3*ones(5): f0 ~ -45
    lines = (tmp_path / "run" / "progress.jsonl").read_text().splitlines()
    assert [json.loads(l)["generation"] for l in lines] == list(range(1, 26))
    assert list((tmp_path / "run" / "tensorboard").glob("events.out.tfevents.*"))
    best = trainer.best_individual().numpy()
    assert -np.sum(best**2) >= hist[-1].best - 0.1
    assert float(trainer.best_fitness.numpy()) == pytest.approx(max(h.best for h in hist))


def test_resume_in_process_continues_exactly(tmp_path):
    full, algo_full = build(tmp_path / "a", 12)
    full.run()
    part, _ = build(tmp_path / "b", 5)
    part.run()
    resumed, algo_res = build(tmp_path / "b", 12)
    assert resumed.restored_from is not None and int(resumed.generation.numpy()) == 5
    resumed.run()
    np.testing.assert_array_equal(algo_full.m.numpy(), algo_res.m.numpy())
    fa = [json.loads(l)["best"] for l in (tmp_path / "a" / "progress.jsonl").read_text().splitlines()]
    fb = [json.loads(l)["best"] for l in (tmp_path / "b" / "progress.jsonl").read_text().splitlines()]
    assert fa == fb


def test_sigkill_mid_generation_resumes_exactly(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(HERE.parents[1]) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    script = str(HERE / "_toy_run.py")
    # the uninterrupted reference and the resumed run go in-process (the same script code,
    # deterministic on the CPU); only the killed run needs a process of its own
    trainer, algo = build(str(tmp_path / "ref"), 10)
    trainer.run()
    ref_mean = algo.m.numpy()
    # Killed inside the 7th evaluation (after 6 checkpoints were written).
    proc = subprocess.Popen([sys.executable, script, str(tmp_path / "run"), "10", "7"], env=env,
                            stdout=subprocess.PIPE, text=True)
    deadline = time.time() + 240
    line = ""
    while time.time() < deadline:
        line = proc.stdout.readline()
        if "SLEEPING" in line or not line:
            break
    assert "SLEEPING" in line
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    trainer, algo = build(str(tmp_path / "run"), 10)  # resumes from the killed run's checkpoint
    trainer.run()
    assert int(trainer.generation.numpy()) == 10
    assert trainer._evaluator.calls == 4  # resumed after generation 6, not started again
    np.testing.assert_array_equal(ref_mean, algo.m.numpy())
    gens = [json.loads(l)["generation"] for l in (tmp_path / "run" / "progress.jsonl").read_text().splitlines()]
    assert gens == list(range(1, 11))


def test_budget_and_bad_input(tmp_path):
    algo = ToyES(num_dims=3, popsize=8, seed=0)
    with pytest.raises(ConfigError, match="budget"):
        Trainer(algo, NoisySphere(0))
    with pytest.raises(ConfigError, match="checkpoint_every"):
        Trainer(algo, NoisySphere(0), generations=2, checkpoint_every=0)
    t = Trainer(algo, lambda x: tf.zeros([8, 2]), generations=2, progress=False)
    with pytest.raises(FitnessError, match="shape"):
        t.run()
    # frame budget: one frame per evaluation when the evaluator does not count frames
    t = Trainer(ToyES(num_dims=3, popsize=8, seed=0), NoisySphere(0), frames=20, progress=False)
    assert len(t.run()) == 3


def test_nan_fitness_is_worst_and_does_not_break_run():
    algo = ToyES(num_dims=3, popsize=8, seed=0)

    def ev(x):
        f = -tf.reduce_sum(x * x, 1)
        return tf.tensor_scatter_nd_update(f, [[0]], [np.nan])

    hist = Trainer(algo, ev, generations=5, progress=False).run()
    assert all(np.isfinite(h.best) for h in hist)
    assert np.all(np.isfinite(algo.m.numpy()))
