"""neat-python's meaning of the config keys NEAT shares with it: initial
connectivity, the defaults of omitted optional keys, keys that must not be
silently ignored, the attribute-rate check and ``fitness_criterion``."""

import types

import numpy as np
import pytest
import tensorflow as tf

from tfevo.core import ConfigError
from tfevo.neat import NEAT, NEATConfig
from tfevo.neat.genome import initial_population

I, O, H = 3, 2, 2
INPUTS, OUTPUTS, HIDDEN = set(range(I)), set(range(I, I + O)), set(range(I + O, I + O + H))


def _genomes(mode, fraction=1.0, hidden=H, feed_forward=True, pop=16):
    cfg = NEATConfig(num_inputs=I, num_outputs=O, num_hidden=hidden, pop_size=pop, initial_connection=mode,
                     connection_fraction=fraction, feed_forward=feed_forward, max_conns=32)
    _, conns, _, _ = initial_population(cfg, tf.constant([3, 4], tf.int64))
    c = conns.numpy()
    out = []
    for p in range(pop):
        v = ~np.isnan(c[p, :, 0])
        assert v[:v.sum()].all(), "the initial connections fill the first slots"
        assert (c[p, v, 2] == 1.0).all(), "enabled_default = True"
        # genome p's hidden nodes have keys of its own (I+O+p*hidden+j): named here by j, as slot I+O+j
        own = lambda k: int(k) - p * hidden if k >= I + O else int(k)  # noqa: E731
        out.append({(own(a), own(b)) for a, b in c[p, v, :2]})
    return out


def _full(direct, hidden=H):
    ih = {(i, h) for i in INPUTS for h in range(I + O, I + O + hidden)}
    ho = {(h, o) for h in range(I + O, I + O + hidden) for o in OUTPUTS}
    io = {(i, o) for i in INPUTS for o in OUTPUTS}
    return ih | ho | (io if direct or hidden == 0 else set())


@pytest.mark.parametrize("mode, direct", [("full", False), ("full_nodirect", False), ("full_direct", True)])
def test_full_connectivity_as_neat_python(mode, direct):
    for g in _genomes(mode):
        assert g == _full(direct)
    # without hidden nodes every "full" connects inputs to outputs
    for g in _genomes(mode, hidden=0):
        assert g == _full(True, hidden=0)


def test_recurrent_full_genomes_also_hold_self_connections():
    for g in _genomes("full", feed_forward=False):
        assert g == _full(False) | {(n, n) for n in OUTPUTS | HIDDEN}


@pytest.mark.parametrize("mode, direct", [("partial", False), ("partial_nodirect", False), ("partial_direct", True)])
def test_partial_is_an_exact_random_subset(mode, direct):
    full = _full(direct)
    gs = _genomes(mode, fraction=0.5)
    k = int(round(len(full) * 0.5))
    assert all(g <= full and len(g) == k for g in gs)
    assert len({frozenset(g) for g in gs}) > 1, "each genome draws its own subset"


@pytest.mark.parametrize("mode, targets", [("fs_neat", OUTPUTS), ("fs_neat_nohidden", OUTPUTS),
                                           ("fs_neat_hidden", OUTPUTS | HIDDEN)])
def test_fs_neat_connects_one_random_input(mode, targets):
    gs = _genomes(mode)
    chosen = set()
    for g in gs:
        ins = {a for a, _ in g}
        assert len(ins) == 1 and ins <= INPUTS
        assert g == {(next(iter(ins)), t) for t in targets}
        chosen |= ins
    assert len(chosen) > 1, "the input is drawn per genome"


@pytest.mark.parametrize("mode", ["unconnected", "none"])
def test_unconnected(mode):
    assert all(g == set() for g in _genomes(mode))


def test_unknown_initial_connection_is_refused():
    with pytest.raises(ConfigError, match="initial_connection must be one of .*got 'fully'"):
        NEATConfig(initial_connection="fully")


# a neat-python 2.0 config file with only its required keys (and every section)
REQUIRED = """[NEAT]
pop_size = 20
fitness_criterion = max
fitness_threshold = 3.9
reset_on_extinction = False
no_fitness_termination = False
[DefaultGenome]
num_inputs = 2
num_outputs = 1
num_hidden = 0
feed_forward = True
compatibility_disjoint_coefficient = 1.0
compatibility_weight_coefficient = 0.5
conn_add_prob = 0.5
conn_delete_prob = 0.5
node_add_prob = 0.2
node_delete_prob = 0.2
activation_options = sigmoid
activation_mutate_rate = 0.0
aggregation_options = sum
aggregation_mutate_rate = 0.0
enabled_default = True
enabled_mutate_rate = 0.01
""" + "".join(f"{a}_{k} = {v}\n" for a, (m, sd, pw, mr, rr) in
              (("bias", (0.0, 1.0, 0.5, 0.7, 0.1)), ("response", (1.0, 0.0, 0.0, 0.0, 0.0)),
               ("weight", (0.0, 1.0, 0.5, 0.8, 0.1)))
              for k, v in (("init_mean", m), ("init_stdev", sd), ("mutate_power", pw), ("mutate_rate", mr),
                           ("replace_rate", rr), ("max_value", 30.0), ("min_value", -30.0))) + """
[DefaultSpeciesSet]
compatibility_threshold = 3.0
[DefaultStagnation]
[DefaultReproduction]
"""


