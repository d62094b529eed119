"""Every algorithm family behind one seam: a flat genotype ``float32 [P, D]``.

The Trainer drives any ask/tell algorithm with one evaluate function.  What
differs between families is how a member is written down and read: a flat
vector of network weights (the strategies, MAP-Elites over policies), a NEAT
genome ``(nodes, conns)``, a CPPN painting a HyperNEAT substrate, a GP tree
``(types, values, sizes)``.  A :class:`Family` says, for one of them, which
policy reads the flat form (so the shared evaluators roll it out), which
algorithm evolves it (wrapped in :class:`FlatAlgorithm` when its population is
a structure, so ``ask`` gives and ``tell`` takes the flat form, exactly
invertible), and which picture ``tfevo plot`` draws of a run.  The builders
pick the family from the config (:func:`family_of`) and share everything else.
"""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path
from typing import Any, Callable

import numpy as np
import tensorflow as tf

from tfevo.core import ConfigError, suggest_argument
from tfevo.training.parts import _key_named, check_numbers

__all__ = ["FlatAlgorithm", "Family", "Parts", "family_of", "check_params"]


class FlatAlgorithm(tf.Module):
    """An ask/tell algorithm over structured populations, seen as ``float32 [P, D]``.

    ``ask()`` returns ``encode(algorithm.ask())``; ``tell(x, fitness, *extras)``
    calls ``algorithm.tell(decode(x), fitness, *extras)``.  ``decode`` must
    invert ``encode`` exactly, so the algorithm sees the population it asked for.
    The wrapped algorithm is checkpointed as ``algorithm``.
    """

    def __init__(self, algorithm, encode: Callable, decode: Callable, name: str | None = None):
        super().__init__(name=name)
        self.algorithm = algorithm
        object.__setattr__(self, "_encode", encode)  # plain functions, not tracked
        object.__setattr__(self, "_decode", decode)
        self.popsize = int(algorithm.popsize)

    def ask(self) -> tf.Tensor:
        return self._encode(self.algorithm.ask())

    def tell(self, population, fitness, *extras):
        return self.algorithm.tell(self._decode(population), fitness, *extras)

    def metrics(self) -> dict:
        fn = getattr(self.algorithm, "metrics", None)
        return dict(fn()) if callable(fn) else {}


def check_params(where: str, owner: str, given: dict, accepted, reserved: dict | None = None) -> None:
    """:class:`ConfigError` for a parameter ``owner`` does not take (naming ``where.key``,
    the closest accepted name and every accepted one) or one set elsewhere (``reserved``:
    name -> where it is set)."""
    accepted = list(accepted)
    for k in given:
        if reserved and k in reserved:
            raise ConfigError(f"{where}.{k}: set by {reserved[k]}, not in {where}")
        if k not in accepted:
            close = suggest_argument(k, accepted)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(f"{where}.{k}: {owner} has no parameter {k!r}{hint}; {owner} takes: "
                              + ", ".join(accepted))


def _prefixed(where: str, fn, *args, _keys=(), **kwargs):
    """``fn(*args, **kwargs)`` with a ConfigError's message prefixed by the config table it came from,
    and by the key of ``where`` (one of ``_keys`` or of ``kwargs``) the message starts with."""
    try:
        return fn(*args, **kwargs)
    except ConfigError as e:
        key = _key_named([*_keys, *kwargs], e) if where.endswith("params") else None
        raise ConfigError(f"{where}.{key}: {e}" if key else f"{where}: {e}") from None
    except (TypeError, ValueError) as e:  # a value the callee could not read (int('abc'), 0.5 <= 'abc')
        raise ConfigError(f"{where}: {e}") from None


@dataclasses.dataclass
class Parts:
    """What a family builds before its algorithm: the policy reading ``[P, D]``, its size
    ``D``, the Keras population model (vector policies), and the genome settings (NEAT, GP)."""

    policy: Any
    num_params: int
    model: Any = None
    genome_config: Any = None  # NEATConfig / GPConfig of structured families


