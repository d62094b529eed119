"""Every registered algorithm (and MAP-Elites with a CVT archive, Gaussian/polynomial emitters, CMA-ME;
recurrent NEAT; IPOP/BIPOP with restarts) is checkpointed through ``tf.train.Checkpoint`` after K
generations and restored in a NEW process: the next K populations must equal the uninterrupted run's
bit for bit.

    PYTHONPATH=$PWD python benchmarks/check_restore_processes.py [--generations K] [NAME ...]

Phase ``--phase save`` (run by the parent first) runs 2K generations and records the last K populations;
phase ``--phase restore`` (a second process) restores the checkpoint and compares.  Prints one line per
algorithm: BITWISE or DIFFERS (exit status 1 if any differs or fails).
"""

import argparse
import os
import pickle
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

EXTRA = ["map_elites_cvt_gauss_poly", "map_elites_cma_me", "neat_recurrent", "ipop_small", "bipop_small"]


def make(name):
    from tfevo import registry
    from _registry_algorithms import make_algorithm

    if name == "map_elites_cvt_gauss_poly":
        from tfevo.qd import CVTArchive, GaussianEmitter, MAPElites, PolynomialMutationEmitter

        return MAPElites(CVTArchive(4, 8, [(0, 1), (0, 1)], seed=3),
                         [GaussianEmitter(4, 4, bounds=(0, 1)), PolynomialMutationEmitter(4, 4, bounds=(0, 1))],
                         init_bounds=(0, 1), seed=1)
    if name == "map_elites_cma_me":
        from tfevo.qd import ESEmitter, GridArchive, MAPElites

        return MAPElites(GridArchive(4, [4, 4], [(0, 1), (0, 1)]),
                         [ESEmitter(4, 6, num_emitters=2, seed=5, restart_rule=1)], init_bounds=(0, 1), seed=1)
    if name == "neat_recurrent":
        from tfevo.neat import NEAT, XOR

        return NEAT(XOR().config(pop_size=16, max_nodes=8, max_conns=12, feed_forward=False), seed=0)
    if name in ("ipop_small", "bipop_small"):  # restarts within a few dozen generations
        return registry.get("strategy", name.replace("_small", "_cma_es"))(num_dims=3, popsize=6, seed=0, tolfun=1e-1)
    return make_algorithm(name)


def generation(algo, name, record):
    import numpy as np
    import tensorflow as tf
    from _registry_algorithms import fitness_of

    pop = algo.ask()
    if name.startswith("map_elites"):
        algo.tell(pop, fitness_of(pop), tf.clip_by_value(tf.cast(pop[:, :2], tf.float32), 0.0, 1.0))
    else:
        algo.tell(pop, fitness_of(pop))
    record.append([np.asarray(t) for t in tf.nest.flatten(pop)])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("names", nargs="*")
    ap.add_argument("--generations", type=int, default=3)
    ap.add_argument("--phase", choices=["save", "restore"])
    ap.add_argument("--root")
    args = ap.parse_args()
    if args.phase is None:
        root = tempfile.mkdtemp(prefix="restore_check_")
        base = [sys.executable, __file__, "--generations", str(args.generations), "--root", root, *args.names]
        subprocess.run(base + ["--phase", "save"], check=True)
        return subprocess.run(base + ["--phase", "restore"]).returncode

    import numpy as np
    import tensorflow as tf
    from tfevo import registry

    registry.load_all()
    names = args.names or sorted(registry.names("strategy")) + EXTRA
    bad = 0
    for name in names:
        path = os.path.join(args.root, name)
        algo = make(name)
        record = []
        if args.phase == "save":
            for _ in range(args.generations):
                generation(algo, name, record)
            tf.train.Checkpoint(algo=algo).write(os.path.join(path, "ckpt"))
            record = []
            for _ in range(args.generations):
                generation(algo, name, record)
            with open(os.path.join(path, "record.pkl"), "wb") as f:
                pickle.dump(record, f)
            continue
        tf.train.Checkpoint(algo=algo).read(os.path.join(path, "ckpt")).assert_consumed()
        for _ in range(args.generations):
            generation(algo, name, record)
        with open(os.path.join(path, "record.pkl"), "rb") as f:
            ref = pickle.load(f)
        same = all(np.array_equal(a, b, equal_nan=True) for r1, r2 in zip(record, ref) for a, b in zip(r1, r2))
        restarts = f" (restarts {int(algo.restarts)})" if hasattr(algo, "restarts") else ""
        print(f"{name}: {'BITWISE' if same else 'DIFFERS'}{restarts}", flush=True)
        bad += not same
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