def _write(tmp_path, text=REQUIRED, **keys):
    """``text`` with each of ``keys`` set (None: removed) in the section
    neat-python reads it from ([DefaultGenome] for tfevo's own fields)."""
    import configparser

    from tfevo.neat.config import NEAT_PYTHON_KEYS

    cp = configparser.ConfigParser()
    cp.read_string(text)
    home = {k: sec for sec, ks in NEAT_PYTHON_KEYS.items() for k in ks}
    for k, v in keys.items():
        sec = home.get(k, "DefaultGenome")
        if v is None:
            cp.remove_option(sec, k)
        else:
            cp.set(sec, k, str(v))
    path = tmp_path / "neat.cfg"
    with open(path, "w") as f:
        cp.write(f)
    return str(path)


def _neat_python_reads(path):
    """neat-python's own reading of the file: its Config after it built a first
    population from it, or the exception it raised doing so."""
    neat = pytest.importorskip("neat")
    try:
        config = neat.Config(neat.DefaultGenome, neat.DefaultReproduction, neat.DefaultSpeciesSet,
                             neat.DefaultStagnation, path)
        neat.Population(config)
        return config
    except Exception as e:  # noqa: BLE001 - neat-python raises plain Exceptions
        return e


def test_omitted_optional_keys_take_neat_python_defaults(tmp_path):
    c = NEATConfig.from_neat_python(_write(tmp_path))
    assert (c.elitism, c.species_elitism, c.min_species_size, c.max_stagnation, c.species_fitness_func,
            c.survival_threshold, c.initial_connection) == (0, 0, 1, 15, "mean", 0.2, "unconnected")
    # an omitted activation_default/aggregation_default is neat-python's 'random': the only option here
    assert (c.activation_default, c.aggregation_default) == ("sigmoid", "sum")
    c = NEATConfig.from_neat_python(_write(tmp_path, initial_connection="partial_direct 0.25",
                                           structural_mutation_surer="on", elitism=3))
    assert (c.initial_connection, c.connection_fraction, c.structural_mutation_surer, c.elitism) == \
        ("partial_direct", 0.25, True, 3)


@pytest.mark.parametrize("key, value", [("activation_default", "random"), ("enabled_default", "none"),
                                        ("time_constant_init_stdev", 0.5)])
def test_neat_python_keys_tfevo_does_not_model_are_refused_not_ignored(tmp_path, key, value):
    path = _write(tmp_path, **{key: value})
    assert not isinstance(_neat_python_reads(path), Exception), "a file neat-python reads"
    with pytest.raises(ConfigError, match=key):
        NEATConfig.from_neat_python(path)
    # their "off" value is fine
    if "time_constant" in key:
        NEATConfig.from_neat_python(_write(tmp_path, **{key: 0.0}))


def test_a_file_with_every_key_reads_as_neat_python_reads_it(tmp_path):
    from tfevo.neat.config import NEAT_PYTHON_KEYS

    path = _write(tmp_path, elitism=1, species_elitism=1, max_stagnation=7, survival_threshold=0.3,
                  min_species_size=2, species_fitness_func="median", num_hidden=2,
                  initial_connection="partial_nodirect 0.5", activation_default="tanh", aggregation_default="sum",
                  activation_options="sigmoid tanh", bias_init_type="Uniform", feed_forward="FALSE",
                  reset_on_extinction="yes", seed=3)
    ref = _neat_python_reads(path)
    c = NEATConfig.from_neat_python(path)
    parts = [ref, ref.genome_config, ref.species_set_config, ref.stagnation_config, ref.reproduction_config]
    for sec, part in zip(NEAT_PYTHON_KEYS, parts):
        for k in NEAT_PYTHON_KEYS[sec]:
            if not hasattr(c, k) or k in ("single_structural_mutation", "structural_mutation_surer"):
                continue  # not a NEATConfig field (seed, time_constant_*), or read as neat-python 2.0 runs it
            want = getattr(part, k)
            got = getattr(c, k)
            if k == "bias_init_type":
                want = want.lower()
            elif k == "enabled_default":
                want = want.lower() in ("1", "on", "yes", "true")  # BoolAttribute.init_value's words
            elif k.endswith("_options"):
                want, got = list(want), list(got)
            assert got == want, (sec, k, got, want)
    assert (c.connection_fraction, c.feed_forward, c.reset_on_extinction) == (0.5, False, True)


def _required_keys():
    from tfevo.neat.config import NEAT_PYTHON_KEYS

    return [(sec, k) for sec, ks in NEAT_PYTHON_KEYS.items() for k, required in ks.items() if required]


@pytest.mark.parametrize("sec, key", _required_keys())
def test_a_missing_required_key_is_refused_as_neat_python_does(tmp_path, sec, key):
    path = _write(tmp_path, **{key: None})
    assert isinstance(_neat_python_reads(path), Exception), "neat-python refuses the file"
    with pytest.raises(ConfigError, match=rf"\[{sec}\] {key} is missing"):
        NEATConfig.from_neat_python(path)
    # a required key given as an override is not missing
    if key == "compatibility_threshold":
        assert NEATConfig.from_neat_python(path, compatibility_threshold=2.5).compatibility_threshold == 2.5


