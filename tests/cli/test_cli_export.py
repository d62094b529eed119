"""`tfevo export`: the best member of a toy run of each policy family as a .keras file that a
process importing only keras and numpy loads, and whose outputs and actions are the run's policy's."""

import json
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from tfevo.cli import main
from tfevo.core import ConfigError

pytest.importorskip("gymnasium")

BASE = ["--generations", "1", "--no-progress", "--set", "env.episodes=1", "--set", "evaluator.kind=pipelined",
        "--set", "env.max_steps=8"]
RUNS = {
    "mlp": ["--set", "env.id=CartPole-v1", "--set", "policy.kind=mlp", "--set", "algorithm.popsize=2"],
    # the rollouts ran float16-rounded weights: the file holds those
    "mlp_float16": ["--set", "env.id=CartPole-v1", "--set", "policy.kind=mlp", "--set", "algorithm.popsize=2",
                    "--set", "policy.weight_dtype=float16"],
    "linear": ["--set", "env.id=CartPole-v1", "--set", "policy.kind=linear", "--set", "algorithm.popsize=2"],
    # observation normalization folded into the model; continuous actions squashed by tanh to the bounds
    "mlp_norm_pendulum": ["--set", "env.id=Pendulum-v1", "--set", "policy.kind=mlp", "--set", "algorithm.popsize=2",
                          "--set", "evaluator.obs_norm=true"],
    "neat": ["--set", "env.id=CartPole-v1", "--set", "algorithm.name=neat", "--set", "algorithm.params={}",
             "--set", "policy.kind=neat", "--set", "algorithm.popsize=4"],
    "hyperneat": ["--set", "env.id=CartPole-v1", "--set", "algorithm.name=neat", "--set", "algorithm.params={}",
                  "--set", "policy.kind=hyperneat", "--set", "algorithm.popsize=4"],
    "gp_tree": ["--set", "env.id=CartPole-v1", "--set", "algorithm.name=gp", "--set", "algorithm.params={}",
                "--set", "policy.kind=gp_tree", "--set", "algorithm.popsize=4"],
    "gp_tree_pendulum": ["--set", "env.id=Pendulum-v1", "--set", "algorithm.name=gp", "--set", "algorithm.params={}",
                         "--set", "policy.kind=gp_tree", "--set", "algorithm.popsize=4"],
    # 2-dim continuous actions, clipped to the bounds
    "mujoco_mlp_clip": ["--set", "env.id=Swimmer-v5", "--set", "policy.kind=mlp", "--set", "algorithm.popsize=2",
                        "--set", "policy.continuous=clip", "--set", "evaluator.kind=auto"],
    # uint8 frames: the 1/255 scaling folded into the model as a Rescaling layer
    "atari_linear": ["--set", "env.id=ALE/Pong-v5", "--set", "policy.kind=linear", "--set", "algorithm.popsize=2",
                     "--set", 'env.kwargs={"stack_num": 2, "img_height": 42, "img_width": 42}',
                     "--set", "evaluator.kind=auto"],
}

# loads the model and applies the metadata's action rule with keras and numpy only; one process per
# test module (started by the `loader` fixture) answers one request per line: MODEL OBS.npy OUT.npz
_LOADER = """
import json, sys, traceback
import numpy as np
import keras
for line in sys.stdin:
    model_path, obs_path, out_path = json.loads(line)
    try:
        model = keras.models.load_model(model_path)
        act = json.load(open(model_path + ".json"))["action"]
        obs = np.load(obs_path)
        y = np.asarray(model(obs))
        ns = {"np": np, "y": y, **act, **{k: np.asarray(act[k], np.float32) for k in ("low", "high") if k in act}}
        exec(act["numpy"], ns)
        assert not any(m == "tfevo" or m.startswith("tfevo.") for m in sys.modules), "the loader imported tfevo"
        np.savez(out_path, y=y, a=np.asarray(ns["a"]))
        print(json.dumps({"ok": True}), flush=True)
    except Exception:
        print(json.dumps({"ok": False, "error": traceback.format_exc()}), flush=True)
"""


