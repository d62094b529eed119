"""Evolve XOR with tensorized NEAT, then export the winner.

    python examples/neat_xor.py
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from tfevo.neat import NEAT, XOR, draw, to_keras, to_sympy  # noqa: E402
from _toy import budget  # TFEVO_EXAMPLE_TOY=1: a few seconds, for the test suite

prob = XOR()
cfg = prob.config(pop_size=150, fitness_threshold=3.9)
algo = NEAT(cfg, seed=0)
summary = algo.run(lambda pop: prob(pop, cfg), budget(300, 2))
print(summary)
nodes, conns, fit = algo.best
print("best fitness", float(fit))
print("expression:", to_sympy(nodes.numpy(), conns.numpy(), cfg)[0])
to_keras(nodes, conns, cfg).save("neat_xor.keras")
draw(nodes, conns, cfg, "neat_xor.png")
print("saved neat_xor.keras and neat_xor.png")
