"""NEAT genomes as a policy family, and control problems for NEAT.

:class:`NEATPolicy` plugs NEAT populations into the package's evaluators:
``forward(genomes, obs [P, B, obs_dim]) -> actions`` where ``genomes`` is the
``(nodes, conns)`` pair from ``NEAT.ask()`` (or its flat ``[P, D]`` form, see
:meth:`NEATPolicy.flatten`, which is what :class:`tfevo.rollout.InGraphEvaluator`
passes).  Through the evaluator's graph path the genomes are transformed into
dense networks once per evaluation, not once per step.

:class:`ControlProblem` rolls out a whole population on an in-graph
environment (``tfevo.envs.make``) in one ``tf.function`` through
:class:`~tfevo.rollout.InGraphEvaluator`; for recurrent populations the
evaluator carries every network's node values across steps
(:meth:`NEATPolicy.forward_state`).  Host simulators (MuJoCo, Atari, any
Gymnasium id) take NEAT populations through
:class:`~tfevo.rollout.PipelinedEvaluator` with the flat genomes of
:meth:`NEATPolicy.flatten`.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from tfevo.core import ConfigError, ShapeError, check_int
from tfevo.neat import _forward_op as _fo
from tfevo.neat import functions as F
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
      use_op: None (default) runs the C++ inference kernels
        (``custom_ops/neat_forward.cc``) where they can run (built, not under
        XLA, built-in functions only), False always the TensorFlow reference.
      dtype: the networks' value type, ``"float32"`` (default) or
        ``"float64"``: observations are widened, and node values,
        activations and outputs (hence the argmax of discrete actions) are
        computed in it, as neat-python does with Python floats.  Genomes
        stay float32.  A recurrent population's state has this type.
    """

    def __init__(self, config: NEATConfig, action_spec, settle_steps: int = 1, scale_outputs: bool = True,
                 use_op: bool | None = None, dtype: str = "float32"):
        self.use_op = use_op
        self.dtype_name = _check_dtype(dtype)
        self.dtype = tf.as_dtype(self.dtype_name)
        self.config = config
        self.action_spec = action_spec
        # a recurrent network computed 0 times per observation would act on its initial state for ever
        self.settle_steps = check_int(settle_steps, "settle_steps", 1)
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

    def transform(self, population):
        """Genomes -> :class:`~tfevo.neat.network.Network`, or the kernels'
        :class:`~tfevo.neat._forward_op.Program` where they run."""
        nodes, conns = population
        cfg = self.config
        return _fo.prepare(nodes, conns, cfg.num_inputs, cfg.feed_forward, cfg.activation_options,
                           cfg.aggregation_options, use_op=self.use_op)

    def has_plain_actions(self) -> bool:
        """Whether actions come from :meth:`outputs_to_actions` as defined here
        (not overridden by a subclass), which whole-rollout kernels reproduce."""
        return type(self).outputs_to_actions is NEATPolicy.outputs_to_actions

    def outputs_to_actions(self, y):
        """Network outputs ``[P, B, O]`` -> actions."""
        spec = self.action_spec
        if spec.discrete:
            if y.shape[-1] == 1:
                return tf.cast(y[..., 0] > 0.5, tf.int32)
            return tf.argmax(y, axis=-1, output_type=tf.int32)
        low = tf.constant(np.broadcast_to(spec.low, spec.shape), y.dtype)
        high = tf.constant(np.broadcast_to(spec.high, spec.shape), y.dtype)
        if self.scale_outputs:
            lo_a = F.output_low(self.config.activation_default)
            y = low + (y - lo_a) / (1.0 - lo_a) * (high - low)
        return tf.clip_by_value(y, low, high)

    # -- the evaluators' seams ------------------------------------------------
    @property
    def state_shape(self):
        """Per-episode state of a recurrent population: the node values ``(max_nodes,)``;
        ``None`` for feed-forward networks.  Evaluators that see a state shape carry
        the state across steps through :meth:`forward_state`."""
        return None if self.config.feed_forward else (self.config.max_nodes,)

    @property
    def state_dtype(self):
        """The type of the recurrent state (the networks' value type, ``dtype``)."""
        return self.dtype

    def prepare(self, params):
        """Flat ``[P, D]`` genomes -> transformed networks, once per evaluation
        (what :class:`tfevo.rollout.PipelinedEvaluator` calls before stepping)."""
        return self.unflatten_graph(tf.convert_to_tensor(params, tf.float32))

    @staticmethod
    def _subset(network: net.Network, indices) -> net.Network:
        """The networks of members ``indices`` (all tensors but the level count gathered)."""
        if indices is None:
            return network
        idx = tf.cast(indices, tf.int32)
        return network._replace(**{f: tf.gather(getattr(network, f), idx)
                                   for f in network._fields if f != "num_levels"})

    def _obs(self, obs) -> tf.Tensor:
        """``obs [P, B, ...]`` as float32 ``[P, B, num_inputs]``; :class:`ShapeError`
        naming both sizes when an observation does not have ``num_inputs`` values."""
        obs = tf.convert_to_tensor(obs, tf.float32)
        shape = obs.shape
        if shape.rank is not None and shape.rank < 3:
            raise ShapeError(f"observations must be [P, B, {self.config.num_inputs}], got {shape.as_list()}")
        if shape.rank is not None and shape[2:].is_fully_defined():
            size = int(np.prod(shape[2:].as_list()))
            if size != self.config.num_inputs:
                raise ShapeError(f"observations have {size} values (shape {shape.as_list()}), the NEAT config has "
                                 f"num_inputs={self.config.num_inputs}")
            if shape.rank > 3:
                obs = tf.reshape(obs, tf.concat([tf.shape(obs)[:2], [size]], 0))
        return obs

    def forward_state(self, network: net.Network, obs, state, indices=None):
        """Recurrent step for the evaluators: ``(actions, new_state)`` from
        ``obs [n, B, obs_dim]`` and ``state [n, B, max_nodes]`` (zeros at an
        episode's start); ``indices [n]`` picks the members (default: all)."""
        state, actions = self.step(self._subset(network, indices), tf.cast(state, self.dtype), obs)
        return actions, state

    def forward_graph(self, network: net.Network, obs, indices=None):
        """Actions for ``obs [P, B, obs_dim]`` (or ``[n, B, obs_dim]`` with member
        ``indices [n]``) from transformed networks (feed-forward; a recurrent
        population is run for one step from zero state: use
        :meth:`forward_state` to carry its state)."""
        cfg = self.config
        obs = self._obs(obs)
        network = self._subset(network, indices)
        _check_members(network, obs)
        obs = tf.cast(obs, self.dtype)
        if cfg.feed_forward:
            y = _fo.forward(network, obs, cfg.num_inputs, cfg.num_outputs, cfg.activation_options,
                            cfg.aggregation_options, dtype=self.dtype)
        else:
            width = network.prog.shape[1] if isinstance(network, _fo.Program) else network.weights.shape[-1]
            state = tf.zeros(tf.concat([tf.shape(obs)[:2], [width]], 0), self.dtype)
            _, y = _fo.recurrent_step(network, state, obs, cfg.num_inputs, cfg.num_outputs,
                                      cfg.activation_options, cfg.aggregation_options, self.settle_steps,
                                      dtype=self.dtype)
        return self.outputs_to_actions(y)

    def forward(self, genomes, obs, indices=None):
        """``genomes`` = ``(nodes, conns)``, flat ``[P, D]`` or transformed
        networks; ``obs [P, B, obs_dim]``, or ``[n, B, obs_dim]`` for the members
        ``indices [n]`` (the :class:`tfevo.rollout.PipelinedEvaluator` signature,
        so NEAT populations drive host simulators such as MuJoCo)."""
        if isinstance(genomes, (net.Network, _fo.Program)):
            network = genomes
        elif isinstance(genomes, (tuple, list)):
            network = self.transform(genomes)
        else:
            network = self.unflatten_graph(genomes)
        return self.forward_graph(network, tf.convert_to_tensor(obs, tf.float32), indices)

    def step(self, network: net.Network, state, obs):
        """Recurrent step: ``(state [P,B,N], obs [P,B,I]) -> (state, actions)``."""
        cfg = self.config
        obs = self._obs(obs)
        _check_members(network, obs)
        state, y = _fo.recurrent_step(network, tf.cast(state, self.dtype), tf.cast(obs, self.dtype), cfg.num_inputs,
                                      cfg.num_outputs, cfg.activation_options, cfg.aggregation_options,
                                      self.settle_steps, dtype=self.dtype)
        return state, self.outputs_to_actions(y)


