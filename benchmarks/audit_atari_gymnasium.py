"""AtariEnv against Gymnasium's ALE env + AtariPreprocessing + FrameStackObservation.

Same game, same seed, same action sequence (uniform random actions drawn
from a fixed seed): compares every step's observation stack, reward,
terminated and truncated flags, and the episode return.  Cases:

* ``det``: deterministic emulation (sticky 0), full action set, no no-ops
  (the deep_neuroevolution preset with ``noop_max=0``) against
  ``gym.make(id, frameskip=1, repeat_action_probability=0,
  full_action_space=True)`` + ``AtariPreprocessing(noop_max=0, frame_skip=4)``;
* ``sticky``: the gymnasium preset (sticky 0.25, minimal set) against v5's
  defaults, tfevo given the emulator seed Gymnasium derives from its seed;
* ``life``: ``episodic_life=True`` against ``terminal_on_life_loss=True``;
* ``cap``: a 400-frame episode cap against v5's ``max_num_frames_per_episode``;
* ``rgb``: ``grayscale=False`` against ``grayscale_obs=False`` (84x84x3 frames);
* ``minimal``: the minimal action set without sticky actions;
* ``zeropad``: as ``det`` against ``FrameStackObservation(padding_type="zero")``;
* ``noop``: tfevo's fast-mode no-op start (the seed's first ``n`` agent steps play
  NOOP) against Gymnasium given NOOP for those ``n`` steps.

Needs ``opencv-python-headless`` (AtariPreprocessing's resize).

    PYTHONPATH=$PWD python benchmarks/audit_atari_gymnasium.py [--steps 3000]
"""

from __future__ import annotations

import argparse
import json

import ale_py
import gymnasium as gym
import numpy as np
from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation

from tfevo.envs.atari import AtariEnv

gym.register_envs(ale_py)


def gym_env(game, *, sticky=0.0, full=True, life=False, cap=108_000, noop_max=0, gray=True, padding="reset"):
    e = gym.make(game, frameskip=1, repeat_action_probability=sticky, full_action_space=full,
                 max_num_frames_per_episode=cap)
    e = AtariPreprocessing(e, noop_max=noop_max, frame_skip=4, screen_size=84,
                           terminal_on_life_loss=life, grayscale_obs=gray)
    return FrameStackObservation(e, 4, padding_type=padding)


def ale_seed(seed):
    """The emulator seed ale-py's Gymnasium env derives from ``reset(seed=seed)``."""
    return int(np.int32(np.random.SeedSequence(seed).generate_state(2)[1]))


def compare(game, case, steps, seed=0):
    kw, gkw, tseed = {}, {}, seed
    if case == "det":
        kw = dict(noop_max=0)
    elif case == "sticky":
        kw = dict(preset="gymnasium")
        gkw = dict(sticky=0.25, full=False)
        tseed = ale_seed(seed)
    elif case == "life":
        kw = dict(noop_max=0, episodic_life=True)
        gkw = dict(life=True)
    elif case == "cap":
        kw = dict(noop_max=0, max_num_frames_per_episode=400)
        gkw = dict(cap=400)
    elif case == "noop":
        kw = dict(noop_max=30)
    elif case == "rgb":
        kw = dict(noop_max=0, grayscale=False)
        gkw = dict(gray=False)
    elif case == "minimal":
        kw = dict(noop_max=0, full_action_space=False)
        gkw = dict(full=False)
    elif case == "zeropad":
        kw = dict(noop_max=0)
        gkw = dict(padding="zero")
    t = AtariEnv(game, num_envs=1, channels_last=False, **kw)
    g = gym_env(game, **gkw)
    n = t.action_spec.num_actions
    assert n == g.action_space.n, (n, g.action_space.n)
    acts = np.random.default_rng(1000 + seed).integers(0, n, steps)
    go, _ = g.reset(seed=seed)
    to = t.reset([0], [tseed])[0]
    gacts = acts.copy()
    if case == "noop":  # tfevo's no-op start: the seed's first n agent steps play NOOP
        gacts[:int(np.random.default_rng(tseed).integers(0, 31))] = 0
    out = dict(game=game, case=case, seed=seed, reset_latest_equal=bool(np.array_equal(go[-1], to[-1])),
               reset_stack_equal=bool(np.array_equal(go, to)))
    first_diff, stack_diffs, ret_g, ret_t, end = None, 0, 0.0, 0.0, None
    for i in range(steps):
        go, rg, tg, trg, _ = g.step(int(gacts[i]))
        t.send(np.array([acts[i]], np.int32), np.array([0]))
        _, to, rt, tt, trt = t.recv()
        to, rt, tt, trt = to[0], float(rt[0]), bool(tt[0]), bool(trt[0])
        ret_g += float(rg)
        ret_t += rt
        latest_ok = np.array_equal(go[-1], to[-1])
        if not np.array_equal(go, to):
            stack_diffs += 1
        if first_diff is None and (not latest_ok or rg != rt or bool(tg) != tt or bool(trg) != trt):
            first_diff = dict(step=i, latest_equal=bool(latest_ok), max_abs=int(np.abs(go[-1].astype(int) - to[-1]).max()),
                              reward=(float(rg), rt), terminated=(bool(tg), tt), truncated=(bool(trg), trt))
        if tg or trg or tt or trt:
            end = dict(step=i, gym=(bool(tg), bool(trg)), tfevo=(tt, trt))
            break
    out.update(first_diff=first_diff, steps_with_stack_diff=stack_diffs, return_gym=ret_g, return_tfevo=ret_t, end=end)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--games", default="ALE/Pong-v5,ALE/Breakout-v5,ALE/MsPacman-v5,ALE/Frostbite-v5,ALE/SpaceInvaders-v5")
    ap.add_argument("--cases", default="det,sticky,life,cap,noop,rgb,minimal,zeropad")
    # seeds whose ale-py emulator seed (Gymnasium's derivation) is a non-negative int32,
    # which AtariEnv passes on unchanged
    ap.add_argument("--seeds", default="1,4")
    a = ap.parse_args()
    for case in a.cases.split(","):
        for game in a.games.split(","):
            for s in map(int, a.seeds.split(",")):
                print(json.dumps(compare(game, case, a.steps, s)), flush=True)


if __name__ == "__main__":
    main()
