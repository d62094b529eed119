"""CMA-ME side by side: tfevo's batched ESEmitter vs pyribs' EvolutionStrategyEmitter.

Both run the same setting: ``E`` CMA-ES searches of ``B`` candidates each
(default 15 x 37), two-stage improvement ranking ("2imp", or any ranker both
libraries have with ``--ranker``), ``mu`` selection (``--selection-rule``),
restart on no improvement, initial step size ``sigma``, no solution bounds, a
100x100 grid over the first two parameters, and an equal budget of
evaluations.  The first batch (``E * B`` points uniform in ``[0, 1]^D``)
counts toward the budget for both; every search then starts from an elite
drawn from the archive (pyribs: ``x0`` = one sampled elite per emitter).

Tasks: QDax's Sphere-QD and Rastrigin-QD (``tfevo.qd.sphere_qd`` /
``rastrigin_qd``; NumPy twins for pyribs), D = 100, QD-score offsets
``-25 D`` and ``-45 D``.

The two loops run alternately, ``--chunk`` iterations at a time, in one
process, so both see the same machine load.  Per library and seed: the
steady-state time per whole iteration (ask, evaluate, tell), wall and CPU
(process, all threads), as the mean over all iterations but the first two
(the mean, not the median, because both libraries refactorize their
covariances only every few iterations); the first two iterations (tracing
the step program in tfevo, numba's compilation in pyribs' first run) in
their own column; the whole run; the final QD-score.  Tables give the median
over seeds, and the ratios pyribs / tfevo are the median of the per-seed
ratios of the same run.  tfevo reads one value back per iteration (the
insertion's status, to wait for the step): one host sync per iteration.

    python benchmarks/bench_qd_cmame.py [--seeds 5] [--budget 100000] [--tasks sphere,rastrigin]
                                        [--decomposition cholesky|eigh] [--jit-compile]
                                        [--ranker 2imp|imp|2obj|obj|2rd|rd] [--selection-rule mu|filter]

The quick speed check (3 seeds, about a minute on a quiet 2-core machine):

    python benchmarks/bench_qd_cmame.py --seeds 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # the repo's tfevo

DIM = 100
GRID = (100, 100)
OFFSET = {"sphere": -25.0 * DIM, "rastrigin": -45.0 * DIM}


def sphere_np(x):
    z = 10.0 * x - 5.0
    return -np.sum(z * z, axis=1), x[:, :2]


def rastrigin_np(x):
    y = x * 10.0
    f = 10.0 * x.shape[1] + np.sum((y - 5.0) ** 2, axis=1) - 10.0 * np.sum(np.cos((2.0 * np.pi) * y), axis=1)
    return -f, x[:, :2]


def make_tfevo(task, e, b, sigma, seed, decomposition="cholesky", jit_compile=False, ranker="2imp", selection="mu"):
    import tensorflow as tf

    from tfevo.qd import ESEmitter, GridArchive, MAPElites, rastrigin_qd, sphere_qd

    archive = GridArchive(DIM, GRID, [(0, 1), (0, 1)], qd_offset=OFFSET[task])
    emitter = ESEmitter(DIM, b, num_emitters=e, sigma=sigma, ranker=ranker, selection_rule=selection,
                        restart_rule="no_improvement", seed=seed, decomposition=decomposition,
                        jit_compile=jit_compile)
    me = MAPElites(archive, [emitter], init_bounds=(0, 1), seed=seed)
    fn = tf.function({"sphere": sphere_qd, "rastrigin": rastrigin_qd}[task],
                     input_signature=[tf.TensorSpec([e * b, DIM], tf.float32)])

    def iteration():
        me.step(fn).status.numpy()  # one compiled program; wait for it

    def final():
        return {"qd_score": me.metrics()["qd_score"], "coverage": me.metrics()["coverage"],
                "restarts": int(emitter.restarts.numpy().sum())}

    return iteration, final


def make_ribs(task, e, b, sigma, seed, ranker="2imp", selection="mu"):
    from ribs.archives import GridArchive
    from ribs.emitters import EvolutionStrategyEmitter
    from ribs.schedulers import Scheduler

    f_np = {"sphere": sphere_np, "rastrigin": rastrigin_np}[task]
    archive = GridArchive(solution_dim=DIM, dims=GRID, ranges=[(0, 1), (0, 1)], qd_score_offset=OFFSET[task],
                          seed=seed)
    state = {"sched": None}

    def iteration():
        if state["sched"] is None:  # the first batch: uniform, then one emitter per search from an elite
            x = np.random.default_rng(seed).uniform(0, 1, (e * b, DIM))
            archive.add(x, *f_np(x))
            emitters = [EvolutionStrategyEmitter(archive, x0=archive.sample_elites(1)["solution"][0],
                                                 sigma0=sigma, ranker=ranker, selection_rule=selection,
                                                 restart_rule="no_improvement", batch_size=b,
                                                 seed=seed * 1000 + i) for i in range(e)]
            state["sched"] = Scheduler(archive, emitters)
            return
        x = state["sched"].ask()
        state["sched"].tell(*f_np(x))

    def final():
        st = archive.stats
        return {"qd_score": float(st.qd_score), "coverage": float(st.coverage),
                "restarts": int(sum(em.restarts for em in state["sched"].emitters))}

    return iteration, final


def alternate(loops, iters, chunk):
    """Runs each ``loops[name] = (iteration, final)`` for ``iters`` iterations, ``chunk`` at a time in
    turn, so both libraries see the same machine load; returns per-iteration ``(wall, cpu)`` seconds
    by name."""
    wall = {k: [] for k in loops}
    cpu = {k: [] for k in loops}
    for start in range(0, iters, chunk):
        for name, (iteration, _) in loops.items():
            for _ in range(min(chunk, iters - start)):
                t, c = time.perf_counter(), time.process_time()
                iteration()
                wall[name].append(time.perf_counter() - t)
                cpu[name].append(time.process_time() - c)
    return wall, cpu


def run(task, seed, e, b, sigma, budget, chunk, decomposition, jit_compile=False, ranker="2imp", selection="mu"):
    loops = {"tfevo": make_tfevo(task, e, b, sigma, seed, decomposition, jit_compile, ranker, selection),
             "pyribs": make_ribs(task, e, b, sigma, seed, ranker, selection)}
    iters = budget // (e * b)
    wall, cpu = alternate(loops, iters, chunk)
    out = {"task": task, "seed": seed, "evaluations": iters * e * b, "ranker": ranker, "selection_rule": selection}
    for name, (_, final) in loops.items():
        # Mean, not median: both libraries recompute the eigensystems only every few iterations.
        out[name] = dict(final(), wall_ms=1e3 * statistics.mean(wall[name][2:]),
                         cpu_ms=1e3 * statistics.mean(cpu[name][2:]), total_wall_s=sum(wall[name]),
                         total_cpu_s=sum(cpu[name]), warmup_cpu_s=sum(cpu[name][:2]),
                         steady_cpu_s=sum(cpu[name][2:]))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--seed-start", type=int, default=0)
    ap.add_argument("--budget", type=int, default=100_000)
    ap.add_argument("--emitters", type=int, default=15)
    ap.add_argument("--batch", type=int, default=37)
    ap.add_argument("--sigma", type=float, default=0.1)
    ap.add_argument("--tasks", default="sphere,rastrigin")
    ap.add_argument("--chunk", type=int, default=5)
    ap.add_argument("--decomposition", default="cholesky", choices=["cholesky", "eigh"])
    ap.add_argument("--jit-compile", action="store_true", help="XLA-compile ESEmitter's update")
    ap.add_argument("--ranker", default="2imp", choices=["2imp", "imp", "2obj", "obj", "2rd", "rd"])
    ap.add_argument("--selection-rule", default="mu", choices=["mu", "filter"])
    args = ap.parse_args()
    rows = []
    for task in args.tasks.split(","):
        for seed in range(args.seed_start, args.seed_start + args.seeds):
            r = run(task, seed, args.emitters, args.batch, args.sigma, args.budget, args.chunk, args.decomposition,
                    args.jit_compile, args.ranker, args.selection_rule)
            print(json.dumps(r), flush=True)
            rows.append(r)
    print("\n| task | library | seeds | QD-score mean | std | coverage | restarts (mean) | ms/iter wall | "
          "ms/iter CPU | Welch t vs pyribs |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for task in args.tasks.split(","):
        rs = [r for r in rows if r["task"] == task]
        q = {lib: np.array([r[lib]["qd_score"] for r in rs]) for lib in ("tfevo", "pyribs")}
        se = np.sqrt(q["tfevo"].var(ddof=1) / len(rs) + q["pyribs"].var(ddof=1) / len(rs)) if len(rs) > 1 else np.nan
        for lib in ("tfevo", "pyribs"):
            t = (q["tfevo"].mean() - q["pyribs"].mean()) / se if lib == "tfevo" else float("nan")
            print(f"| {task} | {lib} | {len(rs)} | {q[lib].mean():.5e} | {q[lib].std(ddof=1) if len(rs) > 1 else 0:.3g} "
                  f"| {np.mean([r[lib]['coverage'] for r in rs]):.4f} | {np.mean([r[lib]['restarts'] for r in rs]):.1f} "
                  f"| {np.median([r[lib]['wall_ms'] for r in rs]):.2f} | {np.median([r[lib]['cpu_ms'] for r in rs]):.2f} "
                  f"| {t:.2f} |")
    for task in args.tasks.split(","):
        rs = [r for r in rows if r["task"] == task]
        ratio = {k: np.median([r["pyribs"][k] / r["tfevo"][k] for r in rs])
                 for k in ("cpu_ms", "wall_ms", "total_cpu_s", "total_wall_s", "steady_cpu_s")}
        print(f"\n{task}: steady-state time per iteration, median over {len(rs)} seeds of each run's mean over "
              "iterations 3+; first two iterations apart")
        print("| library | ms/iter CPU | ms/iter wall | first two iterations CPU s | whole run CPU s | "
              "whole run wall s |")
        print("|---|---|---|---|---|---|")
        for lib in ("tfevo", "pyribs"):
            med = {k: np.median([r[lib][k] for r in rs]) for k in ("cpu_ms", "wall_ms", "warmup_cpu_s",
                                                                  "total_cpu_s", "total_wall_s")}
            print(f"| {lib} | {med['cpu_ms']:.2f} | {med['wall_ms']:.2f} | {med['warmup_cpu_s']:.2f} "
                  f"| {med['total_cpu_s']:.2f} | {med['total_wall_s']:.2f} |")
        print(f"| pyribs / tfevo (same run, median of per-seed ratios) | **{ratio['cpu_ms']:.2f}x** | "
              f"**{ratio['wall_ms']:.2f}x** | | {ratio['total_cpu_s']:.2f}x | {ratio['total_wall_s']:.2f}x |")


if __name__ == "__main__":
    main()
