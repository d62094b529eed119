"""NEAT (recurrent networks) on MuJoCo Swimmer-v5 through the pipelined evaluator.

The genomes go to the host simulators as flat tensors (``NEATPolicy.flatten``);
each simulator slot carries its network's node values from step to step, and
they are reset to zero when the slot starts a new episode.

    python examples/neat_swimmer.py [generations]
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from tfevo.envs import make  # noqa: E402
from tfevo.neat import NEAT, NEATConfig, NEATPolicy  # noqa: E402
from tfevo.rollout import PipelinedEvaluator  # noqa: E402
from _toy import budget  # TFEVO_EXAMPLE_TOY=1: a few seconds, for the test suite

gens = int(sys.argv[1]) if len(sys.argv) > 1 else budget(20, 1)
probe = make("Swimmer-v5", num_envs=1)
cfg = NEATConfig(num_inputs=8, num_outputs=2, pop_size=budget(128, 16), max_nodes=24, max_conns=64, feed_forward=False,
                 activation_default="tanh", activation_options=("tanh",), compatibility_threshold=2.0)
policy = NEATPolicy(cfg, probe.action_spec)   # tanh outputs scaled to the action bounds
probe.close()
algo = NEAT(cfg, seed=0)
with PipelinedEvaluator("Swimmer-v5", policy, num_envs=budget(64, 4), num_subsets=2,
                        max_steps=budget(300, 10), seed=0) as ev:
    for g in range(gens):
        genomes = algo.ask()
        fitness = ev.evaluate(policy.flatten(genomes))
        algo.tell(genomes, fitness)
        print(f"generation {g}: best {float(fitness.numpy().max()):8.2f}  "
              f"mean {float(fitness.numpy().mean()):8.2f}  ({ev.last_stats['steps_per_second']:,.0f} steps/s)")
