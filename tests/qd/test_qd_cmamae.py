"""CMA-MAE: soft archives (per-cell thresholds) against pyribs, kernel = reference, the ranking, the result
archive, reproducibility, resume in a new process, config checks."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

from tfevo.core import ConfigError
from tfevo.qd import CVTArchive, ESEmitter, GridArchive, MAPElites, sphere_linproj
from tfevo.qd.archive_base import pre_batch_status


def _batches(rng, steps, b, d, integers):
    for _ in range(steps):
        desc = rng.uniform(0, 1, (b, 2)).astype(np.float32)
        desc[::3] = desc[1::3][: len(desc[::3])]  # collisions within the batch
        if integers:  # ties
            fit = rng.integers(-4, 12, b).astype(np.float32)
        else:
            fit = rng.normal(3.0, 4.0, b).astype(np.float32)
        yield rng.normal(size=(b, d)).astype(np.float32), fit, desc


def _ribs_cells(ra, cells):
    """pyribs' archive as (occupied, objective, threshold, solution) arrays over all cells."""
    data = ra.data(["index", "objective", "threshold", "solution"])
    occ = np.zeros(cells, bool)
    obj, thr = np.zeros(cells), np.zeros(cells)
    sol = np.zeros((cells, ra.solution_dim))
    idx = np.asarray(data["index"])
    occ[idx], obj[idx], thr[idx], sol[idx] = True, data["objective"], data["threshold"], data["solution"]
    return occ, obj, thr, sol


# learning_rate 1 with a finite threshold_min is allowed by pyribs (the threshold becomes the mean of the
# candidates that beat it); 0 keeps every threshold at threshold_min.
@pytest.mark.parametrize("lr,tmin,integers", [(0.5, 0.0, True), (0.01, 0.0, False), (0.2, -3.0, False),
                                               (1.0, 0.0, True), (0.0, 1.0, True)])
@pytest.mark.parametrize("use_op", [None, False])  # the C++ kernel (when built) and the TF reference
@pytest.mark.parametrize("kind", ["grid", "cvt"])
def test_soft_archive_matches_pyribs(lr, tmin, integers, use_op, kind):
    """Thresholds, status and value (against the pre-batch archive, in-batch collisions included), which
    candidate enters and what each cell holds agree with pyribs' GridArchive / CVTArchive(learning_rate,
    threshold_min)."""
    ribs_archives = pytest.importorskip("ribs.archives")
    ribs_rankers = pytest.importorskip("ribs.emitters.rankers")
    rng = np.random.default_rng(11)
    d = 3
    em = ESEmitter(d, 10, num_emitters=3, ranker="imp", seed=0)
    soft = {"learning_rate": lr, "threshold_min": tmin}
    if kind == "grid":
        a = GridArchive(d, [4, 3], [(0, 1), (0, 1)], use_op=use_op, **soft)
        ra = ribs_archives.GridArchive(solution_dim=d, dims=(4, 3), ranges=[(0, 1), (0, 1)], **soft)
    else:
        cent = np.random.default_rng(2).uniform(size=(12, 2)).astype(np.float32)
        a = CVTArchive(d, 12, [(0, 1), (0, 1)], centroids=cent, use_op=use_op, **soft)
        ra = ribs_archives.CVTArchive(solution_dim=d, centroids=cent.astype(np.float64), ranges=[(0, 1), (0, 1)],
                                      nearest_neighbors="brute_force", **soft)
    contested = 0
    for sol, fit, desc in _batches(rng, 8, 30, d, integers):
        inc = a.incumbents(desc)
        status, value = (t.numpy() for t in pre_batch_status(fit, desc, inc))
        res = a.add(sol, fit, desc)
        info = ra.add(sol.astype(np.float64), fit.astype(np.float64), desc.astype(np.float64))
        np.testing.assert_array_equal(status, info["status"])
        tol = 1e-5  # float32 thresholds here, float64 in pyribs
        np.testing.assert_allclose(value, info["value"], rtol=0, atol=tol)
        # AddResult: the one candidate per cell that entered, with pyribs' status and value; 0 for the rest
        entered = res.status.numpy() > 0
        np.testing.assert_array_equal(res.status.numpy()[entered], info["status"][entered])
        np.testing.assert_allclose(res.value.numpy()[entered], info["value"][entered], rtol=0, atol=tol)
        assert not res.value.numpy()[~entered].any()
        contested += int(((info["status"] > 0) & ~entered).sum())
        if not integers:  # (no ties) CMA-MAE's "imp" order per search = pyribs' ImprovementRanker on the slice
            order = em.rank(fit, desc, res, incumbent=inc)[0].numpy()
            for i in range(3):
                sl = slice(10 * i, 10 * (i + 1))
                sub = {k: v[sl] for k, v in info.items()}
                want, _ = ribs_rankers.ImprovementRanker().rank(None, ra, None, sub)
                np.testing.assert_array_equal(order[i], want)
        occ, obj, thr, rsol = _ribs_cells(ra, a.num_cells)
        np.testing.assert_array_equal(a.occupied.numpy()[:-1], occ)
        np.testing.assert_array_equal(a.fitness.numpy()[:-1][occ], obj[occ])
        np.testing.assert_array_equal(a.solutions.numpy()[:-1][occ], rsol[occ].astype(np.float32))
        want_thr = np.where(occ, thr, tmin)
        np.testing.assert_allclose(a.threshold.numpy()[:-1], want_thr, rtol=1e-6, atol=1e-6)
    assert contested > 0  # in-batch losers that pyribs also rates as entering were exercised


