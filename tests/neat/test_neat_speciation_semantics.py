"""tfevo's speciation against neat-python's own ``DefaultSpeciesSet.speciate``
on the same genomes (tfevo's rows copied gene by gene into neat-python
genomes), on the reference and on the C++ kernel."""

import types
from itertools import count

import numpy as np
import pytest

from tfevo import kernels
from tfevo.neat import NEATConfig, to_neat_python
from tfevo.neat import _speciate_op as so

neat = pytest.importorskip("neat")

_USE_SP = [False] + ([True] if kernels.built("TfevoNeatSpeciate") else [])
I, O = 2, 1


def _np_genome(nodes, conns, key):
    """Rows of one tfevo genome as a neat-python DefaultGenome."""
    return to_neat_python(nodes, conns, NEATConfig(num_inputs=I, num_outputs=O), key)


def _neat_python_species(cfg, nodes, conns, rep_nodes, rep_conns, active, keys, next_key):
    """neat-python's species key of every genome (tfevo key + 1 = neat-python key)."""
    from neat.reporting import ReporterSet
    from neat.species import DefaultSpeciesSet, Species

    ss = DefaultSpeciesSet(types.SimpleNamespace(compatibility_threshold=cfg.compatibility_threshold), ReporterSet())
    ss.indexer = count(int(next_key) + 1)
    for s in np.nonzero(active)[0]:
        sp = Species(int(keys[s]) + 1, 0)
        sp.representative = _np_genome(rep_nodes[s], rep_conns[s], 10**6 + int(s))
        ss.species[int(keys[s]) + 1] = sp
    gcfg = types.SimpleNamespace(compatibility_disjoint_coefficient=cfg.compatibility_disjoint_coefficient,
                                 compatibility_weight_coefficient=cfg.compatibility_weight_coefficient)
    ss.speciate(types.SimpleNamespace(genome_config=gcfg), {p + 1: _np_genome(nodes[p], conns[p], p + 1)
                                                          for p in range(len(nodes))}, 0)
    return np.array([ss.genome_to_species[p + 1] - 1 for p in range(len(nodes))])


def _genome(N, C, output_bias, hidden=(), conns=()):
    """Rows of a genome: inputs 0, 1, output 2 (bias ``output_bias``), hidden
    nodes ``(key, bias)``, connections ``(in, out, weight)``."""
    n = np.full((N, 5), np.nan, np.float32)
    n[:I] = [[k, 0, 1, 0, 0] for k in range(I)]
    n[I] = [I, output_bias, 1, 0, 0]
    for j, (k, b) in enumerate(hidden):
        n[I + O + j] = [k, b, 1, 0, 0]
    c = np.full((C, 5), np.nan, np.float32)
    for j, (a, b, w) in enumerate(conns):
        c[j] = [a, b, 1, w, j]
    return n, c


@pytest.mark.parametrize("use_op", _USE_SP)
def test_a_genome_at_equal_distance_joins_the_lowest_species_key_as_neat_python(use_op):
    """Genomes without connections whose output bias equals two
    representatives' differ from both by one disjoint hidden node: the same
    distance to each.  neat-python compares its species in key order and
    keeps the first minimum, so they join the lower key, here the species in
    the higher slot (a newer species took a slot freed before it)."""
    N, C, S, P = 6, 4, 4, 10
    cfg = NEATConfig(num_inputs=I, num_outputs=O, pop_size=P, max_nodes=N, max_conns=C, max_species=S)
    rep_a = _genome(N, C, 0.0, hidden=[(10, 0.3)])   # slot 0, key 5
    rep_b = _genome(N, C, 0.0, hidden=[(11, -0.7)])  # slot 1, key 2
    rng = np.random.default_rng(0)
    pop = [rep_a, rep_b] + [_genome(N, C, 0.0) for _ in range(P - 2)]  # copies: the new representatives
    pop[5] = _genome(N, C, float(rng.normal()), hidden=[(12, 0.1)])  # equal distances too (2 disjoint)
    nodes = np.stack([g[0] for g in pop])
    conns = np.stack([g[1] for g in pop])
    rep_nodes = np.full((S, N, 5), np.nan, np.float32)
    rep_conns = np.full((S, C, 5), np.nan, np.float32)
    rep_nodes[0], rep_conns[0] = rep_a
    rep_nodes[1], rep_conns[1] = rep_b
    active = np.array([True, True, False, False])
    keys = np.array([5, 2, -1, -1], np.int64)
    want = _neat_python_species(cfg, nodes, conns, rep_nodes, rep_conns, active, keys, 6)
    assert (want[2:] == 2).all() and want[0] == 5 and want[1] == 2  # the tie goes to key 2
    out = so.speciate(cfg, nodes, conns, rep_nodes, rep_conns, active, keys, np.zeros(S, np.int64),
                      np.zeros(S, np.float64), np.zeros(S, np.int64), np.int64(6), np.int64(3), use_op=use_op)
    sp, got_keys = out[0].numpy(), out[2].numpy()
    np.testing.assert_array_equal(got_keys[sp], want)


