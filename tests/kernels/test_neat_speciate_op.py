"""The NEAT speciation kernel (custom_ops/neat_speciate.cc, issue #5) against
its pure-TensorFlow reference (tfevo.neat.speciation.speciate_reference):
identical species, keys, representatives and counters on populations from
real runs and on hand-made edge cases."""

import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from tfevo import kernels, ops
from tfevo.neat import NEAT, XOR, NEATConfig
from tfevo.neat import _speciate_op as so
from tfevo.neat import neat as neat_mod

needs_op = pytest.mark.skipif(not kernels.built("TfevoNeatSpeciate"), reason="speciation custom op unavailable (no compiler, or TFEVO_DISABLE_CUSTOM_OPS set)")

_STATE = ["species_rep_nodes", "species_rep_conns", "species_active", "species_key", "species_created",
          "species_best_fitness", "species_last_improved", "next_species_key", "generation"]
_OUT = ["species", "alive", "keys", "created", "best_fitness", "last_improved", "next_key", "rep_index"]
_FNS: dict = {}


def _fns(cfg):
    """(reference, op) as traced functions, one pair per config."""
    key = repr(cfg)
    if key not in _FNS:
        _FNS[key] = (tf.function(lambda *a: so.speciate(cfg, *a, use_op=False), autograph=False),
                     tf.function(lambda *a: so.speciate(cfg, *a, use_op=True), autograph=False))
    return _FNS[key]


def _assert_same(cfg, args, where=""):
    ref, op = _fns(cfg)
    r, o = ref(*args), op(*args)
    for name, a, b in zip(_OUT, r, o):
        a, b = a.numpy(), b.numpy()
        assert a.dtype == b.dtype and a.shape == b.shape, (where, name)
        np.testing.assert_array_equal(b, a, err_msg=f"{where}: {name} differs")
    return [x.numpy() for x in o]


def _state_args(algo, pop):
    return [pop.nodes, pop.conns] + [getattr(algo, n).read_value() for n in _STATE]


def _run_and_compare(cfg, fitness, gens, seed=0):
    """Runs NEAT and, before every tell, checks op == reference on that
    generation's population and species state.  Returns the species counts."""
    algo = NEAT(cfg, seed=seed)
    counts = []
    for g in range(gens):
        pop = algo.ask()
        f = fitness(pop)
        out = _assert_same(cfg, _state_args(algo, pop), f"generation {g}")
        counts.append(int(out[1].sum()))
        algo.tell(pop, f)
    return counts


def _xor_cfg(**kw):
    return XOR().config(pop_size=1000, max_nodes=32, max_conns=64, compatibility_threshold=2.0, **kw)


@needs_op
@pytest.mark.parametrize("distance_dtype", ["float32", "float64"])
def test_xor_runs_identical(distance_dtype):
    """XOR config, pop 1000, 6 generations: every generation's speciation
    is identical (several species, founders after generation 0), with float32
    and with double distances."""
    prob = XOR()
    cfg = _xor_cfg(distance_dtype=distance_dtype)
    counts = _run_and_compare(cfg, lambda p: prob(p, cfg), 6, seed=2)
    assert max(counts) >= 3, counts


@needs_op
def test_cartpole_config_and_mutated_populations_identical():
    """CartPole-shaped config (4 in, 2 out, 24 x 48 slots, pop 600) and a
    heavily mutated recurrent population with many activations/aggregations,
    small threshold and few species slots (slots run out, species die)."""
    cfg = NEATConfig(num_inputs=4, num_outputs=2, pop_size=600, max_nodes=24, max_conns=48)
    rng = np.random.default_rng(0)
    _run_and_compare(cfg, lambda p: tf.constant(rng.normal(size=600).astype(np.float32)), 3, seed=3)
    cfg = NEATConfig(num_inputs=3, num_outputs=2, pop_size=300, max_nodes=16, max_conns=40, feed_forward=False,
                     node_add_prob=0.6, conn_add_prob=0.8, node_delete_prob=0.1, conn_delete_prob=0.2,
                     activation_options=("sigmoid", "tanh", "relu", "gauss"), activation_mutate_rate=0.5,
                     aggregation_options=("sum", "max", "product"), aggregation_mutate_rate=0.5,
                     response_mutate_rate=0.5, enabled_mutate_rate=0.2, compatibility_threshold=0.8, max_species=6,
                     max_stagnation=2, species_elitism=1)
    counts = _run_and_compare(cfg, lambda p: tf.constant(rng.normal(size=300).astype(np.float32)), 8, seed=4)
    assert max(counts) == 6  # the slots filled up