@pytest.mark.parametrize("sec, key, value, match", [
    ("NEAT", "pop_sizes", "20", r"\[NEAT\] pop_sizes is not a key .*did you mean 'pop_size'"),
    ("DefaultReproduction", "elitsm", "2", r"\[DefaultReproduction\] elitsm is not a key .*'elitism'"),
    ("DefaultStagnation", "compatibility_threshold", "2",
     r"\[DefaultStagnation\] compatibility_threshold: neat-python reads .* in \[DefaultSpeciesSet\]"),
    ("DefaultSpeciesSet", "max_stagnation", "2", r"reads max_stagnation in \[DefaultStagnation\]"),
    ("NEAT", "reset_on_extinction", "maybe", r"\[NEAT\] reset_on_extinction = 'maybe' is not accepted; use one of 1"),
    ("NEAT", "no_fitness_termination", "nope", r"\[NEAT\] no_fitness_termination = 'nope'"),
    ("DefaultGenome", "feed_forward", "yes", r"\[DefaultGenome\] feed_forward = 'yes' is not accepted; use one of "
                                             r"true, false"),
    ("DefaultGenome", "enabled_default", "flase", r"\[DefaultGenome\] enabled_default = 'flase'"),
    ("DefaultGenome", "num_inputs", "two", r"\[DefaultGenome\] num_inputs must be an integer, got 'two'"),
    ("DefaultSpeciesSet", "compatibility_threshold", "-1",
     r"\[DefaultSpeciesSet\] compatibility_threshold must be > 0.0, got -1.0"),
    ("DefaultGenome", "activation_options", "foo",
     r"\[DefaultGenome\] activation_options: unknown activation 'foo'; known: sigmoid, tanh"),
    ("DefaultGenome", "initial_connection", "partial_direct 1.5",
     r"\[DefaultGenome\] initial_connection = partial_direct 1.5: connection_fraction must be in \[0.0, 1.0\]"),
])
def test_unknown_keys_and_bad_values_are_refused_as_neat_python_does(tmp_path, sec, key, value, match):
    import configparser

    cp = configparser.ConfigParser()
    cp.read_string(REQUIRED)
    cp.set(sec, key, value)
    path = tmp_path / "neat.cfg"
    with open(path, "w") as f:
        cp.write(f)
    # neat-python takes a negative threshold, and an unknown activation until a node gets it
    if (sec, key) not in (("DefaultSpeciesSet", "compatibility_threshold"), ("DefaultGenome", "activation_options")):
        assert isinstance(_neat_python_reads(str(path)), Exception), "neat-python refuses the file"
    with pytest.raises(ConfigError, match=match):
        NEATConfig.from_neat_python(str(path))


def test_missing_sections_and_unknown_genome_keys_are_refused(tmp_path):
    path = tmp_path / "neat.cfg"
    path.write_text(REQUIRED.replace("[DefaultStagnation]\n", ""))
    assert isinstance(_neat_python_reads(str(path)), Exception)
    with pytest.raises(ConfigError, match=r"no \[DefaultStagnation\] section"):
        NEATConfig.from_neat_python(str(path))
    # neat-python ignores a key [DefaultGenome] does not read (a misspelt optional key
    # then silently keeps its default); tfevo names it
    path = _write(tmp_path, initial_conection="full")
    assert not isinstance(_neat_python_reads(path), Exception)
    with pytest.raises(ConfigError, match=r"\[DefaultGenome\] initial_conection .*'initial_connection'"):
        NEATConfig.from_neat_python(path)
    # several activation options and no activation_default: neat-python draws one per node
    with pytest.raises(ConfigError, match=r"activation_default is missing, which neat-python reads as 'random'"):
        NEATConfig.from_neat_python(_write(tmp_path, activation_options="sigmoid tanh"))
    # tfevo's own fields may stand in any section
    assert NEATConfig.from_neat_python(_write(tmp_path, max_nodes=40)).max_nodes == 40


def test_partial_without_fraction_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="needs a fraction"):
        NEATConfig.from_neat_python(_write(tmp_path, initial_connection="partial"))


@pytest.mark.parametrize("init_type, rate, replace", [("uniform", 0.7, 0.5), ("gaussian", 0.6, 0.9),
                                                      ("uniform", 0.2, 0.3)])
def test_float_attribute_mutation_is_distributed_as_neat_python(init_type, rate, replace):
    """A gene's value after one attribute mutation (perturb, replace or keep,
    clamped) has neat-python's FloatAttribute.mutate_value distribution, also
    when mutate_rate + replace_rate > 1, which neat-python accepts (a gene is
    then replaced with probability 1 - mutate_rate): two-sample KS test over
    20000 genes each, with the start value near the clamp so the clamped mass
    shows too."""
    pytest.importorskip("neat")
    from neat.attributes import FloatAttribute
    from scipy.stats import ks_2samp

    from tfevo.neat.genes import mutate_attributes

    kw = dict(bias_init_mean=0.5, bias_init_stdev=1.5, bias_init_type=init_type, bias_min_value=-2.0,
              bias_max_value=2.0, bias_mutate_power=0.8, bias_mutate_rate=rate, bias_replace_rate=replace)
    cfg = NEATConfig(num_inputs=1, num_outputs=1, pop_size=2, max_nodes=2, max_conns=1, response_mutate_rate=0.0,
                     weight_mutate_rate=0.0, weight_replace_rate=0.0, enabled_mutate_rate=0.0, **kw)
    n, start = 20000, 1.7
    nodes = np.zeros([n, 2, 5], np.float32)
    nodes[:, :, 0] = [0, 1]
    nodes[:, 1, 1] = start
    nodes[:, :, 2] = 1.0
    conns = np.full([n, 1, 5], np.nan, np.float32)
    out, _ = mutate_attributes(cfg, tf.constant(nodes), tf.constant(conns), tf.ones([n], tf.bool),
                               tf.constant([5, 6], tf.int64))
    ours = out.numpy()[:, 1, 1].astype(np.float64)
    import random

    random.seed(0)
    attr = FloatAttribute("bias")
    ns = types.SimpleNamespace(**kw)
    ref = np.array([attr.mutate_value(start, ns) for _ in range(n)], np.float32).astype(np.float64)  # as stored
    assert ks_2samp(ours, ref).pvalue > 1e-3
    for v in (start, 2.0):  # kept, clamped at the top
        p_ref, p_ours = (np.abs(ref - v) < 1e-6).mean(), (np.abs(ours - v) < 1e-6).mean()
        assert abs(p_ref - p_ours) < 4.5 * np.sqrt(p_ref * (1 - p_ref) * 2 / n) + 1e-9, (v, p_ref, p_ours)


