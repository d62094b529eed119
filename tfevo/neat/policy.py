"""NEAT genomes as a policy family, and control problems for NEAT.

:class:`NEATPolicy` plugs NEAT populations into the package's evaluators:
``forward(genomes, obs [P, B, obs_dim]) -> actions`` where ``genomes`` is the
``(nodes, conns)`` pair from ``NEAT.ask()`` (or its flat ``[P, D]`` form, see
:meth:`NEATPolicy.flatten`, which is what :class:`tfevo.rollout.InGraphEvaluator`
passes).  Through the evaluator's graph path the genomes are transformed into
dense networks once per evaluation, not once per step.

:class:`ControlProblem` rolls out a whole population on an in-graph
environment (``tfevo.envs.make``) in one ``tf.function``; feed-forward
populations go through :class:`~tfevo.rollout.InGraphEvaluator`, recurrent ones
through a loop that carries every network's node values across steps.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from tfevo.core import ConfigError, SeedStream
from tfevo.neat import network as net
from tfevo.neat.config import NEATConfig
from tfevo.neat.genome import CONN_DIM, NODE_DIM
from tfevo.registry import register

__all__ = ["NEATPolicy", "ControlProblem"]


@register("policy", "neat", doc="NEAT genomes (nodes, conns) -> actions for a population.")
class NEATPolicy:
    """Policy family over NEAT populations.

    Args:
      config: the :class:`NEATConfig` of the population.
      action_spec: an :class:`tfevo.envs.base.ActionSpec`.  Discrete actions
        are the argmax of the ``num_actions`` outputs (or, with one output and
        two actions, ``output > 0.5``); continuous actions are the outputs
        mapped from the activation's range to ``[low, high]`` when
        ``scale_outputs`` (outputs assumed in [0, 1] for sigmoid, [-1, 1] else),
        clipped to the bounds.
      settle_steps: recurrent networks: updates per observation.
    """

    def __init__(self, config: NEATConfig, action_spec, settle_steps: int = 1, scale_outputs: bool = True):
        self.config = config
        self.action_spec = action_spec
        self.settle_steps = int(settle_steps)
        self.scale_outputs = bool(scale_outputs)
        need = action_spec.policy_output_size
        if config.num_outputs != need and not (action_spec.discrete and need == 2 and config.num_outputs == 1):
            raise ConfigError(f"the NEAT config has {config.num_outputs} outputs, the action space needs {need}")
        self.num_params = config.max_nodes * NODE_DIM + config.max_conns * CONN_DIM
        self.model = self  # evaluator graph path: model.unflatten_graph + forward_graph

    # -- flat form for evaluators that pass [P, D] ---------------------------
    def flatten(self, population) -> tf.Tensor:
        """``(nodes, conns)`` -> float32 ``[P, N*5 + C*5]`` (NaN padding kept)."""
        nodes, conns = population
        P = tf.shape(nodes)[0]
        return tf.concat([tf.reshape(nodes, [P, -1]), tf.reshape(conns, [P, -1])], 1)

    def unflatten(self, params):
        """Inverse of :meth:`flatten`."""
        cfg = self.config
        n = cfg.max_nodes * NODE_DIM
        P = tf.shape(params)[0]
        return (tf.reshape(params[:, :n], [P, cfg.max_nodes, NODE_DIM]),
                tf.reshape(params[:, n:], [P, cfg.max_conns, CONN_DIM]))

    def unflatten_graph(self, params) -> net.Network:
        """Flat params -> transformed networks (once per evaluation)."""
        return self.transform(self.unflatten(params))

    def transform(self, population) -> net.Network:
        """Genomes -> :class:`~tfevo.neat.network.Network`."""
        nodes, conns = population
        return net.transform(nodes, conns, self.config.num_inputs, self.config.feed_forward)

    def outputs_to_actions(self, y):
        """Network outputs ``[P, B, O]`` -> actions."""
        spec = self.action_spec
        if spec.discrete:
            if y.shape[-1] == 1:
                return tf.cast(y[..., 0] > 0.5, tf.int32)
            return tf.argmax(y, axis=-1, output_type=tf.int32)
        low = tf.constant(np.broadcast_to(spec.low, spec.shape), tf.float32)
        high = tf.constant(np.broadcast_to(spec.high, spec.shape), tf.float32)
        if self.scale_outputs:
            lo_a = 0.0 if self.config.activation_default in ("sigmoid", "gauss", "hat") else -1.0
            y = low + (y - lo_a) / (1.0 - lo_a) * (high - low)
        return tf.clip_by_value(y, low, high)

    def forward_graph(self, network: net.Network, obs):
        """Actions for ``obs [P, B, obs_dim]`` from transformed networks
        (feed-forward; a recurrent population is run for one step from zero state)."""
        cfg = self.config
        if cfg.feed_forward:
            y = net.forward(network, obs, cfg.num_inputs, cfg.num_outputs, cfg.activation_options,
                            cfg.aggregation_options)
        else:
            state = net.initial_state(network, tf.shape(obs)[1])
            _, y = net.recurrent_step(network, state, obs, cfg.num_inputs, cfg.num_outputs,
                                      cfg.activation_options, cfg.aggregation_options, self.settle_steps)
        return self.outputs_to_actions(y)

    def forward(self, genomes, obs):
        """``genomes`` = ``(nodes, conns)`` or flat ``[P, D]``; ``obs [P, B, obs_dim]``."""
        if isinstance(genomes, net.Network):
            network = genomes
        elif isinstance(genomes, (tuple, list)):
            network = self.transform(genomes)
        else:
            network = self.unflatten_graph(genomes)
        return self.forward_graph(network, tf.convert_to_tensor(obs, tf.float32))

    def step(self, network: net.Network, state, obs):
        """Recurrent step: ``(state [P,B,N], obs [P,B,I]) -> (state, actions)``."""
        cfg = self.config
        state, y = net.recurrent_step(network, state, obs, cfg.num_inputs, cfg.num_outputs, cfg.activation_options,
                                      cfg.aggregation_options, self.settle_steps)
        return state, self.outputs_to_actions(y)


@register("problem", "neat_control", doc="Episode return of NEAT networks on an in-graph env (e.g. CartPole-v1).")
class ControlProblem:
    """Mean episode return of each NEAT network on an in-graph environment.

    Args:
      env_id: id for :func:`tfevo.envs.make` (an in-graph TFEnv, e.g.
        ``"CartPole-v1"``).
      config: the population's :class:`NEATConfig`.
      episodes: episodes per member (fresh start states each call, drawn from
        ``seed``'s stream).
      max_steps: optional step cap.
      settle_steps: recurrent networks: updates per observation.

    Example::

        prob = ControlProblem("CartPole-v1", cfg, episodes=2)
        fitness = prob(algo.ask())
    """

    def __init__(self, env_id: str, config: NEATConfig, episodes: int = 1, max_steps: int | None = None,
                 seed: int = 0, settle_steps: int = 1):
        from tfevo.envs import make

        self.env = make(env_id, 1)
        self.config = config
        self.policy = NEATPolicy(config, self.env.action_spec, settle_steps=settle_steps)
        obs_dim = int(np.prod(self.env.observation_shape))
        if config.num_inputs != obs_dim:
            raise ConfigError(f"the NEAT config has {config.num_inputs} inputs, {env_id} observations have {obs_dim}")
        self.episodes = int(episodes)
        self.max_steps = int(max_steps or self.env.max_episode_steps)
        if config.feed_forward:
            from tfevo.rollout.ingraph import InGraphEvaluator

            self.evaluator = InGraphEvaluator(self.env, self.policy, episodes=episodes, max_steps=max_steps,
                                              seed=seed)
        else:
            self.evaluator = None
            self.seeds = SeedStream(seed)
            self._fn = None

    def _recurrent(self, nodes, conns):
        P, B = self.config.pop_size, self.episodes
        n = P * B
        network = self.policy.transform((nodes, conns))
        state_env, obs = self.env.reset(self.seeds.next(), num_envs=n)
        h = net.initial_state(network, B)

        def body(t, s, obs, h, done, ret):
            h, a = self.policy.step(network, h, tf.reshape(tf.cast(obs, tf.float32), [P, B, -1]))
            a = tf.reshape(a, [n] + list(self.env.action_spec.shape))
            res = self.env.step(s, a)
            ret = ret + tf.where(done, 0.0, tf.cast(res.reward, tf.float32))
            done = done | res.terminated | res.truncated
            return t + 1, res.state, res.obs, h, done, ret

        out = tf.while_loop(lambda t, s, o, h, d, r: (t < self.max_steps) & ~tf.reduce_all(d), body,
                            (0, state_env, obs, h, tf.zeros([n], tf.bool), tf.zeros([n])))
        return tf.reduce_mean(tf.reshape(out[-1], [P, B]), 1)

    def __call__(self, population) -> tf.Tensor:
        """Fitness ``float32 [P]`` of ``population = (nodes, conns)``."""
        if self.evaluator is not None:
            return self.evaluator.evaluate(self.policy.flatten(population))
        if self._fn is None:
            cfg = self.config
            self._fn = tf.function(self._recurrent, autograph=False, input_signature=[
                tf.TensorSpec([cfg.pop_size, cfg.max_nodes, NODE_DIM], tf.float32),
                tf.TensorSpec([cfg.pop_size, cfg.max_conns, CONN_DIM], tf.float32)])
        return self._fn(*population)