def _genomes(P, N, C, I, rng, n_hidden=3, n_conn=8, keys_pool=12, marker_pool=30):
    """Random well-formed genomes (inputs, outputs, random hidden keys, key
    pairs and markers from small pools so genes overlap; markers need not
    follow pairs: the distance aligns by pair), not compact, random slots."""
    O = 2
    nodes = np.full((P, N, 5), np.nan, np.float32)
    conns = np.full((P, C, 5), np.nan, np.float32)
    for p in range(P):
        nodes[p, :I + O, 0] = np.arange(I + O)
        nodes[p, I:I + O, 1:] = np.c_[rng.normal(size=O), rng.normal(size=O), rng.integers(0, 2, O),
                                      rng.integers(0, 3, O)]
        h = rng.integers(0, n_hidden + 1)
        slots = rng.choice(np.arange(I + O, N), h, replace=False)
        nodes[p, slots, 0] = I + O + rng.choice(keys_pool, h, replace=False)
        nodes[p, slots, 1:] = np.c_[rng.normal(size=h), rng.normal(size=h), rng.integers(0, 2, h),
                                    rng.integers(0, 3, h)]
        k = rng.integers(0, n_conn + 1)
        slots = rng.choice(C, k, replace=False)
        pairs = rng.choice(400, k, replace=False)  # a genome holds a key pair once
        conns[p, slots, 0], conns[p, slots, 1] = pairs // 20, pairs % 20
        conns[p, slots, 2] = rng.integers(0, 2, k)
        conns[p, slots, 3] = rng.normal(size=k) * 10.0 ** rng.integers(-3, 2, k)
        conns[p, slots, 4] = rng.choice(marker_pool, k, replace=False)
    return nodes, conns


@needs_op
@pytest.mark.parametrize("distance_dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", ["fresh", "live", "dying", "ties", "few_slots", "empty_conns"])
def test_edge_cases_identical(case, distance_dtype):
    rng = np.random.default_rng(hash(case) % 2**32)
    I, N, C, S, P = 3, 10, 12, 8, 60
    cfg = NEATConfig(num_inputs=I, num_outputs=2, pop_size=P, max_nodes=N, max_conns=C, max_species=S,
                     compatibility_threshold=1.5 if case != "few_slots" else 0.1, distance_dtype=distance_dtype)
    nodes, conns = _genomes(P, N, C, I, rng)
    rn, rc = _genomes(S, N, C, I, rng)
    active = np.zeros(S, bool)
    keys = np.full(S, -1, np.int64)
    if case in ("live", "dying", "ties", "few_slots", "empty_conns"):
        active[[1, 4, 6]] = True
        keys[[1, 4, 6]] = [7, 2, 5]  # key order differs from slot order
    if case == "dying":  # more live species than genomes: the last ones in key order die
        cfg = NEATConfig(num_inputs=I, num_outputs=2, pop_size=4, max_nodes=N, max_conns=C, max_species=S,
                         distance_dtype=distance_dtype)
        nodes, conns = nodes[:4], conns[:4]
        active[:] = True
        keys = rng.permutation(S).astype(np.int64)
    if case == "ties":  # copies: equal distances everywhere, ties decide
        nodes = np.repeat(nodes[:3], [20, 20, 20], 0)
        conns = np.repeat(conns[:3], [20, 20, 20], 0)
        rn[[1, 4, 6]] = nodes[0]
        rc[[1, 4, 6]] = conns[0]
    if case == "empty_conns":
        conns[:] = np.nan
        rc[:] = np.nan
    rn[~active] = np.nan
    rc[~active] = np.nan
    args = [nodes, conns, rn, rc, active, keys, np.arange(S, dtype=np.int64), rng.normal(size=S).astype(np.float32),
            np.zeros(S, np.int64), np.int64(11), np.int64(5)]
    out = _assert_same(cfg, [tf.constant(a) for a in args], case)
    sp, alive, keys_out, created, best_f, last_imp, nkey, rep = out
    assert np.all(sp >= 0) and np.all(sp < S) and np.all(alive[sp])
    assert np.all(sp[rep[alive]] == np.flatnonzero(alive))  # representatives are members of their species
    new = alive & ~active
    assert np.array_equal(np.sort(keys_out[new]), np.arange(11, nkey))  # founders got fresh keys
    assert np.all(created[new] == 5) and np.all(np.isneginf(best_f[new]))
    if case == "dying":
        assert alive.sum() == 4 and not new.any()
    if case == "few_slots":
        assert alive.all()


