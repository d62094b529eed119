"""tfevo.distribute in the Trainer (``Trainer(strategy=...)``) and the ``[distribute]`` config section.

The two-device ``tfevo train`` runs (equal to one device, resumed exactly) are in
``test_distribute.py``, sharing its subprocess with the replica-count checks.
"""

import json

import numpy as np
import pytest
import tensorflow as tf

from tfevo.core import ConfigError
from tfevo.training import Trainer
from tfevo.training.config import parse_config


def test_trainer_strategy_argument_wraps_shard_evaluators(tmp_path):
    from tfevo.distribute import DistributedEvaluator, ShardedRollout
    from tfevo.envs import make
    from tfevo.nn import Policy, PopulationModel, mlp
    from tfevo.rollout import InGraphEvaluator
    from tfevo.strategies import OpenES

    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    env = make("CartPole-v1", 1)
    policy = Policy(PopulationModel(mlp((4,), 2, hidden=(8,))), env.action_spec)

    def run(run_dir, gens):
        es = OpenES(policy.num_params, popsize=8, sigma=0.1, seed=2)
        rollout = ShardedRollout(env, policy, episodes=1, max_steps=50, report_frames=True)
        trainer = Trainer(es, rollout, run_dir=run_dir, generations=gens, progress=False, verbose=False,
                          strategy=strategy)
        assert isinstance(trainer._evaluator, DistributedEvaluator)
        trainer.run()
        return es, trainer

    es_full, full = run(tmp_path / "full", 3)
    run(tmp_path / "part", 2)
    es_res, resumed = run(tmp_path / "part", 3)
    assert int(resumed.generation.numpy()) == 3
    np.testing.assert_array_equal(es_full.mean.numpy(), es_res.mean.numpy())
    assert full.history[-1].frames == resumed.history[-1].frames > 3 * 8  # episode steps, not members
    with pytest.raises(ConfigError, match="per-shard evaluate_fn"):
        Trainer(OpenES(4, popsize=4), InGraphEvaluator(make("CartPole-v1", 4), policy), generations=1,
                strategy=strategy)
    other = DistributedEvaluator(tf.distribute.OneDeviceStrategy("/cpu:0"), lambda p, i, s: p[:, 0])
    with pytest.raises(ConfigError, match="different strategy"):
        Trainer(OpenES(4, popsize=4), other, generations=1, strategy=strategy)
    with pytest.raises(ConfigError, match="tf.distribute.Strategy"):
        Trainer(OpenES(4, popsize=4), lambda p, i, s: p[:, 0], generations=1, strategy="mirrored")


def test_distribute_config_section_is_validated():
    base = {"run": {"generations": 1}}
    cfg = parse_config(base)
    assert not cfg.distribute.enabled
    assert parse_config({**base, "distribute": {"devices": 2}}).distribute.enabled
    assert parse_config({**base, "distribute": {"strategy": "auto"}}).distribute.enabled
    with pytest.raises(ConfigError, match="distribute.devices"):
        parse_config({**base, "distribute": {"devices": 0}})
    with pytest.raises(ConfigError, match="distribute.strategy"):
        parse_config({**base, "distribute": {"strategy": "tpu"}})
    with pytest.raises(ConfigError, match="distribute.gpus: unknown field"):
        parse_config({**base, "distribute": {"gpus": 2}})
    from tfevo.training.builders import build

    cfg = parse_config({**base, "env": {"id": "CartPole-v1"}, "distribute": {"devices": 1},
                        "evaluator": {"kind": "pipelined", "obs_norm": True}})
    setup = build(cfg)  # host shards share one normalizer, checkpointed with the run
    shards = setup.evaluator._evaluate_fn
    assert setup.trackables["obs_norm"] is shards.obs_norm is not None
    assert isinstance(setup.strategy, tf.distribute.OneDeviceStrategy)
    with pytest.raises(ConfigError, match="one_device with devices=2"):
        build(parse_config({**base, "distribute": {"devices": 2, "strategy": "one_device"}}))


@pytest.mark.parametrize("distribute", [None, {"strategy": "auto"}, {"strategy": "multi_worker"}])
def test_a_seconds_budget_in_a_multi_worker_run_is_refused_before_any_work(distribute):
    """The Trainer refused it only after MultiWorkerMirroredStrategy had started, which waits for every
    worker of the cluster first: a worker given run.seconds hung until the others joined."""
    from tfevo.distribute.cluster import apply_tf_config

    tf_config = json.dumps({"cluster": {"worker": ["localhost:1", "localhost:2"]}, "task": {"type": "worker",
                                                                                             "index": 0}})
    data = {"run": {"seconds": 60}, **({"distribute": distribute} if distribute else {})}
    with pytest.raises(ConfigError, match=r"run.seconds=60(\.0)? is not allowed in a multi-worker run"):
        parse_config(apply_tf_config(data, {"TF_CONFIG": tf_config}))
    assert parse_config(apply_tf_config({"run": {"generations": 2}}, {"TF_CONFIG": tf_config})).distribute.strategy \
        == "multi_worker"
    if distribute != {"strategy": "multi_worker"}:
        parse_config(apply_tf_config(data, {}))  # one process: a seconds budget is fine
