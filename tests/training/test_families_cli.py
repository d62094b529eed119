"""Every family trains from its shipped config through `tfevo train`, resumes exactly,
and works with `tfevo eval`, `play` and `plot` (which draws the family's own picture)."""

import json
import re
from pathlib import Path

import numpy as np
import pytest

from tfevo.cli import main
from tfevo.core import ConfigError
from tfevo.training.config import load_config, parse_config

CONFIGS = Path(__file__).resolve().parents[2] / "examples" / "configs"

# shipped config -> (family, policy kind, toy overrides: a few members, a few steps)
# The classic-control configs roll out in-graph; at toy budgets they go through Gymnasium's
# identical environments (the pipelined evaluator), which needs no XLA compilation.
HOST = ["evaluator.kind=pipelined", "evaluator.num_envs=4"]
FAMILIES = {
    "neat_cartpole": ("neat", "neat", ["algorithm.popsize=6", "env.max_steps=12", "env.episodes=1", *HOST]),
    "neat_recurrent_acrobot": ("neat", "neat", ["algorithm.popsize=6", "env.max_steps=12", "env.episodes=1", *HOST]),
    "hyperneat_cartpole": ("neat", "hyperneat", ["algorithm.popsize=6", "env.max_steps=12", "env.episodes=1",
                                                  *HOST]),
    "gp_cartpole": ("gp", "gp_tree", ["algorithm.popsize=8", "env.max_steps=12", "env.episodes=1", *HOST]),
    "map_elites_rastrigin": ("map_elites", None, ["algorithm.popsize=8"]),
    "cma_me_sphere": ("map_elites", None, ["algorithm.popsize=12", "algorithm.params.num_emitters=2",
                                           "problem.num_dims=6"]),
    "cma_mae_sphere": ("map_elites", None, ["algorithm.popsize=12", "algorithm.params.num_emitters=2",
                                            "problem.num_dims=6"]),
    "qdrl_walker2d": ("map_elites", "mlp", ["algorithm.popsize=4", "env.max_steps=6", "evaluator.num_envs=2",
                                             "policy.hidden=[4]"]),
}
PICTURES = {"neat": "network.png", "gp": "formula.png", "map_elites": "archive.png"}


def _train(config, run, generations, overrides):
    args = ["train", str(CONFIGS / f"{config}.toml"), "--run-dir", str(run), "--generations", str(generations),
            "--no-progress"]
    for o in overrides:
        args += ["--set", o]
    assert main(args) == 0


def _checkpoint(run):
    import tensorflow as tf

    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(run / "checkpoints")))
    return {k: reader.get_tensor(k) for k in reader.get_variable_to_shape_map()
            if "wall_time" not in k and not k.startswith("_CHECKPOINTABLE_OBJECT_GRAPH")}


def test_shipped_family_configs_validate():
    for name, (family, kind, _) in FAMILIES.items():
        cfg = load_config(CONFIGS / f"{name}.toml")
        assert cfg.family == family, name
        if kind is not None:
            assert cfg.policy.kind == kind, name


@pytest.fixture(scope="module", params=list(FAMILIES))
def family_run(request, tmp_path_factory):
    """One toy run of 2 generations, and the same run stopped after 1 and resumed."""
    name = request.param
    if name == "qdrl_walker2d":
        pytest.importorskip("mujoco")
    family, _, overrides = FAMILIES[name]
    root = tmp_path_factory.mktemp(name)
    _train(name, root / "full", 2, overrides)
    _train(name, root / "part", 1, overrides)
    _train(name, root / "part", 2, overrides)
    return name, family, root


def _assert_same_run(root):
    full, part = _checkpoint(root / "full"), _checkpoint(root / "part")
    assert full.keys() == part.keys()
    assert any(k.startswith("algorithm/") for k in full)
    for k in full:
        np.testing.assert_array_equal(full[k], part[k], err_msg=k)
    rows = [[json.loads(x) for x in (root / r / "progress.jsonl").read_text().splitlines()] for r in ("full", "part")]
    strip = lambda rs: [(r["generation"], r["best"], r["mean"], r["frames"], r["evaluations"]) for r in rs]  # noqa: E731
    assert strip(rows[0]) == strip(rows[1]) and [r[0] for r in strip(rows[1])] == list(range(1, len(rows[0]) + 1))


