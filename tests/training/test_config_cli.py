import json
from pathlib import Path

import pytest

from tfevo.cli import main, make_parser
from tfevo.core import ConfigError
from tfevo.training.config import DEFAULT_CONFIG, load_config, parse_config


def test_default_config_valid():
    cfg = parse_config(DEFAULT_CONFIG)
    assert cfg.env.id == "CartPole-v1" and cfg.run.generations > 0


def test_num_subsets_auto_resolves_by_device():
    import tensorflow as tf

    from tfevo.training.builders import num_subsets_of

    cfg = parse_config(DEFAULT_CONFIG)
    assert cfg.evaluator.num_subsets == "auto"
    assert num_subsets_of(cfg) == (2 if tf.config.list_physical_devices("GPU") else 1)
    cfg = parse_config({**DEFAULT_CONFIG, "evaluator": {"num_subsets": 4}})
    assert num_subsets_of(cfg) == 4


@pytest.mark.parametrize("data, msg", [
    ({"run": {"generations": 5}, "algorithm": {"popsiz": 3}},
     r"algorithm\.popsiz: unknown field \(did you mean 'popsize'\?\)"),
    ({"run": {"generatons": 5}}, r"run\.generatons: unknown field \(did you mean 'generations'\?\)"),
    ({"run": {"generations": 5}, "algorithm": {"popsize": 1}}, r"algorithm\.popsize"),
    ({"run": {}}, "set a budget"),
    ({"run": {"generations": 5}, "policy": {"kind": "transformer"}}, r"policy\.kind"),
    ({"run": {"generations": 5}, "policy": {"hidden": [0]}}, "hidden"),
    ({"run": {"generations": "many"}}, r"run\.generations"),
    ({"run": {"generations": 5}, "evaluator": {"num_subsets": 0}}, r"evaluator\.num_subsets"),
    ({"run": {"generations": 5}, "evaluator": {"num_subsets": "many"}}, r"evaluator\.num_subsets"),
    ({"run": {"generations": 5}, "policy": {"weight_dtype": "bfloat16"}}, r"policy\.weight_dtype"),
])
def test_bad_configs_name_the_field(data, msg):
    with pytest.raises(ConfigError, match=msg):
        parse_config(data)


def test_policy_weight_dtype_reaches_the_policy():
    import tensorflow as tf

    from tfevo.envs.base import ActionSpec
    from tfevo.training.builders import make_policy

    spec = ActionSpec(discrete=True, num_actions=2)
    for dtype in ("float32", "float16"):
        cfg = parse_config({**DEFAULT_CONFIG, "policy": {"kind": "mlp", "hidden": [4], "weight_dtype": dtype}})
        policy, _ = make_policy(cfg, (4,), spec)
        assert policy.weight_dtype == tf.as_dtype(dtype)


def test_load_toml_yaml_json(tmp_path):
    (tmp_path / "a.toml").write_text('name = "x"\n[run]\ngenerations = 3\n[env]\nid = "Pendulum-v1"\n')
    (tmp_path / "a.yaml").write_text("name: x\nrun: {generations: 3}\nenv: {id: Pendulum-v1}\n")
    (tmp_path / "a.json").write_text(json.dumps({"name": "x", "run": {"generations": 3}, "env": {"id": "Pendulum-v1"}}))
    cfgs = [load_config(tmp_path / f"a.{e}") for e in ("toml", "yaml", "json")]
    assert cfgs[0] == cfgs[1] == cfgs[2]
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.toml")
    (tmp_path / "b.toml").write_text("[run\n")
    with pytest.raises(ConfigError, match="could not be parsed"):
        load_config(tmp_path / "b.toml")


def test_cli_help_everywhere(capsys):
    for cmd in ([], ["train"], ["eval"], ["play"], ["plot"], ["list"]):
        with pytest.raises(SystemExit) as e:
            make_parser().parse_args(cmd + ["--help"])
        assert e.value.code == 0
        assert "usage: tfevo" in capsys.readouterr().out


