"""Why a fitted program's test predictions go wrong: per run, train / test MSE,
length, depth, the worst test point, and the node where its prediction
leaves the range seen on the training rows.

Usage:
  python benchmarks/tools/gp_extrapolation_diag.py run --lib tfevo|gplearn --datasets linnerud_waist,linnerud_weight
         --seeds 0-9 [--tfevo-set '{...}'] --out diag.jsonl
  python benchmarks/tools/gp_extrapolation_diag.py table diag.jsonl [more.jsonl ...]

Runs use bench_gp_quality.py's data split and estimator settings.  Every
fitted program is re-evaluated in float64 by one NumPy interpreter with
gplearn's protected functions (the same thresholds as tfevo's), so both
libraries' programs are diagnosed the same way.  For the test point of the
largest squared error, the "origin" is the deepest node whose value there
lies outside the range its values span on the training rows widened by that
range's width on each side, while all its children stay inside theirs: the
node that starts the extrapolation.  For a ``div`` origin it also records
whether the divisor came closer to 0 than on any training row.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from bench_gp_quality import _range, dataset, make_gplearn, make_tfevo, read_records, run_table_cli  # noqa: E402

ARITY = {"add": 2, "sub": 2, "mul": 2, "div": 2, "log": 1, "sqrt": 1, "inv": 1, "neg": 1, "abs": 1,
         "sin": 1, "cos": 1, "exp": 1}


def _fn(name, *a):
    with np.errstate(all="ignore"):
        if name == "add":
            return a[0] + a[1]
        if name == "sub":
            return a[0] - a[1]
        if name == "mul":
            return a[0] * a[1]
        if name == "div":  # gplearn's _protected_division
            return np.where(np.abs(a[1]) > 0.001, np.divide(a[0], a[1]), 1.0)
        if name == "log":
            return np.where(np.abs(a[0]) > 0.001, np.log(np.abs(a[0])), 0.0)
        if name == "sqrt":
            return np.sqrt(np.abs(a[0]))
        if name == "inv":
            return np.where(np.abs(a[0]) > 0.001, 1.0 / a[0], 0.0)
        if name == "exp":
            return np.exp(np.minimum(a[0], 80.0))
        return {"neg": np.negative, "abs": np.abs, "sin": np.sin, "cos": np.cos}[name](a[0])


def tokens(lib, est):
    """The fitted program as prefix tokens: ('f', name) / ('x', i) / ('c', value)."""
    if lib == "gplearn":
        out = []
        for node in est._program.program:
            if isinstance(node, (int, np.integer)):
                out.append(("x", int(node)))
            elif isinstance(node, (float, np.floating)):
                out.append(("c", float(node)))
            else:
                out.append(("f", node.name))
        return out
    from tfevo.gp.functions import get_function
    from tfevo.gp.trees import CONST, FUNC, VAR

    t, v = np.asarray(est.program_.types)[0], np.asarray(est.program_.values)[0]
    out = []
    for ti, vi in zip(t, v):
        if ti == FUNC:
            out.append(("f", get_function(int(vi)).name))
        elif ti == VAR:
            out.append(("x", int(vi)))
        elif ti == CONST:
            out.append(("c", float(vi)))
    return out


def evaluate(tok, x):
    """Every node's values on x: list (prefix order) of float64 [n], depth."""
    vals = [None] * len(tok)
    kids = [[] for _ in tok]
    depth = [0] * len(tok)

    def rec(i, d):
        depth[i] = d
        kind, a = tok[i]
        if kind == "x":
            vals[i] = x[:, a].astype(np.float64)
            return i + 1
        if kind == "c":
            vals[i] = np.full(len(x), a, np.float64)
            return i + 1
        j = i + 1
        for _ in range(ARITY[a]):
            kids[i].append(j)
            j = rec(j, d + 1)
        vals[i] = _fn(a, *[vals[k] for k in kids[i]])
        return j

    rec(0, 0)
    return vals, kids, max(depth), depth