def test_family_resume_equals_uninterrupted_run(family_run):
    """Every checkpointed variable (algorithm, evaluator seeds, best member, counters) and every
    logged fitness equals the uninterrupted run's, bit for bit."""
    _assert_same_run(family_run[2])


@pytest.mark.slow
@pytest.mark.parametrize("name", ["neat_cartpole", "neat_recurrent_acrobot", "hyperneat_cartpole", "gp_cartpole"])
def test_in_graph_family_run_resumes_exactly(name, tmp_path):
    """The shipped evaluator (the in-graph rollout, XLA where it compiles), 3 generations, resumed after 1."""
    overrides = [o for o in FAMILIES[name][2] if not o.startswith("evaluator.")] + ["env.episodes=2"]
    _train(name, tmp_path / "full", 3, overrides)
    _train(name, tmp_path / "part", 1, overrides)
    _train(name, tmp_path / "part", 3, overrides)
    _assert_same_run(tmp_path)


def test_family_eval_plot_play(family_run, tmp_path, capsys):
    import matplotlib.image as mpimg

    name, family, root = family_run
    run = root / "full"
    capsys.readouterr()
    assert main(["plot", str(run)]) == 0
    out = capsys.readouterr().out
    picture = run / PICTURES[family]
    assert str(picture) in out and (run / "learning_curve.png").exists()
    assert mpimg.imread(picture).shape[0] > 100
    assert main(["eval", str(run), "--episodes", "2"]) == 0
    out = capsys.readouterr().out
    if name in ("map_elites_rastrigin", "cma_me_sphere", "cma_mae_sphere"):
        m = re.search(r"fitness (\S+)\s+descriptors (\S+) (\S+)", out)
        best = max(json.loads(x)["best_ever"] for x in (run / "progress.jsonl").read_text().splitlines())
        assert m and float(m.group(1)) == pytest.approx(best, rel=1e-5), out  # the task is deterministic
        assert main(["play", str(run), "--video", str(tmp_path / "x.gif")]) == 2
        assert "nothing to play" in capsys.readouterr().err
        return
    assert re.search(r"mean \S+\s+std \S+\s+min \S+\s+max \S+\n\s+returns: \S+ \S+", out), out
    video = tmp_path / "play.gif"
    assert main(["play", str(run), "--video", str(video), "--max-steps", "4"]) == 0
    assert video.stat().st_size > 0


@pytest.mark.parametrize("data, msg", [
    ({"algorithm": {"name": "neat"}, "policy": {"kind": "mlp"}},
     r"policy\.kind 'mlp' cannot be evolved by algorithm\.name 'neat'; neat takes policy\.kind neat \| hyperneat"),
    ({"algorithm": {"name": "gp"}, "policy": {"kind": "neat"}}, r"gp takes policy\.kind gp_tree"),
    ({"algorithm": {"name": "openai_es"}, "policy": {"kind": "gp_tree"}}, r"openai_es takes policy\.kind mlp"),
    ({"algorithm": {"name": "map_elites"}, "problem": {"name": "ackley_qd", "num_dims": 4}},
     r"problem\.name: Input should be 'rastrigin_qd'.*\(got 'ackley_qd'\)"),
    ({"algorithm": {"name": "openai_es"}, "problem": {"name": "sphere_qd", "num_dims": 4}},
     r"problem is for algorithm\.name 'map_elites'"),
    ({"algorithm": {"name": "map_elites"}, "archive": {"kind": "grid", "cells": 100}}, r"archive\.cells must be a list"),
    ({"algorithm": {"name": "map_elites"}, "archive": {"kind": "hex"}}, r"archive\.kind: .*\(got 'hex'\)"),
    ({"algorithm": {"name": "map_elites"}, "distribute": {"devices": 2}},
     r"distribute shards the rollouts of strategies, NEAT and GP; map_elites runs in one process"),
])
def test_family_config_errors_name_the_field_value_and_choices(data, msg):
    with pytest.raises(ConfigError, match=msg):
        parse_config({"run": {"generations": 2}, **data})


