"""HyperNEAT substrates as a policy family for control.

:class:`HyperNEATPolicy` reads a CPPN population in the flat ``[P, D]`` form
of :meth:`tfevo.neat.NEATPolicy.flatten`, paints the substrate weights once
per evaluation (:meth:`HyperNEAT.decode`) and runs the substrate networks of
all members on their observations, so CPPN populations drive the same
evaluators as every other family (in-graph environments and host simulators).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from tfevo.core import ConfigError, ShapeError
from tfevo.neat import functions as F
from tfevo.neat.config import NEATConfig
from tfevo.neat.genome import CONN_DIM, NODE_DIM
from tfevo.neat.hyperneat import HyperNEAT, Substrate, SubstrateNetwork, check_cppn_config
from tfevo.registry import register

__all__ = ["HyperNEATPolicy", "layered_substrate"]


def layered_substrate(num_inputs: int, hidden, num_outputs: int) -> Substrate:
    """A layered 2-D substrate: inputs on ``y = -1``, outputs on ``y = 1``, hidden
    layers evenly in between; the nodes of a layer spread over ``x`` in [-1, 1]."""
    if isinstance(hidden, (str, bytes)) or not hasattr(hidden, "__iter__"):
        raise ConfigError(f"hidden must be a list of hidden layer sizes, got {hidden!r}")
    sizes = [int(num_inputs), *(int(h) for h in hidden), int(num_outputs)]
    if any(s < 1 for s in sizes):
        raise ConfigError(f"substrate layer sizes must be >= 1, got {sizes}")
    ys = np.linspace(-1.0, 1.0, len(sizes))
    layers = [[(float(x), float(y)) for x in (np.linspace(-1.0, 1.0, n) if n > 1 else [0.0])]
              for n, y in zip(sizes, ys)]
    return Substrate.layered(layers)


@register("policy", "hyperneat", doc="CPPN genomes painting the weights of a layered substrate network (HyperNEAT).")
class HyperNEATPolicy:
    """Substrate networks painted by a CPPN population, as actions for every member.

    Args:
      hyperneat: the :class:`HyperNEAT` (substrate, threshold, activations);
        its substrate has one input per observation value and one output per
        policy output of ``action_spec``.
      config: the CPPN population's :class:`NEATConfig`
        (``hyperneat.cppn_config(...)``).
      action_spec: the environment's action spec.  Discrete actions are the
        argmax of the outputs; continuous ones map the output activation's
        range ([0, 1] for sigmoid, gauss and hat; [-1, 1] otherwise) to the
        bounds.
    """

    state_shape = None

    def __init__(self, hyperneat: HyperNEAT, config: NEATConfig, action_spec):
        sub = hyperneat.substrate
        if sub.layers is None:
            raise ConfigError("HyperNEATPolicy needs a layered substrate (Substrate.layered)")
        need = action_spec.policy_output_size
        if sub.num_outputs != need:
            raise ConfigError(f"the substrate has {sub.num_outputs} outputs, the action space needs {need}")
        if config.num_inputs != hyperneat.cppn_inputs or config.num_outputs != 1:
            raise ConfigError(f"the CPPN config must have num_inputs={hyperneat.cppn_inputs} and num_outputs=1, "
                              f"got {config.num_inputs} and {config.num_outputs}")
        check_cppn_config(config)
        self.hyperneat = hyperneat
        self.config = config
        self.action_spec = action_spec
        self.input_shape = (sub.num_inputs,)
        self.num_params = config.max_nodes * NODE_DIM + config.max_conns * CONN_DIM
        self.model = self  # evaluator graph path: model.unflatten_graph + forward_graph

    def unflatten(self, params):
        """Flat ``[P, D]`` -> the CPPN population ``(nodes, conns)``."""
        cfg = self.config
        n = cfg.max_nodes * NODE_DIM
        params = tf.convert_to_tensor(params, tf.float32)
        P = tf.shape(params)[0]
        return (tf.reshape(params[:, :n], [P, cfg.max_nodes, NODE_DIM]),
                tf.reshape(params[:, n:], [P, cfg.max_conns, CONN_DIM]))

    def unflatten_graph(self, params) -> SubstrateNetwork:
        """Flat CPPN genomes -> substrate weights ``[P, M, M]`` (once per evaluation)."""
        return self.hyperneat.decode(self.unflatten(params), self.config)

    prepare = unflatten_graph

    def outputs_to_actions(self, y):
        spec = self.action_spec
        if spec.discrete:
            return tf.argmax(y, axis=-1, output_type=tf.int32)
        low = tf.constant(np.broadcast_to(spec.low, spec.shape), tf.float32)
        high = tf.constant(np.broadcast_to(spec.high, spec.shape), tf.float32)
        lo_a = F.output_low(self.hyperneat.output_activation)
        return tf.clip_by_value(low + (y - lo_a) / (1.0 - lo_a) * (high - low), low, high)

    def forward_graph(self, decoded: SubstrateNetwork, obs, indices=None):
        """Actions for ``obs [P, B, obs_dim]`` (or ``[n, B, obs_dim]`` of the members ``indices``)."""
        obs = tf.convert_to_tensor(obs, tf.float32)
        size = self.input_shape[0]
        if obs.shape.rank is not None and obs.shape.rank >= 3 and obs.shape[2:].is_fully_defined():
            got = int(np.prod(obs.shape[2:].as_list()))
            if got != size:
                raise ShapeError(f"observations have {got} values (shape {obs.shape.as_list()}), the substrate has "
                                 f"{size} inputs")
            obs = tf.reshape(obs, tf.concat([tf.shape(obs)[:2], [size]], 0))
        if indices is not None:
            decoded = SubstrateNetwork(tf.gather(decoded.weights, tf.cast(indices, tf.int32)))
        return self.outputs_to_actions(self.hyperneat.forward(decoded, obs))

    def forward(self, params, obs, indices=None):
        """``params``: flat CPPN genomes ``[P, D]`` or decoded substrate weights."""
        decoded = params if isinstance(params, SubstrateNetwork) else self.unflatten_graph(params)
        return self.forward_graph(decoded, obs, indices)