def diagnose(tok, x, y, xt, yt):
    tr, kids, dep, depth = evaluate(tok, x)
    te, _, _, _ = evaluate(tok, xt)
    p, pt = tr[0], te[0]
    err = (pt - yt) ** 2
    wy = y.max() - y.min()
    j = int(np.nanargmax(np.where(np.isfinite(err), err, np.inf)))
    lo = np.array([np.nanmin(v) for v in tr])
    hi = np.array([np.nanmax(v) for v in tr])
    w = np.maximum(hi - lo, 1e-12)
    outside = [(te[i][j] < lo[i] - w[i]) or (te[i][j] > hi[i] + w[i]) or not np.isfinite(te[i][j])
               for i in range(len(tok))]
    origin = None
    for i in range(len(tok)):
        if outside[i] and not any(outside[k] for k in kids[i]):
            if origin is None or depth[i] > depth[origin]:
                origin = i
    rec = dict(train_mse=float(np.mean((p - y) ** 2)), test_mse=float(np.mean(err)),
               test_r2=float(1 - np.sum(err) / np.sum((yt - yt.mean()) ** 2)),
               length=len(tok), depth=int(dep), worst_index=j, worst_pred=float(pt[j]), worst_true=float(yt[j]),
               train_pred_range=[float(p.min()), float(p.max())], y_train_range=[float(y.min()), float(y.max())],
               n_test_outside_y_range=int(np.sum((pt < y.min() - wy) | (pt > y.max() + wy))),
               n_div=sum(1 for k, a in tok if k == "f" and a == "div"))
    if origin is not None:
        kind, name = tok[origin]
        rec["origin"] = name if kind == "f" else kind
        rec["origin_depth"] = depth[origin]
        if kind == "f" and name == "div":
            b_tr = np.abs(tr[kids[origin][1]])
            b_te = abs(te[kids[origin][1]][j])
            rec["origin_divisor_test"] = float(b_te)
            rec["origin_divisor_train_min_abs"] = float(np.min(b_tr))
            rec["origin_divisor_nearer_0"] = bool(b_te < np.min(b_tr))
    return rec


def run(args):
    over = json.loads(args.tfevo_set) if args.tfevo_set else {}
    for name in args.datasets.split(","):
        for s in _range(args.seeds):
            x, xt, y, yt = dataset(name, s)
            make = make_tfevo if args.lib == "tfevo" else make_gplearn
            est = make(args.pop, args.gens, ("add", "sub", "mul", "div"), (-1.0, 1.0), s, over)
            est.fit(x, y)
            tok = tokens(args.lib, est)
            rec = dict(lib=args.lib, problem=name, seed=s, **diagnose(tok, x, y, xt, yt))
            with np.errstate(all="ignore"):
                own = np.asarray(est.predict(xt), np.float64)
            rec["test_r2_own_predict"] = float(1 - np.sum((own - yt) ** 2) / np.sum((yt - yt.mean()) ** 2))
            if over:
                rec["tfevo_set"] = over
            with open(args.out, "a") as f:
                f.write(json.dumps(rec) + "\n")
            print(name, s, args.lib, {k: rec.get(k) for k in ("train_mse", "test_mse", "test_r2", "length",
                                                               "depth", "origin")}, flush=True)


def table(args):
    recs = read_records(args.files)
    groups = {}
    for r in recs:
        groups.setdefault((r["problem"], r["lib"] + (" " + json.dumps(r["tfevo_set"]) if "tfevo_set" in r else "")),
                          []).append(r)
    print("| data set | side | runs | train MSE median | test MSE median | test R^2 median | length median "
          "| depth median | worst test point outside 3x train range (runs) | origin of the worst point "
          "(div: divisor nearer 0 than in training) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for (pr, side), rs in sorted(groups.items()):
        med = lambda k: float(np.median([r[k] for r in rs]))  # noqa: E731
        out = sum(1 for r in rs if r["n_test_outside_y_range"] > 0)
        org = {}
        for r in rs:
            o = r.get("origin", "none")
            org[o] = org.get(o, 0) + 1
        near = sum(1 for r in rs if r.get("origin_divisor_nearer_0"))
        ostr = ", ".join(f"{k} {v}" for k, v in sorted(org.items(), key=lambda kv: -kv[1]))
        print(f"| {pr} | {side} | {len(rs)} | {med('train_mse'):.4g} | {med('test_mse'):.4g} | {med('test_r2'):.3f} "
              f"| {med('length'):.0f} | {med('depth'):.0f} | {out} | {ostr} (div nearer 0: {near}) |")


def main():
    run_table_cli(__doc__, run, table, run_args=[
        (("--datasets",), dict(default="linnerud_waist,linnerud_weight")), (("--seeds",), dict(default="0-9"))])


if __name__ == "__main__":
    main()