@pytest.mark.parametrize("criterion, expect", [("max", 1), ("mean", 4), ("min", 5)])
def test_run_stops_on_the_fitness_criterion(criterion, expect):
    cfg = NEATConfig(pop_size=4, fitness_criterion=criterion, fitness_threshold=1.0)
    algo = NEAT(cfg, seed=0)
    calls = []

    def evaluate(pop):  # generation g: [2, a, a, a] with a = (g-1)/4: max >= 1 at once, mean at g=4, min at g=5
        g = len(calls) + 1
        calls.append(g)
        return tf.constant([2.0, 0.25 * (g - 1), 0.25 * (g - 1), 0.25 * (g - 1)])

    r = algo.run(evaluate, 10)
    assert r["solved"] and r["generations"] == expect


def test_crossover_disables_a_homologous_gene_disabled_in_a_parent_three_times_in_four():
    from tfevo.neat.crossover import crossover

    P = 4000
    cfg = NEATConfig(num_inputs=2, num_outputs=1, pop_size=P)
    nodes, conns, _, _ = initial_population(cfg, tf.constant([1, 2], tf.int64))
    c = conns.numpy()  # two connections, markers 0 and 1, both enabled
    c1, c2 = c.copy(), c.copy()
    c2[:, 0, 2] = 0.0  # marker 0: enabled in parent 1, disabled in parent 2
    c1[:, 1, 2] = c2[:, 1, 2] = 0.0  # marker 1: disabled in both
    _, cc = crossover(nodes, tf.constant(c1), nodes, tf.constant(c2), tf.constant([7, 8], tf.int64))
    en = cc.numpy()[:, :2, 2]
    # neat-python: the inherited state (1/2 disabled), then disabled with probability 3/4: 7/8 disabled
    assert abs((en[:, 0] == 0).mean() - 0.875) < 0.025
    assert (en[:, 1] == 0).all()
    _, cc = crossover(nodes, conns, nodes, conns, tf.constant([7, 8], tf.int64))
    assert (cc.numpy()[:, :2, 2] == 1).all(), "genes enabled in both parents stay enabled"


@pytest.mark.parametrize("keys, single, surer", [
    ({}, True, True),  # neat-python 2.0 keeps the default string 'false', which its mutation code tests as true
    ({"single_structural_mutation": "false"}, False, False),
    ({"single_structural_mutation": "True"}, True, True),
    ({"single_structural_mutation": "false", "structural_mutation_surer": "true"}, False, True),
    ({"structural_mutation_surer": "false"}, True, False),
])
def test_single_structural_mutation_and_surer_as_neat_python_runs_them(tmp_path, keys, single, surer):
    c = NEATConfig.from_neat_python(_write(tmp_path, **keys))
    assert (c.single_structural_mutation, c.structural_mutation_surer) == (single, surer)


def test_single_structural_mutation_must_be_a_bool(tmp_path):
    with pytest.raises(ConfigError, match=r"\[DefaultGenome\] single_structural_mutation = 'maybe' is not "
                                          r"accepted; use one of true, false"):
        NEATConfig.from_neat_python(_write(tmp_path, single_structural_mutation="maybe"))


def _mutated(cfg, steps=1, seed=0):
    from tfevo.neat.mutation import mutate

    nodes, conns, nk, nm = initial_population(cfg, tf.constant([1, 2], tf.int64))
    nk, nm = tf.constant(int(nk), tf.int64), tf.constant(int(nm), tf.int64)
    out = []
    for k in range(steps):
        nodes, conns, nk, nm, *_ = mutate(cfg, nodes, conns, tf.ones([cfg.pop_size], tf.bool),
                                          tf.constant([seed, k], tf.int64), nk, nm)
        n, c = nodes.numpy(), conns.numpy()
        cv = ~np.isnan(c[..., 0])
        out.append(np.stack([(~np.isnan(n[..., 0])).sum(1), cv.sum(1), (cv & (c[..., 2] > 0.5)).sum(1)], 1))
    return out


def test_single_structural_mutation_draws_at_most_one_with_its_share_of_the_probability():
    P = 4000
    cfg = NEATConfig(num_inputs=2, num_outputs=3, pop_size=P, max_nodes=16, max_conns=32, initial_connection="full",
                     single_structural_mutation=True)
    n, c, _ = _mutated(cfg)[0].T  # from 5 nodes and 6 connections
    added, deleted = n == 6, c == 5
    assert not (added & (c == 7)).any(), "add node (+2 connections) never together with delete connection"
    tol = 4.5 * np.sqrt(0.25 / P)
    assert abs(added.mean() - 0.2 / 1.4) < tol  # node_add_prob / (sum of the four probabilities)
    assert abs(deleted.mean() - 0.5 / 1.4) < tol
    n, c, _ = _mutated(NEATConfig(**{**cfg.__dict__, "single_structural_mutation": False}))[0].T
    assert (c == 7).any() and abs((n == 6).mean() - 0.2 * 0.8) < tol  # independent: add node, not deleted again


@pytest.mark.parametrize("surer", [True, False])
def test_add_node_on_a_genome_without_connections_adds_a_connection_when_surer(surer):
    cfg = NEATConfig(num_inputs=2, num_outputs=3, pop_size=64, initial_connection="unconnected", node_add_prob=1.0,
                     node_delete_prob=0.0, conn_add_prob=0.0, conn_delete_prob=0.0,
                     structural_mutation_surer=surer, single_structural_mutation=True)
    n, c, e = _mutated(cfg)[0].T
    assert (n == 5).all()
    assert (c == (1 if surer else 0)).all() and (e == c).all()


