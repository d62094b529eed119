"""Progress output, budgets, and logs after resume (progress.jsonl, TensorBoard, dead checkpoint files)."""

import json
import re
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

TIMING = ("wall_time", "generation_seconds", "frames_per_second", "compile_seconds")


class Crash(RuntimeError):
    pass


class CrashingSphere(NoisySphere):
    """The toy evaluator, dying (like a killed process) inside its ``crash_at``-th call."""

    def __init__(self, seed, crash_at):
        super().__init__(seed)
        self.crash_at = crash_at

    def evaluate(self, x):
        if self.calls + 1 == self.crash_at:
            raise Crash("killed")
        return super().evaluate(x)


def _rows(run_dir):
    rows = [json.loads(l) for l in (Path(run_dir) / "progress.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k not in TIMING} for r in rows]


def _events(run_dir, tag="fitness/best"):
    """(step, value) of every ``tag`` summary in the run's TensorBoard event files, in file order."""
    from tensorflow.core.util import event_pb2

    out = []
    for path in sorted((Path(run_dir) / "tensorboard").glob("events.out.tfevents.*")):
        for raw in tf.data.TFRecordDataset(str(path)).as_numpy_iterator():
            ev = event_pb2.Event.FromString(raw)
            for v in ev.summary.value:
                if v.tag == tag:
                    out.append((ev.step, float(tf.make_ndarray(v.tensor))))
    return out


@pytest.mark.parametrize("crash_at, checkpoint_every", [(3, 5), (7, 4)], ids=["before-first-ckpt", "after-ckpt-4"])
def test_resumed_logs_equal_the_uninterrupted_run(tmp_path, crash_at, checkpoint_every):
    ref, _ = build(tmp_path / "ref", 9)
    ref.run()
    run = tmp_path / "run"
    t = Trainer(ToyES(num_dims=5, popsize=16, seed=1), CrashingSphere(2, crash_at), run_dir=run, generations=9,
                checkpoint_every=checkpoint_every, progress=False, verbose=False)
    with pytest.raises(Crash):
        t.run()
    assert len(_rows(run)) == crash_at - 1  # generations logged after the last checkpoint
    del t
    events = sorted((run / "tensorboard").glob("events.out.tfevents.*"))
    with open(events[-1], "ab") as fh:  # a record cut short by the kill
        fh.write(b"\x2a\x00\x00\x00\x00\x00\x00\x00\x01\x02")
    with open(run / "progress.jsonl", "a") as fh:  # and a half-written log line
        fh.write('{"generation": ')
    resumed, _ = build(run, 9)
    assert int(resumed.generation.numpy()) == (crash_at - 1) // checkpoint_every * checkpoint_every
    resumed.run()
    assert _rows(run) == _rows(tmp_path / "ref")
    ev_ref, ev_run = _events(tmp_path / "ref"), _events(run)
    assert [s for s, _ in ev_run] == list(range(1, 10))  # each step once
    assert ev_run == ev_ref


def test_dead_checkpoint_files_are_cleaned_on_resume(tmp_path):
    run = tmp_path / "run"
    t, _ = build(run, 4)
    t.run()
    ckpt = run / "checkpoints"
    live = sorted(p.name for p in ckpt.iterdir())
    # what a write killed midway leaves: the temporary directory of a sharded save,
    # a temporary index file, and data files of a checkpoint the index never named
    (ckpt / "ckpt-5_temp").mkdir()
    (ckpt / "ckpt-5_temp" / "part-00000-of-00001.data-00000-of-00001").write_bytes(b"x" * 100)
    (ckpt / "checkpoint.tmp3f2a1b").write_text("partial")
    (ckpt / "ckpt-5.index").write_bytes(b"partial")
    resumed, _ = build(run, 4)
    assert int(resumed.generation.numpy()) == 4
    assert sorted(p.name for p in ckpt.iterdir()) == live


def test_progress_lines_when_stdout_is_not_a_terminal(tmp_path, capsys):
    t = Trainer(ToyES(num_dims=5, popsize=16, seed=1), NoisySphere(2), generations=5, progress=True,
                progress_every=0, verbose=False)
    t.run()
    lines = [l for l in capsys.readouterr().out.splitlines() if l.startswith("tfevo: gen")]
    assert len(lines) == 5
    for g, line in enumerate(lines, 1):
        for field in (f"gen {g}/5", "frames ", "best ", "mean ", "frames/s", "ETA "):
            assert field in line, (field, line)
    assert re.search(r"ETA 0:00:00", lines[-1])
    # fast generations: at most one line per progress_every seconds, plus the first and the last
    t = Trainer(ToyES(num_dims=5, popsize=16, seed=1), NoisySphere(2), generations=6, progress=True,
                progress_every=3600, verbose=False)
    t.run()
    lines = [l for l in capsys.readouterr().out.splitlines() if l.startswith("tfevo: gen")]
    assert [l.split(" | ")[0] for l in lines] == ["tfevo: gen 1/6", "tfevo: gen 6/6"]


def test_seconds_budget_shows_total_and_eta(capsys):
    def ev(x):
        time.sleep(0.05)
        return -tf.reduce_sum(x * x, 1)

    # a budget long enough for several generations even on a loaded machine
    t = Trainer(ToyES(num_dims=3, popsize=8, seed=0), ev, seconds=4.0, progress=True, progress_every=0)
    t.run()
    lines = [l for l in capsys.readouterr().out.splitlines() if l.startswith("tfevo: gen")]
    assert len(lines) >= 3
    m = re.search(r"time (\d+:\d\d:\d\d)/0:00:04 \| ETA (\d+:\d\d:\d\d)", lines[0])
    assert m, lines[0]
    # the ETA of a seconds budget is what is left of it
    def ev_dies(x):  # stops the run long before its 125 s budget
        if int(t.generation.numpy()) == 2:
            raise Crash("killed")
        return ev(x)

    t = Trainer(ToyES(num_dims=3, popsize=8, seed=0), ev_dies, seconds=125, progress=True, progress_every=0)
    with pytest.raises(Crash):
        t.run()
    first = [l for l in capsys.readouterr().out.splitlines() if l.startswith("tfevo: gen")][0]
    m = re.search(r"time 0:(\d\d):(\d\d)/0:02:05 \| ETA 0:(\d\d):(\d\d)", first)
    assert m, first
    spent, left = (int(m[1]) * 60 + int(m[2])), (int(m[3]) * 60 + int(m[4]))
    assert 124 <= spent + left <= 126, first  # elapsed + ETA = the budget, up to the display's rounding


def test_tracing_time_is_reported_apart_from_generation_time():
    class SlowTrace:
        """An evaluator whose tf.function takes >= 3 s to trace, then runs fast (margins for a loaded machine)."""

        def __init__(self):
            self.fn = tf.function(self._f)

        def _f(self, x):
            time.sleep(3.0)  # Python runs only while tracing
            return -tf.reduce_sum(x * x, 1)

        def evaluate(self, x):
            return self.fn(x)

    hist = Trainer(ToyES(num_dims=3, popsize=8, seed=0), SlowTrace(), generations=3, progress=False).run()
    assert hist[0].compile_seconds >= 3.0
    assert hist[0].generation_seconds < 2.5  # the tracing is not in generation 1's time...
    assert hist[0].wall_time >= 3.0  # ...but it is in the run's wall time
    assert hist[1].compile_seconds == pytest.approx(0.0, abs=0.05)


@pytest.mark.parametrize("kw", [dict(generations=0), dict(generations=-3), dict(generations=2.5),
                                dict(generations=True), dict(frames=0), dict(seconds=0.0),
                                dict(seconds=float("nan")), dict(seconds=float("inf"))])
def test_trainer_refuses_invalid_budgets(kw):
    name = next(iter(kw))
    with pytest.raises(ConfigError, match=f"{name} budget must be"):
        Trainer(ToyES(num_dims=3, popsize=8, seed=0), NoisySphere(0), **kw)


@pytest.mark.parametrize("flag, value, field", [("--generations", "0", "run.generations"),
                                                ("--generations", "-2", "run.generations"),
                                                ("--frames", "0", "run.frames"),
                                                ("--seconds", "0", "run.seconds"),
                                                ("--seconds", "nan", "run.seconds"),
                                                ("--progress-every", "-1", "--progress-every")])
def test_cli_refuses_invalid_budgets_like_the_config(tmp_path, capsys, flag, value, field):
    from tfevo.cli import main

    assert main(["train", "--run-dir", str(tmp_path / "r"), flag, value]) == 2
    err = capsys.readouterr().err
    assert field in err
    assert not (tmp_path / "r").exists()  # refused before any work


def test_eta_leaves_out_the_first_generations_one_off_costs(capsys):
    calls = []

    def ev(x):  # the first call pays a one-off 3 s (like XLA compiling), later ones are fast
        calls.append(1)
        time.sleep(3.0 if len(calls) == 1 else 0.02)
        return -tf.reduce_sum(x * x, 1)

    Trainer(ToyES(num_dims=3, popsize=8, seed=0), ev, generations=10, progress=True, progress_every=0).run()
    lines = [l for l in capsys.readouterr().out.splitlines() if l.startswith("tfevo: gen 2/10")]
    h, m, s = map(int, re.search(r"ETA (\d+):(\d\d):(\d\d)", lines[0]).groups())
    assert h * 3600 + m * 60 + s < 6, lines[0]  # 8 more fast generations, not 8 x the mean with the 3 s


def test_tensorboard_holds_every_logged_value_of_every_generation(tmp_path):
    """Each progress.jsonl field is a TensorBoard scalar with step = generation, once per generation,
    equal (as float32) to the logged value; also across a resume with a raised budget."""
    from tensorflow.core.util import event_pb2

    build(tmp_path, 3)[0].run()
    build(tmp_path, 5)[0].run()  # resumed at generation 3
    build(tmp_path, 5)[0].run()  # a finished run: nothing new
    rows = [json.loads(l) for l in (tmp_path / "progress.jsonl").read_text().splitlines()]
    scalars = {}
    for path in sorted((tmp_path / "tensorboard").glob("events.out.tfevents.*")):
        for raw in tf.data.TFRecordDataset(str(path)).as_numpy_iterator():
            ev = event_pb2.Event.FromString(raw)
            for v in ev.summary.value:
                scalars.setdefault(v.tag.split("/", 1)[1], []).append((ev.step, float(tf.make_ndarray(v.tensor))))
    assert sorted(scalars) == sorted(k for k in rows[0] if k != "generation")
    for key, events in scalars.items():
        assert [s for s, _ in events] == [1, 2, 3, 4, 5], key
        assert [np.float32(v) for _, v in events] == [np.float32(r[key]) for r in rows], key


@pytest.mark.parametrize("algo, field", [
    (lambda: ToyES(num_dims=5, popsize=24, seed=1), "popsize: 16 in the run, 24 now"),
    (lambda: ToyES(num_dims=5, popsize=16, seed=7), "seed: 1 in the run, 7 now"),
    (lambda: ToyES(num_dims=6, popsize=16, seed=1), "num_dims: 5 in the run, 6 now"),
])
def test_resume_with_other_algorithm_settings_is_refused(tmp_path, algo, field):
    """A checkpoint restores the algorithm's variables (seed stream included) but not its Python
    settings, so another popsize or seed continued the old run under the new settings silently."""
    build(tmp_path, 2)[0].run()
    log = (tmp_path / "progress.jsonl").read_text()
    with pytest.raises(ConfigError, match=re.escape(field)):
        Trainer(algo(), NoisySphere(2), run_dir=tmp_path, generations=4, progress=False, verbose=False)
    assert (tmp_path / "progress.jsonl").read_text() == log  # nothing touched
    resumed, _ = build(tmp_path, 4)  # the run's own settings still resume
    assert int(resumed.generation.numpy()) == 2


def test_resume_with_another_algorithm_class_is_refused(tmp_path):
    from tfevo.strategies import OpenES

    Trainer(OpenES(num_dims=5, popsize=16, seed=1), NoisySphere(2), run_dir=tmp_path, generations=2,
            progress=False, verbose=False).run()
    with pytest.raises(ConfigError, match="algorithm: 'OpenES' in the run, 'ToyES' now"):
        build(tmp_path, 4)


@pytest.mark.parametrize("keep, kept", [(2, [3, 4]), (1, [4]), (None, [1, 2, 3, 4])])
def test_keep_checkpoints_keeps_the_newest(tmp_path, keep, kept):
    Trainer(ToyES(num_dims=3, popsize=8, seed=0), NoisySphere(0), run_dir=tmp_path, generations=4,
            keep_checkpoints=keep, progress=False, verbose=False).run()
    assert sorted(int(p.stem.split("-")[1]) for p in (tmp_path / "checkpoints").glob("ckpt-*.index")) == kept


@pytest.mark.parametrize("kw", [dict(keep_checkpoints=0), dict(keep_checkpoints=-1), dict(keep_checkpoints=2.5),
                                dict(keep_checkpoints=True), dict(keep_checkpoints="3"),
                                dict(checkpoint_every=2.5), dict(checkpoint_every=True)])
def test_checkpoint_settings_are_checked_before_any_work(tmp_path, kw):
    """0 or -1 ended in TensorFlow's ValueError after the run directory was made; 2.5 ran as 2."""
    name = next(iter(kw))
    with pytest.raises(ConfigError, match=f"{name} must be an integer >= 1, got {re.escape(repr(kw[name]))}"):
        Trainer(ToyES(num_dims=3, popsize=8, seed=0), NoisySphere(0), run_dir=tmp_path / "r", generations=2, **kw)
    assert not (tmp_path / "r").exists()


def _run_on_a_pty(monkeypatch, columns):
    """What a 4-generation run prints on a pseudo-terminal of ``columns`` columns (0: no window size)."""
    import fcntl
    import os
    import pty
    import select
    import struct
    import termios

    master, slave = pty.openpty()
    if columns:
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    out = os.fdopen(slave, "w", buffering=1)
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", out)
    try:
        Trainer(ToyES(num_dims=3, popsize=8, seed=0), NoisySphere(0), generations=4, progress=True,
                progress_every=0, verbose=False).run()
        out.flush()
        text = b""
        while select.select([master], [], [], 0.5)[0]:
            text += os.read(master, 1 << 16)
    finally:
        monkeypatch.undo()
        out.close()
        os.close(master)
    return text.decode(errors="replace")


def test_progress_on_a_terminal_with_and_without_a_width(monkeypatch):
    """A sized terminal gets the tqdm bar; one reporting 0 columns got an empty bar (no progress at all)
    and now gets the plain lines."""
    bar = _run_on_a_pty(monkeypatch, 100)
    assert "4/4" in bar and "gen/s" in bar and "tfevo: gen" not in bar
    plain = _run_on_a_pty(monkeypatch, 0)
    assert [l.split(" | ")[0] for l in plain.splitlines() if l.startswith("tfevo: gen")] == [
        f"tfevo: gen {g}/4" for g in range(1, 5)]


class ToyWithMetrics(ToyES):
    def metrics(self):
        return {"sigma": float(self.sigma.numpy()), "m0": float(self.m[0].numpy())}


def test_resumed_history_keeps_the_algorithms_metrics(tmp_path):
    """Trainer.history after a resume equals the uninterrupted run's, metrics (GenerationLog.extra) included;
    the generations read back from progress.jsonl had lost them."""
    def trainer(run, gens):
        return Trainer(ToyWithMetrics(num_dims=3, popsize=8, seed=0), NoisySphere(0), run_dir=run,
                       generations=gens, progress=False, verbose=False)

    ref = trainer(tmp_path / "ref", 4).run()
    trainer(tmp_path / "run", 2).run()
    resumed = trainer(tmp_path / "run", 4).run()
    assert [h.extra for h in resumed] == [h.extra for h in ref]
    assert set(ref[0].extra) == {"sigma", "m0"}
