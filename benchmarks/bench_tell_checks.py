"""Cost of tell's host-side fitness check (non-finite count and warning) per ask+tell.

Usage::

    python benchmarks/bench_tell_checks.py [--dims 100 1000] [--repeats 9] [--budget 0.2]

For each strategy and D, the same object runs ask+tell with the check as
shipped and with it replaced by a no-op, in alternating blocks of ~``budget``
seconds (so a change of machine load hits both alike); the table shows the
median seconds per generation and the ratio (checked / unchecked).  Fitness is
finite (the usual case: the check only counts).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dims", type=int, nargs="+", default=[100, 1000])
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--budget", type=float, default=0.2)
    args = ap.parse_args()
    import tensorflow as tf

    from tfevo.strategies import SNES, OpenES, SepCMAES

    makers = {
        "OpenAI-ES": lambda d: OpenES(d, 64, learning_rate=0.01, weight_decay=0.0, seed=0),
        "SNES": lambda d: SNES(d, seed=0),
        "Sep-CMA-ES": lambda d: SepCMAES(d, sigma=0.1, seed=0, dtype="float32"),
    }
    print("| strategy | D | P | checked (us/gen) | unchecked (us/gen) | ratio |")
    print("|---|---|---|---|---|---|")
    for name, make in makers.items():
        for d in args.dims:
            algo = make(d)
            fit = tf.constant(np.random.default_rng(0).standard_normal(algo.popsize).astype(np.float32))
            real = algo._note_nonfinite

            def step():
                algo.tell(algo.ask(), fit)

            for _ in range(20):
                step()
            t = time.perf_counter()
            step()
            n = max(1, int(args.budget / max(time.perf_counter() - t, 1e-6)))
            times = {True: [], False: []}
            for r in range(args.repeats):
                for checked in ((True, False) if r % 2 == 0 else (False, True)):  # alternate the order
                    algo._note_nonfinite = real if checked else (lambda f: None)
                    t = time.perf_counter()
                    for _ in range(n):
                        step()
                    times[checked].append((time.perf_counter() - t) / n)
            a, b = np.median(times[True]), np.median(times[False])
            print(f"| {name} | {d} | {algo.popsize} | {a * 1e6:.1f} | {b * 1e6:.1f} | {a / b:.3f} |", flush=True)


if __name__ == "__main__":
    main()
