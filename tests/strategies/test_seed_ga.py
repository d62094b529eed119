import numpy as np
import pytest
import tensorflow as tf

from tfevo.core import ConfigError, ShapeError
from tfevo.rollout.decoded import GenomeEvaluator
from tfevo.strategies.seed_ga import SeedGA

D = 40


def sphere(p):
    return -tf.reduce_sum((p - 0.5) ** 2, axis=1)


def make(seed=0, **kw):
    args = dict(num_dims=D, popsize=32, truncation=6, sigma=0.05, num_elite_candidates=2, max_generations=60)
    args.update(kw)
    return SeedGA(seed=seed, **args)


def step(ga, ev=None):
    g = ga.ask()
    f = (ev or GenomeEvaluator(lambda p: sphere(p), ga.decode)).evaluate(g)
    ga.tell(g, f)
    return g.numpy(), f.numpy()


def test_cached_decode_equals_full_reconstruction_from_seeds():
    ga = make()
    for _ in range(6):
        step(ga)
    g = ga.ask()
    cached = ga.decode(g).numpy()
    rebuilt = tf.map_fn(ga._rebuild, g, fn_output_signature=tf.float32).numpy()
    np.testing.assert_array_equal(cached, rebuilt)
    # a genome is its seed list: length column + seeds, 4 bytes each
    assert g.dtype == np.int32 and g.shape == (32, 62)
    g = g.numpy()
    assert g[:, 0].max() == 7 and np.all(g[:, 0] >= 1)  # 1 init seed + up to 6 mutations


def test_converges_on_sphere_within_budget():
    ga = make(popsize=64, truncation=10, max_generations=80)
    first = None
    for i in range(80):  # 5120 evaluations
        _, f = step(ga)
        first = f.max() if first is None else first
    assert float(ga.best_fitness.numpy()) > -0.3 > first


def test_checkpoint_restore_continues_exactly(tmp_path):
    full = make(seed=3)
    ref = [step(full) for _ in range(8)]
    part = make(seed=3)
    for _ in range(4):
        step(part)
    path = tf.train.Checkpoint(ga=part).save(str(tmp_path / "ck"))
    res = make(seed=3)  # fresh object: its parent cache is empty and is rebuilt from seeds
    tf.train.Checkpoint(ga=res).restore(path)
    for i in range(4, 8):
        g, f = step(res)
        np.testing.assert_array_equal(g, ref[i][0])
        np.testing.assert_array_equal(f, ref[i][1])
    for name in ("best_genome", "best_fitness", "best_evaluations", "best_single_genome", "best_single_fitness",
                 "eval_sum", "eval_count"):
        np.testing.assert_array_equal(getattr(res, name).numpy(), getattr(full, name).numpy())


def test_chunked_evaluation_equals_whole():
    ga = make()
    step(ga)
    g = ga.ask()
    whole = GenomeEvaluator(sphere, ga.decode).evaluate(g).numpy()
    chunked = GenomeEvaluator(sphere, ga.decode, chunk_size=5).evaluate(g).numpy()
    np.testing.assert_array_equal(whole, chunked)


def _state(ga):
    return [v.numpy().copy() for v in ga.variables]


def test_max_generations_tells_fit_and_the_next_is_refused_before_any_change():
    # max_generations = 2: two tells write lineages of up to 2 mutations, all rebuildable; the third
    # ask (and a tell without it) is refused naming max_generations and leaves the state as it was
    ga = make(max_generations=2)
    for _ in range(2):
        g = ga.ask()
        f = sphere(ga.decode(g)).numpy()
        f[:5] = np.nan
        ga.tell(g, f)
    pop = ga.population.numpy()
    assert pop.shape[1] == 4 and pop[:, 0].max() == 3  # count column: init seed + 2 mutations
    assert np.all(pop[np.arange(len(pop)), pop[:, 0]] >= 0)  # every counted seed is stored
    rebuilt = tf.map_fn(ga._rebuild, ga.population, fn_output_signature=tf.float32).numpy()
    np.testing.assert_array_equal(ga.decode(ga.population).numpy(), rebuilt)
    before = _state(ga)
    with pytest.raises(ConfigError, match="max_generations = 2"):
        ga.ask()
    with pytest.raises(ConfigError, match="max_generations = 2"):
        ga.tell(ga.population, np.zeros(32, np.float32))
    # inside a tf.function the eager check cannot run: the tell's own graph refuses
    with pytest.raises(tf.errors.InvalidArgumentError, match="max_generations = 2"):
        tf.function(ga.tell, autograph=False)(ga.population, tf.zeros([32]))
    for a, b in zip(before, _state(ga)):
        np.testing.assert_array_equal(a, b)
    assert ga.generations_left == 0


