"""Paired A/B of one custom op on the workload it serves: two instances in one process, one traced
with the op and one with the pure-TF reference (``kernel(op, ...)`` answering ``None`` while the
second instance traces), alternating blocks of generations; medians of per-block ms/generation.

    PYTHONPATH=$PWD python benchmarks/bench_kernel_ab.py allequal --dim 1000 --popsize 24 --variant cholesky
    PYTHONPATH=$PWD python benchmarks/bench_kernel_ab.py neat-cartpole --popsize 1000 --block 2 --rounds 10

The ``allequal`` case measured ``TfevoAllEqual`` before its removal (commit eb48487); since then both
instances run the same plain-TensorFlow check, so the case now measures the noise floor.
"""
from __future__ import annotations

import argparse
import contextlib
import time

import numpy as np


@contextlib.contextmanager
def without(op):
    """Trace with ``op`` answering the pure-TF path (the other ops untouched)."""
    import tfevo.linalg as linalg
    real = getattr(linalg, "kernel", None)
    if real is None:  # the op was removed: nothing to switch
        yield
        return
    real = linalg.kernel
    linalg.kernel = lambda name, use_op, inputs: None if name == op else real(name, use_op, inputs)
    try:
        yield
    finally:
        linalg.kernel = real


def cma_step(dim, popsize, variant):
    import tensorflow as tf
    from tfevo.strategies.cma_es import CMAES, CholeskyCMAES
    cls = CholeskyCMAES if variant == "cholesky" else CMAES
    es = cls(dim, popsize=popsize, sigma=0.1, seed=0)
    f = tf.constant(np.random.default_rng(0).standard_normal(es.popsize), tf.float32)

    def step():
        es.tell(es.ask(), f)
    return step


@contextlib.contextmanager
def unfused_cartpole(on):
    """While ``on``: NEAT CartPole evaluators are made without the fused C++ CartPole rollout
    (the NEAT inference kernels stepping the XLA CartPole of tfevo.envs instead)."""
    import tfevo.neat._op_rollout as ro
    real = ro._fused_cartpole_ok
    if on:
        ro._fused_cartpole_ok = lambda env, policy: False
    try:
        yield
    finally:
        ro._fused_cartpole_ok = real


def neat_cartpole_step(pop, unfused):
    """One NEAT generation on CartPole-v1 (ask, ControlProblem evaluation, tell), as bench_neat.py."""
    from tfevo.neat import NEAT, NEATConfig
    from tfevo.neat.policy import ControlProblem
    cfg = NEATConfig(num_inputs=4, num_outputs=2, pop_size=pop, max_nodes=24, max_conns=48)
    with unfused_cartpole(unfused):
        ev = ControlProblem("CartPole-v1", cfg, episodes=1)
    algo = NEAT(cfg, seed=0)

    def step():
        with unfused_cartpole(unfused):  # evaluators of new widths are made during calls
            p = algo.ask()
            algo.tell(p, ev(p))
            algo.generation.numpy()
    return step


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("case", choices=["allequal", "neat-cartpole"])
    ap.add_argument("--dim", type=int, default=1000)
    ap.add_argument("--popsize", type=int, default=24)
    ap.add_argument("--variant", default="cholesky", choices=["cholesky", "eigen"])
    ap.add_argument("--block", type=int, default=16, help="generations per timed block")
    ap.add_argument("--rounds", type=int, default=30)
    a = ap.parse_args()
    if a.case == "allequal":
        with_op = cma_step(a.dim, a.popsize, a.variant)
        for _ in range(3 * a.block):
            with_op()  # trace + warm-up
        with without("TfevoAllEqual"):
            ref = cma_step(a.dim, a.popsize, a.variant)
            for _ in range(3 * a.block):
                ref()
        label = f"{a.variant} D={a.dim} P={a.popsize}"
    else:
        with_op, ref = neat_cartpole_step(a.popsize, False), neat_cartpole_step(a.popsize, True)
        for _ in range(3 * a.block):  # trace + warm-up (the populations grow: new widths trace)
            with_op()
            ref()
        label = f"NEAT CartPole pop {a.popsize}"
    times = {"op": [], "ref": []}
    for r in range(a.rounds):
        order = (("op", with_op), ("ref", ref)) if r % 2 == 0 else (("ref", ref), ("op", with_op))
        for name, step in order:
            t0 = time.perf_counter()
            for _ in range(a.block):
                step()
            times[name].append((time.perf_counter() - t0) / a.block * 1e3)
    op, rf = np.median(times["op"]), np.median(times["ref"])
    ratio = np.median(np.array(times["ref"]) / np.array(times["op"]))
    print(f"| {a.case} | {label} | {op:.2f} | {rf:.2f} | {ratio:.2f} |")


if __name__ == "__main__":
    main()
