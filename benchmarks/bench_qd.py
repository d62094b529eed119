"""MAP-Elites side by side: tfevo vs pyribs vs QDax (JAX on CPU), one run.

Task: QDax's Rastrigin QD (100-D parameters in [0,1], descriptors = first two
parameters), 100x100 grid, Iso+LineDD (iso 0.005, line 0.05), batch sizes
100 / 1000 / 10000 at an equal evaluation budget.  Whole loop = emit,
evaluate, insert.  Also archive insertions per second alone (grid and a
10k-cell CVT).

    python benchmarks/bench_qd.py [--budget 200000] [--qdax-python /path/to/venv/bin/python]

QDax runs in a subprocess (its own virtual environment, since it pins its own
JAX stack); pyribs and tfevo in this process, alternating five iterations at a
time so that both see the same load on a shared machine.  "tfevo (TF only)"
is the same loop with the C++ kernels switched off (use_op=False).  Times are
medians over the iterations after the first two (warm-up/compilation reported
apart).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import textwrap
import time

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # the repo's tfevo

DIM = 100
GRID = (100, 100)
ISO, LINE = 0.005, 0.05


def rastrigin_np(x):
    # The same computation as tfevo.qd.rastrigin_qd: two row sums of y = 10 x ((y - 5)^2 and
    # cos(2 pi y) = cos(2 pi (y - 5))).  Same cost in NumPy as the one-sum form (measured).
    y = x * 10.0
    f = 10.0 * x.shape[1] + np.sum((y - 5.0) ** 2, axis=1) - 10.0 * np.sum(np.cos((2.0 * np.pi) * y), axis=1)
    return -f, x[:, :2]


def make_tfevo(batch, seed=0, use_op=None):
    """tfevo's loop, one ``me.step(task)`` per iteration (ask, the compiled task and the insertion in one
    compiled program; the task is rastrigin_qd as a tf.function, the user's evaluation function).
    ``use_op=False`` forces the pure-TensorFlow emitter and insertion (no C++ kernels)."""
    import tensorflow as tf

    from tfevo.qd import GridArchive, IsoLineEmitter, MAPElites, rastrigin_qd, rastrigin_qd_offset

    archive = GridArchive(DIM, GRID, [(0, 1), (0, 1)], qd_offset=rastrigin_qd_offset(DIM), use_op=use_op)
    me = MAPElites(archive, [IsoLineEmitter(DIM, batch, iso_sigma=ISO, line_sigma=LINE, bounds=(0, 1),
                                            use_op=use_op)], init_bounds=(0, 1), seed=seed)
    task = tf.function(rastrigin_qd, input_signature=[tf.TensorSpec([batch, DIM], tf.float32)])

    def iteration():
        r = me.step(task)
        _ = r.status.numpy()  # wait for the iteration to finish

    def final():
        m = me.metrics()
        return {"qd_score": m["qd_score"], "coverage": m["coverage"], "max_fitness": m["max_fitness"]}

    return iteration, final


def make_ribs(batch, seed=0):
    from ribs.archives import GridArchive
    from ribs.emitters import IsoLineEmitter
    from ribs.schedulers import Scheduler

    offset = -45.0 * DIM
    archive = GridArchive(solution_dim=DIM, dims=GRID, ranges=[(0, 1), (0, 1)], qd_score_offset=offset, seed=seed)
    rng = np.random.default_rng(seed)
    init = rng.uniform(0, 1, size=(batch, DIM))
    emitter = IsoLineEmitter(archive, iso_sigma=ISO, line_sigma=LINE, initial_solutions=init,
                             bounds=[(0, 1)] * DIM, batch_size=batch, seed=seed)
    sched = Scheduler(archive, [emitter])

    def iteration():
        x = sched.ask()
        f, d = rastrigin_np(x)
        sched.tell(f, d)

    def final():
        st = archive.stats
        return {"qd_score": float(st.qd_score), "coverage": float(st.coverage), "max_fitness": float(st.obj_max)}

    return iteration, final


def run_interleaved(makers, batch, budget, chunk=5):
    """Runs the libraries' loops alternately, ``chunk`` iterations at a time, so that all of them see the
    same machine load (the box is shared).  Per library: median wall time of one iteration after the
    first two (reported apart as warm-up: tracing/compilation), and the final archive metrics."""
    loops = {name: make(batch) for name, make in makers.items()}
    iters = max(3, budget // batch)
    times = {name: [] for name in loops}
    cpu = {name: [] for name in loops}
    for start in range(0, iters, chunk):
        for name, (iteration, _) in loops.items():
            for _ in range(min(chunk, iters - start)):
                t, c = time.perf_counter(), time.process_time()
                iteration()
                times[name].append(time.perf_counter() - t)
                cpu[name].append(time.process_time() - c)  # all threads of this process
    out = {}
    for name, (_, final) in loops.items():
        ts = times[name]
        med = float(np.median(ts[2:]))
        out[name] = {"iters": iters, "first_s": ts[0] + ts[1], "median_s": med, "evals_per_s": batch / med,
                     "cpu_ms": 1e3 * float(np.median(cpu[name][2:])), **final()}
    return out


QDAX_SCRIPT = textwrap.dedent('''
    import json, sys, time, functools
    import numpy as np, jax, jax.numpy as jnp
    from qdax.core.map_elites import MAPElites
    from qdax.core.containers.mapelites_repertoire import compute_euclidean_centroids
    from qdax.core.emitters.mutation_operators import isoline_variation
    from qdax.core.emitters.standard_emitters import MixingEmitter
    from qdax.tasks.standard_functions import rastrigin_scoring_function
    from qdax.utils.metrics import default_qd_metrics
    batch, budget, dim, iso, line, seed = [float(a) for a in sys.argv[1:7]]
    batch, budget, dim, seed = int(batch), int(budget), int(dim), int(seed)
    key = jax.random.key(seed)
    key, sub = jax.random.split(key)
    init = jax.random.uniform(sub, (batch, dim))
    var = functools.partial(isoline_variation, iso_sigma=iso, line_sigma=line, minval=0.0, maxval=1.0)
    emitter = MixingEmitter(mutation_fn=None, variation_fn=var, variation_percentage=1.0, batch_size=batch)
    me = MAPElites(scoring_function=rastrigin_scoring_function, emitter=emitter,
                   metrics_function=functools.partial(default_qd_metrics, qd_offset=45.0 * dim))
    centroids = compute_euclidean_centroids(grid_shape=(100, 100), minval=0.0, maxval=1.0)
    key, sub = jax.random.split(key)
    rep, est, _ = me.init(init, centroids, sub)
    update = jax.jit(me.update)
    # The initial batch counts toward the budget, as in tfevo and pyribs (whose first ask returns it):
    # budget // batch evaluated batches in all, i.e. one fewer update than that.
    iters = max(3, budget // batch - 1)
    times = []
    for i in range(iters):
        key, sub = jax.random.split(key)
        t = time.perf_counter()
        rep, est, metrics = update(rep, est, sub)
        jax.block_until_ready(rep.fitnesses)
        times.append(time.perf_counter() - t)
    med = float(np.median(times[2:]))
    print(json.dumps({"iters": iters, "evals": batch * (iters + 1), "first_s": times[0] + times[1], "median_s": med, "evals_per_s": batch / med,
                      "qd_score": float(metrics["qd_score"]), "coverage": float(metrics["coverage"]) / 100.0,
                      "max_fitness": float(metrics["max_fitness"])}))
''')


def run_qdax(python, batch, budget, seed=0):
    try:
        out = subprocess.run([python, "-c", QDAX_SCRIPT, str(batch), str(budget), str(DIM), str(ISO), str(LINE),
                              str(seed)],
                             capture_output=True, text=True, timeout=1800,
                             env=dict(os.environ, JAX_PLATFORMS="cpu"))
    except (OSError, subprocess.TimeoutExpired) as e:
        return {"error": str(e)}
    if out.returncode != 0:
        return {"error": out.stderr.strip().splitlines()[-1] if out.stderr.strip() else "failed"}
    return json.loads(out.stdout.strip().splitlines()[-1])


QDAX_QUALITY_SCRIPT = textwrap.dedent('''
    # Final QD-score of QDax's MAP-Elites per seed, one process (update jit-compiled once for all seeds).
    # Same setup as QDAX_SCRIPT: the initial batch counts toward the budget.
    import json, sys, functools
    import numpy as np, jax
    from qdax.core.map_elites import MAPElites
    from qdax.core.containers.mapelites_repertoire import compute_euclidean_centroids
    from qdax.core.emitters.mutation_operators import isoline_variation
    from qdax.core.emitters.standard_emitters import MixingEmitter
    from qdax.tasks.standard_functions import rastrigin_scoring_function
    from qdax.utils.metrics import default_qd_metrics
    batch, budget, dim = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    iso, line = float(sys.argv[4]), float(sys.argv[5])
    seeds = [int(s) for s in sys.argv[6].split(",")]
    var = functools.partial(isoline_variation, iso_sigma=iso, line_sigma=line, minval=0.0, maxval=1.0)
    emitter = MixingEmitter(mutation_fn=None, variation_fn=var, variation_percentage=1.0, batch_size=batch)
    me = MAPElites(scoring_function=rastrigin_scoring_function, emitter=emitter,
                   metrics_function=functools.partial(default_qd_metrics, qd_offset=45.0 * dim))
    centroids = compute_euclidean_centroids(grid_shape=(100, 100), minval=0.0, maxval=1.0)
    update = jax.jit(me.update)
    for seed in seeds:
        key = jax.random.key(seed)
        key, sub = jax.random.split(key)
        init = jax.random.uniform(sub, (batch, dim))
        key, sub = jax.random.split(key)
        rep, est, _ = me.init(init, centroids, sub)
        for i in range(max(3, budget // batch - 1)):
            key, sub = jax.random.split(key)
            rep, est, metrics = update(rep, est, sub)
        f = np.asarray(rep.fitnesses, np.float64)
        filled = np.isfinite(f)
        # QD-score summed in float64 here (QDax's own metric sums in float32; they agree to ~1e-7)
        print(json.dumps({"seed": seed, "qd_score": float(np.sum(f[filled] + 45.0 * dim)),
                          "qd_score_qdax_metric": float(metrics["qd_score"]), "coverage": float(filled.mean()),
                          "max_fitness": float(f[filled].max())}), flush=True)
''')


def run_qdax_quality(python, batch, budget, seeds):
    """QDax's final metrics for each seed (one subprocess for all seeds), or ``{"error": ...}``."""
    try:
        out = subprocess.run([python, "-c", QDAX_QUALITY_SCRIPT, str(batch), str(budget), str(DIM), str(ISO),
                              str(LINE), ",".join(str(s) for s in seeds)],
                             capture_output=True, text=True, timeout=4 * 3600,
                             env=dict(os.environ, JAX_PLATFORMS="cpu"))
    except (OSError, subprocess.TimeoutExpired) as e:
        return {"error": str(e)}
    if out.returncode != 0:
        return {"error": out.stderr.strip().splitlines()[-1] if out.stderr.strip() else "failed"}
    return [json.loads(line) for line in out.stdout.strip().splitlines() if line.startswith("{")]