@needs_op
def test_whole_run_same_with_reference_speciation(monkeypatch):
    """NEAT with the kernel and NEAT with the reference speciation (same
    seed) evolve the same populations and species for 10 generations."""
    prob = XOR()
    cfg = prob.config(pop_size=150, max_nodes=32, max_conns=64)

    def run():
        monkeypatch.setattr(neat_mod, "_TELL_CACHE", {})  # a fresh trace with the current dispatcher
        algo = NEAT(cfg, seed=5)
        for _ in range(10):
            pop = algo.ask()
            algo.tell(pop, prob(pop, cfg))
        return [getattr(algo, n).numpy() for n in ("nodes", "conns", "species_key", "member_species",
                                                     "species_rep_conns", "next_species_key")]

    a = run()
    real = kernels.kernel

    def no_speciation_kernels(op, use_op=None, *args, **kw):
        return None if (use_op is None and op in ("TfevoNeatSpeciate", "TfevoNeatPlan")) else real(op, use_op, *args, **kw)

    monkeypatch.setattr(kernels, "kernel", no_speciation_kernels)
    b = run()
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)


_PLAN_VARIANTS = [dict(), dict(species_fitness_func="mean", max_stagnation=1, species_elitism=0),
                  dict(species_fitness_func="median", allotment="rank", crossover_prob=0.6, elitism=0),
                  dict(species_fitness_func="median2", elitism=0),
                  dict(species_fitness_func="min", max_stagnation=1, species_elitism=0, reset_on_extinction=True),
                  dict(max_stagnation=2, species_elitism=1, survival_threshold=0.5, min_species_size=3, elitism=3,
                       spawn_number_change_rate=1.0)]


@needs_op
def test_plan_identical_on_real_states():
    """TfevoNeatPlan (sizes, species fitness, stagnation, offspring counts,
    parents, elites) equals plan_reference on the species states of a real
    XOR run (pop 1000, 6 generations, fitness with plateaus and ties), under
    five configs covering every species fitness function, both allotments,
    crossover_prob < 1, stagnation with and without reset on extinction."""
    from tfevo.core import sanitize_fitness, worst_to_finite

    prob = XOR()
    cfg = _xor_cfg()  # as test_xor_runs_identical (one tell trace)
    variants = [_xor_cfg(**kw) for kw in _PLAN_VARIANTS]

    def fns(c):
        return (tf.function(lambda *a: so.plan(c, *a, use_op=False), autograph=False),
                tf.function(lambda *a: so.plan(c, *a, use_op=True), autograph=False))

    pairs = [fns(c) for c in variants]
    algo = NEAT(cfg, seed=6)
    rng = np.random.default_rng(3)
    stagnated = extinct = 0
    for g in range(6):
        pop = algo.ask()
        f = prob(pop, cfg).numpy()
        f[rng.random(1000) < 0.3] = np.round(f[0], 1)  # ties
        f[rng.integers(1000)] = np.nan
        st = _state_args(algo, pop)
        sp, alive, keys, _, best_f, last_imp, _, _ = so.speciate(cfg, *st)
        ff = worst_to_finite(sanitize_fitness(tf.constant(f)))
        u = tf.random.stateless_uniform([1000, 5], [g, 1])
        args = (sp, alive, keys, best_f, last_imp, ff, algo.member_key.read_value(), algo.generation.read_value(), u)
        for (ref, op), kw in zip(pairs, _PLAN_VARIANTS):
            r, o = ref(*args), op(*args)
            for name, a, b in zip(["size", "alive", "fit", "best_f", "last_imp", "extinct", "spawn", "p1", "p2",
                                   "elite"], r, o):
                np.testing.assert_array_equal(b.numpy(), a.numpy(), err_msg=f"gen {g} {kw} {name}")
            assert int(o[6].numpy().sum()) == 1000 or bool(o[5].numpy())
            stagnated += int(alive.numpy().sum() - o[1].numpy().sum())
            extinct += int(o[5].numpy())
        algo.tell(pop, tf.constant(f))
    assert stagnated > 0  # stagnation removed species in some variant


