"""NEAT's contract with its users: a config that does not fit is an error naming
the field, the value and the accepted range (never a wrong answer); the kernel
cache is the package's one cache; exported networks stand alone."""

import functools
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from tfevo.core import ConfigError, ShapeError
from tfevo.neat import NEAT, XOR, XOR3, FunctionFit, NEATConfig

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# -- configs: every numeric field has a type and a range -------------------------------------------
@pytest.mark.parametrize("kw, field, value_text, accepted", [
    (dict(pop_size=2.5), "pop_size", "2.5", "integer"),
    (dict(pop_size="150"), "pop_size", "'150'", "integer"),
    (dict(pop_size=1), "pop_size", "1", ">= 2"),
    (dict(pop_size=True), "pop_size", "True", "integer"),
    (dict(weight_mutate_rate=-0.5), "weight_mutate_rate", "-0.5", "[0.0, 1.0]"),
    (dict(weight_mutate_power=-1), "weight_mutate_power", "-1", ">= 0"),
    (dict(weight_init_stdev=-1), "weight_init_stdev", "-1", ">= 0"),
    (dict(bias_init_stdev=-0.1), "bias_init_stdev", "-0.1", ">= 0"),
    (dict(response_mutate_power=-2.0), "response_mutate_power", "-2", ">= 0"),
    (dict(elitism=10, pop_size=5), "elitism", "10", "<= pop_size=5"),
    (dict(min_species_size=9, pop_size=5), "min_species_size", "9", "<= pop_size=5"),
    (dict(elitism=-1), "elitism", "-1", ">= 0"),
    (dict(compatibility_threshold=0.0), "compatibility_threshold", "0", "> 0"),
    (dict(compatibility_weight_coefficient=-1.0), "compatibility_weight_coefficient", "-1", ">= 0"),
    (dict(compatibility_disjoint_coefficient="1"), "compatibility_disjoint_coefficient", "'1'", "number"),
    (dict(survival_threshold=0.0), "survival_threshold", "0", "(0.0, 1.0]"),
    (dict(survival_threshold=1.5), "survival_threshold", "1.5", "(0.0, 1.0]"),
    (dict(node_add_prob=1.2), "node_add_prob", "1.2", "[0.0, 1.0]"),
    (dict(conn_delete_prob=float("nan")), "conn_delete_prob", "nan", "[0.0, 1.0]"),
    (dict(max_stagnation=0), "max_stagnation", "0", ">= 1"),
    (dict(species_elitism=-2), "species_elitism", "-2", ">= 0"),
    (dict(max_species=0), "max_species", "0", ">= 1"),
    (dict(num_hidden=-1), "num_hidden", "-1", ">= 0"),
    (dict(num_inputs=0), "num_inputs", "0", ">= 1"),
    (dict(max_conns=3.5), "max_conns", "3.5", "integer"),
    (dict(connection_fraction=2.0), "connection_fraction", "2", "[0.0, 1.0]"),
    (dict(spawn_number_change_rate=-0.1), "spawn_number_change_rate", "-0.1", "[0.0, 1.0]"),
    (dict(bias_init_mean=float("inf")), "bias_init_mean", "inf", "finite"),
    (dict(weight_max_value=float("nan")), "weight_max_value", "nan", "finite"),
    (dict(fitness_threshold=float("nan")), "fitness_threshold", "nan", "not NaN"),
    (dict(feed_forward="yes"), "feed_forward", "'yes'", "True or False"),
    (dict(weight_min_value=5.0, weight_max_value=1.0), "weight_min_value", "5", "<= weight_max_value"),
])
def test_bad_config_values_name_field_value_and_range(kw, field, value_text, accepted):
    with pytest.raises(ConfigError) as e:
        NEATConfig(**kw)
    msg = str(e.value)
    assert field in msg and value_text in msg and accepted in msg, msg


