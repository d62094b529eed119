"""Episode lengths of every tfevo evaluator path against a plain Gymnasium loop.

For each case, a policy whose actions depend only on the observation is run
(1) through a tfevo evaluator with ``max_steps=N`` and (2) through
``gymnasium.make(id, max_episode_steps=N)`` from the same start states with the
same actions.  Compared per episode: length, the last step's ``truncated`` flag
(host paths: recorded from the env's ``recv``) and the return.  ``N`` is taken
below and above the registered limit (CartPole-v1 500, Pendulum-v1 200,
MuJoCo 1000, Atari: the preset's 20,000 frames = 5,000 steps).  Prints one
JSON line per case and a final summary line.

    PYTHONPATH=$PWD nice -n 5 python benchmarks/episode_limits.py
"""

from __future__ import annotations

import json
import sys
import time
import types

import gymnasium as gym
import numpy as np
import tensorflow as tf

try:
    import imageio  # noqa: F401
except ImportError:  # Gymnasium's MuJoCo envs import it for rendering to files only
    sys.modules["imageio"] = types.ModuleType("imageio")

from tfevo.envs import make
from tfevo.rollout import GenomeEvaluator, InGraphEvaluator, PipelinedEvaluator

SEEDS_PER_CASE = 3  # members per case (each its own episode seed), fixed before any run


class Noop:
    """Action 0 (NOOP) for every slot."""

    num_params = 1

    def forward(self, params, obs, indices=None):
        return tf.zeros([tf.shape(obs)[0], 1], tf.int32)


class HopperPD:
    """Hopper: joint torques ``-kp * angle - kd * angular velocity``, params ``[kp, kd]`` (stands up for
    long with kp 1-5, falls after ~540 steps with kp 0.5)."""

    num_params = 2

    def forward(self, params, obs, indices=None):
        w = params if indices is None else tf.gather(params, indices)
        obs = tf.cast(obs, tf.float32)
        return -w[:, None, 0:1] * obs[..., 2:5] - w[:, None, 1:2] * obs[..., 8:11]


class Linear:
    """``out = obs[:k] . w``; discrete: ``out > 0``; continuous: ``out`` on each of ``act`` dims."""

    def __init__(self, k, discrete, act=1):
        self.k, self.discrete, self.act, self.num_params = k, discrete, act, k

    def forward(self, params, obs, indices=None):
        w = params if indices is None else tf.gather(params, indices)
        obs = tf.cast(obs, tf.float32)
        out = tf.reduce_sum(obs[..., : self.k] * w[:, None, :], axis=-1)
        return tf.cast(out > 0, tf.int32) if self.discrete else tf.tile(out[..., None], [1, 1, self.act])


def gym_episode(env, policy, params, m, seed=None, state=None):
    """(length, truncated, return) of one episode of ``env`` (a gym.make env), actions from ``policy``."""
    obs, _ = env.reset(seed=seed)
    if state is not None:  # an in-graph start state
        env.unwrapped.state = state.copy()
        obs = np.array(env.unwrapped.state, np.float32) if "CartPole" in env.spec.id else env.unwrapped._get_obs()
    box = getattr(env.action_space, "low", None)
    n, total = 0, 0.0
    while True:
        a = policy.forward(params, tf.constant(np.asarray(obs, np.float32)[None, None]), tf.constant([m]))
        a = a.numpy().reshape(-1)
        a = int(a[0]) if box is None else np.clip(a, env.action_space.low, env.action_space.high)
        obs, r, te, tr, _ = env.step(a)
        total += float(np.float32(r))
        n += 1
        if te or tr:
            return n, bool(tr and not te), total


def recording(ev):
    """Wraps the evaluator's host envs' recv to log (term, trunc) per step, in order (1 slot, 1 subset)."""
    log = []
    for e in ev.envs:
        inner = e.recv

        def recv(inner=inner):
            out = inner()
            log.append((bool(out[3][0]), bool(out[4][0])))
            return out
        e.recv = recv
    return log


