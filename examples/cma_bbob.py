"""CMA-ES with BIPOP restarts on the 24 BBOB functions (10-D), vectorized in TensorFlow."""
from tfevo.problems import bbob
from tfevo.strategies import CMAES

for fid in range(1, 25):
    f = bbob.make(fid, dim=10, seed=1)
    es = CMAES(num_dims=10, sigma=2.0, seed=0)
    for _ in range(1000):
        x = es.ask()
        es.tell(x, f.fitness(x))                      # fitness = -(f(x) - f_opt)
    print(f"f{fid:<2} best f - f_opt = {-float(es.best[1]):.3e}")
