"""Evaluation speed of tfevo's BBOB functions vs COCO's C implementation (cocoex).

Run: ``python benchmarks/bench_bbob.py [--repeats R] [--dims 10,40] [--pops 16,1000] [--fids 1,2,...]``.
Prints a markdown table: seconds per evaluation of a population ``[P, D]``
(median of R timed blocks, each >= ~0.1 s, after a warm-up call) for

* tfevo graph   -- ``bbob.make(fid, D, instance=1)`` (float64, the default),
* tfevo XLA     -- the same with ``jit_compile=True``,
* cocoex        -- ``cocoex.BareProblem("bbob", fid, D, 1)(X)`` (COCO 2.8 C code,
  one C call per row, float64),

with the set-up time (``make``: instance data and trace, plus the first call,
where XLA compiles) reported separately, the ratio
cocoex / tfevo (> 1 means tfevo is faster) and the largest relative difference
of the two implementations' ``f - f_opt`` on the timed points (as a check that
the same function is timed).  Instance construction time is printed below the
table.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np  # noqa: E402


def _time(call, repeats, budget=0.1):
    """(median seconds per call over ``repeats`` blocks, first-call seconds)."""
    t0 = time.perf_counter()
    call()
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    call()
    one = max(time.perf_counter() - t0, 1e-7)
    n = max(1, int(budget / one))
    res = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(n):
            call()
        res.append((time.perf_counter() - t0) / n)
    return statistics.median(res), first


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--dims", default="10,40")
    ap.add_argument("--pops", default="16,1000")
    ap.add_argument("--fids", default=",".join(str(i) for i in range(1, 25)))
    args = ap.parse_args()

    import cocoex
    import tensorflow as tf

    from tfevo.problems import bbob, bbob_instances

    print("load:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    print()
    print("| f | D | P | tfevo graph s | tfevo XLA s | cocoex s | cocoex/graph | cocoex/XLA "
          "| graph make+trace+1st call s | XLA make+compile+1st call s | max rel diff |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    ratios_g, ratios_x = {}, {}
    for d in [int(v) for v in args.dims.split(",")]:
        for p in [int(v) for v in args.pops.split(",")]:
            for fid in [int(v) for v in args.fids.split(",")]:
                X = np.random.default_rng(fid).uniform(-5, 5, (p, d))
                xt = tf.constant(X)
                t0 = time.perf_counter()
                g = bbob.make(fid, d, instance=1)  # instance data + trace
                mg = time.perf_counter() - t0
                t0 = time.perf_counter()
                x = bbob.make(fid, d, instance=1, jit_compile=True)
                mx = time.perf_counter() - t0
                c = cocoex.BareProblem("bbob", fid, d, 1)
                tg, fg = _time(lambda: g.value(xt).numpy(), args.repeats)
                tx, fx = _time(lambda: x.value(xt).numpy(), args.repeats)
                fg, fx = fg + mg, fx + mx  # make (trace) + first call (XLA compiles on it)
                tc, _ = _time(lambda: c(X), args.repeats)
                ref = np.asarray(c(X)) - g.f_opt
                diff = np.max(np.abs(g.value(xt).numpy() - g.f_opt - ref) / (np.abs(ref) + 1e-12))
                ratios_g.setdefault((d, p), []).append(tc / tg)
                ratios_x.setdefault((d, p), []).append(tc / tx)
                print(f"| f{fid} | {d} | {p} | {tg:.2e} | {tx:.2e} | {tc:.2e} | {tc / tg:.2f} | {tc / tx:.2f} "
                      f"| {fg:.2f} | {fx:.2f} | {diff:.1e} |", flush=True)
    print()
    print("| D | P | median cocoex/graph over functions | median cocoex/XLA |")
    print("|---|---|---|---|")
    for key in ratios_g:
        print(f"| {key[0]} | {key[1]} | {statistics.median(ratios_g[key]):.2f} | {statistics.median(ratios_x[key]):.2f} |")
    print()
    for d in [int(v) for v in args.dims.split(",")]:
        t0 = time.perf_counter()
        for fid in range(1, 25):
            bbob_instances._coco_instance(fid, d, 1)
        tt = (time.perf_counter() - t0) / 24
        t0 = time.perf_counter()
        for fid in range(1, 25):
            cocoex.BareProblem("bbob", fid, d, 1)
        tcoco = (time.perf_counter() - t0) / 24
        print(f"instance data, D={d}: tfevo (NumPy) {tt * 1e3:.1f} ms, cocoex (C) {tcoco * 1e3:.1f} ms per function")
    print()
    print("load:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())


if __name__ == "__main__":
    main()