def pipelined_case(name, env_id, policy, params, limit, env_kwargs=None, descriptors=False, genome=False,
                   gym_kwargs=None):
    P = params.shape[0]
    ev = PipelinedEvaluator(env_id, policy, num_envs=1, num_subsets=1, episodes=1, max_steps=limit, seed=5,
                            env_kwargs=env_kwargs or {}, descriptors=descriptors)
    seeds = ev.episode_seeds(P)
    log = recording(ev)
    if genome:  # the GenomeEvaluator wrapper (decode = identity), one member per chunk
        out = GenomeEvaluator(ev, lambda g: g, chunk_size=1).evaluate(params)
    else:
        out = ev.evaluate(params)
    fit = (out[0] if descriptors else out).numpy()
    lengths, flags = [], []
    # episodes ran one after the other through the single slot: split the step log at episode ends
    t = 0
    for m in range(P):
        n = 0
        while True:
            te, tr = log[t]
            t += 1
            n += 1
            if te or tr or (limit is not None and n >= limit):
                lengths.append(n)
                flags.append(bool(tr and not te))  # the env's own flag: its TimeLimit is max_steps
                break
    ev.close()
    env = gym.make(env_id, max_episode_steps=limit, **(gym_kwargs or {}))
    ref = [gym_episode(env, policy, params, m, seed=int(seeds[m, 0])) for m in range(P)]
    env.close()
    return report(name, env_id, limit, lengths, flags, list(fit), ref)


def ingraph_case(name, env_id, policy, params, limit, as_instance):
    P = params.shape[0]
    env = make(env_id)
    ev = InGraphEvaluator(env if as_instance else env_id, policy, episodes=1, max_steps=limit, seed=9,
                          jit_compile=False)
    physics = make(env_id).reset(tf.constant([9, 1]), num_envs=P)[0].physics.numpy()
    res = ev.evaluate_episodes(params)
    lengths = [int(x) for x in res.lengths.numpy()[:, 0]]
    # the truncated flag of the evaluator's env at each episode's last step, replayed on that env
    flags = []
    for m in range(P):
        state, obs = ev.env.state_from_numpy(physics[m:m + 1])
        for _ in range(lengths[m]):
            a = policy.forward(params[m:m + 1], tf.reshape(tf.cast(obs, tf.float32), [1, 1, -1]))
            a = tf.reshape(a, [1] if ev.env.action_spec.discrete else [1, 1])
            step = ev.env.step(state, a)
            state, obs = step.state, step.obs
        flags.append(bool(step.truncated.numpy()[0]) and not bool(step.terminated.numpy()[0]))
    genv = gym.make(env_id, max_episode_steps=limit)
    ref = [gym_episode(genv, policy, params, m, state=physics[m]) for m in range(P)]
    return report(name, env_id, limit, lengths, flags, list(res.returns.numpy()[:, 0]), ref)


