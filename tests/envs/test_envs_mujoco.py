"""Batched MuJoCo locomotion environments against Gymnasium's own -v5 envs."""

import os
import sys
import time
import types

import numpy as np
import pytest

mujoco = pytest.importorskip("mujoco")
gym = pytest.importorskip("gymnasium")

# Gymnasium's MuJoCo envs import imageio for rendering to files only; the
# reference comparison must not depend on that optional package being present.
try:  # pragma: no cover - depends on the machine
    import imageio  # noqa: F401
except ImportError:  # pragma: no cover
    sys.modules["imageio"] = types.ModuleType("imageio")

from tfevo.core import ConfigError, ShapeError  # noqa: E402
from tfevo.envs import make  # noqa: E402
from tfevo.envs.mujoco import MUJOCO_ENV_IDS, MujocoVectorEnv, disable_log_file  # noqa: E402

# Gymnasium's own envs (the references below) would otherwise log MuJoCo's
# compiler notes into MUJOCO_LOG.TXT in the directory pytest runs from.
disable_log_file()

# (env_id, steps, backends); Humanoid is the heaviest, so fewer steps.
CASES = [
    ("Swimmer-v5", 250, ("batch", "threads")),
    ("Hopper-v5", 250, ("batch", "threads")),
    ("HalfCheetah-v5", 250, ("batch", "threads")),
    ("Walker2d-v5", 250, ("batch", "threads")),
    ("Ant-v5", 250, ("threads",)),
    ("Humanoid-v5", 120, ("threads",)),
]
PARAMS = [(e, n, b) for e, n, bs in CASES for b in bs]


@pytest.mark.parametrize("env_id,steps,backend", PARAMS, ids=[f"{e}-{b}" for e, _, b in PARAMS])
def test_agrees_with_gymnasium(env_id, steps, backend):
    """Same start state and actions => same obs/reward/terminated/truncated.

    The reference episode runs in slot 2 of 4 while the other slots step with
    other actions in the same calls; the Gymnasium env keeps stepping after a
    termination (as its API allows), so unhealthy states are compared too.
    The truncation limit is set below the number of steps so truncation is
    compared as well.
    """
    limit = steps - 20
    ref = gym.make(env_id, max_episode_steps=limit)
    obs_ref, _ = ref.reset(seed=123)
    u = ref.unwrapped
    env = MujocoVectorEnv(env_id, 4, backend=backend, num_threads=2, obs_dtype=np.float64, max_episode_steps=limit)
    env.reset(seeds=np.arange(4))
    obs = env.set_state(np.array([2]), u.data.qpos[None], u.data.qvel[None])
    np.testing.assert_allclose(obs[0], obs_ref, rtol=1e-12, atol=0)
    rng = np.random.default_rng(7)
    high = env.action_spec.high
    n_term = 0
    slots = np.array([3, 2, 0, 1])  # unsorted on purpose
    for t in range(steps):
        # scaled random actions, sometimes beyond the control range
        a = (rng.uniform(-1.2, 1.2, size=(4, env.model.nu)) * high).astype(np.float32)
        o_r, r_r, te_r, tr_r, _ = ref.step(a[1])
        env.send(a, slots)
        idx, o, r, te, tr = env.recv()
        assert idx.tolist() == slots.tolist()
        np.testing.assert_allclose(o[1], o_r, rtol=1e-9, atol=1e-12, err_msg=f"obs at step {t}")
        np.testing.assert_allclose(r[1], r_r, rtol=1e-6, atol=1e-6, err_msg=f"reward at step {t}")
        assert bool(te[1]) == bool(te_r), f"terminated differs at step {t}"
        assert bool(tr[1]) == bool(tr_r), f"truncated differs at step {t}"
        n_term += bool(te_r)
    assert tr[1]  # the limit was reached
    env.close()
    ref.close()


