"""The NEAT breed kernel (custom_ops/neat_breed.cc) against its pure-TensorFlow
reference (tfevo.neat.reproduction.breed_reference): same children
bit for bit (structure, node keys, markers, attributes), counters and skipped
slot counts, on populations from real runs and random parents/elites."""

import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from tfevo import kernels
from tfevo.neat import NEAT, NEATConfig
from tfevo.neat import _breed_op as B
from tfevo.neat import neat as neat_mod
from tfevo.neat import operators as O
from tfevo.neat.genome import conn_valid, node_valid

pytestmark = pytest.mark.skipif(not kernels.built("TfevoNeatBreed"), reason="neat_breed kernel not built")

ACTS = ("sigmoid", "tanh", "relu", "identity", "gauss", "abs")
AGGS = ("sum", "product", "max", "min", "mean")
BASE = dict(num_inputs=3, num_outputs=2, pop_size=37, max_nodes=14, max_conns=30, node_add_prob=0.5,
            conn_add_prob=0.7, node_delete_prob=0.15, conn_delete_prob=0.2, activation_options=ACTS,
            activation_mutate_rate=0.3, aggregation_options=AGGS, aggregation_mutate_rate=0.2,
            response_mutate_rate=0.3, response_replace_rate=0.05, bias_replace_rate=0.1, weight_replace_rate=0.1,
            enabled_mutate_rate=0.1, compatibility_threshold=1.5)


def _run(cfg, gens, seed=0):
    algo = NEAT(cfg, seed=seed)
    rng = np.random.default_rng(seed)
    for _ in range(gens):
        pop = algo.ask()
        algo.tell(pop, rng.normal(size=cfg.pop_size).astype(np.float32))
    return algo


_FNS = {}


def _fns(cfg):
    key = repr(cfg)
    if key not in _FNS:
        _FNS[key] = tuple(tf.function(lambda *a, u=u: B.breed(cfg, *a, use_op=u), autograph=False,
                                      reduce_retracing=True) for u in (False, True))
    return _FNS[key]


def _breed_both(cfg, nodes, conns, seed, elite_frac=0.1, nk=None, nm=None):
    """Both implementations on the used slot range (as NEAT._breed slices it)
    with the same random parents, elites and random numbers."""
    P = cfg.pop_size
    rng = np.random.default_rng(seed)
    wn = min(int(O.used_width(node_valid(nodes))) + 1, cfg.max_nodes)
    wc = min(int(O.used_width(conn_valid(conns))) + 3, cfg.max_conns)
    args = (nodes[:, :wn], conns[:, :wc], tf.constant(rng.integers(0, P, P), tf.int32),
            tf.constant(rng.integers(0, P, P), tf.int32), tf.constant(rng.random(P) < elite_frac),
            O.crossover_words(P, wn, wc, tf.constant([seed, 1], tf.int64)),
            O.mutation_uniforms(cfg, P, wn, wc, tf.constant([seed, 2], tf.int64)),
            tf.constant(1000 if nk is None else nk, tf.int64), tf.constant(5000 if nm is None else nm, tf.int64))
    ref, op = _fns(cfg)
    return [x.numpy() for x in ref(*args)], [x.numpy() for x in op(*args)]


def _has_avx():
    try:
        return " avx " in open("/proc/cpuinfo").read().replace("\n", " ")
    except OSError:
        return False


EXACT = _has_avx()  # the kernel matches TensorFlow's AVX packet log1p/cos bit for bit


def _assert_same(r, o):
    for a, b in zip(r, o):
        if EXACT or a.dtype != np.float32:
            np.testing.assert_array_equal(a, b)  # NaN == NaN here; bit-identical otherwise
        else:  # normals from scalar log1p/cos: a few ulp
            np.testing.assert_array_equal(np.isnan(a), np.isnan(b))
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def _assert_consistent_markers(conns):
    """New markers: one pair per marker across the population."""
    c = conns.reshape(-1, 5)
    c = c[~np.isnan(c[:, 0])]
    seen = {}
    for a, b, m in c[:, [0, 1, 4]]:
        seen.setdefault(m, set()).add((a, b))
    assert all(len(v) == 1 for v in seen.values())


