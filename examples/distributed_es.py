"""OpenES on in-graph CartPole, sharded over every replica tf.distribute finds.

The same script runs unchanged on:

* one CPU:                 python examples/distributed_es.py
* 4 logical CPU devices:   python examples/distributed_es.py --logical-cpus 4
* every GPU of a machine:  python examples/distributed_es.py        (MirroredStrategy when >= 2 GPUs)
* several machines:        TF_CONFIG='{"cluster": {"worker": ["host0:12345", "host1:12345"]},
                                        "task": {"type": "worker", "index": 0}}' python examples/distributed_es.py
                           (index 1 on the second machine; MultiWorkerMirroredStrategy)

With a fixed --seed the printed numbers are identical whatever the replica count.
"""

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
from _toy import budget  # TFEVO_EXAMPLE_TOY=1: a few seconds, for the test suite


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--logical-cpus", type=int, default=0)
    ap.add_argument("--generations", type=int, default=budget(20, 2))
    ap.add_argument("--popsize", type=int, default=budget(64, 8))
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    from tfevo.distribute import DistributedEvaluator, ShardedRollout, make_strategy

    strategy = make_strategy(logical_cpus=args.logical_cpus or None)  # before any other TF op

    from tfevo.envs import make
    from tfevo.nn import Policy, PopulationModel, mlp
    from tfevo.strategies import OpenES

    env = make("CartPole-v1", 1)
    policy = Policy(PopulationModel(mlp((4,), 2, hidden=(16,))), env.action_spec)
    evaluator = DistributedEvaluator(strategy, ShardedRollout(env, policy, episodes=2), seed=args.seed)
    es = OpenES(policy.num_params, popsize=args.popsize, sigma=0.1, seed=args.seed)
    print(f"{strategy.num_replicas_in_sync} replica(s): {strategy.extended.worker_devices}")
    for g in range(args.generations):
        x = es.ask()
        fitness = evaluator.evaluate(x)  # full [P] vector on every worker
        es.tell(x, fitness)  # every worker tells: identical state everywhere
        print(f"gen {g:3d}  mean {float(fitness.numpy().mean()):7.2f}  max {float(fitness.numpy().max()):6.1f}")


if __name__ == "__main__":
    main()
