"""ESEmitter's pyribs rankers (2imp, imp, 2obj, obj, 2rd, rd): order, rules, seeds, checkpoints."""

import re

import numpy as np
import pytest
import tensorflow as tf

from tfevo.core import ConfigError
from tfevo.qd import CVTArchive, ESEmitter, GridArchive, MAPElites, sphere_qd

RANKERS = ["2imp", "imp", "2obj", "obj", "2rd", "rd"]
CLASS_NAMES = {"2imp": "TwoStageImprovementRanker", "imp": "ImprovementRanker", "2obj": "TwoStageObjectiveRanker",
               "obj": "ObjectiveRanker", "2rd": "TwoStageRandomDirectionRanker", "rd": "RandomDirectionRanker"}
RANGES = [(0, 1), (-2, 3)]


def _batch(rng, b, d):
    # Cells shared within the batch, but no tied values: on exact ties pyribs' order is numpy's (lexsort
    # reversed, argsort unstable beyond 16 rows), tfevo's the batch order.
    desc = rng.uniform([0, -2], [1, 3], (b, 2)).astype(np.float32)
    return rng.normal(size=(b, d)).astype(np.float32), rng.uniform(-40, 0, b).astype(np.float32), desc


@pytest.mark.parametrize("soft", [{}, {"learning_rate": 0.3, "threshold_min": -30.0}])
def test_every_ranker_orders_as_pyribs_on_the_same_archive_results(soft):
    """Same batches into tfevo's and pyribs' archives; each search's order equals pyribs' ranker class fed
    pyribs' add() values, the same objective and measures, and (rd) the same direction."""
    ribs_archives = pytest.importorskip("ribs.archives")
    rankers = pytest.importorskip("ribs.emitters.rankers")
    rng = np.random.default_rng(7)
    d, e, lam = 3, 3, 10
    a = GridArchive(d, [6, 5], RANGES, **soft)
    ra = ribs_archives.GridArchive(solution_dim=d, dims=(6, 5), ranges=RANGES, **soft)
    ems = {name: ESEmitter(d, lam, num_emitters=e, ranker=CLASS_NAMES[name] if i % 2 else name, seed=0)
           for i, name in enumerate(RANKERS)}
    direction = rng.normal(size=(e, 2)) * (ra.upper_bounds - ra.lower_bounds)
    for em in ems.values():
        em.attach(a)
        if em.direction is not None:
            em.direction.assign(direction)
    for step in range(3):
        sol, fit, desc = _batch(rng, e * lam, d)
        inc = a.incumbents(desc)
        res = a.add(sol, fit, desc)
        info = ra.add(sol.astype(np.float64), fit.astype(np.float64), desc.astype(np.float64))
        for name, em in ems.items():
            order, status, value = (t.numpy() for t in em.rank(fit, desc, res, incumbent=inc))
            np.testing.assert_array_equal(status.reshape(-1), info["status"])
            for i in range(e):
                sl = slice(i * lam, (i + 1) * lam)
                ranker = getattr(rankers, CLASS_NAMES[name])()
                if name.endswith("rd"):
                    ranker.target_measure_dir = direction[i]
                want, _ = ranker.rank(None, ra, {"solution": sol[sl], "objective": fit[sl].astype(np.float64),
                                                 "measures": desc[sl].astype(np.float64)},
                                      {k: v[sl] for k, v in info.items()})
                np.testing.assert_array_equal(order[i], want, err_msg=f"{name}, step {step}, search {i}")


def test_ranker_names_and_bad_names():
    for name, long in CLASS_NAMES.items():
        assert ESEmitter(3, 4, ranker=long).ranker == name == ESEmitter(3, 4, ranker=name).ranker
    rankers = pytest.importorskip("ribs.emitters.rankers")
    assert ESEmitter(3, 4, ranker=rankers.TwoStageRandomDirectionRanker).ranker == "2rd"
    for bad in ("nov", "random_direction", 3, None, rankers.NoveltyRanker):
        with pytest.raises(ConfigError, match=r"ranker must be one of .*'2rd'.*'RandomDirectionRanker'.*got "
                           + repr(bad).replace("'", "'")):
            ESEmitter(3, 4, ranker=bad)
    em = ESEmitter(3, 4, ranker="rd")
    with pytest.raises(ConfigError, match="attach"):  # told before it knows the archive's ranges
        em.rank(np.zeros(4, np.float32), np.zeros((4, 2), np.float32), None,
                incumbent=(np.zeros(4, bool), np.full(4, -np.inf, np.float32)))