def test_unknown_config_keywords_are_config_errors_with_the_closest_field():
    with pytest.raises(ConfigError, match=r"NEATConfig: unknown hyperparameter 'pop_sise' \(did you mean 'pop_size'\?\)"):
        NEATConfig(num_inputs=2, num_outputs=1, pop_sise=10)
    with pytest.raises(ConfigError, match=r"'elitsm' \(did you mean 'elitism'"):
        XOR().config(elitsm=2)
    with pytest.raises(ConfigError, match=r"'conn_add' \(NEATConfig calls it 'conn_add_prob'\)"):
        NEATConfig(num_inputs=2, num_outputs=1, conn_add=0.3)
    with pytest.raises(ConfigError, match=r"'weight_mutate_rat' \(did you mean 'weight_mutate_rate'"):
        NEATConfig.from_dict({"num_inputs": 2, "num_outputs": 1, "weight_mutate_rat": 0.5})


def test_good_values_are_normalised_and_neat_python_files_checked(tmp_path):
    c = NEATConfig(pop_size=150.0, fitness_threshold=3, elitism=np.int64(2))
    assert type(c.pop_size) is int and c.pop_size == 150 and type(c.elitism) is int
    assert NEATConfig(fitness_threshold=float("-inf")).fitness_threshold == float("-inf")
    path = tmp_path / "neat.cfg"
    text = (Path(__file__).parents[2] / "benchmarks" / "configs" / "neat_parity3.cfg").read_text()
    path.write_text(text.replace("pop_size              = 150", "pop_size = 2.5"))
    with pytest.raises(ConfigError, match=r"\[NEAT\] pop_size must be an integer, got '2.5'"):
        NEATConfig.from_neat_python(str(path))
    path.write_text(text.replace("weight_mutate_power     = 0.5", "weight_mutate_power = -1"))
    with pytest.raises(ConfigError, match=r"\[DefaultGenome\] weight_mutate_power must be >= 0.0, got -1.0"):
        NEATConfig.from_neat_python(str(path))


# -- problems check that the config fits --------------------------------------------------------------
@pytest.mark.parametrize("make, I, O", [(XOR, 2, 1), (XOR3, 3, 1), (FunctionFit, 1, 1)])
@pytest.mark.parametrize("use_op", [None, False])
def test_supervised_problems_reject_configs_that_do_not_fit(make, I, O, use_op):
    prob = make()
    prob.use_op = use_op
    for dI, dO in ((1, 0), (-1, 0), (0, 1)):
        if I + dI < 1:
            continue
        cfg = NEATConfig(num_inputs=I + dI, num_outputs=O + dO, pop_size=8, max_nodes=12, max_conns=16)
        with pytest.raises(ConfigError, match=f"num_inputs={I + dI}, num_outputs={O + dO}.*"
                                              f"needs num_inputs={I}, num_outputs={O}"):
            prob(NEAT(cfg, seed=0).ask(), cfg)
    cfg = prob.config(pop_size=8, max_nodes=12, max_conns=16)
    pop = NEAT(cfg, seed=0).ask()
    assert prob(pop, cfg).shape == (8,)
    with pytest.raises(ShapeError, match="max_nodes"):  # a population of another config
        prob((pop.nodes[:, :10], pop.conns), cfg)


