"""Cost of the in-graph classic envs' action-range assertion and of Acrobot's pow squares.

Alternates calls of two InGraphEvaluators that differ only in the feature, and prints the
median time ratio of the pairs (robust to a machine shared with other jobs).

    PYTHONPATH=$PWD python benchmarks/env_input_checks.py
"""

import time

import numpy as np

from tfevo import envs, nn, rollout
from tfevo.envs import acrobot, classic


def evaluator(env_id, jit):
    env = envs.make(env_id, 64 * 2)
    model = nn.PopulationModel(nn.mlp(env.observation_shape, env.action_spec.num_actions, hidden=(16,)))
    pol = nn.Policy(model, env.action_spec)
    return rollout.InGraphEvaluator(env, pol, episodes=2, max_steps=200, seed=0, jit_compile=jit), model


def ratio(ev_a, ev_b, params, pairs=9):
    ev_a.evaluate(params), ev_b.evaluate(params)  # trace and compile both first
    out = []
    for _ in range(pairs):
        t = time.perf_counter()
        ev_a.evaluate(params)
        a = time.perf_counter() - t
        t = time.perf_counter()
        ev_b.evaluate(params)
        out.append(a / (time.perf_counter() - t))
    return float(np.median(out))


def main():
    check, xla = classic.ClassicControlEnv._check_range, acrobot.in_xla_context
    for env_id in ("CartPole-v1", "Acrobot-v1"):
        for jit in (False, True):
            with_check, model = evaluator(env_id, jit)
            p = model.init_params(64, 0)
            with_check.evaluate(p)  # traced with the check
            classic.ClassicControlEnv._check_range = lambda self, a: a
            without, _ = evaluator(env_id, jit)
            without.evaluate(p)  # traced without it
            classic.ClassicControlEnv._check_range = check
            r = ratio(with_check, without, p)
            print(f"{env_id} {'xla' if jit else 'graph'}: with/without action check {r:.3f}")
    pow_ev, model = evaluator("Acrobot-v1", True)
    p = model.init_params(64, 0)
    pow_ev.evaluate(p)
    acrobot.in_xla_context = lambda: False  # traces x*x squares inside XLA
    square_ev, _ = evaluator("Acrobot-v1", True)
    square_ev.evaluate(p)
    acrobot.in_xla_context = xla
    print(f"Acrobot-v1 xla: pow squares / x*x squares {ratio(pow_ev, square_ev, p):.3f}")


if __name__ == "__main__":
    main()
