"""NEAT on the in-graph CartPole-v1 (whole population rolled out in one tf.function).

    python examples/neat_cartpole.py
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from tfevo.neat import NEAT, ControlProblem, NEATConfig  # noqa: E402
from _toy import budget  # TFEVO_EXAMPLE_TOY=1: a few seconds, for the test suite

cfg = NEATConfig(num_inputs=4, num_outputs=2, pop_size=budget(1000, 50), max_nodes=24, max_conns=48, fitness_threshold=500.0)
prob = ControlProblem("CartPole-v1", cfg, episodes=2, seed=0)
algo = NEAT(cfg, seed=0)
print(algo.run(prob, budget(50, 2), verbose=True))
