"""Cost of the first MAPElites.step call (tracing the program, then its first run), per instance.

The CMA-ME setting of ``bench_qd_cmame.py`` (15 searches x 37, D = 100,
Sphere-QD, 100x100 grid).  ``--instances`` fresh ``MAPElites`` are built one
after another in one process, each with its own seed, and each runs its first
``--iters`` iterations.  Per instance: the Python tracing of the step program
(to the point the concrete function exists), the first call (instantiation,
graph optimization, the run itself), and the next iterations.  With
``--no-share`` the shared-program cache is emptied before each instance, so
each traces its own program (the cost without sharing).

    python benchmarks/bench_qd_trace.py [--instances 3] [--no-share]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # the repo's tfevo


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--instances", type=int, default=3)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--no-share", action="store_true")
    args = ap.parse_args()
    import tensorflow as tf

    from tfevo.qd import ESEmitter, GridArchive, MAPElites, _shared_step, sphere_qd

    marks = {}
    remember = _shared_step.remember

    def timed_remember(*a, **k):  # called right after the program is traced
        marks["traced"] = (time.perf_counter(), time.process_time())
        return remember(*a, **k)

    _shared_step.remember = timed_remember
    print("| instance | trace wall s | trace CPU s | first call wall s | first call CPU s | "
          f"next {args.iters - 1} iterations CPU s |")
    print("|---|---|---|---|---|---|")
    for i in range(args.instances):
        if args.no_share:
            _shared_step._cache.clear()
        archive = GridArchive(100, (100, 100), [(0, 1), (0, 1)], qd_offset=-2500.0)
        em = ESEmitter(100, 37, num_emitters=15, sigma=0.1, ranker="2imp", selection_rule="mu",
                       restart_rule="no_improvement", seed=i)
        me = MAPElites(archive, [em], init_bounds=(0, 1), seed=i)
        fn = tf.function(sphere_qd, input_signature=[tf.TensorSpec([555, 100], tf.float32)])
        marks.clear()
        w, c = time.perf_counter(), time.process_time()
        me.step(fn).status.numpy()
        w1, c1 = time.perf_counter(), time.process_time()
        tw, tc = marks.get("traced", (w, c))
        for _ in range(args.iters - 1):
            me.step(fn).status.numpy()
        c2 = time.process_time()
        print(f"| {i} | {tw - w:.3f} | {tc - c:.3f} | {w1 - tw:.3f} | {c1 - tc:.3f} | {c2 - c1:.3f} |", flush=True)


if __name__ == "__main__":
    main()