def neat_case(limit):
    """NEAT on CartPole with max_steps above the registered 500: ControlProblem evolves a population
    until a member balances for max_steps; that population is then rolled out by the fused
    whole-rollout kernel, the per-step kernel loop and the XLA reference (same episodes)."""
    from tfevo.neat import NEAT, ControlProblem, NEATConfig
    from tfevo.neat._op_rollout import KernelRolloutEvaluator
    from tfevo.neat.policy import NEATPolicy

    P = 64
    cfg = NEATConfig(num_inputs=4, num_outputs=2, pop_size=P, max_nodes=16, max_conns=32, node_add_prob=0.6,
                     conn_add_prob=0.6)
    prob = ControlProblem("CartPole-v1", cfg, max_steps=limit)
    env = make("CartPole-v1")
    pol = NEATPolicy(cfg, env.action_spec)
    algo = NEAT(cfg, seed=5)
    for gen in range(25):  # evolve on the problem until a member balances for max_steps
        pop = algo.ask()
        fit = prob(pop)
        algo.tell(pop, fit)
        if float(tf.reduce_max(fit)) >= limit:
            break
    params = pol.flatten(pop)
    evs = [KernelRolloutEvaluator(env, pol, max_steps=limit, seed=2),
           KernelRolloutEvaluator(env, pol, max_steps=limit, seed=2, fused=False),
           InGraphEvaluator(env, NEATPolicy(cfg, env.action_spec, use_op=False), max_steps=limit, seed=2,
                            jit_compile=False)]
    outs = [ev.evaluate_episodes(params) for ev in evs]
    lengths = outs[0].lengths.numpy()[:, 0]
    same = all(np.array_equal(o.lengths.numpy(), outs[0].lengths.numpy()) and
               np.array_equal(o.returns.numpy(), outs[0].returns.numpy()) for o in outs[1:])
    ok = (same and lengths.max() == limit and prob.evaluator.max_steps == limit
          and prob.evaluator.env.max_episode_steps == limit and evs[0]._fused_cartpole)
    row = dict(case="neat_fused_vs_step_loop_vs_xla", env="CartPole-v1", max_steps=limit, generations=gen + 1,
               problem_evaluator=type(prob.evaluator).__name__, longest=int(lengths.max()),
               episodes_over_500=int((lengths > 500).sum()), at_limit=int((lengths == limit).sum()), members=P,
               three_evaluators_equal=same, ok=bool(ok))
    print(json.dumps(row), flush=True)
    return bool(ok)


def refused_cases():
    """Requests that cannot be honoured: each must be a ConfigError (message printed)."""
    from tfevo.core import ConfigError
    from tfevo.envs.gym import GymVectorEnv

    cases = {
        "ingraph env made with max_episode_steps=300, max_steps=600":
            lambda: InGraphEvaluator(make("CartPole-v1", max_episode_steps=300), Linear(4, True), max_steps=600),
        "ingraph env without a limit, max_steps=None":
            lambda: InGraphEvaluator(make("CartPole-v1", max_episode_steps=0), Linear(4, True)),
        "pipelined env_kwargs max_episode_steps=1000, max_steps=1500":
            lambda: PipelinedEvaluator("HalfCheetah-v5", Linear(17, False, 6), num_envs=1, num_subsets=1,
                                       max_steps=1500, env_kwargs={"max_episode_steps": 1000}),
        "pipelined Blackjack-v1 (no TimeLimit), max_steps=None":
            lambda: PipelinedEvaluator(lambda n: GymVectorEnv("Blackjack-v1", n), Linear(3, True), num_envs=1,
                                       num_subsets=1),
        "pipelined Atari max_num_frames_per_episode=400, max_steps=200":
            lambda: PipelinedEvaluator("ALE/Pong-v5", Noop(), num_envs=1, num_subsets=1, max_steps=200,
                                       env_kwargs={"max_num_frames_per_episode": 400}),
    }
    ok = True
    for what, fn in cases.items():
        try:
            fn()
            msg, good = "no error", False
        except ConfigError as e:
            msg, good = str(e), True
        ok &= good
        print(json.dumps(dict(case="refused", request=what, config_error=good, message=msg)), flush=True)
    return ok


def report(name, env_id, limit, lengths, flags, returns, ref):
    ref_len = [r[0] for r in ref]
    ref_flag = [r[1] for r in ref]
    ref_ret = [r[2] for r in ref]
    rel = float(np.max(np.abs(np.subtract(returns, ref_ret)) / np.maximum(np.abs(ref_ret), 1e-9)))
    ok = lengths == ref_len and flags == ref_flag and rel < 1e-4
    row = dict(case=name, env=env_id, max_steps=limit, lengths=lengths, gym_lengths=ref_len, truncated=flags,
               gym_truncated=ref_flag, max_rel_return_diff=rel, ok=ok)
    print(json.dumps(row), flush=True)
    return ok


