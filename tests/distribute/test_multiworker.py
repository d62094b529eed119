"""`tfevo train CONFIG` as the workers of a multi-machine job configured by TF_CONFIG.

The job runs as worker processes on loopback ports; each steps its shard of the
population on its own Gymnasium CartPole simulators (HostShards over
PipelinedEvaluator), and the run must equal the single-process run bit for bit,
also when workers are killed and the job is restarted.
"""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

from tfevo.core import ConfigError
from tfevo.distribute import read_tf_config

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CONFIG = """
name = "mw-cartpole"

[run]
seed = 3
generations = 8

[env]
id = "CartPole-v1"
episodes = 2
max_steps = 40

[policy]
kind = "mlp"
hidden = [8]

[algorithm]
name = "snes"
popsize = 11
params = { sigma = 0.1 }

[evaluator]
kind = "pipelined"
num_envs = 3
obs_norm = true
"""

KEYS = ("generation", "best", "mean", "median", "std", "best_ever", "frames", "evaluations")


def _cluster(n):
    from _loopback import free_ports

    return {"worker": [f"127.0.0.1:{p}" for p in free_ports(n)]}


def _tf_config(cluster, i):
    return json.dumps({"cluster": cluster, "task": {"type": "worker", "index": i}})


# -- TF_CONFIG is checked before any work --------------------------------------------------------
GOOD = {"cluster": {"worker": ["10.0.0.1:2222", "10.0.0.2:2222"]}, "task": {"type": "worker", "index": 1}}


@pytest.mark.parametrize("raw, match", [
    ('{"cluster": {"worker": ["a:1"]}, "task": ', "not valid JSON"),
    ('["a:1"]', "must be a JSON object"),
    (json.dumps({"cluster": GOOD["cluster"]}), "no 'task'"),
    (json.dumps({**GOOD, "task": {"type": "worker", "index": 2}}), r"task.index 2 is out of range.*0\.\.1"),
    (json.dumps({**GOOD, "task": {"type": "worker", "index": -1}}), "task.index -1 is out of range"),
    (json.dumps({**GOOD, "task": {"type": "worker", "index": "1"}}), "task.index must be an integer"),
    (json.dumps({**GOOD, "task": {"type": "worker"}}), "task.index is missing"),
    (json.dumps({**GOOD, "task": {"type": "chief", "index": 0}}), r"task.type is 'chief'; accepted: \['worker'\]"),
    (json.dumps({**GOOD, "cluster": {"worker": ["a:1"], "ps": ["b:1"]}}), r"job\(s\) \['ps'\] are not supported"),
    (json.dumps({**GOOD, "cluster": {"worker": ["10.0.0.1", "b:2"]}}), "'10.0.0.1', which is not \"host:port\""),
    (json.dumps({**GOOD, "cluster": {"worker": ["a:1", "a:1"]}}), "appear more than once"),
    (json.dumps({**GOOD, "cluster": {"worker": ["a:1"], "chief": ["b:1", "c:1"]}}), "exactly one address"),
    (json.dumps({"task": GOOD["task"]}), "has a 'task' but no 'cluster'"),
])
def test_bad_tf_config_is_a_config_error_naming_the_field(raw, match):
    with pytest.raises(ConfigError, match=match):
        read_tf_config({"TF_CONFIG": raw})


def test_tf_config_roles():
    assert read_tf_config({}) is None and read_tf_config({"TF_CONFIG": " "}) is None
    assert read_tf_config({"TF_CONFIG": "{}"}) is None
    info = read_tf_config({"TF_CONFIG": json.dumps(GOOD)})
    assert (info.task_type, info.task_index, info.num_workers, info.is_chief) == ("worker", 1, 2, False)
    assert info.address == "10.0.0.2:2222"
    with_chief = {"cluster": {"chief": ["c:1"], "worker": {"1": "b:1", "0": "a:1"}}}
    info = read_tf_config({"TF_CONFIG": json.dumps({**with_chief, "task": {"type": "worker", "index": 0}})})
    assert info.cluster["worker"] == ["a:1", "b:1"] and info.num_workers == 3 and not info.is_chief
    assert read_tf_config({"TF_CONFIG": json.dumps({**with_chief, "task": {"type": "chief", "index": 0}})}).is_chief


def test_tf_config_alone_shards_a_run_unless_the_config_chooses():
    from tfevo.distribute import apply_tf_config

    env = {"TF_CONFIG": json.dumps(GOOD)}
    base = {"run": {"generations": 1}}
    assert apply_tf_config(base, env)["distribute"] == {"strategy": "multi_worker"}
    assert "distribute" not in base and apply_tf_config(base, {}) == base
    for chosen in ({"strategy": "one_device"}, {"devices": 2}, {"strategy": "auto"}):
        assert apply_tf_config({**base, "distribute": chosen}, env)["distribute"] == chosen
    with pytest.raises(ConfigError, match="task.index"):
        apply_tf_config(base, {"TF_CONFIG": json.dumps({**GOOD, "task": {"type": "worker"}})})


