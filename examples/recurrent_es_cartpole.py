"""OpenAI-ES on CartPole with the velocities hidden: an LSTM policy against a feed-forward one.

The policy sees only (cart position, pole angle); a recurrent policy can infer the velocities from
the history, a feed-forward one cannot.  Both are ordinary Keras templates; the in-graph evaluator
carries the LSTM's state across the steps of each episode.

    nice -n 5 python examples/recurrent_es_cartpole.py [--generations 60] [--out curve.json]
"""
import argparse
import json
import time

import keras
import tensorflow as tf

from tfevo import envs, nn
from tfevo.envs.base import TFEnv
from tfevo.rollout import InGraphEvaluator
from tfevo.strategies import OpenES
from _toy import budget  # TFEVO_EXAMPLE_TOY=1: a few seconds, for the test suite

KEEP = [0, 2]  # cart position, pole angle


class HiddenVelocityCartPole(TFEnv):
    """CartPole-v1 whose observations drop the cart and pole velocities."""

    env_id = "CartPole-v1-novel"
    observation_shape = (2,)

    def __init__(self, num_envs=1):
        super().__init__(num_envs)
        self.env = envs.make("CartPole-v1", num_envs)
        self.action_spec = self.env.action_spec
        self.max_episode_steps = self.env.max_episode_steps

    def reset(self, seed, num_envs=None):
        state, obs = self.env.reset(seed, num_envs=num_envs)
        return state, tf.gather(obs, KEEP, axis=1)

    def step(self, state, action):
        res = self.env.step(state, action)
        return res._replace(obs=tf.gather(res.obs, KEEP, axis=1))


def templates(units):
    lstm = keras.Sequential([keras.Input((None, 2)), keras.layers.LSTM(units), keras.layers.Dense(2)], name="lstm")
    ff = keras.Sequential([keras.Input((2,)), keras.layers.Dense(16, activation="tanh"),
                           keras.layers.Dense(16, activation="tanh"), keras.layers.Dense(2)], name="feedforward")
    return {"lstm": lstm, "feedforward": ff}


def run(name, template, generations, popsize, seed, sigma, lr, obs_scale):
    env = HiddenVelocityCartPole()
    model = nn.PopulationModel(template)
    policy = nn.Policy(model, env.action_spec, obs_scale=obs_scale)  # angles are ~0.05 rad: scale them up
    evaluator = InGraphEvaluator(env, policy, episodes=3, seed=seed)
    centre_eval = InGraphEvaluator(env, policy, episodes=20, seed=seed + 1000)
    es = OpenES(model.num_params, popsize=popsize, sigma=sigma, learning_rate=lr,
                init_params=model.init_params(1, seed)[0], seed=seed)
    curve = []
    for g in range(generations):
        x = es.ask()
        fit = evaluator.evaluate(x)
        es.tell(x, fit)
        if g % 5 == 4 or g == generations - 1:
            centre = float(tf.reduce_mean(centre_eval.evaluate(es.mean[None])))
            curve.append(dict(generation=g + 1, pop_mean=float(tf.reduce_mean(fit)), pop_max=float(tf.reduce_max(fit)),
                              centre=centre))
            print(f"{name:12s} gen {g + 1:3d}  population mean {curve[-1]['pop_mean']:7.1f}  "
                  f"max {curve[-1]['pop_max']:6.1f}  centre (20 episodes) {centre:6.1f}", flush=True)
    return dict(num_params=model.num_params, curve=curve)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--generations", type=int, default=budget(60, 1))
    ap.add_argument("--popsize", type=int, default=budget(64, 8))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sigma", type=float, default=0.1)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--obs-scale", type=float, default=10.0)
    ap.add_argument("--units", type=int, default=16)
    ap.add_argument("--only", choices=("lstm", "feedforward"), default=None)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    results = {}
    for name, template in templates(args.units).items():
        if args.only and name != args.only:
            continue
        t0 = time.perf_counter()
        results[name] = run(name, template, args.generations, args.popsize, args.seed, args.sigma, args.lr,
                            args.obs_scale)
        results[name]["seconds"] = time.perf_counter() - t0
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
