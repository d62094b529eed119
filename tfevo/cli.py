"""The ``tfevo`` command line.

    tfevo train [CONFIG]            train (no CONFIG: a ~1 minute CartPole OpenAI-ES run)
    tfevo eval RUN_DIR              score the best individual over N episodes
    tfevo play RUN_DIR --video F    render the best agent to a video
    tfevo plot RUN_DIR              fitness curves as PNG
    tfevo list [KIND]               algorithms, environments, problems, policies
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from pathlib import Path

__all__ = ["main"]


def _quiet_tf():
    """Imports TensorFlow with its C++ start-up chatter (CUDA probing, oneDNN notes) muted.

    Set TFEVO_VERBOSE=1 to see it.  An import error is shown as usual.
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if os.environ.get("TFEVO_VERBOSE"):
        return
    try:
        saved = os.dup(2)
    except OSError:  # pragma: no cover - no stderr fd
        return
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            try:
                import tensorflow as tf  # noqa: F401

                tf.config.list_physical_devices()  # the CUDA probe logs here
            except Exception:  # noqa: BLE001 - re-raised below with stderr back
                pass
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _set_override(data: dict, assignment: str) -> None:
    """Applies ``a.b.c=value`` (value parsed as JSON when possible)."""
    from tfevo.core import ConfigError

    if "=" not in assignment:
        raise ConfigError(f"--set expects key=value, got {assignment!r}")
    key, raw = assignment.split("=", 1)
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    node = data
    parts = key.strip().split(".")
    for p in parts[:-1]:
        node = node.setdefault(p, {})
        if not isinstance(node, dict):
            raise ConfigError(f"--set {key}: {p} is not a table")
    node[parts[-1]] = value


def _load(args):
    import copy

    from tfevo.training import config as C

    if args.config is None:
        data = copy.deepcopy(C.DEFAULT_CONFIG)
        source = "<built-in default>"
    else:
        path = Path(args.config)
        cfg = C.load_config(path)
        data = cfg.to_dict()
        source = str(path)
    for s in args.set or []:
        _set_override(data, s)
    if args.run_dir:
        data.setdefault("run", {})["dir"] = args.run_dir
    # budgets given on the command line set those fields; 0 or less is refused by the config's
    # validation, naming the field, exactly like the same value in a file
    for k in ("generations", "frames", "seconds"):
        if getattr(args, k, None) is not None:
            data.setdefault("run", {})[k] = getattr(args, k)
    if args.seed is not None:
        data.setdefault("run", {})["seed"] = args.seed
    if getattr(args, "devices", None) is not None:
        data.setdefault("distribute", {})["devices"] = args.devices
    from tfevo.distribute.cluster import apply_tf_config

    return C.parse_config(apply_tf_config(data), source)  # TF_CONFIG: one worker of a multi-machine job


