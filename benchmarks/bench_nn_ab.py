"""A/B timing of PopulationModel forward rows between two checkouts of tfevo, interleaved.

Each (checkout, case) runs in its own subprocess, alternating checkouts round by round, so machine
load drifts hit both alike; the reported number is the ratio of medians (new / base).

    python benchmarks/bench_nn_ab.py --base /tmp/tfevo-base --new . --rounds 3
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

CASES = [("mlp", 64, 1), ("mlp", 256, 1), ("mlp", 1024, 1), ("mlp", 256, 32), ("dqn", 16, 1), ("dqn", 16, 8)]

CHILD = r"""
import json, sys, time
import numpy as np, tensorflow as tf
from tfevo import nn
net, P, B, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
template = nn.mlp((8,), 2, hidden=(64, 64)) if net == "mlp" else nn.nature_dqn(18)
pm = nn.PopulationModel(template)
params = pm.init_params(P, seed=0)
x = tf.random.uniform((P, B) + pm.input_shape)
np.asarray(pm(params, x))
ts = []
for _ in range(reps):
    t0 = time.perf_counter()
    np.asarray(pm(params, x))
    ts.append(time.perf_counter() - t0)
print(json.dumps({"median_ms": 1e3 * float(np.median(ts))}))
"""


def run(path, net, P, B, reps):
    env = dict(os.environ, PYTHONPATH=os.path.abspath(path), TF_CPP_MIN_LOG_LEVEL="3")
    out = subprocess.run([sys.executable, "-c", CHILD, net, str(P), str(B), str(reps)], env=env,
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])["median_ms"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True)
    ap.add_argument("--new", default=".")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--networks", choices=("all", "mlp", "dqn"), default="all")
    args = ap.parse_args()
    print("| network | P | B | base ms (median of rounds) | new ms | new/base |")
    print("|---|---|---|---|---|---|")
    for net, P, B in CASES:
        if args.networks not in ("all", net):
            continue
        reps = 200 if net == "mlp" else 15
        base, new = [], []
        for r in range(args.rounds):
            order = [(args.base, base), (args.new, new)] if r % 2 == 0 else [(args.new, new), (args.base, base)]
            for path, acc in order:
                acc.append(run(path, net, P, B, reps))
        b, n = statistics.median(base), statistics.median(new)
        print(f"| {'MLP 8-64-64-2' if net == 'mlp' else 'Nature-DQN 84x84x4, 18 act'} | {P} | {B} | {b:.3f} | "
              f"{n:.3f} | {n / b:.2f} |", flush=True)


if __name__ == "__main__":
    main()
