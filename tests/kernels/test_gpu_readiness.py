"""The GPU path, checked on the CPU: every hot graph of every family is GPU-ready.

With the kernel dispatch forced to "GPU present" (``tfevo.kernels.assume_gpu``)
each family's hot functions are traced (and run once on the CPU); every op of
every graph they ran, and of the graphs' function libraries, must have a GPU
kernel in TensorFlow's registry or sit inside an XLA-compiled function
(``tfevo.kernels.readiness``).  The last tests show the check failing when a
CPU-only op sits in a hot path.
"""

import numpy as np
import pytest
import tensorflow as tf

from tfevo import kernels, registry
from tfevo.kernels import readiness
from _registry_algorithms import fitness_of, make_algorithm, one_generation  # tests/ is on sys.path

registry.load_all()

#: ops allowed outside XLA without a GPU kernel, by name: host simulators run
#: by a py_function step (none of the graphs below has one; listed for the
#: families that wrap a numpy environment in a graph)
HOST_SIMULATOR_OPS = ("PyFunc", "PyFuncStateless", "EagerPyFunc")


def _check_functions(names):
    bad = readiness.unready_ops_in_functions(names, allowed=HOST_SIMULATOR_OPS)
    assert names, "nothing was traced"
    assert not bad, f"ops without a GPU kernel outside XLA: {bad}"


def _check_concrete(concrete):
    bad = readiness.unready_ops(concrete, allowed=HOST_SIMULATOR_OPS)
    assert not bad, f"ops without a GPU kernel outside XLA: {bad}"


def _clear_step_caches():
    """NEAT's tells and GP's generation steps are shared by instances of one config: drop them, so
    a step is traced here, under the assumed GPU (an earlier test may have traced the same config)."""
    from tfevo.gp import algorithm as gp_mod
    from tfevo.neat import neat as neat_mod

    neat_mod._TELL_CACHE.clear()
    gp_mod._STEPS.clear()


def _make(name):
    _clear_step_caches()
    return make_algorithm(name)


@pytest.fixture(autouse=True)
def _fresh_neat_cache():
    yield
    _clear_step_caches()  # later tests trace their own steps (with the kernels)


@pytest.mark.parametrize("name", sorted(registry.names("strategy")))
def test_ask_tell_of_every_registered_algorithm(name):
    with kernels.assume_gpu(), readiness.record_functions() as names:
        algo = _make(name)
        one_generation(algo, name)  # the first generation traces every hot function
    _check_functions(names)


def _templates():
    import keras

    from tfevo.nn.policy import linear, mlp, nature_dqn

    L = keras.layers
    # the ops of dilated, grouped and transposed convolutions and of strided, dilated depthwise ones
    conv_forms = keras.Sequential([
        keras.Input((9, 4)), L.Conv1D(4, 3, groups=2, dilation_rate=2),
        L.Conv1DTranspose(3, 3, strides=2, data_format="channels_first"),
        L.SeparableConv1D(4, 2, strides=2, dilation_rate=2, padding="same"), L.Flatten(), L.Dense(2)])
    return {"mlp": mlp((4,), 2, hidden=(8,)), "linear": linear((3,), 2), "nature_dqn": nature_dqn(4),
            "conv_forms": conv_forms, "sequence": _sequence_template()}


def _sequence_template():
    """Bidirectional (go_backwards inside), TimeDistributed, attention with a causal mask."""
    import keras

    L = keras.layers
    x = keras.Input((3, 2))
    h = L.TimeDistributed(L.Dense(2))(x)
    h = L.MultiHeadAttention(1, 2)(h, h, use_causal_mask=True)
    return keras.Model(x, L.Dense(2)(L.Bidirectional(L.SimpleRNN(2))(h)))


@pytest.mark.parametrize("template", ["mlp", "linear", "nature_dqn", "conv_forms", "sequence"])
def test_population_model_forward(template):
    from tfevo.nn import PopulationModel

    t = _templates()[template]
    with kernels.assume_gpu():
        pm = PopulationModel(t)
        P, D = 4, pm.num_params
        x = tf.TensorSpec([None, 1, *pm.input_shape], tf.float32)
        _check_concrete(pm._fn("flat").get_concrete_function(tf.TensorSpec([P, D], tf.float32), x))
        _check_concrete(pm._fn("flat_idx").get_concrete_function(
            tf.TensorSpec([P, D], tf.float32), x, tf.TensorSpec([None], tf.int32)))