def cmd_train(args) -> int:
    from tfevo.core import ConfigError
    from tfevo.training import config as C
    from tfevo.training import Trainer
    from tfevo.training.builders import build
    from tfevo.training.plot import plot_run, read_progress, text_curve

    import math

    if not (math.isfinite(args.progress_every) and args.progress_every >= 0):
        raise ConfigError(f"--progress-every must be a number of seconds >= 0, got {args.progress_every}")
    cfg = _load(args)
    run_dir = cfg.run_dir
    saved = run_dir / "config.json"
    if saved.exists():
        old = json.loads(saved.read_text())
        new = cfg.to_dict()
        budget_keys = ("generations", "frames", "seconds")
        # the budget and the device layout may change (results do not depend on the replica count),
        # but not whether the population is sharded (that picks the evaluator)
        sharded = lambda d: C.DistributeConfig(**d.get("distribute", {})).enabled  # noqa: E731
        strip = lambda d: {**d, "run": {k: v for k, v in d["run"].items() if k not in budget_keys},  # noqa: E731
                           "distribute": sharded(d)}
        if strip(old) != strip(new):
            raise ConfigError(
                f"{run_dir} holds a run with a different config; pass --run-dir to start a new run "
                "(only the budget and distribute.devices/strategy may change when resuming)"
            )
    print(f"tfevo: {cfg.name}: {cfg.algorithm.name} on {cfg.env.id}, popsize {cfg.algorithm.popsize}, "
          f"run directory {run_dir}")
    setup = build(cfg)
    if setup.strategy is None or setup.strategy.extended.should_checkpoint:  # multi-worker: only the chief writes
        run_dir.mkdir(parents=True, exist_ok=True)
        tmp = saved.with_suffix(".tmp")
        tmp.write_text(json.dumps(cfg.to_dict(), indent=2))
        os.replace(tmp, saved)
    print(f"tfevo: {setup.model.num_params} parameters per member")
    trainer = Trainer(
        setup.algorithm, setup.evaluator, run_dir=run_dir,
        generations=cfg.run.generations, frames=cfg.run.frames, seconds=cfg.run.seconds,
        checkpoint_every=cfg.run.checkpoint_every, keep_checkpoints=cfg.run.keep_checkpoints,
        progress=not args.no_progress, progress_every=args.progress_every, extra_trackables=setup.trackables,
        strategy=setup.strategy,
    )
    if setup.strategy is not None:
        print(f"tfevo: population sharded over {setup.strategy.num_replicas_in_sync} replica(s) "
              f"({type(setup.strategy).__name__})")
    trainer.run()
    if trainer.run_dir is None:  # a non-chief worker of a multi-worker run writes nothing
        print(f"tfevo: worker done after {int(trainer.generation.numpy())} generations; the chief writes {run_dir}")
        return 0
    rows = read_progress(run_dir)
    print("\nlearning curve:")
    print(text_curve(rows))
    png = plot_run(run_dir)
    last = rows[-1] if rows else {}
    print(f"\nbest fitness {float(trainer.best_fitness.numpy()):.4g} after {last.get('generation', 0)} generations, "
          f"{last.get('frames', 0)} frames, {last.get('wall_time', 0.0):.1f} s")
    print(f"run saved in {run_dir} (checkpoints, progress.jsonl, tensorboard/); curve: {png}")
    print(f"next: tfevo eval {run_dir}   |   tensorboard --logdir {run_dir / 'tensorboard'}")
    return 0


def _restore_setup(run_dir: Path):
    from tfevo.core import ConfigError
    from tfevo.training import config as C
    from tfevo.training.builders import best_params

    saved = run_dir / "config.json"
    if not saved.exists():
        raise ConfigError(f"{run_dir} is not a tfevo run directory (no config.json)")
    cfg = C.parse_config(json.loads(saved.read_text()), str(saved))
    return cfg, best_params(run_dir, cfg)


def episode_returns(cfg, params, episodes: int, seed: int, run_dir=None):
    """Returns ``[episodes]`` of one member (flat ``params [D]``), for every kind of environment.

    In-graph envs run the episodes as one batch; host envs (MuJoCo, Atari,
    Gymnasium) run ``episodes`` copies of the member for one episode each, so
    every episode's return is seen, not only their mean.
    """
    import numpy as np
    import tensorflow as tf

    from tfevo.training.builders import make_eval_evaluator

    p = tf.convert_to_tensor(params[None], tf.float32)
    ev, _ = make_eval_evaluator(cfg, episodes, seed, run_dir)
    try:
        if hasattr(ev, "evaluate_episodes"):
            return np.asarray(ev.evaluate_episodes(p).returns, np.float64).reshape(-1)
        return np.asarray(ev.evaluate(tf.tile(p, [episodes, 1])), np.float64).reshape(-1)
    finally:
        if hasattr(ev, "close"):
            ev.close()