def test_tfevo_train_refuses_a_bad_tf_config_before_any_work(tmp_path, monkeypatch, capsys):
    from tfevo.cli import main

    for raw, match in [("{not json", "not valid JSON"),
                       (json.dumps({"cluster": GOOD["cluster"]}), "no 'task'"),
                       (json.dumps({**GOOD, "task": {"type": "worker", "index": 5}}), "task.index 5 is out of range")]:
        monkeypatch.setenv("TF_CONFIG", raw)
        t0 = time.monotonic()
        assert main(["train", "--run-dir", str(tmp_path / "run"), "--generations", "1"]) == 2
        err = capsys.readouterr().err
        assert "TF_CONFIG" in err and match in err, err
        assert time.monotonic() - t0 < 10 and not (tmp_path / "run").exists()


# -- the whole job on loopback ----------------------------------------------------------------------
def _env(tmp):
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    env["PYTHONUNBUFFERED"] = "1"
    env["TMPDIR"] = str(tmp)  # where a non-chief worker keeps its scratch copy of the chief's checkpoint
    env.pop("TF_CONFIG", None)
    return env


def _rows(run):
    path = run / "progress.jsonl"
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append({k: json.loads(line)[k] for k in KEYS})
        except (ValueError, KeyError):
            pass  # a line being written
    return out


def _state(run):
    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(run / "checkpoints")))
    names = [k for k in reader.get_variable_to_shape_map()
             if k.startswith(("algorithm/", "trainer/", "evaluator/", "obs_norm/")) and "wall_time" not in k]
    return {k: reader.get_tensor(k) for k in names}


class _Job:
    """The worker processes of one start of the job (`tfevo train CONFIG` under TF_CONFIG)."""

    def __init__(self, config, run, n, tmp, log):
        cluster = _cluster(n)
        self.scratch = [tmp / f"{log.name}-tmp-{i}" for i in range(n)]
        self.logs = [open(log.with_name(f"{log.name}-w{i}.txt"), "w+") for i in range(n)]
        self.procs = []
        for i in range(n):
            self.scratch[i].mkdir(exist_ok=True)
            env = {**_env(self.scratch[i]), "TF_CONFIG": _tf_config(cluster, i)}
            self.procs.append(subprocess.Popen(
                [sys.executable, "-m", "tfevo.cli", "train", str(config), "--run-dir", str(run)],
                env=env, stdout=self.logs[i], stderr=subprocess.STDOUT, text=True))

    def output(self, i):
        self.logs[i].flush()
        self.logs[i].seek(0)
        return self.logs[i].read()

    def kill(self, order):
        """SIGKILL to worker ``order[0]`` mid-run, then to the others (which may already have
        stopped with an error: their collectives lost a peer)."""
        first = self.procs[order[0]]
        assert first.poll() is None, f"worker {order[0]} ended before it was killed:\n{self.output(order[0])[-3000:]}"
        for i in order:
            if self.procs[i].poll() is None:
                self.procs[i].send_signal(signal.SIGKILL)
            self.procs[i].wait(60)
            assert self.procs[i].returncode != 0, f"worker {i} finished the run:\n{self.output(i)[-3000:]}"

    def wait(self, timeout=600):
        try:
            for i, p in enumerate(self.procs):
                p.wait(timeout)
                assert p.returncode == 0, self.output(i)[-4000:]
        finally:
            self.stop()

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait(60)


def _wait_rows(run, n, job, timeout=600):
    t0 = time.monotonic()
    while len(_rows(run)) < n:
        for i, p in enumerate(job.procs):
            assert p.poll() is None, f"worker {i} exited early:\n{job.output(i)[-4000:]}"
        assert time.monotonic() - t0 < timeout, "no progress"
        time.sleep(0.02)


