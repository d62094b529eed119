"""NEATConfig.fitness_dtype: supervised networks evaluated and fitness ranked in float64
(neat-python's doubles, the default) or float32 (the earlier behaviour, kept bit for bit).

The inference kernels are checked against the pure-TF reference in both types, the
plan kernel against plan_reference on float64 fitness that float32 cannot tell apart,
and a float32 run against its fitness history recorded before the float64 path existed."""

import json
import os
import sys

import numpy as np
import pytest
import tensorflow as tf

import tfevo.neat as tn
from tfevo import kernels
from tfevo.core import ConfigError
from tfevo.neat import NEAT, NEATConfig
from tfevo.neat import _forward_op as fo
from tfevo.neat import _speciate_op as so
from tfevo.neat import functions as F
from tfevo.neat import network as net

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "kernels"))

from test_neat_forward_op import ALL_ACT, ALL_AGG, random_genomes  # noqa: E402

needs_op = pytest.mark.skipif(not kernels.built("TfevoNeatForward"), reason="NEAT inference custom op not built")


def test_config_fitness_dtype_default_and_validation():
    assert NEATConfig().fitness_dtype == "float64"
    assert NEATConfig().fitness_tf_dtype == tf.float64
    assert NEATConfig(fitness_dtype="float32").fitness_tf_dtype == tf.float32
    for bad in ("float16", "double", "Float64", None, np.float64):
        with pytest.raises(ConfigError) as e:
            NEATConfig(fitness_dtype=bad)
        msg = str(e.value)
        assert "fitness_dtype" in msg and repr(bad) in msg and "'float64', 'float32'" in msg


def _problem_fitness(prob, cfg, pop):
    return prob(pop, cfg).numpy()