def cmd_eval(args) -> int:
    import numpy as np

    from tfevo.core import ConfigError

    if args.episodes < 1:
        raise ConfigError(f"--episodes must be >= 1, got {args.episodes}")
    run_dir = Path(args.run_dir)
    cfg, params = _restore_setup(run_dir)
    rets = episode_returns(cfg, params, args.episodes, args.seed, run_dir)
    print(f"{cfg.env.id}: best individual of {run_dir} over {args.episodes} episodes:")
    print(f"  mean {np.mean(rets):.4g}  std {np.std(rets):.4g}  min {np.min(rets):.4g}  max {np.max(rets):.4g}")
    print("  returns: " + " ".join(f"{r:.4g}" for r in rets))
    return 0


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

    kwargs = dict(cfg.env.kwargs)
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
    from tfevo.training.builders import _env_spec, make_obs_norm, make_policy

    if args.max_steps is not None and args.max_steps < 1:
        raise ConfigError(f"--max-steps must be >= 1, got {args.max_steps}")
    if args.fps < 1:
        raise ConfigError(f"--fps must be >= 1, got {args.fps}")
    out = Path(args.video)
    if out.suffix.lower() not in (".gif", ".mp4"):
        raise ConfigError(f"--video must end in .mp4 or .gif, got {out.name!r}")
    run_dir = Path(args.run_dir)
    cfg, params = _restore_setup(run_dir)
    obs_shape, action_spec, _ = _env_spec(cfg.env.id, cfg.env.kwargs)
    policy, _ = make_policy(cfg, obs_shape, action_spec)
    norm = make_obs_norm(cfg, obs_shape, run_dir)
    p = tf.convert_to_tensor(params[None], tf.float32)
    caps = [c for c in (args.max_steps, cfg.env.max_steps) if c]
    max_steps = min(caps) if caps else None

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

            env = gym.make(env_id)
            is_mujoco = hasattr(env.unwrapped, "set_state") and hasattr(env.unwrapped, "data")
            if not is_mujoco:
                env.close()
                env = gym.make(env_id, render_mode="rgb_array")
            obs, _ = env.reset(seed=args.seed)
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


def cmd_plot(args) -> int:
    from tfevo.training.plot import plot_run

    out = plot_run(args.run_dir, args.out, x=args.x)
    print(f"wrote {out}")
    return 0


def cmd_list(args) -> int:
    from tfevo import registry

    kinds = {"algorithms": "strategy", "strategies": "strategy", "envs": "env", "environments": "env",
             "problems": "problem", "policies": "policy", "evaluators": "evaluator"}
    chosen = [kinds[args.kind]] if args.kind else ["strategy", "env", "problem", "policy", "evaluator"]
    titles = {"strategy": "algorithms", "env": "environments", "problem": "problems",
              "policy": "policies", "evaluator": "evaluators"}
    import shutil
    import textwrap

    width = max(shutil.get_terminal_size((100, 24)).columns, 60)

    def row(name, doc):
        # long descriptions wrap under themselves, so a name always starts its line
        print(textwrap.fill(doc, width=width, initial_indent=f"  {name:<28} ", subsequent_indent=" " * 31,
                            break_on_hyphens=False, break_long_words=False))

    for kind in chosen:
        table = registry.names(kind)
        print(f"{titles[kind]}:")
        for name, doc in table.items():
            row(name, doc)
        if kind == "env":
            row("ALE/<Game>-v5", "Atari 2600 games through ale-py's native vector env (deep-neuroevolution "
                                 "preprocessing by default).")
            row("<any Gymnasium id>", "Gymnasium's own vector env (fallback).")
        print()
    return 0


