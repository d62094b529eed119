"""A/B: the tie-averaged centered ranks / utilities against the rank-by-position ones they replaced.

Times one call of each inside an XLA tf.function (as OpenES's and SNES's tell
run), alternating the two, median of ``--repeats`` blocks of ``--calls`` calls.
Usage: python benchmarks/bench_shaping_ties.py [--repeats 7 --calls 200]
"""

import argparse
import time

import numpy as np
import tensorflow as tf

from tfevo.strategies.shaping import centered_rank, nes_utilities, ranks, utility_weights


def old_centered_rank(f):  # rank / (P - 1) - 0.5, ties by position
    r = tf.cast(ranks(f), tf.float32)
    p = tf.cast(tf.shape(r)[0], tf.float32)
    return r / tf.maximum(p - 1.0, 1.0) - 0.5


def old_utilities(f, table):
    return tf.gather(table, tf.shape(f)[0] - 1 - ranks(f))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--calls", type=int, default=200)
    a = ap.parse_args()
    print("P | function | old us/call | new us/call | new/old")
    for p in (18, 256, 4096):
        f = tf.random.normal([p], seed=1)
        table = tf.constant(nes_utilities(p))
        pairs = {
            "centered_rank": (tf.function(old_centered_rank, jit_compile=True),
                              tf.function(centered_rank, jit_compile=True)),
            "utility_weights": (tf.function(lambda v: old_utilities(v, table), jit_compile=True),
                                tf.function(lambda v: utility_weights(v, table), jit_compile=True)),
        }
        for name, (old, new) in pairs.items():
            old(f).numpy(), new(f).numpy()
            times = {"old": [], "new": []}
            for _ in range(a.repeats):
                for key, fn in (("old", old), ("new", new)):
                    t = time.perf_counter()
                    for _ in range(a.calls):
                        out = fn(f)
                    out.numpy()
                    times[key].append((time.perf_counter() - t) / a.calls * 1e6)
            o, n = np.median(times["old"]), np.median(times["new"])
            print(f"{p} | {name} | {o:.1f} | {n:.1f} | {n / o:.2f}")


if __name__ == "__main__":
    main()
