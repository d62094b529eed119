"""tfevo.distribute: sharding over tf.distribute replicas gives the single-device results.

Multi-device runs need logical CPU devices configured before TensorFlow starts,
so they run in subprocesses (``python -m tfevo.distribute.check``).
"""

import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from tfevo.core import ConfigError, ShapeError
from tfevo.distribute import DistributedEvaluator, ShardedRollout, member_seeds, shard_layout
from tfevo.distribute.check import compare, run_checks

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _env(extra=None):
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    env.pop("TF_CONFIG", None)
    env.update(extra or {})
    return env


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
    alone = ShardedRollout(env, policy, 2, 100)(params[2:4], tf.range(2, 4), seeds[2:4]).numpy()
    together = ShardedRollout(env, policy, 2, 100)(params, tf.range(6), seeds).numpy()
    np.testing.assert_array_equal(alone, together[2:4])


def test_three_logical_cpus_match_one_device_for_es_ga_neat_qd(tmp_path):
    """ES, SeedGA (genomes decoded per replica), NEAT, MAP-Elites and host shards on 3 replicas
    (P not a multiple of 3: padding) end in bit-identical states to this
    process's single-device run."""
    out = tmp_path / "three.npz"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tfevo.distribute.check", "--logical-cpus", "3",
         "--generations", "2", "--out", str(out)],
        env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        here = run_checks(_one(), generations=2)  # the reference, while the subprocess starts up
        o, e = proc.communicate(timeout=400)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, o[-2000:] + e[-3000:]
    three = dict(np.load(out))
    assert int(three["num_replicas"]) == 3
    assert compare(three, here) == []
    assert int(three["es_traces"]) == 1
    assert int(three["host_replicas_used"]) == 3  # each replica drove its own host evaluator


def _free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


@pytest.mark.slow
def test_two_worker_multiworker_mirrored_matches_single_process(tmp_path):
    """Two local processes under MultiWorkerMirroredStrategy (TF_CONFIG, loopback
    ports) run the ES and seed-GA checks and agree with the single-process run."""
    ports = _free_ports(2)
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    procs = []
    for i in range(2):
        tf_config = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": i}})
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "tfevo.distribute.check", "--checks", "es,ga", "--generations", "2",
             "--out", str(tmp_path / f"w{i}.npz")],
            env=_env({"TF_CONFIG": tf_config}), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    try:
        outs = [p.communicate(timeout=400) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for p, (o, e) in zip(procs, outs):
        assert p.returncode == 0, o[-2000:] + e[-3000:]
    w0, w1 = (dict(np.load(tmp_path / f"w{i}.npz")) for i in range(2))
    assert int(w0["num_replicas"]) == 2
    assert compare(w0, w1) == []
    here = run_checks(_one(), generations=2, which=("es", "ga"))
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
