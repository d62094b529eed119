"""IPOP's second run (popsize 21 at n = 10) on f7 10-D: after a one-iteration first run (constant fitness -> tolfun)
or after a real first run on f7. Success of the second run at 1e-8.

    TREE=$PWD PYTHONPATH=$PWD python benchmarks/tools/cma_restart_run.py {short|real} RUNS OUT.jsonl

Run r: COCO instance 1 + r % 5, seed 5000000 + r (the harness's IPOP object and its restart draws).
"""
import json, sys, os, warnings
sys.path.insert(0, os.environ["TREE"]); sys.path.insert(0, os.path.join(os.environ["TREE"], "benchmarks"))
import numpy as np, tensorflow as tf
import bench_cma_bbob as B
from cma_runs import gap_of, tfevo_until
from tfevo.problems import bbob
variant, n, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
fh = open(out, "a")
for s in range(n):
    inst = 1 + s % 5
    p = bbob.make(7, 10, instance=inst)
    es = B._strategy("ipop", 10, 5000000 + s)
    fit = gap_of(p)
    # first run
    while not es.history:
        x = es.ask()
        g = np.zeros(es.popsize) if variant == "short" else fit(x)
        es.tell(x, tf.constant(-g, tf.float64))
    first_iters = int(es.inner.restart_generation.numpy())
    r = tfevo_until(es, fit, lambda es: len(es.history) > 1 and es.history[1][2])
    best, it, stop = r["best"], r["iters"], r["stop"]
    fh.write(json.dumps({"variant": variant, "seed": s, "inst": inst, "popsize": es.popsize if stop == ["ftarget"] else None,
                         "best": best, "iters": it, "stop": stop, "first_iters": first_iters}) + "\n"); fh.flush()
