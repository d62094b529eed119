"""AtariEnv: ale-py's native vector env under the HostVectorEnv contract."""

import numpy as np
import pytest

from tfevo.core import ConfigError, ShapeError
from tfevo.envs.atari import PRESETS, AtariEnv, game_name, make_atari


def _play(env, slot, seed, actions):
    frames = [env.reset([slot], [seed])[0]]
    total, end = 0.0, None
    for t, a in enumerate(actions):
        env.send(np.array([a], np.int32), np.array([slot]))
        idx, o, r, te, tr = env.recv()
        assert idx.tolist() == [slot]
        frames.append(o[0])
        total += float(r[0])
        if te[0] or tr[0]:
            end = t
            break
    return np.stack(frames), total, end


def test_game_names():
    assert game_name("ALE/Pong-v5") == "pong"
    assert game_name("ALE/MsPacman-v5") == "ms_pacman"
    assert game_name("MontezumaRevenge") == "montezuma_revenge"
    assert game_name("frostbite") == "frostbite"


@pytest.mark.parametrize("game", ["ALE/Pong-v5", "ALE/Frostbite-v5"])
def test_deep_neuroevolution_preset_runs(game):
    env = make_atari(game, num_envs=3)
    assert env.preset == "deep_neuroevolution"
    assert env.observation_shape == (84, 84, 4) and env.observation_dtype == np.uint8
    assert env.action_spec.discrete and env.action_spec.num_actions == 18
    assert env.frames_per_step == 4
    obs = env.reset(np.arange(3), [1, 2, 3])
    assert obs.shape == (3, 84, 84, 4) and obs.dtype == np.uint8
    rng = np.random.default_rng(0)
    seen_nonzero = False
    for t in range(200):
        slots = np.array([0, 2]) if t % 3 else np.arange(3)
        env.send(rng.integers(0, 18, slots.size).astype(np.int32), slots)
        idx, obs, rew, term, trunc = env.recv()
        np.testing.assert_array_equal(idx, slots)
        assert obs.shape == (slots.size, 84, 84, 4) and obs.dtype == np.uint8
        assert rew.dtype == np.float32 and term.dtype == bool and trunc.dtype == bool
        seen_nonzero |= bool(obs.any())
        done = idx[term | trunc]
        if done.size:
            env.reset(done, done + 100)
    assert seen_nonzero
    env.close()


def test_slot_reset_reproducible_from_seed():
    env = AtariEnv("ALE/Frostbite-v5", num_envs=3)
    assert env.seed_mode == "fast"
    env.reset(np.arange(3), [0, 1, 2])
    actions = np.random.default_rng(3).integers(0, 18, 70)
    f0, r0, _ = _play(env, 0, 1234, actions)
    # other slots step in between; slot 2 replays the same seed with the same actions
    for _ in range(7):
        env.send(np.array([1, 3], np.int32), np.array([0, 1]))
        env.recv()
    f2, r2, _ = _play(env, 2, 1234, actions)
    np.testing.assert_array_equal(f0, f2)
    assert r0 == r2
    # the seed sets the random no-op start: the first n actions are replaced by NOOP
    n = int(np.random.default_rng(1234).integers(0, 31))
    other = actions.copy()
    other[:n] = (other[:n] + 5) % 18
    f4, _, _ = _play(env, 1, 1234, other)
    np.testing.assert_array_equal(f0, f4)
    n99 = int(np.random.default_rng(99).integers(0, 31))
    assert n99 != n
    f3, _, _ = _play(env, 1, 99, actions)
    assert not np.array_equal(f0, f3)  # a different no-op start changes the episode
    env.close()


def test_negative_seeds_reset_in_both_seed_modes():
    # fast mode drew the no-op count with numpy's default_rng(seed), which refuses a negative seed
    # (exact mode already reduced seeds modulo 2**31 - 1): same negative seed, same episode
    actions = np.random.default_rng(5).integers(0, 6, 40)
    for kw in ({}, {"preset": "gymnasium"}):
        env = AtariEnv("ALE/Pong-v5", num_envs=2, **kw)
        env.reset([0, 1], [0, 1])
        a = _play(env, 0, -3, actions)
        b = _play(env, 1, -3, actions)
        np.testing.assert_array_equal(a[0], b[0])
        env.close()


def test_exact_seed_mode_reseeds_ale():
    env = AtariEnv("ALE/Pong-v5", num_envs=2, preset="gymnasium")  # sticky actions -> exact
    assert env.seed_mode == "exact"
    env.reset([0, 1], [0, 1])
    actions = np.random.default_rng(0).integers(0, 6, 60)
    a = _play(env, 0, 7, actions)
    b = _play(env, 1, 7, actions)
    np.testing.assert_array_equal(a[0], b[0])


def test_frame_cap_truncates():
    env = AtariEnv("ALE/Pong-v5", num_envs=1, max_num_frames_per_episode=80, noop_max=0)
    _, _, end = _play(env, 0, 0, np.zeros(100, np.int32))
    assert end == 80 // 4 - 1  # 20 agent steps of 4 frames


