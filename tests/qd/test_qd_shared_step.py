"""MAPElites.step shares one traced program between instances of the same configuration."""

import numpy as np
import tensorflow as tf

from tfevo.qd import ESEmitter, GridArchive, MAPElites, sphere_qd
from tfevo.qd import _shared_step

D, E, B = 8, 3, 6


def _make(seed, sigma=0.1):
    archive = GridArchive(D, (8, 8), [(0, 1), (0, 1)], qd_offset=-25.0 * D)
    em = ESEmitter(D, B, num_emitters=E, sigma=sigma, ranker="2imp", selection_rule="mu",
                   restart_rule="no_improvement", seed=seed)
    return MAPElites(archive, [em], init_bounds=(0, 1), seed=seed)


def _state(me):
    a, e = me.archive, me.emitters[0]
    return [v.numpy() for v in (a.solutions, a.fitness, a.occupied, e.mean, e.sigma, e.cov, e.restarts,
                                me.generation, me.seeds.counter)]


def _ask_tell(me, iters):
    for _ in range(iters):
        x = me.ask()
        me.tell(x, *sphere_qd(x))
    return _state(me)


def test_instances_share_the_step_and_each_equals_its_solo_run():
    _shared_step._cache.clear()
    traces = []

    def task(x):  # a Python task: each trace of a step program calls it once
        traces.append(1)
        return sphere_qd(x)

    solo = {s: _ask_tell(_make(s), 7) for s in (11, 12)}  # ask()/tell() never use the shared program
    a, b = _make(11), _make(12)
    for _ in range(7):  # interleaved: b runs the program traced on a, on its own state
        a.step(task)
        b.step(task)
    assert len(traces) == 1
    for me, s in ((a, 11), (b, 12)):
        for u, v in zip(_state(me), solo[s]):
            np.testing.assert_array_equal(u, v)
    assert not np.array_equal(_state(a)[0], _state(b)[0])


def test_a_different_configuration_traces_its_own_step():
    _shared_step._cache.clear()
    traces = []

    def task(x):
        traces.append(1)
        return sphere_qd(x)

    ref = _ask_tell(_make(5, sigma=0.3), 6)
    _make(5).step(task, iterations=2)
    wide = _make(5, sigma=0.3)
    wide.step(task, iterations=6)
    assert len(traces) == 2
    for u, v in zip(_state(wide), ref):
        np.testing.assert_array_equal(u, v)


def test_a_task_capturing_outside_state_is_not_shared():
    _shared_step._cache.clear()
    scale = tf.Variable(1.0)

    def task(x):
        f, d = sphere_qd(x)
        return f * scale, d

    me = _make(1)
    me.step(task)
    assert not _shared_step._cache  # the capture of `scale` has no path in the MAPElites tree


def test_the_shared_step_outlives_the_instance_that_traced_it():
    import gc

    _shared_step._cache.clear()
    ref = _ask_tell(_make(21), 5)
    first = _make(20)
    first.step(sphere_qd, iterations=2)
    del first
    gc.collect()
    me = _make(21)
    me.step(sphere_qd, iterations=5)
    assert len(_shared_step._cache) == 1
    for u, v in zip(_state(me), ref):
        np.testing.assert_array_equal(u, v)
