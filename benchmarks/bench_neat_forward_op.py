"""NEAT inference: C++ kernels (custom_ops/neat_forward.cc) against the pure-TF reference.

Evolved populations (XOR with max_nodes=32/max_conns=64, CartPole-v1 with
24/48, a few generations of tfevo.neat so genomes have hidden nodes) are
evaluated by:

* ``prepare+forward``: programs built and run once (XOR: 4 rows shared by
  all members); ``evaluate``: the same as one fused kernel call
  (``TfevoNeatEvaluate``, what SupervisedProblem runs per generation for
  feed-forward genomes), checked equal bit for bit;
* ``forward``: one forward of prepared networks on one row per member (what
  a control rollout does per step);
* ``problem``: the XOR problem's whole evaluation call, and the CartPole
  ControlProblem's whole rollout (``--cartpole``).

The reference runs as a graph and XLA-compiled (the default before the
kernels, on the used node width rounded up to 8 as SupervisedProblem cuts it).
Medians of ``--reps`` calls after one warm-up call; tfevo kernel and reference
alternate in the same run.

    python benchmarks/bench_neat_forward_op.py --sizes 1000,10000 --reps 20 --cartpole
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402


def evolved(problem: str, pop: int, gens: int):
    from tfevo.neat import NEAT, XOR, NEATConfig

    if problem == "xor":
        prob = XOR()
        cfg = prob.config(pop_size=pop, max_nodes=32, max_conns=64)
        fit = lambda p: prob(p, cfg)  # noqa: E731
    else:
        cfg = NEATConfig(num_inputs=4, num_outputs=2, pop_size=pop, max_nodes=24, max_conns=48)
        fit = lambda p: tf.reduce_sum(tf.where(tf.math.is_nan(p[1][..., 3]), 0.0, p[1][..., 3]), 1)  # noqa: E731
    algo = NEAT(cfg, seed=0)
    for _ in range(gens):
        p = algo.ask()
        algo.tell(p, fit(p))
    return cfg, algo.ask()


def timed(fn, reps):
    out = fn()  # warm-up (trace, compile)
    np.asarray(tf.nest.flatten(out)[0])
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        out = fn()
        np.asarray(tf.nest.flatten(out)[0])
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1000,10000")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--gens", type=int, default=8)
    ap.add_argument("--cartpole", action="store_true", help="also the CartPole-v1 rollout (ControlProblem)")
    args = ap.parse_args()

    from tfevo.neat import XOR
    from tfevo import kernels
    from tfevo.neat import _forward_op as fo
    from tfevo.neat import network as net
    from tfevo.neat.problems import _used_widths

    if not kernels.built("TfevoNeatForward"):
        sys.exit("the neat_forward custom op is not available (no compiler, or TFEVO_DISABLE_CUSTOM_OPS)")
    print(f"uptime: {os.popen('uptime').read().strip()}")
    rows = []
    for pop in [int(s) for s in args.sizes.split(",")]:
        for problem in ("xor", "cartpole"):
            cfg, (nodes, conns) = evolved(problem, pop, args.gens)
            I, O = cfg.num_inputs, cfg.num_outputs
            wn = int(_used_widths(nodes, conns)[0])
            N = min(cfg.max_nodes, max(8, -(-wn // 8) * 8))
            nodes_cut = nodes[:, :N]
            B = 4 if problem == "xor" else 1
            x = tf.constant(np.random.default_rng(0).uniform(-1, 1, size=(B, I)).astype(np.float32))
            xb = tf.broadcast_to(x[None], [pop, B, I])

            f_op = tf.function(lambda a, b: fo.forward(fo.prepare(a, b, I, use_op=True), x, I, O), autograph=False)
            f_fused = tf.function(lambda a, b: fo.evaluate(a, b, x, I, O, use_op=True), autograph=False)
            ref = lambda a, b: net.forward(net.transform(a, b, I), xb, I, O)  # noqa: E731
            f_graph = tf.function(ref, autograph=False)
            f_xla = tf.function(ref, autograph=False, jit_compile=True)
            prog = fo.prepare(nodes, conns, I, use_op=True)
            ref_net = net.transform(nodes_cut, conns, I)
            s_op = tf.function(lambda: fo.forward(prog, xb, I, O), autograph=False)
            s_graph = tf.function(lambda: net.forward(ref_net, xb, I, O), autograph=False)
            s_xla = tf.function(lambda: net.forward(ref_net, xb, I, O), autograph=False, jit_compile=True)
            np.testing.assert_allclose(f_op(nodes, conns).numpy(), f_xla(nodes_cut, conns).numpy(), rtol=1e-4,
                                       atol=1e-5)
            np.testing.assert_array_equal(f_fused(nodes, conns).numpy(), f_op(nodes, conns).numpy())
            res = {}
            for rep in range(2):  # alternate kernel and reference
                for name, fn in (("op", lambda: f_op(nodes, conns)), ("fused", lambda: f_fused(nodes, conns)),
                                 ("graph", lambda: f_graph(nodes_cut, conns)),
                                 ("xla", lambda: f_xla(nodes_cut, conns)), ("step op", s_op),
                                 ("step graph", s_graph), ("step xla", s_xla)):
                    res.setdefault(name, []).append(timed(fn, max(1, args.reps // 2)))
            med = {k: 1e3 * statistics.median(v) for k, v in res.items()}
            rows.append((problem, pop, N, "prepare+forward", B, med["op"], med["graph"], med["xla"]))
            rows.append((problem, pop, N, f"evaluate (one fused kernel; {med['op'] / med['fused']:.2f}x the two)", B,
                         med["fused"], med["graph"], med["xla"]))
            rows.append((problem, pop, N, "forward (one step)", B, med["step op"], med["step graph"], med["step xla"]))
            if problem == "xor":
                a, b = XOR(), XOR()
                b.use_op = False
                xcfg = cfg
                pa = (nodes, conns)
                t = {"op": [], "ref": []}
                for rep in range(2):
                    t["op"].append(timed(lambda: a(pa, xcfg), max(1, args.reps // 2)))
                    t["ref"].append(timed(lambda: b(pa, xcfg), max(1, args.reps // 2)))
                rows.append((problem, pop, N, "XOR problem call", B, 1e3 * statistics.median(t["op"]), float("nan"),
                             1e3 * statistics.median(t["ref"])))
            elif args.cartpole:
                from tfevo.neat.policy import ControlProblem

                t = {"op": [], "ref": []}
                cps = {"op": ControlProblem("CartPole-v1", cfg, episodes=1, seed=0),
                       "ref": ControlProblem("CartPole-v1", cfg, episodes=1, seed=0, use_op=False)}
                # the per-step kernel loop the whole-rollout kernel replaced (KernelRolloutEvaluator(fused=False))
                cps["loop"] = ControlProblem("CartPole-v1", cfg, episodes=1, seed=0)
                object.__setattr__(cps["loop"]._evaluator_for(nodes, conns)[0], "_fused_cartpole", False)
                t["loop"] = []
                for rep in range(2):
                    for k, cp in cps.items():
                        t[k].append(timed(lambda: cp((nodes, conns)), max(1, args.reps // 4)))
                ev_op = cps["op"]._evaluator_for(nodes, conns)[0]
                ev_ref = cps["ref"]._evaluator_for(nodes, conns)[0]
                ev_loop = cps["loop"]._evaluator_for(nodes, conns)[0]
                assert type(ev_op).__name__ == "KernelRolloutEvaluator", type(ev_op)
                assert ev_op._fused_cartpole and not ev_loop._fused_cartpole
                np.testing.assert_array_equal(ev_op.last_returns.numpy(), ev_ref.last_returns.numpy())
                np.testing.assert_array_equal(ev_op.last_returns.numpy(), ev_loop.last_returns.numpy())
                steps = ev_op.last_stats["steps"]
                rows.append((problem, pop, N, f"CartPole rollout ({steps} steps), whole-rollout kernel", B,
                             1e3 * statistics.median(t["op"]), float("nan"), 1e3 * statistics.median(t["ref"])))
                rows.append((problem, pop, N, f"CartPole rollout ({steps} steps), per-step kernel loop", B,
                             1e3 * statistics.median(t["loop"]), float("nan"), 1e3 * statistics.median(t["ref"])))
    print(f"uptime: {os.popen('uptime').read().strip()}")
    print()
    print("| problem | pop | ref node width | what | rows | kernel ms | ref graph ms | ref XLA ms | XLA / kernel |")
    print("|---|---|---|---|---|---|---|---|---|")
    for problem, pop, N, what, B, op, g, x in rows:
        gs = "-" if g != g else f"{g:.3f}"
        print(f"| {problem} | {pop} | {N} | {what} | {B} | {op:.3f} | {gs} | {x:.3f} | {x / op:.1f}x |")


if __name__ == "__main__":
    main()
