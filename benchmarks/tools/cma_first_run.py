"""The first run alone (popsize default, sigma0 2, x0 uniform in [-4, 4]^D) on one BBOB function:
tfevo (IPOP's first run as bench_cma_bbob.py builds it, stopped at its first restart) vs pycma
(CMAEvolutionStrategy until stop()).

    TREE=$PWD PYTHONPATH=$PWD python benchmarks/tools/cma_first_run.py FID DIM RUNS {pycma|tfevo} OUT.jsonl

Run r: COCO instance 1 + r % 5, seed 7000000 + 1000 FID + r (x0 from it, the same on both sides).
"""
import json, sys, os, time, warnings
sys.path.insert(0, os.environ.get("TREE", "."))
sys.path.insert(0, os.path.join(os.environ.get("TREE", "."), "benchmarks"))
import numpy as np
warnings.simplefilter("ignore")
fid, dim, n, side, out = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
import bench_cma_bbob as B
from tfevo.problems import bbob
done = set()
if os.path.exists(out):
    done = {(json.loads(l)["side"], json.loads(l)["seed"]) for l in open(out)}
fh = open(out, "a")
for s in range(n):
    if (side, s) in done:
        continue
    inst = 1 + s % 5
    seed = 7000000 + 1000 * fid + s
    p = bbob.make(fid, dim, instance=inst)
    t0 = time.process_time()
    if side == "pycma":
        import cma, cocoex
        prob = cocoex.BareProblem("bbob", fid, dim, inst)
        x0 = -4.0 + 8.0 * np.random.default_rng(seed).random(dim)
        es = cma.CMAEvolutionStrategy(x0, 2.0, {"verbose": -9, "seed": seed, "ftarget": 1e-8})
        while not es.stop():
            X = es.ask()
            es.tell(X, [float(prob(np.asarray(x))) - p.f_opt for x in X])
        r = {"best": float(es.best.f), "iters": es.countiter, "stop": sorted(es.stop())}
    else:
        import tensorflow as tf
        es = B._strategy("ipop", dim, seed)
        best, it = np.inf, 0
        while True:
            x = es.ask()
            f, _, _ = p._cf(x, p._consts, p._f_opt_t)
            g = f.numpy() - p.f_opt
            best = min(best, float(g.min())); it += 1
            if best <= 1e-8:
                stop = ["ftarget"]; break
            es.tell(x, tf.constant(-g, tf.float64))
            if es.history:
                stop = es.history[0][2]; break
        r = {"best": best, "iters": it, "stop": stop}
    r.update(side=side, seed=s, inst=inst, cpu=round(time.process_time() - t0, 2))
    fh.write(json.dumps(r) + "\n"); fh.flush()