def test_gymnasium_preset_and_channels_first():
    env = AtariEnv("ALE/Pong-v5", num_envs=2, preset="gymnasium", channels_last=False)
    assert PRESETS["gymnasium"]["repeat_action_probability"] == 0.25
    assert env.action_spec.num_actions == 6  # Pong's minimal action set
    assert env.observation_shape == (4, 84, 84)
    assert env.reset([0, 1], [0, 1]).shape == (2, 4, 84, 84)
    env.close()


def test_errors():
    with pytest.raises(ConfigError, match="get_all_rom_ids"):
        AtariEnv("ALE/NoSuchGame-v5", num_envs=1)
    with pytest.raises(ConfigError, match="preset"):
        AtariEnv("ALE/Pong-v5", preset="fast")
    with pytest.raises(ConfigError, match="unknown AtariEnv option"):
        AtariEnv("ALE/Pong-v5", frame_skip=4)
    env = AtariEnv("ALE/Pong-v5", num_envs=2)
    env.reset([0, 1])
    with pytest.raises(ShapeError, match=r"in \[0, 18\)"):
        env.send(np.array([18], np.int32), np.array([0]))
    with pytest.raises(ShapeError, match="slot indices"):
        env.send(np.array([0], np.int32), np.array([2]))
    env.close()


def test_make_routes_ale_ids():
    from tfevo import envs

    env = envs.make("ALE/Pong-v5", num_envs=1, preset="gymnasium")
    assert isinstance(env, AtariEnv) and env.num_envs == 1 and env.preset == "gymnasium"


def test_frame_layout_matches_numpy_transpose():
    # AtariEnv._obs reorders ale-py's [N, stack, h, w] frames by strided
    # per-frame copies; it must equal the plain transpose for every row
    # selection (all slots in order, a permuted subset) and leave
    # channels-first frames untouched.
    env = AtariEnv("ALE/Pong-v5", num_envs=4)
    rng = np.random.default_rng(3)
    frames = rng.integers(0, 256, (4, 4, 84, 84), dtype=np.uint8)
    for rows in (None, np.arange(4), np.array([2, 0, 3]), np.array([1])):
        sel = frames if rows is None else frames[rows]
        want = sel.transpose(0, 2, 3, 1)
        got = env._obs(frames, rows)
        assert got.flags["C_CONTIGUOUS"] and got.dtype == np.uint8
        np.testing.assert_array_equal(got, want)
        assert not np.shares_memory(got, frames)
    env.channels_last = False
    np.testing.assert_array_equal(env._obs(frames, np.array([3, 1])), frames[[3, 1]])
    # the real emulator path: reset/recv of a slot subset in a shuffled order
    env.channels_last = True
    obs = env.reset(np.array([3, 1]), seeds=[5, 6])
    assert obs.shape == (2, 84, 84, 4)
    env.send(np.array([0, 0]), np.array([3, 1]))
    idx, obs2, *_ = env.recv()
    assert list(idx) == [3, 1] and obs2.shape == (2, 84, 84, 4)
    env.close()


def test_fast_seed_mode_refuses_sticky_actions():
    # fast mode never re-seeds the emulator, where the sticky-action stream
    # lives: the same seeded reset would play a different episode each time
    with pytest.raises(ConfigError, match=r"seed_mode='fast'.*repeat_action_probability"):
        AtariEnv("ALE/Pong-v5", num_envs=1, preset="gymnasium", seed_mode="fast")
    with pytest.raises(ConfigError, match="repeat_action_probability=0"):
        AtariEnv("ALE/Pong-v5", num_envs=1, seed_mode="fast", repeat_action_probability=0.1)
    env = AtariEnv("ALE/Pong-v5", num_envs=1, preset="gymnasium", seed_mode="exact")
    actions = np.random.default_rng(0).integers(0, 6, 40)
    np.testing.assert_array_equal(_play(env, 0, 7, actions)[0], _play(env, 0, 7, actions)[0])


def test_exact_seed_mode_replays_after_any_slot_history():
    # a console reset keeps RAM that Frostbite reads, so fast mode can play a
    # seed differently after some histories; exact mode reloads the ROM on a
    # seeded reset and replays the seed whatever ran in the slot before
    actions = np.random.default_rng(5).integers(0, 18, 80)
    fresh = _play(AtariEnv("ALE/Frostbite-v5", num_envs=1, seed_mode="exact"), 0, 3, actions)
    env = AtariEnv("ALE/Frostbite-v5", num_envs=1, seed_mode="exact")
    _play(env, 0, 11, np.random.default_rng(7).integers(0, 18, 20))
    env.reset([0], [12])
    env.send(np.zeros(1, np.int32), np.array([0]))
    env.recv()
    again = _play(env, 0, 3, actions)
    np.testing.assert_array_equal(fresh[0], again[0])
    assert fresh[1] == again[1]
