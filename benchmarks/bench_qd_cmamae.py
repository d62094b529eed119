"""CMA-MAE side by side: tfevo (soft GridArchive + batched ESEmitter + result archive) vs pyribs 0.12.

pyribs' CMA-MAE tutorial setting on its sphere with linear-projection descriptors: D = 100, fitness
normalized to [0, 100], a 100x100 grid over [-256, 256]^2, archive ``learning_rate=0.01``,
``threshold_min=0``, a plain result archive of the same grid, 15 CMA-ES searches of 36 candidates,
``sigma0=0.5``, ``x0=0``, ranker ``"imp"``, ``selection_rule="mu"``, ``restart_rule="basic"``.
Equal budget: the first batch (15 * 36 points uniform in [-5.12, 5.12]^D, tfevo's MAPElites first
batch) counts for both and goes into both archives of both libraries; then the searches start at
``x0``.  Reported per seed: QD-score and coverage of the result archive, and the time per whole
iteration (ask, evaluate, tell), CPU and wall, mean over iterations 3+ (both refactorize every few
iterations), plus whole-run totals.  The two loops run alternately, ``--chunk`` iterations at a time,
in one process, so both see the same machine load; ratios are per seed, then the median.

    python benchmarks/bench_qd_cmamae.py --seeds 5 --iterations 2000
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # the repo's tfevo
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_qd_cmame import alternate  # noqa: E402  (the same alternating timing loop as CMA-ME's)

DIM, E, B = 100, 15, 36
GRID = (100, 100)
R = 5.12
BOUND = R * DIM / 2


def sphere_linproj_np(x):
    shift = 0.4 * R
    raw = np.sum((x - shift) ** 2, axis=1)
    worst = (-R - shift) ** 2 * x.shape[1]
    f = (raw - worst) / (0.0 - worst) * 100.0
    c = np.where(np.abs(x) <= R, x, R / x)
    h = x.shape[1] // 2
    return f, np.stack([c[:, :h].sum(1), c[:, h:].sum(1)], axis=1)


def first_batch(seed):
    return np.random.default_rng(seed).uniform(-R, R, (E * B, DIM)).astype(np.float32)


def make_tfevo(seed, lr, tmin):
    import tensorflow as tf

    from tfevo.qd import ESEmitter, GridArchive, MAPElites, sphere_linproj

    ranges = [(-BOUND, BOUND)] * 2
    archive = GridArchive(DIM, GRID, ranges, learning_rate=lr, threshold_min=tmin)
    result = GridArchive(DIM, GRID, ranges)
    em = ESEmitter(DIM, B, num_emitters=E, sigma=0.5, x0=np.zeros(DIM), ranker="imp", selection_rule="mu",
                   restart_rule="basic", seed=seed)
    me = MAPElites(archive, [em], init_solutions=first_batch(seed), seed=seed, result_archive=result)
    fn = tf.function(sphere_linproj, input_signature=[tf.TensorSpec([E * B, DIM], tf.float32)])

    def iteration():
        me.step(fn).status.numpy()  # one compiled program; wait for it

    def final():
        m = me.metrics()
        return {"qd_score": m["qd_score"], "coverage": m["coverage"], "restarts": int(em.restarts.numpy().sum())}

    return iteration, final


def make_ribs(seed, lr, tmin):
    from ribs.archives import GridArchive
    from ribs.emitters import EvolutionStrategyEmitter
    from ribs.schedulers import Scheduler

    ranges = [(-BOUND, BOUND)] * 2
    archive = GridArchive(solution_dim=DIM, dims=GRID, ranges=ranges, learning_rate=lr, threshold_min=tmin,
                          seed=seed)
    result = GridArchive(solution_dim=DIM, dims=GRID, ranges=ranges, seed=seed)
    state = {"sched": None}

    def iteration():
        if state["sched"] is None:
            x = first_batch(seed).astype(np.float64)
            f, d = sphere_linproj_np(x)
            archive.add(x, f, d)
            result.add(x, f, d)
            emitters = [EvolutionStrategyEmitter(archive, x0=np.zeros(DIM), sigma0=0.5, ranker="imp",
                                                 selection_rule="mu", restart_rule="basic", batch_size=B,
                                                 seed=seed * 1000 + i) for i in range(E)]
            state["sched"] = Scheduler(archive, emitters, result_archive=result)
            return
        x = state["sched"].ask()
        state["sched"].tell(*sphere_linproj_np(x))

    def final():
        st = result.stats
        return {"qd_score": float(st.qd_score), "coverage": float(st.coverage),
                "restarts": int(sum(em.restarts for em in state["sched"].emitters))}

    return iteration, final


def run(seed, iters, chunk, lr, tmin):
    loops = {"tfevo": make_tfevo(seed, lr, tmin), "pyribs": make_ribs(seed, lr, tmin)}
    wall, cpu = alternate(loops, iters, chunk)
    out = {"seed": seed, "iterations": iters, "evaluations": iters * E * B}
    for name, (_, final) in loops.items():
        out[name] = dict(final(), wall_ms=1e3 * statistics.mean(wall[name][2:]),
                         cpu_ms=1e3 * statistics.mean(cpu[name][2:]), total_wall_s=sum(wall[name]),
                         total_cpu_s=sum(cpu[name]))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--seed-start", type=int, default=0)
    ap.add_argument("--iterations", type=int, default=2000, help="including the first (uniform) batch")
    ap.add_argument("--chunk", type=int, default=10)
    ap.add_argument("--learning-rate", type=float, default=0.01)
    ap.add_argument("--threshold-min", type=float, default=0.0)
    args = ap.parse_args()
    rows = []
    for seed in range(args.seed_start, args.seed_start + args.seeds):
        r = run(seed, args.iterations, args.chunk, args.learning_rate, args.threshold_min)
        print(json.dumps(r), flush=True)
        rows.append(r)
    q = {lib: np.array([r[lib]["qd_score"] for r in rows]) for lib in ("tfevo", "pyribs")}
    n = len(rows)
    se = np.sqrt(q["tfevo"].var(ddof=1) / n + q["pyribs"].var(ddof=1) / n) if n > 1 else np.nan
    t = (q["tfevo"].mean() - q["pyribs"].mean()) / se
    print("\n| library | seeds | result-archive QD-score mean | std | coverage | restarts (mean) | ms/iter CPU | "
          "ms/iter wall | whole run CPU s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for lib in ("tfevo", "pyribs"):
        print(f"| {lib} | {n} | {q[lib].mean():.6g} | {q[lib].std(ddof=1) if n > 1 else 0:.3g} "
              f"| {np.mean([r[lib]['coverage'] for r in rows]):.4f} | {np.mean([r[lib]['restarts'] for r in rows]):.1f} "
              f"| {np.median([r[lib]['cpu_ms'] for r in rows]):.2f} | {np.median([r[lib]['wall_ms'] for r in rows]):.2f} "
              f"| {np.median([r[lib]['total_cpu_s'] for r in rows]):.1f} |")
    ratio = {k: np.median([r["pyribs"][k] / r["tfevo"][k] for r in rows])
             for k in ("cpu_ms", "wall_ms", "total_cpu_s", "total_wall_s")}
    print(f"\nWelch t (tfevo - pyribs QD-score): {t:.2f}; pyribs / tfevo, median of per-seed ratios: "
          f"steady CPU {ratio['cpu_ms']:.2f}x, steady wall {ratio['wall_ms']:.2f}x, whole run CPU "
          f"{ratio['total_cpu_s']:.2f}x, whole run wall {ratio['total_wall_s']:.2f}x")


if __name__ == "__main__":
    main()
