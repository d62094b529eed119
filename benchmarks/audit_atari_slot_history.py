"""AtariEnv fast seed mode: is an episode a pure function of (seed, actions)?

For each game, a fresh env plays seed 3 with a fixed random action sequence
(up to ``--steps`` agent steps); a second env first plays three other
episodes in the same slot (other seeds, other actions, one cut short) and then
seed 3 with the same actions.  Prints whether every frame, reward and flag
agrees, and both returns.

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
        fresh = play(AtariEnv(game, num_envs=1), 3, acts)
        env = AtariEnv(game, num_envs=1)
        for k, s in enumerate((11, 12, 13)):
            play(env, s, np.random.default_rng(100 + k).integers(0, 18, 60 if k == 1 else a.steps))
        after = play(env, 3, acts)
        print(json.dumps(dict(game=game, identical=fresh == after, fresh=fresh, after_history=after)), flush=True)


if __name__ == "__main__":
    main()
