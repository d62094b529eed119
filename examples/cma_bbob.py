"""CMA-ES with BIPOP restarts on the 24 BBOB functions (10-D), vectorized in TensorFlow."""
from tfevo.problems import bbob
from tfevo.strategies import CMAES
from _toy import budget  # TFEVO_EXAMPLE_TOY=1: a few seconds, for the test suite

for fid in budget(range(1, 25), range(1, 3)):
    f = bbob.make(fid, dim=10, seed=1)
    es = CMAES(num_dims=10, sigma=2.0, seed=0)
    for _ in range(budget(1000, 20)):
        x = es.ask()
        es.tell(x, f.fitness(x))                      # fitness = -(f(x) - f_opt)
    print(f"f{fid:<2} best f - f_opt = {-float(es.best[1]):.3e}")
