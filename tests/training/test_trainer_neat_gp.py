"""NEAT and tree GP through the shared Trainer: a run stopped and resumed from its
run directory ends exactly where the uninterrupted run ends."""

import json

import numpy as np
import tensorflow as tf

from tfevo.training import Trainer


def _resume_equals_full(tmp_path, make, state_of, gens=6, stop=3):
    algo_full, t = make(tmp_path / "full", gens)
    t.run()
    _, t = make(tmp_path / "part", gens)
    t.budget_generations = stop
    t.run()
    algo_res, t = make(tmp_path / "part", gens)
    assert int(t.generation.numpy()) == stop  # resumed from the checkpoint, not from scratch
    t.run()
    for a, b in zip(state_of(algo_full), state_of(algo_res)):
        np.testing.assert_array_equal(a, b)
    logged = [json.loads(x)["generation"] for x in (tmp_path / "part" / "progress.jsonl").read_text().splitlines()]
    assert len(logged) == gens and len(set(logged)) == gens  # each generation logged once across the two runs
    return algo_full


def test_neat_xor_through_trainer_resumes_exactly(tmp_path):
    from tfevo.neat import NEAT, XOR

    prob = XOR()
    cfg = prob.config(pop_size=60, max_nodes=12, max_conns=24)

    def make(run, gens):
        algo = NEAT(cfg, seed=2)
        return algo, Trainer(algo, lambda pop: prob(pop, cfg), run_dir=run, generations=gens, progress=False,
                             verbose=False)

    def state(algo):
        pop = algo.ask()
        return [pop.nodes.numpy(), pop.conns.numpy()]

    _resume_equals_full(tmp_path, make, state)


def test_recurrent_neat_control_through_trainer_resumes_exactly(tmp_path):
    """The evaluator's start-state seed stream is checkpointed with the run."""
    from tfevo.neat import NEAT, NEATConfig
    from tfevo.neat.policy import ControlProblem

    cfg = NEATConfig(num_inputs=4, num_outputs=2, pop_size=24, max_nodes=12, max_conns=30, feed_forward=False)

    def make(run, gens):
        algo = NEAT(cfg, seed=4)
        prob = ControlProblem("CartPole-v1", cfg, episodes=2, max_steps=60, seed=1)
        return algo, Trainer(algo, prob, run_dir=run, generations=gens, progress=False, verbose=False,
                             extra_trackables={"episode_seeds": prob.evaluator})

    def state(algo):
        pop = algo.ask()
        return [pop.nodes.numpy(), pop.conns.numpy()]

    _resume_equals_full(tmp_path, make, state, gens=4, stop=2)


def test_gp_through_trainer_resumes_exactly(tmp_path):
    from tfevo.gp import GeneticProgramming, GPConfig, mse

    x = np.linspace(-1, 1, 40, dtype=np.float32)[:, None]
    y = (x[:, 0] ** 3 - x[:, 0]).astype(np.float32)
    cfg = GPConfig(popsize=100, max_len=32, num_vars=1, functions=("add", "sub", "mul"), const_range=None,
                   p_const=0.0, tournament_size=3, elite=2)

    def make(run, gens):
        gp = GeneticProgramming(cfg, seed=7)
        return gp, Trainer(gp, lambda trees: -mse(trees, x, y, gp.eval_functions), run_dir=run, generations=gens,
                           progress=False, verbose=False)

    def state(gp):
        return [np.asarray(t) for t in gp.ask()]

    _resume_equals_full(tmp_path, make, state)
