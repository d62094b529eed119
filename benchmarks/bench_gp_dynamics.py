"""Per-generation dynamics of tfevo and gplearn on the quality harness's settings.

  python benchmarks/bench_gp_dynamics.py --lib tfevo|gplearn --problems 4,5,10 --seeds 0-19 --out FILE.jsonl
  python benchmarks/bench_gp_dynamics.py --lib tfevo|gplearn --data iris_vv,linnerud_waist --seeds 0-4 \
      [--tfevo-set '{"elite": 0}'] --out FILE.jsonl

One JSON line per run: per generation the median program length, the best raw
(training) MSE, the number of distinct programs and (tfevo) the children
rejected for exceeding the node cap.  Settings: those of bench_gp_quality.py.

With ``--data`` (classification sets of bench_gp_classify.py, regression
sets of bench_gp_quality.py, each harness's settings and split by seed): the
estimators' own ``run_details_`` per generation (mean length of the
population, length and raw fitness of its best program), the length of the
returned program, its test score and (tfevo) the rejected children.
"""

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_gp_quality as q  # noqa: E402


def run_tfevo(k, seed, pop, gens):
    import tensorflow as tf

    from tfevo.gp.evaluate import mse

    x, y, _, _ = q.nguyen_data(k, seed)
    est = q.make_tfevo(pop, gens, q.NGUYEN_FUNCS, None, seed)
    cfg = est._config(x.shape[1], 1)
    gp = est._engine(cfg)
    xt, yt = tf.constant(x, tf.float32), tf.constant(y, tf.float32)
    out = []
    for _ in range(gens):
        trees = gp.ask()
        loss = mse(trees, xt, yt, gp.eval_functions)
        rej0 = int(gp.rejected.numpy())
        sizes = trees.sizes.numpy()[:, 0]
        t, v = trees.types.numpy(), trees.values.numpy()
        uniq = len({(t[i, :n].tobytes(), v[i, :n].tobytes()) for i, n in enumerate(sizes)})
        gp.tell(trees, -loss)
        out.append(dict(median_len=float(np.median(sizes)), best=float(np.min(loss.numpy())),
                        unique=uniq, rejected=int(gp.rejected.numpy()) - rej0))
    return out


def _stats_gplearn(progs):
    return dict(median_len=float(np.median([p.length_ for p in progs])),
                best=float(min(p.raw_fitness_ for p in progs)),
                unique=len({str(p) for p in progs}), rejected=0)


def run_gplearn(k, seed, pop, gens):
    import gplearn.genetic as gg

    x, y, _, _ = q.nguyen_data(k, seed)
    est = q.make_gplearn(pop, gens, q.NGUYEN_FUNCS, None, seed)
    out = []
    orig = gg._parallel_evolve

    def spy(n_programs, parents, *a, **kw):  # parents: the previous generation, fitness known
        if parents is not None:
            out.append(_stats_gplearn(parents))
        return orig(n_programs, parents, *a, **kw)

    gg._parallel_evolve = spy
    try:
        est.fit(x, y)
    finally:
        gg._parallel_evolve = orig
    out.append(_stats_gplearn(est._programs[-1]))
    return out


def run_data(lib, name, seed, pop, gens, overrides):
    import bench_gp_classify as c

    if name in c.DATASETS:
        x, xt, y, yt = c.dataset(name, seed)
        est = c.make("tfevo_ce" if lib == "tfevo" else "gplearn", pop, gens, seed, overrides)
    else:
        x, xt, y, yt = q.dataset(name, seed)
        make = q.make_tfevo if lib == "tfevo" else q.make_gplearn
        est = make(pop, gens, ("add", "sub", "mul", "div"), (-1.0, 1.0), seed, overrides)
    est.fit(x, y)
    rd = est.run_details_
    if lib == "gplearn":
        length = int(est._program.length_)
    else:
        length = int(np.asarray(est.program_.sizes)[0, 0])
    with np.errstate(all="ignore"):
        if name in c.DATASETS:
            from sklearn.metrics import roc_auc_score

            score = float(roc_auc_score(yt, np.nan_to_num(np.asarray(est.predict_proba(xt))[:, 1], nan=0.5)))
        else:
            score = float(est.score(xt, yt))
    rec = dict(lib=lib, problem=name, seed=seed, length=length, test_score=score,
               mean_len=[float(v) for v in rd["average_length"]], best_len=[int(v) for v in rd["best_length"]],
               best_fit=[float(v) for v in rd["best_fitness"]])
    if lib == "tfevo":
        rec["rejected"] = int(est.engine_.rejected.numpy())
        rec["tfevo_set"] = overrides
    return rec


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", choices=("tfevo", "gplearn"), required=True)
    ap.add_argument("--problems", default="4,5,10")
    ap.add_argument("--seeds", default="0-19")
    ap.add_argument("--pop", type=int, default=1000)
    ap.add_argument("--gens", type=int, default=50)
    ap.add_argument("--data", default="", help="data sets instead of Nguyen problems")
    ap.add_argument("--tfevo-set", default="", help="JSON dict of estimator arguments for tfevo runs")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    if a.data:
        overrides = json.loads(a.tfevo_set) if a.tfevo_set else {}
        for name in [d for d in a.data.split(",") if d]:
            for s in q._range(a.seeds):
                rec = run_data(a.lib, name, s, a.pop, a.gens, overrides)
                with open(a.out, "a") as f:
                    f.write(json.dumps(rec) + "\n")
                print(a.lib, name, s, "len", rec["length"], "mean len last", round(rec["mean_len"][-1], 1),
                      "score", round(rec["test_score"], 4), "rejected", rec.get("rejected"), flush=True)
        return
    run = run_tfevo if a.lib == "tfevo" else run_gplearn
    for k in q._range(a.problems):
        for s in q._range(a.seeds):
            gens = run(k, s, a.pop, a.gens)
            with open(a.out, "a") as f:
                f.write(json.dumps(dict(lib=a.lib, problem=k, seed=s, gens=gens)) + "\n")
            print(a.lib, k, s, gens[-1], flush=True)


if __name__ == "__main__":
    main()