@pytest.mark.parametrize("feed_forward", [True, False])
def test_supervised_fitness_type_and_double_values(feed_forward):
    """The fitness comes back in the config's type; float64 fitness equals the
    per-genome Python evaluator in double (float32 only to float32 rounding)."""
    prob = tn.Parity(3)
    cfg64 = prob.config(pop_size=60, max_nodes=16, max_conns=32, feed_forward=feed_forward, node_add_prob=0.6)
    cfg32 = prob.config(pop_size=60, max_nodes=16, max_conns=32, feed_forward=feed_forward, node_add_prob=0.6,
                        fitness_dtype="float32")
    algo = NEAT(cfg64, seed=2)
    for _ in range(4):  # some hidden nodes
        pop = algo.ask()
        algo.tell(pop, prob(pop, cfg64))
    pop = algo.ask()
    f64, f32 = prob(pop, cfg64), prob(pop, cfg32)
    assert f64.dtype == tf.float64 and f32.dtype == tf.float32
    nodes, conns = pop.nodes.numpy(), pop.conns.numpy()
    ref = tn.Parity(3)
    ref.use_op, ref.jit_compile = False, False
    np.testing.assert_allclose(ref(pop, cfg64).numpy(), f64.numpy(), rtol=1e-13, atol=1e-13)
    want = []
    for p in range(len(nodes)):
        if feed_forward:
            y = net.reference_forward(nodes[p], conns[p], prob.inputs64, 3, 1, float32=False)
        else:
            y = np.stack([net.reference_recurrent(nodes[p], conns[p], prob.inputs64[b:b + 1], 3, 1, 1, float32=False)[0]
                          for b in range(len(prob.inputs64))])
        want.append(prob.max_fitness - np.sum((y - prob.targets64) ** 2))
    np.testing.assert_allclose(f64.numpy(), want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(f32.numpy(), want, rtol=1e-5, atol=1e-5)


@needs_op
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("acts,aggs", [(("sigmoid",), ("sum",)), (ALL_ACT, ALL_AGG)])
def test_inference_kernels_equal_reference_in_both_types(dtype, acts, aggs):
    """TfevoNeatEvaluate / Forward / RecurrentStep in float32 and float64 against the
    dense reference run in the same type (agreement to that type's rounding), and the
    fused kernel equal to compile + forward bit for bit in both."""
    dt = tf.as_dtype(dtype)
    tol = 1e-5 if dtype == "float32" else 1e-12
    I, O, N, C = 3, 2, 14, 30
    act_ids = [F.activation_id(a) for a in ALL_ACT[:8]] + [F.activation_id(a) for a in acts]
    agg_ids = [F.aggregation_id(a) for a in ALL_AGG] if len(aggs) > 1 else [0, 1]
    nodes, conns = random_genomes(200, N, C, I, O, seed=31 + len(acts), act_ids=act_ids, agg_ids=agg_ids)
    rng = np.random.default_rng(8)
    prog = fo.prepare(nodes, conns, I, True, acts, aggs, use_op=True)
    for B in (4, 16):  # row loop and node-major path
        x = rng.uniform(-1, 1, size=(200, B, I)).astype(dtype)
        got = fo.evaluate(nodes, conns, x, I, O, acts, aggs, use_op=True, dtype=dt)
        assert got.dtype == dt
        np.testing.assert_array_equal(got.numpy(), fo.forward(prog, x, I, O, dtype=dt).numpy())
        ref = fo.evaluate(nodes, conns, x, I, O, acts, aggs, use_op=False, dtype=dt).numpy()
        ok = np.isfinite(ref)
        assert ok.mean() > 0.95
        np.testing.assert_allclose(got.numpy()[ok], ref[ok], rtol=tol, atol=tol)
    # recurrent steps (bounded activations: values fed back through exp/inv/cube amplify float32
    # rounding beyond the tolerance, as in tests/kernels/test_neat_forward_op.py)
    if len(acts) > 1:
        acts = ("sigmoid", "tanh", "gauss", "clamped", "identity")
        act_ids = [F.activation_id(a) for a in acts]
    rn, rc = random_genomes(100, 10, 26, 2, 2, feed_forward=False, seed=9, act_ids=act_ids, agg_ids=agg_ids)
    rprog = fo.prepare(rn, rc, 2, False, acts, aggs, use_op=True)
    rnet = net.transform(rn, rc, 2, False)
    s_op = s_ref = tf.zeros([100, 3, 10], dt)
    for x in rng.uniform(-1, 1, size=(4, 100, 3, 2)).astype(dtype):
        s_op, y_op = fo.recurrent_step(rprog, s_op, x, 2, 2, settle_steps=2, dtype=dt)
        s_ref, y_ref = fo.recurrent_step(rnet, s_ref, x, 2, 2, acts, aggs, settle_steps=2, dtype=dt)
        assert y_op.dtype == dt and s_op.dtype == dt
        ok = np.isfinite(y_ref.numpy())
        np.testing.assert_allclose(y_op.numpy()[ok], y_ref.numpy()[ok], rtol=tol, atol=tol)


@needs_op
def test_float64_kernels_compute_in_double():
    """Saturated sigmoid outputs: float64 keeps margins float32 rounds away (the 3-bit
    parity plateau at 6.0), and equals the Python double evaluator."""
    I, O, N, C = 3, 1, 12, 24
    nodes, conns = random_genomes(50, N, C, I, O, seed=4, dup=False)
    conns[..., 3] *= 8.0  # large weights: outputs within 1e-8 of 0 or 1
    x = np.random.default_rng(1).uniform(-1, 1, size=(6, I))
    y64 = fo.evaluate(nodes, conns, x, I, O, use_op=True, dtype=tf.float64).numpy()
    y32 = fo.evaluate(nodes, conns, x.astype(np.float32), I, O, use_op=True).numpy()
    np.testing.assert_allclose(y64, fo.evaluate(nodes, conns, x, I, O, use_op=False, dtype=tf.float64).numpy(),
                               rtol=1e-12, atol=1e-15)
    checked = 0
    for p in range(50):  # genomes without repeated (in, out) pairs (merged in float32 weights)
        pairs = [tuple(r[:2]) for r in conns[p] if not np.isnan(r[0])]
        if len(pairs) == len(set(pairs)):
            checked += 1
            np.testing.assert_allclose(y64[p], net.reference_forward(nodes[p], conns[p], x, I, O, float32=False),
                                       rtol=1e-12, atol=1e-15)
    assert checked >= 10
    sat = (y64 > 1 - 2e-8) & (y64 < 1)  # float32 rounds these to 1
    assert sat.any() and np.all(y32[sat] == 1.0)  # float32: exactly 1, float64: below it


def _plan_args(P, S, ff, rng):
    sp = rng.integers(0, S - 2, P).astype(np.int32)
    alive = np.arange(S) < S - 2
    keys = np.arange(S, dtype=np.int64)
    best_f = np.where(alive, 6.0 - 1e-6, -np.inf)
    last_imp = rng.integers(0, 4, S).astype(np.int64)
    mk = rng.permutation(P).astype(np.int64)
    u = rng.random((P, 5)).astype(np.float32)
    return sp, alive, keys, best_f, last_imp, ff, mk, np.int64(6), u


@needs_op
@pytest.mark.parametrize("variant", [dict(), dict(species_fitness_func="mean", elitism=1),
                                     dict(species_fitness_func="median", allotment="rank", crossover_prob=0.6),
                                     dict(species_fitness_func="min", max_stagnation=2, species_elitism=1,
                                          spawn_number_change_rate=0.3)])
def test_plan_kernel_ranks_in_double(variant):
    """TfevoNeatPlan in float64 equals plan_reference bit for bit on fitness whose
    differences lie below float32 resolution (every value rounds to 6.0 in float32),
    and the ranking uses them: the float32 plan of the same values differs."""
    P, S = 400, 8
    cfg = NEATConfig(num_inputs=3, num_outputs=1, pop_size=P, max_species=S, **variant)
    rng = np.random.default_rng(5)
    ff = 6.0 - 10.0 ** rng.uniform(-13, -8, P)
    ff[rng.random(P) < 0.2] = 6.0 - 1e-9  # exact ties too
    assert np.all(ff.astype(np.float32) == 6.0)
    args = [tf.constant(a) for a in _plan_args(P, S, ff, rng)]
    ref = so.plan(cfg, *args, use_op=False)
    got = so.plan(cfg, *args, use_op=True)
    assert got[2].dtype == tf.float64 and got[3].dtype == tf.float64
    for name, a, b in zip(["size", "alive", "fit", "best_f", "last_imp", "extinct", "spawn", "p1", "p2", "elite"],
                          ref, got):
        np.testing.assert_array_equal(b.numpy(), a.numpy(), err_msg=name)
    a32 = list(args)
    a32[3], a32[5] = tf.cast(args[3], tf.float32), tf.cast(args[5], tf.float32)
    got32 = so.plan(cfg, *a32, use_op=True)
    assert not (np.array_equal(got32[7].numpy(), got[7].numpy()) and np.array_equal(got32[8].numpy(), got[8].numpy()))


@needs_op
def test_speciate_kernel_keeps_float64_best_fitness():
    prob = tn.XOR()
    cfg = prob.config(pop_size=50, max_nodes=16, max_conns=32)
    algo = NEAT(cfg, seed=3)
    for _ in range(3):
        pop = algo.ask()
        algo.tell(pop, prob(pop, cfg))
    pop = algo.ask()
    st = (pop.nodes, pop.conns, algo.species_rep_nodes, algo.species_rep_conns, algo.species_active,
          algo.species_key, algo.species_created, algo.species_best_fitness, algo.species_last_improved,
          algo.next_species_key, algo.generation)
    assert algo.species_best_fitness.dtype == tf.float64
    ref = so.speciate(cfg, *st, use_op=False)
    got = so.speciate(cfg, *st, use_op=True)
    assert got[4].dtype == tf.float64
    for a, b in zip(ref, got):
        np.testing.assert_array_equal(b.numpy(), a.numpy())


def _history(problem, fitness_dtype, use_op, extra=None, gens=12):
    """Fitness per generation of a fixed-seed run (the recorded baseline's protocol)."""
    prob = {"parity3": lambda: tn.Parity(3), "xor3": tn.XOR3}[problem]()
    if use_op is False:
        prob.use_op = False
    kw = dict(extra or {})
    if fitness_dtype is not None:
        kw["fitness_dtype"] = fitness_dtype
    cfg = prob.config(pop_size=40, max_nodes=16, max_conns=32, node_add_prob=0.5, **kw)
    algo = NEAT(cfg, seed=5)
    out = []
    for _ in range(gens):
        pop = algo.ask()
        f = prob(pop, cfg)
        out.append(f.numpy())
        algo.tell(pop, f)
    return np.array(out)


_BASELINE_CASES = {"parity3_op": ("parity3", None, None), "parity3_ref": ("parity3", False, None),
                   "xor3_rec_op": ("xor3", None, {"feed_forward": False})}


@pytest.mark.parametrize("case", sorted(_BASELINE_CASES))
def test_float32_runs_equal_the_recorded_float32_history(case):
    """fitness_dtype="float32" runs bit for bit as recorded (kernels and reference,
    feed-forward and recurrent; tests/neat/data/fitness_float32_baseline.json, recorded
    again only when the algorithm changes on purpose, e.g. the children's layout in
    neat-python's genome-id order)."""
    problem, use_op, extra = _BASELINE_CASES[case]
    if use_op is None and not kernels.built("TfevoNeatForward"):
        pytest.skip("kernels not built")
    with open(os.path.join(HERE, "data", "fitness_float32_baseline.json")) as fh:
        want = np.array(json.load(fh)[case], np.float32)
    got = _history(problem, "float32", use_op, extra)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, want)


