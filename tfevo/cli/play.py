"""`tfevo play`: one episode of the best member of a run, rendered to a video, headless."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

from tfevo.cli._paths import check_output_file
from tfevo.cli.evaluate import _restore_setup

_MUJOCO_RENDER = """
import sys, numpy as np, gymnasium as gym, imageio.v2 as imageio
env_id, states, out, fps = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
d = np.load(states)
env = gym.make(env_id, render_mode="rgb_array")
env.reset(seed=0)
frames = []
for qpos, qvel in zip(d["qpos"], d["qvel"]):
    env.unwrapped.set_state(qpos, qvel)
    frames.append(env.render())
env.close()
if out.endswith(".gif"):
    imageio.mimsave(out, frames, fps=fps)
else:
    imageio.mimwrite(out, frames, fps=fps, macro_block_size=1)
"""


def _write_video(out: Path, frames, fps: int) -> None:
    import imageio.v2 as imageio

    if out.suffix == ".gif":
        imageio.mimsave(out, frames, fps=fps)
    else:
        imageio.mimwrite(out, frames, fps=fps, macro_block_size=1)


@contextlib.contextmanager
def _headless_rendering():
    """Offscreen rendering for this process only: SDL (pygame, used by Gymnasium's classic
    control renderers) gets its dummy video and audio drivers unless the user chose others, so
    it neither needs a display nor complains about XDG_RUNTIME_DIR; the variables are put back
    afterwards."""
    wanted = {"SDL_VIDEODRIVER": "dummy", "SDL_AUDIODRIVER": "dummy"}
    saved = {k: os.environ.get(k) for k in wanted}
    for k, v in wanted.items():
        os.environ.setdefault(k, v)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _play_atari(cfg, act, seed: int, max_steps):
    """One Atari episode through the run's own preprocessing (tfevo's AtariEnv with the run's
    env.kwargs: frame skip, max-pool, 84x84 grayscale, frame stack, no-op starts); the video
    comes from a second emulator given the same seed and actions, whose frames are kept in
    colour at full size.  Returns (return, steps, frames)."""
    import numpy as np

    from tfevo import envs

    from tfevo.rollout._limits import host_limit_kwargs

    kwargs = host_limit_kwargs(cfg.env.id, max_steps, cfg.env.kwargs)  # frames enough for max_steps
    env = envs.make(cfg.env.id, 1, **kwargs)
    view = envs.make(cfg.env.id, 1, **{**kwargs, "grayscale": False, "img_height": 210, "img_width": 160,
                                       "stack_num": 1, "channels_last": True})
    one = np.zeros(1, np.int64)
    try:
        obs = env.reset(one, seeds=np.array([seed]))
        frames = [view.reset(one, seeds=np.array([seed]))[0]]
        total, steps = 0.0, 0
        while True:
            a = np.asarray(act(obs), np.int32).reshape(1)
            _, obs, r, term, trunc = env.step(a, one)
            _, frame, r_view, term_view, _ = view.step(a, one)
            if r_view[0] != r[0] or term_view[0] != term[0]:  # the two emulators must play one game
                from tfevo.core import TfevoError

                raise TfevoError(f"{cfg.env.id}: the video emulator diverged from the played one at step {steps}")
            frames.append(frame[0])
            total += float(r[0])
            steps += 1
            if term[0] or trunc[0] or (max_steps and steps >= max_steps):
                break
    finally:
        env.close()
        view.close()
    return total, steps, frames


def cmd_play(args) -> int:
    """Runs the best member for one episode and writes a video.

    The policy sees what it saw in training: in-graph classic control and
    MuJoCo through Gymnasium's identical environments, Atari through tfevo's
    own AtariEnv with the run's preprocessing.  MuJoCo frames are rendered in
    a child process without TensorFlow (MuJoCo's EGL renderer and TensorFlow
    crash when loaded in one process): this process plays the episode and
    records the simulator states, the child replays and renders them.
    """
    import subprocess
    import tempfile

    import numpy as np
    import tensorflow as tf

    from tfevo.core import ConfigError, TfevoError
    from tfevo.training.builders import env_spec, make_obs_norm
    from tfevo.training.families import family_of

    if args.max_steps is not None and args.max_steps < 1:
        raise ConfigError(f"--max-steps must be >= 1, got {args.max_steps}")
    if args.fps < 1:
        raise ConfigError(f"--fps must be >= 1, got {args.fps}")
    out = check_output_file("--video", Path(args.video), (".mp4", ".gif"))  # before the episode is played
    run_dir = Path(args.run_dir)
    cfg, params = _restore_setup(run_dir)
    if cfg.problem is not None:
        raise ConfigError(f"{run_dir} evolved solutions of the QD task {cfg.problem.name}, not an agent: there is "
                          "nothing to play; `tfevo plot` draws its archive, `tfevo eval` scores its best solution")
    obs_shape, _, action_spec, _ = env_spec(cfg.env.id, cfg.env.kwargs)
    policy = family_of(cfg).policy(cfg, obs_shape, action_spec).policy
    norm = make_obs_norm(cfg, obs_shape, run_dir)
    p = tf.convert_to_tensor(params[None], tf.float32)
    # the episode's time limit: --max-steps if given, else the run's env.max_steps (else the env's own)
    max_steps = args.max_steps if args.max_steps is not None else cfg.env.max_steps

    def act(o):
        """Actions of the best member for observations ``[1, *obs_shape]``."""
        o = np.asarray(o)
        if o.dtype == np.float64:
            o = o.astype(np.float32)
        x = tf.convert_to_tensor(o[None])
        if norm is not None:
            x = norm.normalize(tf.cast(x, tf.float32))
        return policy.forward(p, x)[0].numpy()

    env_id = cfg.env.id
    is_mujoco = False
    with _headless_rendering():
        if env_id.startswith("ALE/"):
            total, steps, frames = _play_atari(cfg, act, args.seed, max_steps)
        else:
            import gymnasium as gym

            from tfevo.envs import gymnasium_twin

            # the run's task options, and max_steps replacing the registered TimeLimit as in training
            make_kwargs, reset_options = gymnasium_twin(env_id, cfg.env.kwargs)
            if max_steps:
                make_kwargs["max_episode_steps"] = max_steps
            env = gym.make(env_id, **make_kwargs)
            is_mujoco = hasattr(env.unwrapped, "set_state") and hasattr(env.unwrapped, "data")
            if not is_mujoco:
                env.close()
                env = gym.make(env_id, render_mode="rgb_array", **make_kwargs)
            obs, _ = env.reset(seed=args.seed, options=reset_options or None)
            frames, qpos, qvel = [], [], []

            def record():
                if is_mujoco:
                    qpos.append(env.unwrapped.data.qpos.copy())
                    qvel.append(env.unwrapped.data.qvel.copy())
                else:
                    frames.append(env.render())

            record()
            total, steps = 0.0, 0
            try:
                while True:
                    a = act(np.asarray(obs)[None])[0]
                    obs, r, term, trunc, _ = env.step(a)
                    total += float(r)
                    steps += 1
                    record()
                    if term or trunc or (max_steps and steps >= max_steps):
                        break
            finally:
                env.close()
        if is_mujoco:
            with tempfile.TemporaryDirectory() as tmp:
                states = Path(tmp) / "states.npz"
                np.savez(states, qpos=np.array(qpos), qvel=np.array(qvel))
                env_vars = dict(os.environ)
                if not env_vars.get("DISPLAY"):
                    env_vars.setdefault("MUJOCO_GL", "egl")
                proc = subprocess.run([sys.executable, "-c", _MUJOCO_RENDER, env_id, str(states), str(out),
                                       str(args.fps)], env=env_vars, capture_output=True, text=True)
                if proc.returncode != 0:
                    raise TfevoError(f"rendering {env_id} failed (set MUJOCO_GL=egl or osmesa): "
                                     f"{proc.stderr.strip()[-500:]}")
        else:
            _write_video(out, frames, args.fps)
    print(f"{env_id}: return {total:.4g} over {steps} steps; video written to {out}")
    return 0