class Family:
    """How runs of one family are built: the policy, the algorithm and the picture.

    The base class builds flat-vector strategies over Keras policies (their
    members already are ``[P, D]``, no picture beyond the learning curve);
    each other family overrides the three hooks."""

    name = "vector"
    #: XLA for the in-graph rollout when the config does not ask for it: "auto" tries it
    ingraph_jit: Any = "auto"

    def param_names(self, name: str) -> list[str] | None:
        """The ``algorithm.params`` keys algorithm ``name`` of this family reads (``None``: it
        depends on other params). Raises :class:`ConfigError` for an unknown name."""
        from tfevo.training.parts import strategy_arguments

        return strategy_arguments(name)

    def policy(self, cfg, obs_shape, action_spec) -> Parts:
        """The policy over flat members and ``D`` (the algorithm is not built)."""
        from tfevo.training.parts import make_policy

        policy, model = make_policy(cfg, obs_shape, action_spec)
        return Parts(policy, int(model.num_params), model=model)

    def algorithm(self, cfg, parts: Parts):
        """The algorithm, with ``ask() -> [P, D]`` and ``tell([P, D], fitness, ...)``."""
        from tfevo.training.parts import _member_init_fn, make_algorithm

        seed = cfg.run.seed
        init = parts.model.init_params(1, seed)[0]
        return make_algorithm(cfg.algorithm.name, parts.num_params, cfg.algorithm.popsize, seed,
                              cfg.algorithm.params, init, init_fn=_member_init_fn(parts.model, cfg.algorithm.name))

    def picture(self, cfg, parts: Parts, algorithm, best, run_dir: Path) -> Path | None:
        """The family's own picture of a run (``None``: the learning curve says it all)."""
        return None


def _flat_genomes(cfg_neat):
    """(encode, decode) between NEAT populations and ``float32 [P, N*5 + C*5]``."""
    from tfevo.neat.genome import CONN_DIM, NODE_DIM

    n = cfg_neat.max_nodes * NODE_DIM

    def encode(pop):
        nodes, conns = pop
        P = tf.shape(nodes)[0]
        return tf.concat([tf.reshape(nodes, [P, -1]), tf.reshape(conns, [P, -1])], 1)

    def decode(x):
        x = tf.convert_to_tensor(x, tf.float32)
        P = tf.shape(x)[0]
        return (tf.reshape(x[:, :n], [P, cfg_neat.max_nodes, NODE_DIM]),
                tf.reshape(x[:, n:], [P, cfg_neat.max_conns, CONN_DIM]))

    return encode, decode


class NEATFamily(Family):
    """NEAT genomes as networks (policy.kind neat, feed-forward or recurrent) or as
    CPPNs painting a layered substrate (policy.kind hyperneat)."""

    name = "neat"
    RESERVED = {"num_inputs": "the environment's observation size", "pop_size": "algorithm.popsize",
                "num_outputs": "the environment's action space"}

    def param_names(self, name: str) -> list[str]:
        from tfevo.neat import NEATConfig

        return [f.name for f in dataclasses.fields(NEATConfig) if f.name not in self.RESERVED] + ["jit_compile"]

    def policy(self, cfg, obs_shape, action_spec) -> Parts:
        from tfevo.neat import NEATConfig, NEATPolicy

        params = {k: v for k, v in cfg.algorithm.params.items() if k != "jit_compile"}
        check_params("algorithm.params", "neat", params, self.param_names("neat"), self.RESERVED)
        obs_dim, out = int(np.prod(obs_shape)), int(action_spec.policy_output_size)
        pp = dict(cfg.policy.params)
        if cfg.policy.kind == "neat":
            check_params("policy.params", "the neat policy", pp, ["settle_steps"])
            check_numbers("policy.params", "the neat policy", NEATPolicy.__init__, pp)
            ncfg = _prefixed("algorithm.params", NEATConfig, num_inputs=obs_dim, num_outputs=out,
                             pop_size=cfg.algorithm.popsize, **params)
            policy = _prefixed("policy.params", NEATPolicy, ncfg, action_spec, **pp)
        else:
            from tfevo.neat.hyperneat import HyperNEAT
            from tfevo.neat.hyperneat_policy import HyperNEATPolicy, layered_substrate

            check_params("policy.params", "the hyperneat policy", pp,
                         ["weight_threshold", "max_weight", "output_activation"])
            from tfevo.neat.functions import activation_id

            _prefixed("policy.activation", activation_id, cfg.policy.activation)
            sub = layered_substrate(obs_dim, cfg.policy.hidden, out)
            check_numbers("policy.params", "the hyperneat policy", HyperNEAT.__init__, pp)
            hn = _prefixed("policy", HyperNEAT, sub, activation=cfg.policy.activation, **pp)
            ncfg = _prefixed("algorithm.params", hn.cppn_config, pop_size=cfg.algorithm.popsize, **params)
            policy = HyperNEATPolicy(hn, ncfg, action_spec)
        return Parts(policy, int(policy.num_params), genome_config=ncfg)

    def algorithm(self, cfg, parts: Parts):
        from tfevo.neat import NEAT

        ncfg = parts.genome_config
        algo = NEAT(ncfg, seed=cfg.run.seed, jit_compile=bool(cfg.algorithm.params.get("jit_compile", False)))
        return FlatAlgorithm(algo, *_flat_genomes(ncfg), name="neat_flat")

    def picture(self, cfg, parts, algorithm, best, run_dir):
        from tfevo.neat.export import draw

        ncfg = parts.genome_config
        nodes, conns = (t[0].numpy() for t in _flat_genomes(ncfg)[1](best[None]))
        what = "HyperNEAT CPPN" if cfg.policy.kind == "hyperneat" else (
            "NEAT network" if ncfg.feed_forward else "recurrent NEAT network")
        out = Path(run_dir) / "network.png"
        fig = draw(nodes, conns, ncfg, path=str(out), title=f"{cfg.name}: best {what}")
        import matplotlib.pyplot as plt

        plt.close(fig)
        return out