def test_trainer_budget_of_max_generations_completes_and_a_longer_one_fails_up_front():
    from tfevo.training import Trainer

    ga = make(max_generations=3)
    fitness = lambda g: sphere(ga.decode(g))  # noqa: E731
    Trainer(ga, fitness, generations=3, progress=False).run()
    assert int(ga.generation.numpy()) == 3
    rebuilt = tf.map_fn(ga._rebuild, ga.population, fn_output_signature=tf.float32).numpy()
    np.testing.assert_array_equal(ga.decode(ga.population).numpy(), rebuilt)
    calls = []
    with pytest.raises(ConfigError, match="max_generations = 3"):
        Trainer(make(max_generations=3), lambda g: calls.append(1), generations=4, progress=False)
    assert not calls


def test_errors_and_nan():
    with pytest.raises(ShapeError, match="int32"):
        make().tell(tf.zeros([32, 62]), np.zeros(32))
    with pytest.raises(ConfigError, match="truncation"):
        make(truncation=0)


def _cartpole_ga():
    """A linear CartPole policy and a SeedGA of 8 over its parameters (the chunking tests' setup)."""
    from tfevo import nn
    from tfevo.envs import make

    pm = nn.PopulationModel(nn.mlp((4,), 2, hidden=()))
    policy = nn.Policy(pm, make("CartPole-v1", 1).action_spec)
    return policy, SeedGA(pm.num_params, popsize=8, truncation=3, num_elite_candidates=1, sigma=0.5, seed=1)


def test_chunked_host_evaluation_keeps_the_population_episode_seeds():
    # decode_chunk is a memory knob: a pipelined evaluation of the population
    # in chunks must run every member on the seeds the whole call would give
    # it (also under common random numbers) and advance the call counter once
    from tfevo.rollout import PipelinedEvaluator

    policy, ga = _cartpole_ga()

    def evaluator(chunk, common=False):
        inner = PipelinedEvaluator("CartPole-v1", policy, num_envs=2, episodes=2, max_steps=60, seed=5,
                                   common_seeds=common)
        return inner, GenomeEvaluator(inner, ga.decode, chunk_size=chunk)

    g = ga.ask()
    for common in (False, True):
        runs = []
        for chunk in (None, 3):
            inner, ev = evaluator(chunk, common)
            runs.append([ev.evaluate(g).numpy() for _ in range(2)] + [int(inner.calls.numpy())])
        np.testing.assert_array_equal(runs[0][0], runs[1][0])
        np.testing.assert_array_equal(runs[0][1], runs[1][1])
        assert runs[0][2] == runs[1][2] == 2
    # common random numbers: one genome repeated scores the same in every chunk
    inner, ev = evaluator(3, common=True)
    same = ev.evaluate(tf.tile(g[2:3], [8, 1])).numpy()
    assert np.all(same == same[0])


def test_chunked_in_graph_evaluation_keeps_the_population_start_states():
    # the same memory knob in front of an InGraphEvaluator (seed_ga on an in-graph env with
    # evaluator.decode_chunk): each chunk drew its own seed and its own start states, so the
    # chunk size changed members' fitness and common random numbers were not common
    from tfevo.rollout import InGraphEvaluator

    policy, ga = _cartpole_ga()
    g = ga.ask()
    for common in (False, True):
        runs = []
        for chunk in (None, 3):
            inner = InGraphEvaluator("CartPole-v1", policy, episodes=2, max_steps=60, seed=5, jit_compile=False,
                                     common_random_numbers=common)
            ev = GenomeEvaluator(inner, ga.decode, chunk_size=chunk)
            runs.append([ev.evaluate(g).numpy() for _ in range(2)] + [int(inner.seeds.counter.numpy())])
        np.testing.assert_array_equal(runs[0][0], runs[1][0])
        np.testing.assert_array_equal(runs[0][1], runs[1][1])
        assert runs[0][2] == runs[1][2] == 2
        assert not np.array_equal(runs[0][0], runs[0][1])  # the next call draws new start states