def test_filter_recombines_the_best_ranked_and_rd_redraws_only_restarted_directions():
    """pyribs' rules: filter takes as many parents as would enter, but the best by the ranker (obj: the
    fittest, which here does not enter); a restart draws a new direction for that search only."""
    a = GridArchive(3, [5, 5], [(0, 1), (0, 1)])
    elite = np.zeros(25, np.float32)
    elite[0] = -100.0  # a weak elite in the cell of (0.1, 0.1)
    a.add(np.zeros((25, 3), np.float32), elite, a.cell_centers().astype(np.float32))
    e, lam = 3, 6
    d = (0.5 + np.arange(e * lam)[:, None] * np.array([[1e-3, -2e-3]])).astype(np.float32)
    d[3] = [0.1, 0.1]
    fit = -1.0 - np.arange(e * lam, dtype=np.float32)
    fit[3] = -50.0  # the only candidate that enters (search 0); search 0's fittest is the 1st
    for ranker in ("obj", "rd"):
        em = ESEmitter(3, lam, num_emitters=e, sigma=0.1, ranker=ranker, selection_rule="filter", seed=1)
        x = em.emit(a, tf.constant([0, 1])).numpy()  # (rd: attaches the archive and draws the directions)
        inc = a.incumbents(d)
        best = 0
        if ranker == "rd":
            before = em.direction.numpy().copy()
            assert np.all(before != 0)
            best = int(np.argmax(d[:lam].astype(np.float64) @ before[0]))
        em.tell(x, fit, d, a.add(x, fit, d), incumbent=inc)
        np.testing.assert_array_equal(em.restarts.numpy(), [0, 1, 1])
        np.testing.assert_allclose(em.mean.numpy()[0], x[best], rtol=1e-5, atol=1e-6)  # one parent
        a.fitness[0].assign(-100.0)
        if ranker == "rd":
            em.emit(a, tf.constant([0, 2]))
            after = em.direction.numpy()
            np.testing.assert_array_equal(after[0], before[0])
            assert np.all(after[1:] != before[1:])


def _rd_run(seed, em_seed=1, iters=5, ranker="rd"):
    a = GridArchive(4, [6, 6], [(0, 1), (0, 1)], qd_offset=-100.0)
    em = ESEmitter(4, 6, num_emitters=3, sigma=0.05, ranker=ranker, restart_rule=2, seed=em_seed)
    me = MAPElites(a, [em], init_bounds=(0, 1), seed=seed)
    me.step(sphere_qd, iterations=iters)
    return me, em


def test_random_direction_same_seed_same_run_and_checkpoint_carries_the_direction(tmp_path):
    me, em = _rd_run(3)
    me_b, em_b = _rd_run(3)
    _, em_c = _rd_run(4)
    np.testing.assert_array_equal(em.direction.numpy(), em_b.direction.numpy())
    np.testing.assert_array_equal(me.archive.fitness.numpy(), me_b.archive.fitness.numpy())
    assert not np.allclose(em.direction.numpy(), em_c.direction.numpy())  # the run's seed reaches it
    assert not np.allclose(em.direction.numpy(), _rd_run(3, em_seed=2)[1].direction.numpy())  # and the emitter's
    assert em.restarts.numpy().sum() >= 3
    path = tf.train.Checkpoint(me=me).write(str(tmp_path / "ck"))
    me.step(sphere_qd, iterations=4)
    me2, em2 = _rd_run(3, iters=1)
    tf.train.Checkpoint(me=me2).read(path).assert_consumed()
    me2.step(sphere_qd, iterations=4)
    assert any(v is em2.direction for v in me2.variables)
    for u, v in zip(me.variables, me2.variables):
        np.testing.assert_array_equal(u.numpy(), v.numpy())


@pytest.mark.parametrize("kind", ["obj", "rd"])
def test_new_rankers_run_cma_mae_with_a_result_archive(kind):
    """The new rankers in tfevo's CMA-MAE setting (soft archive, plain result archive; CVT for rd), two
    ESEmitters in one MAPElites, across selection and restart rules."""
    k = dict(learning_rate=0.05, threshold_min=-100.0)
    a = (CVTArchive(4, 20, [(0, 1), (0, 1)], num_samples=2000, **k) if kind == "rd"
         else GridArchive(4, [5, 5], [(0, 1), (0, 1)], **k))
    result = GridArchive(4, [5, 5], [(0, 1), (0, 1)], qd_offset=-100.0)
    ems = [ESEmitter(4, 6, num_emitters=2, sigma=0.2, ranker="2" + kind, selection_rule="mu", seed=0),
           ESEmitter(4, 6, num_emitters=2, sigma=0.2, ranker=kind, selection_rule="filter", restart_rule=3, seed=1)]
    me = MAPElites(a, ems, init_bounds=(0, 1), seed=0, result_archive=result)
    me.step(sphere_qd, iterations=5)
    assert me.metrics()["size"] >= 5 and all(np.isfinite(em.mean.numpy()).all() for em in ems)
    assert ems[1].restarts.numpy().sum() >= 2  # restart_rule=3 after the 4 tells