def _soft_pair(kind, lr):
    if kind == "grid":
        return [GridArchive(4, [6, 5], [(0, 1), (0, 1)], learning_rate=lr, threshold_min=-1.0, use_op=u)
                for u in (None, False)]
    cent = np.random.default_rng(5).uniform(size=(80, 2)).astype(np.float32)
    return [CVTArchive(4, 80, [(0, 1), (0, 1)], centroids=cent, lookup="buckets", learning_rate=lr,
                       threshold_min=-1.0, use_op=u) for u in (None, False)]


@pytest.mark.parametrize("kind", ["grid", "cvt"])
def test_insert_kernel_equals_reference_bit_for_bit(kind):
    """TfevoArchiveInsert's soft mode and the pure-TensorFlow reference (XLA-compiled for grids): same
    status, value, cells, elites and thresholds, bit for bit, with dead candidates and many collisions."""
    for lr in (0.01, 0.3, 1.0):
        op, ref = _soft_pair(kind, lr)
        if not op.insert_op_enabled:
            pytest.skip("the insertion kernel is not built here")
        assert not ref.insert_op_enabled
        rng = np.random.default_rng(int(lr * 100))
        for _ in range(10):
            b = 200
            desc = rng.uniform(-0.1, 1.1, (b, 2)).astype(np.float32)
            fit = rng.normal(0, 3, b).astype(np.float32)
            fit[rng.random(b) < 0.05] = np.nan
            fit[rng.random(b) < 0.02] = np.inf
            desc[rng.random(b) < 0.03, 1] = np.nan
            sol = rng.normal(size=(b, 4)).astype(np.float32)
            r1, r2 = op.add(sol, fit, desc), ref.add(sol, fit, desc)
            for x, y in zip(r1, r2):
                np.testing.assert_array_equal(x.numpy(), y.numpy())
            for v in ("solutions", "fitness", "descriptors", "occupied", "threshold"):
                np.testing.assert_array_equal(getattr(op, v).numpy()[:-1], getattr(ref, v).numpy()[:-1], err_msg=v)
        assert op.size.numpy() > 10


def _plain_ranking(fitness, descriptors, incumbent):
    """The plain-archive CMA-ME ranking spelled out: status/value against the elites."""
    f = tf.convert_to_tensor(fitness, tf.float32)
    alive = tf.math.is_finite(f) & tf.reduce_all(tf.math.is_finite(descriptors), axis=1)
    occ, inc = incumbent
    new = alive & tf.logical_not(occ)
    imp = alive & occ & (f > inc)
    status = tf.where(alive, tf.where(new, 2, tf.where(imp, 1, 0)), -1)
    value = tf.where(alive, tf.where(new, f, f - inc), 0.0)
    return status, value


