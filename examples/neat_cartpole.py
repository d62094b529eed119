"""NEAT on the in-graph CartPole-v1 (whole population rolled out in one tf.function).

    python examples/neat_cartpole.py
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from tfevo.neat import NEAT, ControlProblem, NEATConfig  # noqa: E402

cfg = NEATConfig(num_inputs=4, num_outputs=2, pop_size=1000, max_nodes=24, max_conns=48, fitness_threshold=500.0)
prob = ControlProblem("CartPole-v1", cfg, episodes=2, seed=0)
algo = NEAT(cfg, seed=0)
print(algo.run(prob, 50, verbose=True))
