"""The command line walked for every algorithm x problem kind, at toy budgets.

For each case (a config written to RESULTS/configs/<case>.json):
  train (2 generations) -> eval -> export -> play -> plot, all through ``tfevo.cli.main`` in this
  process; the same config trained again into another directory (same seed = same run), and trained
  for 1 generation then resumed to 2 (exact resume): progress.jsonl values (timing fields left out)
  and the best parameters must be equal bit for bit. Every exported .keras file is then loaded by one
  fresh interpreter that imports keras and numpy only, and its outputs and actions are compared with
  the run's own policy (as ``tfevo eval`` builds it) on the same observations.

usage (from the repository root):
  PYTHONPATH=$PWD python benchmarks/audit_cli_matrix.py [RESULTS_DIR] [--only SUBSTRING ...]
Writes RESULTS_DIR/matrix.jsonl (one line per case) and prints the table.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TIMING = {"wall_time", "generation_seconds", "compile_seconds", "frames_per_second", "fps"}
VECTOR = ["ars", "bipop_cma_es", "cholesky_cma_es", "cma_es", "de", "ga", "ipop_cma_es", "lm_ma_es", "openai_es",
          "pgpe", "pso", "random_search", "seed_ga", "sep_cma_es", "snes", "xnes"]


def _run(gens=2):
    return {"seed": 0, "generations": gens}


def cases() -> dict:
    out = {}
    ga_params = {"ga": {"truncation": 2, "num_elite_candidates": 1},
                 "seed_ga": {"truncation": 2, "num_elite_candidates": 1, "max_generations": 10}}
    for name in VECTOR:
        params = ga_params.get(name, {})
        out[f"{name}/CartPole-v1"] = {
            "name": name, "run": _run(), "env": {"id": "CartPole-v1", "episodes": 1, "max_steps": 20},
            "policy": {"kind": "mlp", "hidden": [4]},
            "algorithm": {"name": name, "popsize": 8, "params": params}, "evaluator": {"kind": "ingraph"}}
        out[f"{name}/Hopper-v5"] = {
            "name": name, "run": _run(), "env": {"id": "Hopper-v5", "episodes": 1, "max_steps": 10},
            "policy": {"kind": "mlp", "hidden": [4]},
            "algorithm": {"name": name, "popsize": 8, "params": params},
            "evaluator": {"kind": "pipelined", "num_envs": 4, "obs_norm": True}}
    out["openai_es/Pendulum-v1(pipelined,clip)"] = {
        "name": "pend", "run": _run(), "env": {"id": "Pendulum-v1", "episodes": 1, "max_steps": 10},
        "policy": {"kind": "linear", "hidden": [], "continuous": "clip"},
        "algorithm": {"name": "openai_es", "popsize": 8}, "evaluator": {"kind": "pipelined", "num_envs": 4}}
    for name in ("ga", "seed_ga"):
        out[f"{name}/ALE/Pong-v5"] = {
            "name": name, "run": _run(), "env": {"id": "ALE/Pong-v5", "episodes": 1, "max_steps": 25,
                                                 "kwargs": {"preset": "deep_neuroevolution"}},
            "policy": {"kind": "nature_dqn"}, "algorithm": {"name": name, "popsize": 4, "params": ga_params[name]},
            "evaluator": {"kind": "pipelined", "num_envs": 4, "decode_chunk": 2 if name == "seed_ga" else 0}}
    neat = {"max_nodes": 12, "max_conns": 24}
    out["neat/CartPole-v1"] = {
        "name": "neat", "run": _run(), "env": {"id": "CartPole-v1", "episodes": 1, "max_steps": 20},
        "policy": {"kind": "neat"}, "algorithm": {"name": "neat", "popsize": 6, "params": neat}}
    out["neat(recurrent)/Acrobot-v1"] = {
        "name": "neatr", "run": _run(), "env": {"id": "Acrobot-v1", "episodes": 1, "max_steps": 20},
        "policy": {"kind": "neat", "params": {"settle_steps": 1}},
        "algorithm": {"name": "neat", "popsize": 6, "params": {**neat, "feed_forward": False}}}
    out["neat/Swimmer-v5"] = {
        "name": "neat", "run": _run(), "env": {"id": "Swimmer-v5", "episodes": 1, "max_steps": 10},
        "policy": {"kind": "neat"}, "algorithm": {"name": "neat", "popsize": 6, "params": neat},
        "evaluator": {"kind": "pipelined", "num_envs": 3}}
    out["hyperneat/CartPole-v1"] = {
        "name": "hyperneat", "run": _run(), "env": {"id": "CartPole-v1", "episodes": 1, "max_steps": 20},
        "policy": {"kind": "hyperneat", "hidden": [3]}, "algorithm": {"name": "neat", "popsize": 6, "params": neat}}
    out["hyperneat/Hopper-v5"] = {
        "name": "hyperneat", "run": _run(), "env": {"id": "Hopper-v5", "episodes": 1, "max_steps": 10},
        "policy": {"kind": "hyperneat", "hidden": [3]}, "algorithm": {"name": "neat", "popsize": 6, "params": neat},
        "evaluator": {"kind": "pipelined", "num_envs": 3}}
    out["gp/CartPole-v1"] = {
        "name": "gp", "run": _run(), "env": {"id": "CartPole-v1", "episodes": 1, "max_steps": 20},
        "policy": {"kind": "gp_tree"}, "algorithm": {"name": "gp", "popsize": 8}}
    out["gp/Pendulum-v1"] = {
        "name": "gp", "run": _run(), "env": {"id": "Pendulum-v1", "episodes": 1, "max_steps": 10},
        "policy": {"kind": "gp_tree"}, "algorithm": {"name": "gp", "popsize": 8}}
    out["gp/Hopper-v5"] = {
        "name": "gp", "run": _run(), "env": {"id": "Hopper-v5", "episodes": 1, "max_steps": 10},
        "policy": {"kind": "gp_tree"}, "algorithm": {"name": "gp", "popsize": 8},
        "evaluator": {"kind": "pipelined", "num_envs": 4}}
    emitters = {"iso_line": {"emitter": "iso_line"}, "gaussian": {"emitter": "gaussian"},
                "cma_me": {"emitter": "cma_me", "num_emitters": 2}}
    for em, params in emitters.items():
        for task in ("rastrigin_qd", "sphere_linproj"):
            out[f"map_elites[{em}]/{task}"] = {
                "name": "me", "run": _run(), "problem": {"name": task, "num_dims": 6},
                "algorithm": {"name": "map_elites", "popsize": 8, "params": params},
                "archive": {"kind": "grid", "cells": [8, 8]}}
        out[f"map_elites[{em}]/Walker2d-v5"] = {
            "name": "qdrl", "run": _run(), "env": {"id": "Walker2d-v5", "episodes": 1, "max_steps": 10},
            "policy": {"kind": "mlp", "hidden": [4]}, "algorithm": {"name": "map_elites", "popsize": 8, "params": params},
            "archive": {"kind": "grid", "cells": [4, 4], "descriptors": ["contact:foot_geom", "contact:foot_left_geom"]},
            "evaluator": {"kind": "pipelined", "num_envs": 4}}
    out["map_elites[cma_me,cma-mae,cvt]/sphere_linproj"] = {
        "name": "mae", "run": _run(), "problem": {"name": "sphere_linproj", "num_dims": 6},
        "algorithm": {"name": "map_elites", "popsize": 8, "params": emitters["cma_me"]},
        "archive": {"kind": "cvt", "cells": 16, "learning_rate": 0.01, "threshold_min": 0.0}}
    return out


def cli(argv) -> tuple[int, str]:
    """``tfevo ARGV`` in this process: (exit code, stdout + stderr)."""
    from tfevo.cli import main

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        try:
            rc = main([str(a) for a in argv])
        except SystemExit as e:
            rc = e.code if isinstance(e.code, int) else 1
        except Exception:  # noqa: BLE001 - a traceback from deep inside is itself a finding
            rc = "traceback"
            buf.write(traceback.format_exc())
    return rc, buf.getvalue()


def progress(run: Path) -> list:
    rows = [json.loads(l) for l in (run / "progress.jsonl").read_text().splitlines() if l.strip()]
    return [{k: v for k, v in r.items() if k not in TIMING} for r in rows]


def best(run: Path) -> np.ndarray:
    import tensorflow as tf

    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(run / "checkpoints")))
    keys = sorted(k for k in reader.get_variable_to_shape_map() if k.startswith("trainer/best/"))
    return reader.get_tensor(keys[0])


def same(a: Path, b: Path) -> str:
    pa, pb = progress(a), progress(b)
    if pa != pb:
        diff = next((i, x, y) for i, (x, y) in enumerate(zip(pa, pb)) if x != y) if len(pa) == len(pb) else "length"
        return f"progress differs: {str(diff)[:300]}"
    if best(a).tobytes() != best(b).tobytes():  # bit for bit (NEAT genomes are NaN-padded)
        return "best parameters differ"
    return "ok"


def last_line(text: str) -> str:
    lines = [l for l in text.strip().splitlines() if l.strip()]
    err = [l for l in lines if "error" in l.lower()]
    return (err[-1] if err else (lines[-1] if lines else ""))[:400]


def audit_case(key, data, root: Path) -> dict:
    from tests.cli.test_cli_export import _reference

    slug = key.replace("/", "__").replace("[", "_").replace("]", "").replace(",", "_").replace("(", "_").replace(")", "")
    cfg_path = root / "configs" / f"{slug}.json"
    cfg_path.parent.mkdir(parents=True, exist_ok=True)
    cfg_path.write_text(json.dumps(data, indent=1))
    runs = root / "runs"
    run, again, resumed = runs / slug, runs / (slug + ".again"), runs / (slug + ".resumed")
    row = {"case": key, "config": str(cfg_path.relative_to(root))}
    t = time.time()
    rc, out = cli(["train", cfg_path, "--run-dir", run, "--no-progress"])
    row["train_s"] = round(time.time() - t, 1)
    row["train"] = "ok" if rc == 0 else f"FAIL rc={rc}: {last_line(out)}"
    if rc != 0:
        (root / "logs").mkdir(exist_ok=True)
        (root / "logs" / f"{slug}.train.txt").write_text(out)
        return row
    rc, out = cli(["eval", run, "--episodes", "2"])
    row["eval"] = "ok" if rc == 0 else f"FAIL rc={rc}: {last_line(out)}"
    row["eval_out"] = out.strip().splitlines()[-2:] if rc == 0 else None
    rc, out = cli(["export", run])
    if rc == 0:
        row["export"] = "ok"
        meta = json.loads((run / "best.keras.json").read_text())
        rng = np.random.default_rng(0)
        B = 16
        if meta["obs_dtype"] == "uint8":
            obs = rng.integers(0, 256, size=(B, *meta["obs_shape"])).astype(np.uint8)
        else:
            obs = (rng.normal(size=(B, *meta["obs_shape"])) * 0.5).astype(np.float32)
        np.save(run / "audit_obs.npy", obs)
        y_ref, a_ref, _ = _reference(run, obs)
        np.savez(run / "audit_ref.npz", y=y_ref.reshape(B, -1), a=a_ref)
    else:
        row["export"] = f"refused rc={rc}: {last_line(out)}" if rc == 2 else f"FAIL rc={rc}: {last_line(out)}"
    rc, out = cli(["play", run, "--video", run / "play.gif", "--max-steps", "8"])
    row["play"] = ("ok" if (run / "play.gif").is_file() else f"FAIL no file: {last_line(out)}") if rc == 0 else (
        f"refused rc={rc}: {last_line(out)}" if rc == 2 else f"FAIL rc={rc}: {last_line(out)}")
    rc, out = cli(["plot", run])
    row["plot"] = "ok" if rc == 0 and (run / "learning_curve.png").is_file() else f"FAIL rc={rc}: {last_line(out)}"
    row["plot_files"] = sorted(p.name for p in run.glob("*.png")) + sorted(p.name for p in run.glob("*.txt"))
    rc, out = cli(["train", cfg_path, "--run-dir", again, "--no-progress"])
    row["same_seed"] = same(run, again) if rc == 0 else f"FAIL rc={rc}: {last_line(out)}"
    rc1, out1 = cli(["train", cfg_path, "--run-dir", resumed, "--no-progress", "--generations", "1"])
    rc2, out2 = cli(["train", cfg_path, "--run-dir", resumed, "--no-progress", "--generations", "2"])
    row["resume"] = same(run, resumed) if rc1 == rc2 == 0 else f"FAIL rc={rc1},{rc2}: {last_line(out1 + out2)}"
    return row


_LOAD_ALL = """
import json, sys
import numpy as np
import keras
res = {}
for run in json.loads(sys.argv[1]):
    try:
        model = keras.models.load_model(run + "/best.keras")
        act = json.load(open(run + "/best.keras.json"))["action"]
        obs = np.load(run + "/audit_obs.npy")
        y = np.asarray(model(obs))
        ns = {"np": np, "y": y, **act, **{k: np.asarray(act[k], np.float32) for k in ("low", "high") if k in act}}
        exec(act["numpy"], ns)
        ref = np.load(run + "/audit_ref.npz")
        dy = float(np.max(np.abs(y.reshape(ref["y"].shape) - ref["y"]))) if y.size else 0.0
        a = np.asarray(ns["a"])
        da = float(np.max(np.abs(a.astype(np.float64) - ref["a"].reshape(a.shape)))) if a.size else 0.0
        res[run] = {"max|dy|": dy, "max|da|": da}
    except Exception as e:
        res[run] = {"error": repr(e)[:300]}