def test_float32_observations_and_registry():
    env = make("HalfCheetah-v5", 3)
    assert isinstance(env, MujocoVectorEnv) and env.backend == "batch"
    assert make("HalfCheetah-v5", 2, backend="threads", num_threads=1).backend == "threads"
    assert make("Ant-v5", 1).backend == "threads"
    obs = env.reset(np.arange(3), seeds=np.array([1, 2, 3]))
    assert obs.dtype == np.float32 and obs.shape == (3, 17) == (3, *env.observation_shape)
    assert env.action_spec.shape == (6,) and not env.action_spec.discrete
    env.send(np.zeros((3, 6), np.float32), np.arange(3))
    _, o, r, te, tr = env.recv()
    assert o.dtype == np.float32 and r.dtype == np.float32 and te.dtype == bool and tr.dtype == bool
    for env_id in MUJOCO_ENV_IDS:
        assert env_id in __import__("tfevo.envs", fromlist=["list_envs"]).list_envs()


@pytest.mark.parametrize("env_id,backend", [("HalfCheetah-v5", "batch"), ("Walker2d-v5", "threads"), ("Ant-v5", "threads")])
def test_batched_equals_one_at_a_time(env_id, backend):
    """8 slots stepped together == the same slots stepped alone, any thread count."""
    n, steps = 8, 40
    together = MujocoVectorEnv(env_id, n, backend=backend, num_threads=2, obs_dtype=np.float64)
    alone = MujocoVectorEnv(env_id, n, backend=backend, num_threads=1, obs_dtype=np.float64)
    seeds = np.arange(100, 100 + n)
    o1 = together.reset(np.arange(n), seeds)
    o2 = alone.reset(np.arange(n), seeds)
    np.testing.assert_array_equal(o1, o2)
    rng = np.random.default_rng(0)
    for _ in range(steps):
        a = rng.uniform(-1, 1, size=(n, together.model.nu))
        _, oa, ra, ta, _ = together.step(a, np.arange(n))
        ob, rb, tb = [], [], []
        for i in rng.permutation(n):
            _, o, r, t, _ = alone.step(a[i : i + 1], np.array([i]))
            ob.append((i, o[0], r[0], t[0]))
        ob.sort(key=lambda x: x[0])
        np.testing.assert_array_equal(oa, np.stack([x[1] for x in ob]))
        np.testing.assert_array_equal(ra, np.array([x[2] for x in ob]))
        np.testing.assert_array_equal(ta, np.array([x[3] for x in ob]))
    np.testing.assert_array_equal(together.descriptors(), alone.descriptors())


@pytest.mark.parametrize("backend", ["batch", "threads"])
def test_two_sends_in_flight_on_disjoint_slots(backend):
    env = MujocoVectorEnv("Hopper-v5", 6, backend=backend, num_threads=2, obs_dtype=np.float64)
    ref = MujocoVectorEnv("Hopper-v5", 6, backend=backend, obs_dtype=np.float64)
    env.reset(seeds=np.arange(6))
    ref.reset(seeds=np.arange(6))
    a = np.linspace(-1, 1, 18).reshape(6, 3)
    env.send(a[:3], np.arange(3))
    env.send(a[3:], np.arange(3, 6))
    with pytest.raises(ConfigError, match="still stepping"):
        env.send(a[:1], np.array([0]))
    i1, o1, *_ = env.recv()
    i2, o2, *_ = env.recv()
    assert i1.tolist() == [0, 1, 2] and i2.tolist() == [3, 4, 5]
    _, o, *_ = ref.step(a, np.arange(6))
    np.testing.assert_array_equal(np.concatenate([o1, o2]), o)


def test_reset_seeds_reproducible_and_noise_distribution():
    n = 512
    env = MujocoVectorEnv("HalfCheetah-v5", n, obs_dtype=np.float64)
    seeds = np.arange(n) * 7 + 3
    a = env.reset(seeds=seeds)
    b = env.reset(seeds=seeds)
    np.testing.assert_array_equal(a, b)
    # a slot's noise depends only on its seed, not on the slot or the batch
    c = env.reset(np.array([5]), seeds=seeds[10:11])
    np.testing.assert_array_equal(c[0], a[10])
    qpos, qvel = env.get_state()
    dq, dv = qpos - env.init_qpos, qvel - env.init_qvel
    s = 0.1  # HalfCheetah: uniform qpos noise in [-s, s], normal qvel noise, std s
    assert np.all(np.abs(dq) <= s)
    assert abs(dq.std() - s / np.sqrt(3)) < 0.004 and abs(dq.mean()) < 0.004
    assert abs(dv.std() - s) < 0.005 and abs(dv.mean()) < 0.005
    assert np.abs(dv).max() > s  # not uniform
    # without seeds: reproducible from the constructor seed, different per episode
    e1 = MujocoVectorEnv("Ant-v5", 4, seed=11, obs_dtype=np.float64)
    e2 = MujocoVectorEnv("Ant-v5", 4, seed=11, obs_dtype=np.float64)
    e3 = MujocoVectorEnv("Ant-v5", 4, seed=12, obs_dtype=np.float64)
    r1, r2, r3 = e1.reset(), e2.reset(), e3.reset()
    np.testing.assert_array_equal(r1, r2)
    assert not np.allclose(r1, r3)
    assert not np.allclose(r1[0], r1[1])
    assert not np.allclose(e1.reset(), r1)
    # uniform qpos noise bound for Ant (scale 0.1)
    assert np.all(np.abs(e1.get_state()[0] - e1.init_qpos) <= 0.1)