def test_control_and_hyperneat_problems_reject_what_does_not_fit():
    from tfevo.neat import HyperNEAT, HyperNEATProblem, Substrate
    from tfevo.neat.policy import ControlProblem

    with pytest.raises(ConfigError, match="4 inputs, CartPole-v1 observations have 6|has 4 inputs.*6"):
        ControlProblem("Acrobot-v1", NEATConfig(num_inputs=4, num_outputs=3))
    with pytest.raises(ConfigError, match="3 outputs, the action space needs 2"):
        ControlProblem("CartPole-v1", NEATConfig(num_inputs=4, num_outputs=3))
    cfg = NEATConfig(num_inputs=4, num_outputs=2, pop_size=8, max_nodes=12, max_conns=16)
    prob = ControlProblem("CartPole-v1", cfg, max_steps=5)
    other = NEATConfig(num_inputs=4, num_outputs=2, pop_size=8, max_nodes=16, max_conns=16)
    with pytest.raises(ShapeError, match="max_nodes"):
        prob(NEAT(other, seed=0).ask())
    sub = Substrate.layered([[(-1.0, -1.0), (1.0, -1.0)], [(0.0, 1.0)]])
    hn = HyperNEAT(sub)
    x = np.array([[0, 0], [0, 1], [1, 0], [1, 1]], np.float32)
    with pytest.raises(ShapeError, match=r"targets must be \[4, 1\]"):
        HyperNEATProblem(hn, x, np.zeros((4, 2), np.float32))
    with pytest.raises(ShapeError, match=r"inputs must be \[B, 2\]"):
        HyperNEATProblem(hn, np.zeros((4, 3), np.float32), np.zeros((4, 1), np.float32))
    hp = HyperNEATProblem(hn, x, x[:, :1])
    from tfevo.neat import cppn_config

    bad = cppn_config(hn.cppn_inputs, 2, pop_size=8)
    with pytest.raises(ConfigError, match=f"num_outputs=2.*needs num_inputs={hn.cppn_inputs}, num_outputs=1"):
        hp(NEAT(bad, seed=0).ask(), bad)
    good = hn.cppn_config(pop_size=8)
    assert hp(NEAT(good, seed=0).ask(), good).shape == (8,)


@pytest.mark.parametrize("feed_forward", [True, False])
def test_policy_rejects_observations_of_the_wrong_size(feed_forward):
    from tfevo.envs import make
    from tfevo.neat.policy import NEATPolicy

    cfg = NEATConfig(num_inputs=4, num_outputs=2, pop_size=6, max_nodes=10, max_conns=16, feed_forward=feed_forward)
    pol = NEATPolicy(cfg, make("CartPole-v1", 1).action_spec)
    pop = NEAT(cfg, seed=1).ask()
    with pytest.raises(ShapeError, match="observations have 3 values.*num_inputs=4"):
        pol.forward(pop, np.zeros((6, 2, 3), np.float32))
    with pytest.raises(ShapeError, match="observations have 6 values.*num_inputs=4"):
        pol.forward(pol.flatten(pop), np.zeros((6, 2, 6), np.float32))
    net = pol.transform(pop)
    with pytest.raises(ShapeError, match="observations have 5 values.*num_inputs=4"):
        pol.forward_state(net, np.zeros((6, 2, 5), np.float32), np.zeros((6, 2, 10), np.float32))
    a = pol.forward(pop, np.ones((6, 2, 4), np.float32)).numpy()
    np.testing.assert_array_equal(pol.forward(pop, np.ones((6, 2, 2, 2), np.float32)).numpy(), a)  # flattened
    # observations for another number of members than the networks given
    with pytest.raises(ShapeError, match=r"observations are for 5 members .* the networks are 6"):
        pol.forward(pop, np.zeros((5, 2, 4), np.float32))
    with pytest.raises(ShapeError, match=r"observations are for 6 members .* the networks are 2"):
        pol.forward(pop, np.zeros((6, 2, 4), np.float32), indices=[0, 3])


def test_kernel_cache_is_the_package_cache(tmp_path):
    """Importing tfevo.neat leaves the cache location to tfevo.ops (~/.cache/tfevo or $TFEVO_CACHE)."""
    env = {k: v for k, v in os.environ.items() if k != "TFEVO_CACHE"}
    env["PYTHONPATH"] = ROOT
    env["HOME"] = str(tmp_path)
    code = ("import os, tfevo.neat, tfevo.ops as o; print(os.environ.get('TFEVO_CACHE')); "
            "print(o.cache_dir()); print(o._library_path('neat_forward'))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120,
                         cwd=str(tmp_path))
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.split()
    assert lines[0] == "None"
    assert lines[1].startswith(os.path.join(str(tmp_path), ".cache", "tfevo"))
    assert lines[2].startswith(lines[1])


# -- exports stand alone -----------------------------------------------------------------------------
ALL_ACTS = ("sigmoid", "tanh", "sin", "gauss", "relu", "elu", "lelu", "selu", "softplus", "identity", "clamped",
            "inv", "log", "exp", "abs", "hat", "square", "cube")