@pytest.mark.parametrize("name,kw", [
    ("feedforward", {}),
    ("recurrent", dict(feed_forward=False)),
    ("surer_shared_splits_uniform_init", dict(structural_mutation_surer=True, share_split_innovations=True,
                                              weight_init_type="uniform", bias_init_type="uniform",
                                              response_init_type="uniform")),
    ("single_structural_surer", dict(single_structural_mutation=True, structural_mutation_surer=True,
                                     conn_delete_prob=0.7)),
    ("population_wide_markers", dict(per_generation_innovations=False, conn_delete_prob=0.7)),
    ("mutate_plus_replace_above_one", dict(weight_mutate_rate=0.8, weight_replace_rate=0.5, bias_mutate_rate=0.7,
                                           bias_replace_rate=0.9, bias_init_type="uniform")),
    ("enabled_rate_to_adds", dict(enabled_mutate_rate=0.05, enabled_rate_to_true_add=0.3,
                                  enabled_rate_to_false_add=1.2)),
])
def test_op_equals_reference_on_evolved_populations(name, kw):
    cfg = NEATConfig(**{**BASE, **kw})
    algo = _run(cfg, 3)
    nodes, conns = algo.ask()
    nk, nm = int(algo.next_node_key.numpy()), int(algo.next_marker.numpy())
    for seed in range(2):
        r, o = _breed_both(cfg, nodes, conns, seed, nk=nk, nm=nm)
        _assert_same(r, o)
        assert r[2] > nk and r[3] > nm  # new nodes and fresh markers were made
        assert not np.array_equal(np.isnan(r[1]), np.isnan(np.asarray(conns)))  # structure changed
        if not kw.get("share_split_innovations"):
            _assert_consistent_markers(r[1])


def test_op_equals_reference_slot_exhaustion_and_all_elites():
    cfg = NEATConfig(**{**BASE, "max_nodes": 7, "max_conns": 10, "node_add_prob": 0.9, "conn_add_prob": 0.9,
                        "node_delete_prob": 0.0, "conn_delete_prob": 0.0})
    algo = _run(cfg, 4)
    nodes, conns = algo.ask()
    r, o = _breed_both(cfg, nodes, conns, 7)
    _assert_same(r, o)
    assert r[4] > 0 and r[5] > 0  # both kinds of skip counted
    # every child an elite: copies of parent 1, nothing made
    r, o = _breed_both(cfg, nodes, conns, 8, elite_frac=1.1)
    _assert_same(r, o)
    assert (r[2], r[3], r[4], r[5]) == (1000, 5000, 0, 0)


@pytest.mark.parametrize("kw", [dict(conn_add_prob=0.0), dict(node_add_prob=0.0, feed_forward=False),
                                dict(pop_size=64, activation_mutate_rate=0.0, enabled_mutate_rate=0.0,
                                     weight_mutate_rate=0.0, weight_replace_rate=0.0),
                                # connections only through add-node's surer fallback on empty genomes
                                dict(initial_connection="unconnected", single_structural_mutation=True,
                                     structural_mutation_surer=True, conn_add_prob=0.0, node_add_prob=0.6)])
def test_op_equals_reference_on_fresh_and_random_genomes(kw):
    """Initial genomes and randomly scrambled ones (attributes anywhere in
    range, random slot order, holes), configs with steps switched off."""
    cfg = NEATConfig(**{**BASE, **kw})
    algo = NEAT(cfg, seed=3)
    nodes, conns = (np.array(x) for x in algo.ask())
    _assert_same(*_breed_both(cfg, tf.constant(nodes), tf.constant(conns), 1))
    rng = np.random.default_rng(4)
    P = cfg.pop_size
    conns[..., 3] = rng.normal(size=conns.shape[:2]) * 3
    nodes[:, cfg.num_inputs:, 1] = rng.normal(size=(P, nodes.shape[1] - cfg.num_inputs))
    perm = rng.permutation(6)  # shuffle the connection slots, leave holes
    conns[:, :6] = conns[:, perm]
    conns[rng.random(conns.shape[:2]) < 0.2] = np.nan
    _assert_same(*_breed_both(cfg, tf.constant(nodes), tf.constant(conns), 2))


def test_pair_markers_fresh_in_hash_order_existing_reused():
    """ops.pair_markers (the reference's marker step): a pair already in the
    population keeps its smallest marker, distinct new pairs get consecutive
    fresh markers in ascending (in, out) order, shared by all rows adding it
    (a repeated pair before a fresh one once shifted the fresh numbering)."""
    h = lambda a, b: a * 2**25 + b  # noqa: E731
    P = 7
    h_exist = np.full([P, 3], -1, np.int64)
    h_exist[0, :2] = [h(0, 2), h(1, 2)]
    h_exist[1, :2] = [h(1, 2), h(5, 2)]
    m_exist = np.full([P, 3], np.nan, np.float32)
    m_exist[0, :2] = [0.0, 3.0]
    m_exist[1, :2] = [1.0, 7.0]
    new = [h(1, 2), h(1, 2), h(3, 2), h(9, 2), h(4, 2), h(5, 2), h(9, 2)]
    ok = tf.constant([True, True, True, True, False, True, True])
    marker, nm = O.pair_markers((tf.constant(h_exist), tf.constant(h_exist >= 0), tf.constant(m_exist),
                                 tf.constant(new, tf.int64), ok), tf.constant(10, tf.int64))
    m = marker.numpy()
    assert int(nm) == 12
    assert m[0] == m[1] == 1.0 and m[5] == 7.0  # existing: smallest marker
    assert m[2] == 10.0 and m[3] == m[6] == 11.0  # fresh, ascending pair order