class GPFamily(Family):
    """Multi-output tree-GP policies: one tree output per action (or action dimension)."""

    name = "gp"
    ingraph_jit = False  # the tree evaluation kernel (custom_ops/gp_eval.cc) has no XLA form

    RESERVED = {"num_vars": "the environment's observation size", "popsize": "algorithm.popsize",
                "num_outputs": "the environment's action space"}

    def param_names(self, name: str) -> list[str]:
        from tfevo.gp import GPConfig

        return [f.name for f in dataclasses.fields(GPConfig) if f.name not in self.RESERVED]

    def policy(self, cfg, obs_shape, action_spec) -> Parts:
        from tfevo.gp import GPConfig, GPPolicy

        params = dict(cfg.algorithm.params)
        check_params("algorithm.params", "gp", params, self.param_names("gp"), self.RESERVED)
        obs_dim, out = int(np.prod(obs_shape)), int(action_spec.policy_output_size)
        gcfg = GPConfig(popsize=cfg.algorithm.popsize, num_vars=obs_dim, num_outputs=out, **params)
        _prefixed("algorithm.params", gcfg.validate, _keys=params)
        pp = dict(cfg.policy.params)
        check_params("policy.params", "the gp_tree policy", pp, ["use_op"])
        if not isinstance(pp.get("use_op", False), bool):
            raise ConfigError(f"policy.params.use_op: true (the C++ kernel) or false (the TensorFlow reference), or "
                              f"leave it out (the kernel where it can run); got {pp['use_op']!r}")
        functions = list(gcfg.functions) + (["add"] if out > 1 and "add" not in gcfg.functions else [])
        discrete = bool(action_spec.discrete)
        policy = _prefixed("policy", GPPolicy, out, num_actions=action_spec.num_actions if discrete else 0,
                           low=0.0 if discrete else action_spec.low, high=0.0 if discrete else action_spec.high,
                           functions=functions, squash=cfg.policy.continuous, **pp)
        return Parts(policy, 3 * int(gcfg.max_len), genome_config=gcfg)

    def algorithm(self, cfg, parts: Parts):
        from tfevo.gp import GeneticProgramming, GPPolicy

        algo = GeneticProgramming(parts.genome_config, seed=cfg.run.seed)
        return FlatAlgorithm(algo, GPPolicy.pack, GPPolicy.unpack, name="gp_flat")

    def picture(self, cfg, parts, algorithm, best, run_dir):
        from tfevo.gp import GPPolicy, to_sympy

        k = parts.policy.num_outputs
        trees = tuple(t.numpy() for t in GPPolicy.unpack(best[None]))
        exprs = to_sympy(trees, 0, num_outputs=k, simplify=True)
        exprs = exprs if isinstance(exprs, list) else [exprs]
        names = [f"action {i}" if parts.policy.num_actions else f"a{i}" for i in range(k)]
        lines = [f"{n} = {e}" for n, e in zip(names, exprs)]
        (Path(run_dir) / "formula.txt").write_text("\n".join(lines) + "\n")
        return _text_png(Path(run_dir) / "formula.png", f"{cfg.name}: best GP policy (x_i = observation i)", lines)


def _text_png(out: Path, title: str, lines) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import textwrap

    wrapped = [w for line in lines for w in textwrap.wrap(line, 110, subsequent_indent="    ") or [""]]
    fig = plt.figure(figsize=(10, 1.0 + 0.28 * len(wrapped)), dpi=110)
    fig.suptitle(title)
    fig.text(0.02, 0.92 - 0.6 / (1.0 + 0.28 * len(wrapped)), "\n".join(wrapped), family="monospace", fontsize=9,
             va="top")
    fig.savefig(out)
    plt.close(fig)
    return out


