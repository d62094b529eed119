"""AtariEnv fast seed mode: is an episode a pure function of (seed, actions)?

For each game and seed mode, a fresh env plays seed 3 with a fixed random
action sequence (up to ``--steps`` agent steps); other envs first run a
history in the same slot and then seed 3 with the same actions:

* ``episodes``: three other episodes (other seeds, other actions, one cut short);
* ``cut_then_step``: 20 random-action steps, a reset, one more step.

Prints whether every frame, reward and flag agrees, and both returns.  Also
checks raw ``ale_py.ALEInterface`` (no tfevo): three histories (20 random
agent steps, the first 20 of the episode's own actions, 45 random steps;
then ``reset_game()``; and the first 20 of a 60-step sequence, then
``reset_game()`` twice, before that sequence), against a freshly loaded ROM.

    PYTHONPATH=$PWD python benchmarks/audit_atari_slot_history.py [--steps 2000]
"""

from __future__ import annotations

import argparse
import hashlib
import json

import numpy as np

from tfevo.envs.atari import AtariEnv


def play(env, seed, actions):
    h = hashlib.sha256(env.reset([0], [seed])[0].tobytes())
    total, n = 0.0, 0
    for a in actions:
        env.send(np.array([a], np.int32), np.array([0]))
        _, o, r, te, tr = env.recv()
        h.update(o[0].tobytes())
        h.update(np.array([r[0], te[0], tr[0]], np.float64).tobytes())
        total += float(r[0])
        n += 1
        if te[0] or tr[0]:
            break
    return h.hexdigest()[:16], total, n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--games", default="ALE/Pong-v5,ALE/Breakout-v5,ALE/MsPacman-v5,ALE/Frostbite-v5,ALE/SpaceInvaders-v5")
    a = ap.parse_args()
    for game in a.games.split(","):
        acts = np.random.default_rng(5).integers(0, 18, a.steps)
        for mode in ("fast", "exact"):
            fresh = play(AtariEnv(game, num_envs=1, seed_mode=mode), 3, acts)
            out = dict(game=game, seed_mode=mode, fresh=fresh)
            env = AtariEnv(game, num_envs=1, seed_mode=mode)
            for k, s in enumerate((11, 12, 13)):
                play(env, s, np.random.default_rng(100 + k).integers(0, 18, 60 if k == 1 else a.steps))
            out["episodes"] = play(env, 3, acts)
            env = AtariEnv(game, num_envs=1, seed_mode=mode)
            play(env, 11, np.random.default_rng(7).integers(0, 18, 20))
            env.reset([0], [12])
            env.send(np.zeros(1, np.int32), np.array([0]))
            env.recv()
            out["cut_then_step"] = play(env, 3, acts)
            out["identical"] = {k: out[k] == fresh for k in ("episodes", "cut_then_step")}
            print(json.dumps(out), flush=True)
        print(json.dumps(dict(game=game, raw_ale_soft_reset_identical=raw_ale(game, acts))), flush=True)


def raw_ale(game, acts):
    """Raw ALE: is an episode after ``reset_game()`` the one a freshly loaded ROM plays?"""
    import ale_py
    from ale_py import roms

    from tfevo.envs.atari import game_name

    def new():
        ale = ale_py.ALEInterface()
        ale.setInt("random_seed", 0)
        ale.setFloat("repeat_action_probability", 0.0)
        ale.setLoggerMode(ale_py.LoggerMode.Error)
        ale.loadROM(str(roms.get_rom_path(game_name(game))))
        ale.reset_game()
        return ale

    def run(ale, actions):
        legal, h = ale.getLegalActionSet(), hashlib.sha256()
        for x in actions:
            for _ in range(4):
                ale.act(legal[x])
            h.update(ale.getScreenGrayscale().tobytes())
        return h.hexdigest()

    ref = run(new(), acts[:300])
    same = []
    for hist in (np.random.default_rng(7).integers(0, 18, 20), acts[:20], np.random.default_rng(8).integers(0, 18, 45)):
        ale = new()
        run(ale, hist)
        ale.reset_game()
        same.append(run(ale, acts[:300]) == ref)
    # a fourth case: the first 20 of another 60-action sequence, two resets, that sequence
    other = np.random.default_rng(0).integers(0, 18, 60)
    ale = new()
    run(ale, other[:20])
    ale.reset_game()
    ale.reset_game()
    same.append(run(ale, other) == run(new(), other))
    return same


if __name__ == "__main__":
    main()