@pytest.mark.parametrize("field, value, accepted", [
    ("env.episodes", True, "int"), ("run.generations", True, r"Optional\[int\]"), ("run.seed", False, "int"),
    ("evaluator.num_envs", True, r"Optional\[int\]"), ("policy.hidden", [True, 4], r"list\[int\]"),
    ("policy.activation", True, "str"),
])
def test_a_boolean_is_not_a_number(field, value, accepted):
    """TOML's true/false where a number (or name) belongs is refused, not read as 1/0."""
    section, name = field.split(".")
    data = {"run": {"generations": 5}}
    data.setdefault(section, {})[name] = value
    with pytest.raises(ConfigError, match=rf"{field}: a boolean is not accepted here \(got .*(true|false).*accepted: "
                                          rf"{accepted}"):
        parse_config(data)
    parse_config({"run": {"generations": 5}, "evaluator": {"obs_norm": True, "jit_compile": False},
                  "env": {"kwargs": {"sutton_barto_reward": True}}})  # boolean fields and free tables keep them


def test_cli_reports_config_errors(tmp_path, capsys):
    (tmp_path / "bad.toml").write_text("[run]\ngenerations = 2\n[algorithm]\nname = 'openai_es'\nfoo = 1\n")
    assert main(["train", str(tmp_path / "bad.toml")]) == 2
    err = capsys.readouterr().err
    assert "algorithm.foo: unknown field" in err


