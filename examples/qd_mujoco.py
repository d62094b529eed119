"""QD-RL: MAP-Elites over MLP policies on Walker2d-v5, feet-contact descriptors.

Uni-directional locomotion as in QDax: fitness = episode return, descriptor =
fraction of steps each foot touches the ground (2-D, a 32x32 grid).  Policies
are PopulationModel MLPs, evaluated on batched MuJoCo by the pipelined
evaluator.  Use --task omni-ant for Ant with final x-y position descriptors.

    python examples/qd_mujoco.py --iterations 50 --batch 64
"""

import argparse

import tensorflow as tf

from tfevo import envs, nn
from tfevo.qd import GridArchive, IsoLineEmitter, MAPElites, archive_heatmap
from tfevo.rollout import PipelinedEvaluator
from tfevo.training import Trainer
from _toy import budget  # TFEVO_EXAMPLE_TOY=1: a few seconds, for the test suite

ap = argparse.ArgumentParser()
ap.add_argument("--task", default="walker", choices=["walker", "omni-ant"])
ap.add_argument("--iterations", type=int, default=budget(50, 1))
ap.add_argument("--batch", type=int, default=budget(64, 8))
ap.add_argument("--steps", type=int, default=budget(300, 10))
ap.add_argument("--run-dir", default="runs/qd-mujoco")
args = ap.parse_args()

env_id, cols, ranges = {"walker": ("Walker2d-v5", slice(2, 4), [(0, 1), (0, 1)]),
                        "omni-ant": ("Ant-v5", slice(0, 2), [(-15, 15), (-15, 15)])}[args.task]
spec = envs.make(env_id, 1)
model = nn.PopulationModel(nn.mlp(spec.observation_shape, spec.action_spec.policy_output_size, hidden=(32, 32)))
policy = nn.Policy(model, spec.action_spec)
evaluator = PipelinedEvaluator(env_id, policy, num_envs=budget(32, 4), num_subsets=2, max_steps=args.steps, descriptors=True)


def evaluate(params):
    fitness, desc = evaluator.evaluate(params)
    return fitness, tf.convert_to_tensor(desc)[:, cols]   # feet contacts (walker) or final x-y (ant)


archive = GridArchive(model.num_params, [32, 32], ranges, qd_offset=-500.0)
me = MAPElites(archive, [IsoLineEmitter(model.num_params, args.batch, iso_sigma=0.01, line_sigma=0.1)],
               init_solutions=model.init_params(args.batch, seed=0), seed=0)
Trainer(me, evaluate, run_dir=args.run_dir, generations=args.iterations).run()
print(me.metrics())
print("heatmap:", archive_heatmap(archive, f"{args.run_dir}/archive.png"))