@pytest.fixture(scope="module")
def loader(tmp_path_factory):
    """A process that imports keras and numpy only and loads the exported files it is sent."""
    err = open(tmp_path_factory.mktemp("loader") / "stderr.txt", "w+")  # (a file: a full pipe would block it)
    proc = subprocess.Popen([sys.executable, "-c", _LOADER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=err, text=True)

    def load(model, obs, out):
        proc.stdin.write(json.dumps([str(model), str(obs), str(out)]) + "\n")
        proc.stdin.flush()
        line = proc.stdout.readline()
        while line and not line.startswith('{"ok"'):  # (anything else a load printed)
            line = proc.stdout.readline()
        if not line:
            err.seek(0)
            raise AssertionError(f"the loader process ended: {err.read()[-3000:]}")
        reply = json.loads(line)
        assert reply["ok"], reply["error"][-3000:]

    yield load
    proc.stdin.close()
    try:
        proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
        err.close()


@pytest.fixture(scope="module", params=list(RUNS))
def toy_run(request, tmp_path_factory):
    if request.param.startswith("atari"):
        pytest.importorskip("ale_py")
    if request.param.startswith("mujoco"):
        pytest.importorskip("mujoco")
    run = tmp_path_factory.mktemp(request.param) / "run"
    assert main(["train", "--run-dir", str(run), *BASE, *RUNS[request.param]]) == 0
    return request.param, run


def _reference(run, obs):
    """Raw outputs [B, K] and actions of the run's own policy for the best member."""
    from tfevo.cli.evaluate import _restore_setup
    from tfevo.training.builders import env_spec, make_obs_norm
    from tfevo.training.families import family_of

    cfg, params = _restore_setup(run)
    obs_shape, _, spec, _ = env_spec(cfg.env.id, cfg.env.kwargs)
    policy = family_of(cfg).policy(cfg, obs_shape, spec).policy
    norm = make_obs_norm(cfg, obs_shape, run)
    x = tf.constant(obs[None])
    if norm is not None:
        x = norm.normalize(x)
    p = tf.constant(params[None], tf.float32)
    kind = cfg.policy.kind
    if kind == "neat":
        from tfevo.neat import _forward_op as fo

        c = policy.config
        y = fo.forward(policy.transform(policy.unflatten(p)), x, c.num_inputs, c.num_outputs, c.activation_options,
                       c.aggregation_options)
    elif kind == "hyperneat":
        y = policy.hyperneat.forward(policy.unflatten_graph(p), x)
    elif kind == "gp_tree":
        y = policy._outputs(p, x)
    else:
        p = policy.prepare(p)  # what the rollouts run (float16-rounded with policy.weight_dtype float16)
        y = policy.outputs(p, x)
    return np.asarray(y[0]), np.asarray(policy.forward(p, x)[0]), cfg


def test_export_loads_without_tfevo_and_gives_the_policys_outputs_and_actions(toy_run, loader, tmp_path, capsys):
    name, run = toy_run
    assert main(["export", str(run)]) == 0
    out = capsys.readouterr().out
    model = run / "best.keras"
    assert model.is_file() and (run / "best.keras.json").is_file()
    meta = json.loads((run / "best.keras.json").read_text())
    assert meta["action"]["numpy"] in out
    rng = np.random.default_rng(0)
    B = 64
    if meta["obs_dtype"] == "uint8":
        obs = rng.integers(0, 256, size=(B, *meta["obs_shape"])).astype(np.uint8)
    else:
        scale = 0.5 if "CartPole" in meta["env_id"] else 2.0
        obs = (rng.normal(size=(B, *meta["obs_shape"])) * scale).astype(np.float32)
    np.save(tmp_path / "obs.npy", obs)
    got = tmp_path / "got.npz"
    loader(model, tmp_path / "obs.npy", got)
    res = np.load(got)
    y_ref, a_ref, cfg = _reference(run, obs)
    # float32 sums in another order: ~1e-6 for a handful of inputs, more over Atari's 3528 pixels
    tol = 1e-6 if obs[0].size < 100 else 2e-5
    np.testing.assert_allclose(res["y"], y_ref.reshape(B, -1), rtol=tol, atol=tol)
    if meta["action"]["type"] == "discrete":
        np.testing.assert_array_equal(res["a"], a_ref)
    else:
        assert res["a"].shape == a_ref.shape == (B, *meta["action"]["shape"])
        np.testing.assert_allclose(res["a"], a_ref, rtol=1e-5, atol=1e-5)
    assert meta["env_id"] == cfg.env.id and meta["policy_kind"] == cfg.policy.kind
    assert ("normalization" in meta["preprocessing"]) == bool(cfg.evaluator.obs_norm)
    assert ("rescaling 1/255" in meta["preprocessing"]) == (meta["obs_dtype"] == "uint8")
    if name == "linear":  # --out: anywhere, the metadata next to it
        other = tmp_path / "agent.keras"
        assert main(["export", str(run), "--out", str(other)]) == 0
        assert other.is_file() and json.loads((tmp_path / "agent.keras.json").read_text()) == meta


@pytest.mark.parametrize("case", ["missing", "suffix", "no_folder", "directory"])
def test_export_bad_input_is_a_clear_error(case, tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text("{}")
    args = {"missing": [str(tmp_path / "nope")],
            "suffix": [str(run), "--out", str(tmp_path / "m.h5")],
            "no_folder": [str(run), "--out", str(tmp_path / "no" / "m.keras")],
            "directory": [str(run), "--out", str(tmp_path)]}[case]
    if case == "directory":
        (tmp_path / "d.keras").mkdir()
        args = [str(run), "--out", str(tmp_path / "d.keras")]
    assert main(["export", *args]) == 2
    err = capsys.readouterr().err
    want = {"missing": "does not exist", "suffix": "must end in .keras", "no_folder": "does not exist",
            "directory": "is a directory"}[case]
    assert want in err, err


def test_export_refuses_qd_task_runs_and_recurrent_neat(tmp_path):
    from tfevo.cli.export import build_export
    from tfevo.training import config as C

    qd = C.parse_config({"name": "qd", "run": {"generations": 1}, "algorithm": {"name": "map_elites", "popsize": 4},
                         "problem": {"name": "rastrigin_qd", "num_dims": 4}}, "test")
    with pytest.raises(ConfigError, match="QD task"):
        build_export(qd, np.zeros(4, np.float32), tmp_path)
    rec = C.parse_config({"name": "rec", "run": {"generations": 1}, "env": {"id": "CartPole-v1"},
                          "algorithm": {"name": "neat", "popsize": 4, "params": {"feed_forward": False}},
                          "policy": {"kind": "neat"}}, "test")
    with pytest.raises(ConfigError, match="recurrent NEAT"):
        build_export(rec, np.zeros(1, np.float32), tmp_path)
