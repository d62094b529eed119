"""Fitness problems for NEAT populations: XOR, n-bit parity, the
multiplexer, function fitting.

A problem is callable on a population ``(nodes, conns)`` and returns fitness
``[P]`` (higher is better) in the config's ``fitness_dtype`` (float64 by
default, float32 on request); the whole population is evaluated on all cases in
one compiled call.
"""

from __future__ import annotations

import itertools

import numpy as np
import tensorflow as tf

from tfevo.core import ConfigError, ShapeError
from tfevo.neat import _forward_op as _fo
from tfevo.neat import network as net
from tfevo.neat.config import NEATConfig
from tfevo.neat.genome import CONN_DIM, NODE_DIM, conn_valid, node_valid, used_width
from tfevo.registry import register

__all__ = ["SupervisedProblem", "XOR", "XOR3", "Parity", "Multiplexer", "FunctionFit"]

_COMPILED: dict = {}


class SupervisedProblem:
    """Fitness from input/target pairs.

    ``fitness = max_fitness - sum over cases and outputs of (y - target)^2``
    (neat-python's XOR example uses ``4 - sum``; ``max_fitness`` defaults to the
    number of cases) when ``loss="sse"``; ``loss="mse"`` gives
    ``-mean squared error``.  The evaluation runs the C++ inference kernels
    (``custom_ops/neat_forward.cc``, see :mod:`tfevo.neat._forward_op`) when
    they are built and every activation/aggregation option is built in;
    otherwise (or with the ``use_op`` attribute set to False) it runs
    the pure-TensorFlow reference, XLA-compiled unless the ``jit_compile``
    attribute is set to False.

    The networks run and the fitness is computed in the config's
    ``fitness_dtype`` (default float64, as neat-python; the genomes' float32
    weights are widened), and the fitness is returned in that type.
    """

    jit_compile: bool = True
    use_op: bool | None = None  # None: the kernels when available; False: the reference; True: the kernels or an error

    def __init__(self, inputs, targets, loss: str = "sse", max_fitness: float | None = None):
        self.inputs64 = np.asarray(inputs, np.float64)
        self.targets64 = np.asarray(targets, np.float64)
        self.inputs = self.inputs64.astype(np.float32)
        self.targets = self.targets64.astype(np.float32)
        if self.inputs.ndim != 2 or self.targets.ndim != 2 or len(self.inputs) != len(self.targets):
            raise ConfigError("inputs must be [B, I] and targets [B, O] with the same B")
        if loss not in ("sse", "mse"):
            raise ConfigError(f"loss must be 'sse' or 'mse', got {loss!r}")
        self.loss = loss
        self.max_fitness = float(len(self.inputs) if max_fitness is None else max_fitness)
        self.num_inputs = self.inputs.shape[1]
        self.num_outputs = self.targets.shape[1]
        self._fns = {}

    def config(self, **kw) -> NEATConfig:
        """A NEATConfig with this problem's input/output counts (overrides in ``kw``)."""
        return NEATConfig(num_inputs=self.num_inputs, num_outputs=self.num_outputs, **kw)

    def _compile(self, cfg: NEATConfig, P: int, N: int, C: int, use_op: bool = False):
        dt = cfg.fitness_tf_dtype
        f64 = dt == tf.float64
        x = tf.constant(self.inputs64 if f64 else self.inputs)
        t = tf.constant(self.targets64 if f64 else self.targets)
        I, O = self.num_inputs, self.num_outputs

        @tf.function(input_signature=[tf.TensorSpec([P, N, 5], tf.float32), tf.TensorSpec([P, C, 5], tf.float32)], autograph=False, jit_compile=self.jit_compile and not use_op)
        def fit(nodes, conns):
            if use_op:  # C++ kernels: programs built and run per member (x shared by all)
                acts, aggs = cfg.activation_options, cfg.aggregation_options
                if cfg.feed_forward:  # compile + forward in one kernel pass (no program tensors)
                    y = _fo.evaluate(nodes, conns, x, I, O, acts, aggs, use_op=True, dtype=dt)
                else:
                    prog = _fo.prepare(nodes, conns, I, False, acts, aggs, use_op=True)
                    _, y = _fo.recurrent_step(prog, tf.zeros([P, x.shape[0], N], dt), x, I, O, settle_steps=1,
                                              dtype=dt)
            else:
                y = self._reference_outputs(cfg, nodes, conns, x, P)
            err = tf.square(y - t[None])
            if self.loss == "sse":
                f = self.max_fitness - tf.reduce_sum(err, axis=[1, 2])
            else:
                f = -tf.reduce_mean(err, axis=[1, 2])
            return tf.where(tf.math.is_finite(f), f, tf.constant(-np.inf, dt))

        return fit

    def _reference_outputs(self, cfg, nodes, conns, x, P):
        I, O = self.num_inputs, self.num_outputs
        dt = x.dtype
        n = net.transform(nodes, conns, I, cfg.feed_forward)
        xb = tf.broadcast_to(x[None], [P, x.shape[0], I])
        if cfg.feed_forward:
            return net.forward(n, xb, I, O, cfg.activation_options, cfg.aggregation_options, dt)
        state = net.initial_state(n, x.shape[0], dt)
        _, y = net.recurrent_step(n, state, xb, I, O, cfg.activation_options, cfg.aggregation_options, 1, dt)
        return y

    def check(self, population, config: NEATConfig):
        """``(nodes, conns)`` as float32 tensors after checking that ``config``
        fits this problem (input and output counts) and the population fits
        ``config``; :class:`ConfigError` / :class:`ShapeError` otherwise."""
        check_config_io(config, self.num_inputs, self.num_outputs, f"{type(self).__name__}")
        return check_population(population, config)

    def evaluate(self, population, config: NEATConfig) -> tf.Tensor:
        """Fitness ``[P]`` (``config.fitness_dtype``) of ``population = (nodes, conns)``.

        With the inference kernels (see the class docstring) the genomes
        are compiled into per-member programs and run in one graph call;
        empty slots cost nothing there.  The reference evaluates only the
        used slot range: the node axis is cut after
        the last slot any genome uses, rounded up to a multiple of 8 (one
        compiled program per such width, so a run compiles a handful at
        most).  Empty slots contribute nothing, so the result is the same as
        on the full tensors, while the dense ``[P, N, N]`` network of a
        population of small genomes is many times smaller."""
        nodes, conns = self.check(population, config)
        N0, C0 = nodes.shape[1], conns.shape[1]
        acts, aggs = tuple(config.activation_options), tuple(config.aggregation_options)
        use_op = self.use_op is not False and _fo.op_enabled(acts, aggs, self.use_op)
        if use_op:  # the kernels' program depends on these only: a cheap key, a concrete function
            key = (nodes.shape[0], N0, C0, config.num_inputs, config.num_outputs, config.feed_forward, acts, aggs,
                   self.loss, self.max_fitness, self.inputs.tobytes(), self.targets.tobytes(), self.inputs.shape,
                   self.targets.shape, config.fitness_dtype, "kernels")
            fn = _COMPILED.get(key)
            if fn is None:  # shared by equal problems/configs: no retracing across runs
                fn = _COMPILED[key] = self._compile(config, nodes.shape[0], N0, C0, True).get_concrete_function()
            return fn(nodes, conns)
        wn, wc = (int(w) for w in _used_widths(nodes, conns))
        N = min(N0, max(8, -(-wn // 8) * 8))
        C = C0  # only the node axis is cut: the dense network is [P, N, N]
        nodes, conns = nodes[:, :N], conns[:, :C]
        P = nodes.shape[0]
        key = (repr(config), P, N, C, self.loss, self.max_fitness, self.inputs.tobytes(), self.targets.tobytes(),
               self.inputs.shape, self.targets.shape, self.jit_compile)
        if key not in _COMPILED:  # shared by equal problems/configs: no retracing across runs
            _COMPILED[key] = self._compile(config, P, N, C)
        return _COMPILED[key](nodes, conns)

    def __call__(self, population, config: NEATConfig) -> tf.Tensor:
        return self.evaluate(population, config)


def check_config_io(config, num_inputs: int, num_outputs: int, what: str) -> None:
    """:class:`ConfigError` unless ``config`` is a NEATConfig with these input and output counts."""
    if not isinstance(config, NEATConfig):
        raise ConfigError(f"config must be a NEATConfig, got {type(config).__name__}")
    if config.num_inputs != num_inputs or config.num_outputs != num_outputs:
        raise ConfigError(f"the NEAT config has num_inputs={config.num_inputs}, num_outputs={config.num_outputs}; "
                          f"{what} needs num_inputs={num_inputs}, num_outputs={num_outputs}")


def check_population(population, config: NEATConfig):
    """``(nodes, conns)`` as float32 tensors; :class:`ShapeError` unless they are
    ``[P, max_nodes, 5]`` and ``[P, max_conns, 5]`` of ``config``."""
    if not (isinstance(population, (tuple, list)) and len(population) == 2):
        raise ShapeError("population must be the (nodes, conns) pair returned by NEAT.ask()")
    nodes = tf.convert_to_tensor(population[0], tf.float32)
    conns = tf.convert_to_tensor(population[1], tf.float32)
    n, c = nodes.shape.as_list(), conns.shape.as_list()
    if (len(n) != 3 or len(c) != 3 or n[0] != c[0] or n[1:] != [config.max_nodes, NODE_DIM]
            or c[1:] != [config.max_conns, CONN_DIM]):
        raise ShapeError(f"population must be nodes [P, {config.max_nodes}, {NODE_DIM}] and conns "
                         f"[P, {config.max_conns}, {CONN_DIM}] (max_nodes, max_conns of the config), got nodes {n} "
                         f"and conns {c}")
    return nodes, conns


@tf.function(autograph=False)
def _used_widths(nodes, conns):
    return used_width(node_valid(nodes)), used_width(conn_valid(conns))


def _parity(bits: int):
    xs = np.array(list(itertools.product([0.0, 1.0], repeat=bits)), np.float32)
    ys = (xs.sum(1) % 2)[:, None].astype(np.float32)
    return xs, ys


@register("problem", "xor", doc="2-input XOR for NEAT (fitness 4 - SSE, solved at 3.9).")
class XOR(SupervisedProblem):
    """2-input XOR; fitness ``4 - sum of squared errors`` (solved at 3.9 as in
    neat-python's example)."""

    solved_at = 3.9

    def __init__(self):
        super().__init__(*_parity(2))


@register("problem", "xor3", doc="3-input parity (XOR) for NEAT (fitness 8 - SSE).")
class XOR3(SupervisedProblem):
    """3-input parity; fitness ``8 - sum of squared errors`` (solved at 7.8)."""

    solved_at = 7.8

    def __init__(self):
        super().__init__(*_parity(3))


@register("problem", "neat_parity", doc="n-bit parity for NEAT (fitness 2^n - SSE).")
class Parity(SupervisedProblem):
    """``bits``-input parity (1 when an odd number of inputs is 1) on all
    ``2**bits`` cases; fitness ``2**bits - sum of squared errors``, solved at
    ``0.975 * 2**bits``.  ``Parity(2)`` is XOR, ``Parity(3)`` XOR3."""

    def __init__(self, bits: int = 4):
        if isinstance(bits, bool) or not isinstance(bits, (int, np.integer)) or not 2 <= bits <= 16:
            raise ConfigError(f"bits must be an integer in [2, 16], got {bits!r}")
        super().__init__(*_parity(int(bits)))
        self.solved_at = 0.975 * self.max_fitness


@register("problem", "neat_multiplexer", doc="Boolean multiplexer for NEAT (fitness 2^n - SSE).")
class Multiplexer(SupervisedProblem):
    """The ``address_bits``-address multiplexer: inputs are ``a`` address
    bits then ``2**a`` data bits, the target is the data bit the address
    selects (``address_bits=2``: the 6-multiplexer, 64 cases).  Fitness
    ``cases - sum of squared errors``, solved at ``0.975 * cases``."""

    def __init__(self, address_bits: int = 2):
        a = address_bits
        if isinstance(a, bool) or not isinstance(a, (int, np.integer)) or not 1 <= a <= 3:
            raise ConfigError(f"address_bits must be an integer in [1, 3], got {a!r}")
        a = int(a)
        xs = np.array(list(itertools.product([0.0, 1.0], repeat=a + 2 ** a)), np.float32)
        addr = (xs[:, :a] @ (2.0 ** np.arange(a - 1, -1, -1))).astype(int)
        ys = xs[np.arange(len(xs)), a + addr][:, None]
        super().__init__(xs, ys)
        self.solved_at = 0.975 * self.max_fitness


@register("problem", "neat_function_fit", doc="Fit y = f(x) on a grid with NEAT (fitness -MSE).")
class FunctionFit(SupervisedProblem):
    """Fit a 1-D function on ``num_points`` points of ``[low, high]``;
    fitness ``-mean squared error``.  Example: ``FunctionFit(np.sin, -3, 3)``."""

    def __init__(self, fn=None, low: float = -1.0, high: float = 1.0, num_points: int = 32):
        fn = fn or (lambda x: x ** 2)
        x = np.linspace(low, high, num_points, dtype=np.float32)[:, None]
        super().__init__(x, np.asarray(fn(x), np.float32), loss="mse")
