"""tfevo's restart CMA-ES against pycma on the 24 BBOB functions (COCO instances).

Run::

    python benchmarks/bench_cma_bbob.py run --algos tfevo_ipop,tfevo_bipop --out tf.jsonl
    python benchmarks/bench_cma_bbob.py run --algos pycma_ipop,pycma_bipop --out py.jsonl
    python benchmarks/bench_cma_bbob.py report tf.jsonl py.jsonl

Each run: one (function, dimension, COCO instance), start point uniform in
``[-4, 4]^D`` (a new one at every restart, both libraries), ``sigma0 = 2``,
default population size ``4 + floor(3 ln D)``; each large restart doubles the
unfloored ``4 + 3 ln D`` and floors it (pycma's rule: 10, 21, 43, ... at D = 10), at
most 9 restarts, a budget of ``--budget-per-dim * D`` evaluations, stopped when
``f - f_opt <= 1e-8`` (the evaluation count is that of the first solution that
reached it, counted solution by solution in both libraries).

* ``tfevo_ipop``  -- ``tfevo.strategies.IPOP`` (CMAES inside, defaults: float64),
  fitness from ``tfevo.problems.bbob.make(fid, D, instance=i)``, ``f - f_opt`` told
  in float64 (as pycma ranks it); the final mean of every run that ends on a
  criterion is evaluated once (``evaluate_final_mean``, as ``cma.fmin``'s
  ``eval_final_mean``), counted in the budget and in BIPOP's regime budgets;
* ``tfevo_bipop`` -- ``tfevo.strategies.BIPOP``, the same;
* ``pycma_ipop``  -- ``cma.fmin(f, x0, 2, restarts=9, incpopsize=2)`` with ``x0``
  a callable (uniform in ``[-4, 4]^D``), ``ftarget``, the budget through a
  termination callback, ``cocoex.BareProblem`` as ``f``;
* ``pycma_bipop`` -- the same with ``bipop=True``.

``--reps R`` runs R seeds per instance (repetition r: seed ``1000 fid + instance + 100000 r``,
both libraries; r = 0 are the seeds of one run per instance); ``report --reps R`` reads them.

``restarts`` prints, per function, dimension and algorithm, the runs of every restart
sequence: runs per sequence, which run solved, evaluations per run by popsize (``s``: a
BIPOP small run) and the stop reasons of the runs that ended on a criterion.

``report`` prints per function and dimension: successes out of the instances
(1e-8 reached within the budget) and the median evaluations of the successful
runs, for each pair (tfevo IPOP vs pycma IPOP, tfevo BIPOP vs pycma BIPOP), and
whether the targets hold (success >= pycma's; median evaluations <= 1.1x
pycma's where both succeed in every instance).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np  # noqa: E402

TARGET = 1e-8


_ES = {}


def _strategy(kind, dim, seed):
    """A restart strategy in the state ``cls(dim, ..., seed=seed)`` starts in.

    One object per (kind, dim) is built and its initial variable values are
    assigned back (with the seed's streams and start point) for every run: the
    same state as a new object, without re-tracing and re-compiling ``ask`` and
    ``tell`` for every run (seconds per run that are not optimisation).
    """
    from tfevo.strategies import BIPOP, IPOP

    key = (kind, dim)
    if key not in _ES:
        es = (IPOP if kind == "ipop" else BIPOP)(dim, sigma=2.0, init_range=(-4.0, 4.0), seed=0, max_restarts=9)
        _ES[key] = (es, [v.numpy() for v in es.variables])
    es, init = _ES[key]
    for v, val in zip(es.variables, init):
        v.assign(val)
    # the constructor's seeding: both streams get the seed; the wrapper's stream (its own keys) is
    # rewound and draws the first start point from init_range, as the constructor does
    es.seeds.seed.assign(seed)
    es.seeds.counter.assign(0)
    es.inner.seeds.seed.assign(seed)
    x0 = es._draw_mean()
    es.inner.init_params = x0
    es.inner._mean.assign(x0)
    es.history.clear()
    es.last_stop_reasons = []
    es._sync()
    return es


def run_seed(fid, inst, rep):
    """The seed of one run (both libraries): repetition 0 keeps the seeds of the first tables."""
    return 1000 * fid + inst + 100000 * rep


def _tfevo_run_record(es):
    """The start of the inner run the wrapper is in: popsize, sigma0, x0, regime."""
    rec = {"popsize": int(es.current_popsize.numpy()), "sigma0": float(es.inner.sigma.numpy()),
           "x0": [round(float(v), 6) for v in es.inner.mean.numpy()], "evals": 0, "iters": 0, "best": float("inf")}
    if hasattr(es, "regime_small"):
        rec["small"] = bool(es.regime_small.numpy())
    return rec


def run_tfevo(kind, fid, dim, inst, budget, rep=0):
    import tensorflow as tf

    from tfevo.problems import bbob

    p = bbob.make(fid, dim, instance=inst)
    es = _strategy(kind, dim, run_seed(fid, inst, rep))
    evals, hit = 0, None
    consts, f_opt = p._consts, p._f_opt_t
    runs = [_tfevo_run_record(es)]

    def final_mean(m):  # cma.fmin's eval_final_mean: the mean of a run that ends, one evaluation
        nonlocal evals, hit
        fm, _, _ = p._cf(tf.constant(m[None, :], tf.float64), consts, f_opt)
        v = float(fm.numpy()[0] - p.f_opt)
        evals += 1
        runs[-1]["evals"] += 1
        runs[-1]["mean_evals"] = 1
        runs[-1]["best"] = min(runs[-1]["best"], v)
        if v <= TARGET and hit is None and evals <= budget:
            hit = evals
        return -v

    es.evaluate_final_mean = final_mean
    while evals < budget and hit is None:
        x = es.ask()
        f, _, _ = p._cf(x, consts, f_opt)  # f(x) in float64 [P], f_opt included
        g = f.numpy() - p.f_opt  # f - f_opt in float64, as pycma's side computes it
        n = min(len(g), budget - evals)
        run = runs[-1]
        run["best"] = min(run["best"], float(np.min(g[:n])))
        ok = np.nonzero(g[:n] <= TARGET)[0]
        if len(ok):
            hit = evals + int(ok[0]) + 1
            run["evals"] += int(ok[0]) + 1
            run["iters"] += 1
            run["stop"] = ["ftarget"]
            break
        evals += len(g)
        run["evals"] += n
        run["iters"] += 1
        n_hist = len(es.history)
        es.tell(x, tf.constant(-g, tf.float64))  # float64, as pycma ranks (float32 ties near a local optimum)
        if len(es.history) > n_hist:  # the run ended on a stop criterion; the wrapper restarted it
            run["stop"] = list(es.last_stop_reasons) + (["mean hit"] if hit else [])
            runs.append(_tfevo_run_record(es))
    if "stop" not in runs[-1]:
        runs[-1]["stop"] = ["ftarget"] if hit else ["budget"]
    es.evaluate_final_mean = None
    best = float(-es.best[1].numpy())
    return {"evals": hit, "spent": hit or min(evals, budget), "best": min(best, TARGET) if hit else best,
            "restarts": int(es.restarts.numpy()), "runs": runs}


def run_pycma(kind, fid, dim, inst, budget, rep=0):
    import cma
    import cocoex

    from tfevo.problems import bbob

    f_opt = bbob.make(fid, dim, instance=inst).f_opt
    prob = cocoex.BareProblem("bbob", fid, dim, inst)
    state = {"n": 0, "hit": None, "best": np.inf}

    def f(x):
        v = float(prob(np.asarray(x, np.float64))) - f_opt
        state["n"] += 1
        state["best"] = min(state["best"], v)
        if v <= TARGET and state["hit"] is None:
            state["hit"] = state["n"]
        return v

    rng = np.random.default_rng(run_seed(fid, inst, rep))

    def x0():
        return rng.uniform(-4.0, 4.0, dim)

    opts = {"ftarget": TARGET, "maxfevals": budget, "verbose": -9, "seed": run_seed(fid, inst, rep),
            "termination_callback": lambda es: state["n"] >= budget or state["hit"] is not None}
    started = []  # (es, evaluations before its first iteration) of every run of cma.fmin

    def on_start(es):
        started.append((es, es.countevals, state["n"]))

    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cma.fmin(f, x0, 2.0, opts, restarts={"maxrestarts": 9, "maxfevals": budget}, incpopsize=2,
                 bipop=(kind == "bipop"), init_callback=on_start)
    hit = state["hit"] if state["hit"] is not None and state["hit"] <= budget else None
    runs = []
    ends = [n for _, _, n in started[1:]] + [min(state["n"], hit or budget)]
    for (es, _, n0), n1 in zip(started, ends):
        stop = es.stop(check=False)
        runs.append({"popsize": int(es.sp.popsize), "sigma0": float(es.sigma0),
                     "x0": [round(float(v), 6) for v in es.x0], "evals": int(n1 - n0), "iters": int(es.countiter),
                     "best": float(es.best.f), "stop": sorted(k for k in stop if k != "termination_callback"),
                     "small": kind == "bipop" and (not runs or float(es.sigma0) < 2.0),
                     # cma.fmin evaluates the final mean of every run (eval_final_mean): one more evaluation
                     "mean_evals": int(n1 - n0) - int(es.countiter) * int(es.sp.popsize)})
    return {"evals": hit, "spent": min(state["n"], budget), "best": state["best"],
            "restarts": len(started) - 1, "runs": runs}


def cmd_run(args):
    if any(a.startswith("tfevo") for a in args.algos):
        import tensorflow as tf

        tf.config.threading.set_intra_op_parallelism_threads(1)
        tf.config.threading.set_inter_op_parallelism_threads(1)
    done = set()
    if os.path.exists(args.out):
        with open(args.out) as fh:
            for line in fh:
                r = json.loads(line)
                done.add((r["algo"], r["fid"], r["dim"], r["instance"], r.get("rep", 0)))
    fids = [int(v) for v in args.fids.split(",")]
    dims = [int(v) for v in args.dims.split(",")]
    insts = [int(v) for v in args.instances.split(",")]
    reps = range(args.reps)
    with open(args.out, "a") as fh:
        for dim in dims:
            for fid in fids:
                for rep, inst, algo in itertools.product(reps, insts, args.algos):
                    if (algo, fid, dim, inst, rep) in done:
                        continue
                    lib, kind = algo.split("_")
                    t0 = time.process_time()
                    fn = run_tfevo if lib == "tfevo" else run_pycma
                    r = fn(kind, fid, dim, inst, args.budget_per_dim * dim, rep)
                    r.update(algo=algo, fid=fid, dim=dim, instance=inst, rep=rep, budget=args.budget_per_dim * dim,
                             cpu_s=round(time.process_time() - t0, 2))
                    fh.write(json.dumps(r) + "\n")
                    fh.flush()
                    print(json.dumps(r), flush=True)


def _fisher(a, b, n):
    """Two-sided Fisher exact p of a/n against b/n successes."""
    from scipy.stats import fisher_exact

    return float(fisher_exact([[a, n - a], [b, n - b]])[1])


def _load(files, reps):
    rows = []
    for path in files:
        with open(path) as fh:
            rows += [json.loads(line) for line in fh]
    return {(r["algo"], r["fid"], r["dim"], r["instance"], r.get("rep", 0)): r for r in rows
            if r.get("rep", 0) < reps}


def cmd_restarts(args):
    """Per (function, dimension) and algorithm: the runs of every restart sequence."""
    tab = _load(args.files, args.reps)
    rows = sorted({(k[2], k[1]) for k in tab})
    for kind in ("ipop", "bipop"):
        for dim, fid in rows:
            print(f"\n#### f{fid} {dim}-D, {kind.upper()}: the runs of each sequence\n")
            print("| side | sequences | runs per sequence (min/median/max) | solved in run 1 / 2 / 3 / later | "
                  "evaluations per run by popsize (median, count) | stop reasons (runs that ended on a criterion) |")
            print("|---|---|---|---|---|---|")
            for lib in ("tfevo", "pycma"):
                seqs = [r for k, r in sorted(tab.items()) if k[:3] == (f"{lib}_{kind}", fid, dim) and "runs" in r]
                if not seqs:
                    continue
                nruns = [len(r["runs"]) for r in seqs]
                solved = [len(r["runs"]) for r in seqs if r["evals"] is not None]
                by_run = [sum(1 for v in solved if v == i) for i in (1, 2, 3)] + [sum(1 for v in solved if v > 3)]
                per_pop = {}
                reasons = {}
                for r in seqs:
                    for run in r["runs"]:
                        if {"budget", "callback", "maxfevals", "ftarget"} & set(run["stop"]):
                            continue  # (ended by the harness's budget or target, not by a criterion)
                        key = (run["popsize"], "s" if run.get("small") and run["sigma0"] < 2.0 else "")
                        per_pop.setdefault(key, []).append(run["evals"])
                        for s in run["stop"]:
                            reasons[s] = reasons.get(s, 0) + 1
                pops = ", ".join(f"{p}{s}: {statistics.median(v):.0f} ({len(v)})" for (p, s), v in sorted(per_pop.items()))
                why = ", ".join(f"{k} {v}" for k, v in sorted(reasons.items(), key=lambda kv: -kv[1]))
                print(f"| {lib} | {len(seqs)} | {min(nruns)}/{statistics.median(nruns):g}/{max(nruns)} | "
                      f"{' / '.join(map(str, by_run))} | {pops} | {why} |")


def cmd_report(args):
    tab = _load(args.files, args.reps)
    rows = list(tab.values())
    keys = sorted({k[3:] for k in tab})
    dims = sorted({r["dim"] for r in rows})
    fids = sorted({r["fid"] for r in rows})
    cpu = {}
    for r in tab.values():
        cpu[r["algo"]] = cpu.get(r["algo"], 0.0) + r["cpu_s"]
    for kind in ("ipop", "bipop"):
        a, b = f"tfevo_{kind}", f"pycma_{kind}"
        print(f"\n### {kind.upper()}-CMA-ES: tfevo vs pycma\n")
        print("| f | D | tfevo succ | pycma succ | Fisher p | tfevo median evals | pycma median evals | ratio | success >= "
              "| evals <= 1.1x |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        n_ok = n_all = 0
        for dim in dims:
            for fid in fids:
                ra = [tab.get((a, fid, dim) + k) for k in keys]
                rb = [tab.get((b, fid, dim) + k) for k in keys]
                pairs = [(x, y) for x, y in zip(ra, rb) if x is not None and y is not None]
                if not pairs:
                    continue
                sa = [x["evals"] for x, _ in pairs if x["evals"] is not None]
                sb = [y["evals"] for _, y in pairs if y["evals"] is not None]
                ma = statistics.median(sa) if sa else None
                mb = statistics.median(sb) if sb else None
                succ_ok = len(sa) >= len(sb)
                both = len(sa) == len(sb) == len(pairs)
                ratio = ma / mb if (ma and mb) else None
                evals_ok = (ratio <= 1.1) if (ratio is not None and both) else None
                n_all += 1
                n_ok += succ_ok and evals_ok is not False
                fmt = (lambda v: "-" if v is None else f"{v:.0f}")
                p_fisher = _fisher(len(sa), len(sb), len(pairs))
                print(f"| f{fid} | {dim} | {len(sa)}/{len(pairs)} | {len(sb)}/{len(pairs)} | {p_fisher:.2f} | "
                      f"{fmt(ma)} | {fmt(mb)} | "
                      f"{'-' if ratio is None else f'{ratio:.2f}'} | {'yes' if succ_ok else '**no**'} | "
                      f"{'-' if evals_ok is None else ('yes' if evals_ok else '**no**')} |")
        print(f"\nboth targets met on {n_ok} of {n_all} (function, dimension) pairs")
    print("\nCPU seconds per algorithm (whole table): "
          + ", ".join(f"{k} {v:.0f}" for k, v in sorted(cpu.items())))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--algos", type=lambda s: s.split(","), default=["tfevo_ipop", "tfevo_bipop"])
    r.add_argument("--fids", default=",".join(str(i) for i in range(1, 25)))
    r.add_argument("--dims", default="10,20")
    r.add_argument("--instances", default="1,2,3,4,5")
    r.add_argument("--budget-per-dim", type=int, default=1000)
    r.add_argument("--reps", type=int, default=1,
                   help="seeds per instance (repetition r uses seed 1000 fid + instance + 100000 r)")
    r.add_argument("--out", required=True)
    rep = sub.add_parser("report")
    rep.add_argument("--reps", type=int, default=1, help="report repetitions 0..reps-1 per instance")
    rep.add_argument("files", nargs="+")
    rs = sub.add_parser("restarts", help="the runs of every restart sequence (files written by run)")
    rs.add_argument("--reps", type=int, default=1)
    rs.add_argument("files", nargs="+")
    args = ap.parse_args()
    {"run": cmd_run, "report": cmd_report, "restarts": cmd_restarts}[args.cmd](args)


if __name__ == "__main__":
    main()
