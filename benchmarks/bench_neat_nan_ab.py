"""A/B of the NEAT inference kernel before and after NaN propagation in max/min/maxabs/median/hat.

Builds ``custom_ops/neat_forward.cc`` at git revision ``--rev`` beside the working tree's kernels
(ops renamed ``...Old``; ``bench_neat._kernel_at``), then on the same random genomes
(``tests/kernels/test_neat_forward_op.random_genomes``, every activation and aggregation, or one
aggregation) runs ``TfevoNeatEvaluate`` of both (each op function called directly) in alternating
rounds: it checks the outputs are bit-identical on finite inputs and reports the median ms per
call of each and the ratio new/old.

    PYTHONPATH=$PWD python benchmarks/bench_neat_nan_ab.py --rev 5d2791b --pop 1000 --rows 4,16
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rev", default="5d2791b")
    ap.add_argument("--pop", type=int, default=1000)
    ap.add_argument("--rows", default="4,16")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--calls", type=int, default=10)
    a = ap.parse_args()
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    sys.path[:0] = [os.path.join(root, d) for d in ("benchmarks", "tests", os.path.join("tests", "kernels"))]
    import tensorflow as tf

    from bench_neat import _kernel_at
    from test_neat_forward_op import ALL_ACT, ALL_AGG, random_genomes
    from tfevo import kernels
    from tfevo.neat import functions as F

    old = _kernel_at(a.rev, "neat_forward", "Old").tfevo_neat_evaluate_old
    new = kernels.kernel("TfevoNeatEvaluate", True)  # both called directly, with the same attributes
    I, O, N, C = 3, 2, 14, 30
    for aggs in (ALL_AGG, ("max",), ("median",)):
        acts = ALL_ACT
        nodes, conns = random_genomes(a.pop, N, C, I, O, seed=7, act_ids=[F.activation_id(x) for x in acts],
                                      agg_ids=[F.aggregation_id(x) for x in aggs])
        nodes, conns = tf.constant(nodes), tf.constant(conns)
        attrs = dict(num_inputs=I, num_outputs=O, activations=[F.activation_id(x) for x in acts],
                     aggregations=[F.aggregation_id(x) for x in aggs])
        for B in (int(b) for b in a.rows.split(",")):
            x = tf.constant(np.random.default_rng(B).uniform(-2, 2, (a.pop, B, I)).astype(np.float32))
            new_fn = lambda: new(nodes, conns, x, tf.zeros([0], tf.bool), **attrs)  # noqa: E731
            old_fn = lambda: old(nodes, conns, x, tf.zeros([0], tf.bool), **attrs)  # noqa: E731
            same = np.array_equal(new_fn().numpy(), old_fn().numpy(), equal_nan=True)
            t = {"new": [], "old": []}
            for r in range(a.rounds):
                order = (("new", new_fn), ("old", old_fn))
                for name, fn in order if r % 2 == 0 else order[::-1]:
                    fn()
                    t0 = time.perf_counter()
                    for _ in range(a.calls):
                        fn()
                    t[name].append((time.perf_counter() - t0) / a.calls * 1e3)
            mn, mo = float(np.median(t["new"])), float(np.median(t["old"]))
            label = "all" if len(aggs) > 1 else aggs[0]
            print(f"| {label} | {a.pop} | {B} | {mo:.3f} | {mn:.3f} | {mn / mo:.3f} | {same} |", flush=True)


if __name__ == "__main__":
    main()