def test_neat_forward():
    from tfevo.envs import make
    from tfevo.neat import NEAT, XOR, NEATPolicy

    env = make("CartPole-v1", 1)
    cfg = XOR().config(pop_size=8, max_nodes=10, max_conns=16)
    cfg = cfg.replace(num_inputs=4, num_outputs=2) if hasattr(cfg, "replace") else type(cfg)(
        num_inputs=4, num_outputs=2, pop_size=8, max_nodes=10, max_conns=16)
    pop = NEAT(cfg, seed=0).ask()
    with kernels.assume_gpu(), readiness.record_functions() as names:
        pol = NEATPolicy(cfg, env.action_spec)
        fwd = tf.function(lambda n, c, o: pol.forward((n, c), o), autograph=False)
        fwd(pop.nodes, pop.conns, tf.zeros([8, 1, 4]))
    _check_functions(names)


def test_gp_evaluate():
    from tfevo.gp import GPConfig, GeneticProgramming, Trees, evaluate

    trees = GeneticProgramming(GPConfig(popsize=16, max_len=16, num_vars=2), seed=0).ask()
    with kernels.assume_gpu(), readiness.record_functions() as names:
        f = tf.function(lambda t, v, s, x: evaluate(Trees(t, v, s), x), autograph=False)
        f(*trees, tf.zeros([5, 2]))
    _check_functions(names)


def test_gp_regression_fitness():
    """The symbolic-regression fitness (``mse``: the fused GpMse kernel's reference path)."""
    from tfevo.gp import GPConfig, GeneticProgramming, Trees, mse

    trees = GeneticProgramming(GPConfig(popsize=16, max_len=16, num_vars=2), seed=0).ask()
    with kernels.assume_gpu(), readiness.record_functions() as names:
        f = tf.function(lambda t, v, s, x, y: mse(Trees(t, v, s), x, y), autograph=False)
        f(*trees, tf.zeros([5, 2]), tf.zeros([5]))
    _check_functions(names)


def test_gp_policy_forward():
    """GP trees acting as a policy (what the rollouts of the gp_tree family run per step)."""
    from tfevo.gp import GPConfig, GeneticProgramming, GPPolicy

    trees = GeneticProgramming(GPConfig(popsize=8, max_len=16, num_vars=4, num_outputs=2), seed=0).ask()
    with kernels.assume_gpu(), readiness.record_functions() as names:
        pol = GPPolicy(num_outputs=2, num_actions=2)
        f = tf.function(lambda p, o: pol.forward(p, o), autograph=False)
        f(GPPolicy.pack(trees), tf.zeros([8, 3, 4]))
    _check_functions(names)


def test_neat_supervised_fitness():
    """A NEAT problem's fitness (XOR: the networks on the data set and the loss)."""
    from tfevo.neat import NEAT, XOR
    from tfevo.neat import problems

    prob = XOR()
    cfg = prob.config(pop_size=8, max_nodes=10, max_conns=16)
    pop = NEAT(cfg, seed=0).ask()
    problems._COMPILED.clear()  # a fitness compiled by an earlier test would not run again here
    try:
        with kernels.assume_gpu(), readiness.record_functions() as names:
            prob.evaluate(pop, cfg)
    finally:
        problems._COMPILED.clear()
    _check_functions(names)


@pytest.mark.parametrize("emitter", ["iso_line", "cma_me", "cma_mae"])
def test_map_elites_on_a_cvt_archive(emitter):
    """MAP-Elites ask/tell on a CVT archive (its bucket lookup of the nearest centroid, used from
    64 cells on, in the insertion), with the Iso+LineDD emitter, with CMA-ME's ES emitters
    (their own tell), and CMA-MAE's (a soft archive's threshold insertion, a plain result archive)."""
    from tfevo.qd import CVTArchive, ESEmitter, GridArchive, IsoLineEmitter, MAPElites

    cent = np.random.default_rng(0).uniform(size=(64, 2)).astype(np.float32)
    with kernels.assume_gpu(), readiness.record_functions() as names:
        soft = {"learning_rate": 0.01, "threshold_min": -1.0} if emitter == "cma_mae" else {}
        archive = CVTArchive(4, 64, [(0, 1), (0, 1)], centroids=cent, lookup="buckets", **soft)
        result = GridArchive(4, [8, 8], [(0, 1), (0, 1)]) if soft else None
        # (CMA-MAE with the random direction ranker: its direction draws are in the graphs too)
        em = IsoLineEmitter(4, 8, bounds=(0, 1)) if emitter == "iso_line" else ESEmitter(
            4, 4, num_emitters=2, seed=0, ranker="2rd" if soft else "2imp")
        me = MAPElites(archive, [em], init_bounds=(0, 1), seed=0, result_archive=result)
        for _ in range(2):
            one_generation(me, "map_elites")
    _check_functions(names)