def test_cli_train_eval_plot_resume(tmp_path, capsys):
    run = tmp_path / "run"
    args = ["train", "--run-dir", str(run), "--generations", "3", "--no-progress",
            "--set", "algorithm.popsize=16", "--set", "policy.hidden=[8]", "--set", "env.episodes=1"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "learning curve" in out and str(run) in out
    rows = [json.loads(l) for l in (run / "progress.jsonl").read_text().splitlines()]
    assert [r["generation"] for r in rows] == [1, 2, 3]
    assert (run / "learning_curve.png").stat().st_size > 1000
    # same run dir, bigger budget: resumes at generation 3
    assert main(args[:3] + ["--generations", "5"] + args[5:]) == 0
    out = capsys.readouterr().out
    assert "resumed" in out
    rows = [json.loads(l) for l in (run / "progress.jsonl").read_text().splitlines()]
    assert [r["generation"] for r in rows] == [1, 2, 3, 4, 5]
    # a finished run: nothing to do, and it says so
    assert main(args[:3] + ["--generations", "5"] + args[5:]) == 0
    assert "has reached its budget (run.generations = 5); nothing to train" in capsys.readouterr().out
    assert len((run / "progress.jsonl").read_text().splitlines()) == 5
    # a different config in the same run dir is refused
    assert main(args + ["--set", "algorithm.popsize=32"]) == 2
    assert "different config" in capsys.readouterr().err
    assert main(["eval", str(run), "--episodes", "2"]) == 0
    assert "mean" in capsys.readouterr().out
    assert main(["plot", str(run), "--out", str(tmp_path / "c.png")]) == 0
    assert (tmp_path / "c.png").exists()
    assert main(["play", str(run), "--video", str(tmp_path / "v.gif"), "--max-steps", "5"]) == 0
    import imageio.v2 as imageio

    frames = imageio.mimread(tmp_path / "v.gif")
    assert len(frames) >= 5 and frames[0].shape[-1] in (3, 4)  # 6 frames; GIF may merge identical ones


def test_cli_unknown_env_and_strategy_param(tmp_path, capsys):
    assert main(["train", "--run-dir", str(tmp_path / "a"), "--set", "env.id=NoSuchEnv-v9"]) == 2
    assert "unknown environment id 'NoSuchEnv-v9'" in capsys.readouterr().err
    assert main(["train", "--run-dir", str(tmp_path / "b"), "--set", "algorithm.params.bogus=1"]) == 2
    assert "openai_es has no parameter 'bogus'" in capsys.readouterr().err


@pytest.mark.parametrize("field, value, msg", [
    ("env.id", "CartPol-v1", r"^env\.id: unknown environment id 'CartPol-v1' \(did you mean 'CartPole-v1'\?\)"),
    ("env.id", "cartpole-v1", r"^env\.id: unknown environment id 'cartpole-v1' \(did you mean 'CartPole-v1'\?\)"),
    ("env.id", "ALE/Pongg-v5", r"^env\.id: unknown Atari game 'ALE/Pongg-v5'.*did you mean pong"),
    ("algorithm.name", "openai-es", r"^algorithm\.name: unknown algorithm 'openai-es' \(did you mean 'openai_es'\?\)"),
    ("algorithm.name", "CMA_ES", r"^algorithm\.name: unknown algorithm 'CMA_ES' \(did you mean 'cma_es'\?\); known: ars"),
    ("algorithm.params", {"cr": 0.5}, r"^algorithm\.params\.cr: .*did you mean 'CR'"),
    ("env.kwargs", {"nosuch": 1}, r"^env\.kwargs: CartPole-v1: unknown option\(s\) \['nosuch'\]"),
])
def test_a_mistyped_name_is_refused_naming_the_field_and_the_closest_name(field, value, msg):
    """Names are compared without case for the suggestion, and the message starts with the config field."""
    from tfevo.training.builders import build

    data = json.loads(json.dumps(DEFAULT_CONFIG))
    table, key = field.split(".")
    data[table][key] = value
    if value == {"cr": 0.5}:
        data["algorithm"]["name"] = "de"
    with pytest.raises(ConfigError, match=msg):
        build(parse_config(data))


@pytest.mark.parametrize("env, evaluator, msg", [
    ("CartPole-v1", {"obs_norm": True}, r"^evaluator\.obs_norm=True is not read by evaluator\.kind 'ingraph' \(auto: "
                                        r"CartPole-v1 runs in-graph\): it is a setting of the pipelined evaluator"),
    ("CartPole-v1", {"kind": "ingraph", "num_envs": 4}, r"^evaluator\.num_envs=4 is not read by evaluator\.kind 'ingraph'"),
    ("CartPole-v1", {"num_subsets": 2}, r"^evaluator\.num_subsets=2 is not read"),
    ("CartPole-v1", {"kind": "pipelined", "jit_compile": True},
     r"^evaluator\.jit_compile=True is not read by evaluator\.kind 'pipelined': it is a setting of the in-graph"),
    ("CartPole-v1", {"decode_chunk": 4}, r"^evaluator\.decode_chunk=4: decodes seed-list genomes"),
])
def test_an_evaluator_setting_the_evaluator_does_not_read_is_refused(env, evaluator, msg):
    """They ran without a word (obs_norm on an in-graph task normalized nothing)."""
    from tfevo.training.builders import build

    data = json.loads(json.dumps(DEFAULT_CONFIG))
    data["env"]["id"], data["evaluator"] = env, evaluator
    with pytest.raises(ConfigError, match=msg):
        build(parse_config(data))
    with pytest.raises(ConfigError, match=r"evaluator is not used with problem"):
        parse_config({"run": {"generations": 1}, "algorithm": {"name": "map_elites"}, "evaluator": evaluator,
                      "problem": {"name": "sphere_qd", "num_dims": 4}})


def test_set_algorithm_name_drops_the_seed_ga_decode_chunk():
    from tfevo.cli.train import _load

    args = make_parser().parse_args(["train", "examples/configs/atari_ga_pong.toml", "--set", "algorithm.name=ga"])
    assert _load(args).evaluator.decode_chunk == 0


def test_resume_with_another_config_names_every_changed_field(tmp_path, capsys):
    """The refusal says which fields differ from the saved run, with both values (before any work)."""
    run = tmp_path / "run"
    run.mkdir()
    data = json.loads(json.dumps(DEFAULT_CONFIG))
    data["run"].update(generations=2, dir=str(run))
    data["algorithm"]["popsize"] = 8
    saved = parse_config(data).to_dict()
    (run / "config.json").write_text(json.dumps(saved))
    args = ["train", "--run-dir", str(run), "--generations", "4", "--no-progress", "--set", "algorithm.popsize=16",
            "--set", "algorithm.params.sigma=0.3", "--seed", "5"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "algorithm.popsize: 8 in the run, 16 now" in err
    assert "algorithm.params.sigma: 0.1 in the run, 0.3 now" in err and "run.seed: 0 in the run, 5 now" in err
    assert "run.generations" not in err  # the budget may change


def test_a_run_without_its_config_json_still_refuses_another_popsize(tmp_path, capsys):
    """config.json is what tfevo train compares; without it the checkpoint itself refuses other settings."""
    run = tmp_path / "run"
    args = ["train", "--run-dir", str(run), "--generations", "1", "--no-progress", "--set", "algorithm.popsize=8",
            "--set", "policy.hidden=[4]", "--set", "env.episodes=1", "--set", "env.max_steps=10"]
    assert main(args) == 0
    (run / "config.json").unlink()
    capsys.readouterr()
    assert main(args[:3] + ["--generations", "2"] + args[5:] + ["--set", "algorithm.popsize=10"]) == 2
    assert "popsize: 8 in the run, 10 now" in capsys.readouterr().err
    assert len((run / "progress.jsonl").read_text().splitlines()) == 1


def test_a_moved_run_directory_resumes_exactly(tmp_path, capsys):
    """run.dir is where the run is found: a copied directory, given with another spelling, resumes (it was
    refused as a different config) and continues as the uninterrupted run."""
    import shutil

    import numpy as np
    import tensorflow as tf

    toy = ["--no-progress", "--set", "algorithm.popsize=8", "--set", "policy.hidden=[4]", "--set", "env.episodes=1",
           "--set", "env.max_steps=20", "--set", "evaluator.kind=pipelined", "--set", "evaluator.num_envs=4"]
    assert main(["train", "--run-dir", str(tmp_path / "a"), "--generations", "1", *toy]) == 0
    shutil.copytree(tmp_path / "a", tmp_path / "moved")
    assert main(["train", "--run-dir", str(tmp_path / "moved") + "/", "--generations", "2", *toy]) == 0
    assert "resumed" in capsys.readouterr().out
    assert main(["train", "--run-dir", str(tmp_path / "a"), "--generations", "2", *toy]) == 0
    logs = [[json.loads(x)["best"] for x in (tmp_path / r / "progress.jsonl").read_text().splitlines()]
            for r in ("a", "moved")]
    assert len(logs[0]) == 2 and logs[0] == logs[1]
    ck = [tf.train.load_checkpoint(tf.train.latest_checkpoint(str(tmp_path / r / "checkpoints")))
          for r in ("a", "moved")]
    names = [k for k in ck[0].get_variable_to_shape_map() if k.startswith("algorithm/")]
    assert names and all(np.array_equal(ck[0].get_tensor(k), ck[1].get_tensor(k)) for k in names)


def test_set_fills_a_table_the_config_leaves_out():
    """--set archive.cells=... on a config without [archive] (to_dict writes it as null) builds the table."""
    from tfevo.cli.train import _load

    args = make_parser().parse_args(["train", "examples/configs/map_elites_rastrigin.toml", "--set", "archive=null",
                                     "--set", "archive.cells=[8,8]", "--set", "archive.kind=grid"])
    cfg = _load(args)
    assert cfg.archive.cells == [8, 8] and cfg.archive.kind == "grid"


@pytest.mark.parametrize("policy, msg", [
    ({"kind": "linear", "hidden": [64]}, r"policy\.hidden=\[64\] is not used by policy\.kind 'linear'"),
    ({"kind": "linear", "activation": "relu"}, r"policy\.activation='relu' is not used by policy\.kind 'linear'"),
    ({"kind": "nature_dqn", "hidden": [256]}, r"policy\.hidden=\[256\] is not used by policy\.kind 'nature_dqn'"),
    ({"kind": "nature_dqn", "activation": "elu"}, r"policy\.activation='elu' is not used by .*'nature_dqn'"),
    ({"kind": "neat", "hidden": [8]}, r"policy\.hidden=\[8\] is not used by policy\.kind 'neat'"),
    ({"kind": "gp_tree", "activation": "relu"}, r"policy\.activation='relu' is not used by .*'gp_tree'"),
    # these ran without a word: NEAT and GP never read weight_dtype, NEAT and HyperNEAT never read continuous
    ({"kind": "neat", "weight_dtype": "float16"}, r"policy\.weight_dtype='float16' is not used by policy\.kind 'neat'"),
    ({"kind": "hyperneat", "continuous": "clip"}, r"policy\.continuous='clip' is not used by policy\.kind 'hyperneat' "
                                                  r"\(NEAT and HyperNEAT map the output activation's range"),
    ({"kind": "gp_tree", "weight_dtype": "float16"}, r"policy\.weight_dtype='float16' is not used by .*'gp_tree'"),
])
def test_policy_settings_the_network_does_not_read_are_errors(policy, msg):
    algo = {"neat": "neat", "hyperneat": "neat", "gp_tree": "gp"}.get(policy["kind"], "openai_es")
    with pytest.raises(ConfigError, match=msg):
        parse_config({"run": {"generations": 5}, "algorithm": {"name": algo}, "policy": policy})


def test_continuous_actions_setting_on_a_discrete_task_is_refused():
    """policy.continuous = "clip" on CartPole-v1 ran as argmax without a word."""
    from tfevo.training.builders import build

    data = json.loads(json.dumps(DEFAULT_CONFIG))
    data["policy"]["continuous"] = "clip"
    with pytest.raises(ConfigError, match=r"^policy\.continuous='clip' is not used: CartPole-v1 has discrete actions"):
        build(parse_config(data))


def test_set_policy_kind_drops_the_former_kinds_settings(tmp_path):
    """--set policy.kind=linear on a config written for an MLP (the built-in default's hidden [16], a
    file's hidden and activation) switches the family; those settings given on the command line too
    are refused as in a file."""
    from tfevo.cli.train import _load

    cfg = _load(make_parser().parse_args(["train", "--set", "policy.kind=linear"]))
    assert cfg.policy.kind == "linear" and cfg.policy.hidden != DEFAULT_CONFIG["policy"]["hidden"]
    f = tmp_path / "mlp.toml"
    f.write_text('[run]\ngenerations = 5\n[policy]\nkind = "mlp"\nhidden = [64]\nactivation = "relu"\n')
    cfg = _load(make_parser().parse_args(["train", str(f), "--set", "policy.kind=nature_dqn"]))
    assert cfg.policy.kind == "nature_dqn"
    with pytest.raises(ConfigError, match=r"policy\.hidden=\[8\] is not used by policy\.kind 'linear'"):
        _load(make_parser().parse_args(["train", "--set", "policy.kind=linear", "--set", "policy.hidden=[8]"]))
    with pytest.raises(ConfigError, match=r"policy\.hidden=\[64\] is not used by policy\.kind 'linear'"):
        f.write_text('[run]\ngenerations = 5\n[policy]\nkind = "linear"\nhidden = [64]\n')
        _load(make_parser().parse_args(["train", str(f)]))


@pytest.mark.parametrize("name, kind, kept", [
    ("cma_es", "mlp", {"sigma": 0.1}), ("ga", "mlp", {"sigma": 0.1}), ("pso", "mlp", {}),
    ("neat", "neat", {}), ("gp", "gp_tree", {})])
def test_set_algorithm_name_switches_the_family(name, kind, kept, capsys):
    """--set algorithm.name=A on the built-in default (OpenAI-ES params sigma and learning_rate, an MLP
    policy): the params A does not read are left out, the policy kind becomes A's when A cannot evolve
    an MLP, and the result builds the algorithm; a line says what was left out."""
    from tfevo.cli.train import _load
    from tfevo.training.families import family_of

    cfg = _load(make_parser().parse_args(["train", "--set", f"algorithm.name={name}"]))
    assert cfg.algorithm.name == name and cfg.policy.kind == kind and cfg.algorithm.params == kept
    assert "learning_rate (not read by " + name in capsys.readouterr().out
    accepted = family_of(cfg).param_names(name)
    assert set(cfg.algorithm.params) <= set(accepted)


def test_set_algorithm_name_keeps_what_the_command_line_gives():
    from tfevo.cli.train import _load

    # a param given on the command line stays and is refused as in a file, naming the algorithm
    with pytest.raises(ConfigError, match=r"algorithm\.params\.learning_rate: cma_es has no parameter"):
        from tfevo.training.builders import build

        build(_load(make_parser().parse_args(["train", "--set", "algorithm.name=cma_es",
                                               "--set", "algorithm.params.learning_rate=0.1"])))
    # an explicit policy.kind stays (and an impossible pair is refused as in a file)
    with pytest.raises(ConfigError, match="policy.kind 'mlp' cannot be evolved by algorithm.name 'neat'"):
        _load(make_parser().parse_args(["train", "--set", "algorithm.name=neat", "--set", "policy.kind=mlp"]))
    # an unknown name: the closest one, before any work
    with pytest.raises(ConfigError, match=r"^algorithm\.name: unknown algorithm 'cmaes' \(did you mean 'cma_es'\?\)"):
        _load(make_parser().parse_args(["train", "--set", "algorithm.name=cmaes"]))


@pytest.mark.parametrize("name", ["openai_es", "map_elites", "neat"])
def test_a_population_larger_than_memory_is_refused_before_any_work(name):
    from tfevo.cli.train import _load
    from tfevo.training.builders import build

    cfg = _load(make_parser().parse_args(["train", "--set", f"algorithm.name={name}",
                                          "--set", "algorithm.popsize=100000000000"]))
    with pytest.raises(ConfigError, match=r"algorithm\.popsize=100000000000: one population of 100000000000 x \d+ "
                                          r"float32 parameters needs [\d.]+ GiB, more than this machine's"):
        build(cfg)


def test_policy_defaults_and_a_dumped_config_stay_valid_for_every_kind():
    for kind, algo in (("linear", "openai_es"), ("nature_dqn", "openai_es"), ("neat", "neat"), ("gp_tree", "gp")):
        cfg = parse_config({"run": {"generations": 5}, "algorithm": {"name": algo}, "policy": {"kind": kind}})
        assert parse_config(cfg.to_dict()).policy.kind == kind  # the dump carries hidden/activation defaults
    assert parse_config({"run": {"generations": 5}, "policy": {"kind": "linear", "hidden": []}}).policy.hidden == []
    with pytest.raises(ConfigError, match="policy is not used with problem"):
        parse_config({"run": {"generations": 5}, "algorithm": {"name": "map_elites"}, "policy": {"hidden": [8]},
                      "problem": {"name": "sphere_qd", "num_dims": 4}})


@pytest.mark.parametrize("params, msg", [
    ({"sigma": -1.0}, r"^algorithm\.params\.sigma: sigma must be > 0, got -1"),
    ({"learning_rate": float("inf")}, r"^algorithm\.params\.learning_rate: learning_rate must be > 0, got inf"),
    # --set values that are no JSON stay strings; a boolean is not a number (both were passed on: a traceback
    # from float('abc'), sigma=true ran as 1.0)
    ({"sigma": "abc"}, r"^algorithm\.params\.sigma: openai_es takes a number \(default 0\.02\), got 'abc'"),
    ({"sigma": "0.1,0.2"}, r"^algorithm\.params\.sigma: openai_es takes a number .*got '0\.1,0\.2'"),
    ({"sigma": True}, r"^algorithm\.params\.sigma: openai_es takes a number .*got True"),
    ({"sigma": "nan"}, r"^algorithm\.params\.sigma: sigma must be > 0, got nan"),  # inf/nan spelled as words
    ({"sigma": [0.1]}, r"^algorithm openai_es: .*list"),
])
def test_a_strategy_constructor_error_names_the_config_field(params, msg):
    from tfevo.training.parts import make_algorithm

    with pytest.raises(ConfigError, match=msg):
        make_algorithm("openai_es", 4, 8, 0, params)
    with pytest.raises(ConfigError, match=r"^algorithm\.popsize: openai_es: popsize must be even"):
        make_algorithm("openai_es", 4, 7, 0, {})


@pytest.mark.parametrize("kwargs, msg", [
    ({"max_episode_steps": "abc"}, r"^env\.kwargs: CartPole-v1 could not take .*'abc'.*invalid literal"),
    ({"max_episode_steps": -1}, r"^env\.kwargs\.max_episode_steps: max_episode_steps must be >= 0, got -1"),
])
def test_env_kwargs_errors_name_the_field(kwargs, msg):
    """A value the environment cannot read is a ConfigError naming env.kwargs (it was a ValueError traceback)."""
    from tfevo.training.builders import build

    data = json.loads(json.dumps(DEFAULT_CONFIG))
    data["env"]["kwargs"] = kwargs
    with pytest.raises(ConfigError, match=msg):
        build(parse_config(data))


def test_a_seed_ga_budget_beyond_max_generations_fails_before_any_work(tmp_path, capsys):
    # the genomes hold max_generations tells: a longer generation budget is refused up front (it ran
    # max_generations + 1 generations, the last writing seeds past the genome, with no error)
    run = tmp_path / "run"
    args = ["train", "--run-dir", str(run), "--generations", "4", "--no-progress", "--set", "algorithm.name=seed_ga",
            "--set", "algorithm.popsize=8", "--set", "policy.hidden=[4]", "--set", "env.episodes=1"]
    assert main(args + ["--set", "algorithm.params.max_generations=3"]) == 2
    err = capsys.readouterr().err
    assert "algorithm.params.max_generations" in err and "max_generations = 3" in err and "run.generations = 4" in err
    assert not (run / "config.json").exists() and not (run / "checkpoints").exists()
    # a budget equal to max_generations completes, and the run's genomes are whole
    assert main(args + ["--set", "algorithm.params.max_generations=4"]) == 0
    rows = [json.loads(l) for l in (run / "progress.jsonl").read_text().splitlines()]
    assert [r["generation"] for r in rows] == [1, 2, 3, 4]
    # the best that `tfevo eval`/`export` decode is the elite (row 0), best_ever its mean
    import numpy as np
    import tensorflow as tf

    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(run / "checkpoints")))
    var = lambda name: next(reader.get_tensor(k) for k in reader.get_variable_to_shape_map()  # noqa: E731
                            if k.startswith(name))
    np.testing.assert_array_equal(var("trainer/best/"), var("algorithm/population/")[0])
    elite_mean = var("algorithm/eval_sum/")[0] / var("algorithm/eval_count/")[0]
    assert rows[-1]["best_ever"] == pytest.approx(float(elite_mean), rel=1e-6)
    assert rows[-1]["elite_mean"] == pytest.approx(float(elite_mean), rel=1e-6)
    # what eval/play/export load is the elite's parameters as the restored SeedGA decodes them
    from tfevo.cli.evaluate import _restore_setup
    from tfevo.training.builders import load_run

    _, params = _restore_setup(run)
    _, _, ga = load_run(run)
    np.testing.assert_array_equal(params, ga.decode(ga.population[:1])[0].numpy())
    np.testing.assert_array_equal(params, ga.best[0].numpy())
    assert main(["export", str(run)]) == 0 and (run / "best.keras").exists()