@needs_op
@pytest.mark.parametrize("keys", ["duplicate", "wide"])
def test_plan_member_order_with_ties_signed_zeros_and_key_ranges(keys):
    """The kernel's member order (species, fitness descending, genome id
    descending, index) decides elites and parents: equal to plan_reference
    with many fitness ties, -0.0 next to +0.0, negative fitness, repeated
    genome ids, and ids spanning more than 2^40."""
    P, S = 1000, _xor_cfg().max_species
    rng = np.random.default_rng(11 if keys == "duplicate" else 12)
    f = rng.choice(np.array([-0.0, 0.0, 1.5, -2.25, 3.0, 1e-30, -1e-30], np.float32), P)
    spread = rng.random(P) < 0.3
    f[spread] = rng.normal(size=int(spread.sum())).astype(np.float32)
    if keys == "duplicate":
        mk = rng.integers(0, 40, P).astype(np.int64)
    else:
        mk = rng.integers(-2**41, 2**41, P).astype(np.int64)
    sp = rng.integers(0, 8, P).astype(np.int32)
    u = rng.random((P, 5)).astype(np.float32)
    args = (sp, np.arange(S) < 8, np.arange(S, dtype=np.int64), np.full(S, -np.inf, np.float32),
            np.zeros(S, np.int64), tf.constant(f), mk, np.int64(3), u)
    for kw in _PLAN_VARIANTS:
        cfg = _xor_cfg(**kw)
        r = so.plan(cfg, *args, use_op=False)
        o = so.plan(cfg, *args, use_op=True)
        for name, a, b in zip(["size", "alive", "fit", "best_f", "last_imp", "extinct", "spawn", "p1", "p2", "elite"],
                              r, o):
            np.testing.assert_array_equal(b.numpy(), a.numpy(), err_msg=f"{kw} {name}")


def test_dispatcher_uses_reference_under_xla_and_when_disabled():
    seen = {}

    @tf.function(jit_compile=True, autograph=False)
    def f(x):
        seen["xla"] = kernels.kernel("TfevoNeatSpeciate") is not None
        return x

    f.get_concrete_function(tf.TensorSpec([], tf.float32))  # trace only
    assert seen["xla"] is False
    with pytest.raises(RuntimeError, match="TfevoNeatSpeciate"):
        @tf.function(jit_compile=True, autograph=False)
        def g(x):
            kernels.kernel("TfevoNeatSpeciate", True)
            return x

        g.get_concrete_function(tf.TensorSpec([], tf.float32))
    assert kernels.kernel("TfevoNeatSpeciate", False) is None


@needs_op
def test_bad_shapes_are_named():
    cfg = NEATConfig(num_inputs=2, num_outputs=1, pop_size=4, max_nodes=6, max_conns=8, max_species=3)
    nodes = tf.fill([4, 6, 5], np.nan)
    conns = tf.fill([4, 8, 5], np.nan)
    good = [nodes, conns, tf.fill([3, 6, 5], np.nan), tf.fill([3, 8, 5], np.nan), tf.zeros([3], tf.bool),
            tf.zeros([3], tf.int64), tf.zeros([3], tf.int64), tf.zeros([3]), tf.zeros([3], tf.int64),
            tf.constant(0, tf.int64), tf.constant(0, tf.int64)]
    bad = list(good)
    bad[2] = tf.fill([2, 6, 5], np.nan)
    with pytest.raises(tf.errors.InvalidArgumentError, match="rep_nodes"):
        so.speciate(cfg, *bad, use_op=True)
    bad = list(good)
    bad[1] = tf.fill([3, 8, 5], np.nan)
    with pytest.raises(tf.errors.InvalidArgumentError, match="conns"):
        so.speciate(cfg, *bad, use_op=True)