@pytest.mark.parametrize("data, msg", [
    ({"algorithm": {"name": "neat", "params": {"max_node": 8}}},
     r"algorithm\.params\.max_node: neat has no parameter 'max_node' \(did you mean 'max_nodes'\?\)"),
    ({"algorithm": {"name": "neat", "params": {"num_inputs": 8}}},
     r"algorithm\.params\.num_inputs: set by the environment's observation size"),
    ({"algorithm": {"name": "neat", "params": {"max_nodes": 3}}}, r"algorithm\.params\.max_nodes: max_nodes=3 is smaller"),
    ({"algorithm": {"name": "neat"}, "policy": {"kind": "hyperneat", "params": {"threshold": 0.1}}},
     r"policy\.params\.threshold: the hyperneat policy has no parameter 'threshold'.*weight_threshold"),
    ({"algorithm": {"name": "gp", "params": {"functions": ["add", "frobnicate"]}}}, r"frobnicate"),
    ({"algorithm": {"name": "gp", "params": {"tournament": 3}}}, r"did you mean 'tournament_size'"),
    ({"algorithm": {"name": "map_elites", "params": {"emitter": "cma"}}, "problem": {"name": "sphere_qd", "num_dims": 4}},
     r"algorithm\.params\.emitter: unknown emitter 'cma'; accepted: iso_line, gaussian, cma_me"),
    ({"algorithm": {"name": "map_elites", "popsize": 30, "params": {"emitter": "cma_me", "num_emitters": 4}},
      "problem": {"name": "sphere_qd", "num_dims": 4}},
     r"algorithm\.popsize: 30 candidates cannot be split evenly over num_emitters=4"),
    ({"algorithm": {"name": "map_elites", "popsize": 30, "params": {"emitter": "cma_me", "num_emitters": 0}},
      "problem": {"name": "sphere_qd", "num_dims": 4}}, r"algorithm\.params\.num_emitters: must be an int >= 1, got 0"),
    ({"algorithm": {"name": "map_elites", "popsize": 30, "params": {"emitter": "cma_me", "sigma0": 0.5}},
      "problem": {"name": "sphere_qd", "num_dims": 4}}, r"cma_me emitter has no parameter 'sigma0' \(did you mean 'sigma'"),
    ({"algorithm": {"name": "map_elites", "popsize": 30, "params": {"emitter": "cma_me", "ranker": "best"}},
      "problem": {"name": "sphere_qd", "num_dims": 4}}, r"algorithm\.params\.ranker: ranker must be"),
    ({"algorithm": {"name": "map_elites", "params": {"sigma": 0.1}}, "problem": {"name": "sphere_qd", "num_dims": 4}},
     r"algorithm\.params\.sigma: the iso_line emitter has no parameter"),
    ({"algorithm": {"name": "map_elites"}, "problem": {"name": "sphere_qd", "num_dims": 4},
      "archive": {"ranges": [[0, 1], [0, 1], [0, 1]]}}, r"archive\.ranges has 3 entries, sphere_qd gives 2"),
    ({"algorithm": {"name": "map_elites"}}, r"map_elites over policies needs behaviour descriptors from a host "
                                            r"simulator \(evaluator\.kind 'pipelined', e\.g\. MuJoCo\); CartPole-v1"),
    ({"algorithm": {"name": "map_elites"}, "evaluator": {"kind": "pipelined"}},
     r"map_elites needs behaviour descriptors; CartPole-v1 provides none"),
    ({"policy": {"kind": "mlp", "activation": "tahn"}},
     r"policy\.activation: unknown activation 'tahn' \(did you mean 'tanh'\?\); Keras activations: .*relu"),
    ({"algorithm": {"name": "neat"}, "policy": {"kind": "hyperneat", "activation": "tahn"}},
     r"policy\.activation: unknown activation 'tahn'; known: sigmoid, tanh"),
    # values a family's callee could not read, or a boolean for a number: TypeError/ValueError tracebacks or
    # silently 1.0 before
    ({"algorithm": {"name": "neat"}, "policy": {"kind": "neat", "params": {"settle_steps": "abc"}}},
     r"policy\.params\.settle_steps: the neat policy takes a number \(default 1\), got 'abc'"),
    ({"algorithm": {"name": "neat"}, "policy": {"kind": "hyperneat", "params": {"weight_threshold": "abc"}}},
     r"policy\.params\.weight_threshold: the hyperneat policy takes a number \(default 0\.2\), got 'abc'"),
    ({"algorithm": {"name": "neat"}, "policy": {"kind": "hyperneat", "params": {"max_weight": True}}},
     r"policy\.params\.max_weight: the hyperneat policy takes a number \(default 5\.0\), got True"),
    ({"algorithm": {"name": "gp", "params": {"max_len": "abc"}}, "policy": {"kind": "gp_tree"}},
     r"algorithm\.params\.max_len: max_len must be an integer, got 'abc'"),
    # a count that is not an integer ran truncated (max_len 64.5 as 64), a recurrent network settled 0 times
    # per observation acted on its initial state for ever
    ({"algorithm": {"name": "gp", "params": {"max_len": 64.5}}, "policy": {"kind": "gp_tree"}},
     r"^algorithm\.params\.max_len: max_len must be an integer, got 64\.5"),
    ({"algorithm": {"name": "gp", "params": {"tournament_size": 2.5}}, "policy": {"kind": "gp_tree"}},
     r"^algorithm\.params\.tournament_size: tournament_size must be an integer, got 2\.5"),
    ({"algorithm": {"name": "gp", "params": {"init_depth": [2, 4.5]}}, "policy": {"kind": "gp_tree"}},
     r"^algorithm\.params\.init_depth: init_depth \(min, max\) must be an integer, got 4\.5"),
    ({"algorithm": {"name": "neat", "params": {"feed_forward": False}}, "policy": {"kind": "neat", "params": {"settle_steps": 0}}},
     r"^policy\.params\.settle_steps: settle_steps must be an integer >= 1, got 0"),
    ({"algorithm": {"name": "map_elites", "params": {"emitter": "cma_me", "sigma": "abc"}},
      "problem": {"name": "sphere_qd", "num_dims": 4}},
     r"algorithm\.params\.sigma: the cma_me emitter takes a number \(default 0\.1\), got 'abc'"),
    ({"algorithm": {"name": "map_elites", "params": {"emitter": "cma_me", "sigma": True}},
      "problem": {"name": "sphere_qd", "num_dims": 4}},
     r"algorithm\.params\.sigma: the cma_me emitter takes a number \(default 0\.1\), got True"),
    ({"policy": {"kind": "mlp", "params": {"settle_steps": 2}}},
     r"policy\.params\.settle_steps: the mlp policy takes no params"),
    ({"algorithm": {"name": "cma_es"}, "policy": {"kind": "linear", "params": {"foo": 1}}},
     r"policy\.params\.foo: the linear policy takes no params"),
])
def test_family_builder_errors_come_before_any_work(data, msg):
    from tfevo.training.builders import build

    with pytest.raises(ConfigError, match=msg):
        build(parse_config({"run": {"generations": 2}, **data}))


