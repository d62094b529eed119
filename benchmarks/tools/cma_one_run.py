"""One CMA-ES run (given popsize, sigma0 2, x0 uniform in [-4, 4]^D, until its own stop) on a BBOB function, many seeds:
tfevo CMAES vs pycma CMAEvolutionStrategy. Success: f - f_opt <= 1e-8 within the run.

    PYTHONPATH=$PWD python benchmarks/tools/cma_one_run.py FID DIM POPSIZE RUNS {pycma|tfevo} OUT.jsonl

Run r: COCO instance 1 + r % 5, seed 9000000 + 1000 FID + r (x0 from it, the same on both sides).
"""
import json, sys, os, time, warnings
import numpy as np
warnings.simplefilter("ignore")
fid, dim, lam, n, side, out = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6]
from tfevo.problems import bbob
from cma_runs import gap_of, pending, pycma_until_stop, tfevo_until
fh, seeds = pending(out, side, n)
es = None
for s in seeds:
    inst = 1 + s % 5
    seed = 9000000 + 1000 * fid + s
    p = bbob.make(fid, dim, instance=inst)
    x0 = -4.0 + 8.0 * np.random.default_rng(seed).random(dim)
    t0 = time.process_time()
    if side == "pycma":
        import cma
        e = cma.CMAEvolutionStrategy(x0, 2.0, {"verbose": -9, "seed": seed, "ftarget": 1e-8, "popsize": lam})
        r = pycma_until_stop(e, fid, dim, inst, p.f_opt)
    else:
        from tfevo.strategies import CMAES
        if es is None:
            es = CMAES(dim, popsize=lam, sigma=2.0, init_params=x0, seed=seed)
        es.seeds.seed.assign(seed)
        es.reset(mean=x0, sigma=2.0)
        r = tfevo_until(es, gap_of(p), lambda es: es.stop_reasons, maxiter=5000)
    r.update(side=side, seed=s, inst=inst, cpu=round(time.process_time() - t0, 2))
    fh.write(json.dumps(r) + "\n"); fh.flush()