def test_structural_mutation_statistics_agree_with_neat_python(tmp_path):
    """Mean nodes / connections / enabled connections after one and two
    mutations of full 2x3 genomes, from the same config file read by both."""
    neat = pytest.importorskip("neat")
    import random

    from neat.innovation import InnovationTracker

    text = ("[NEAT]\nfitness_criterion = max\nfitness_threshold = 1\npop_size = 4000\nreset_on_extinction = False\n"
            "no_fitness_termination = False\n"
            "[DefaultGenome]\nnum_inputs = 2\nnum_outputs = 3\nnum_hidden = 0\nfeed_forward = True\n"
            "initial_connection = full\nactivation_default = sigmoid\nactivation_options = sigmoid\n"
            "activation_mutate_rate = 0.0\naggregation_default = sum\naggregation_options = sum\n"
            "aggregation_mutate_rate = 0.0\nbias_init_mean = 0.0\nbias_init_stdev = 1.0\nbias_max_value = 30\n"
            "bias_min_value = -30\nbias_mutate_power = 0.5\nbias_mutate_rate = 0.7\nbias_replace_rate = 0.1\n"
            "compatibility_disjoint_coefficient = 1.0\ncompatibility_weight_coefficient = 0.5\n"
            "conn_add_prob = 0.5\nconn_delete_prob = 0.5\nenabled_default = True\nenabled_mutate_rate = 0.01\n"
            "node_add_prob = 0.2\nnode_delete_prob = 0.2\nresponse_init_mean = 1.0\nresponse_init_stdev = 0.0\n"
            "response_max_value = 30\nresponse_min_value = -30\nresponse_mutate_power = 0.0\n"
            "response_mutate_rate = 0.0\nresponse_replace_rate = 0.0\nweight_init_mean = 0.0\n"
            "weight_init_stdev = 1.0\nweight_max_value = 30\nweight_min_value = -30\nweight_mutate_power = 0.5\n"
            "weight_mutate_rate = 0.8\nweight_replace_rate = 0.1\n[DefaultSpeciesSet]\ncompatibility_threshold = 3\n"
            "[DefaultStagnation]\nspecies_fitness_func = max\nmax_stagnation = 20\n"
            "[DefaultReproduction]\nelitism = 2\nsurvival_threshold = 0.2\n")
    path = _write(tmp_path, text)
    npc = neat.Config(neat.DefaultGenome, neat.DefaultReproduction, neat.DefaultSpeciesSet, neat.DefaultStagnation,
                      path).genome_config
    npc.innovation_tracker = InnovationTracker()
    random.seed(0)
    ref = []
    for key in range(4000):
        g = neat.DefaultGenome(key)
        g.configure_new(npc)
        row = []
        for _ in range(2):
            g.mutate(npc)
            row.append([len(g.nodes) + 2, len(g.connections), sum(c.enabled for c in g.connections.values())])
        ref.append(row)
    ref = np.array(ref, np.float64)  # [genome, step, stat]
    ours = np.stack(_mutated(NEATConfig.from_neat_python(path, max_nodes=16, max_conns=32), steps=2), 1)
    se = np.sqrt(ref.var(0) / len(ref) + ours.var(0) / len(ours))
    assert (np.abs(ref.mean(0) - ours.mean(0)) < 4.5 * se + 1e-9).all(), (ref.mean(0), ours.mean(0))


@pytest.mark.parametrize("use_op", [False, True])
@pytest.mark.parametrize("threshold, size", [(0.3, 50), (0.3, 100), (0.2, 15), (0.7, 10), (0.05, 30)])
def test_parents_come_from_neat_python_survivor_cutoff(use_op, threshold, size):
    """The parents of a species are its best ``max(ceil(threshold * size), 2)``
    members in double precision, as DefaultReproduction.reproduce
    (``int(math.ceil(survival_threshold * len(old_members)))``): for 0.3 and
    50 members that is 16 (0.3 * 50 = 15.000000000000002), in the reference
    and in the plan kernel."""
    import math

    from tfevo.neat import _speciate_op as so

    cfg = NEATConfig(num_inputs=2, num_outputs=1, pop_size=size, elitism=0, survival_threshold=threshold,
                     species_elitism=1, max_species=4)
    S = cfg.max_species
    # uniforms spanning [0, 1) so that every survivor is drawn as a parent
    u = np.tile(((np.arange(size) + 0.5) / size)[:, None], [1, 5]).astype(np.float32)
    out = so.plan(cfg, tf.zeros([size], tf.int32), tf.constant([True] + [False] * (S - 1)),
                  tf.range(S, dtype=tf.int64), tf.fill([S], -np.inf), tf.zeros([S], tf.int64),
                  tf.range(size, dtype=tf.float32), tf.range(size, dtype=tf.int64), tf.constant(1, tf.int64),
                  tf.constant(u), use_op=use_op)
    p1, p2 = out[7].numpy(), out[8].numpy()
    cutoff = max(int(math.ceil(threshold * size)), 2)  # neat-python's rule, verbatim
    assert set(p1) | set(p2) == set(range(size - cutoff, size))  # fitness = index: the best are the last


