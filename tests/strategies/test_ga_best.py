"""The run's best of the Deep GA in both encodings (GaussianGA: parameter vectors, SeedGA: seed lists)
is the elite with its mean over all its evaluations; the luckiest single evaluation is best_single."""

import numpy as np
import pytest
import tensorflow as tf

from tfevo import registry
from tfevo.strategies.ga import GaussianGA
from tfevo.strategies.seed_ga import SeedGA

D, P, T, E = 6, 16, 4, 3


def sphere(x):
    return -tf.reduce_sum((x - 0.5) ** 2, axis=1)


def noisy(scale=0.5, seed=11):
    """Sphere plus N(0, scale^2) noise per call, and the history of every evaluation of every row."""
    rng = np.random.RandomState(seed)
    history = {}

    def evaluate(x):
        x = np.asarray(x)
        f = (sphere(x).numpy() + scale * rng.standard_normal(x.shape[0])).astype(np.float32)
        for row, v in zip(x, f):
            history.setdefault(row.tobytes(), []).append(float(v))
        return tf.constant(f)

    return evaluate, history


def test_gaussian_ga_best_is_the_elite_with_its_mean():
    ga = GaussianGA(D, P, truncation=T, sigma=0.1, num_elite_candidates=E, init_sigma=1.0, seed=2)
    evaluate, history = noisy()
    luckiest, counts, differs = -np.inf, [], 0
    for gen in range(10):
        x = ga.ask()
        f = evaluate(x)
        ga.tell(x, f)
        luckiest = max(luckiest, float(np.max(f)))
        # reference from the recorded history: among the rows carried over unmodified (rows 0..E;
        # every row in generation 0), the one with the highest mean over all its evaluations
        rows = x.numpy()[: P if gen == 0 else E + 1]
        means = [np.mean(history[r.tobytes()]) for r in rows]
        k = int(np.argmax(means))
        params, value = ga.best
        np.testing.assert_array_equal(params.numpy(), rows[k])
        np.testing.assert_allclose(float(value), means[k], rtol=1e-5, atol=1e-5)
        # the elite is row 0 of the next population, with its running sums
        np.testing.assert_array_equal(params.numpy(), ga.population[0].numpy())
        assert float(value) == float((ga.eval_sum[0] / ga.eval_count[0]).numpy())
        counts.append(len(history[rows[k].tobytes()]))
        differs += float(value) != float(np.max(f))
    assert differs > 0  # the problem is noisy enough for the two rules to disagree
    member, reported = ga.reported_best()  # what a Trainer records
    np.testing.assert_array_equal(member.numpy(), ga.population[0].numpy())
    assert float(reported) == float(ga.best[1])
    assert float(ga.best_evaluations.numpy()) == counts[-1] > 1 and max(counts) > 2
    assert float(ga.best_single_fitness.numpy()) == np.float32(luckiest) > float(ga.best_fitness.numpy())
    single, single_f = ga.best_single
    assert float(single_f) == np.float32(luckiest)
    assert history[single.numpy().tobytes()].count(float(np.float32(luckiest))) >= 1
    assert {"elite_mean", "elite_evaluations", "best_evaluations"} <= set(ga.metrics())


def _row(population, member):
    """Index of ``member`` in ``population`` (-1: not a row of it)."""
    hits = np.flatnonzero(np.all(np.asarray(population) == np.asarray(member), axis=1))
    return int(hits[0]) if hits.size else -1


def test_seed_ga_and_gaussian_ga_agree_on_the_best_row_and_value():
    # the same Deep GA in two encodings, told the same noisy fitness sequence, selects the same rows:
    # both report the same row of the told population as the run's best, with the same mean
    fitness = np.random.RandomState(5).standard_normal([12, P]).astype(np.float32)
    ga = GaussianGA(D, P, truncation=T, sigma=0.1, num_elite_candidates=E, init_sigma=1.0, seed=0)
    sga = SeedGA(D, P, truncation=T, sigma=0.1, num_elite_candidates=E, max_generations=12, seed=0)
    picks = {"ga": [], "seed_ga": []}
    for f in fitness:
        x, g = ga.ask(), sga.ask()
        ga.tell(x, f)
        sga.tell(g, f)
        row, srow = _row(x, ga.best[0]), _row(g, sga.best_genome)
        picks["ga"].append((row, float(ga.best[1])))
        picks["seed_ga"].append((srow, float(sga.best[1])))
    assert picks["ga"] == picks["seed_ga"]
    lucky = [int(np.argmax(f)) for f in fitness]
    assert [r for r, _ in picks["seed_ga"]] != lucky  # the elite was not the luckiest row at least once
    for name in ("best_evaluations", "best_single_fitness", "eval_sum", "eval_count"):
        np.testing.assert_array_equal(getattr(ga, name).numpy(), getattr(sga, name).numpy(), err_msg=name)
    assert ga.metrics() == sga.metrics()