def test_neat_runs_bit_identical_with_and_without_the_kernel(monkeypatch):
    """Whole NEAT runs (tell traced with the kernel, then with the graph
    breed) give the same populations, keys, markers and counters."""
    cfg = NEATConfig(**{**BASE, "pop_size": 30})
    out = []
    for use in (True, False):
        monkeypatch.setattr(B, "use_breed_op", lambda use=use: use)
        neat_mod._TELL_CACHE.pop((repr(cfg), False), None)
        algo = _run(cfg, 6, seed=5)
        out.append([v.numpy() for v in (algo.nodes, algo.conns, algo.next_node_key, algo.next_marker,
                                         algo.member_species, algo.skipped_conn_slots)])
    neat_mod._TELL_CACHE.pop((repr(cfg), False), None)
    _assert_same(*out)


def test_bred_widths_equal_reference_widths():
    rng = np.random.default_rng(0)
    for P, N, C in ((5, 9, 17), (40, 32, 64)):
        nodes = np.full([P, N, 5], np.nan, np.float32)
        conns = np.full([P, C, 5], np.nan, np.float32)
        nodes[rng.random([P, N]) < 0.2, 0] = 1.0
        conns[rng.random([P, C]) < 0.1, 0] = 1.0
        for n, c in ((nodes, conns), (nodes[:, :, :] * np.nan, conns), (nodes, conns * np.nan)):
            want = [min(int(O.used_width(node_valid(n))) + 1, N), min(int(O.used_width(conn_valid(c))) + 3, C)]
            assert B.bred_widths(n, c).numpy().tolist() == want


def test_speciation_kernels_used_slots_give_the_bred_widths():
    """The used slot counts the speciation kernel finds in its packing pass,
    through TfevoNeatBreedShapes, equal TfevoNeatBreedWidths's own scan (and
    its draw shapes) on scattered, non-compact rows, rows valid only in the
    input slots, empty and full genomes."""
    from tfevo.neat import _speciate_op as so
    from tfevo.neat.genes import attr_columns

    if not kernels.built("TfevoNeatSpeciate"):
        pytest.skip("neat_speciate kernel not built")
    rng = np.random.default_rng(1)
    for P, N, C, I, pn, pc in ((5, 9, 17, 3, 0.2, 0.1), (70, 32, 64, 2, 0.05, 0.03), (9, 6, 4, 6, 0.5, 1.0),
                               (4, 8, 8, 2, 0.0, 0.0)):
        cfg = NEATConfig(num_inputs=I, num_outputs=1, pop_size=P, max_nodes=max(N, I + 1), max_conns=C,
                         initial_connection="unconnected")
        _, kn, _, kc = attr_columns(cfg)
        nodes = np.full([P, N, 5], np.nan, np.float32)
        conns = np.full([P, C, 5], np.nan, np.float32)
        nodes[rng.random([P, N]) < pn, 0] = 1.0
        conns[rng.random([P, C]) < pc, 0] = 1.0
        S = 4
        st = (np.full([S, N, 5], np.nan, np.float32), np.full([S, C, 5], np.nan, np.float32), np.zeros(S, bool),
              np.full(S, -1, np.int64), np.zeros(S, np.int64), np.full(S, -np.inf, np.float32), np.zeros(S, np.int64),
              np.int64(0), np.int64(0))
        _, used = so.speciate_used(cfg, nodes, conns, *st, use_op=True)
        want = kernels.kernel("TfevoNeatBreedWidths", True)(nodes, conns, node_extra=1, conn_extra=3, kn=kn, kc=kc)
        got = kernels.kernel("TfevoNeatBreedShapes", True)(used, node_width=N, conn_width=C, pop_size=P,
                                                            node_extra=1, conn_extra=3, kn=kn, kc=kc)
        for g, w in zip(got, want):
            assert g.numpy().tolist() == w.numpy().tolist()
    with pytest.raises(tf.errors.InvalidArgumentError, match="used"):
        kernels.kernel("TfevoNeatBreedShapes", True)(tf.constant([3, 99]), node_width=8, conn_width=8, pop_size=4,
                                                     node_extra=1, conn_extra=3, kn=2, kc=2)