@pytest.mark.parametrize("use_op", [False, True])
def test_stagnation_protects_as_neat_python_with_tied_species(use_op):
    """Which species are removed as stagnant equals neat-python's
    DefaultStagnation.update on the same species (fitness, history, last
    improvement), with many fitness ties: among equal fitness the newer species
    (larger key) is the protected one, whatever slot it sits in."""
    neat = pytest.importorskip("neat")
    from neat.reporting import ReporterSet
    from neat.species import DefaultSpeciesSet, Species

    from tfevo.neat import _speciate_op as so

    rng = np.random.default_rng(0)
    S, checked = 8, 0
    for _ in range(60):
        n = int(rng.integers(2, S + 1))
        elit = int(rng.integers(1, 4))
        sizes = rng.integers(1, 5, n)
        P = int(sizes.sum())  # >= 2
        cfg = NEATConfig(num_inputs=2, num_outputs=1, pop_size=P, elitism=0, min_species_size=1,
                         species_elitism=elit, max_stagnation=5, max_species=S)
        slots = rng.permutation(S)[:n]
        keys = rng.permutation(40)[:n] + 1
        member_fit = [rng.choice([-200.0, -150.0, -120.0], size=k) for k in sizes]  # species fitness ties
        best_prev = [max(f) + rng.choice([0.0, 10.0]) for f in member_fit]  # improved or not this generation
        last = rng.integers(0, 10, n)
        gen = 10
        # neat-python
        sset = DefaultSpeciesSet(cfg, ReporterSet())
        gid = 0
        for j in range(n):
            s = Species(int(keys[j]), 0)
            s.fitness_history = [best_prev[j]]
            s.last_improved = int(last[j])
            members = {}
            for f in member_fit[j]:
                g = neat.DefaultGenome(gid)
                g.fitness = float(f)
                members[gid] = g
                gid += 1
            s.members = members
            sset.species[s.key] = s
        stag = neat.DefaultStagnation(types.SimpleNamespace(species_fitness_func="max", max_stagnation=5,
                                                            species_elitism=elit), ReporterSet())
        want = {sid: st for sid, _, st in stag.update(sset, gen)}
        # tfevo
        sp = np.concatenate([np.full(k, slots[j]) for j, k in enumerate(sizes)]).astype(np.int32)
        ff = np.concatenate(member_fit).astype(np.float64)
        alive = np.zeros(S, bool)
        alive[slots] = True
        kk = np.full(S, -1, np.int64)
        kk[slots] = keys
        bf = np.full(S, -np.inf)
        bf[slots] = best_prev
        li = np.zeros(S, np.int64)
        li[slots] = last
        u = rng.random((P, 5)).astype(np.float32)
        out = so.plan(cfg, tf.constant(sp), tf.constant(alive), tf.constant(kk), tf.constant(bf), tf.constant(li),
                      tf.constant(ff), tf.range(P, dtype=tf.int64), tf.constant(gen, tf.int64), tf.constant(u),
                      use_op=use_op)
        survived = out[1].numpy()
        got = {int(kk[s]): not bool(survived[s]) for s in slots}
        assert got == want, (got, want)
        checked += sum(want.values()) > 0
    assert checked >= 10


@pytest.mark.parametrize("use_op", [False, True])
def test_children_are_laid_out_in_neat_python_genome_id_order(use_op):
    """The next population is in neat-python's genome-id order, which is the order its
    speciation visits: the elites (they keep their ids) by id, then the new children
    species by species in DefaultReproduction's order (species fitness ascending, then
    key), each species' children in turn."""
    from tfevo.neat import _speciate_op as so

    S, sizes = 6, [5, 7, 4, 6]
    P = sum(sizes)
    cfg = NEATConfig(num_inputs=2, num_outputs=1, pop_size=P, elitism=2, species_elitism=4, max_species=S)
    slots = np.array([4, 0, 3, 1])
    keys = np.full(S, -1, np.int64)
    keys[slots] = [7, 9, 2, 5]
    sfit = [1.0, 3.0, 3.0, 0.5]  # species fitness (max of members): a tie between keys 9 and 2
    rng = np.random.default_rng(1)
    sp, ff = [], []
    for j, n in enumerate(sizes):
        f = rng.uniform(0.0, sfit[j], n)
        f[0] = sfit[j]
        sp += [slots[j]] * n
        ff += list(f)
    sp, ff = np.array(sp, np.int32), np.array(ff)
    mkey = rng.permutation(100)[:P].astype(np.int64) + 1000  # genome ids, not in population order
    alive = np.zeros(S, bool)
    alive[slots] = True
    out = so.plan(cfg, tf.constant(sp), tf.constant(alive), tf.constant(keys), tf.fill([S], -np.inf),
                  tf.zeros([S], tf.int64), tf.constant(ff), tf.constant(mkey), tf.constant(1, tf.int64),
                  tf.constant(rng.random((P, 5)).astype(np.float32)), use_op=use_op)
    spawn, p1, el = out[6].numpy(), out[7].numpy(), out[9].numpy()
    n_el = int(el.sum())
    assert n_el == 2 * len(sizes) and el[:n_el].all() and not el[n_el:].any(), "elites first"
    assert (np.diff(mkey[p1[:n_el]]) > 0).all(), "elites by genome id"
    child_species = sp[p1[n_el:]]
    want_order = [slots[j] for j in sorted(range(len(sizes)), key=lambda j: (sfit[j], keys[slots[j]]))]
    want = np.concatenate([[s] * (spawn[s] - 2) for s in want_order])
    np.testing.assert_array_equal(child_species, want)


def test_population_order_is_genome_id_order_during_a_run():
    """Across generations the population stays in ascending genome id (member_key) order."""
    from tfevo.neat import Parity

    prob = Parity(3)
    cfg = prob.config(pop_size=60, max_nodes=16, max_conns=32, node_add_prob=0.5)
    algo = NEAT(cfg, seed=2)
    for _ in range(6):
        pop = algo.ask()
        algo.tell(pop, prob(pop, cfg))
        assert (np.diff(algo.member_key.numpy()) > 0).all()