def _check_dtype(dtype) -> str:
    """The networks' value type as ``"float32"`` or ``"float64"``; :class:`ConfigError` otherwise."""
    name = getattr(dtype, "name", dtype)
    if name not in ("float32", "float64"):
        raise ConfigError(f"dtype must be 'float32' or 'float64' (the networks' value type), got {dtype!r}")
    return name


def _check_members(network, obs) -> None:
    """:class:`ShapeError` when ``obs [n, B, I]`` is not for the ``n`` networks given (static shapes)."""
    n, m = network[0].shape[0], obs.shape[0]
    if n is not None and m is not None and n != m:
        raise ShapeError(f"observations are for {m} members (shape {obs.shape.as_list()}), "
                         f"the networks are {n}")


@register("problem", "neat_control", doc="Episode return of NEAT networks on an in-graph env (e.g. CartPole-v1).")
class ControlProblem(tf.Module):
    """Mean episode return of each NEAT network on an in-graph environment.

    Args:
      env_id: id for :func:`tfevo.envs.make` (an in-graph TFEnv, e.g.
        ``"CartPole-v1"``).
      config: the population's :class:`NEATConfig`.
      episodes: episodes per member (fresh start states each call, drawn from
        ``seed``'s stream).
      max_steps: the episode's time limit in steps (default: the env's own);
        replaces the env's limit, above or below it (see
        :class:`~tfevo.rollout.InGraphEvaluator`).
      settle_steps: recurrent networks: updates per observation.
      trim: feed-forward populations are rolled out on their used slot range
        only (node axis cut after the last used slot, rounded up to a
        multiple of 8), with one evaluator (one compiled rollout) per such
        width.  All of them draw their start states from the problem's one
        seed stream, so the returns equal those of ``trim=False`` bit for bit.

    Run state: the episode-seed stream (:attr:`seeds`) and the frame counter
    (:attr:`total_frames`) belong to the problem and are shared by every
    evaluator it builds, so ``tf.train.Checkpoint(problem=prob)`` (or
    ``tf.train.Checkpoint(evaluator=prob.evaluator)``, or handing ``prob`` to
    the :class:`~tfevo.training.Trainer`) saves everything a restored run
    needs to continue exactly.
      use_op: None (default) rolls out on the C++ inference kernels
        when they can run (:class:`tfevo.neat._op_rollout.KernelRolloutEvaluator`:
        graph loop, XLA environment step, finished members skipped); False
        keeps the XLA-compiled :class:`~tfevo.rollout.InGraphEvaluator` with
        the dense reference networks; True requires the kernels
        (:class:`~tfevo.kernels.KernelUnavailableError` naming why not).
      dtype: the networks' value type (see :class:`NEATPolicy`):
        ``"float32"`` (default) or ``"float64"``, which is what neat-python
        computes with (its networks run on Python floats).  Where sigmoids
        saturate, float32 outputs tie at exactly 1.0 and the argmax takes the
        first of them, while double still orders them; so a population
        evolved on float32 networks can rely on such ties.  Use
        ``"float64"`` to reproduce neat-python's episodes.  The CartPole-v1
        whole-rollout kernel is float32 only; in float64 CartPole runs on
        the step loop.

    Every member gets its own start states (``episodes`` of them, fresh each
    call), as a neat-python fitness function that resets the environment
    for each genome with its own seed; the whole population's start states
    come from one draw of the seed stream per call.

    Example::

        prob = ControlProblem("CartPole-v1", cfg, episodes=2)
        fitness = prob(algo.ask())
    """

    def __init__(self, env_id: str, config: NEATConfig, episodes: int = 1, max_steps: int | None = None,
                 seed: int = 0, settle_steps: int = 1, trim: bool = True, use_op: bool | None = None,
                 dtype: str = "float32"):
        from tfevo.envs import make

        super().__init__(name="control_problem")
        self.use_op = use_op
        self.trim = bool(trim) and config.feed_forward
        self._max_steps_arg = max_steps
        # per-width evaluators, built on demand; a plain dict (tuple keys), not
        # tracked: their state is the shared seed stream and frame counter below
        object.__setattr__(self, "_trimmed", {})
        object.__setattr__(self, "_last", None)

        self.env = make(env_id, 1)
        self.config = config
        self.policy = NEATPolicy(config, self.env.action_spec, settle_steps=settle_steps, use_op=use_op, dtype=dtype)
        obs_dim = int(np.prod(self.env.observation_shape))
        if config.num_inputs != obs_dim:
            raise ConfigError(f"the NEAT config has {config.num_inputs} inputs, {env_id} observations have {obs_dim}")
        self.episodes = int(episodes)
        self.max_steps = int(max_steps or self.env.max_episode_steps)
        # Feed-forward and recurrent populations alike (a recurrent policy's
        # node values are carried across steps by the evaluator).
        self.evaluator = self._make_evaluator(self.policy, seed)
        self.seeds = self.evaluator.seeds
        self.total_frames = self.evaluator.total_frames

    @property
    def last_frames(self) -> int:
        """Environment steps used by the last call (what a Trainer counts as frames)."""
        return 0 if self._last is None else self._last.last_frames

    @property
    def last_stats(self) -> dict:
        """The ``last_stats`` of the evaluator that ran the last call."""
        return {} if self._last is None else dict(self._last.last_stats)

    def _make_evaluator(self, policy, seed):
        """The kernels' rollout where they run, else the XLA :class:`~tfevo.rollout.InGraphEvaluator`."""
        cfg = policy.config
        if self.use_op is not False and _fo.op_enabled(cfg.activation_options, cfg.aggregation_options, self.use_op):
            from tfevo.neat._op_rollout import KernelRolloutEvaluator

            return KernelRolloutEvaluator(self.env, policy, episodes=self.episodes, max_steps=self._max_steps_arg,
                                          seed=seed)
        from tfevo.rollout.ingraph import InGraphEvaluator

        return InGraphEvaluator(self.env, policy, episodes=self.episodes, max_steps=self._max_steps_arg, seed=seed)

    def _evaluator_for(self, nodes, conns):
        """The evaluator for the used width of ``nodes``/``conns`` (one
        evaluator, i.e. one compiled rollout, per width; all share the
        problem's seed stream and frame counter)."""
        from tfevo.neat.problems import _used_widths

        cfg = self.config
        if not self.trim:
            return self.evaluator, nodes, conns
        wn, wc = (int(w) for w in _used_widths(nodes, conns))
        N = min(cfg.max_nodes, max(8, -(-wn // 8) * 8))
        C = cfg.max_conns  # connections cost once per evaluation; nodes cost N^2 per step
        if (N, C) == (cfg.max_nodes, cfg.max_conns):
            return self.evaluator, nodes, conns
        if (N, C) not in self._trimmed:
            import dataclasses

            sub = dataclasses.replace(cfg, max_nodes=N, max_conns=C)
            pol = NEATPolicy(sub, self.env.action_spec, settle_steps=self.policy.settle_steps,
                             scale_outputs=self.policy.scale_outputs, use_op=self.use_op,
                             dtype=self.policy.dtype_name)
            ev = self._make_evaluator(pol, 0)
            # the same variables as the full-width evaluator: one stream of start
            # states whatever width a generation runs at, and one checkpointed state
            ev.seeds = self.evaluator.seeds
            ev.total_frames = self.evaluator.total_frames
            self._trimmed[(N, C)] = ev
        return self._trimmed[(N, C)], nodes[:, :N], conns[:, :C]

    def __call__(self, population) -> tf.Tensor:
        """Fitness ``float32 [P]`` of ``population = (nodes, conns)``."""
        from tfevo.neat.problems import check_population

        nodes, conns = check_population(population, self.config)
        ev, nodes, conns = self._evaluator_for(nodes, conns)
        out = ev.evaluate(ev.policy.flatten((nodes, conns)))
        object.__setattr__(self, "_last", ev)
        return out