def test_dispatch_uses_reference_under_xla_and_bad_inputs_raise():
    cfg = NEATConfig(**BASE)
    seen = []

    @tf.function(jit_compile=True, autograph=False)
    def f(x):
        seen.append(B.use_breed_op())
        return x + 1

    f(tf.constant(1.0))
    assert seen == [False] and B.use_breed_op()
    algo = NEAT(cfg, seed=0)
    nodes, conns = algo.ask()
    P = cfg.pop_size
    n, c = nodes[:, :6], conns[:, :9]
    good = dict(p1=tf.zeros([P], tf.int32), p2=tf.zeros([P], tf.int32), el=tf.zeros([P], tf.bool),
                words=O.crossover_words(P, 6, 9, tf.constant([0, 1], tf.int64)),
                u=O.mutation_uniforms(cfg, P, 6, 9, tf.constant([0, 2], tf.int64)))
    call = lambda **kw: B.breed(cfg, n, c, *({**good, **kw}.values()), tf.constant(9, tf.int64),  # noqa: E731
                                tf.constant(6, tf.int64), use_op=True)
    call()
    with pytest.raises(tf.errors.InvalidArgumentError, match="parent index out of range"):
        call(p1=tf.fill([P], P))
    with pytest.raises(tf.errors.InvalidArgumentError, match="u_all must be"):
        call(u=good["u"][:, :-1])
    with pytest.raises(tf.errors.InvalidArgumentError, match="words must be"):
        call(words=good["words"][:, :0])


_THREADS_SCRIPT = r"""
import sys, numpy as np, tensorflow as tf
tf.config.threading.set_intra_op_parallelism_threads(int(sys.argv[1]))
from tfevo.neat import NEATConfig, _breed_op as B, operators as O
cfg = NEATConfig(num_inputs=3, num_outputs=2, pop_size=3000, max_nodes=12, max_conns=24, node_add_prob=0.5,
                 conn_add_prob=0.7, node_delete_prob=0.1, conn_delete_prob=0.1)
from tfevo.neat import NEAT
nodes, conns = NEAT(cfg, seed=0).ask()
rng = np.random.default_rng(0)
P = cfg.pop_size
out = B.breed_population(cfg, nodes, conns, tf.constant(rng.integers(0, P, P), tf.int32),
                         tf.constant(rng.integers(0, P, P), tf.int32), tf.constant(rng.random(P) < 0.05),
                         tf.constant([1, 2], tf.int64), tf.constant([3, 4], tf.int64), tf.constant(9, tf.int64),
                         tf.constant(6, tf.int64))
np.savez(sys.argv[2], *[x.numpy() for x in out])
"""


@pytest.mark.slow
def test_result_does_not_depend_on_thread_count(tmp_path):
    import os
    import subprocess
    import sys

    script = tmp_path / "run.py"
    script.write_text(_THREADS_SCRIPT)
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    outs = []
    for threads in (1, 4):
        f = tmp_path / f"out{threads}.npz"
        subprocess.run([sys.executable, str(script), str(threads), str(f)], check=True, env=env, timeout=300)
        z = np.load(f)
        outs.append([z[k] for k in sorted(z.files)])
    _assert_same(*outs)



def _whole(cfg, nodes, conns, p1, p2, el, use_op):
    """NEAT._breed's default path: the kernels (bred widths, Philox draws,
    breed kernel) or the graph reference on the sliced used range."""
    s1, s2 = tf.constant([4, 1], tf.int64), tf.constant([4, 2], tf.int64)
    nk, nm = tf.constant(900, tf.int64), tf.constant(4000, tf.int64)
    if use_op:
        return B.breed_population(cfg, nodes, conns, p1, p2, el, s1, s2, nk, nm)
    P = cfg.pop_size
    wn = tf.minimum(O.used_width(node_valid(nodes)) + 1, cfg.max_nodes)
    wc = tf.minimum(O.used_width(conn_valid(conns)) + 3, cfg.max_conns)
    return B.breed(cfg, nodes[:, :wn], conns[:, :wc], p1, p2, el, O.crossover_words(P, wn, wc, s1),
                   O.mutation_uniforms(cfg, P, wn, wc, s2), nk, nm, use_op=False)