@pytest.mark.multiworker
def test_tfevo_train_two_workers_equal_one_process_and_resume_after_any_worker_is_killed(tmp_path):
    """Two `tfevo train CONFIG` workers (TF_CONFIG only, pipelined host simulators sharded over the
    workers, P=11 padded to 12, one shared observation normalizer): worker 1 is killed, the job
    restarted, then the chief is killed and the job restarted again; the finished run equals the
    single-process run of the same config (`--devices 1`) bit for bit, the chief wrote the run
    directory alone, and the other worker's scratch copy of the chief's checkpoint is gone."""
    from tfevo.cli import main

    config = tmp_path / "run.toml"
    config.write_text(CONFIG)
    run = tmp_path / "mw"
    job = _Job(config, run, 2, tmp_path, tmp_path / "start1")
    try:  # the single-process reference runs here meanwhile
        assert main(["train", str(config), "--run-dir", str(tmp_path / "one"), "--devices", "1",
                     "--no-progress"]) == 0
        _wait_rows(run, 2, job)
        job.kill([1, 0])  # a non-chief worker dies; the job is restarted
    finally:
        job.stop()
    done1 = len(_rows(run))
    assert 2 <= done1 < 8
    job = _Job(config, run, 2, tmp_path, tmp_path / "start2")
    try:
        _wait_rows(run, done1 + 2, job)
        job.kill([0, 1])  # now the chief dies
    finally:
        job.stop()
    done2 = len(_rows(run))
    assert done1 < done2 < 8
    job = _Job(config, run, 2, tmp_path, tmp_path / "start3")
    job.wait()
    scratch = job.scratch[1]
    chief, worker = job.output(0), job.output(1)
    assert "sharded over 2 replica(s)" in chief and "resumed from" in chief
    assert "resumed from the chief's ckpt-" in worker and "the chief writes" in worker
    one = tmp_path / "one"
    assert [r["generation"] for r in _rows(run)] == list(range(1, 9))
    assert _rows(run) == _rows(one)
    a, b = _state(run), _state(one)
    assert a.keys() == b.keys() and any(k.startswith("obs_norm/") for k in a)
    for k in b:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)
    # only the chief wrote the run directory; the other worker's scratch directory is gone
    assert sorted(p.name for p in run.iterdir()) == sorted(p.name for p in one.iterdir())
    assert json.loads((run / "config.json").read_text())["distribute"]["strategy"] == "multi_worker"
    assert not [p for p in scratch.iterdir() if p.name.startswith("tfevo-worker-")]


def test_checkpoint_files_travel_through_the_strategy(tmp_path):
    """The chief's checkpoint, packed, broadcast (here on one device, where this process is the chief)
    and unpacked elsewhere, restores the same values."""
    from tfevo.distribute import broadcast_from_chief
    from tfevo.training.checkpoints import pack_checkpoint, unpack_checkpoint

    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    for data in (b"", b"x", bytes(range(256)) * 3 + b"tail"):
        assert broadcast_from_chief(strategy, data) == data
    v = tf.Variable(tf.random.stateless_normal([5, 3], seed=[1, 2], dtype=tf.float64))
    path = tf.train.Checkpoint(v=v).save(str(tmp_path / "a" / "ckpt"))
    (tmp_path / "b").mkdir()
    local = unpack_checkpoint(broadcast_from_chief(strategy, pack_checkpoint(path)), tmp_path / "b")
    w = tf.Variable(tf.zeros([5, 3], tf.float64))
    tf.train.Checkpoint(v=w).restore(local).assert_consumed()
    np.testing.assert_array_equal(w.numpy(), v.numpy())


def _job_outputs(tmp_path, config, extra_args, timeout):
    """Starts a two-worker `tfevo train` job (worker i writes to run<i>, with ``extra_args(i)``) and
    returns each worker's (returncode, output) once both have ended."""
    cluster = _cluster(2)
    procs = [subprocess.Popen(
        [sys.executable, "-m", "tfevo.cli", "train", str(config), "--run-dir", str(tmp_path / f"run{i}"),
         *extra_args(i)], env={**_env(tmp_path), "TF_CONFIG": _tf_config(cluster, i)},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for i in range(2)]
    try:
        outs = [p.communicate(timeout=timeout)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    return [(p.returncode, out) for p, out in zip(procs, outs)]


@pytest.mark.multiworker
def test_a_restart_with_a_changed_config_stops_every_worker(tmp_path):
    """The chief's run directory holds a run with another config: every worker stops with the chief's
    ConfigError once the job has met, instead of the chief refusing alone before joining the cluster
    while the others wait for it at start-up."""
    config = tmp_path / "run.toml"
    config.write_text(CONFIG)
    first = subprocess.run(
        [sys.executable, "-m", "tfevo.cli", "train", str(config), "--run-dir", str(tmp_path / "run0"),
         "--seed", "1", "--generations", "1", "--no-progress"],
        env=_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    assert first.returncode == 0, first.stdout[-3000:]
    for code, out in _job_outputs(tmp_path, config, lambda i: ["--no-progress"], timeout=300):
        assert code == 2, out[-3000:]
        assert "holds a run with a different config" in out and "run.seed: 1 in the run, 3 now" in out, out[-3000:]
    assert not (tmp_path / "run1").exists()  # the other worker writes nothing, not even its own config.json


@pytest.mark.multiworker
def test_workers_started_with_different_configs_are_refused(tmp_path):
    """A worker whose config differs (here its seed) would evaluate another population under the same
    gather; every worker compares its state with the chief's and stops with a ConfigError instead."""
    config = tmp_path / "run.toml"
    config.write_text(CONFIG)
    for code, out in _job_outputs(tmp_path, config, lambda i: ["--seed", str(i)], timeout=600):
        assert code == 2, out[-3000:]
        assert "differ from the chief's" in out and "replica(s) [1]" in out, out[-3000:]
    assert not (tmp_path / "run0" / "progress.jsonl").exists()
