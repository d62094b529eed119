"""tfevo.distribute: sharding over tf.distribute replicas gives the single-device results.

Multi-device runs need logical CPU devices configured before TensorFlow starts,
so they run in subprocesses (``python -m tfevo.distribute.check``).
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from tfevo.core import ConfigError, ShapeError
from tfevo.distribute import DistributedEvaluator, ShardedRollout, member_seeds, shard_layout
from tfevo.distribute.check import compare, run_checks
from _loopback import free_ports  # tests/ is on sys.path through conftest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _env(extra=None):
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    env.pop("TF_CONFIG", None)
    env.update(extra or {})
    return env


def _finish(procs, timeout=400):
    """Waits for the worker processes (killing any still running on the way out) and
    asserts each exited 0; returns their ``(stdout, stderr)``."""
    try:
        outs = [p.communicate(timeout=timeout) for p in procs] if timeout else []
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for p, (o, e) in zip(procs, outs):
        assert p.returncode == 0, o[-2000:] + e[-3000:]
    return outs


def _one():
    return tf.distribute.OneDeviceStrategy("/cpu:0")


def test_shard_layout_and_member_seeds_independent_of_layout():
    assert shard_layout(10, 3) == (4, 12)
    assert shard_layout(8, 4) == (2, 8)
    with pytest.raises(ConfigError):
        shard_layout(0, 2)
    seed = tf.constant([3, 9], tf.int32)
    full = member_seeds(seed, tf.range(10), 10).numpy()
    # a shard asking for members 4..7 gets exactly their rows; padding index 10 wraps to member 0
    np.testing.assert_array_equal(member_seeds(seed, [4, 5, 6, 7], 10).numpy(), full[4:8])
    np.testing.assert_array_equal(member_seeds(seed, [10], 10).numpy(), full[:1])
    assert len({tuple(r) for r in full}) == 10
    assert not np.array_equal(member_seeds(tf.constant([3, 10], tf.int32), tf.range(10), 10).numpy(), full)


def test_evaluator_matches_direct_evaluation_and_traces_once():
    x = tf.random.stateless_normal([7, 5], seed=[1, 2])

    def fn(params, idx, seeds):
        return -tf.reduce_sum(params ** 2, axis=1) + tf.cast(idx, tf.float32) * 1e-3, params[:, :2]

    ev = DistributedEvaluator(_one(), fn, seed=0)
    for _ in range(3):
        f, d = ev.evaluate_all(x)
    want = -tf.reduce_sum(x ** 2, axis=1).numpy() + np.arange(7) * 1e-3
    np.testing.assert_allclose(f.numpy(), want, rtol=1e-6)
    np.testing.assert_array_equal(d.numpy(), x.numpy()[:, :2])
    assert ev.traces == {"step": 1}
    assert ev.bytes_gathered == 7 * 4 + 7 * 2 * 4


def test_bad_inputs_raise_clear_errors():
    with pytest.raises(ConfigError, match="tf.distribute.Strategy"):
        DistributedEvaluator("mirrored", lambda *a: a[0])
    with pytest.raises(ConfigError, match="callable"):
        DistributedEvaluator(_one(), None)
    ev = DistributedEvaluator(_one(), lambda p, i, s: tf.reduce_sum(p, axis=1))
    with pytest.raises(ShapeError, match="leading population axis"):
        ev.evaluate((tf.zeros([4, 2]), tf.zeros([5, 2])))
    bad = DistributedEvaluator(_one(), lambda p, i, s: tf.reduce_sum(p))
    with pytest.raises(ShapeError, match="fitness of shape"):
        bad.evaluate(tf.zeros([4, 2]))


def test_sharded_rollout_reproducible_and_checkpointed(tmp_path):
    from tfevo.envs import make
    from tfevo.nn import Policy, PopulationModel, mlp

    env = make("CartPole-v1", 1)
    policy = Policy(PopulationModel(mlp((4,), 2, hidden=(8,))), env.action_spec)
    params = policy.init_params(6, seed=1)
    ev = DistributedEvaluator(_one(), ShardedRollout(env, policy, episodes=2, max_steps=100), seed=0)
    ckpt = tf.train.Checkpoint(ev=ev)
    path = ckpt.save(str(tmp_path / "ev"))
    a1, a2 = ev.evaluate(params).numpy(), ev.evaluate(params).numpy()
    ckpt.restore(path)
    np.testing.assert_array_equal(ev.evaluate(params).numpy(), a1)
    np.testing.assert_array_equal(ev.evaluate(params).numpy(), a2)
    assert np.all(a1 >= 1) and np.all(a1 <= 100)
    # a member's return does not depend on which other members share its shard
    seeds = member_seeds(tf.constant([0, 1], tf.int32), tf.range(6), 6)
    fn = tf.function(ShardedRollout(env, policy, 2, 100), autograph=False)
    alone = fn(params[2:4], tf.range(2, 4), seeds[2:4]).numpy()
    together = fn(params, tf.range(6), seeds).numpy()
    np.testing.assert_array_equal(alone, together[2:4])
    # frames reported per member reach DistributedEvaluator.last_frames (CartPole: 1 reward per step)
    counted = DistributedEvaluator(_one(), ShardedRollout(env, policy, 2, 100, report_frames=True), seed=0)
    f = counted.evaluate(params).numpy()
    np.testing.assert_array_equal(f, a1)
    assert counted.last_frames == int(round(2 * f.sum())) and ev.last_frames is None


# `tfevo train` runs for the two-device subprocess and their one-device references:
# OpenAI-ES on in-graph CartPole (ShardedRollout), and the seed-encoded deep GA on host
# CartPole (HostShards over PipelinedEvaluator, genomes decoded on each replica; P=13 is
# not a multiple of 2, so a padding row is added and dropped).
TRAIN_ES = ["--no-progress", "--set", "algorithm.popsize=14", "--set", "policy.hidden=[8]",
            "--set", "env.episodes=2", "--set", "env.max_steps=60"]
TRAIN_GA = ["--no-progress", "--set", "algorithm.name=seed_ga", "--set", "algorithm.popsize=13",
            "--set", "policy.hidden=[8]", "--set", "env.max_steps=40", "--set", 'algorithm.params={"truncation": 4}',
            "--set", "evaluator.kind=pipelined", "--set", "evaluator.num_envs=4", "--set", "evaluator.obs_norm=true"]

# NEAT genomes (in-graph rollouts, P=9: padded) and GP trees (host simulators) shard the same way.
CONFIGS = os.path.join(ROOT, "examples", "configs")
TRAIN_NEAT = [os.path.join(CONFIGS, "neat_cartpole.toml"), "--no-progress", "--set", "algorithm.popsize=9",
              "--set", "env.episodes=1", "--set", "env.max_steps=40"]
TRAIN_GP = [os.path.join(CONFIGS, "gp_cartpole.toml"), "--no-progress", "--set", "algorithm.popsize=8",
            "--set", "env.episodes=1", "--set", "env.max_steps=30", "--set", "evaluator.kind=pipelined",
            "--set", "evaluator.num_envs=2"]
FAMILY_RUNS = {"neat": TRAIN_NEAT, "gp": TRAIN_GP}


def _train(run, gens, devices, extra):
    return ["train", "--run-dir", str(run), "--generations", str(gens), "--devices", str(devices)] + list(extra)


KEYS = ("generation", "best", "mean", "median", "std", "best_ever", "frames", "evaluations")


def _rows(run):
    return [{k: json.loads(line)[k] for k in KEYS} for line in (run / "progress.jsonl").read_text().splitlines()]


def _state(run):
    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(run / "checkpoints")))
    names = [k for k in reader.get_variable_to_shape_map() if k.startswith(("algorithm/", "trainer/best", "evaluator/"))]
    return {k: reader.get_tensor(k) for k in names}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two-device runs in one subprocess (the CPU split into 2 logical devices): the
    replica-count checks (``python -m tfevo.distribute.check``), then ``tfevo train --devices 2``
    (ES: 2 generations, then resumed to 3; deep GA on host CartPole: 2 generations).  While it
    runs, this process computes the one-device references: the same checks, ES for 4
    generations and the GA for 2, all through ``tfevo train --devices 1``."""
    from tfevo.cli import main

    d = tmp_path_factory.mktemp("runs")
    two, one = d / "two", d / "one"
    calls = [_train(two / "es", 2, 2, TRAIN_ES), _train(two / "es", 3, 2, TRAIN_ES),
             _train(two / "ga", 2, 2, TRAIN_GA)] + [_train(two / k, 2, 2, a) for k, a in FAMILY_RUNS.items()]
    code = ("import sys\n"
            "from tfevo.distribute.check import main as check\n"
            "from tfevo.cli import main as cli\n"
            f"rc = check(['--logical-cpus', '2', '--generations', '2', '--out', {str(d / 'checks.npz')!r}])\n"
            f"sys.exit(max([rc] + [cli(a) for a in {calls!r}]))\n")
    proc = subprocess.Popen([sys.executable, "-c", code], env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        checks_one = run_checks(_one(), generations=2)
        assert main(_train(one / "es", 4, 1, TRAIN_ES)) == 0
        assert main(_train(one / "ga", 2, 1, TRAIN_GA)) == 0
        for k, a in FAMILY_RUNS.items():
            assert main(_train(one / k, 2, 1, a)) == 0
        out, err = proc.communicate(timeout=500)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, out[-2000:] + err[-3000:]
    return dict(two=two, one=one, out=out, checks_two=dict(np.load(d / "checks.npz")), checks_one=checks_one)


def test_two_logical_cpus_match_one_device_for_es_ga_neat_qd_host(runs):
    """ES, SeedGA (genomes decoded per replica), NEAT, MAP-Elites and HostShards over real
    PipelinedEvaluators (Gymnasium CartPole) on 2 replicas (with padding where P is odd) end
    in bit-identical states to this process's single-device run."""
    two, here = runs["checks_two"], runs["checks_one"]
    assert int(two["num_replicas"]) == 2
    assert compare(two, here) == []
    assert int(two["es_traces"]) == 1
    assert int(two["host_replicas_used"]) == 2  # each replica drove its own PipelinedEvaluator
    assert int(here["host_replicas_used"]) == 1
    assert np.all(two["host_frames"] > 0) and np.ptp(two["host_fitness"]) > 0


def test_tfevo_train_two_devices_equals_one_and_resumes(runs):
    """`tfevo train --devices 2` gives the 1-device results bit for bit (ES in-graph; deep GA on
    host simulators); a run started on 2 devices resumes -- on 2, then on 1 device -- exactly
    where the uninterrupted 1-device run goes."""
    from tfevo.cli import main

    two, one = runs["two"], runs["one"]
    assert "sharded over 2 replica(s) (MirroredStrategy)" in runs["out"]
    assert runs["out"].count("resumed from") == 1
    # the same run directory, resumed on one device (allowed: results do not depend on the layout)
    assert main(_train(two / "es", 4, 1, TRAIN_ES)) == 0
    assert [r["generation"] for r in _rows(two / "es")] == [1, 2, 3, 4]
    assert _rows(two / "es") == _rows(one / "es")
    assert _rows(one / "es")[-1]["frames"] > 4 * 14 * 2  # episode steps counted on all replicas
    for name in ("es", "ga"):
        a, b = _state(two / name), _state(one / name)
        assert a.keys() == b.keys() and any(k.startswith("algorithm/") for k in a)
        for k in a:
            np.testing.assert_array_equal(a[k], b[k], err_msg=f"{name}: {k}")
    assert _rows(two / "ga") == _rows(one / "ga")
    # NEAT genomes and GP trees travel as flat rows: sharded the same way, bit for bit
    for name in FAMILY_RUNS:
        assert _rows(two / name) == _rows(one / name), name
        a, b = _state(two / name), _state(one / name)
        assert a.keys() == b.keys() and any(k.startswith("algorithm/") for k in a)
        for k in a:
            np.testing.assert_array_equal(a[k], b[k], err_msg=f"{name}: {k}")
    # switching sharding off on resume would change the evaluator: refused
    assert main(["train", "--run-dir", str(two / "es"), "--generations", "5"] + TRAIN_ES) == 2


@pytest.mark.slow
def test_two_worker_multiworker_mirrored_matches_single_process(tmp_path):
    """Two local processes under MultiWorkerMirroredStrategy (TF_CONFIG, loopback
    ports) run the ES and seed-GA checks and agree with the single-process run."""
    ports = free_ports(2)
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    procs = []
    for i in range(2):
        tf_config = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": i}})
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "tfevo.distribute.check", "--checks", "es,ga,host", "--generations", "2",
             "--out", str(tmp_path / f"w{i}.npz")],
            env=_env({"TF_CONFIG": tf_config}), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = _finish(procs)
    w0, w1 = (dict(np.load(tmp_path / f"w{i}.npz")) for i in range(2))
    assert int(w0["num_replicas"]) == 2
    assert compare(w0, w1) == []
    here = run_checks(_one(), generations=2, which=("es", "ga", "host"))
    assert compare(w0, here) == []


