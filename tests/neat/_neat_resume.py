"""Resume cases for every NEAT problem and evaluator (used by tests/neat/test_neat_resume.py).

Each case builds a NEAT run and its problem.  ``first`` runs ``STOP``
generations, checkpoints the run through the objects a user checkpoints
(``tf.train.Checkpoint(neat=algo, problem=prob)``, or the Trainer's run
directory) and returns the record of the uninterrupted run
(``STOP + MORE`` generations).  ``resume`` (run in a fresh process) builds
fresh objects, restores the checkpoint, runs ``MORE`` generations and returns
the same record, which must be equal bit for bit.

Usage as a script: ``python _neat_resume.py OUT.npz CKPT_ROOT CASE...`` runs
``resume`` for each case and saves the records.
"""

from __future__ import annotations

import os
import sys

import numpy as np

STOP, MORE = 3, 3

# default suite (a few seconds each) and the slower XLA-compiled ones
CASES = [
    "xor", "xor_f32", "xor3_recurrent", "function_fit", "hyperneat", "cartpole_ff_trim", "cartpole_ff_notrim",
    "cartpole_recurrent", "cartpole_recurrent_xla", "acrobot_ff_trim", "trainer_cartpole_ff_trim",
    "mountaincar_ff_trim_f64net", "cartpole_recurrent_f64net",
]
SLOW_CASES = ["xor_reference_xla", "xor_breed_xla", "cartpole_ff_trim_xla", "acrobot_ff_trim_xla",
              "trainer_acrobot_recurrent"]


def _control_cfg(inputs, outputs, feed_forward=True):
    from tfevo.neat import NEATConfig

    # growth-friendly rates so the used width changes during the run (several trimmed evaluators)
    return NEATConfig(num_inputs=inputs, num_outputs=outputs, pop_size=16, max_nodes=24, max_conns=40,
                      feed_forward=feed_forward, node_add_prob=0.5, conn_add_prob=0.6, max_species=8)


def build(case):
    """(algo, problem, fitness fn of a population)."""
    import tfevo.neat as tn
    from tfevo.neat import NEAT
    from tfevo.neat.policy import ControlProblem

    if case.startswith("xor") or case == "function_fit":
        prob = {"xor3_recurrent": tn.XOR3, "function_fit": tn.FunctionFit}.get(case, tn.XOR)()
        if case == "xor_reference_xla":
            prob.use_op = False
        # fitness_dtype: the default float64, or float32 for the *_f32 cases
        cfg = prob.config(pop_size=16, max_nodes=16, max_conns=32, node_add_prob=0.5,
                          feed_forward=case != "xor3_recurrent",
                          fitness_dtype="float32" if case.endswith("_f32") else "float64")
        algo = NEAT(cfg, seed=3, jit_compile=case == "xor_breed_xla")
        return algo, prob, lambda pop: prob(pop, cfg)
    if case == "hyperneat":
        from tfevo.neat import HyperNEAT, HyperNEATProblem, Substrate

        sub = Substrate.layered([[(-1.0, -1.0), (1.0, -1.0)], [(-1.0, 0.0), (1.0, 0.0)], [(0.0, 1.0)]])
        hn = HyperNEAT(sub)
        cfg = hn.cppn_config(pop_size=16, max_nodes=16, max_conns=32)
        x = np.array([[0, 0], [0, 1], [1, 0], [1, 1]], np.float32)
        prob = HyperNEATProblem(hn, x, (x.sum(1) % 2)[:, None])
        algo = NEAT(cfg, seed=5)
        return algo, prob, lambda pop: prob(pop, cfg)
    env = "Acrobot-v1" if "acrobot" in case else "MountainCar-v0" if "mountaincar" in case else "CartPole-v1"
    io = {"Acrobot-v1": (6, 3), "MountainCar-v0": (2, 3), "CartPole-v1": (4, 2)}[env]
    cfg = _control_cfg(*io, feed_forward="recurrent" not in case)
    # *_f64net: networks in double (ControlProblem dtype="float64", as neat-python's Python floats)
    prob = ControlProblem(env, cfg, episodes=2, max_steps=40, seed=7, trim="notrim" not in case,
                          use_op=False if case.endswith("_xla") else None,
                          dtype="float64" if case.endswith("_f64net") else "float32")
    algo = NEAT(cfg, seed=1)
    return algo, prob, prob


def _record(algo, prob, fits):
    rec = {f"fit{i}": f for i, f in enumerate(fits)}
    for i, v in enumerate(algo.variables):
        rec[f"algo/{i}/{v.name}"] = v.numpy()
    if hasattr(prob, "variables"):
        for i, v in enumerate(prob.variables):
            rec[f"prob/{i}/{v.name}"] = v.numpy()
    return rec


def _generations(algo, fn, n):
    fits = []
    for _ in range(n):
        pop = algo.ask()
        f = np.asarray(fn(pop))
        fits.append(f)
        algo.tell(pop, f)
    return fits


def _trainer(case, algo, prob, run_dir, gens):
    from tfevo.training import Trainer

    return Trainer(algo, prob, run_dir=run_dir, generations=gens, progress=False, verbose=False)


def _trainer_record(algo, prob, t):
    import json

    rec = _record(algo, prob, [])
    rows = [json.loads(x) for x in (t.run_dir / "progress.jsonl").read_text().splitlines()]
    rec["log"] = np.array([[r["generation"], r["best"], r["mean"], r["frames"]] for r in rows], np.float64)
    rec["trainer_best"] = t.best_fitness.numpy()
    return rec


def first(case, ckpt_root):
    """Runs the case for STOP generations, checkpoints, runs on; returns the record of the whole run."""
    import tensorflow as tf

    d = os.path.join(ckpt_root, case)
    algo, prob, fn = build(case)
    if case.startswith("trainer_"):
        t = _trainer(case, algo, prob, d, STOP)
        t.run()
        full_algo, full_prob, _ = build(case)
        t = _trainer(case, full_algo, full_prob, os.path.join(ckpt_root, case + "_full"), STOP + MORE)
        t.run()
        return _trainer_record(full_algo, full_prob, t)
    _generations(algo, fn, STOP)
    objs = {"neat": algo}
    if isinstance(prob, tf.Module):
        objs["problem"] = prob
    tf.train.Checkpoint(**objs).write(os.path.join(d, "ckpt"))
    fits = _generations(algo, fn, MORE)
    return _record(algo, prob, fits)


def resume(case, ckpt_root):
    """Fresh objects restored from ``first``'s checkpoint, MORE generations; the record."""
    import tensorflow as tf

    d = os.path.join(ckpt_root, case)
    algo, prob, fn = build(case)
    if case.startswith("trainer_"):
        t = _trainer(case, algo, prob, d, STOP + MORE)
        assert int(t.generation.numpy()) == STOP, "the Trainer did not resume"
        t.run()
        return _trainer_record(algo, prob, t)
    objs = {"neat": algo}
    if isinstance(prob, tf.Module):
        objs["problem"] = prob
    tf.train.Checkpoint(**objs).read(os.path.join(d, "ckpt")).assert_consumed()
    fits = _generations(algo, fn, MORE)
    return _record(algo, prob, fits)


if __name__ == "__main__":
    out, root, cases = sys.argv[1], sys.argv[2], sys.argv[3:]
    recs = {}
    for c in cases:
        for k, v in resume(c, root).items():
            recs[f"{c}::{k}"] = v
    np.savez(out, **recs)
