"""tfevo ``fmin(..., bounds=)`` against ``cma.fmin2`` with pycma's default BoundTransform,
on box-constrained problems whose constrained optimum lies on or near the bound.

Every problem is minimised in ``[-5, 5]^D`` from ``x0 = 0`` with ``sigma0 = 2.5``; a run
succeeds when ``f - f* <= 1e-8`` (``f*`` the constrained optimum, known in closed form).
Seeds are fixed before running (``--seeds``); every run is printed as one JSON line.

    python benchmarks/audit_cma_bounds.py --seeds 0-4 --dim 10 --max-evals 20000 > out.jsonl
    python benchmarks/audit_cma_bounds.py --table out.jsonl
    python benchmarks/audit_cma_bounds.py --seeds 0-4 --dim 5 --max-evals 50000 --restarts bipop \
        --problems rastrigin_corner > bipop.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings

import numpy as np

LO, HI, TOL = -5.0, 5.0, 1e-8


def problems(d):
    """name -> (f(x [D]) -> float, f*) with the constrained optimum on or near the bound."""
    w = 10.0 ** (6.0 * np.arange(d) / max(d - 1, 1))
    rot = np.linalg.qr(np.random.default_rng(123).standard_normal([d, d]))[0]
    w4 = 10.0 ** (4.0 * np.arange(d) / max(d - 1, 1))
    half = np.arange(d) < d // 2
    x1 = np.where(half, 6.0, 0.0)  # half the coordinates' optimum beyond the upper bound
    x2 = np.where(np.arange(d) % 2 == 0, 7.0, 4.999)  # beyond the bound or just inside it

    def sphere_out(x):
        return float(np.sum((x - x1) ** 2))

    def ellip_sep_edge(x):
        return float(np.sum(w * (x - x2) ** 2))

    def ellip_rot_corner(x):
        return float(np.sum(w4 * (rot @ (x - HI)) ** 2))

    def rosen_corner(x):
        z = x - (HI - 1.0)  # optimum x = 5 in every coordinate
        return float(np.sum(100.0 * (z[1:] - z[:-1] ** 2) ** 2 + (1.0 - z[:-1]) ** 2))

    def rastrigin_corner(x):
        z = x - HI
        return float(10.0 * d + np.sum(z * z - 10.0 * np.cos(2 * np.pi * z)))

    def clipped(f, xs):
        return f(np.clip(xs, LO, HI))

    return {
        "sphere_out": (sphere_out, clipped(sphere_out, x1)),
        "ellip_sep_edge": (ellip_sep_edge, clipped(ellip_sep_edge, x2)),
        "ellip_rot_corner": (ellip_rot_corner, 0.0),
        "rosen_corner": (rosen_corner, 0.0),
        "rastrigin_corner": (rastrigin_corner, 0.0),
    }


def run_tfevo(f, fstar, d, seed, max_evals, restarts=None):
    from tfevo.strategies.minimize import fmin

    r = fmin(f, np.zeros(d), 2.5, bounds=(LO, HI), seed=seed, max_evals=max_evals, ftarget=fstar + TOL,
             restarts=restarts, max_restarts=9)
    inside = bool(np.all((r.x >= LO) & (r.x <= HI)))
    return r.f - fstar, r.evaluations, sorted(r.stop), inside


def run_pycma(f, fstar, d, seed, max_evals, restarts=None):
    import cma

    extra = {} if restarts is None else {"restarts": 9, "bipop": restarts == "bipop"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        x, es = cma.fmin2(f, np.zeros(d), 2.5, {"bounds": [LO, HI], "seed": seed + 1, "maxfevals": max_evals,
                                                 "ftarget": fstar + TOL, "verbose": -9}, **extra)
    xb = es.result.xbest
    inside = bool(np.all((xb >= LO) & (xb <= HI)))
    return es.result.fbest - fstar, es.result.evaluations, sorted(es.stop()), inside


def seeds_of(text):
    a, _, b = text.partition("-")
    return list(range(int(a), int(b or a) + 1))


def table(path):
    rows = [json.loads(line) for line in open(path) if line.strip()]
    out = ["| problem | code | runs | f-f* <= 1e-8 | median f-f* | median evals | stops |", "|---|---|---|---|---|---|---|"]
    for prob in dict.fromkeys(r["problem"] for r in rows):
        for code in ("tfevo", "pycma"):
            rs = [r for r in rows if r["problem"] == prob and r["code"] == code]
            if not rs:
                continue
            ok = sum(r["df"] <= TOL for r in rs)
            stops = sorted({s for r in rs for s in r["stop"]})
            out.append(f"| {prob} | {code} | {len(rs)} | {ok} | {np.median([r['df'] for r in rs]):.3g} | "
                       f"{np.median([r['evals'] for r in rs]):.0f} | {', '.join(stops)} |")
    print("\n".join(out))


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", default="0-4")
    ap.add_argument("--dim", type=int, default=10)
    ap.add_argument("--max-evals", type=int, default=20000)
    ap.add_argument("--problems", default="")
    ap.add_argument("--restarts", default="", help="'ipop' or 'bipop' (9 restarts, both sides)")
    ap.add_argument("--table", default="")
    a = ap.parse_args(argv)
    if a.table:
        return table(a.table)
    probs = problems(a.dim)
    names = a.problems.split(",") if a.problems else list(probs)
    for name in names:
        f, fstar = probs[name]
        for seed in seeds_of(a.seeds):
            for code, fn in (("tfevo", run_tfevo), ("pycma", run_pycma)):
                t = time.time()
                df, evals, stop, inside = fn(f, fstar, a.dim, seed, a.max_evals, a.restarts or None)
                print(json.dumps(dict(problem=name, code=code, seed=seed, dim=a.dim, df=float(df), evals=int(evals),
                                      restarts=a.restarts or None,
                                      stop=stop, inside=inside, seconds=round(time.time() - t, 2))), flush=True)


if __name__ == "__main__":
    sys.exit(main())