_CHILD = r"""
import sys, numpy as np, tensorflow as tf
tf.config.threading.set_intra_op_parallelism_threads(1)
from tfevo.neat import NEATConfig
from tfevo.neat import _speciate_op as so
d = np.load(sys.argv[1])
cfg = NEATConfig(num_inputs=3, num_outputs=2, pop_size=3000, max_nodes=10, max_conns=12, max_species=8)
out = so.speciate(cfg, *[d[f"a{i}"] for i in range(11)], use_op=True)
np.savez(sys.argv[2], *[o.numpy() for o in out])
"""


@pytest.mark.slow
@needs_op
@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs 2 CPUs to vary the thread count")
def test_result_does_not_depend_on_thread_count(tmp_path):
    """The same population speciated with 1 intra-op thread (a fresh
    process) and with this process's pool (pop 3000, so the distance passes
    are split over threads)."""
    rng = np.random.default_rng(11)
    S, P = 8, 3000
    cfg = NEATConfig(num_inputs=3, num_outputs=2, pop_size=P, max_nodes=10, max_conns=12, max_species=S)
    nodes, conns = _genomes(P, 10, 12, 3, rng)
    rn, rc = _genomes(S, 10, 12, 3, rng)
    active = np.arange(S) < 5
    rn[~active], rc[~active] = np.nan, np.nan
    args = [nodes, conns, rn, rc, active, np.arange(S, dtype=np.int64)[::-1].copy(), np.zeros(S, np.int64),
            np.zeros(S, np.float32), np.zeros(S, np.int64), np.int64(S), np.int64(3)]
    np.savez(tmp_path / "in.npz", **{f"a{i}": a for i, a in enumerate(args)})
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                                       os.environ.get("PYTHONPATH", "")]))
    subprocess.run([sys.executable, "-c", _CHILD, str(tmp_path / "in.npz"), str(tmp_path / "out.npz")], check=True,
                   env=env, timeout=300, capture_output=True)
    one = np.load(tmp_path / "out.npz")
    many = _assert_same(cfg, [tf.constant(a) for a in args], "thread test")
    for i, x in enumerate(many):
        np.testing.assert_array_equal(one[f"arr_{i}"], x)
    assert len(set(many[0].tolist())) >= 3
    assert ops.available("neat_speciate")


@needs_op
def test_bred_population_read_to_its_bred_widths():
    """A population the breed kernel made is packed only up to its bred widths
    (custom_ops/neat_bred_record.h): the same species, representatives and used
    slot counts as for a copy of it, which is read in full, and as the
    reference; a slice starting at the same address is not taken for it."""
    cfg = XOR().config(pop_size=200, max_nodes=32, max_conns=64)
    algo = NEAT(cfg, seed=4)
    prob = XOR()
    for _ in range(5):
        pop = algo.ask()
        algo.tell(pop, prob(pop, cfg))
    pop = algo.ask()
    state = [getattr(algo, n).read_value() for n in _STATE]
    copy = [tf.constant(pop.nodes.numpy()), tf.constant(pop.conns.numpy())]
    outs = []
    for nodes, conns in ([pop.nodes, pop.conns], copy):
        out, used = so.speciate_used(cfg, nodes, conns, *state, use_op=True)
        outs.append([x.numpy() for x in out] + [used.numpy()])
    for a, b in zip(*outs):
        np.testing.assert_array_equal(a, b)
    assert outs[0][-1][0] < cfg.max_nodes and outs[0][-1][1] < cfg.max_conns  # narrower than the padding
    _assert_same(cfg, [pop.nodes, pop.conns] + state, "bred population")
    sliced = [pop.nodes[:-3], pop.conns[:-3]]
    a, b = (so.speciate_used(cfg, *x, *state, use_op=True) for x in (sliced, [tf.constant(t.numpy()) for t in sliced]))
    for x, y in zip(list(a[0]) + [a[1]], list(b[0]) + [b[1]]):
        np.testing.assert_array_equal(x.numpy(), y.numpy())
