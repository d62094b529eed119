"""Deep GA with seed-encoded genomes, sharded over tf.distribute replicas.

Genomes are int32 seed lists (tfevo.strategies.SeedGA); every worker runs the
same ask/tell, each replica decodes *only its shard* into parameters on its
own device (decode_fn), and only fitness (4 bytes/member) is gathered.

    python examples/distributed_seed_ga.py [--logical-cpus 2]   # or with TF_CONFIG, see distributed_es.py
"""

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
from _toy import budget  # TFEVO_EXAMPLE_TOY=1: a few seconds, for the test suite


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--logical-cpus", type=int, default=0)
    ap.add_argument("--generations", type=int, default=budget(10, 2))
    args = ap.parse_args()

    from tfevo.distribute import DistributedEvaluator, ShardedRollout, make_strategy

    strategy = make_strategy(logical_cpus=args.logical_cpus or None)

    from tfevo.envs import make
    from tfevo.nn import Policy, PopulationModel, mlp
    from tfevo.strategies import SeedGA

    env = make("CartPole-v1", 1)
    policy = Policy(PopulationModel(mlp((4,), 2, hidden=(16,))), env.action_spec)
    ga = SeedGA(policy.num_params, popsize=budget(64, 8), truncation=budget(8, 2), sigma=0.05, max_generations=args.generations,
                init_fn=lambda s: policy.init_params(1, s)[0], seed=0)
    evaluator = DistributedEvaluator(strategy, ShardedRollout(env, policy, episodes=2), decode_fn=ga.decode, seed=0)
    for g in range(args.generations):
        genomes = ga.ask()
        fitness = evaluator.evaluate(genomes)
        ga.tell(genomes, fitness)
        print(f"gen {g:3d}  max {float(fitness.numpy().max()):6.1f}  best ever {float(ga.best_fitness.numpy()):6.1f}")


if __name__ == "__main__":
    main()