def _policy():
    from tfevo.envs import make
    from tfevo.nn import Policy, PopulationModel
    from tfevo.nn.policy import mlp

    env = make("CartPole-v1", 1)
    return Policy(PopulationModel(mlp((4,), 2, hidden=(8,))), env.action_spec)


def test_ingraph_rollout():
    from tfevo.rollout.ingraph import InGraphEvaluator

    with kernels.assume_gpu(), readiness.record_functions() as names:
        pol = _policy()
        ev = InGraphEvaluator("CartPole-v1", pol, max_steps=10, jit_compile=False)
        ev.evaluate(pol.init_params(4, seed=0))
    _check_functions(names)


def test_pipelined_inference_step():
    from tfevo.rollout.pipelined import PipelinedEvaluator

    with kernels.assume_gpu():
        pol = _policy()
        ev = PipelinedEvaluator("CartPole-v1", pol, num_envs=4, num_subsets=2, max_steps=5)
        try:
            params = pol.init_params(4, seed=0)
            ev._build_forward(ev._prepare(params))
            _check_concrete(ev.forward_concrete)
        finally:
            ev.close()


# -- the check itself fails on CPU-only ops in a hot path ---------------------------------


def test_a_custom_op_in_the_forward_fails_the_check():
    """Without the assumed GPU the dispatch puts the fused MLP kernel (CPU only) in the forward:
    the check names it."""
    from tfevo.nn import PopulationModel

    if not kernels.built("TfevoPopulationMlp"):
        pytest.skip("TfevoPopulationMlp not built")
    pm = PopulationModel(_templates()["mlp"])
    concrete = pm._fn("flat").get_concrete_function(tf.TensorSpec([4, pm.num_params], tf.float32),
                                                     tf.TensorSpec([4, 1, 4], tf.float32))
    bad = readiness.unready_ops(concrete)
    assert "TfevoPopulationMlp" in bad


def test_a_cpu_only_tensorflow_op_in_a_tell_fails_the_check(monkeypatch):
    """UniqueV2 (CPU kernel only) put into a strategy's tell is found in the graphs that ran;
    the same op inside an XLA-compiled function passes."""
    from tfevo.strategies import OpenES

    real = OpenES._tell

    def tell_with_unique(self, x, fitness):
        real(self, x, fitness)
        y, _ = tf.raw_ops.UniqueV2(x=tf.cast(fitness > 0, tf.int32), axis=tf.constant([0], tf.int64))
        self.generation.assign_add(tf.cast(tf.size(y), tf.int64) * 0)

    monkeypatch.setattr(OpenES, "_tell", tell_with_unique)
    monkeypatch.setattr(OpenES, "jit_compile_tell", False)  # a graph-mode tell (under XLA it would pass)
    with kernels.assume_gpu(), readiness.record_functions() as names:
        es = OpenES(num_dims=5, popsize=8, seed=0)
        x = es.ask()
        es.tell(x, fitness_of(x))
    bad = readiness.unready_ops_in_functions(names)
    assert set(bad) == {"UniqueV2"}
    unique = tf.function(lambda v: tf.raw_ops.UniqueV2(x=v, axis=tf.constant([0], tf.int64))[0], jit_compile=True)
    outer = tf.function(lambda v: unique(v) + 1).get_concrete_function(tf.TensorSpec([3], tf.int32))
    assert readiness.unready_ops(outer) == {}
    plain = tf.function(lambda v: tf.raw_ops.UniqueV2(x=v, axis=tf.constant([0], tf.int64))[0] + 1)
    assert "UniqueV2" in readiness.unready_ops(plain.get_concrete_function(tf.TensorSpec([3], tf.int32)))


def test_the_dispatch_decides_once_per_op_and_logs_it(caplog):
    """Under the assumed GPU every kernel takes the reference and the decision is logged at debug level."""
    x = tf.zeros([4, 3])
    with kernels.assume_gpu(), caplog.at_level("DEBUG", logger="tfevo.kernels"):
        for _ in range(3):
            assert kernels.kernel("TfevoIndexedMatmul", None, [x]) is None
        with pytest.raises(kernels.KernelUnavailableError, match="GPU"):
            kernels.kernel("TfevoIndexedMatmul", True, [x])
    assert kernels.decisions()["TfevoIndexedMatmul"].startswith("a GPU is present")
    lines = [r.getMessage() for r in caplog.records if "TfevoIndexedMatmul" in r.getMessage()]
    assert len(lines) <= 1  # once per op and outcome (an earlier test may have logged it already)
    np.testing.assert_equal(kernels.kernel("TfevoIndexedMatmul", False), None)