def test_descriptors_and_truncation():
    env = MujocoVectorEnv("Walker2d-v5", 4, max_episode_steps=30)
    env.reset(seeds=np.arange(4))
    rng = np.random.default_rng(1)
    d0 = env.descriptors()
    np.testing.assert_allclose(d0[:, 2:], 0)
    for t in range(30):
        _, _, _, _, tr = env.step(rng.uniform(-1, 1, size=(4, 6)), np.arange(4))
        assert tr.all() == (t == 29)
    d = env.descriptors()
    assert d.shape == (4, 4) and env.descriptor_names == ("x", "y", "contact:foot_geom", "contact:foot_left_geom")
    qpos, _ = env.get_state()
    np.testing.assert_allclose(d[:, 0], qpos[:, 0], rtol=1e-6)
    np.testing.assert_allclose(d[:, 1], 0)
    assert np.all((d[:, 2:] >= 0) & (d[:, 2:] <= 1))
    assert d[:, 2:].max() > 0  # a walker starting on its feet touches the floor
    # fractions are counts over steps: multiples of 1/30
    np.testing.assert_allclose(d[:, 2:] * 30, np.round(d[:, 2:] * 30), atol=1e-4)
    ant = MujocoVectorEnv("Ant-v5", 2)
    ant.reset(seeds=np.array([0, 1]))
    for _ in range(25):
        ant.step(rng.uniform(-1, 1, size=(2, 8)), np.arange(2))
    da = ant.descriptors()
    np.testing.assert_allclose(da[:, :2], ant.get_state()[0][:, :2], rtol=1e-6)
    assert da.shape == (2, 6) and np.all((da[:, 2:] >= 0) & (da[:, 2:] <= 1)) and da[:, 2:].max() > 0


def test_contact_fraction_matches_mjdata_contacts():
    """The sensor-based foot contacts agree with MjData.contact after each step."""
    env = MujocoVectorEnv("HalfCheetah-v5", 1, backend="threads")
    env.reset(seeds=np.array([4]))
    m = env.model
    floor = m.geom("floor").id
    feet = [m.geom(g).id for g in env.foot_geoms]
    rng = np.random.default_rng(2)
    counts = np.zeros(len(feet))
    for _ in range(60):
        env.step(rng.uniform(-1, 1, size=(1, 6)), np.array([0]))
        d = env.get_data(0)
        pairs = {(int(c.geom1), int(c.geom2)) for c in d.contact}
        counts += [((f, floor) in pairs) or ((floor, f) in pairs) for f in feet]
    np.testing.assert_allclose(env.descriptors()[0, 2:], counts / 60, atol=1e-6)
    assert counts.sum() > 0


