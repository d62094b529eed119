"""``GeneticProgramming``: tensorized tree GP behind the ask/tell seam."""

from __future__ import annotations

import dataclasses
import math
from typing import Mapping, Sequence

import numpy as np
import tensorflow as tf

from tfevo.core import ConfigError, SeedStream, check_fitness, check_int, note_nonfinite, sanitize_fitness
from tfevo.gp import operators as ops
from tfevo.gp.generation import DEFAULT_DEPTH, METHODS, TerminalSet, generate, grow_probability
from tfevo.gp.selection import SELECTIONS, demote_duplicates, demote_rule, parsimony, select
from tfevo.gp.trees import FunctionSet, Trees, check_trees, get_function
from tfevo.registry import register

__all__ = ["GPConfig", "GeneticProgramming", "OPERATORS"]

#: variation operator names usable in ``GPConfig.operators``.
OPERATORS = ("crossover", "leaf_crossover", "subtree", "hoist", "point", "multi_point",
             "insert", "delete", "constant", "multi_constant")


@dataclasses.dataclass
class GPConfig:
    """Settings of a :class:`GeneticProgramming` run.

    Attributes:
      popsize: number of trees ``P``.
      max_len: ``L_max``, the node budget of every tree.
      num_vars: number of input variables.
      num_outputs: ``K``; ``K > 1`` evolves multi-output trees.
      functions: function names (see :func:`tfevo.gp.trees.builtin_functions`).
      p_const, const_range, constants: leaf settings (:class:`TerminalSet`;
        ``p_const="auto"`` is gplearn's ``1 / (num_vars + 1)``).
      init_depth: ``(min, max)`` depth of the initial trees, both ends
        included (the root is depth 0), as in gplearn (its ``_Program``
        draws ``randint(min, max + 1)``); default ``(2, 5)``, one level
        shallower than gplearn's ``(2, 6)`` (docs/gp.md says why).
      init_method: ``"half_and_half"``, ``"full"`` or ``"grow"``.
      grow_p_func: grow's probability of a function at an internal node
        (initial trees and subtree-mutation donors): ``"deap"`` (the
        default, ``n_functions / (n_functions + n_terminals)``), ``"gplearn"``
        (``min(1, (n_functions + 1) / (n_functions + num_vars))``: grow =
        full with one input) or a number
        (:func:`~tfevo.gp.generation.grow_probability`).
      selection: ``"tournament"``, ``"truncation"``, ``"roulette"``, ``"rank"``.
      tournament_size, truncation_ratio, rank_pressure: their parameters.
      survival_rate: fraction of the best trees allowed to be parents.
      elite: number of best trees copied unchanged (int) or a fraction (<1).
      elite_fitness: what "best" means for the elite: ``"raw"`` (the
        default: the fitness given to ``tell``, so the most accurate tree
        met so far is never lost, whatever its length) or ``"selection"``
        (the fitness the tournaments see, with the parsimony penalty and
        duplicate demotion: the tree gplearn's tournaments rank first,
        which keeps returned programs shorter on small data sets).
      parsimony: coefficient ``c``: selection uses ``fitness - c * length``;
        ``"auto"`` recomputes ``c`` every generation from the population
        (gplearn's covariant parsimony, :func:`~tfevo.gp.selection.covariant_parsimony`).
      operators: ``{name: probability}`` over :data:`OPERATORS`; the rest of
        the probability mass is plain reproduction.
      crossover_p_func: weight of a function node (a leaf weighs
        ``1 - crossover_p_func``) when crossover picks its points; 0.9 is
        gplearn's/Koza's bias to internal points, 0.5 uniform.
      subtree_depth: depth range of the random donor trees of subtree
        mutation (made with ``init_method``); None: ``init_depth``.
      p_point: per-node probability of ``multi_point``.
      p_leaf: leaf probability of ``leaf_crossover``.
      const_sigma, p_multi_constant: constant mutation settings.
      hoist_root_only: Koza/DEAP hoist (child = subtree of parent) if True,
        gplearn hoist otherwise (its points weighted by ``crossover_p_func``).
      demote_duplicates: parent selection ranks a tree whose raw fitness
        equals a better or equally good but shorter tree's below every
        distinct tree (True or ``"error"``; :func:`~tfevo.gp.selection.demote_duplicates`),
        so tournaments keep drawing on distinct programs after the population
        converges and a longer equal-error spelling never outranks the
        shortest one; ``"error_and_length"``: only trees of equal raw fitness
        and equal length are duplicates; False: off (gplearn).
      jit_compile: XLA-compile ``tell``.
    """

    popsize: int = 1000
    max_len: int = 128
    num_vars: int = 1
    num_outputs: int = 1
    functions: Sequence[str] = ("add", "sub", "mul", "div")
    p_const: float | str = "auto"
    const_range: tuple | None = (-1.0, 1.0)
    constants: Sequence[float] = ()
    init_depth: tuple = DEFAULT_DEPTH
    init_method: str = "half_and_half"
    grow_p_func: float | str = "deap"
    selection: str = "tournament"
    tournament_size: int = 20
    truncation_ratio: float = 0.2
    rank_pressure: float = 1.5
    survival_rate: float = 1.0
    elite: float = 1
    elite_fitness: str = "raw"
    parsimony: float | str = 0.0
    operators: Mapping[str, float] = dataclasses.field(
        default_factory=lambda: {"crossover": 0.9, "subtree": 0.01, "hoist": 0.01, "multi_point": 0.01})
    crossover_p_func: float = 0.9
    subtree_depth: tuple | None = None
    p_point: float = 0.05
    p_leaf: float = 0.1
    const_sigma: float = 0.1
    p_multi_constant: float = 0.5
    hoist_root_only: bool = False
    demote_duplicates: bool = True
    jit_compile: bool = False

    def validate(self) -> None:
        """Raises :class:`ConfigError` naming the first bad setting."""
        # counts and depths are integers: int() would run 64.5 as 64 and "64" as 64 without a word
        for name in ("popsize", "max_len", "num_vars", "num_outputs", "tournament_size"):
            check_int(getattr(self, name), name, integral_float=True)
        for name in ("init_depth", "subtree_depth"):
            depth = getattr(self, name)
            if depth is not None and (isinstance(depth, (str, bytes)) or np.ndim(depth) != 1 or len(depth) != 2):
                raise ConfigError(f"{name} must be (min, max), got {depth!r}")
            for d in depth if depth is not None else ():
                check_int(d, f"{name} (min, max)", integral_float=True)
        if int(self.popsize) < 2:
            raise ConfigError(f"popsize must be >= 2, got {self.popsize}")
        if int(self.max_len) < 3:
            raise ConfigError(f"max_len must be >= 3, got {self.max_len}")
        if int(self.num_outputs) < 1:
            raise ConfigError(f"num_outputs must be >= 1, got {self.num_outputs}")
        if int(self.num_outputs) > 1 and int(self.max_len) < 3 * int(self.num_outputs) - 1 + int(self.num_outputs):
            raise ConfigError(f"max_len={self.max_len} too small for {self.num_outputs} outputs")
        FunctionSet(self.functions)
        if self.init_method not in METHODS:
            raise ConfigError(f"init_method must be one of {METHODS}, got {self.init_method!r}")
        d0, d1 = self.init_depth
        if not (0 <= int(d0) <= int(d1)):
            raise ConfigError(f"init_depth must be (min, max) with 0 <= min <= max, got {self.init_depth}")
        if self.subtree_depth is not None:
            s0, s1 = self.subtree_depth
            if not (0 <= int(s0) <= int(s1)):
                raise ConfigError(f"subtree_depth must be None or (min, max) with 0 <= min <= max, "
                                  f"got {self.subtree_depth}")
        grow_probability(self.grow_p_func, FunctionSet(self.functions), self.terminals(), "grow_p_func")
        if self.selection not in SELECTIONS:
            raise ConfigError(f"unknown selection {self.selection!r}; known: {', '.join(SELECTIONS)}")
        if int(self.tournament_size) < 1:
            raise ConfigError(f"tournament_size must be >= 1, got {self.tournament_size}")
        if not (0.0 < float(self.truncation_ratio) <= 1.0):
            raise ConfigError(f"truncation_ratio must be in (0, 1], got {self.truncation_ratio}")
        if not (1.0 <= float(self.rank_pressure) <= 2.0):
            raise ConfigError(f"rank_pressure must be in [1, 2], got {self.rank_pressure}")
        if not (0.0 < float(self.survival_rate) <= 1.0):
            raise ConfigError(f"survival_rate must be in (0, 1], got {self.survival_rate}")
        if self.n_elite() >= int(self.popsize) or self.elite < 0:
            raise ConfigError(f"elite must be >= 0 and leave room for children, got {self.elite}")
        if isinstance(self.parsimony, str):
            if self.parsimony != "auto":
                raise ConfigError(f"parsimony must be a number >= 0 or 'auto', got {self.parsimony!r}")
        elif not float(self.parsimony) >= 0:
            raise ConfigError(f"parsimony must be a number >= 0 or 'auto', got {self.parsimony}")
        total = 0.0
        for k, p in dict(self.operators).items():
            if k not in OPERATORS:
                raise ConfigError(f"unknown operator {k!r}; known: {', '.join(OPERATORS)}")
            if not (0.0 <= float(p) <= 1.0):
                raise ConfigError(f"probability of {k!r} must be in [0, 1], got {p}")
            total += float(p)
        if total > 1.0 + 1e-6:
            raise ConfigError(f"operator probabilities sum to {total:.4g} > 1")
        for name in ("p_point", "p_leaf", "p_multi_constant", "crossover_p_func"):
            if not (0.0 <= float(getattr(self, name)) <= 1.0):
                raise ConfigError(f"{name} must be in [0, 1], got {getattr(self, name)}")
        demote_rule(self.demote_duplicates)
        if self.elite_fitness not in ("selection", "raw"):
            raise ConfigError(f"elite_fitness must be 'selection' or 'raw', got {self.elite_fitness!r}")
        if float(self.const_sigma) < 0:
            raise ConfigError(f"const_sigma must be >= 0, got {self.const_sigma}")
        self.terminals()

    def n_elite(self) -> int:
        """The number of elites as an integer."""
        e = float(self.elite)
        return int(round(e * int(self.popsize))) if 0 < e < 1 else int(e)

    def terminals(self) -> TerminalSet:
        """The :class:`TerminalSet` of these settings."""
        p = self.p_const if isinstance(self.p_const, str) else float(self.p_const)
        return TerminalSet(int(self.num_vars), p, self.const_range, tuple(self.constants))


