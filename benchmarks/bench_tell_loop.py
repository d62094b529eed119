"""ask+tell loop time of a few strategies (median of 7 x 100 generations after 30 warm-up ones).

Usage (compare two checkouts by running it with each on PYTHONPATH, alternating)::

    PYTHONPATH=<checkout> python benchmarks/bench_tell_loop.py LABEL
"""
import time, numpy as np, warnings, sys
import tensorflow as tf
import tfevo.strategies as S
out=[]
for name, make in [("OpenES", lambda: S.OpenES(1000, 64, seed=0)), ("SNES", lambda: S.SNES(1000, seed=0)), ("XNES", lambda: S.XNES(20, seed=0)), ("GA", lambda: S.GaussianGA(1000, 64, seed=0))]:
    a = make(); f = tf.constant(np.random.default_rng(0).standard_normal(a.popsize).astype(np.float32))
    for _ in range(30): a.tell(a.ask(), f)
    ts=[]
    for r in range(7):
        t=time.perf_counter()
        for _ in range(100): a.tell(a.ask(), f)
        ts.append((time.perf_counter()-t)/100)
    out.append(f"{name} {np.median(ts)*1e6:.0f}")
print(sys.argv[1], " | ".join(out))