def test_clear_errors():
    with pytest.raises(ConfigError, match="unknown"):
        MujocoVectorEnv("Cheetah-v9", 2)
    with pytest.raises(ConfigError, match="unknown"):
        make("NoSuchEnv-v5", 2)
    with pytest.raises(ConfigError, match="backend"):
        MujocoVectorEnv("Ant-v5", 2, backend="batch")
    with pytest.raises(ConfigError, match="num_envs"):
        MujocoVectorEnv("Hopper-v5", 0)
    env = MujocoVectorEnv("Hopper-v5", 3)
    env.reset()
    with pytest.raises(ShapeError, match=r"\(2, 3\)"):
        env.send(np.zeros((2, 4)), np.array([0, 1]))
    with pytest.raises(ShapeError, match="unique"):
        env.send(np.zeros((2, 3)), np.array([1, 1]))
    with pytest.raises(ShapeError, match="in \\[0, 3\\)"):
        env.send(np.zeros((1, 3)), np.array([3]))
    with pytest.raises(ConfigError, match="recv"):
        env.recv()
    with pytest.raises(ShapeError, match="qpos"):
        env.set_state(np.array([0]), np.zeros((1, 5)), np.zeros((1, 6)))
    with pytest.raises(ShapeError, match="seeds"):
        env.reset(np.array([0, 1]), seeds=np.array([1]))


def test_send_returns_before_the_physics_is_done():
    env = MujocoVectorEnv("Humanoid-v5", 64, num_threads=2)
    env.reset()
    a = np.zeros((64, env.model.nu), np.float32)
    env.step(a, None)  # warm up
    t0 = time.perf_counter()
    env.send(a, np.arange(64))
    t_send = time.perf_counter() - t0
    env.recv()
    t_total = time.perf_counter() - t0
    assert t_send < 0.5 * t_total, (t_send, t_total)


def test_no_mujoco_log_file(tmp_path, monkeypatch):
    """Creating an env turns MuJoCo's default MUJOCO_LOG.TXT off; warnings during
    stepping then leave no file in the cwd.  A user-chosen log path is kept."""
    monkeypatch.chdir(tmp_path)
    old = mujoco.MjLogConfig.get()
    try:
        cfg = mujoco.MjLogConfig.get()  # MuJoCo's defaults: log to ./MUJOCO_LOG.TXT
        cfg.logto_file, cfg.logto_console, cfg.logfile = True, False, "MUJOCO_LOG.TXT"
        cfg.set()
        env = MujocoVectorEnv("Hopper-v5", 1, backend="threads")
        assert not mujoco.MjLogConfig.get().logto_file
        env.reset()

        def blow_up():
            qpos, qvel = env.get_state([0])
            env.set_state(np.array([0]), qpos, qvel + 1e12)  # huge velocities: MuJoCo warns
            env.step(np.zeros((1, 3)), np.array([0]))
            return sum(w.number for w in env.get_data(0).warning)  # BADQVEL/BADQACC...

        assert blow_up() > 0  # a warning was really issued
        assert not (tmp_path / "MUJOCO_LOG.TXT").exists()
        # control: with MuJoCo's default file logging the same warning writes the file
        cfg.set()
        assert blow_up() > 0
        assert (tmp_path / "MUJOCO_LOG.TXT").exists()
        os.remove(tmp_path / "MUJOCO_LOG.TXT")
        # a log file path the user chose is left alone
        mine = mujoco.MjLogConfig.get()
        mine.logto_file, mine.logfile = True, str(tmp_path / "mine.log")
        mine.set()
        MujocoVectorEnv("Hopper-v5", 1)
        assert mujoco.MjLogConfig.get().logto_file
    finally:
        old.set()
        disable_log_file()
    assert not (tmp_path / "MUJOCO_LOG.TXT").exists()


@pytest.mark.parametrize("env_id", ["HalfCheetah-v5", "Hopper-v5", "Ant-v5"])
def test_gymnasium_reset_rng_matches_gymnasium_reset(env_id):
    """reset_rng='gymnasium': reset(seeds=[s]) == gymnasium reset(seed=s), also the next unseeded reset."""
    ref = gym.make(env_id)
    env = MujocoVectorEnv(env_id, 3, reset_rng="gymnasium", obs_dtype=np.float64)
    seeds = np.array([5, 17, 99])
    obs = env.reset(seeds=seeds)
    for j, s in enumerate(seeds):
        o, _ = ref.reset(seed=int(s))
        np.testing.assert_array_equal(obs[j], o)
    o2, _ = ref.reset()  # continues the seed-99 generator, as slot 2 does
    np.testing.assert_array_equal(env.reset(np.array([2]))[0], o2)
    with pytest.raises(ConfigError, match="reset_rng"):
        MujocoVectorEnv(env_id, 1, reset_rng="torch")