@register("strategy", "gp")
class GeneticProgramming(tf.Module):
    """Tensorized tree genetic programming (EvoGP-style) with ask/tell.

    The population is a :class:`~tfevo.gp.trees.Trees` triple of
    ``[P, L_max]`` tensors kept in ``tf.Variable`` s, as are the best tree,
    the generation counter, the count of rejected (over-long) children and
    the :class:`~tfevo.core.SeedStream`; ``tf.train.Checkpoint(gp=algo)``
    saves and restores a run exactly.

    Example:

    >>> import numpy as np
    >>> from tfevo.gp import GeneticProgramming, GPConfig, mse
    >>> x = np.linspace(-1, 1, 64, dtype=np.float32)[:, None]
    >>> y = x[:, 0] ** 2 + x[:, 0]
    >>> gp = GeneticProgramming(GPConfig(popsize=200, num_vars=1), seed=0)
    >>> for _ in range(5):
    ...     trees = gp.ask()
    ...     gp.tell(trees, -mse(trees, x, y))

    Args:
      config: a :class:`GPConfig` (or a dict of its fields).
      seed: integer seed; the same seed gives the same run.
    """

    def __init__(self, config: GPConfig | Mapping | None = None, seed: int = 0, name: str | None = None, **kw):
        super().__init__(name=name)
        if config is None:
            config = GPConfig(**kw)
        elif isinstance(config, Mapping):
            config = GPConfig(**{**dict(config), **kw})
        elif kw:
            config = dataclasses.replace(config, **kw)
        config.validate()
        self.config = config
        self.functions = FunctionSet(config.functions)
        # functions that may occur in trees (glue "add" of multi-output trees)
        names = list(self.functions.names)
        if config.num_outputs > 1 and "add" not in names:
            names.append("add")
        self.eval_functions = FunctionSet(names)
        self.terminals = config.terminals()
        self.popsize, self.max_len = int(config.popsize), int(config.max_len)
        self.num_outputs = int(config.num_outputs)
        self.n_elite = config.n_elite()
        self.seeds = SeedStream(seed)
        P, L = self.popsize, self.max_len
        self._step = _step_for(config, self.functions, self.eval_functions, self.terminals)
        self._num_vars = tf.constant(int(config.num_vars), tf.int32)
        init = Trees(*self._step.init_fn(self.seeds.next(), self._num_vars))
        self.types = tf.Variable(init.types, trainable=False, name="types")
        self.values = tf.Variable(init.values, trainable=False, name="values")
        self.sizes = tf.Variable(init.sizes, trainable=False, name="sizes")
        self.best_types = tf.Variable(init.types[0], trainable=False, name="best_types")
        self.best_values = tf.Variable(init.values[0], trainable=False, name="best_values")
        self.best_sizes = tf.Variable(init.sizes[0], trainable=False, name="best_sizes")
        self.best_fitness = tf.Variable(-np.inf, dtype=tf.float32, trainable=False, name="best_fitness")
        self.generation = tf.Variable(0, dtype=tf.int64, trainable=False, name="generation")
        self.rejected = tf.Variable(0, dtype=tf.int64, trainable=False, name="rejected")

    # -- public API --------------------------------------------------------
    def ask(self) -> Trees:
        """The current population: :class:`Trees` of ``[P, L_max]`` tensors."""
        return Trees(tf.identity(self.types), tf.identity(self.values), tf.identity(self.sizes))

    def tell(self, trees, fitness) -> None:
        """Breeds the next population from ``trees`` and their fitness.

        ``fitness``: float32 ``[P]``, higher is better; NaN/-inf are worst.
        """
        t = check_trees(trees, self.popsize, self.max_len)
        f = check_fitness(fitness, self.popsize)
        note_nonfinite(self, f)
        out = self._step.fn(t.types, t.values, t.sizes, f, self.best_types, self.best_values,
                            self.best_sizes, self.best_fitness, self.seeds.next(), self._num_vars)
        for var, val in zip((self.types, self.values, self.sizes, self.best_types, self.best_values,
                             self.best_sizes, self.best_fitness), out[:7]):
            var.assign(val)
        self.rejected.assign_add(tf.cast(out[7], tf.int64))
        self.generation.assign_add(1)

    @property
    def num_traces(self) -> int:
        """How often the generation step of this configuration was traced
        (shared by every run with the same settings; 1 in normal use)."""
        return self._step.traces

    @property
    def num_nonfinite(self) -> int:
        """How many members had non-finite fitness in the ``tell`` calls made eagerly so far."""
        return getattr(self, "_num_nonfinite", 0)

    @property
    def best(self) -> tuple[Trees, tf.Tensor]:
        """(best tree seen as a one-tree :class:`Trees` ``[1, L]``, its fitness)."""
        return (Trees(self.best_types[None], self.best_values[None], self.best_sizes[None]),
                tf.identity(self.best_fitness))

    def evaluate(self, trees, x, use_op: bool | None = None):
        """Outputs of ``trees`` on ``x`` with this run's functions/outputs."""
        from tfevo.gp.evaluate import evaluate

        return evaluate(trees, x, self.num_outputs, self.eval_functions, use_op)