ALL_AGGS = ("sum", "product", "max", "min", "maxabs", "median", "mean")


@functools.lru_cache(maxsize=1)
def _genomes_with_every_function():
    """Evolved genomes (random fitness, high structural and function mutation rates)
    and a few of them that together use every activation and aggregation on nodes
    that reach an output."""
    from tfevo.neat import network as net

    cfg = NEATConfig(num_inputs=3, num_outputs=2, pop_size=40, max_nodes=20, max_conns=48, node_add_prob=0.8,
                     conn_add_prob=0.9, node_delete_prob=0.05, conn_delete_prob=0.1, activation_options=ALL_ACTS,
                     aggregation_options=ALL_AGGS, activation_mutate_rate=0.6, aggregation_mutate_rate=0.6,
                     activation_default="sigmoid", num_hidden=1, initial_connection="full_direct")
    algo = NEAT(cfg, seed=4)
    rng = np.random.default_rng(1)
    for _ in range(10):
        algo.tell(algo.ask(), rng.normal(size=40).astype(np.float32))
    nodes, conns = (t.numpy() for t in algo.ask())
    used, sizes = [], []
    for p in range(40):
        nd, cd = net._genome_dicts(nodes[p], conns[p])
        live, todo = set(), [3, 4]
        while todo:  # nodes that reach an output
            k = todo.pop()
            if k in live or k not in nd:
                continue
            live.add(k)
            todo += [a for a, b, _ in cd if b == k]
        fn = {nd[k][3] for k in live if k >= 3} | {"agg:" + nd[k][2] for k in live if k >= 3
                                                   and sum(b == k for _, b, _ in cd) >= 2}
        used.append(fn)
        sizes.append(len(live))
    picked, have = [], set()
    for p in sorted(range(40), key=lambda p: sizes[p]):  # small genomes first: quick sympy expressions
        if not used[p] <= have:
            picked.append(p)
            have |= used[p]
    assert set(ALL_ACTS) <= have and {"agg:" + a for a in ALL_AGGS} <= have, sorted(set(ALL_ACTS) | {
        "agg:" + a for a in ALL_AGGS} - have)
    return cfg, nodes, conns, picked


def test_sympy_export_evaluates_every_function(tmp_path):
    import sympy as sp

    from tfevo.neat import network as net
    from tfevo.neat import to_sympy

    cfg, nodes, conns, picked = _genomes_with_every_function()
    x = np.random.default_rng(2).uniform(-1.5, 1.5, (16, 3))
    syms = sp.symbols("x0:3")
    for p in picked:
        exprs = to_sympy(nodes[p], conns[p], cfg, precision=12)
        assert not any(isinstance(f, sp.core.function.AppliedUndef) for e in exprs for f in e.atoms(sp.Function))
        f = sp.lambdify(syms, exprs, "numpy")
        got = np.array([np.asarray(f(*row), np.float64) for row in x])
        want = net.reference_forward(nodes[p], conns[p], x, 3, 2, float32=False)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6, err_msg=f"genome {p}")


def test_keras_export_loads_without_tfevo_and_matches(tmp_path):
    from tfevo.neat import network as net
    from tfevo.neat import to_keras

    cfg, nodes, conns, picked = _genomes_with_every_function()
    x = np.random.default_rng(3).uniform(-1.5, 1.5, (16, 3)).astype(np.float32)
    n = net.transform(nodes, conns, 3, True)
    want = net.forward(n, np.broadcast_to(x, (40, 16, 3)), 3, 2, ALL_ACTS, ALL_AGGS).numpy()
    for p in picked:
        model = to_keras(nodes[p], conns[p], cfg)
        np.testing.assert_allclose(model(x).numpy(), want[p], rtol=1e-4, atol=1e-5, err_msg=f"genome {p}")
        model.save(tmp_path / f"g{p}.keras")
    np.save(tmp_path / "x.npy", x)
    code = f"""
import sys
sys.modules["tfevo"] = None  # any import of tfevo fails
import numpy as np, keras
x = np.load({str(tmp_path / 'x.npy')!r})
out = {{}}
for p in {picked!r}:
    out[f"g{{p}}"] = np.asarray(keras.models.load_model({str(tmp_path)!r} + f"/g{{p}}.keras")(x))
assert not [m for m, v in sys.modules.items() if m.startswith("tfevo") and v is not None]
np.savez({str(tmp_path / 'out.npz')!r}, **out)
"""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-c", code], env=env, cwd=str(tmp_path), capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = np.load(tmp_path / "out.npz")
    for p in picked:
        np.testing.assert_allclose(out[f"g{p}"], want[p], rtol=1e-4, atol=1e-5, err_msg=f"genome {p}")


