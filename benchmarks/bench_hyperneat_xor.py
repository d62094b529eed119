"""HyperNEAT XOR (examples/neat_hyperneat_xor.py's substrate and settings: 3-5-1 layered
substrate, population 150, threshold 3.9) over a fixed list of seeds, each seed run once by every
code tree given, alternating per seed so both see the same machine load.

    python benchmarks/bench_hyperneat_xor.py --seeds 10 [--first-seed 0] --generations 300 --trees TREE...

One JSON line per (seed, tree): generations to solve (or the budget), solved, best fitness.
"""
import argparse
import json
import os
import subprocess
import sys

CHILD = r"""
import json, sys
import numpy as np
from tfevo.neat import NEAT, HyperNEAT, HyperNEATProblem, Substrate
sub = Substrate.layered([[(-1.0, -1.0), (1.0, -1.0), (0.0, -1.0)],
                         [(-1.0, 0.0), (-0.5, 0.0), (0.0, 0.0), (0.5, 0.0), (1.0, 0.0)], [(0.0, 1.0)]])
hn = HyperNEAT(sub, weight_threshold=0.2, max_weight=5.0, activation="sigmoid")
X = np.array([[0, 0, 1], [0, 1, 1], [1, 0, 1], [1, 1, 1]], np.float32)
Y = np.array([[0], [1], [1], [0]], np.float32)
prob = HyperNEATProblem(hn, X, Y)
cfg = hn.cppn_config(pop_size=150, max_nodes=24, max_conns=48, fitness_threshold=3.9)
seed, gens = int(sys.argv[1]), int(sys.argv[2])
r = NEAT(cfg, seed=seed).run(lambda pop: prob(pop, cfg), gens)
print("RESULT " + json.dumps(r))
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--generations", type=int, default=300)
    ap.add_argument("--trees", nargs="+", required=True)
    a = ap.parse_args()
    for seed in range(a.first_seed, a.first_seed + a.seeds):
        for tree in a.trees:
            env = dict(os.environ, PYTHONPATH=tree, TF_CPP_MIN_LOG_LEVEL="3")
            out = subprocess.run([sys.executable, "-c", CHILD, str(seed), str(a.generations)], env=env,
                                 capture_output=True, text=True, cwd=tree)
            line = [x for x in out.stdout.splitlines() if x.startswith("RESULT ")]
            r = json.loads(line[-1][7:]) if line else {"error": out.stderr[-500:]}
            print(json.dumps({"seed": seed, "tree": tree, **r}), flush=True)


if __name__ == "__main__":
    main()
