"""HyperNEAT: a CPPN paints the weights of a 3-5-1 substrate that must compute XOR.

    python examples/neat_hyperneat_xor.py
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from tfevo.neat import NEAT, HyperNEAT, HyperNEATProblem, Substrate  # noqa: E402
from _toy import budget  # TFEVO_EXAMPLE_TOY=1: a few seconds, for the test suite

sub = Substrate.layered([[(-1.0, -1.0), (1.0, -1.0), (0.0, -1.0)],
                         [(-1.0, 0.0), (-0.5, 0.0), (0.0, 0.0), (0.5, 0.0), (1.0, 0.0)],
                         [(0.0, 1.0)]])
hn = HyperNEAT(sub, weight_threshold=0.2, max_weight=5.0, activation="sigmoid")
X = np.array([[0, 0, 1], [0, 1, 1], [1, 0, 1], [1, 1, 1]], np.float32)  # last input = bias
Y = np.array([[0], [1], [1], [0]], np.float32)
prob = HyperNEATProblem(hn, X, Y)
cfg = hn.cppn_config(pop_size=150, max_nodes=24, max_conns=48, fitness_threshold=3.9)
algo = NEAT(cfg, seed=0)
print(algo.run(lambda pop: prob(pop, cfg), budget(300, 2)))
