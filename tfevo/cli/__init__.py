"""The ``tfevo`` command line (one module per command: train, evaluate, play, export, info).

    tfevo train [CONFIG]            train (no CONFIG: a ~1 minute CartPole OpenAI-ES run)
    tfevo eval RUN_DIR              score the best individual over N episodes
    tfevo play RUN_DIR --video F    render the best agent to a video
    tfevo export RUN_DIR            the best agent as a .keras file (loads without tfevo)
    tfevo plot RUN_DIR              fitness curves and the family's picture as PNG
    tfevo list [KIND]               algorithms, environments, problems, policies
"""

from __future__ import annotations

import argparse
import os
import sys

from tfevo.cli.evaluate import cmd_eval
from tfevo.cli.export import cmd_export
from tfevo.cli.info import cmd_build_ops, cmd_list, cmd_plot
from tfevo.cli.play import cmd_play
from tfevo.cli.train import cmd_train

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
    p.add_argument("--max-steps", type=int, default=None,
                   help="episode time limit in agent steps (default: the run's env.max_steps, else the env's own)")
    p.set_defaults(fn=cmd_play)

    p = sub.add_parser("export", help="write the best agent of a run as a .keras model (loads without tfevo)",
                       description="Write the best member of a run as a Keras model mapping observations "
                                   "[B, *obs_shape] to the policy's raw outputs (the run's observation "
                                   "preprocessing built in), plus FILE.keras.json with the action mapping.")
    p.add_argument("run_dir")
    p.add_argument("--out", help="output .keras file (default RUN_DIR/best.keras)")
    p.set_defaults(fn=cmd_export)

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

