"""Episode returns of the pipelined evaluator on MuJoCo against a Gymnasium loop.

Linear policies with zero weights and a bias ``b`` (clipped, so the action is
exactly ``b`` every step) are evaluated by :class:`tfevo.rollout.PipelinedEvaluator`
on tfevo's batched ``-v5`` envs (``reset_rng="gymnasium"``, float64
observations, explicit episode seeds); the same constant actions are stepped
through ``gymnasium.make(id)`` reset with the same seeds.  Compares the return,
the episode length (termination on the healthy ranges, truncation at
Gymnasium's 1000 steps) per member.

    PYTHONPATH=$PWD python benchmarks/audit_mujoco_returns.py
"""

from __future__ import annotations

import json
import sys
import types

import gymnasium as gym
import numpy as np

try:
    import imageio  # noqa: F401
except ImportError:  # Gymnasium's MuJoCo envs import it for rendering to files only
    sys.modules["imageio"] = types.ModuleType("imageio")

from tfevo import envs, nn
from tfevo.rollout import PipelinedEvaluator


def main():
    for env_id in ("Hopper-v5", "Walker2d-v5", "HalfCheetah-v5", "Swimmer-v5", "Ant-v5"):
        spec = envs.make(env_id, 1)
        obs_dim, nu = spec.observation_shape[0], spec.action_spec.shape[0]
        pm = nn.PopulationModel(nn.mlp((obs_dim,), nu, hidden=()))
        P = 6
        rng = np.random.default_rng(0)
        bias = rng.uniform(-0.6, 0.6, (P, nu)).astype(np.float32)
        bias[0] = 0
        params = np.zeros((P, pm.num_params), np.float32)
        params[:, -nu:] = bias  # Dense kernel then bias
        ev = PipelinedEvaluator(env_id, nn.Policy(pm, spec.action_spec, continuous="clip"), num_envs=4,
                                num_subsets=2, env_kwargs=dict(reset_rng="gymnasium", obs_dtype=np.float64))
        seeds = np.arange(P, dtype=np.int64)[:, None] + 100
        ret = ev.evaluate(params, episode_seeds=seeds).numpy()
        steps = ev.last_stats["member_steps"]
        ref = gym.make(env_id)
        for i in range(P):
            ref.reset(seed=int(seeds[i, 0]))
            total, n = 0.0, 0
            while True:
                _, r, te, tr, _ = ref.step(bias[i])
                total += r
                n += 1
                if te or tr:
                    break
            print(json.dumps(dict(env=env_id, member=i, steps_tfevo=int(steps[i]), steps_gym=n,
                                  return_tfevo=float(ret[i]), return_gym=total,
                                  rel_diff=abs(float(ret[i]) - total) / max(1.0, abs(total)))), flush=True)


if __name__ == "__main__":
    main()