def test_qd_descriptor_names_are_checked_against_the_simulator():
    pytest.importorskip("mujoco")
    from tfevo.training.builders import qd_layout

    base = {"run": {"generations": 2}, "env": {"id": "Walker2d-v5"}, "algorithm": {"name": "map_elites"}}
    with pytest.raises(ConfigError, match=r"archive\.descriptors: name the descriptor columns of Walker2d-v5, from: "
                                          r"x, y, contact:foot_geom, contact:foot_left_geom"):
        qd_layout(parse_config(base))
    with pytest.raises(ConfigError, match=r"has no descriptor 'contact:hand'"):
        qd_layout(parse_config({**base, "archive": {"descriptors": ["x", "contact:hand"]}}))
    with pytest.raises(ConfigError, match=r"archive\.ranges: give \(low, high\) for each of \['x', 'y'\]"):
        qd_layout(parse_config({**base, "archive": {"descriptors": ["x", "y"]}}))
    lay = qd_layout(parse_config({**base, "archive": {"descriptors": ["contact:foot_left_geom", "x"],
                                                      "ranges": [[0, 1], [-5, 5]]}}))
    assert lay.columns == [3, 0] and lay.ranges == [(0.0, 1.0), (-5.0, 5.0)]


def test_list_shows_what_each_family_evolves(capsys):
    assert main(["list", "algorithms"]) == 0
    out = " ".join(capsys.readouterr().out.split())  # wrapped lines joined
    assert re.search(r"\bneat Tensorized NEAT .*? Config: policy\.kind neat \| hyperneat\.", out)
    assert re.search(r"\bgp Tensorized tree genetic programming .*? Config: policy\.kind gp_tree\.", out)
    assert re.search(r"\bmap_elites MAP-Elites .*? Config: policy\.kind mlp \| nature_dqn \| linear, or a \[problem\] "
                     r"QD task\.", out)
    assert re.search(r"\bopenai_es OpenAI evolution strategy .*? Config: policy\.kind mlp \| nature_dqn \| linear\.", out)
    assert main(["list", "problems"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    for task in ("rastrigin_qd", "sphere_qd", "rastrigin_linproj", "sphere_linproj"):
        assert re.search(rf"\b{task} .*?\. Config: \[problem\] of algorithm map_elites\.", out), task
    assert main(["list", "policies"]) == 0
    assert re.search(r"\bhyperneat CPPN genomes painting", " ".join(capsys.readouterr().out.split()))


def test_neat_drawing_has_a_title_and_a_legend_for_node_and_edge_colours(tmp_path):
    from tfevo.neat import NEAT, NEATConfig
    from tfevo.neat.export import draw

    cfg = NEATConfig(num_inputs=3, num_outputs=2, pop_size=4, num_hidden=1, max_nodes=8, max_conns=16)
    pop = NEAT(cfg, seed=0).ask()
    conns = pop.conns[0].numpy()
    conns[0, 2] = 0.0  # one disabled connection
    fig = draw(pop.nodes[0].numpy(), conns, cfg, path=str(tmp_path / "g.png"))
    ax = fig.axes[0]
    assert ax.get_title() == "NEAT genome: 1 hidden nodes, 4 enabled connections"
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["input", "hidden", "output", "weight > 0", "weight < 0", "disabled"]
    colours = [h.get_markerfacecolor() for h in ax.get_legend().legend_handles[:3]]
    assert colours == ["lightgreen", "lightgray", "lightsalmon"]  # the colours the nodes are drawn in
    fig = draw(pop.nodes[0].numpy(), pop.conns[0].numpy(), cfg, title="best")
    assert fig.axes[0].get_title() == "best" and "disabled" not in [
        t.get_text() for t in fig.axes[0].get_legend().get_texts()]


def test_archive_heatmap_names_its_axes_and_has_a_colour_bar(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt
    import tensorflow as tf

    from tfevo.qd import GridArchive, archive_heatmap

    archive = GridArchive(4, [8, 8], [(0, 1), (0, 1)])
    x = tf.random.stateless_uniform([32, 4], seed=[1, 2])
    archive.add(x, -tf.reduce_sum(x * x, 1), x[:, :2])
    figs = []
    monkeypatch.setattr(plt, "close", figs.append)  # keep the figure to look at it
    archive_heatmap(archive, tmp_path / "a.png", labels=("left foot", "right foot"))
    ax, bar = figs[0].axes
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("left foot", "right foot")
    assert "fitness" in bar.get_ylabel()
    with pytest.raises(ConfigError, match="labels must name the 2 descriptor axes"):
        archive_heatmap(archive, tmp_path / "b.png", labels=("one",))


def test_gp_formula_computes_the_policy_outputs(tmp_path):
    """The formula `tfevo plot` writes is the best tree's function of the observations."""
    import sympy as sp

    from tfevo.training.builders import build
    from tfevo.training.families import family_of

    cfg = parse_config({"run": {"generations": 1}, "env": {"id": "CartPole-v1"},
                        "algorithm": {"name": "gp", "popsize": 8, "params": {"max_len": 24, "functions": [
                            "add", "sub", "mul"], "init_depth": [2, 3]}}})
    setup = build(cfg)
    best = setup.algorithm.ask()[3]
    family_of(cfg).picture(cfg, setup.parts, setup.algorithm, best, tmp_path)
    lines = (tmp_path / "formula.txt").read_text().splitlines()
    assert [l.split(" = ")[0] for l in lines] == ["action 0", "action 1"]
    obs = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
    xs = sp.symbols("x0:4")
    got = np.stack([np.broadcast_to(sp.lambdify(xs, sp.sympify(l.split(" = ")[1]))(*obs.T), [5]) for l in lines], 1)
    want = setup.policy._outputs(best[None], obs[None]).numpy()[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert (tmp_path / "formula.png").exists()


def test_readme_quick_start_names_one_shipped_config_per_family():
    readme = (CONFIGS.parents[1] / "README.md").read_text(encoding="utf-8")
    named = re.findall(r"^    tfevo train examples/configs/(\S+)", readme, flags=re.M)
    families = set()
    for name in named:
        cfg = load_config(CONFIGS / name)
        families.add((cfg.family, cfg.policy.kind if cfg.problem is None else "problem",
                      cfg.policy.params.get("feed_forward", cfg.algorithm.params.get("feed_forward", True))))
    assert {f[0] for f in families} == {"vector", "neat", "gp", "map_elites"}
    assert {("neat", "neat", True), ("neat", "neat", False), ("neat", "hyperneat", True), ("gp", "gp_tree", True),
            ("map_elites", "problem", True), ("map_elites", "mlp", True)} <= families


def test_flat_form_gives_the_algorithm_back_its_population_bit_for_bit():
    """NEAT genomes (NaN padding included) and GP trees survive the flat [P, D] form exactly."""
    import tensorflow as tf

    from tfevo.training.builders import build

    for algo in ({"name": "neat", "popsize": 5, "params": {"max_nodes": 9, "max_conns": 12}},
                 {"name": "gp", "popsize": 5, "params": {"max_len": 16}}):
        setup = build(parse_config({"run": {"generations": 1}, "env": {"id": "CartPole-v1"}, "algorithm": algo}))
        flat = setup.algorithm.ask()
        assert flat.dtype == tf.float32 and flat.shape == (5, setup.num_params)
        inner = setup.algorithm.algorithm.ask()
        back = setup.algorithm._decode(flat)
        for a, b in zip(inner, back):
            assert a.dtype == b.dtype
            np.testing.assert_array_equal(a.numpy(), b.numpy())
        if algo["name"] == "neat":
            assert np.isnan(flat.numpy()).any()  # the padding is carried, not zeroed


@pytest.mark.parametrize("pp, msg", [
    ({"use_op": False}, None),
    ({"use_op": "abc"}, r"policy\.params\.use_op: true .* or false .*got 'abc'"),
    ({"backend": "op"}, r"policy\.params\.backend: the gp_tree policy has no parameter 'backend'.*takes: use_op"),
])
def test_gp_tree_policy_params(pp, msg):
    """The gp_tree policy takes GPPolicy's use_op (a 'backend' in policy.params reached GPPolicy, which no longer
    has it: a TypeError traceback, and use_op was refused)."""
    from tfevo.training.builders import build

    data = load_config(CONFIGS / "gp_cartpole.toml").to_dict()
    data["policy"]["params"] = pp
    if msg is None:
        assert build(parse_config(data)).policy.use_op is False
    else:
        with pytest.raises(ConfigError, match=msg):
            build(parse_config(data))


def test_cvt_kmeans_in_blocks_equals_the_whole_distance_matrix(monkeypatch):
    """archive.kind = "cvt" with many cells: k-means assigned all samples at once, [num_samples, cells] floats
    (cells = 100_000: 10**6 samples, a ResourceExhaustedError from deep inside after 13 s). In blocks of rows it
    gives the same centroids bit for bit."""
    import tensorflow as tf

    from tfevo.qd import cvt

    x = tf.random.stateless_uniform([5000, 2], seed=[0, 3]).numpy()
    whole = cvt.kmeans_centroids(x, 50, 4, 0)
    monkeypatch.setattr(cvt, "_KMEANS_BLOCK", 50 * 333)  # 16 blocks, the last one partly padding
    assert cvt.kmeans_centroids(x, 50, 4, 0).tobytes() == whole.tobytes()
