"""SeedGA: the seed chain rebuilds the parameters the run holds, also across a fresh process.

Runs ``--gens`` generations of SeedGA on a shifted sphere (D = ``--dims``,
popsize 32, truncation 6, 3 elite candidates, sigma 0.01) and checks:

1. at every 25th generation, the cached decode of the whole population equals
   its full reconstruction from the seed lists (``_rebuild``), bit for bit;
2. a checkpoint written at generation ``--gens // 2`` and restored in a fresh
   Python process (empty parent cache) continues to the same final population,
   fitness history and decoded parameters as the uninterrupted run;
3. the elite (row 0) after each tell is a row carried unmodified, so its
   parameters equal a row of the previous population, and the best mean
   fitness never goes down between generations.

    PYTHONPATH=$PWD python benchmarks/audit_seed_ga_chain.py [--gens 300 --dims 5000]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys

import numpy as np
import tensorflow as tf

from tfevo.strategies.seed_ga import SeedGA


def make(a):
    return SeedGA(num_dims=a.dims, popsize=32, truncation=6, sigma=0.01, num_elite_candidates=3,
                  max_generations=a.gens + 5, seed=11)


def fit(p):
    return -tf.reduce_sum((p - 0.3) ** 2, axis=1)


def run(a, ga, start, stop, check=True):
    hist, rebuilt_ok, elite_ok = [], True, True
    prev = None
    for g in range(start, stop):
        pop = ga.ask()
        params = ga.decode(pop)
        if check and g % 25 == 0:
            full = tf.map_fn(ga._rebuild, pop, fn_output_signature=ga.dtype).numpy()
            rebuilt_ok &= bool(np.array_equal(full, params.numpy()))
        if check and prev is not None:  # row 0 is the elite: a copy of a row of the previous population
            elite_ok &= bool((np.abs(prev - params.numpy()[0]).max(axis=1) == 0).any())
        f = fit(params)
        ga.tell(pop, f)
        prev = params.numpy()
        hist.append(f.numpy())
    return np.array(hist), rebuilt_ok, elite_ok


def digest(*arrays):
    h = hashlib.sha256()
    for x in arrays:
        h.update(np.ascontiguousarray(x).tobytes())
    return h.hexdigest()[:16]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gens", type=int, default=300)
    ap.add_argument("--dims", type=int, default=5000)
    ap.add_argument("--resume", default="")  # internal: checkpoint path for the fresh process
    a = ap.parse_args()
    half = a.gens // 2
    if a.resume:
        ga = make(a)
        tf.train.Checkpoint(ga=ga).restore(a.resume).assert_consumed()
        hist, _, _ = run(a, ga, half, a.gens, check=False)
        pop = ga.ask().numpy()
        print(json.dumps(dict(hist=digest(hist), pop=digest(pop), params=digest(ga.decode(pop).numpy()))))
        return
    ga = make(a)
    hist1, rebuilt1, elite1 = run(a, ga, 0, half)
    path = tf.train.Checkpoint(ga=ga).save("/tmp/seed_ga_chain_audit/ck")
    hist2, rebuilt2, elite2 = run(a, ga, half, a.gens)
    pop = ga.ask().numpy()
    final = ga.decode(pop).numpy()
    full = tf.map_fn(ga._rebuild, tf.constant(pop), fn_output_signature=ga.dtype).numpy()
    out = subprocess.run([sys.executable, __file__, "--gens", str(a.gens), "--dims", str(a.dims), "--resume", path],
                         capture_output=True, text=True, check=True)
    fresh = json.loads(out.stdout.strip().splitlines()[-1])
    mine = dict(hist=digest(hist2), pop=digest(pop), params=digest(final))
    best = np.maximum.accumulate(np.concatenate([hist1, hist2]).max(axis=1))
    print(json.dumps(dict(gens=a.gens, dims=a.dims, longest_chain=int(pop[:, 0].max()),
                          cached_equals_rebuilt_every_25=rebuilt1 and rebuilt2,
                          final_cached_equals_rebuilt=bool(np.array_equal(final, full)),
                          elite_is_a_previous_row=elite1 and elite2,
                          fresh_process_resume_identical=fresh == mine, digests=mine, fresh=fresh,
                          best_first=float(hist1[0].max()), best_last=float(best[-1]))))


if __name__ == "__main__":
    main()