def test_neat_run_with_the_breed_kernel_is_the_references(monkeypatch):
    """A NEAT run (ask, evaluate, tell) breeding with the kernel equals the run with the reference."""
    cfg = NEATConfig(**{**BASE, "pop_size": 40, "conn_delete_prob": 0.6})
    out = []
    for use in (True, False):
        monkeypatch.setattr(B, "use_breed_op", lambda use=use: use)
        neat_mod._TELL_CACHE.pop((repr(cfg), False), None)
        algo = _run(cfg, 8, seed=9)
        out.append([v.numpy() for v in (algo.nodes, algo.conns, algo.next_node_key, algo.next_marker,
                                         algo.member_species, algo.skipped_conn_slots)])
    neat_mod._TELL_CACHE.pop((repr(cfg), False), None)
    _assert_same(*out)


def test_neat_run_with_slots_running_out_matches_reference(monkeypatch):
    """A run whose genomes fill every node and connection slot: the kernel's
    add-node decisions made from its recorded row counts (parents it bred
    itself) skip and count exactly as the reference's scans do."""
    cfg = NEATConfig(**{**BASE, "pop_size": 30, "max_nodes": 8, "max_conns": 13, "node_add_prob": 0.8,
                        "conn_add_prob": 0.8, "node_delete_prob": 0.05, "conn_delete_prob": 0.05})
    out = []
    for use in (True, False):
        monkeypatch.setattr(B, "use_breed_op", lambda use=use: use)
        neat_mod._TELL_CACHE.pop((repr(cfg), False), None)
        algo = _run(cfg, 10, seed=2)  # a seed whose run skips both kinds
        out.append([v.numpy() for v in (algo.nodes, algo.conns, algo.next_node_key, algo.next_marker,
                                         algo.skipped_node_slots, algo.skipped_conn_slots)])
    neat_mod._TELL_CACHE.pop((repr(cfg), False), None)
    assert out[1][4] > 0 and out[1][5] > 0  # both kinds of skip happened
    _assert_same(*out)


@pytest.mark.parametrize("pop", [37, 4000])  # 4000: outputs of >= 2 MB (the kernel's 2 MB-page buffers)
def test_reused_outputs_equal_reference_and_held_outputs_stay(pop):
    """The kernel writes a generation into one of its earlier outputs once
    nothing else references it, writing only the bred rows and the NaN rows up
    to that output's old bred width.  A sequence of calls whose bred widths
    first cover every slot and then shrink (so a reused output holds genes
    past the new widths) gives the reference's children every time; an output
    still held by the caller is never written again."""
    cfg = NEATConfig(**{**BASE, "pop_size": pop})
    algo = _run(cfg, 3) if pop < 1000 else NEAT(cfg, seed=2)
    nodes, conns = (np.asarray(x) for x in algo.ask())
    P, N, C = pop, cfg.max_nodes, cfg.max_conns
    sig = [tf.TensorSpec([P, None, 5], tf.float32)] * 2 + [tf.TensorSpec([P], tf.int32)] * 2 + [
        tf.TensorSpec([P], tf.bool), tf.TensorSpec([P, None], tf.int32), tf.TensorSpec([P, None], tf.float32),
        tf.TensorSpec([], tf.int64), tf.TensorSpec([], tf.int64)]
    op = tf.function(lambda *a: B.breed(cfg, *a, use_op=True), input_signature=sig, autograph=False)
    ref = tf.function(lambda *a: B.breed(cfg, *a, use_op=False), input_signature=sig, autograph=False)

    def args(seed, wn, wc):
        rng = np.random.default_rng(seed)
        return (tf.constant(nodes[:, :wn]), tf.constant(conns[:, :wc]), tf.constant(rng.integers(0, P, P), tf.int32),
                tf.constant(rng.integers(0, P, P), tf.int32), tf.constant(rng.random(P) < 0.1),
                O.crossover_words(P, wn, wc, tf.constant([seed, 1], tf.int64)),
                O.mutation_uniforms(cfg, P, wn, wc, tf.constant([seed, 2], tf.int64)),
                tf.constant(1000, tf.int64), tf.constant(5000, tf.int64))

    wn0 = min(int(O.used_width(node_valid(nodes))) + 1, N)
    wc0 = min(int(O.used_width(conn_valid(conns))) + 3, C)
    held, held_copy = None, None
    for k, (wn, wc) in enumerate([(N, C), (N, C), (wn0, wc0), (wn0, wc0), (N, wc0), (wn0, C), (wn0, wc0)]):
        a = args(k, wn, wc)
        out = op(*a)
        _assert_same([x.numpy() for x in ref(*a)], [x.numpy() for x in out])
        if k == 1:  # kept by the caller from here on: never written again
            held, held_copy = out[:2], [x.numpy() for x in out[:2]]
        del out
    for h, c in zip(held, held_copy):
        np.testing.assert_array_equal(h.numpy(), c)