class _Step:
    """The compiled generation step of one configuration (selection,
    variation, elitism, best-so-far update) as a pure function of the
    population, the best tree, a seed and the number of variables; traced
    once and shared by every run with the same settings (whatever its
    number of variables)."""

    def __init__(self, config: GPConfig, functions: FunctionSet, eval_functions: FunctionSet,
                 terminals: TerminalSet):
        self.config = config
        self.functions = functions
        self.eval_functions = eval_functions
        self.terminals = dataclasses.replace(terminals)  # own copy: its runtime_num_vars is set while tracing
        self.popsize, self.max_len = int(config.popsize), int(config.max_len)
        self.num_outputs = int(config.num_outputs)
        self.n_elite = config.n_elite()
        self.traces = 0
        P, L = self.popsize, self.max_len
        sig = [tf.TensorSpec([P, L], tf.int32), tf.TensorSpec([P, L], tf.float32),
               tf.TensorSpec([P, L], tf.int32), tf.TensorSpec([P], tf.float32),
               tf.TensorSpec([L], tf.int32), tf.TensorSpec([L], tf.float32), tf.TensorSpec([L], tf.int32),
               tf.TensorSpec([], tf.float32), tf.TensorSpec([2], tf.int32), tf.TensorSpec([], tf.int32)]
        self.fn = tf.function(self._tell, input_signature=sig, jit_compile=bool(config.jit_compile),
                                 autograph=False)
        self.init_fn = tf.function(self._init, input_signature=[tf.TensorSpec([2], tf.int32),
                                                                 tf.TensorSpec([], tf.int32)], autograph=False)

    def _vary(self, seed, parents: Trees, donors: Trees):
        c = self.config
        P = self.popsize
        probs = {k: float(p) for k, p in dict(c.operators).items() if float(p) > 0}
        names = list(probs)
        s = tf.random.experimental.stateless_split(seed, len(names) + 1)
        u = tf.random.stateless_uniform([P], s[0])
        edges = np.cumsum([probs[n] for n in names])
        choice = tf.searchsorted(tf.constant(edges, tf.float32), u, side="right")  # len(names) = reproduce
        out = parents
        rejected = tf.zeros([], tf.int32)
        for k, name in enumerate(names):
            sk = s[k + 1]
            use = tf.equal(choice, k)
            p = probs[name]
            cap = min(P, int(math.ceil(P * p + 4.0 * math.sqrt(P * p * (1.0 - p)) + 8)))
            if cap >= P:  # common operator: run it on every row
                child, ok = self._apply(name, sk, parents, donors)
                out = Trees(*(tf.where(use[:, None], a, b) for a, b in zip(child, out)))
                used_ok = use & ok
                n_rej = tf.reduce_sum(tf.cast(use & ~ok, tf.int32))
            else:  # rare operator: run it on a fixed-capacity batch of the rows that use it
                idx = tf.argsort(tf.cast(~use, tf.int32), stable=True)[:cap]
                sub_p = Trees(*(tf.gather(a, idx) for a in parents))
                sub_d = Trees(*(tf.gather(a, idx) for a in donors))
                child, ok = self._apply(name, sk, sub_p, sub_d)
                valid = tf.gather(use, idx)
                rows = [tf.where(valid[:, None], a, tf.gather(b, idx)) for a, b in zip(child, out)]
                out = Trees(*(tf.tensor_scatter_nd_update(b, idx[:, None], r) for b, r in zip(out, rows)))
                n_rej = tf.reduce_sum(tf.cast(valid & ~ok, tf.int32))
            if name in ("crossover", "leaf_crossover", "subtree", "insert"):
                rejected += n_rej
        return out, rejected

    def _apply(self, name, sk, parents, donors):
        c = self.config
        if name == "crossover":
            return ops.one_point_crossover(sk, parents, donors, float(c.crossover_p_func))
        if name == "leaf_crossover":
            return ops.leaf_biased_crossover(sk, parents, donors, c.p_leaf)
        if name == "subtree":
            depth = c.init_depth if c.subtree_depth is None else c.subtree_depth
            return ops.subtree_mutation(sk, parents, self.functions, self.terminals, depth, self.max_len,
                                        c.init_method, float(c.crossover_p_func), c.grow_p_func)
        if name == "hoist":
            return ops.hoist_mutation(sk, parents, c.hoist_root_only, float(c.crossover_p_func))
        if name == "point":
            return ops.point_mutation(sk, parents, self.functions, self.terminals)
        if name == "multi_point":
            return ops.multi_point_mutation(sk, parents, self.functions, self.terminals, c.p_point)
        if name == "insert":
            return ops.insert_mutation(sk, parents, self.functions, self.terminals)
        if name == "delete":
            return ops.delete_mutation(sk, parents)
        if name == "constant":
            return ops.constant_mutation(sk, parents, c.const_sigma)
        return ops.multi_constant_mutation(sk, parents, c.const_sigma, c.p_multi_constant)

    def _tell(self, types, values, sizes, fitness, best_t, best_v, best_s, best_f, seed, num_vars):
        self.traces += 1
        self.terminals.runtime_num_vars = num_vars
        try:
            return self._breed(types, values, sizes, fitness, best_t, best_v, best_s, best_f, seed)
        finally:
            self.terminals.runtime_num_vars = None

    def _init(self, seed, num_vars):
        self.terminals.runtime_num_vars = num_vars
        try:
            c = self.config
            return generate(seed, self.popsize, self.max_len, self.functions, self.terminals, c.init_depth,
                            c.init_method, self.num_outputs, c.grow_p_func)
        finally:
            self.terminals.runtime_num_vars = None

    def _breed(self, types, values, sizes, fitness, best_t, best_v, best_s, best_f, seed):
        c = self.config
        P, E = self.popsize, self.n_elite
        fitness = sanitize_fitness(fitness)
        trees = Trees(types, values, sizes)
        # best so far
        i = tf.cast(tf.argmax(fitness), tf.int32)
        better = fitness[i] > best_f
        best = (tf.where(better, types[i], best_t), tf.where(better, values[i], best_v),
                tf.where(better, sizes[i], best_s), tf.where(better, fitness[i], best_f))
        use_parsimony = c.parsimony == "auto" or float(c.parsimony) > 0
        sel_fit = parsimony(fitness, sizes[:, 0], c.parsimony) if use_parsimony else fitness
        rule = demote_rule(c.demote_duplicates)
        if rule is not None:
            sel_fit = demote_duplicates(sel_fit, sizes[:, 0], fitness, rule)
        s = tf.random.experimental.stateless_split(seed, 3)
        kw = dict(tournament_size=c.tournament_size, truncation_ratio=c.truncation_ratio,
                  rank_pressure=c.rank_pressure)
        pa = select(c.selection, s[0], sel_fit, P, c.survival_rate, **kw)
        pb = select(c.selection, s[1], sel_fit, P, c.survival_rate, **kw)
        parents = Trees(*(tf.gather(a, pa) for a in trees))
        donors = Trees(*(tf.gather(a, pb) for a in trees))
        children, rejected = self._vary(s[2], parents, donors)
        if E > 0:
            rank_fit = fitness if c.elite_fitness == "raw" else sel_fit
            elite = tf.argsort(rank_fit, direction="DESCENDING", stable=True)[:E]
            children = Trees(*(tf.concat([tf.gather(a, elite), b[: P - E]], 0) for a, b in zip(trees, children)))
        return (children.types, children.values, children.sizes) + best + (rejected,)


_STEPS: dict = {}
_MAX_STEPS = 16


def _step_key(config: GPConfig, functions: FunctionSet, eval_functions: FunctionSet) -> str:
    fields = {k: (list(dict(v).items()) if isinstance(v, Mapping) else v)  # operators draw in this order
              for k, v in dataclasses.asdict(config).items()}
    fields["num_vars"] = int(config.num_vars) > 0  # the width itself is a runtime input
    # the function objects themselves: a re-registered user function is a new step
    fns = [(f.name, f.fid, id(f)) for f in list(functions.functions) + list(eval_functions.functions)]
    return repr((sorted(fields.items()), fns))


def _step_for(config, functions, eval_functions, terminals) -> _Step:
    key = _step_key(config, functions, eval_functions)
    step = _STEPS.get(key)
    if step is None:
        if len(_STEPS) >= _MAX_STEPS:
            _STEPS.pop(next(iter(_STEPS)))
        step = _STEPS[key] = _Step(config, functions, eval_functions, terminals)
    return step