@pytest.mark.parametrize("backend", ["batch", "threads"])
def test_native_stepping_releases_the_gil(backend):
    """The design assumption behind non-blocking send(): while one long native
    step call runs in a worker, the Python main thread keeps running."""
    import threading

    env = MujocoVectorEnv("HalfCheetah-v5", 4, backend=backend, num_threads=1)
    env.reset()
    done = threading.Event()

    def long_call():
        if backend == "batch":
            env._sim.b.step(None, nstep=4000)
        else:
            mujoco.mj_step(env.model, env._sim.datas[0], 16000)
        done.set()

    t = threading.Thread(target=long_call)
    t.start()
    spins = 0
    while not done.is_set():
        spins += 1
    t.join()
    assert spins > 1000, spins  # a GIL held for the whole call would give ~0


def test_empty_send_and_backends_agree_on_descriptors():
    envs = [MujocoVectorEnv("HalfCheetah-v5", 5, backend=b, obs_dtype=np.float64) for b in ("batch", "threads")]
    rng = np.random.default_rng(3)
    for e in envs:
        e.reset(seeds=np.arange(5))
        e.send(np.zeros((0, 6)), np.zeros(0, np.int64))
        idx, o, r, te, tr = e.recv()
        assert idx.size == 0 and o.shape == (0, 17) and r.shape == (0,)
    for _ in range(50):
        a = rng.uniform(-1, 1, size=(5, 6))
        outs = [e.step(a, np.arange(5)) for e in envs]
        np.testing.assert_array_equal(outs[0][1], outs[1][1])
        np.testing.assert_array_equal(outs[0][2], outs[1][2])
    np.testing.assert_array_equal(envs[0].descriptors(), envs[1].descriptors())
    assert envs[0].descriptors()[:, 2:].max() > 0


@pytest.mark.slow
@pytest.mark.parametrize("env_id", [c[0] for c in CASES])
def test_full_episodes_agree_with_gymnasium(env_id):
    """1000-step episodes from 3 Gymnasium-seeded starts; resets on termination."""
    ref = gym.make(env_id)
    env = MujocoVectorEnv(env_id, 1, obs_dtype=np.float64, reset_rng="gymnasium")
    for seed in (0, 1, 2):
        o_r, _ = ref.reset(seed=seed)
        o = env.reset(np.array([0]), seeds=np.array([seed]))
        np.testing.assert_array_equal(o[0], o_r)
        rng = np.random.default_rng(seed)
        for t in range(1000):
            a = rng.uniform(-1, 1, size=(1, env.model.nu)).astype(np.float32) * env.action_spec.high
            o_r, r_r, te_r, tr_r, _ = ref.step(a[0])
            _, o, r, te, tr = env.step(a, np.array([0]))
            np.testing.assert_allclose(o[0], o_r, rtol=1e-9, atol=1e-12)
            np.testing.assert_allclose(r[0], r_r, rtol=1e-6, atol=1e-6)
            assert (bool(te[0]), bool(tr[0])) == (bool(te_r), bool(tr_r)), t
            if te_r or tr_r:
                o_r, _ = ref.reset()
                np.testing.assert_array_equal(env.reset(np.array([0]))[0], o_r)


@pytest.mark.parametrize("backend", ["batch", "threads"])
def test_nan_action_gives_nan_reward_and_keeps_the_simulation(backend):
    """As in Gymnasium: MuJoCo zeroes a non-finite control (with a warning) and the
    control cost makes the reward NaN, which fitness code treats as worst."""
    env = MujocoVectorEnv("Hopper-v5", 2, backend=backend, obs_dtype=np.float64)
    ref = MujocoVectorEnv("Hopper-v5", 2, backend=backend, obs_dtype=np.float64)
    env.reset(seeds=np.array([1, 2]))
    ref.reset(seeds=np.array([1, 2]))
    _, o, r, _, _ = env.step(np.array([[np.nan, 0, 0], [0.1, 0.2, 0.3]]), np.arange(2))
    _, o_ref, r_ref, _, _ = ref.step(np.array([[0.0, 0, 0], [0.1, 0.2, 0.3]]), np.arange(2))
    assert np.isnan(r[0]) and r[1] == r_ref[1]
    np.testing.assert_array_equal(o, o_ref)  # the NaN control acted as zero