@pytest.mark.parametrize("use_op", [False, True])
@pytest.mark.parametrize("func", ["max", "min", "mean", "median", "median2"])
def test_species_fitness_func_is_neat_python_stat_function(use_op, func):
    """A species' fitness is neat-python's ``stat_functions[species_fitness_func]``
    of its members' fitness: ``median`` the upper middle value of an even-sized
    species (math_util.median), ``median2`` the mean of the two middle ones, in
    the reference and the plan kernel."""
    pytest.importorskip("neat")
    from neat.math_util import stat_functions

    from tfevo.neat import _speciate_op as so

    rng = np.random.default_rng(1)
    S, sizes = 4, [1, 2, 4, 5]
    P = sum(sizes)
    cfg = NEATConfig(num_inputs=2, num_outputs=1, pop_size=P, elitism=0, min_species_size=1, species_elitism=4,
                     max_species=S, species_fitness_func=func)
    sp = np.repeat(np.arange(S), sizes).astype(np.int32)
    ff = rng.permutation(P).astype(np.float64) * 1.5
    out = so.plan(cfg, tf.constant(sp), tf.ones([S], tf.bool), tf.range(S, dtype=tf.int64), tf.fill([S], -np.inf),
                  tf.zeros([S], tf.int64), tf.constant(ff), tf.range(P, dtype=tf.int64), tf.constant(1, tf.int64),
                  tf.constant(rng.random((P, 5)).astype(np.float32)), use_op=use_op)
    want = [stat_functions[func](list(ff[sp == s])) for s in range(S)]
    np.testing.assert_array_equal(out[2].numpy(), want)


def test_initial_values_and_choice_mutations_are_distributed_as_neat_python():
    """Initial bias/weight values (gaussian clamped, uniform within mean +- 2
    stdev and the bounds) against neat-python's FloatAttribute.init_value (KS),
    and how often one mutation changes an activation, an aggregation and an
    enabled flag against StringAttribute/BoolAttribute.mutate_value (20000
    genes each, 4.5 standard errors)."""
    pytest.importorskip("neat")
    import random

    from neat.attributes import BoolAttribute, FloatAttribute, StringAttribute
    from scipy.stats import ks_2samp

    from tfevo.neat.genes import mutate_attributes

    kw = dict(bias_init_mean=1.0, bias_init_stdev=2.0, bias_init_type="gaussian", bias_min_value=-1.5,
              bias_max_value=2.5, weight_init_mean=-0.5, weight_init_stdev=1.0, weight_init_type="uniform",
              weight_min_value=-2.0, weight_max_value=0.8, activation_options=("sigmoid", "tanh", "relu"),
              activation_default="sigmoid", activation_mutate_rate=0.3, aggregation_options=("sum", "max"),
              aggregation_default="sum", aggregation_mutate_rate=0.45, enabled_mutate_rate=0.2)
    n = 20000
    cfg = NEATConfig(num_inputs=1, num_outputs=1, pop_size=n, max_nodes=2, max_conns=1, num_hidden=0,
                     initial_connection="full", bias_mutate_rate=0.0, bias_replace_rate=0.0,
                     weight_mutate_rate=0.0, weight_replace_rate=0.0, **kw)
    nodes, conns, _, _ = initial_population(cfg, tf.constant([1, 2], tf.int64))
    random.seed(0)
    ns = types.SimpleNamespace(**{k: (list(v) if isinstance(v, tuple) else v) for k, v in kw.items()},
                               enabled_default="True", enabled_rate_to_true_add=0.0, enabled_rate_to_false_add=0.0)
    for name, ours in (("bias", nodes.numpy()[:, 1, 1]), ("weight", conns.numpy()[:, 0, 3])):
        ref = np.array([FloatAttribute(name).init_value(ns) for _ in range(n)], np.float32)
        assert ks_2samp(ours, ref).pvalue > 1e-3, name
        lo, hi = kw[f"{name}_min_value"], kw[f"{name}_max_value"]
        for edge in (lo, hi):  # the clamped masses (gaussian) / none (uniform)
            p_ref, p_ours = (ref == np.float32(edge)).mean(), (ours == np.float32(edge)).mean()
            assert abs(p_ref - p_ours) < 4.5 * np.sqrt(max(p_ref * (1 - p_ref), 1e-4) * 2 / n), (name, edge)
    out_n, out_c = mutate_attributes(cfg, nodes, conns, tf.ones([n], tf.bool), tf.constant([3, 4], tf.int64))
    from tfevo.neat import functions as F

    changed = {"activation": (out_n.numpy()[:, 1, 4] != F.activation_id("sigmoid")).mean(),
               "aggregation": (out_n.numpy()[:, 1, 3] != F.aggregation_id("sum")).mean(),
               "enabled": (out_c.numpy()[:, 0, 2] != 1.0).mean()}
    ref = {"activation": np.mean([StringAttribute("activation").mutate_value("sigmoid", ns) != "sigmoid"
                                  for _ in range(n)]),
           "aggregation": np.mean([StringAttribute("aggregation").mutate_value("sum", ns) != "sum"
                                   for _ in range(n)]),
           "enabled": np.mean([BoolAttribute("enabled").mutate_value(True, ns) is not True for _ in range(n)])}
    for k in ref:
        p = ref[k]
        assert abs(changed[k] - p) < 4.5 * np.sqrt(p * (1 - p) * 2 / n), (k, changed[k], p)


