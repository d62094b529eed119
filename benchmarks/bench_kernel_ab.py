"""Paired A/B of one custom op on the workload it serves: two instances in one process, one traced
with the op and one with the pure-TF reference (``kernel(op, ...)`` answering ``None`` while the
second instance traces), alternating blocks of generations; medians of per-block ms/generation.

    PYTHONPATH=$PWD python benchmarks/bench_kernel_ab.py allequal --dim 1000 --popsize 24 --variant cholesky
    PYTHONPATH=$PWD python benchmarks/bench_kernel_ab.py neat-cartpole --popsize 1000 --block 2 --rounds 10
    PYTHONPATH=$PWD python benchmarks/bench_kernel_ab.py neat-recycle --popsize 1000 --block 4 --rounds 10
    PYTHONPATH=$PWD python benchmarks/bench_kernel_ab.py lapack --dim 1000 --popsize 24 --variant eigen
    PYTHONPATH=$PWD python benchmarks/bench_kernel_ab.py sepcma --dim 1000 --popsize 0

Cases: ``neat-cartpole`` (the fused C++ CartPole rollout against the inference kernels stepping
the XLA CartPole), ``neat-recycle`` (a NEAT CartPole generation with the breed kernel's held
outputs, ``KnownOutputs`` in custom_ops/neat_breed.cc, against the same generation with them
released before every generation: fresh output buffers, width scans, the separate crossover
pass), ``lapack`` (a CMAES / CholeskyCMAES generation with the LAPACK-backed ops of
tfevo.linalg against their pure-TF references), ``sepcma`` (a SepCMAES generation with its
``use_op`` kernels against ``use_op=False``).  ``neat-recycle`` measured the held outputs before
their removal (commit 85a2481); since then both instances run the same kernel (the noise floor).

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
    es = cls(dim, popsize=popsize or None, sigma=0.1, seed=0)
    f = tf.constant(np.random.default_rng(0).standard_normal(es.popsize), tf.float32)

    def step():
        es.tell(es.ask(), f)
    return step


@contextlib.contextmanager
def without_lapack():
    """Trace with every LAPACK-backed op of tfevo.linalg answering its pure-TF reference."""
    import tfevo.linalg as linalg
    real_k, real_a = linalg.lapack_kernel, linalg.covariance_refresh_op_available
    linalg.lapack_kernel = lambda op, use_op=None, inputs=(): None
    linalg.covariance_refresh_op_available = lambda: False
    import tfevo.strategies.cma_cholesky as chol
    real_c = chol._covariance_refresh_op_available
    chol._covariance_refresh_op_available = lambda: False
    try:
        yield
    finally:
        linalg.lapack_kernel, linalg.covariance_refresh_op_available = real_k, real_a
        chol._covariance_refresh_op_available = real_c


def sep_step(dim, popsize, use_op):
    import tensorflow as tf
    from tfevo.strategies.sep_cma_es import SepCMAES
    es = SepCMAES(dim, popsize=popsize or None, sigma=0.1, seed=0, dtype="float32", use_op=use_op)
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


def neat_recycle_step(pop, release):
    """One NEAT CartPole generation; with ``release`` the breed kernel's held outputs are dropped
    before it, so the kernel never finds its last output (no buffer reuse, no recorded widths,
    no fused crossover pass)."""
    from tfevo.neat import NEAT, NEATConfig, _breed_op
    release = release and hasattr(_breed_op, "held_stats")  # removed with the held outputs: noise floor
    from tfevo.neat.policy import ControlProblem
    cfg = NEATConfig(num_inputs=4, num_outputs=2, pop_size=pop, max_nodes=24, max_conns=48)
    ev = ControlProblem("CartPole-v1", cfg, episodes=1)
    algo = NEAT(cfg, seed=0)

    def step():
        if release:
            _breed_op.held_stats(release=True)
        p = algo.ask()
        algo.tell(p, ev(p))
        algo.generation.numpy()
    return step


def openblas_copy(a):
    """The private copy of numpy's OpenBLAS against numpy's library loaded in place
    (``TFEVO_LAPACK`` = its path, used as given): one child process per block, alternating,
    each timing ``--block`` generations of ``--variant`` after 3 x ``--block`` of warm-up."""
    import os
    import subprocess
    import sys
    from tfevo.kernels.lapack import _site_libs, lapack_library
    orig = _site_libs("numpy", "libscipy_openblas64_*.so")[0]
    print(f"copy: {lapack_library()}\nin place: {orig}")
    code = (f"import time, sys; sys.path.insert(0, {os.getcwd()!r}); import bench_kernel_ab as b; "
            f"from tfevo.kernels.lapack import lapack_library; "
            f"s = b.cma_step({a.dim}, {a.popsize}, {a.variant!r}); [s() for _ in range({3 * a.block})]; "
            f"t = time.perf_counter(); [s() for _ in range({a.block})]; "
            f"print((time.perf_counter() - t) / {a.block} * 1e3, lapack_library())")
    times = {"op": [], "ref": []}
    for r in range(a.rounds):
        for name in (("op", "ref") if r % 2 == 0 else ("ref", "op")):
            env = dict(os.environ)
            env.pop("TFEVO_LAPACK", None)
            if name == "ref":
                env["TFEVO_LAPACK"] = orig
            out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                 cwd=os.path.dirname(os.path.abspath(__file__)), check=True).stdout.split()
            times[name].append(float(out[-2]))
            assert (out[-1] == orig) == (name == "ref"), out
    return times


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("case", choices=["allequal", "neat-cartpole", "neat-recycle", "lapack", "openblas-copy", "sepcma"])
    ap.add_argument("--dim", type=int, default=1000)
    ap.add_argument("--popsize", type=int, default=24)
    ap.add_argument("--variant", default="cholesky", choices=["cholesky", "eigen"])
    ap.add_argument("--block", type=int, default=16, help="generations per timed block")
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--settle", type=int, default=-1,
                    help="untimed generations at the start of each block (default: 1 for neat-recycle, whose "
                         "other instance's release also drops this one's held outputs, else 0)")
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
    elif a.case == "lapack":
        with_op = cma_step(a.dim, a.popsize, a.variant)
        for _ in range(3 * a.block):
            with_op()
        with without_lapack():
            ref = cma_step(a.dim, a.popsize, a.variant)
            for _ in range(3 * a.block):
                ref()
        label = f"{a.variant} D={a.dim} P={a.popsize}"
    elif a.case == "openblas-copy":
        times = openblas_copy(a)
        label = f"{a.variant} D={a.dim} P={a.popsize}"
    elif a.case == "sepcma":
        with_op, ref = sep_step(a.dim, a.popsize, None), sep_step(a.dim, a.popsize, False)
        for _ in range(3 * a.block):
            with_op()
            ref()
        label = f"SepCMAES float32 D={a.dim} P={a.popsize or 'default'}"
    elif a.case == "neat-recycle":
        with_op, ref = neat_recycle_step(a.popsize, False), neat_recycle_step(a.popsize, True)
        for _ in range(3 * a.block):
            with_op()
            ref()
        label = f"NEAT CartPole pop {a.popsize}"
    else:
        with_op, ref = neat_cartpole_step(a.popsize, False), neat_cartpole_step(a.popsize, True)
        for _ in range(3 * a.block):  # trace + warm-up (the populations grow: new widths trace)
            with_op()
            ref()
        label = f"NEAT CartPole pop {a.popsize}"
    settle = a.settle if a.settle >= 0 else int(a.case == "neat-recycle")
    times = times if a.case == "openblas-copy" else {"op": [], "ref": []}
    for r in range(a.rounds if a.case != "openblas-copy" else 0):
        order = (("op", with_op), ("ref", ref)) if r % 2 == 0 else (("ref", ref), ("op", with_op))
        for name, step in order:
            for _ in range(settle):
                step()
            t0 = time.perf_counter()
            for _ in range(a.block):
                step()
            times[name].append((time.perf_counter() - t0) / a.block * 1e3)
    op, rf = np.median(times["op"]), np.median(times["ref"])
    ratio = np.median(np.array(times["ref"]) / np.array(times["op"]))
    print(f"| {a.case} | {label} | {op:.2f} | {rf:.2f} | {ratio:.2f} |")
    print("per-round ratios:", ", ".join(f"{r:.2f}" for r in np.array(times["ref"]) / np.array(times["op"])))


if __name__ == "__main__":
    main()
