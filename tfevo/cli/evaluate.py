"""`tfevo eval`: the best member of a run scored over fresh episodes."""

from __future__ import annotations

from pathlib import Path


def _restore_setup(run_dir: Path):
    from tfevo.training.builders import _saved_config, best_params

    cfg = _saved_config(run_dir)
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
    if cfg.problem is not None:  # a QD task is deterministic: one evaluation says it all
        from tfevo.training.builders import TaskEvaluator

        fitness, desc = TaskEvaluator(cfg.problem.name, cfg.problem.num_dims).evaluate(params[None])
        print(f"{cfg.problem.name} (D={cfg.problem.num_dims}): best solution of {run_dir}:")
        print(f"  fitness {float(fitness[0]):.6g}  descriptors " + " ".join(f"{v:.4g}" for v in desc[0].numpy()))
        return 0
    rets = episode_returns(cfg, params, args.episodes, args.seed, run_dir)
    print(f"{cfg.env.id}: best individual of {run_dir} over {args.episodes} episodes:")
    print(f"  mean {np.mean(rets):.4g}  std {np.std(rets):.4g}  min {np.min(rets):.4g}  max {np.max(rets):.4g}")
    print("  returns: " + " ".join(f"{r:.4g}" for r in rets))
    return 0