class _FakeHostEvaluator:
    """A host evaluator like PipelinedEvaluator: numpy work, episode seeds from episode_seeds()."""

    def __init__(self, episodes=2):
        self.episodes = episodes
        self.calls = 0

    def episode_seeds(self, popsize, call=None):  # replaced per call by HostShards
        return np.random.default_rng([99, self.calls]).integers(0, 2**31 - 1, size=(popsize, self.episodes))

    def evaluate(self, params):
        seeds = self.episode_seeds(len(params))
        self.calls += 1
        noise = np.array([[np.random.default_rng(int(s)).normal() for s in row] for row in seeds])
        return -np.sum(np.asarray(params) ** 2, axis=1) + noise.mean(axis=1)


def test_host_shards_layout_independent_and_reproducible():
    from tfevo.distribute import HostShards, episode_seeds_from_member_seeds

    x = tf.random.stateless_normal([5, 3], seed=[4, 4])
    shards = HostShards(lambda: _FakeHostEvaluator(2), episodes=2)
    seeds = member_seeds(tf.constant([1, 2], tf.int32), tf.range(5), 5)
    whole = shards(x, tf.range(5), seeds).numpy()
    part = shards(x[3:], tf.range(3, 5), seeds[3:]).numpy()
    np.testing.assert_array_equal(part, whole[3:])
    table = episode_seeds_from_member_seeds(seeds.numpy(), 2)
    want = -np.sum(x.numpy() ** 2, 1) + np.array(
        [np.mean([np.random.default_rng(int(s)).normal() for s in row]) for row in table])
    np.testing.assert_allclose(whole, want, rtol=1e-5)
    ev = DistributedEvaluator(_one(), shards, seed=0)
    a = ev.evaluate(x).numpy()
    assert not np.array_equal(a, ev.evaluate(x).numpy())  # new call seed -> new episodes
    ev2 = DistributedEvaluator(_one(), HostShards(lambda: _FakeHostEvaluator(2), episodes=2), seed=0)
    np.testing.assert_array_equal(ev2.evaluate(x).numpy(), a)
    assert list(shards.evaluators) == [0]


