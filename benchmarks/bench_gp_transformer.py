"""SymbolicTransformer vs gplearn's on scikit-learn's diabetes data, as in
gplearn's SymbolicTransformer example: the constructed features of a
transformer fitted on the training rows are stacked with the original ones
and a Ridge is fitted on them; the test R^2 and the transformer's fit time
are compared, seed by seed (each seed: its own train/test split, shared by
both libraries, and the transformers' random_state).

Usage: PYTHONPATH=$PWD python benchmarks/bench_gp_transformer.py [--seeds 0-11] [--threads 1] [--out f.jsonl]
       [--libs tfevo --tfevo-kw '{"init_depth": [2, 6]}']   (a tfevo variant alone)
"""

import argparse
import json
import os
import time

import numpy as np

# gplearn's example settings (both libraries get exactly these; the rest are each library's defaults)
SETTINGS = dict(generations=20, population_size=2000, hall_of_fame=100, n_components=10,
                function_set=("add", "sub", "mul", "div", "sqrt", "log", "abs", "neg", "inv", "max", "min"),
                parsimony_coefficient=0.0005, max_samples=0.9)


def split(seed, n_train=300):
    from sklearn.datasets import load_diabetes
    from sklearn.utils import check_random_state

    d = load_diabetes()
    perm = check_random_state(seed).permutation(d.target.size)
    X, y = d.data[perm], d.target[perm]
    return X[:n_train], y[:n_train], X[n_train:], y[n_train:]


def ridge_r2(Xtr, ytr, Xte, yte, ftr=None, fte=None):
    from sklearn.linear_model import Ridge

    if ftr is not None:
        Xtr, Xte = np.hstack([Xtr, ftr]), np.hstack([Xte, fte])
    return float(Ridge().fit(Xtr, ytr).score(Xte, yte))


def run(lib, seed, data, tfevo_kw=None):
    if lib == "tfevo":
        from tfevo.gp import SymbolicTransformer
        est = SymbolicTransformer(**SETTINGS, **(tfevo_kw or {}), random_state=seed)
    else:
        from gplearn.genetic import SymbolicTransformer
        est = SymbolicTransformer(**{**SETTINGS, "function_set": list(SETTINGS["function_set"])}, random_state=seed)
    Xtr, ytr, Xte, yte = data
    t0 = time.perf_counter()
    est.fit(Xtr, ytr)
    t = time.perf_counter() - t0
    r2 = ridge_r2(Xtr, ytr, Xte, yte, est.transform(Xtr), est.transform(Xte))
    return dict(lib=lib, seed=seed, r2=r2, fit_s=t)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", default="0-11")
    ap.add_argument("--threads", type=int, default=0, help="TensorFlow intra/inter-op threads (0: TF's default)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--tfevo-kw", default="{}", help="JSON of extra tfevo arguments (a diagnostic variant)")
    ap.add_argument("--libs", default="tfevo,gplearn")
    a = ap.parse_args()
    lo, hi = (int(v) for v in a.seeds.split("-"))
    if a.threads:
        import tensorflow as tf
        tf.config.threading.set_intra_op_parallelism_threads(a.threads)
        tf.config.threading.set_inter_op_parallelism_threads(a.threads)
    print(f"load {os.getloadavg()}  settings {SETTINGS}  threads {a.threads or 'default'}", flush=True)
    warm = split(999)
    kw = json.loads(a.tfevo_kw)
    kw = {k: tuple(v) if isinstance(v, list) else v for k, v in kw.items()}
    libs = a.libs.split(",")
    run("tfevo", 999, warm, kw)  # traces the generation step once; not counted
    rows = []
    out = open(a.out, "a") if a.out else None
    for seed in range(lo, hi + 1):
        data = split(seed)
        base = ridge_r2(*data)
        for lib in libs:  # interleaved: both see the same load
            r = run(lib, seed, data, kw)
            r.update(ridge_only=base, load=os.getloadavg()[0], **({"tfevo_kw": a.tfevo_kw} if kw and lib == "tfevo" else {}))
            rows.append(r)
            print(json.dumps(r), flush=True)
            if out:
                out.write(json.dumps(r) + "\n")
                out.flush()
    if len(libs) < 2:
        r2 = np.array([r["r2"] for r in rows])
        print(f"{libs[0]} {a.tfevo_kw}: median R^2 {np.median(r2):.4f} mean {r2.mean():.4f}")
        return
    from scipy.stats import wilcoxon

    tf_r2 = np.array([r["r2"] for r in rows if r["lib"] == "tfevo"])
    gl_r2 = np.array([r["r2"] for r in rows if r["lib"] == "gplearn"])
    tf_t = np.array([r["fit_s"] for r in rows if r["lib"] == "tfevo"])
    gl_t = np.array([r["fit_s"] for r in rows if r["lib"] == "gplearn"])
    base = np.array([r["ridge_only"] for r in rows if r["lib"] == "tfevo"])
    print(f"seeds {lo}-{hi}: ridge only median R^2 {np.median(base):.4f}")
    print(f"tfevo   median R^2 {np.median(tf_r2):.4f} mean {tf_r2.mean():.4f}  median fit {np.median(tf_t):.2f} s")
    print(f"gplearn median R^2 {np.median(gl_r2):.4f} mean {gl_r2.mean():.4f}  median fit {np.median(gl_t):.2f} s")
    d = tf_r2 - gl_r2
    print(f"paired diff tfevo-gplearn: median {np.median(d):+.4f}, tfevo better on {int((d > 0).sum())}/{len(d)}, "
          f"Wilcoxon p={wilcoxon(d).pvalue:.3g}")
    print(f"fit time ratio gplearn/tfevo: median of per-seed ratios {np.median(gl_t / tf_t):.2f}x, "
          f"ratio of medians {np.median(gl_t) / np.median(tf_t):.2f}x")


if __name__ == "__main__":
    main()
