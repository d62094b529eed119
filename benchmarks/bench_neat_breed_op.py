"""Micro-benchmark of NEAT breeding: the C++ kernel (custom_ops/neat_breed.cc)
against its pure-TensorFlow reference (the graph breed), on XOR populations
grown by a real run (neat-python's XOR settings, max_nodes=32, max_conns=64).

Times ``NEAT._breed`` as ``tell`` runs it (used widths, slicing, the two
stateless random draws, then breeding) and the breeding call alone, each as
one ``tf.function``: the pure-TF reference (graph breed, TensorFlow's
stateless draws), the breed kernel with TensorFlow's draws (before issue #5's
Philox draws) and the breed kernel with the Philox kernel's draws
(``tfevo.random_ops``, same numbers), alternating call by call in the same
run; the two draws alone, TensorFlow's kernels against the Philox kernel.  Prints a markdown table (median ms after warm-up; trace time
apart).

    python benchmarks/bench_neat_breed_op.py --sizes 1000,10000 --gens 12 --reps 30 --tell

``--tell`` adds whole XOR generations (benchmarks/bench_neat.py's loop) with
the same three variants, alternating.

    python benchmarks/bench_neat_breed_op.py --sizes 1000,10000 --ab 5ff3230

``--ab REV`` instead runs whole XOR generations with the breed kernels of git
revision REV (built under renamed op names, loaded into the same process)
against the working tree's, alternating, and reports wall and process CPU
time per generation and whether both runs bred the same populations.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import subprocess
import sys
import contextlib
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


@contextlib.contextmanager
def tf_draws(on=True):
    """While tracing inside: the random draws by TensorFlow's stateless kernels
    (tf.random.stateless_uniform) instead of tfevo's Philox kernel (same numbers)."""
    from tfevo import random_ops as R

    orig = R._op
    if on:
        R._op = lambda: None
    try:
        yield
    finally:
        R._op = orig


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

    def draws(w, s1, s2):  # the two random draws alone, for the bred widths w = (wn, wc)
        return O.crossover_words(P, w[0], w[1], s1), O.mutation_uniforms(cfg, P, w[0], w[1], s2)

    return (whole(False), whole(True), whole(True), inner(False), inner(True), tf.function(draws, autograph=False),
            tf.function(draws, autograph=False))


def bench(P, gens, reps, seed=0):
    from tfevo.neat import _breed_op as B
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
    wref, wop_tf, wop, iref, iop, drw_tf, drw = make_fns(cfg)
    args_w = (nodes, conns, p1, p2, el, s1, s2, nk, nm)
    args_i = (n, c, p1, p2, el, words, u_all, nk, nm)
    args_d = (B.bred_widths(nodes, conns), s1, s2)
    # (name, function, arguments, traced with TensorFlow's draws)
    fns = (("whole ref", wref, args_w, True), ("whole op tf draws", wop_tf, args_w, True),
           ("whole op", wop, args_w, False), ("inner ref", iref, args_i, False), ("inner op", iop, args_i, False),
           ("draws tf", drw_tf, args_d, True), ("draws", drw, args_d, False))
    trace = {}
    for name, fn, args, tfd in fns:
        t = time.perf_counter()
        with tf_draws(tfd):
            out = fn(*args)
        out[0].numpy()
        trace[name] = time.perf_counter() - t
    # same children, bit for bit (NaN slots equal), and the same draws
    a, b, b2 = wref(*args_w), wop(*args_w), wop_tf(*args_w)
    same = all(np.array_equal(x.numpy(), y.numpy(), equal_nan=x.dtype.is_floating) and
               np.array_equal(x.numpy(), z.numpy(), equal_nan=x.dtype.is_floating) for x, y, z in zip(a, b, b2))
    same = same and all(np.array_equal(x.numpy(), y.numpy()) for x, y in zip(drw_tf(*args_d), drw(*args_d)))
    times = {k: [] for k in trace}
    for _ in range(3):  # warm-up
        for _, fn, args, _ in fns:
            fn(*args)[0].numpy()
    for rep in range(reps):
        order = list(fns)
        if rep % 2:  # the two kernel variants swap places every repetition (neither always runs after the ref)
            order[1], order[2] = order[2], order[1]
        for name, fn, args, _ in order:
            t = time.perf_counter()
            out = fn(*args)
            out[0].numpy()  # (the draws: both outputs are computed before any is returned)
            times[name].append(time.perf_counter() - t)
    med = {k: 1e3 * statistics.median(v) for k, v in times.items()}
    # paired: the two kernel variants ran back to back in every repetition
    diff = np.array(times["whole op tf draws"]) - np.array(times["whole op"])
    paired = (1e3 * float(np.median(diff)), float(np.mean(diff > 0)))
    return dict(P=P, wn=wn, wc=wc, med=med, trace=trace, same=same, paired=paired)