def test_trainer_logs_and_checkpoints_the_gaussian_ga_elite(tmp_path):
    # the Trainer's best_ever, its checkpointed best (what `tfevo eval`/`export` use) and
    # best_individual() are the elite with its mean, not the luckiest single evaluation
    from tfevo.training import Trainer
    from tfevo.training.builders import best_params

    ga = registry.get("strategy", "ga")(num_dims=D, popsize=P, truncation=T, sigma=0.1, num_elite_candidates=E,
                                        init_sigma=1.0, seed=1)
    evaluate, _ = noisy()
    seen = []
    elite_mean = lambda: float((ga.eval_sum[0] / ga.eval_count[0]).numpy())  # noqa: E731
    trainer = Trainer(ga, evaluate, run_dir=tmp_path / "run", generations=8, progress=False,
                      callbacks=[lambda log: seen.append((elite_mean(), log))])
    trainer.run()
    for mean, log in seen:
        assert log.best_ever == np.float32(mean)
    elite = ga.population[0].numpy()
    np.testing.assert_array_equal(trainer.best_individual().numpy(), elite)
    np.testing.assert_array_equal(best_params(tmp_path / "run"), elite)
    assert float(trainer.best_fitness.numpy()) == np.float32(elite_mean())
    assert max(log.best for _, log in seen) == float(ga.best_single_fitness.numpy()) > seen[-1][1].best_ever
    assert all(np.float32(log.extra["elite_mean"]) == np.float32(mean) for mean, log in seen)


def test_gaussian_ga_checkpoint_restores_the_best(tmp_path):
    def make():
        return GaussianGA(D, P, truncation=T, sigma=0.1, num_elite_candidates=E, init_sigma=1.0, seed=4)

    fitness = np.random.RandomState(9).standard_normal([8, P]).astype(np.float32)
    full, part = make(), make()
    for f in fitness:
        full.tell(full.ask(), f)
    for f in fitness[:4]:
        part.tell(part.ask(), f)
    path = tf.train.Checkpoint(ga=part).save(str(tmp_path / "ck"))
    res = make()
    tf.train.Checkpoint(ga=res).restore(path)
    for f in fitness[4:]:
        res.tell(res.ask(), f)
    for name in ("population", "eval_sum", "eval_count", "best_genome", "best_fitness", "best_evaluations",
                 "best_single_genome", "best_single_fitness"):
        np.testing.assert_array_equal(getattr(res, name).numpy(), getattr(full, name).numpy(), err_msg=name)


@pytest.mark.parametrize("encoding", ["vectors", "seeds"])
def test_trainer_resume_keeps_the_elite_best_and_its_logs(tmp_path, encoding):
    # noise drawn from the checkpointed generation counter, so a resumed run sees the same fitness
    import json

    from tfevo.training import Trainer

    def run(run_dir, generations):
        if encoding == "vectors":
            ga = GaussianGA(D, P, truncation=T, sigma=0.1, num_elite_candidates=E, init_sigma=1.0, seed=5)
            params = tf.identity
        else:
            ga = SeedGA(D, P, truncation=T, sigma=0.1, num_elite_candidates=E, init_sigma=1.0, seed=5,
                        max_generations=6)
            params = ga.decode

        def evaluate(x):
            noise = tf.random.stateless_normal([P], seed=tf.stack([ga.generation, tf.constant(7, tf.int64)]))
            return sphere(params(x)) + noise

        trainer = Trainer(ga, evaluate, run_dir=run_dir, generations=generations, progress=False)
        trainer.run()
        return trainer, ga

    full, _ = run(tmp_path / "full", 6)
    run(tmp_path / "part", 3)
    part, ga = run(tmp_path / "part", 6)  # resumes at generation 3 in fresh objects
    assert part.restored_from is not None
    keys = ("generation", "best", "mean", "best_ever", "elite_mean", "elite_evaluations", "best_evaluations")
    lines = [(tmp_path / d / "progress.jsonl").read_text().splitlines() for d in ("full", "part")]
    logs = [[{k: json.loads(line)[k] for k in keys} for line in run_lines] for run_lines in lines]
    assert logs[0] == logs[1] and len(logs[0]) == 6
    np.testing.assert_array_equal(part.best_individual().numpy(), full.best_individual().numpy())
    np.testing.assert_array_equal(part.best_individual().numpy(), ga.population[0].numpy())
