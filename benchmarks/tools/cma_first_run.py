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
from cma_runs import gap_of, pending, pycma_until_stop, tfevo_until
fh, seeds = pending(out, side, n)
for s in seeds:
    inst = 1 + s % 5
    seed = 7000000 + 1000 * fid + s
    p = bbob.make(fid, dim, instance=inst)
    t0 = time.process_time()
    if side == "pycma":
        import cma
        x0 = -4.0 + 8.0 * np.random.default_rng(seed).random(dim)
        es = cma.CMAEvolutionStrategy(x0, 2.0, {"verbose": -9, "seed": seed, "ftarget": 1e-8})
        r = pycma_until_stop(es, fid, dim, inst, p.f_opt)
    else:
        r = tfevo_until(B._strategy("ipop", dim, seed), gap_of(p), lambda es: es.history and es.history[0][2])
    r.update(side=side, seed=s, inst=inst, cpu=round(time.process_time() - t0, 2))
    fh.write(json.dumps(r) + "\n"); fh.flush()