def cmd_build_ops(args) -> int:
    from tfevo import ops

    def report(name, res, seconds):
        state = f"FAILED: {str(res).strip().splitlines()[0] if str(res).strip() else type(res).__name__}" \
            if isinstance(res, Exception) else str(res)
        print(f"  {name:<16} {seconds:6.1f} s  {state}", flush=True)

    if ops._compiler() is None:  # nothing to build: not an error, tfevo runs on the references
        print("tfevo: no C++ compiler found (install g++ or set CXX to build the C++ kernels); nothing built, "
              "tfevo uses its pure-TensorFlow references", file=sys.stderr)
        return 0
    print(f"building {len(ops.names())} custom ops into {ops.cache_dir()}", flush=True)
    results = ops.build_all(jobs=args.jobs, force=args.force, report=report)
    failed = [n for n, r in results.items() if isinstance(r, Exception)]
    if failed:
        print(f"tfevo: {len(failed)} op(s) failed to build: {', '.join(failed)}; they fall back to their "
              "pure-TensorFlow references", file=sys.stderr)
        return 1
    return 0


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tfevo", description="Population-batched neuroevolution in TensorFlow.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("train", help="train from a TOML/YAML config (default: quick CartPole run)",
                       description="Train from a config file; with no CONFIG, a ~1 minute CartPole-v1 "
                                   "OpenAI-ES run. Re-running with the same run directory resumes.")
    p.add_argument("config", nargs="?", help="config file (.toml, .yaml, .json)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a field, e.g. algorithm.popsize=128")
    p.add_argument("--run-dir", help="run directory (default: run.dir or runs/<name>)")
    p.add_argument("--generations", type=int, help="generation budget (sets run.generations)")
    p.add_argument("--frames", type=int, help="environment-frame budget (sets run.frames)")
    p.add_argument("--seconds", type=float, help="wall-time budget in seconds (sets run.seconds)")
    p.add_argument("--seed", type=int, help="seed of the run")
    p.add_argument("--devices", type=int, metavar="N",
                   help="shard the population over N local devices (GPUs, or logical CPUs without GPUs); "
                        "same as --set distribute.devices=N")
    p.add_argument("--no-progress", action="store_true", help="no progress bar or progress lines")
    p.add_argument("--progress-every", type=float, default=10.0, metavar="SECONDS",
                   help="when stdout is not a terminal: at most one progress line every SECONDS (default 10; "
                        "0: one per generation)")
    p.set_defaults(fn=cmd_train)

    p = sub.add_parser("eval", help="score the best individual of a run over N episodes")
    p.add_argument("run_dir")
    p.add_argument("--episodes", type=int, default=10)
    p.add_argument("--seed", type=int, default=12345)
    p.set_defaults(fn=cmd_eval)

    p = sub.add_parser("play", help="render the best agent of a run to a video")
    p.add_argument("run_dir")
    p.add_argument("--video", required=True, help="output file (.mp4 or .gif)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--fps", type=int, default=30)
    p.add_argument("--max-steps", type=int, default=None)
    p.set_defaults(fn=cmd_play)

    p = sub.add_parser("plot", help="fitness curves of a run as PNG")
    p.add_argument("run_dir")
    p.add_argument("--out", help="output PNG (default RUN_DIR/learning_curve.png)")
    p.add_argument("--x", default="generation", choices=["generation", "frames", "wall_time"])
    p.set_defaults(fn=cmd_plot)

    p = sub.add_parser("list", help="list algorithms, environments, problems, policies")
    p.add_argument("kind", nargs="?", choices=["algorithms", "strategies", "envs", "environments", "problems",
                                               "policies", "evaluators"])
    p.set_defaults(fn=cmd_list)

    p = sub.add_parser("build-ops", help="compile the C++ custom ops now (else: on first use)",
                       description="Compile every custom op in custom_ops/ against the installed TensorFlow "
                                   "(several at once) into the cache, so no run pays for it later.")
    p.add_argument("--jobs", type=int, default=None, help="compilers at once (default: one per core)")
    p.add_argument("--force", action="store_true", help="rebuild even if cached")
    p.set_defaults(fn=cmd_build_ops)
    return parser


def main(argv=None) -> int:
    _quiet_tf()
    args = make_parser().parse_args(argv)
    from tfevo.core import TfevoError

    try:
        return args.fn(args)
    except TfevoError as e:
        print(f"tfevo: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("tfevo: interrupted; re-run the same command to resume from the last checkpoint", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
