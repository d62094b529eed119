"""Evolve XOR with tensorized NEAT, then export the winner.

    python examples/neat_xor.py
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from tfevo.neat import NEAT, XOR, draw, to_keras, to_sympy  # noqa: E402

prob = XOR()
cfg = prob.config(pop_size=150, fitness_threshold=3.9)
algo = NEAT(cfg, seed=0)
summary = algo.run(lambda pop: prob(pop, cfg), 300)
print(summary)
nodes, conns, fit = algo.best
print("best fitness", float(fit))
print("expression:", to_sympy(nodes.numpy(), conns.numpy(), cfg)[0])
to_keras(nodes, conns, cfg).save("/tmp/neat_xor.keras")
draw(nodes, conns, cfg, "/tmp/neat_xor.png")
print("saved /tmp/neat_xor.keras and /tmp/neat_xor.png")
