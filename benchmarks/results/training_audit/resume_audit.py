import json, sys, shutil
from pathlib import Path
from tfevo.cli import main
root = Path(sys.argv[1]); shutil.rmtree(root, ignore_errors=True)
HOST = ["evaluator.kind=pipelined", "evaluator.num_envs=4"]
base = ["train", "--run-dir", str(root / "r"), "--no-progress"]
for o in ["algorithm.popsize=8", "policy.hidden=[4]", "env.episodes=1", "env.max_steps=12", *HOST]:
    base += ["--set", o]
print("RC first", main(base + ["--generations", "2"]))
for extra in (["--set", "algorithm.popsize=10"], ["--set", "algorithm.name=snes"], ["--seed", "3"],
              ["--set", "run.keep_checkpoints=5"], ["--set", "run.checkpoint_every=2"], ["--devices", "1"],
              ["--frames", "100"]):
    print("CASE", extra, "RC", main(base + ["--generations", "3"] + extra), flush=True)
rows = [json.loads(l) for l in (root / "r" / "progress.jsonl").read_text().splitlines()]
print("GENS", [r["generation"] for r in rows], [r["frames"] for r in rows])
# lower budget than done
print("CASE lower RC", main(base + ["--generations", "1"]))
rows = [json.loads(l) for l in (root / "r" / "progress.jsonl").read_text().splitlines()]
print("GENS", [r["generation"] for r in rows])
# config.json deleted, then changed popsize
(root / "r" / "config.json").unlink()
try:
    print("CASE noconfig popsize RC", main(base + ["--generations", "4", "--set", "algorithm.popsize=10"]))
except Exception as e:
    print("CASE noconfig popsize EXC", type(e).__name__, str(e)[:300])