def main():
    t0 = time.time()
    P = SEEDS_PER_CASE
    ok = []
    cart = np.array([[0.0, 0.0, 1.0, 0.5], [0.0, 0.3, 1.0, 1.0], [0.0, 0.0, -1.0, 0.0]], np.float32)[:P]
    pend = np.array([[0.0, 0.0, -1.0], [0.0, 0.0, 2.0], [0.0, 0.0, 0.5]], np.float32)[:P]
    for limit in (600, 300):
        ok.append(pipelined_case("pipelined", "CartPole-v1", Linear(4, True), cart, limit))
    for limit in (300, 100):
        ok.append(pipelined_case("pipelined", "Pendulum-v1", Linear(3, False), pend, limit))
    # in-graph: the env by id and as an instance made without an explicit limit
    sign = Linear(4, True)
    for as_instance in (False, True):
        for limit in (600, 300):
            ok.append(ingraph_case("ingraph" + ("_instance" if as_instance else "_id"), "CartPole-v1", sign,
                                   cart, limit, as_instance))
        for limit in (300, 100):
            ok.append(ingraph_case("ingraph" + ("_instance" if as_instance else "_id"), "Pendulum-v1",
                                   Linear(3, False), pend, limit, as_instance))
    # MuJoCo (tfevo's batched simulator, Gymnasium's reset noise): constant-ish small linear policies
    hopper = (HopperPD(), np.array([[1.0, 0.1], [3.0, 0.3], [0.5, 0.05]], np.float32)[:P])
    w = np.zeros((P, 17), np.float32)
    w[1, 0], w[2, 1] = 0.05, -0.05
    cheetah = (Linear(17, False, 6), w)
    for env_id, (policy, params) in (("Hopper-v5", hopper), ("HalfCheetah-v5", cheetah)):
        for limit in (1200, 500):
            ok.append(pipelined_case("pipelined", env_id, policy, params, limit,
                                     env_kwargs=dict(reset_rng="gymnasium")))
        ok.append(pipelined_case("pipelined_descriptors", env_id, policy, params, 1200,
                                 env_kwargs=dict(reset_rng="gymnasium"), descriptors=True))
    ok.append(pipelined_case("genome_evaluator", "CartPole-v1", Linear(4, True), cart, 600, genome=True))
    # max_steps=None: the env's own (registered) limit
    ok.append(pipelined_case("pipelined_env_limit", "CartPole-v1", Linear(4, True), cart, None))
    ok.append(pipelined_case("pipelined_env_limit", "HalfCheetah-v5", *cheetah, None,
                             env_kwargs=dict(reset_rng="gymnasium")))
    ok.append(neat_case(600))
    # Atari, NOOP every step (Montezuma's Revenge never ends by itself): max_steps above the
    # deep_neuroevolution preset's 20,000 frames (5,000 steps), and a small frame limit
    import ale_py

    gym.register_envs(ale_py)
    noop = Noop()
    z = np.zeros((1, 1), np.float32)
    ale = dict(repeat_action_probability=0.0, full_action_space=True)
    ok.append(pipelined_case("pipelined_atari", "ALE/MontezumaRevenge-v5", noop, z, 5100,
                             env_kwargs=dict(noop_max=0), gym_kwargs=ale))
    ok.append(pipelined_case("pipelined_atari_frames", "ALE/MontezumaRevenge-v5", noop, z, 26,
                             env_kwargs=dict(noop_max=0, max_num_frames_per_episode=102),
                             gym_kwargs=dict(ale, max_num_frames_per_episode=102)))
    ok.append(refused_cases())
    print(json.dumps(dict(summary=True, cases=len(ok), all_ok=all(ok), failed=len(ok) - sum(ok),
                          seconds=round(time.time() - t0, 1))))


if __name__ == "__main__":
    main()
