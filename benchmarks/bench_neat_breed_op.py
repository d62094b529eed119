"""Micro-benchmark of NEAT breeding: the C++ kernel (custom_ops/neat_breed.cc)
against its pure-TensorFlow reference (the graph breed), on XOR populations
grown by a real run (neat-python's XOR settings, max_nodes=32, max_conns=64).

Times ``NEAT._breed`` as ``tell`` runs it (used widths, slicing, the two
stateless random draws, then breeding) and the breeding call alone, each as
one ``tf.function``; the reference and the kernel alternate call by call in
the same run.  Prints a markdown table (median ms after warm-up; trace time
apart).

    python benchmarks/bench_neat_breed_op.py --sizes 1000,10000 --gens 12 --reps 30 --tell

``--tell`` adds whole XOR generations (benchmarks/bench_neat.py's loop) with
the graph breed and with the kernels, alternating.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402


def grown_population(P: int, gens: int, seed: int = 0):
    from tfevo.neat import NEAT, XOR

    prob = XOR()
    cfg = prob.config(pop_size=P, max_nodes=32, max_conns=64)
    algo = NEAT(cfg, seed=seed)
    for _ in range(gens):
        pop = algo.ask()
        algo.tell(pop, prob(pop, cfg))
    return cfg, algo


def make_fns(cfg):
    from tfevo.neat import _breed_op as B
    from tfevo.neat import operators as O
    from tfevo.neat.genome import conn_valid, node_valid

    P, N, C = cfg.pop_size, cfg.max_nodes, cfg.max_conns
    sig = [tf.TensorSpec([P, N, 5], tf.float32), tf.TensorSpec([P, C, 5], tf.float32),
           tf.TensorSpec([P], tf.int32), tf.TensorSpec([P], tf.int32), tf.TensorSpec([P], tf.bool),
           tf.TensorSpec([2], tf.int64), tf.TensorSpec([2], tf.int64), tf.TensorSpec([], tf.int64),
           tf.TensorSpec([], tf.int64)]

    def whole(use_op):  # what NEAT._breed does on the default path (kernels) / did before (graph)
        def f(nodes, conns, p1, p2, el, s1, s2, nk, nm):
            if use_op:
                return B.breed_population(cfg, nodes, conns, p1, p2, el, s1, s2, nk, nm)
            wn = tf.minimum(O.used_width(node_valid(nodes)) + 1, N)
            wc = tf.minimum(O.used_width(conn_valid(conns)) + 3, C)
            n, c = nodes[:, :wn], conns[:, :wc]
            words = O.crossover_words(P, wn, wc, s1)
            u_all = O.mutation_uniforms(cfg, P, wn, wc, s2)
            return B.breed(cfg, n, c, p1, p2, el, words, u_all, nk, nm, use_op=use_op)
        return tf.function(f, input_signature=sig, autograph=False)

    def inner(use_op):  # the breeding call alone, on sliced inputs and drawn numbers
        def f(n, c, p1, p2, el, words, u_all, nk, nm):
            return B.breed(cfg, n, c, p1, p2, el, words, u_all, nk, nm, use_op=use_op)
        return tf.function(f, autograph=False, reduce_retracing=True)

    def draws(nodes, conns, s1, s2):  # the random numbers alone (TensorFlow's stateless kernels)
        w = B.bred_widths(nodes, conns)
        return O.crossover_words(P, w[0], w[1], s1), O.mutation_uniforms(cfg, P, w[0], w[1], s2)

    return whole(False), whole(True), inner(False), inner(True), tf.function(draws, autograph=False)


def bench(P, gens, reps, seed=0):
    from tfevo.neat import operators as O
    from tfevo.neat.genome import conn_valid, node_valid

    cfg, algo = grown_population(P, gens, seed)
    nodes, conns = algo.ask()
    rng = np.random.default_rng(seed)
    p1 = tf.constant(rng.integers(0, P, P), tf.int32)
    p2 = tf.constant(rng.integers(0, P, P), tf.int32)
    el = tf.constant(rng.random(P) < 0.02)
    s1, s2 = tf.constant([seed, 1], tf.int64), tf.constant([seed, 2], tf.int64)
    nk, nm = algo.next_node_key.read_value(), algo.next_marker.read_value()
    wn = min(int(O.used_width(node_valid(nodes))) + 1, cfg.max_nodes)
    wc = min(int(O.used_width(conn_valid(conns))) + 3, cfg.max_conns)
    n, c = nodes[:, :wn], conns[:, :wc]
    words = O.crossover_words(P, wn, wc, s1)
    u_all = O.mutation_uniforms(cfg, P, wn, wc, s2)
    wref, wop, iref, iop, drw = make_fns(cfg)
    args_w = (nodes, conns, p1, p2, el, s1, s2, nk, nm)
    args_i = (n, c, p1, p2, el, words, u_all, nk, nm)
    trace = {}
    for name, fn, args in (("whole ref", wref, args_w), ("whole op", wop, args_w), ("inner ref", iref, args_i),
                           ("inner op", iop, args_i)):
        t = time.perf_counter()
        out = fn(*args)
        out[0].numpy()
        trace[name] = time.perf_counter() - t
    # same children, bit for bit (NaN slots equal)
    a, b = wref(*args_w), wop(*args_w)
    same = all(np.array_equal(x.numpy(), y.numpy(), equal_nan=x.dtype.is_floating) for x, y in zip(a, b))
    args_d = (nodes, conns, s1, s2)
    drw(*args_d)
    trace["draws"] = 0.0
    times = {k: [] for k in trace}
    for _ in range(3):  # warm-up
        for fn, args in ((wref, args_w), (wop, args_w), (iref, args_i), (iop, args_i)):
            fn(*args)[0].numpy()
    for _ in range(reps):
        for name, fn, args in (("whole ref", wref, args_w), ("whole op", wop, args_w), ("inner ref", iref, args_i),
                               ("inner op", iop, args_i), ("draws", drw, args_d)):
            t = time.perf_counter()
            fn(*args)[0].numpy()
            times[name].append(time.perf_counter() - t)
    med = {k: 1e3 * statistics.median(v) for k, v in times.items()}
    return dict(P=P, wn=wn, wc=wc, med=med, trace=trace, same=same)


def tell_rounds(P, gens, rounds):
    """Whole XOR generations (ask, evaluate, tell) with the graph breed and
    with the kernels, alternating; returns medians over rounds (s/gen, tell s)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from bench_neat import tfevo_gen_times

    from tfevo.neat import _breed_op as B
    from tfevo.neat import neat as neat_mod

    orig = B.use_breed_op
    res = {False: ([], []), True: ([], [])}
    try:
        for _ in range(rounds):
            for use in (False, True):
                B.use_breed_op = (lambda u=use: u and orig())
                neat_mod._TELL_CACHE.clear()  # retrace tell with / without the kernel
                _, times, _, tell = tfevo_gen_times("xor", P, gens)
                res[use][0].append(statistics.median(times))
                res[use][1].append(tell)
    finally:
        B.use_breed_op = orig
        neat_mod._TELL_CACHE.clear()
    return {u: (statistics.median(a), statistics.median(b)) for u, (a, b) in res.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1000,10000")
    ap.add_argument("--gens", type=int, default=12, help="generations of XOR evolution before measuring")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--tell", action="store_true", help="also whole XOR generations, graph breed vs kernels")
    ap.add_argument("--tell-gens", type=int, default=10)
    ap.add_argument("--tell-rounds", type=int, default=2)
    a = ap.parse_args()
    from tfevo.neat import _breed_op as B

    if not B.breed_op_available():
        sys.exit("the neat_breed kernel is not available (compiler missing or TFEVO_DISABLE_CUSTOM_OPS set)")
    load = lambda: subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()  # noqa: E731
    print(f"uptime before: {load()}")
    rows = [bench(int(P), a.gens, a.reps) for P in a.sizes.split(",")]
    tells = {int(P): tell_rounds(int(P), a.tell_gens, a.tell_rounds) for P in a.sizes.split(",")} if a.tell else {}
    print(f"uptime after: {load()}\n")
    print("| pop | used slots wn x wc | `_breed` reference ms | `_breed` with kernels ms | speedup "
          "| random draws in both ms | breeding alone: reference ms | kernel ms | speedup | trace s (ref / op) "
          "| bit-identical |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        m, t = r["med"], r["trace"]
        print(f"| {r['P']} | {r['wn']} x {r['wc']} | {m['whole ref']:.2f} | {m['whole op']:.2f} | "
              f"**{m['whole ref'] / m['whole op']:.1f}x** | {m['draws']:.2f} | {m['inner ref']:.2f} | "
              f"{m['inner op']:.2f} | {m['inner ref'] / m['inner op']:.1f}x | {t['whole ref']:.2f} / "
              f"{t['whole op']:.2f} | {'yes' if r['same'] else 'NO'} |")


    if tells:
        print("\nWhole XOR generations (ask + evaluate + tell; medians of per-round medians, "
              f"{a.tell_gens} generations x {a.tell_rounds} rounds, graph breed and kernels alternating):\n")
        print("| pop | s/gen graph breed | s/gen breed kernels | tell s graph breed | tell s breed kernels | tell speedup |")
        print("|---|---|---|---|---|---|")
        for P, r in tells.items():
            print(f"| {P} | {r[False][0]:.4f} | {r[True][0]:.4f} | {r[False][1]:.4f} | {r[True][1]:.4f} | "
                  f"{r[False][1] / r[True][1]:.1f}x |")


if __name__ == "__main__":
    main()
