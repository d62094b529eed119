"""`tfevo train` against the Python API, and against itself killed with SIGKILL mid-run.

1. CLI == API: the same config trained by `tfevo train` (a separate process) and by
   ``build(load_config(...))`` + ``Trainer`` in this process: equal progress.jsonl values (timing
   fields left out) and best parameters, bit for bit.
2. SIGKILL: `tfevo train --generations 6` killed once 3 generations are logged, then the same
   command again, against an uninterrupted 6-generation run: equal, bit for bit.

Configs are the matrix driver's (benchmarks/audit_cli_matrix.py), written to RESULTS/configs/.
usage (from the repository root):
  PYTHONPATH=$PWD python benchmarks/audit_cli_api_kill.py [RESULTS_DIR]
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from audit_cli_matrix import cases, same  # noqa: E402

CASES = ["openai_es/CartPole-v1", "seed_ga/Hopper-v5", "neat/CartPole-v1", "hyperneat/Hopper-v5", "gp/Pendulum-v1",
         "map_elites[cma_me]/rastrigin_qd", "map_elites[iso_line]/Walker2d-v5"]


def tfevo(*args, **kw):
    return subprocess.Popen([sys.executable, "-m", "tfevo.cli", *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, **kw)


def api_run(cfg_path: Path, run_dir: Path):
    from tfevo.training import Trainer
    from tfevo.training.builders import build
    from tfevo.training.config import load_config

    cfg = load_config(cfg_path)
    setup = build(cfg)
    Trainer(setup.algorithm, setup.evaluator, run_dir=run_dir, generations=cfg.run.generations,
            checkpoint_every=cfg.run.checkpoint_every, keep_checkpoints=cfg.run.keep_checkpoints, progress=False,
            verbose=False, extra_trackables=setup.trackables).run()


def main():
    root = Path(sys.argv[1] if len(sys.argv) > 1 else ROOT / "benchmarks/results/cli_audit").resolve()
    runs = root / "runs_api_kill"
    runs.mkdir(parents=True, exist_ok=True)
    all_cases = cases()
    out = []
    for key in CASES:
        data = json.loads(json.dumps(all_cases[key]))
        data["run"]["generations"] = 6
        slug = key.replace("/", "__").replace("[", "_").replace("]", "")
        cfg = root / "configs" / f"{slug}.g6.json"
        cfg.parent.mkdir(parents=True, exist_ok=True)
        cfg.write_text(json.dumps(data, indent=1))
        full, api, killed = runs / f"{slug}.cli", runs / f"{slug}.api", runs / f"{slug}.killed"
        row = {"case": key, "config": str(cfg.relative_to(root))}
        p = tfevo("train", cfg, "--run-dir", full, "--no-progress")
        log = p.communicate()[0]
        if p.returncode != 0:
            row["cli"] = f"FAIL rc={p.returncode}: {log[-300:]}"
            out.append(row)
            print(json.dumps(row), flush=True)
            continue
        api_run(cfg, api)
        row["cli_vs_api"] = same(full, api)
        # SIGKILL once 3 generations are logged (polling the log the run writes)
        p = tfevo("train", cfg, "--run-dir", killed, "--no-progress", "--progress-every", "0")
        prog = killed / "progress.jsonl"
        t0 = time.time()
        while p.poll() is None and time.time() - t0 < 600:
            if prog.exists() and len(prog.read_text().splitlines()) >= 3:
                os.kill(p.pid, signal.SIGKILL)
                break
            time.sleep(0.05)
        p.wait()
        lines = len(prog.read_text().splitlines()) if prog.exists() else 0
        ckpt = sorted(x.name for x in (killed / "checkpoints").glob("ckpt-*.index"))
        row["killed_at"] = f"rc={p.returncode}, {lines} lines logged, checkpoints {ckpt}"
        p = tfevo("train", cfg, "--run-dir", killed, "--no-progress")
        log = p.communicate()[0]
        resumed = next((l for l in log.splitlines() if "resum" in l), "")
        row["resumed_from"] = resumed.strip()[:160]
        row["kill_resume"] = same(full, killed) if p.returncode == 0 else f"FAIL rc={p.returncode}: {log[-300:]}"
        out.append(row)
        print(json.dumps(row), flush=True)
    with open(root / "api_kill.jsonl", "w") as f:
        for r in out:
            f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
