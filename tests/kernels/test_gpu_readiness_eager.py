"""The GPU path, checked where the graph walk cannot see: ops run eagerly.

A C++ kernel called eagerly (outside any traced function) leaves no graph for
``tfevo.kernels.readiness`` to walk.  Here every loaded kernel function is
wrapped so that each call is recorded; with the dispatch forced to "GPU
present" (``tfevo.kernels.assume_gpu``) whole generations of every family,
eager and traced, must call none of them.  The last test shows the recorder
catching a kernel that runs.
"""

import numpy as np
import pytest
import tensorflow as tf

from tfevo import kernels, ops, registry
from tfevo.kernels import dispatch
from _registry_algorithms import make_algorithm, one_generation  # tests/ is on sys.path

registry.load_all()


class _Recorder:
    """Stands in for ``tfevo.ops.op_module``: the same modules, each kernel function wrapped to log its calls."""

    def __init__(self, real):
        self.real, self.calls, self._wrapped = real, [], {}

    def __call__(self, name, symbol):
        mod = self.real(name, symbol)
        if mod is None:
            return None
        if name not in self._wrapped:
            self._wrapped[name] = _Module(mod, self.calls)
        return self._wrapped[name]


class _Module:
    def __init__(self, mod, calls):
        self._mod, self._calls = mod, calls

    def __getattr__(self, attr):
        fn = getattr(self._mod, attr)
        if not (attr.startswith(("tfevo_", "gp_")) and callable(fn)):
            return fn

        def recorded(*args, **kwargs):
            self._calls.append(attr)
            return fn(*args, **kwargs)

        return recorded


@pytest.fixture
def recorder(monkeypatch):
    """Kernel calls from here on are logged (the dispatch's cache of functions is dropped with the loader)."""
    from tfevo.gp import algorithm as gp_mod
    from tfevo.neat import neat as neat_mod

    rec = _Recorder(ops.op_module)
    monkeypatch.setattr(ops, "op_module", rec)
    dispatch._FUNCTIONS.clear()
    neat_mod._TELL_CACHE.clear()  # a tell or GP step traced before would keep its earlier decision
    gp_mod._STEPS.clear()
    yield rec
    neat_mod._TELL_CACHE.clear()
    gp_mod._STEPS.clear()
    dispatch._FUNCTIONS.clear()


@pytest.mark.parametrize("name", sorted(registry.names("strategy")))
def test_no_kernel_runs_in_a_generation_with_a_gpu(name, recorder):
    with kernels.assume_gpu():
        algo = make_algorithm(name)
        for _ in range(2):  # the first generation traces; the second runs what was traced
            one_generation(algo, name)
    assert recorder.calls == [], f"{name}: C++ kernels ran although a GPU is assumed: {sorted(set(recorder.calls))}"


def test_no_kernel_runs_in_eager_forwards_and_evaluations_with_a_gpu(recorder):
    from tfevo.gp import GPConfig, GeneticProgramming, Trees, evaluate
    from tfevo.nn import Policy, PopulationModel
    from tfevo.nn.policy import mlp, nature_dqn
    from tfevo.envs import make
    from tfevo.rollout.ingraph import InGraphEvaluator

    with kernels.assume_gpu():
        for t, obs in ((mlp((4,), 2, hidden=(8,)), (4,)), (nature_dqn(4), (84, 84, 4))):
            pm = PopulationModel(t)
            pm(pm.init_params(2, seed=0), tf.zeros([2, 1, *obs]))
        trees = GeneticProgramming(GPConfig(popsize=8, max_len=16, num_vars=2), seed=0).ask()
        evaluate(Trees(*trees), tf.zeros([5, 2]))
        pol = Policy(PopulationModel(mlp((4,), 2, hidden=(8,))), make("CartPole-v1", 1).action_spec)
        InGraphEvaluator("CartPole-v1", pol, max_steps=10, jit_compile=False).evaluate(pol.init_params(4, seed=0))
    assert recorder.calls == [], f"C++ kernels ran although a GPU is assumed: {sorted(set(recorder.calls))}"


def test_the_recorder_sees_a_kernel_that_runs(recorder):
    """Without the assumed GPU the same calls do reach the kernels (when they are built)."""
    if not kernels.built("TfevoGaussianPopulation"):
        pytest.skip("the C++ kernels are not built here")
    algo = make_algorithm("openai_es")
    algo.tell(algo.ask(), np.zeros([8], np.float32))
    algo.ask()
    assert "tfevo_gaussian_population" in recorder.calls


def test_no_kernel_runs_in_fitness_evaluations_and_archives_with_a_gpu(recorder):
    """The fitness paths a run takes eagerly (GP mse and a SymbolicRegressor fit, a NEAT problem)
    and MAP-Elites on a CVT archive with Iso+LineDD and CMA-ME emitters call no kernel either."""
    from tfevo.gp import GPConfig, GeneticProgramming, SymbolicRegressor, Trees, mse
    from tfevo.neat import NEAT, XOR
    from tfevo.neat import problems
    from tfevo.qd import CVTArchive, ESEmitter, IsoLineEmitter, MAPElites

    x = np.random.default_rng(0).uniform(-1, 1, (20, 2)).astype(np.float32)
    y = x[:, 0] * x[:, 1]
    problems._COMPILED.clear()
    try:
        with kernels.assume_gpu():
            trees = GeneticProgramming(GPConfig(popsize=8, max_len=16, num_vars=2), seed=0).ask()
            mse(Trees(*trees), x, y)
            SymbolicRegressor(population_size=16, generations=2, random_state=0).fit(x, y)
            prob = XOR()
            cfg = prob.config(pop_size=8, max_nodes=8, max_conns=12)
            prob.evaluate(NEAT(cfg, seed=0).ask(), cfg)
            cent = np.random.default_rng(0).uniform(size=(64, 2)).astype(np.float32)
            for em in (IsoLineEmitter(4, 8, bounds=(0, 1)), ESEmitter(4, 4, num_emitters=2, seed=0)):
                me = MAPElites(CVTArchive(4, 64, [(0, 1), (0, 1)], centroids=cent, lookup="buckets"), [em],
                               init_bounds=(0, 1), seed=0)
                for _ in range(2):
                    one_generation(me, "map_elites")
    finally:
        problems._COMPILED.clear()
    assert recorder.calls == [], f"C++ kernels ran although a GPU is assumed: {sorted(set(recorder.calls))}"