def test_reference_and_kernel_forward_pick_the_same_actions_on_acrobot():
    """Many evolved genomes (large weights, so sigmoids saturate and outputs tie at 1.0
    in float32) along Acrobot episodes: the Python reference and the C++ (or TF) forward
    pass pick the same action at every step, except where the outputs are within one
    float32 rounding of a tie (at most 0.5% of the steps)."""
    from tfevo.envs import make
    from tfevo.neat import _forward_op as fo
    from tfevo.neat import network as net

    P = 40
    cfg = NEATConfig(num_inputs=6, num_outputs=3, pop_size=P, max_nodes=24, max_conns=60, node_add_prob=0.5,
                     conn_add_prob=0.7, weight_init_stdev=3.0)
    algo = NEAT(cfg, seed=0)
    rng = np.random.default_rng(0)
    for _ in range(8):
        algo.tell(algo.ask(), rng.normal(size=P).astype(np.float32))
    pop = algo.ask()
    prog = fo.prepare(pop.nodes, pop.conns, 6, True, cfg.activation_options, cfg.aggregation_options)
    env = make("Acrobot-v1", P)
    state, obs = env.reset(tf.constant([1, 2]))
    nodes, conns = pop.nodes.numpy(), pop.conns.numpy()
    steps, near, differ = 0, 0, []
    for t in range(60):
        xb = tf.reshape(tf.cast(obs, tf.float32), [P, 1, 6])
        y = fo.forward(prog, xb, 6, 3, cfg.activation_options, cfg.aggregation_options).numpy()[:, 0]
        a = y.argmax(-1)
        for i in range(P):
            yr = net.reference_forward(nodes[i], conns[i], xb.numpy()[i], 6, 3)[0]
            np.testing.assert_allclose(yr, y[i], rtol=1e-5, atol=1e-6)
            if yr.argmax() != a[i]:
                top = np.sort(y[i])
                differ.append((t, i))
                assert top[-1] - top[-2] <= 2 * np.spacing(np.float32(top[-1])), (t, i, y[i], yr)
        steps += P
        state, obs = env.step(state, tf.constant(a, tf.int32))[:2]
    assert len(differ) <= 0.005 * steps, f"{len(differ)} of {steps} steps differ: {differ[:10]}"


def test_a_run_stops_before_its_node_keys_or_markers_pass_float32s_exact_integers():
    cfg = NEATConfig(num_inputs=2, num_outputs=1, pop_size=8, max_nodes=12, max_conns=16, node_add_prob=1.0)
    prob = XOR()
    for var, start in (("next_node_key", 2**24 - 8), ("next_marker", 2**24 - 3 * 8)):
        neat = NEAT(cfg, seed=0)
        pop = neat.ask()
        neat.tell(pop, prob.evaluate(pop, cfg))  # far from the limit: runs
        getattr(neat, var).assign(start - 1)
        pop = neat.ask()
        neat.tell(pop, prob.evaluate(pop, cfg))  # one generation's worth of room left: still runs
        getattr(neat, var).assign(start)
        pop = neat.ask()
        before = [v.numpy().copy() for v in (neat.generation, neat.nodes, neat.conns, neat.best_fitness)]
        with pytest.raises(ConfigError, match=r"2\*\*24"):
            neat.tell(pop, prob.evaluate(pop, cfg))
        for u, v in zip(before, (neat.generation, neat.nodes, neat.conns, neat.best_fitness)):
            np.testing.assert_array_equal(u, v.numpy())  # nothing written
