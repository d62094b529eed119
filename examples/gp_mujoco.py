"""Multi-output GP trees as MuJoCo controllers (Swimmer-v5) through the pipelined evaluator.

Each tree has one output per action dimension; ``GPPolicy`` squashes the
outputs with tanh into the action bounds.  The population is packed into a
float32 ``[P, 3 * L_max]`` tensor, and ``PipelinedEvaluator`` steps the host
simulators while it evaluates only the active members' trees.

Run: python examples/gp_mujoco.py [--env Swimmer-v5] [--gens 20] [--popsize 64] [--steps 300]
"""

import argparse

import numpy as np

from tfevo import envs
from tfevo.gp import GeneticProgramming, GPConfig, GPPolicy, to_infix
from tfevo.rollout.pipelined import PipelinedEvaluator
from _toy import budget  # TFEVO_EXAMPLE_TOY=1: a few seconds, for the test suite

ap = argparse.ArgumentParser()
ap.add_argument("--env", default="Swimmer-v5")
ap.add_argument("--gens", type=int, default=budget(20, 1))
ap.add_argument("--popsize", type=int, default=budget(64, 8))
ap.add_argument("--steps", type=int, default=budget(300, 10))
ap.add_argument("--envs", type=int, default=budget(16, 4))
args = ap.parse_args()

probe = envs.make(args.env, num_envs=1)
obs_dim, spec = int(np.prod(probe.observation_shape)), probe.action_spec
probe.close()
A = int(np.prod(spec.shape))
functions = ("add", "sub", "mul", "max", "min", "neg")

gp = GeneticProgramming(GPConfig(popsize=args.popsize, max_len=16 * A, num_vars=obs_dim, num_outputs=A,
                                 functions=functions, init_depth=(1, 3), tournament_size=4, elite=2,
                                 parsimony=1e-3), seed=0)
policy = GPPolicy(num_outputs=A, low=spec.low, high=spec.high, functions=functions)
with PipelinedEvaluator(args.env, policy, num_envs=args.envs, num_subsets=2, max_steps=args.steps,
                        seed=0, common_seeds=True) as ev:
    for gen in range(args.gens):
        trees = gp.ask()
        fitness = ev.evaluate(GPPolicy.pack(trees))   # float32 [P], mean episode return
        gp.tell(trees, fitness)
        print(f"gen {gen:3d}  best {float(np.max(fitness)):9.3f}  mean {float(np.mean(fitness)):9.3f}  "
              f"{ev.last_stats['steps_per_second']:.0f} steps/s")
best, fit = gp.best
print("best return", float(fit))
print("controller:", to_infix(best))