assert not any(m == "tfevo" or m.startswith("tfevo.") for m in sys.modules)
print(json.dumps(res))
"""


def main():
    args = sys.argv[1:]
    only = []
    if "--only" in args:
        i = args.index("--only")
        only, args = args[i + 1:], args[:i]
    root = Path(args[0] if args else ROOT / "benchmarks/results/cli_audit").resolve()
    root.mkdir(parents=True, exist_ok=True)
    os.chdir(root)  # runs/ and anything relative land here
    rows = []
    todo = {k: v for k, v in cases().items() if not only or any(s in k for s in only)}
    for key, data in todo.items():
        t = time.time()
        try:
            row = audit_case(key, data, root)
        except Exception:  # noqa: BLE001
            row = {"case": key, "driver_error": traceback.format_exc()[-800:]}
        row["seconds"] = round(time.time() - t, 1)
        print(json.dumps(row), flush=True)
        rows.append(row)
    exported = [str(root / "runs" / r["config"].split("/")[-1][:-5]) for r in rows if r.get("export") == "ok"]
    if exported:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        p = subprocess.run([sys.executable, "-c", _LOAD_ALL, json.dumps(exported)], capture_output=True, text=True,
                           env=env, cwd="/")
        loaded = json.loads(p.stdout.strip().splitlines()[-1]) if p.returncode == 0 else {}
        for r in rows:
            run = str(root / "runs" / r["config"].split("/")[-1][:-5])
            if run in loaded:
                d = loaded[run]
                ok = "error" not in d and d["max|dy|"] <= 1e-4 and d["max|da|"] <= 1e-4
                r["keras_load"] = ("ok " if ok else "FAIL ") + json.dumps(d)
            elif r.get("export") == "ok":
                r["keras_load"] = f"FAIL loader rc={p.returncode}: {p.stderr[-300:]}"
    name = "matrix.jsonl" if not only else "matrix_partial.jsonl"
    with open(root / name, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    for r in rows:
        print(r["case"], {k: (v if isinstance(v, str) and len(v) < 60 else (v[:60] if isinstance(v, str) else v))
                          for k, v in r.items() if k in ("train", "eval", "export", "keras_load", "play", "plot",
                                                         "same_seed", "resume", "driver_error")})


if __name__ == "__main__":
    main()
