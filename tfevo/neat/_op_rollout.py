"""In-graph rollouts of NEAT populations on the C++ inference kernels.

:class:`KernelRolloutEvaluator` is an :class:`~tfevo.rollout.InGraphEvaluator`
(same seeds, start states, bookkeeping, checkpointed seed stream and
statistics) whose step loop runs as a plain graph instead of one XLA program,
because the kernels of ``custom_ops/neat_forward.cc`` have no XLA
implementation.  Each step is:

1. the networks: one ``TfevoNeatForward`` (or ``TfevoNeatRecurrentStep``)
   call for the whole population, which **skips members whose episodes have
   all ended** (the ``active`` mask), so late in a rollout, when most
   episodes are over, the step costs only the live members;
2. everything else -- outputs to actions, the environment step, rewards,
   done masks -- as one small XLA-compiled function.

**CartPole-v1 fast path** (``fused=True``, the default): for the
:class:`~tfevo.envs.classic.CartPole` class itself, feed-forward networks and
one or two outputs, the whole rollout is a single ``TfevoNeatCartPoleRollout``
call: each episode runs its program and Gymnasium's float64 dynamics (the
same operation order, products rounded before additions, glibc ``sin``/``cos``)
step by step until it ends, members in parallel on the intra-op pool.  This
removes the per-step cost of the loop above (graph control flow, one kernel
launch and one XLA launch per step: ~200 us per step at P=1000, against about
8 us per step of actual work).  Its returns, lengths and final observations
equal the step loop's bit for bit (tested), and the step loop stays the path
for everything else.

The XLA reference rollout steps every network until the longest episode
ends.  Returns equal the reference's for the same start states as long as
the actions do: network outputs agree to float rounding (see
:mod:`tfevo.neat._forward_op`), so an argmax between two outputs within a
few ulp of each other can flip.
"""

from __future__ import annotations

import tensorflow as tf

from tfevo import kernels
from tfevo.core import ConfigError
from tfevo.neat import _forward_op as _fo
from tfevo.rollout.ingraph import InGraphEvaluator

__all__ = ["KernelRolloutEvaluator"]


def _fused_cartpole_ok(env, policy) -> bool:
    """Whether the whole-rollout CartPole kernel applies: Gymnasium's CartPole-v1 dynamics
    (the class itself, not a subclass that may change them), feed-forward networks with
    one or two outputs."""
    from tfevo.envs.classic import CartPole

    cfg = policy.config
    plain = getattr(policy, "has_plain_actions", lambda: False)()  # the kernel picks actions as NEATPolicy does
    f32 = getattr(policy, "dtype", tf.float32) == tf.float32  # the kernel's networks are float32
    return (type(env) is CartPole and plain and f32 and cfg.feed_forward and cfg.num_inputs == 4 and cfg.num_outputs in (1, 2)
            and env.max_episode_steps >= 0)


