"""SeedGA's generation limit: what the ask/tell after ``max_generations`` tells does.

Ten seeds (0-9, fixed), popsize 16, truncation 4, 2 elite candidates, sigma 0.3, max_generations 2,
a shifted sphere: three ask/tell rounds are attempted.  Prints, per seed, either where the run was
refused, or the genome width L, the largest count column and how many rows count a seed that lies
past the genome, and whether ``decode`` of that population still works.

    PYTHONPATH=$PWD python benchmarks/audit_seed_ga_limit.py
"""

import numpy as np
import tensorflow as tf

import tfevo
from tfevo.strategies.seed_ga import SeedGA

print("tfevo from", tfevo.__file__)
for seed in range(10):
    ga = SeedGA(num_dims=10, popsize=16, truncation=4, num_elite_candidates=2, sigma=0.3, max_generations=2, seed=seed)
    f = lambda g: -tf.reduce_sum((ga.decode(g) - 1.0) ** 2, axis=1)  # noqa: E731
    step = "ask"
    try:
        for t in range(3):
            step = "ask"
            g = ga.ask()
            step = "tell"
            ga.tell(g, f(g))
    except Exception as e:  # noqa: BLE001 - the point is to see what is raised
        print(seed, f"refused at {step} {t + 1}:", type(e).__name__)
        continue
    pop = ga.population.numpy()
    bad = pop[:, 0] >= pop.shape[1]
    msg = "decode ok"
    try:
        ga.decode(ga.population)
    except Exception as e:  # noqa: BLE001
        msg = "decode: " + type(e).__name__
    print(seed, "L", pop.shape[1], "max count", pop[:, 0].max(), "rows counting a seed past the genome",
          int(bad.sum()), msg)