def _config_keys(model=None, prefix=""):
    """Every leaf field of the run config schema as a dotted key (run.seed, archive.cells, ...)."""
    import typing

    from pydantic import BaseModel

    from tfevo.training.config import Config

    for name, field in (model or Config).model_fields.items():
        sub = [a for a in (field.annotation, *typing.get_args(field.annotation))
               if isinstance(a, type) and issubclass(a, BaseModel)]
        yield from _config_keys(sub[0], f"{prefix}{name}.") if sub else [prefix + name]


def _documented_toml_keys(text):
    """Dotted keys set (or shown commented out) in the ```toml blocks of a page."""
    import re

    keys = set()
    for block in re.findall(r"```toml\n(.*?)```", text, flags=re.S):
        table = ""
        for line in block.splitlines():
            m = re.match(r"\s*#?\s*\[(\w+)\]", line)
            if m:
                table = m[1] + "."
                continue
            m = re.match(r"\s*#?\s*(\w+)\s*=", line)
            if m:
                keys.add(table + m[1])
    return keys


def test_every_config_key_is_documented_and_every_documented_key_exists():
    """docs/training.md shows every field the config reads, and no field it does not have."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "training.md").read_text(encoding="utf-8")
    schema = set(_config_keys())
    shown = _documented_toml_keys(doc)
    assert shown - schema == set()  # documented, but not a field
    assert sorted(k for k in schema if k not in shown and f"`{k}`" not in doc) == []  # a field, undocumented
