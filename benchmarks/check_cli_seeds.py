"""Compares the runs of benchmarks/check_cli_seeds.sh: progress.jsonl rows and every checkpointed variable
(wall time left out) of the two --seed 0 runs, and whether --seed 1 logged something else."""
import json, sys, glob, os
import numpy as np
R = sys.argv[1] if len(sys.argv) > 1 else "/tmp/cli_seeds"
def rows(d):
    p = os.path.join(d, "progress.jsonl")
    if not os.path.exists(p): return None
    return [(r["generation"], r["best"], r["mean"], r.get("frames"), r.get("evaluations"), r.get("best_ever")) for r in map(json.loads, open(p))]
def ck(d):
    import tensorflow as tf
    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(os.path.join(d, "checkpoints")))
    return {k: reader.get_tensor(k) for k in reader.get_variable_to_shape_map() if "wall_time" not in k and not k.startswith("_CHECKPOINTABLE")}
cfgs = sorted({os.path.basename(p).rsplit(".", 1)[0] for p in glob.glob(R + "/*.s0a")})
for c in cfgs:
    a, b, s1 = (os.path.join(R, f"{c}.{t}") for t in ("s0a", "s0b", "s1"))
    ra, rb, r1 = rows(a), rows(b), rows(s1)
    if ra is None or rb is None:
        print(c, "missing"); continue
    same_log = ra == rb
    try:
        ka, kb = ck(a), ck(b)
        same_ck = ka.keys() == kb.keys() and all(np.array_equal(ka[k], kb[k], equal_nan=True) for k in ka)
        diff = [k for k in ka if not np.array_equal(ka[k], kb.get(k), equal_nan=True)][:5]
    except Exception as e:
        same_ck, diff = f"err {e}", []
    print(f"{c}: seed0 twice logs_equal={same_log} ckpt_equal={same_ck} {diff} | seed1 differs={r1 != ra if r1 else 'n/a'}")