def tell_rounds(P, gens, rounds):
    """Whole XOR generations (ask, evaluate, tell) with the graph breed and
    TensorFlow's draws ("ref"), the breed kernel with TensorFlow's draws
    ("tf draws") and the breed kernel with the Philox kernel's draws ("op"),
    alternating; returns medians over rounds (s/gen, tell s)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from bench_neat import tfevo_gen_times

    from tfevo.neat import _breed_op as B
    from tfevo.neat import neat as neat_mod

    orig = B.use_breed_op
    variants = (("ref", False, True), ("tf draws", True, True), ("op", True, False))
    res = {v[0]: ([], []) for v in variants}
    try:
        for _ in range(rounds):
            for key, use, tfd in variants:
                B.use_breed_op = (lambda u=use: u and orig())
                neat_mod._TELL_CACHE.clear()  # retrace tell with / without the kernels
                with tf_draws(tfd):
                    _, times, _, tell = tfevo_gen_times("xor", P, gens)
                res[key][0].append(statistics.median(times))
                res[key][1].append(tell)
    finally:
        B.use_breed_op = orig
        neat_mod._TELL_CACHE.clear()
    return {u: (statistics.median(a), statistics.median(b)) for u, (a, b) in res.items()}


@functools.lru_cache(maxsize=None)  # a second library with the same op names would register nothing
def old_kernel(rev: str):
    """The breed kernels of git revision ``rev`` (custom_ops/neat_breed.cc),
    built like tfevo.ops builds the current one but with the op names
    renamed (``...Old``), so that both load into one process; returned as an
    object with the current module's function names."""
    import tempfile
    import types

    from tfevo import ops

    src = subprocess.run(["git", "show", f"{rev}:custom_ops/neat_breed.cc"], capture_output=True, text=True,
                         check=True, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__)))).stdout
    for name in ("TfevoNeatBreedWidths", "TfevoNeatBreedHeld", "TfevoNeatBreed"):
        src = src.replace(f'"{name}"', f'"{name}Old"')
    src = src.replace("namespace tfevo_neat_breed", "namespace tfevo_neat_breed_old")
    d = tempfile.mkdtemp()
    with open(os.path.join(d, "neat_breed_old.cc"), "w") as f:
        f.write(src)
    cmd = [ops._compiler(), "-shared", "-fPIC", "-O3", "-march=native", "-I", str(ops.source_dir()),
           os.path.join(d, "neat_breed_old.cc"), "-o", os.path.join(d, "old.so"),
           *tf.sysconfig.get_compile_flags(), *tf.sysconfig.get_link_flags(), "-pthread"]
    subprocess.run(cmd, check=True, capture_output=True)
    mod = tf.load_op_library(os.path.join(d, "old.so"))
    return types.SimpleNamespace(tfevo_neat_breed=mod.tfevo_neat_breed_old,
                                 tfevo_neat_breed_widths=mod.tfevo_neat_breed_widths_old)


