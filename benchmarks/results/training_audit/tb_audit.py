"""Audit: TensorBoard scalars vs progress.jsonl for every family through `tfevo train`."""
import json, sys, math, glob
from pathlib import Path
import numpy as np
import tensorflow as tf
from tfevo.cli import main

CONFIGS = Path("examples/configs")
HOST = ["evaluator.kind=pipelined", "evaluator.num_envs=4"]
RUNS = {
    "strategy": (None, ["algorithm.popsize=8", "policy.hidden=[4]", "env.episodes=1", "env.max_steps=12", *HOST]),
    "neat": ("neat_cartpole", ["algorithm.popsize=6", "env.max_steps=12", "env.episodes=1", *HOST]),
    "gp": ("gp_cartpole", ["algorithm.popsize=8", "env.max_steps=12", "env.episodes=1", *HOST]),
    "map_elites": ("map_elites_rastrigin", ["algorithm.popsize=8"]),
}

def events(run):
    out = {}
    for f in sorted(glob.glob(str(run / "tensorboard" / "events.out.tfevents.*"))):
        for ev in tf.compat.v1.train.summary_iterator(f):
            for v in ev.summary.value:
                val = float(tf.make_ndarray(v.tensor)) if v.HasField("tensor") else v.simple_value
                out.setdefault(v.tag, []).append((ev.step, val))
    return out

def compare(run):
    rows = [json.loads(l) for l in (run / "progress.jsonl").read_text().splitlines()]
    ev = events(run)
    problems = []
    gens = [r["generation"] for r in rows]
    if gens != list(range(1, len(rows) + 1)):
        problems.append(f"jsonl generations {gens}")
    keys = set(rows[0]) - {"generation"}
    tagmap = {}
    for tag in ev:
        tagmap[tag.split("/", 1)[1]] = tag
    missing = sorted(k for k in keys if k not in tagmap)
    extra = sorted(k for k in tagmap if k not in keys)
    if missing: problems.append(f"in jsonl, not in TB: {missing}")
    if extra: problems.append(f"in TB, not in jsonl: {extra}")
    for k, tag in tagmap.items():
        steps = [s for s, _ in ev[tag]]
        if steps != gens:
            problems.append(f"{tag}: steps {steps} != {gens}")
            continue
        if k not in keys: continue
        for r, (s, v) in zip(rows, ev[tag]):
            want = r[k]
            want = float("nan") if want is None else float(want)
            if not (np.float32(want) == np.float32(v) or (math.isnan(want) and math.isnan(v))):
                problems.append(f"{tag} gen {s}: TB {v!r} jsonl {want!r}")
                break
    return problems

if __name__ == "__main__":
    root = Path(sys.argv[1]); which = sys.argv[2:] or list(RUNS)
    for name in which:
        cfg, ov = RUNS[name]
        run = root / name
        base = ["train"] + ([str(CONFIGS / f"{cfg}.toml")] if cfg else []) + ["--run-dir", str(run), "--no-progress"]
        for o in ov: base += ["--set", o]
        assert main(base + ["--generations", "3"]) == 0
        assert main(base + ["--generations", "5"]) == 0   # resume, raised budget
        assert main(base + ["--generations", "5"]) == 0   # re-run finished
        print("AUDIT", name, compare(run) or "OK", flush=True)