@pytest.mark.parametrize("use_op", [False, True])
@pytest.mark.parametrize("rate, to_true, to_false", [(0.1, 0.3, 0.0), (0.05, 0.0, 0.2), (0.2, 1.1, 0.4)])
def test_enabled_flag_mutation_with_rate_to_adds_as_neat_python(tmp_path, use_op, rate, to_true, to_false):
    """enabled_rate_to_true_add / enabled_rate_to_false_add read from a
    neat-python file add to the mutation rate of a disabled / enabled
    connection, as BoolAttribute.mutate_value: how often one mutation turns
    each state over, against neat-python (20000 genes per state, 4.5 standard
    errors), through the breed kernel and the reference."""
    pytest.importorskip("neat")
    import random

    from neat.attributes import BoolAttribute

    from tfevo.neat import _breed_op as bo
    from tfevo.neat.crossover import crossover_words
    from tfevo.neat.mutation import mutation_uniforms

    path = _write(tmp_path, enabled_mutate_rate=rate, enabled_rate_to_true_add=to_true,
                  enabled_rate_to_false_add=to_false, initial_connection="full", conn_add_prob=0.0,
                  conn_delete_prob=0.0, node_add_prob=0.0, node_delete_prob=0.0, weight_mutate_rate=0.0,
                  weight_replace_rate=0.0, bias_mutate_rate=0.0, bias_replace_rate=0.0, pop_size=20000)
    cfg = NEATConfig.from_neat_python(path, max_nodes=4, max_conns=4)
    assert (cfg.enabled_rate_to_true_add, cfg.enabled_rate_to_false_add) == (to_true, to_false)
    ns = types.SimpleNamespace(enabled_mutate_rate=rate, enabled_rate_to_true_add=to_true,
                               enabled_rate_to_false_add=to_false)
    random.seed(0)
    attr = BoolAttribute("enabled")
    n = cfg.pop_size
    nodes, conns, _, _ = initial_population(cfg, tf.constant([1, 2], tf.int64))
    c = conns.numpy()
    c[n // 2:, :, 2] = 0.0  # the second half starts disabled
    idx = tf.range(n, dtype=tf.int32)
    u = mutation_uniforms(cfg, n, cfg.max_nodes, cfg.max_conns, tf.constant([7, 8], tf.int64))
    words = crossover_words(n, cfg.max_nodes, cfg.max_conns, tf.constant([9, 9], tf.int64))
    out = bo.breed(cfg, nodes, tf.constant(c), idx, idx, tf.zeros([n], tf.bool), words, u,
                   tf.constant(3, tf.int64), tf.constant(2, tf.int64), use_op=use_op)
    en = out[1].numpy()[:, :2, 2]
    for start, rows in ((True, slice(0, n // 2)), (False, slice(n // 2, n))):
        ours = (en[rows] != float(start)).mean()
        p = np.mean([attr.mutate_value(start, ns) != start for _ in range(n)])
        assert abs(ours - p) < 4.5 * np.sqrt(max(p * (1 - p), 1e-4) / n * 2), (start, ours, p)


@pytest.mark.parametrize("hidden, mode", [(2, "full_direct"), (1, "partial_nodirect 0.5"), (3, "fs_neat_hidden")])
def test_initial_hidden_nodes_are_each_genomes_own_as_in_neat_python(tmp_path, hidden, mode):
    """neat-python's node counter is shared by the genomes it creates, so with
    num_hidden > 0 no two initial genomes share a hidden node key (nor a
    connection to or from one): the initial genomes are far apart (distance
    above 2.8 here) and, at compatibility_threshold 2.5, each founds its own
    species in both libraries (with shared hidden keys they were close), 40 of
    them: more than NEATConfig's default 32 species slots."""
    neat = pytest.importorskip("neat")
    path = _write(tmp_path, num_hidden=hidden, initial_connection=mode, pop_size=40, compatibility_threshold=2.5)
    ref = _neat_python_reads(path)
    p = neat.Population(ref)
    keys = [set(g.nodes) - set(range(ref.genome_config.num_outputs)) for g in p.population.values()]
    assert sum(len(k) for k in keys) == len(set().union(*keys)) == 40 * hidden
    cfg = NEATConfig.from_neat_python(path)
    algo = NEAT(cfg, seed=0)
    nodes, conns = (x.numpy() for x in algo.ask())
    hid = nodes[:, cfg.num_inputs + cfg.num_outputs:, 0]
    hid = hid[~np.isnan(hid)]
    assert len(hid) == len(set(hid.tolist())) == 40 * hidden
    c = conns.reshape(-1, 5)
    c = c[~np.isnan(c[:, 0])]
    seen = {}
    for a, b, m in c[:, [0, 1, 4]]:
        seen.setdefault(m, set()).add((a, b))
    assert all(len(v) == 1 for v in seen.values()), "one pair per marker"
    # more species than NEATConfig's 32 slots: from_neat_python gives max_species = pop_size
    assert cfg.max_species == 40
    algo.tell(algo.ask(), np.random.default_rng(0).normal(size=40))
    assert algo.num_species == len(p.species.species) == 40
    assert int(algo.next_node_key.numpy()) > hid.max()


def test_slots_too_small_for_a_neat_python_file_say_how_to_set_them(tmp_path):
    # max_nodes / max_conns are tfevo's, absent from neat-python files: the error says where they go.
    with pytest.raises(ConfigError, match=r"max_nodes=32 is smaller .*from_neat_python\(path, max_nodes=\.\.\.\)"):
        NEATConfig.from_neat_python(_write(tmp_path, num_hidden=40))
    with pytest.raises(ConfigError, match=r"max_conns=64 cannot hold .*from_neat_python\(path, max_conns=\.\.\.\)"):
        NEATConfig.from_neat_python(_write(tmp_path, num_hidden=25, initial_connection="full"))
    cfg = NEATConfig.from_neat_python(_write(tmp_path, num_hidden=25, initial_connection="full"), max_conns=128)
    assert cfg.max_conns == 128