def test_float64_same_seed_same_run_and_reference_equal():
    """float64: the same seed gives the same run; the kernels and the reference
    evaluate and rank alike (same populations, fitness equal to double rounding)."""
    a = _history("parity3", None, None, gens=8)
    b = _history("parity3", None, None, gens=8)
    assert a.dtype == np.float64
    np.testing.assert_array_equal(a, b)
    r = _history("parity3", None, False, gens=8)
    np.testing.assert_allclose(r, a, rtol=1e-13, atol=1e-13)


def test_trainer_hands_neat_its_fitness_type():
    """Through the Trainer, NEAT gets float64 fitness (the Trainer casts to the
    algorithm's fitness_dtype): the same run as the plain ask/tell loop."""
    from tfevo.training import Trainer

    prob = tn.Parity(3)
    cfg = prob.config(pop_size=30, max_nodes=16, max_conns=32, node_add_prob=0.5)
    a = NEAT(cfg, seed=4)
    assert a.fitness_dtype == tf.float64
    seen, tell = [], a.tell

    def spy(pop, f):
        seen.append(tf.convert_to_tensor(f).dtype)
        return tell(pop, f)

    a.tell = spy
    Trainer(a, lambda pop: prob(pop, cfg), generations=5, progress=False, verbose=False).run()
    assert seen == [tf.float64] * 5
    b = NEAT(cfg, seed=4)
    for _ in range(5):
        pop = b.ask()
        b.tell(pop, prob(pop, cfg))
    for name in ("nodes", "conns", "species_fitness", "species_best_fitness", "best_fitness", "member_species"):
        np.testing.assert_array_equal(getattr(a, name).numpy(), getattr(b, name).numpy(), err_msg=name)
    assert a.species_fitness.dtype == tf.float64