def test_host_shards_pipelined_one_vs_two_shards_and_shared_obs_norm():
    """HostShards over real PipelinedEvaluators (Gymnasium CartPole): the members split over two
    replicas' evaluators give the fitness, frames and observation statistics of one evaluator,
    and the statistics equal a single PipelinedEvaluator updating its own normalizer."""
    from tfevo.distribute import HostShards, episode_seeds_from_member_seeds
    from tfevo.envs import make
    from tfevo.nn import Policy, PopulationModel, mlp
    from tfevo.rollout import ObservationNormalizer, PipelinedEvaluator

    policy = Policy(PopulationModel(mlp((4,), 2, hidden=(4,))), make("CartPole-v1", 1).action_spec)
    params = policy.init_params(7, seed=3)
    seeds = member_seeds(tf.constant([5, 6], tf.int32), tf.range(7), 7)

    def shards():
        norm = ObservationNormalizer((4,))
        return HostShards(lambda: PipelinedEvaluator("CartPole-v1", policy, num_envs=3, num_subsets=2, episodes=2,
                                                     max_steps=30, obs_norm=norm, update_obs_norm=False),
                          episodes=2, report_frames=True, obs_norm=norm), norm

    one, norm1 = shards()
    whole = one.evaluate_shard(0, params, tf.range(7), seeds)
    one.after_gather({k[4:]: v for k, v in whole.items() if k.startswith("aux_")})
    two, norm2 = shards()
    parts = [two.evaluate_shard(0, params[:4], tf.range(4), seeds[:4]),
             two.evaluate_shard(1, params[4:], tf.range(4, 7), seeds[4:])]
    two.after_gather({k[4:]: np.concatenate([p[k] for p in parts]) for k in parts[0] if k.startswith("aux_")})
    assert sorted(two.evaluators) == [0, 1]
    for k in ("fitness", "frames"):
        np.testing.assert_array_equal(np.concatenate([p[k] for p in parts]), whole[k])
    for v1, v2 in zip((norm1.count, norm1.mean, norm1.m2), (norm2.count, norm2.mean, norm2.m2)):
        np.testing.assert_array_equal(v1.numpy(), v2.numpy())
    # reference: one evaluator with the same episode seeds, updating its own statistics step by step
    ref_norm = ObservationNormalizer((4,))
    ref = PipelinedEvaluator("CartPole-v1", policy, num_envs=5, num_subsets=1, episodes=2, max_steps=30,
                             obs_norm=ref_norm)
    fit = ref.evaluate(params, episode_seeds=episode_seeds_from_member_seeds(seeds.numpy(), 2)).numpy()
    np.testing.assert_array_equal(fit, whole["fitness"])
    assert float(norm1.count.numpy()) == float(ref_norm.count.numpy()) == whole["frames"].sum()
    np.testing.assert_allclose(norm1.mean.numpy(), ref_norm.mean.numpy(), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(norm1.m2.numpy(), ref_norm.m2.numpy(), rtol=1e-9)
    with pytest.raises(ConfigError, match="update_obs_norm=False"):
        HostShards(lambda: PipelinedEvaluator("CartPole-v1", policy, num_envs=2, obs_norm=True), episodes=1
                   ).evaluate_shard(0, params[:2], tf.range(2), seeds[:2])
