"""Shared pieces of the CMA-ES run experiments (cma_first_run.py, cma_one_run.py,
cma_restart_run.py): resumable JSON-lines output, and one run of a tfevo or pycma
strategy on a BBOB function until it succeeds at 1e-8 or stops."""
import json
import os

import numpy as np

TARGET = 1e-8


def pending(out, side, n):
    """The output file (appending) and the seeds 0..n-1 of ``side`` not yet in it."""
    done = set()
    if os.path.exists(out):
        done = {(r["side"], r["seed"]) for r in map(json.loads, open(out)) if "side" in r}
    return open(out, "a"), [s for s in range(n) if (side, s) not in done]


def gap_of(p):
    """``x [B, D] -> f - f_opt [B]`` (NumPy) for a tfevo BBOB problem."""
    def gap(x):
        f, _, _ = p._cf(x, p._consts, p._f_opt_t)
        return f.numpy() - p.f_opt
    return gap


def tfevo_until(es, gap, stopped, maxiter=None):
    """Asks and tells ``es`` (fitness ``-gap``) until the best gap reaches the target
    (stop ``["ftarget"]``), ``stopped(es)`` returns reasons, or ``maxiter`` iterations."""
    import tensorflow as tf

    best, it = np.inf, 0
    while True:
        x = es.ask()
        g = gap(x)
        best = min(best, float(g.min()))
        it += 1
        if best <= TARGET:
            return {"best": best, "iters": it, "stop": ["ftarget"]}
        es.tell(x, tf.constant(-g, tf.float64))
        reasons = stopped(es)
        if reasons:
            return {"best": best, "iters": it, "stop": reasons}
        if maxiter is not None and it > maxiter:
            return {"best": best, "iters": it, "stop": ["maxiter"]}


def pycma_until_stop(es, fid, dim, inst, f_opt):
    """Runs ``cma.CMAEvolutionStrategy`` ``es`` on COCO's own function until ``es.stop()``."""
    import cocoex

    prob = cocoex.BareProblem("bbob", fid, dim, inst)
    while not es.stop():
        X = es.ask()
        es.tell(X, [float(prob(np.asarray(x))) - f_opt for x in X])
    return {"best": float(es.best.f), "iters": es.countiter, "stop": sorted(es.stop())}