def ab_generations(P, rev, gens, rounds=4):
    """Whole XOR generations (ask, evaluate, tell) with the breed kernels of
    revision ``rev`` ("old") and of the working tree ("new"): two runs with
    the same seed, each traced with its kernels, stepping alternately (the
    order swaps every round).  Returns ({variant: (median s/gen, median tell
    s, median process CPU s per generation)}, whole-run populations equal)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from bench_neat import TfevoRun

    from tfevo.neat import _breed_op as B
    from tfevo.neat import neat as neat_mod

    cur = B._op
    old = old_kernel(rev)
    runs = {}
    try:
        for key, mod in (("old", old), ("new", cur())):
            B._op = (lambda m=mod: m)
            neat_mod._TELL_CACHE.clear()
            runs[key] = TfevoRun("xor", P)
            runs[key].step()  # trace with this variant's kernels
            runs[key].step()
    finally:
        B._op = cur
        neat_mod._TELL_CACHE.clear()
    steps = {k: [] for k in runs}
    for r in range(rounds):
        order = list(runs) if r % 2 == 0 else list(runs)[::-1]
        for _ in range(gens // rounds):
            for k in order:
                c0 = time.process_time()
                st = runs[k].step()
                steps[k].append((*st, time.process_time() - c0))
    same = all(np.array_equal(a.numpy(), b.numpy(), equal_nan=True)
               for a, b in zip((runs["old"].algo.nodes, runs["old"].algo.conns),
                               (runs["new"].algo.nodes, runs["new"].algo.conns)))
    return {k: (statistics.median(x[0] for x in v), statistics.median(x[2] for x in v),
                statistics.median(x[3] for x in v)) for k, v in steps.items()}, same


def ab_breed_chain(P, rev, reps, gens=12, chain=8):
    """``_breed`` alone (bred widths, draws, breed kernel) as ``NEAT._breed``
    runs it, old (revision ``rev``) against new kernels: one tf.function
    breeds ``chain`` generations in a row (children become parents, so the
    new kernel meets its own outputs, as in a run), alternating, the order
    swapping every repetition.  Returns {variant: (wall ms, process CPU ms)}
    per generation (medians)."""
    from tfevo.neat import _breed_op as B

    cfg, algo = grown_population(P, gens)
    nodes, conns = algo.ask()
    rng = np.random.default_rng(0)
    p1 = tf.constant(rng.integers(0, P, P), tf.int32)
    p2 = tf.constant(rng.integers(0, P, P), tf.int32)
    el = tf.constant(rng.random(P) < 0.02)
    s1, s2 = tf.constant([0, 1], tf.int64), tf.constant([0, 2], tf.int64)
    nk, nm = algo.next_node_key.read_value(), algo.next_marker.read_value()
    cur = B._op
    fns = {}
    def make(mod):
        def f(n, c):
            B._op = lambda: mod  # while tracing
            try:
                for _ in range(chain):
                    n, c, *_ = B.breed_population(cfg, n, c, p1, p2, el, s1, s2, nk, nm)
            finally:
                B._op = cur
            return n[0, 0, 0]
        return tf.function(f, autograph=False)

    for key, mod in (("old", old_kernel(rev)), ("new", cur())):
        fns[key] = make(mod)
        fns[key](nodes, conns).numpy()
    res = {k: [] for k in fns}
    for r in range(reps):
        for k in (list(fns) if r % 2 == 0 else list(fns)[::-1]):
            t, c0 = time.perf_counter(), time.process_time()
            fns[k](nodes, conns).numpy()
            res[k].append(((time.perf_counter() - t) / chain, (time.process_time() - c0) / chain))
    return {k: (1e3 * statistics.median(x[0] for x in v), 1e3 * statistics.median(x[1] for x in v))
            for k, v in res.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1000,10000")
    ap.add_argument("--gens", type=int, default=12, help="generations of XOR evolution before measuring")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--tell", action="store_true", help="also whole XOR generations, graph breed vs kernels")
    ap.add_argument("--tell-gens", type=int, default=10)
    ap.add_argument("--tell-rounds", type=int, default=4)
    ap.add_argument("--ab", default=None, metavar="REV",
                    help="only whole XOR generations, breed kernels of git REV against the working tree")
    ap.add_argument("--ab-gens", type=int, default=24)
    a = ap.parse_args()
    from tfevo import kernels
    from tfevo.neat import _breed_op as B

    if not kernels.built("TfevoNeatBreed"):
        sys.exit("the neat_breed kernel is not available (compiler missing or TFEVO_DISABLE_CUSTOM_OPS set)")
    load = lambda: subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()  # noqa: E731
    print(f"uptime before: {load()}")
    if a.ab:
        chains = {int(P): ab_breed_chain(int(P), a.ab, a.reps) for P in a.sizes.split(",")}
        res = {int(P): ab_generations(int(P), a.ab, a.ab_gens) for P in a.sizes.split(",")}
        print(f"uptime after: {load()}\n")
        print(f"Whole XOR generations, breed kernels of {a.ab} (old) vs the working tree (new), alternating, "
              f"{a.ab_gens} generations each (medians):\n")
        print("| pop | s/gen old | s/gen new | tell ms old | tell ms new | tell old/new "
              "| process CPU ms/gen old | new | CPU old/new | same populations |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for P, (r, same) in res.items():
            print(f"| {P} | {r['old'][0]:.4f} | {r['new'][0]:.4f} | {1e3 * r['old'][1]:.2f} | "
                  f"{1e3 * r['new'][1]:.2f} | **{r['old'][1] / r['new'][1]:.2f}x** | {1e3 * r['old'][2]:.2f} | "
                  f"{1e3 * r['new'][2]:.2f} | {r['old'][2] / r['new'][2]:.2f}x | {'yes' if same else 'NO'} |")
        print(f"\n`_breed` alone (bred widths + draws + breed kernel), 8 generations chained in one tf.function, "
              f"{a.reps} alternating repetitions (medians per generation):\n")
        print("| pop | wall ms old | wall ms new | process CPU ms old | CPU ms new | CPU old/new |")
        print("|---|---|---|---|---|---|")
        for P, r in chains.items():
            print(f"| {P} | {r['old'][0]:.3f} | {r['new'][0]:.3f} | {r['old'][1]:.3f} | {r['new'][1]:.3f} | "
                  f"**{r['old'][1] / r['new'][1]:.2f}x** |")
        return
    rows = [bench(int(P), a.gens, a.reps) for P in a.sizes.split(",")]
    tells = {int(P): tell_rounds(int(P), a.tell_gens, a.tell_rounds) for P in a.sizes.split(",")} if a.tell else {}
    print(f"uptime after: {load()}\n")
    print("| pop | used slots wn x wc | `_breed` reference (graph, TF draws) ms | kernels + TF draws ms "
          "| kernels + Philox-kernel draws ms | speedup vs reference | draws: TF ms | draws: Philox kernel ms "
          "| draws speedup | Philox draws save in `_breed` ms (paired median; share of pairs faster) "
          "| breeding alone: reference ms | kernel ms | trace s (ref / op) | bit-identical |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        m, t = r["med"], r["trace"]
        print(f"| {r['P']} | {r['wn']} x {r['wc']} | {m['whole ref']:.2f} | {m['whole op tf draws']:.2f} | "
              f"{m['whole op']:.2f} | **{m['whole ref'] / m['whole op']:.1f}x** | {m['draws tf']:.2f} | "
              f"{m['draws']:.2f} | **{m['draws tf'] / m['draws']:.1f}x** | {r['paired'][0]:.2f} "
              f"({100 * r['paired'][1]:.0f}%) | {m['inner ref']:.2f} | "
              f"{m['inner op']:.2f} | {t['whole ref']:.2f} / {t['whole op']:.2f} | {'yes' if r['same'] else 'NO'} |")

    if tells:
        print("\nWhole XOR generations (ask + evaluate + tell; medians of per-round medians, "
              f"{a.tell_gens} generations x {a.tell_rounds} rounds, the three variants alternating):\n")
        print("| pop | s/gen graph breed | s/gen kernels + TF draws | s/gen kernels + Philox draws "
              "| tell s graph breed | tell s kernels + TF draws | tell s kernels + Philox draws "
              "| tell: Philox draws vs TF draws |")
        print("|---|---|---|---|---|---|---|---|")
        for P, r in tells.items():
            print(f"| {P} | {r['ref'][0]:.4f} | {r['tf draws'][0]:.4f} | {r['op'][0]:.4f} | {r['ref'][1]:.4f} | "
                  f"{r['tf draws'][1]:.4f} | {r['op'][1]:.4f} | {r['tf draws'][1] / r['op'][1]:.2f}x |")


if __name__ == "__main__":
    main()