def test_plain_archive_ranking_is_bit_identical_to_cma_me():
    rng = np.random.default_rng(4)
    a = GridArchive(3, [5, 5], [(0, 1), (0, 1)], learning_rate=1.0, threshold_min=-np.inf)
    assert not a.soft
    for _ in range(4):
        desc = rng.uniform(0, 1, (60, 2)).astype(np.float32)
        fit = rng.normal(0, 10, 60).astype(np.float32)
        fit[::7] = np.nan
        fit[1] = -0.0
        inc = a.incumbents(desc)
        for x, y in zip(pre_batch_status(fit, desc, inc), _plain_ranking(fit, desc, inc)):
            assert x.numpy().tobytes() == y.numpy().tobytes()
        a.add(rng.normal(size=(60, 3)).astype(np.float32), fit, desc)


def _cma_me(lr=None, tmin=-np.inf, seed=0, result=True, dim=10, **kw):
    rng = [(-5.12 * (dim // 2), 5.12 * (dim // 2))] * 2
    archive = GridArchive(dim, [10, 10], rng, learning_rate=lr, threshold_min=tmin)
    res = GridArchive(dim, [10, 10], rng) if result else None
    em = ESEmitter(dim, 8, num_emitters=3, sigma=0.5, x0=np.zeros(dim), ranker="imp" if lr is not None else "2imp",
                   selection_rule="mu", restart_rule="basic" if lr is not None else "no_improvement", seed=seed)
    return MAPElites(archive, [em], init_bounds=(-1, 1), seed=seed, result_archive=res, **kw)


_task = tf.function(sphere_linproj, autograph=False)  # eager and graph arithmetic may round differently


def _run(me, iters, step=True):
    xs = []
    for _ in range(iters):
        if step:
            me.step(sphere_linproj)
        else:
            x = me.ask()
            f, d = _task(x)
            me.tell(x, f, d)
            xs.append(x.numpy())
    return xs


def test_cma_me_with_learning_rate_one_is_plain_cma_me():
    """learning_rate=1, threshold_min=-inf: the plain archive and CMA-ME, bit for bit, result archive or not."""
    runs = [_cma_me(None, result=False), _cma_me(1.0, -np.inf, result=False), _cma_me(1.0, -np.inf, result=True)]
    for me in runs:
        me.emitters[0].ranker, me.emitters[0].restart_rule = "2imp", "no_improvement"
        _run(me, 12)
    ref = runs[0]
    for me in runs[1:]:
        for v in ("solutions", "fitness", "occupied"):
            assert getattr(me.archive, v).numpy().tobytes() == getattr(ref.archive, v).numpy().tobytes()
        assert me.emitters[0].mean.numpy().tobytes() == ref.emitters[0].mean.numpy().tobytes()
    # the result archive of a plain run holds exactly the archive's elites
    np.testing.assert_array_equal(runs[2].result_archive.fitness.numpy(), runs[2].archive.fitness.numpy())


def test_result_archive_holds_the_true_elites_and_ask_tell_equals_step():
    me_step, me_at = _cma_me(0.05, 0.0), _cma_me(0.05, 0.0)
    _run(me_step, 10)
    _run(me_at, 10, step=False)
    for v in ("fitness", "threshold", "solutions"):
        np.testing.assert_array_equal(getattr(me_step.archive, v).numpy(), getattr(me_at.archive, v).numpy())
    np.testing.assert_array_equal(me_step.result_archive.fitness.numpy(), me_at.result_archive.fitness.numpy())
    soft, res = me_step.archive, me_step.result_archive
    occ = soft.occupied.numpy()[:-1]
    np.testing.assert_array_equal(res.occupied.numpy()[:-1], occ)  # thresholds start at 0 <= fitness
    # the soft archive's elites can be worse than the best ever seen in their cell; the result archive's not
    assert (res.fitness.numpy()[:-1][occ] >= soft.fitness.numpy()[:-1][occ]).all()
    assert (res.fitness.numpy()[:-1][occ] > soft.fitness.numpy()[:-1][occ]).any()
    assert (soft.threshold.numpy()[:-1][occ] < soft.fitness.numpy()[:-1][occ]).all()
    assert me_step.metrics() == res.metrics()
    assert float(me_step.best[1]) == res.fitness.numpy()[:-1][occ].max()


def test_same_seed_same_run_and_seed_matters():
    a, b, c = _cma_me(0.01, 0.0, seed=3), _cma_me(0.01, 0.0, seed=3), _cma_me(0.01, 0.0, seed=4)
    for me in (a, b, c):
        _run(me, 8)
    assert a.result_archive.solutions.numpy().tobytes() == b.result_archive.solutions.numpy().tobytes()
    assert a.archive.threshold.numpy().tobytes() == b.archive.threshold.numpy().tobytes()
    assert a.result_archive.solutions.numpy().tobytes() != c.result_archive.solutions.numpy().tobytes()


_CHILD = textwrap.dedent("""
    import sys, json
    import numpy as np, tensorflow as tf
    sys.path.insert(0, sys.argv[1])
    from test_qd_cmamae import _cma_me, _run
    me = _cma_me(0.01, 0.0, seed=5)
    path = sys.argv[2]
    tf.train.Checkpoint(me=me).read(path).assert_consumed()
    _run(me, 6)
    np.savez(path + ".npz", res=me.result_archive.solutions.numpy(), fit=me.result_archive.fitness.numpy(),
             thr=me.archive.threshold.numpy(), mean=me.emitters[0].mean.numpy())
""")


def test_checkpoint_restore_in_a_new_process_continues_bit_for_bit(tmp_path):
    full = _cma_me(0.01, 0.0, seed=5)
    _run(full, 12)
    part = _cma_me(0.01, 0.0, seed=5)
    _run(part, 6)
    path = str(tmp_path / "ck")
    tf.train.Checkpoint(me=part).write(path)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.getcwd()] + os.environ.get("PYTHONPATH", "").split(os.pathsep)))
    here = os.path.dirname(os.path.abspath(__file__))
    subprocess.run([sys.executable, "-c", _CHILD, here, path], check=True, env=env, timeout=600)
    out = np.load(path + ".npz")
    assert out["res"].tobytes() == full.result_archive.solutions.numpy().tobytes()
    assert out["fit"].tobytes() == full.result_archive.fitness.numpy().tobytes()
    assert out["thr"].tobytes() == full.archive.threshold.numpy().tobytes()
    assert out["mean"].tobytes() == full.emitters[0].mean.numpy().tobytes()