def test_chunked_host_evaluation_keeps_the_observation_normalizer_of_one_call():
    # with obs_norm each chunk updated the normalizer before the next chunk ran, so later chunks
    # saw other statistics than one whole-population call gives them: decode_chunk changed
    # fitness from the first generation on (CLI, seed_ga on CartPole, P=13: mean 23.12 vs 24.12)
    from tfevo.rollout import PipelinedEvaluator

    policy, ga = _cartpole_ga()
    g = ga.ask()
    runs = []
    for chunk in (None, 3):
        inner = PipelinedEvaluator("CartPole-v1", policy, num_envs=2, episodes=2, max_steps=60, seed=5,
                                   obs_norm=True)
        ev = GenomeEvaluator(inner, ga.decode, chunk_size=chunk)
        runs.append(([ev.evaluate(g).numpy() for _ in range(3)], inner.obs_norm))
        assert inner.update_obs_norm  # restored after the chunks
    for a, b in zip(runs[0][0], runs[1][0]):
        np.testing.assert_array_equal(a, b)
    (_, whole), (_, chunked) = runs
    assert float(whole.count.numpy()) == float(chunked.count.numpy()) > 0
    np.testing.assert_allclose(chunked.mean.numpy(), whole.mean.numpy(), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(chunked.variance.numpy(), whole.variance.numpy(), rtol=1e-12)


def _noisy_fitness(ga, scale=2.0):
    """Sphere plus N(0, scale^2) noise drawn per call (a noisy RL return): an evaluator, and the history
    of every evaluation of every genome (keyed by its seed list)."""
    rng = np.random.RandomState(7)
    history = {}

    def evaluate(g):
        f = (sphere(ga.decode(g)).numpy() + scale * rng.standard_normal(g.shape[0])).astype(np.float32)
        for row, v in zip(np.asarray(g), f):
            history.setdefault(row.tobytes(), []).append(float(v))
        return tf.constant(f)

    return evaluate, history


def test_best_is_the_elite_with_its_mean_not_the_luckiest_evaluation():
    # noisy fitness: the best was the single luckiest evaluation (an outlier the elite's
    # re-evaluations do not confirm); it is now the Deep GA elite, the re-evaluated member with the
    # highest mean over all its evaluations, and the luckiest evaluation is kept apart
    e = 3
    ga = make(popsize=24, truncation=4, num_elite_candidates=e)
    evaluate, history = _noisy_fitness(ga)
    luckiest, counts = -np.inf, []  # evaluations behind the elite's mean
    for gen in range(12):
        g = ga.ask()
        f = evaluate(g)
        ga.tell(g, f)
        luckiest = max(luckiest, float(np.max(f)))
        # reference from the recorded history: among the rows carried over unmodified (rows 0..E;
        # every row in generation 0), the one with the highest mean over all its evaluations
        rows = g.numpy()[: len(g) if gen == 0 else e + 1]
        means = [np.mean(history[r.tobytes()]) for r in rows]
        k = int(np.argmax(means))
        np.testing.assert_array_equal(ga.best_genome.numpy(), rows[k])
        np.testing.assert_allclose(float(ga.best_fitness.numpy()), means[k], rtol=1e-5, atol=1e-5)
        counts.append(len(history[rows[k].tobytes()]))
    assert float(ga.best_evaluations.numpy()) == counts[-1] > 1  # the reported best has been re-evaluated
    assert max(counts) > 2
    assert float(ga.best_single_fitness.numpy()) == np.float32(luckiest) > float(ga.best_fitness.numpy())
    params, _ = ga.best
    np.testing.assert_array_equal(params.numpy(), ga._rebuild(ga.best_genome).numpy())
    np.testing.assert_array_equal(ga.best_single[0].numpy(), ga._rebuild(ga.best_single_genome).numpy())


def test_trainer_logs_checkpoints_and_exports_the_seed_ga_best(tmp_path):
    # the Trainer's best_ever, its checkpointed best (what `tfevo eval`/`export` decode) and
    # best_individual() are SeedGA's best by mean, not the Trainer's own luckiest single evaluation
    from tfevo.training import Trainer
    from tfevo.training.builders import best_params

    ga = make(popsize=24, truncation=4, num_elite_candidates=3)
    evaluate, history = _noisy_fitness(ga)
    seen = []
    elite_mean = lambda: float((ga.eval_sum[0] / ga.eval_count[0]).numpy())  # noqa: E731
    trainer = Trainer(ga, evaluate, run_dir=tmp_path / "run", generations=8, progress=False,
                      callbacks=[lambda log: seen.append((elite_mean(), log))])
    trainer.run()
    for mean, log in seen:  # the elite is row 0 of the next population, with its running sums
        assert log.best_ever == np.float32(mean)
    elite = ga.population[0].numpy()
    np.testing.assert_array_equal(trainer.best_individual().numpy(), elite)
    np.testing.assert_array_equal(best_params(tmp_path / "run"), elite)
    np.testing.assert_array_equal(ga.best_genome.numpy(), elite)
    assert float(trainer.best_fitness.numpy()) == np.float32(ga.best_fitness.numpy()) == np.float32(elite_mean())
    assert max(log.best for _, log in seen) == float(ga.best_single_fitness.numpy()) > log.best_ever
    assert {"elite_mean", "elite_evaluations", "best_evaluations"} <= set(seen[-1][1].extra)
