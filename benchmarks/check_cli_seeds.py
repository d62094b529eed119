"""Compares the runs of benchmarks/check_cli_seeds.sh: progress.jsonl rows and every checkpointed variable
(wall time left out) of the two --seed 0 runs, and whether --seed 1 logged something else.

    PYTHONPATH=$PWD python benchmarks/check_cli_seeds.py [RUNS_DIR]
"""
import glob
import json
import os
import sys

import numpy as np


def rows(d):
    p = os.path.join(d, "progress.jsonl")
    if not os.path.exists(p):
        return None
    keys = ("generation", "best", "mean", "frames", "evaluations", "best_ever")
    return [tuple(r.get(k) for k in keys) for r in map(json.loads, open(p))]


def checkpoint(d):
    import tensorflow as tf

    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(os.path.join(d, "checkpoints")))
    return {k: reader.get_tensor(k) for k in reader.get_variable_to_shape_map()
            if "wall_time" not in k and not k.startswith("_CHECKPOINTABLE")}


def main(root):
    configs = sorted({os.path.basename(p).rsplit(".", 1)[0] for p in glob.glob(root + "/*.s0a")})
    for c in configs:
        a, b, s1 = (os.path.join(root, f"{c}.{t}") for t in ("s0a", "s0b", "s1"))
        ra, rb, r1 = rows(a), rows(b), rows(s1)
        if ra is None or rb is None:
            print(c, "missing")
            continue
        ka, kb = checkpoint(a), checkpoint(b)
        same = ka.keys() == kb.keys() and all(np.array_equal(ka[k], kb[k], equal_nan=True) for k in ka)
        print(f"{c}: seed0 twice logs_equal={ra == rb} ckpt_equal={same} | "
              f"seed1 differs={r1 != ra if r1 else 'n/a'}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "/tmp/cli_seeds")