@pytest.mark.parametrize("kw,msg", [
    ({"learning_rate": 1.5, "threshold_min": 0.0}, "learning_rate must be in \\[0, 1\\].*1.5"),
    ({"learning_rate": -0.1, "threshold_min": 0.0}, "learning_rate must be in \\[0, 1\\]"),
    ({"learning_rate": float("nan"), "threshold_min": 0.0}, "learning_rate must be a number"),
    ({"threshold_min": 0.0}, "threshold_min=0.0 was set without learning_rate"),
    ({"learning_rate": 0.01}, "learning_rate=0.01 needs a finite threshold_min"),
    ({"learning_rate": 0.5, "threshold_min": float("inf")}, "threshold_min must be finite"),
    ({"learning_rate": 0.5, "threshold_min": -1e39}, "threshold_min must be finite in float32"),
    ({"learning_rate": 0.5, "threshold_min": "0"}, "threshold_min must be a number"),
])
def test_bad_soft_settings_are_config_errors(kw, msg):
    with pytest.raises(ConfigError, match=msg):
        GridArchive(2, [3, 3], [(0, 1), (0, 1)], **kw)
    with pytest.raises(ConfigError, match=msg):
        CVTArchive(2, 4, [(0, 1), (0, 1)], centroids=np.eye(4, 2), **kw)


def test_bad_result_archive_is_a_config_error():
    a = GridArchive(2, [3, 3], [(0, 1), (0, 1)], learning_rate=0.1, threshold_min=0.0)
    em = ESEmitter(2, 4, seed=0)
    with pytest.raises(ConfigError, match="result_archive is the archive itself"):
        MAPElites(a, [em], init_bounds=(0, 1), result_archive=a)
    with pytest.raises(ConfigError, match="result_archive has solution_dim 3"):
        MAPElites(a, [em], init_bounds=(0, 1), result_archive=GridArchive(3, [3, 3], [(0, 1), (0, 1)]))


