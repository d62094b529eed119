#!/bin/bash
# Same seed through the CLI: unsharded vs --devices 1 vs --devices 2 (separate processes: logical devices
# must be configured before TensorFlow starts).  Host (pipelined) ES and in-graph NEAT, 4 generations.
HERE=$(cd "$(dirname "$0")" && pwd); cd "$HERE/../../.."
export PYTHONPATH=$PWD
R=/tmp/auditdist/dist; rm -rf $R; mkdir -p $R
ES="--set algorithm.popsize=8 --set policy.hidden=[4] --set env.episodes=1 --set env.max_steps=20 --set evaluator.kind=pipelined --set evaluator.num_envs=4"
NEAT="examples/configs/neat_cartpole.toml --set algorithm.popsize=6 --set env.max_steps=20 --set env.episodes=1"
for fam in es neat; do
  if [ $fam = es ]; then A="$ES"; else A="$NEAT"; fi
  for d in none 1 2; do
    if [ $d = none ]; then D=""; else D="--devices $d"; fi
    nice -n 5 python -m tfevo.cli train $A --run-dir $R/$fam-$d --generations 4 --no-progress $D > $R/$fam-$d.log 2>&1; echo "$fam $d rc=$?"
  done
  # resume the 2-device run on 1 device with a larger budget, and compare with a 6-gen 2-device run
  nice -n 5 python -m tfevo.cli train $A --run-dir $R/$fam-2 --generations 6 --no-progress --devices 1 > $R/$fam-2r.log 2>&1; echo "$fam 2->1 resume rc=$?"
  nice -n 5 python -m tfevo.cli train $A --run-dir $R/$fam-2b --generations 6 --no-progress --devices 2 > $R/$fam-2b.log 2>&1; echo "$fam 2b rc=$?"
done
python - <<'PY'
import json
from pathlib import Path
R = Path("/tmp/auditdist/dist")
T = ("wall_time", "generation_seconds", "frames_per_second", "compile_seconds")
def rows(p): return [{k: v for k, v in json.loads(l).items() if k not in T} for l in (R / p / "progress.jsonl").read_text().splitlines()]
for fam in ("es", "neat"):
    a, b, c = rows(f"{fam}-none"), rows(f"{fam}-1"), rows(f"{fam}-2")
    print(fam, "1 device == 2 devices:", b == c, "| unsharded == 1 device:", a == b)
    print(fam, "2 dev 4 gens + resumed on 1 dev to 6 == 2 dev 6 gens:", rows(f"{fam}-2") == rows(f"{fam}-2b"))
    for n, r in (("none", a), ("1", b), ("2", c)):
        print("  ", n, [(x["generation"], x["best"], x["mean"], x["frames"]) for x in r])
PY
