"""Tree-GP result quality: tfevo vs gplearn on Nguyen-1..12 and scikit-learn's bundled regression data.

Usage:
  python benchmarks/bench_gp_quality.py run --lib tfevo|gplearn [--seeds 0-9] [--problems 1-12]
         [--pop 1000] [--gens 50] [--data-seeds 0-9] [--datasets diabetes,linnerud_weight,...]
         [--tfevo-set '{"grow_p_func": "deap"}'] --out results.jsonl
  python benchmarks/bench_gp_quality.py table results.jsonl [more.jsonl ...]

Both libraries get the same settings: population, generations, function set
{add, sub, mul, div, sin, cos, exp, log} (Nguyen; gplearn's exp is a
make_function with the same clamp at 80) or {add, sub, mul, div} with
constants in [-1, 1] (data sets), no constants on Nguyen, tournament 20,
ramped half-and-half with each library's default depth range (gplearn's
init_depth=(2, 6): depths 2..6, its _Program draws randint(2, 6 + 1);
tfevo's default (2, 5), both ends included), p_crossover 0.9, subtree / hoist / point
mutation 0.01 each, p_point_replace 0.05, parsimony 0.001.  Nguyen data:
the standard sampling of :mod:`tfevo.problems.regression` (training points
drawn with the run's seed; the test set is 1000 fresh points of the same
distribution).  A run "recovers" the target when its test MSE is <= 1e-8.
Data sets (scikit-learn's bundled regression data: diabetes, and each of
linnerud's three targets as its own single-output problem): 70/30 split by
seed, test R^2.  Each finished run is appended to
the JSONL file as one line, so an interrupted run keeps its results.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

NGUYEN_FUNCS = ("add", "sub", "mul", "div", "sin", "cos", "exp", "log")
EXACT = 1e-8


def read_records(paths) -> list:
    """The JSON-lines records of the given files, in order."""
    recs = []
    for p in paths:
        with open(p) as f:
            recs += [json.loads(line) for line in f if line.strip()]
    return recs


def run_table_cli(doc, run, table, libs=("tfevo", "gplearn"), estimator="SymbolicRegressor", run_args=(),
                  table_args=()):
    """The ``run`` / ``table`` command line the GP quality scripts share: ``run --lib L --pop --gens
    --tfevo-set --out`` plus ``run_args``, ``table FILES...`` plus ``table_args`` (each a pair of
    ``add_argument``'s positional and keyword arguments)."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--lib", choices=libs, required=True)
    for a, k in run_args:
        r.add_argument(*a, **k)
    r.add_argument("--pop", type=int, default=1000)
    r.add_argument("--gens", type=int, default=50)
    r.add_argument("--tfevo-set", default="", help=f"JSON dict of {estimator} arguments for tfevo runs")
    r.add_argument("--out", required=True)
    t = sub.add_parser("table")
    t.add_argument("files", nargs="+")
    for a, k in table_args:
        t.add_argument(*a, **k)
    args = ap.parse_args()
    run(args) if args.cmd == "run" else table(args)


def _range(s):
    out = []
    for part in s.split(","):
        if "-" in part:
            a, b = part.split("-")
            out += list(range(int(a), int(b) + 1))
        elif part:
            out.append(int(part))
    return out


def nguyen_data(k, seed):
    from tfevo.problems.regression import _NGUYEN

    f, nv, lo, hi, n = _NGUYEN[k]
    x = np.random.RandomState(seed).uniform(lo, hi, (n, nv))
    xt = np.random.RandomState(10_000 + seed).uniform(lo, hi, (1000, nv))
    return x, f(x), xt, f(xt)


DATASETS = ("diabetes", "linnerud_weight", "linnerud_waist", "linnerud_pulse")


def dataset(name, seed):
    from sklearn.datasets import load_diabetes, load_linnerud
    from sklearn.model_selection import train_test_split

    if name == "diabetes":
        x, y = load_diabetes(return_X_y=True)
    elif name.startswith("linnerud_"):
        d = load_linnerud()
        y = d.target[:, [t.lower() for t in d.target_names].index(name[9:])]
        x = d.data
    else:
        raise SystemExit(f"unknown data set {name!r}; known: {', '.join(DATASETS)}")
    return train_test_split(np.asarray(x, np.float64), np.asarray(y, np.float64), test_size=0.3, random_state=seed)


def common(pop, gens, funcs, const_range):
    return dict(population_size=pop, generations=gens, tournament_size=20, init_depth=(2, 6),
                const_range=const_range, parsimony_coefficient=0.001, random_state=0)


def make_tfevo(pop, gens, funcs, const_range, seed, overrides=None):
    from tfevo.gp import SymbolicRegressor

    kw = common(pop, gens, funcs, const_range)
    kw["random_state"] = seed
    del kw["init_depth"]  # tfevo's default depth range
    kw.update(function_set=funcs, max_len=128, p_point=0.05, metric="mse", p_crossover=0.9,
              p_subtree_mutation=0.01, p_hoist_mutation=0.01, p_point_mutation=0.01)
    kw.update(overrides or {})
    return SymbolicRegressor(**kw)


def make_gplearn(pop, gens, funcs, const_range, seed, overrides=None):
    from gplearn.functions import make_function
    from gplearn.genetic import SymbolicRegressor

    def _exp(x):
        with np.errstate(over="ignore"):
            return np.exp(np.minimum(x, 80.0))

    fs = tuple(make_function(function=_exp, name="exp", arity=1) if f == "exp" else f for f in funcs)
    kw = common(pop, gens, funcs, const_range)
    kw["random_state"] = seed
    return SymbolicRegressor(function_set=fs, metric="mse", p_crossover=0.9, p_subtree_mutation=0.01,
                             p_hoist_mutation=0.01, p_point_mutation=0.01, p_point_replace=0.05, n_jobs=1, **kw)


def program_str(lib, est):
    return str(est._program) if lib == "gplearn" else str(est)


def program_len(lib, est):
    return int(est._program.length_) if lib == "gplearn" else int(np.asarray(est.program_.sizes)[0, 0])


def run(args):
    make = make_tfevo if args.lib == "tfevo" else make_gplearn
    overrides = json.loads(args.tfevo_set) if args.tfevo_set else {}
    if overrides and args.lib != "tfevo":
        raise SystemExit("--tfevo-set is for --lib tfevo")
    jobs = []
    datasets = [d for d in args.datasets.split(",") if d]
    for s in _range(args.seeds):
        if s in _range(args.data_seeds):
            jobs += [(d, s) for d in datasets]
        jobs += [(f"nguyen{k}", s) for k in _range(args.problems)]
    for name, s in jobs:
        if not name.startswith("nguyen"):
            x, xt, y, yt = dataset(name, s)
            est = make(args.pop, args.gens, ("add", "sub", "mul", "div"), (-1.0, 1.0), s, overrides)
        else:
            x, y, xt, yt = nguyen_data(int(name[6:]), s)
            est = make(args.pop, args.gens, NGUYEN_FUNCS, None, s, overrides)
        c0, t0 = time.process_time(), time.perf_counter()
        est.fit(x, y)
        cpu, wall = time.process_time() - c0, time.perf_counter() - t0
        with np.errstate(all="ignore"):
            p = np.asarray(est.predict(xt), np.float64)
            test_mse = float(np.mean((p - yt) ** 2))
            r2 = float(1 - np.sum((p - yt) ** 2) / np.sum((yt - yt.mean()) ** 2))
        rec = dict(lib=args.lib, problem=name, seed=s, pop=args.pop, gens=args.gens,
                   test_mse=test_mse if np.isfinite(test_mse) else None, test_r2=r2 if np.isfinite(r2) else None,
                   exact=bool(np.isfinite(test_mse) and test_mse <= EXACT), length=program_len(args.lib, est),
                   program=program_str(args.lib, est), cpu_s=round(cpu, 2), wall_s=round(wall, 2))
        if overrides:
            rec["tfevo_set"] = overrides
        with open(args.out, "a") as f:
            f.write(json.dumps(rec) + "\n")
        print(name, s, args.lib, f"mse={test_mse:.3g} r2={r2:.4f} cpu={cpu:.1f}s", flush=True)
    print("max RSS MB", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)


def table(args):
    recs = read_records(args.files)
    by = {}
    for r in recs:
        by.setdefault((r["problem"], r["lib"]), {})[r["seed"]] = r
    problems = sorted({r["problem"] for r in recs},
                      key=lambda n: (n.startswith("nguyen"), int(n[6:]) if n[6:].isdigit() else 0, n))
    print("| problem | seeds (both) | tfevo median test MSE | gplearn median test MSE | ratio | tfevo exact "
          "| gplearn exact | target met | tfevo median len | gplearn median len | tfevo CPU s/run | gplearn CPU s/run |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for pr in problems:
        a, b = by.get((pr, "tfevo"), {}), by.get((pr, "gplearn"), {})
        seeds = sorted(set(a) & set(b))
        if not seeds:
            continue

        def med(d, key):
            bad = -np.inf if key == "test_r2" else np.inf
            v = [d[s][key] if d[s][key] is not None else bad for s in seeds]
            return float(np.median(v))

        tail = (f"| {med(a, 'length'):.0f} | {med(b, 'length'):.0f} | {med(a, 'cpu_s'):.1f} "
                f"| {med(b, 'cpu_s'):.1f} |")
        if not pr.startswith("nguyen"):
            ra, rb = med(a, "test_r2"), med(b, "test_r2")
            print(f"| {pr} (test R^2, median) | {len(seeds)} | {ra:.4f} | {rb:.4f} | {ra - rb:+.4f} (diff) | - | - "
                  f"| {'yes' if ra >= rb else '**no**'} " + tail)
            continue
        ea = sum(a[s]["exact"] for s in seeds)
        eb = sum(b[s]["exact"] for s in seeds)
        ma, mb = med(a, "test_mse"), med(b, "test_mse")
        ok = (ma <= mb or ma <= EXACT) and ea >= eb  # medians below the exactness threshold are round-off
        ratio = f"{ma / mb:.2g}" if mb > 0 else ("1" if ma == 0 else "inf")  # gplearn's float64 exact fits give 0
        print(f"| {pr} | {len(seeds)} | {ma:.3g} | {mb:.3g} | {ratio} | {ea}/{len(seeds)} | {eb}/{len(seeds)} "
              f"| {'yes' if ok else '**no**'} " + tail)


def main():
    run_table_cli(__doc__, run, table, run_args=[
        (("--seeds",), dict(default="0-9")), (("--problems",), dict(default="1-12")),
        (("--data-seeds",), dict(default="0-9")), (("--datasets",), dict(default=",".join(DATASETS)))])


if __name__ == "__main__":
    main()