class MAPElitesFamily(Family):
    """MAP-Elites over policy parameters (QD-RL, descriptors from the simulator) or over
    the solutions of a QD task (``problem``)."""

    name = "map_elites"
    EMITTERS = {"iso_line": "IsoLineEmitter", "gaussian": "GaussianEmitter", "cma_me": "ESEmitter"}

    def policy(self, cfg, obs_shape, action_spec) -> Parts:
        if cfg.problem is not None:
            return Parts(None, int(cfg.problem.num_dims))
        return super().policy(cfg, obs_shape, action_spec)

    def param_names(self, name: str) -> None:
        return None  # the emitter's own arguments: they depend on algorithm.params.emitter

    def emitter(self, cfg, dim: int, bounds):
        """The configured emitter, emitting ``algorithm.popsize`` candidates per iteration.

        ``cma_me`` splits them over ``num_emitters`` CMA-ES searches (CMA-ME), so
        ``algorithm.popsize`` must be a multiple of ``num_emitters``."""
        from tfevo import qd

        params = dict(cfg.algorithm.params)
        kind = params.pop("emitter", "iso_line")
        if kind not in self.EMITTERS:
            raise ConfigError(f"algorithm.params.emitter: unknown emitter {kind!r}; accepted: "
                              + ", ".join(self.EMITTERS))
        cls = getattr(qd, self.EMITTERS[kind])
        accepted = [k for k in inspect.signature(cls.__init__).parameters
                    if k not in ("self", "solution_dim", "batch_size", "bounds", "name", "use_op", "kwargs")]
        check_params("algorithm.params", f"the {kind} emitter", params, accepted,
                     {"batch_size": "algorithm.popsize"})
        batch = cfg.algorithm.popsize
        if kind == "cma_me":
            n = params.get("num_emitters", 1)
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                raise ConfigError(f"algorithm.params.num_emitters: must be an int >= 1, got {n!r}")
            if batch % n or batch // n < 2:
                raise ConfigError(f"algorithm.popsize: {batch} candidates cannot be split evenly over "
                                  f"num_emitters={n} CMA-ES searches of at least 2 each; use a multiple of {n} "
                                  f"that is >= {2 * n}")
            batch //= n
        check_numbers("algorithm.params", f"the {kind} emitter", cls.__init__, params)
        return _prefixed("algorithm.params", cls, dim, batch, bounds=bounds, **params)

    def algorithm(self, cfg, parts: Parts):
        from tfevo import qd

        from tfevo.training.parts import qd_layout
        from tfevo.training.config import ArchiveConfig

        layout = qd_layout(cfg)
        a = cfg.archive or ArchiveConfig()
        D = parts.num_params
        if a.kind == "grid" and len(a.cells) != len(layout.ranges):
            raise ConfigError(f"archive.cells has {len(a.cells)} entries, the run has {len(layout.ranges)} "
                              f"descriptors ({', '.join(layout.names)})")
        tmin = float("-inf") if a.threshold_min is None else a.threshold_min

        def make(**soft):
            if a.kind == "grid":
                return _prefixed("archive", qd.GridArchive, D, a.cells, layout.ranges, qd_offset=a.qd_offset, **soft)
            return _prefixed("archive", qd.CVTArchive, D, a.cells, layout.ranges, qd_offset=a.qd_offset,
                             seed=cfg.run.seed, **soft)

        archive = make(learning_rate=a.learning_rate, threshold_min=tmin)
        # CMA-MAE: the soft archive's elites are not the best found; a plain archive keeps those
        result = make() if archive.soft else None
        bounds = layout.init_bounds
        emitter = self.emitter(cfg, D, bounds)
        if parts.model is not None:  # over policies: the template's initializers draw the first population
            init = parts.model.init_params(cfg.algorithm.popsize, cfg.run.seed)
            return qd.MAPElites(archive, [emitter], init_solutions=init, seed=cfg.run.seed, result_archive=result)
        return qd.MAPElites(archive, [emitter], init_bounds=bounds, seed=cfg.run.seed, result_archive=result)

    def picture(self, cfg, parts, algorithm, best, run_dir):
        from tfevo.qd import archive_heatmap
        from tfevo.training.parts import qd_layout

        names = qd_layout(cfg).names
        if len(names) != 2:
            return None
        what = cfg.problem.name if cfg.problem is not None else cfg.env.id
        m = algorithm.metrics()
        title = f"{cfg.name}: {what} archive\ncoverage {m['coverage']:.1%}, QD-score {m['qd_score']:.4g}"
        return archive_heatmap(algorithm.result_archive, Path(run_dir) / "archive.png", title=title, labels=names)


_FAMILIES = {"vector": Family(), "neat": NEATFamily(), "gp": GPFamily(), "map_elites": MAPElitesFamily()}


def family_of(cfg) -> Family:
    """The :class:`Family` of a validated config (by ``algorithm.name``)."""
    return _FAMILIES[cfg.family]


def family_named(name: str) -> Family:
    """The :class:`Family` that runs ``algorithm.name`` ``name``."""
    return _FAMILIES.get(name, _FAMILIES["vector"])