def test_cli_train_with_a_cma_mae_config(tmp_path):
    """`tfevo train` on the shipped CMA-MAE config: a soft archive with pyribs' parameter names, a plain
    result archive that the logged metrics read."""
    from pathlib import Path

    from tfevo.cli import main
    from tfevo.training.builders import load_run

    cfg_path = Path(__file__).resolve().parents[2] / "examples" / "configs" / "cma_mae_sphere.toml"
    run = tmp_path / "run"
    assert main(["train", str(cfg_path), "--run-dir", str(run), "--generations", "4", "--no-progress",
                 "--set", "algorithm.popsize=12", "--set", "algorithm.params.num_emitters=2",
                 "--set", "problem.num_dims=6"]) == 0
    last = json.loads((run / "progress.jsonl").read_text().splitlines()[-1])
    assert last["coverage"] > 0
    _, _, me = load_run(run)
    assert me.archive.soft and (me.archive.learning_rate, me.archive.threshold_min) == (0.01, 0.0)
    assert me._result_archive is not None and not me.result_archive.soft
    assert last["qd_score"] == pytest.approx(me.result_archive.metrics()["qd_score"])
    assert (run / "archive.png").is_file()


@pytest.mark.parametrize("archive,msg", [
    ({"learning_rate": 1.5, "threshold_min": 0}, r"archive\.learning_rate: .*less than or equal to 1"),
    ({"learning_rate": -0.5, "threshold_min": 0}, r"archive\.learning_rate: .*greater than or equal to 0"),
    ({"threshold_min": 0}, r"archive\.threshold_min=0\.0 was set without archive\.learning_rate"),
    ({"learning_rate": 0.01}, r"archive\.learning_rate=0\.01 needs a finite archive\.threshold_min"),
    ({"learning_rate": 0.01, "threshold_min": float("nan")}, r"archive\.threshold_min must be a finite number"),
])
def test_config_soft_archive_errors(archive, msg):
    from tfevo.training.config import parse_config

    data = {"algorithm": {"name": "map_elites", "params": {"emitter": "cma_me"}},
            "problem": {"name": "sphere_linproj", "num_dims": 4}, "archive": dict(archive)}
    with pytest.raises(ConfigError, match=msg):
        parse_config(data)


@pytest.mark.parametrize("soft", [{}, {"learning_rate": 0.3, "threshold_min": -1.0}])
def test_metrics_equal_pyribs_archive_stats(soft):
    """metrics() against pyribs' ArchiveStats on identical inserts (qd_score with pyribs' offset
    convention, norm_qd_score = qd_score / cells, coverage, size, mean); max_fitness is pyribs' obj_max
    on a plain archive, and on a soft one the best elite held now (never above pyribs' running obj_max)."""
    ribs_archives = pytest.importorskip("ribs.archives")
    a = GridArchive(3, [4, 3], [(0, 1), (0, 1)], qd_offset=-2.5, **soft)
    ra = ribs_archives.GridArchive(solution_dim=3, dims=(4, 3), ranges=[(0, 1), (0, 1)], qd_score_offset=-2.5,
                                   **soft)
    m = a.metrics()
    assert (m["size"], m["coverage"], m["qd_score"], m["norm_qd_score"]) == (0, 0.0, 0.0, 0.0)
    for sol, fit, desc in _batches(np.random.default_rng(4), 6, 20, 3, False):
        a.add(sol, fit, desc)
        ra.add(sol.astype(np.float64), fit.astype(np.float64), desc.astype(np.float64))
        m, s = a.metrics(), ra.stats
        assert m["size"] == s.num_elites
        for ours, theirs in (("coverage", s.coverage), ("qd_score", s.qd_score),
                             ("norm_qd_score", s.norm_qd_score), ("mean_fitness", s.obj_mean)):
            assert m[ours] == pytest.approx(float(theirs), rel=1e-6, abs=1e-6), ours
        if soft:
            assert m["max_fitness"] <= float(s.obj_max)
        else:
            assert m["max_fitness"] == float(s.obj_max)