def welch_t(a, b):
    """Welch's t statistic of mean(a) - mean(b)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return (a.mean() - b.mean()) / np.sqrt(a.var(ddof=1) / len(a) + b.var(ddof=1) / len(b))


def quality(batches, budget, seeds, qdax_python):
    """Final QD-score per library over several seeds, equal budget (initial batch included for all
    three).  Seeds are independent runs, so the libraries are compared by their means: the table gives
    the difference to QDax in % and Welch's t (|t| < 2: no difference resolved by these seeds)."""
    seeds = list(seeds)
    print(f"\n## QD-score over seeds {seeds[0]}..{seeds[-1]} ({len(seeds)} per library), budget {budget} "
          "evaluations (initial batch included)")
    print("| batch | library | seeds | QD-score mean | std | min | max | max fitness mean | vs QDax | Welch t |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for b in batches:
        res = {"tfevo": [], "pyribs": []}
        for seed in seeds:
            for name, make in (("tfevo", make_tfevo), ("pyribs", make_ribs)):
                iteration, final = make(b, seed=seed)
                for _ in range(budget // b):
                    iteration()
                res[name].append(final())
        if os.path.exists(qdax_python):
            res["QDax"] = run_qdax_quality(qdax_python, b, budget, seeds)
        ref = res.get("QDax")
        ref_q = [r["qd_score"] for r in ref] if isinstance(ref, list) and len(ref) > 1 else None
        for name, rs in res.items():
            if isinstance(rs, dict):
                print(f"| {b} | {name} | error: {rs.get('error')} | | | | | | | |")
                continue
            q = np.array([r["qd_score"] for r in rs])
            mf = np.mean([r["max_fitness"] for r in rs])
            vs = t = ""
            if ref_q is not None and name != "QDax" and len(q) > 1:
                vs = f"{100 * (q.mean() / np.mean(ref_q) - 1):+.3f}%"
                t = f"{welch_t(q, ref_q):.2f}"
            print(f"| {b} | {name} | {len(q)} | {q.mean():.6g} | {q.std(ddof=1) if len(q) > 1 else 0:.3g} | "
                  f"{q.min():.6g} | {q.max():.6g} | {mf:.1f} | {vs} | {t} |", flush=True)


def insertion_rate(kind, batch=10000, reps=20):
    """Archive insertions per second alone: tfevo ``Archive.add`` (C++ kernel, and the pure-TensorFlow
    path) vs pyribs' ``archive.add`` on the same arrays, alternating call by call."""
    import tensorflow as tf

    from tfevo.qd import CVTArchive, GridArchive

    rng = np.random.default_rng(0)
    x = rng.uniform(size=(batch, DIM)).astype(np.float32)
    f, d = rastrigin_np(x)
    f, d = f.astype(np.float32), d.astype(np.float32)
    if kind == "grid":
        arch = {op: GridArchive(DIM, GRID, [(0, 1), (0, 1)], use_op=op) for op in (None, False)}
        from ribs.archives import GridArchive as RG

        r = RG(solution_dim=DIM, dims=GRID, ranges=[(0, 1), (0, 1)])
    else:
        arch = {None: CVTArchive(DIM, 10000, [(0, 1), (0, 1)], num_samples=100000, iterations=20)}
        cent = arch[None].centroids.numpy()
        arch[False] = CVTArchive(DIM, 10000, [(0, 1), (0, 1)], centroids=cent, use_op=False)
        from ribs.archives import CVTArchive as RC

        r = RC(solution_dim=DIM, centroids=cent, ranges=[(0, 1), (0, 1)])
    xt, ft, dt = tf.constant(x), tf.constant(f), tf.constant(d)
    for a in arch.values():
        a.add(xt, ft, dt)
    r.add(x, f, d)
    tt = {op: [] for op in arch}
    tr = []
    for i in range(reps):
        for op, a in arch.items():
            t = time.perf_counter()
            res = a.add(xt, ft + 1e-3 * (i + 1), dt)  # every candidate improves its cell
            _ = res.status.numpy()
            tt[op].append(time.perf_counter() - t)
        t = time.perf_counter()
        r.add(x, f + 1e-3 * (i + 1), d)
        tr.append(time.perf_counter() - t)
    return batch / np.median(tt[None]), batch / np.median(tt[False]), batch / np.median(tr)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget", type=int, default=200_000)
    ap.add_argument("--batches", default="100,1000,10000")
    ap.add_argument("--qdax-python", default=os.environ.get("QDAX_PYTHON", "/tmp/qdaxenv/bin/python"),
                    help="python of a QDax virtualenv; a path that does not exist skips QDax")
    ap.add_argument("--quality-seeds", type=int, default=0,
                    help="only compare final QD-scores over this many seeds (no timing)")
    ap.add_argument("--seed-start", type=int, default=0, help="first seed of --quality-seeds")
    args = ap.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    if args.quality_seeds:
        print(f"load (1/5/15 min): {os.getloadavg()}; {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}")
        quality(batches, args.budget, range(args.seed_start, args.seed_start + args.quality_seeds), args.qdax_python)
        return
    print(f"# MAP-Elites Rastrigin-QD {DIM}-D, grid {GRID[0]}x{GRID[1]}, Iso+LineDD, budget {args.budget} evaluations")
    print(f"load (1/5/15 min): {os.getloadavg()}; {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}")
    print("| batch | library | evals/s (median) | ms/iter | CPU ms/iter | warm-up s | QD-score | coverage | max fitness "
          "| tfevo / lib |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for b in batches:
        makers = {"tfevo": make_tfevo, "tfevo (TF only)": lambda batch: make_tfevo(batch, use_op=False),
                  "pyribs": make_ribs}
        rows = run_interleaved(makers, b, args.budget)
        if os.path.exists(args.qdax_python):
            rows["QDax"] = run_qdax(args.qdax_python, b, args.budget)
        for lib, r in rows.items():
            if "error" in r:
                print(f"| {b} | {lib} | error: {r['error']} | | | | | | | |")
                continue
            ratio = rows["tfevo"]["evals_per_s"] / r["evals_per_s"]
            # QD-score reported with QDax's convention (offset added): sum(f + 45 D) over filled cells
            cpu = f"{r['cpu_ms']:.2f}" if "cpu_ms" in r else "n/a"
            print(f"| {b} | {lib} | {r['evals_per_s']:.0f} | {1e3 * r['median_s']:.2f} | {cpu} | {r['first_s']:.2f} | "
                  f"{r['qd_score']:.4g} | "
                  f"{r['coverage']:.3f} | {r['max_fitness']:.1f} | {ratio:.2f}x |", flush=True)
    print()
    print("| archive | tfevo insertions/s | tfevo TF-only insertions/s | pyribs insertions/s | tfevo / pyribs |")
    print("|---|---|---|---|---|")
    for kind in ("grid", "cvt"):
        t, t_ref, r = insertion_rate(kind)
        print(f"| {kind} (batch 10000) | {t:.3g} | {t_ref:.3g} | {r:.3g} | {t / r:.1f}x |", flush=True)
    print(f"\nload at end (1/5/15 min): {os.getloadavg()}")


if __name__ == "__main__":
    main()