@pytest.mark.parametrize("use_op", _USE_SP)
def test_speciation_equals_neat_python_on_small_genomes_with_many_ties(use_op):
    """Random small genomes (few hidden nodes and connections, values on a
    coarse grid, so distance ties are common) against random old
    representatives in shuffled slots: the same partition as neat-python's
    speciate, new species included."""
    N, C, S, P = 7, 5, 16, 40
    cfg = NEATConfig(num_inputs=I, num_outputs=O, pop_size=P, max_nodes=N, max_conns=C, max_species=S,
                     compatibility_threshold=1.5)
    rng = np.random.default_rng(1)

    def rand_genome():
        hid = [(int(k), float(rng.choice([0.0, 0.5]))) for k in rng.choice([10, 11, 12, 13], rng.integers(0, 3),
                                                                           replace=False)]
        pairs = [(a, I) for a in range(I)] + [(a, k) for a in range(I) for k, _ in hid]
        pick = rng.permutation(len(pairs))[:rng.integers(0, 3)]
        return _genome(N, C, float(rng.choice([0.0, 1.0])), hid,
                       [(*pairs[j], float(rng.choice([-1.0, 1.0]))) for j in pick])

    checked = 0
    for trial in range(6):
        pop = [rand_genome() for _ in range(P)]
        nodes, conns = np.stack([g[0] for g in pop]), np.stack([g[1] for g in pop])
        rep_nodes = np.full((S, N, 5), np.nan, np.float32)
        rep_conns = np.full((S, C, 5), np.nan, np.float32)
        slots = rng.permutation(S)[:3]
        keys = np.full(S, -1, np.int64)
        keys[slots] = rng.permutation(10)[:3]  # keys in no particular slot order
        for s in slots:
            rep_nodes[s], rep_conns[s] = rand_genome()
        active = keys >= 0
        want = _neat_python_species(cfg, nodes, conns, rep_nodes, rep_conns, active, keys, 10)
        out = so.speciate(cfg, nodes, conns, rep_nodes, rep_conns, active, keys, np.zeros(S, np.int64),
                          np.zeros(S, np.float64), np.zeros(S, np.int64), np.int64(10), np.int64(3), use_op=use_op)
        sp, got_keys = out[0].numpy(), out[2].numpy()
        if len(set(want)) <= S:  # neat-python has no species limit
            np.testing.assert_array_equal(got_keys[sp], want, err_msg=f"trial {trial}")
            checked += 1
    assert checked >= 4


def _weights_genome(N, C, rng):
    """Output 2 and hidden node 10, five connections, random float32 values."""
    pairs = [(0, 2), (1, 2), (0, 10), (1, 10), (10, 2)]
    return _genome(N, C, float(np.float32(rng.normal())), hidden=[(10, float(np.float32(rng.normal())))],
                   conns=[(a, b, float(np.float32(rng.normal()))) for a, b in pairs])


@pytest.mark.parametrize("use_op", _USE_SP)
def test_double_distances_decide_the_threshold_as_neat_python(use_op):
    """With ``distance_dtype="float64"`` a genome within float32 rounding of
    the threshold lands where neat-python (double distances of the same
    values) puts it; float32 distances put it on the other side for the pair
    picked here (the first of a seeded search where they differ)."""
    N, C, S, P = 6, 6, 4, 2
    rng = np.random.default_rng(5)
    none = (np.full((S, N, 5), np.nan, np.float32), np.full((S, C, 5), np.nan, np.float32), np.zeros(S, bool),
            np.full(S, -1, np.int64))
    for _ in range(200):
        pop = [_weights_genome(N, C, rng), _weights_genome(N, C, rng)]
        nodes, conns = np.stack([g[0] for g in pop]), np.stack([g[1] for g in pop])
        d64 = _np_genome(*pop[0], 1).distance(_np_genome(*pop[1], 2), types.SimpleNamespace(
            compatibility_disjoint_coefficient=1.0, compatibility_weight_coefficient=0.5))
        thr = float(np.nextafter(d64, np.inf))  # genome 2 joins genome 1's species in double
        species = {}
        for dtype in ("float32", "float64"):
            cfg = NEATConfig(num_inputs=I, num_outputs=O, pop_size=P, max_nodes=N, max_conns=C, max_species=S,
                             compatibility_threshold=thr, distance_dtype=dtype)
            out = so.speciate(cfg, nodes, conns, *none, np.zeros(S, np.int64), np.zeros(S, np.float64),
                              np.zeros(S, np.int64), np.int64(0), np.int64(0), use_op=use_op)
            species[dtype] = out[2].numpy()[out[0].numpy()]
        if species["float32"][0] != species["float32"][1]:
            break
    else:
        pytest.fail("no pair found where float32 distances cross the threshold")
    want = _neat_python_species(cfg, nodes, conns, *none, 0)
    assert want[0] == want[1]
    np.testing.assert_array_equal(species["float64"], want)
