"""A/B timing of the Gaussian and Iso+LineDD MAP-Elites loops between two checkouts of tfevo.

    python benchmarks/bench_qd_ab.py --a /path/to/old/checkout --b . [--rounds 3] [--batch 1000]
    python benchmarks/bench_qd_ab.py --a /path/to/old/checkout --b . --loops cmame   # CMA-ME 15 x 37

Each round runs, for each checkout in turn, a fresh process that times ``--iters``
``me.step(rastrigin_qd)`` iterations (100-D, 100x100 grid, after 5 warm-up
iterations) for GaussianEmitter(sigma 0.005) and IsoLineEmitter(0.005, 0.05).
Per process the 10th percentile of the wall times (and the median CPU time) per iteration is kept (on a shared machine the
least disturbed iterations are the steadiest measure of the work); alternating processes see the
same load, and the medians of those over rounds are compared.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

CHILD = r'''
import json, sys, time
import tensorflow as tf
from tfevo.qd import (ESEmitter, GaussianEmitter, GridArchive, IsoLineEmitter, MAPElites, rastrigin_qd,
                      rastrigin_qd_offset)
D, B, N = 100, int(sys.argv[1]), int(sys.argv[2])
out = {}
for name in sys.argv[3].split(","):
    a = GridArchive(D, [100, 100], [(0, 1), (0, 1)], qd_offset=rastrigin_qd_offset(D))
    if name == "cmame":  # CMA-ME as bench_qd_cmame.py: 15 searches x 37, 2imp, mu, restart on no improvement
        em = ESEmitter(D, 37, num_emitters=15, sigma=0.1, selection_rule="mu", seed=0)
        B = 15 * 37
    else:
        em = GaussianEmitter(D, B, sigma=0.005, bounds=(0, 1)) if name == "gaussian" else IsoLineEmitter(D, B, bounds=(0, 1))
    me = MAPElites(a, [em], init_bounds=(0, 1), seed=0)
    task = tf.function(rastrigin_qd, input_signature=[tf.TensorSpec([B, D], tf.float32)])
    for _ in range(5):
        me.step(task).status.numpy()
    times, cpu = [], []
    for _ in range(N):
        t, c = time.perf_counter(), time.process_time()
        me.step(task).status.numpy()
        times.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    times.sort()
    cpu.sort()
    out[name] = 1e3 * times[len(times) // 10]  # 10th percentile: the least disturbed iterations
    out[name + "_cpu"] = 1e3 * cpu[len(cpu) // 2]  # median CPU (process, all threads)
print(json.dumps(out))
'''


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--a", required=True)
    ap.add_argument("--b", default=".")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--iters", type=int, default=100)
    ap.add_argument("--loops", default="gaussian,isoline", help="comma-separated: gaussian, isoline, cmame")
    args = ap.parse_args()
    loops = args.loops.split(",")
    res = {"a": [], "b": []}
    for _ in range(args.rounds):
        for key in ("a", "b"):
            env = dict(os.environ, PYTHONPATH=os.path.abspath(getattr(args, key)), TF_CPP_MIN_LOG_LEVEL="2")
            out = subprocess.run([sys.executable, "-c", CHILD, str(args.batch), str(args.iters), args.loops], env=env,
                                 capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
            res[key].append(json.loads(out))
            print(key, res[key][-1], flush=True)
    for name in loops + [n + "_cpu" for n in loops]:
        a = statistics.median(r[name] for r in res["a"])
        b = statistics.median(r[name] for r in res["b"])
        print(f"{name}: a {a:.3f} ms/iter, b {b:.3f} ms/iter, b/a {b / a:.3f}")


if __name__ == "__main__":
    main()