class KernelRolloutEvaluator(InGraphEvaluator):
    """:class:`~tfevo.rollout.InGraphEvaluator` for a :class:`~tfevo.neat.NEATPolicy`
    whose networks run on the inference kernels (see the module docstring).

    Takes the evaluator's arguments except ``jit_compile`` (the loop is a
    graph, the environment step is XLA-compiled), ``common_random_numbers``
    and ``descriptor_fn``.
    """

    def __init__(self, env, policy, episodes: int = 1, max_steps: int | None = None, seed: int = 0,
                 name: str | None = None, fused: bool = True):
        super().__init__(env, policy, episodes=episodes, max_steps=max_steps, seed=seed, jit_compile=False,
                         name=name)
        cfg = policy.config
        if not _fo.op_enabled(cfg.activation_options, cfg.aggregation_options):
            raise ConfigError("KernelRolloutEvaluator needs the NEAT inference kernels (custom_ops/neat_forward.cc) "
                              "and built-in activations/aggregations only")
        obs_dim = 1
        for d in self.env.observation_shape:
            obs_dim *= int(d)
        if obs_dim != cfg.num_inputs:
            raise ConfigError(f"the NEAT config has {cfg.num_inputs} inputs, observations have {obs_dim}")
        object.__setattr__(self, "_env_step_fn", tf.function(self._env_step, jit_compile=True, autograph=False))
        object.__setattr__(self, "_fused_cartpole", bool(fused) and _fused_cartpole_ok(self.env, policy))

    def _env_step(self, t, state, y, done, returns, lengths, final_obs):
        """Actions from the network outputs, one environment step and the episode bookkeeping
        (the same arithmetic as the reference rollout's loop body)."""
        p, b = y.shape[0], y.shape[1]
        actions = self._check_actions(self.policy.outputs_to_actions(y), p)
        new_state, new_obs, done, returns, lengths, final_obs = self._env_step_and_account(
            t, state, actions, done, returns, lengths, final_obs)
        # the next step's member mask and loop condition, computed here to keep the graph loop small
        active = tf.logical_not(tf.reduce_all(tf.reshape(done, [p, b]), axis=1))
        go = tf.logical_and(t + 1 < self.max_steps, tf.reduce_any(active))
        return new_state, new_obs, done, returns, lengths, final_obs, active, go

    def _rollout(self, params, offset=None, popsize=None):
        p = params.shape[0]
        b = self.episodes
        n = p * b
        pol = self.policy
        cfg = pol.config
        I, O = cfg.num_inputs, cfg.num_outputs
        nodes, conns = pol.unflatten(params)
        prog = _fo.prepare(nodes, conns, I, cfg.feed_forward, cfg.activation_options, cfg.aggregation_options,
                           use_op=True)
        state, obs = self._start_states(p, offset, popsize)
        if self._fused_cartpole:
            returns, lengths, final_obs = self._cartpole_rollout(prog, state)
            return self._finish(returns, lengths, final_obs, p, b)
        obs = tf.cast(obs, tf.float32)
        recurrent = not cfg.feed_forward
        dt = getattr(pol, "dtype", tf.float32)  # the networks' value type
        h0 = tf.zeros([p, b, prog.num_slots] if recurrent else [], dt)

        def cond(t, go, active, state, obs, done, returns, lengths, final_obs, h):
            return go

        def body(t, go, active, state, obs, done, returns, lengths, final_obs, h):
            x = tf.cast(tf.reshape(obs, [p, b, I]), dt)
            if recurrent:
                h, y = _fo.recurrent_step(prog, h, x, I, O, settle_steps=pol.settle_steps, active=active, dtype=dt)
            else:
                y = _fo.forward(prog, x, I, O, active=active, dtype=dt)
            state, obs, done, returns, lengths, final_obs, active, go = self._env_step_fn(
                t, state, y, done, returns, lengths, final_obs)
            return t + 1, go, active, state, obs, done, returns, lengths, final_obs, h

        init = (tf.constant(0, tf.int32), tf.constant(self.max_steps > 0), tf.ones([p], tf.bool), state, obs,
                tf.zeros([n], tf.bool), tf.zeros([n], tf.float64), tf.zeros([n], tf.int32), obs, h0)
        out = tf.while_loop(cond, body, init, maximum_iterations=self.max_steps)
        return self._finish(out[6], out[7], out[8], p, b)

    def _cartpole_rollout(self, prog, state):
        """The whole rollout as one ``TfevoNeatCartPoleRollout`` call (see the module docstring)."""
        env = self.env
        consts = tf.constant([env.force_mag, env.polemass_length, env.total_mass, env.gravity, env.length,
                              4.0 / 3.0, env.masspole, env.tau, env.x_threshold, env.theta_threshold_radians],
                             tf.float64)
        cfg = self.policy.config
        rollout = kernels.kernel("TfevoNeatCartPoleRollout", True, [prog.prog])
        return rollout(
            *prog, tf.convert_to_tensor(state.physics, tf.float64), consts, num_inputs=cfg.num_inputs,
            num_outputs=cfg.num_outputs, max_steps=self.max_steps, max_episode_steps=max(0, env.max_episode_steps),
            sutton_barto_reward=env.sutton_barto_reward)

    def _finish(self, returns, lengths, final_obs, p, b):
        returns = tf.reshape(returns, [p, b])
        lengths = tf.reshape(lengths, [p, b])
        fitness = tf.cast(tf.reduce_mean(returns, axis=1), tf.float32)
        self.total_frames.assign_add(tf.reduce_sum(tf.cast(lengths, tf.int64)))
        return fitness, tf.cast(returns, tf.float32), lengths, tf.reshape(final_obs, [p, b] + list(self.env.observation_shape))
