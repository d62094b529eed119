"""Run configurations: TOML or YAML files, validated before any work starts.

A config has five tables (and an optional ``[distribute]``); every field is documented below and unknown or
ill-typed fields are rejected with an error naming the field.  Example
(``examples/configs/cartpole_es.toml``)::

    name = "cartpole-es"

    [run]
    seed = 0
    generations = 30          # budget: generations, frames and/or seconds
    dir = "runs/cartpole-es"  # default: runs/<name>

    [env]
    id = "CartPole-v1"
    episodes = 2

    [policy]
    kind = "mlp"
    hidden = [16]

    [algorithm]
    name = "openai_es"
    popsize = 64
    params = { sigma = 0.1, learning_rate = 0.05 }

    [evaluator]
    kind = "auto"             # ingraph for TensorFlow envs, pipelined otherwise

    [distribute]              # optional: shard the population (tfevo.distribute)
    devices = 2               # 2 GPUs, or 2 logical CPU devices; strategy = "auto" for TF_CONFIG clusters

``algorithm.name`` picks the family: ``neat`` (``policy.kind`` neat or
hyperneat), ``gp`` (gp_tree), ``map_elites`` (an ``[archive]`` over a host
simulator's descriptors, or a ``[problem]`` QD task instead of ``[env]``), or
any flat-vector strategy (mlp, linear, nature_dqn).  Pairings that cannot work
are refused here, naming the fields.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from tfevo.core import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = ["Config", "RunConfig", "EnvConfig", "PolicyConfig", "AlgorithmConfig", "EvaluatorConfig",
           "DistributeConfig", "ProblemConfig", "ArchiveConfig", "FAMILY_POLICIES", "VECTOR_POLICIES", "load_config", "parse_config", "DEFAULT_CONFIG"]


def _takes_bool(annotation) -> bool:
    """Whether a field's annotation accepts a boolean (``bool``, ``Any``, a free-form table)."""
    import typing

    if annotation is bool or annotation is Any or annotation is dict or typing.get_origin(annotation) is dict:
        return True
    return any(a is True or a is False or (not isinstance(a, (str, int, float)) and _takes_bool(a))
               for a in typing.get_args(annotation))


def _holds_bool(value) -> bool:
    return isinstance(value, bool) or (isinstance(value, (list, tuple)) and any(_holds_bool(v) for v in value))


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_numbers(cls, value, info):
        # pydantic reads true/false as 1/0 for a number; in a config that is a slip, not a count
        if _holds_bool(value) and not _takes_bool(cls.model_fields[info.field_name].annotation):
            ann = cls.model_fields[info.field_name].annotation
            accepted = getattr(ann, "__name__", None) if isinstance(ann, type) else None
            accepted = accepted or str(ann).replace("typing.", "")
            raise ValueError(f"a boolean is not accepted here (got {json.dumps(value)}); accepted: {accepted}")
        return value


class RunConfig(_Strict):
    """Budget, seed and where the run is written."""

    seed: int = Field(0, ge=0, lt=2**31, description="Seed of every random stream of the run.")
    dir: Optional[str] = Field(None, description="Run directory (checkpoints, logs); default runs/<name>.")
    generations: Optional[int] = Field(None, gt=0, description="Stop after this many generations.")
    frames: Optional[int] = Field(None, gt=0, description="Stop after this many environment frames.")
    seconds: Optional[float] = Field(None, gt=0, allow_inf_nan=False,
                                     description="Stop after this much training wall time.")
    checkpoint_every: int = Field(1, ge=1, description="Generations between checkpoints.")
    keep_checkpoints: int = Field(3, ge=1, description="Checkpoints kept on disk.")

    @model_validator(mode="after")
    def _budget(self):
        if self.generations is None and self.frames is None and self.seconds is None:
            raise ValueError("set a budget: run.generations, run.frames or run.seconds")
        return self


class EnvConfig(_Strict):
    """The environment (any id `tfevo list envs` shows, ALE/<Game>-v5, or a Gymnasium id)."""

    id: str = Field("CartPole-v1", description="Environment id.")
    episodes: int = Field(1, ge=1, description="Episodes per member; fitness is their mean return.")
    max_steps: Optional[int] = Field(None, gt=0, description=(
        "Episode time limit in agent steps; replaces the env's own limit, above or below it (default: the env's own)."))
    kwargs: dict[str, Any] = Field(default_factory=dict, description="Extra arguments for tfevo.envs.make.")


#: policy kinds whose members are flat parameter vectors (any registered strategy drives them)
VECTOR_POLICIES = ("mlp", "nature_dqn", "linear")
#: the policy kinds each structured family reads; every other algorithm takes VECTOR_POLICIES
FAMILY_POLICIES = {"neat": ("neat", "hyperneat"), "gp": ("gp_tree",), "map_elites": VECTOR_POLICIES}


class PolicyConfig(_Strict):
    """The network (or genome family) each member encodes."""

    kind: Literal["mlp", "nature_dqn", "linear", "neat", "hyperneat", "gp_tree"] = Field(
        "mlp", description="Network family; default: neat for algorithm neat, gp_tree for gp, else mlp.")
    hidden: list[int] = Field(default_factory=lambda: [32, 32],
                              description="Hidden sizes (mlp; the hidden substrate layers of hyperneat).")
    activation: str = Field("tanh", description="Hidden activation (mlp, hyperneat substrate).")
    continuous: Literal["tanh", "clip"] = Field("tanh", description="Squashing of continuous actions.")
    weight_dtype: Literal["float32", "float16"] = Field(
        "float32", description="Precision of the weights rollouts compute with; float16 halves the bytes a "
        "large network streams per step (Atari nature_dqn), float32 arithmetic either way.")
    params: dict[str, Any] = Field(default_factory=dict, description=(
        "Family-specific policy arguments: neat: settle_steps; hyperneat: weight_threshold, max_weight, "
        "output_activation; gp_tree: use_op."))

    @model_validator(mode="after")
    def _sizes(self):
        if any(h < 1 for h in self.hidden):
            raise ValueError(f"policy.hidden sizes must be >= 1, got {self.hidden}")
        # A setting the network family does not read is an error, not silently dropped (a dumped config
        # carries the defaults, which are accepted).
        unused = _UNUSED_POLICY_FIELDS.get(self.kind, ())
        if "hidden" in unused and self.hidden != _DEFAULT_HIDDEN and not (self.kind == "linear" and not self.hidden):
            raise ValueError(f"policy.hidden={self.hidden} is not used by policy.kind {self.kind!r} "
                             f"({_UNUSED_POLICY_WHY[self.kind]}); leave policy.hidden out"
                             + (" (or give [])" if self.kind == "linear" else "")
                             + ", or use policy.kind 'mlp' (hidden layers of any sizes)")
        if "activation" in unused and self.activation != _DEFAULT_ACTIVATION:
            raise ValueError(f"policy.activation={self.activation!r} is not used by policy.kind {self.kind!r} "
                             f"({_UNUSED_POLICY_WHY[self.kind]}); leave policy.activation out, or use policy.kind "
                             "'mlp' (its hidden layers take any Keras activation)")
        for field, why in _UNUSED_POLICY_SETTING_WHY.items():
            value = getattr(self, field)
            if field in unused and value != PolicyConfig.model_fields[field].default:
                raise ValueError(f"policy.{field}={value!r} is not used by policy.kind {self.kind!r} ({why}); "
                                 f"leave policy.{field} out")
        return self


_DEFAULT_HIDDEN = PolicyConfig.model_fields["hidden"].default_factory()
_DEFAULT_ACTIVATION = PolicyConfig.model_fields["activation"].default
#: the policy settings each kind does not read
_UNUSED_POLICY_FIELDS = {"linear": ("hidden", "activation"), "nature_dqn": ("hidden", "activation"),
                         "neat": ("hidden", "activation", "continuous", "weight_dtype"),
                         "hyperneat": ("continuous", "weight_dtype"), "gp_tree": ("hidden", "activation", "weight_dtype")}
_UNUSED_POLICY_SETTING_WHY = {
    "continuous": "NEAT and HyperNEAT map the output activation's range onto the action bounds",
    "weight_dtype": "float16 weights are for the Keras networks mlp, linear and nature_dqn",
}
_UNUSED_POLICY_WHY = {
    "linear": "a linear policy has no hidden layer",
    "nature_dqn": "its layers are fixed: 3 ReLU convolutions, Dense 512 ReLU",
    "neat": "NEAT evolves the topology; activations are algorithm.params activation_default/activation_options",
    "gp_tree": "a GP policy is a program tree; its functions are algorithm.params functions",
}


class ProblemConfig(_Strict):
    """A fitness problem over solution vectors instead of an environment (`tfevo list problems`)."""

    name: Literal["rastrigin_qd", "sphere_qd", "rastrigin_linproj", "sphere_linproj"] = Field(
        ..., description="A quality-diversity task (fitness and two descriptors per solution).")
    num_dims: int = Field(..., ge=2, description="Solution dimension D.")
    init_bounds: Optional[tuple[float, float]] = Field(
        None, description="(low, high) of the first random batch and the emitters' clipping; default: the "
                          "task's domain ([0, 1] for *_qd, [-5.12, 5.12] for *_linproj).")


class ArchiveConfig(_Strict):
    """The MAP-Elites archive: cells over the behaviour descriptors."""

    kind: Literal["grid", "cvt"] = Field("grid", description="grid: regular bins; cvt: k-means centroids.")
    cells: Union[int, list[int]] = Field(default_factory=lambda: [32, 32], description=(
        "grid: bins per descriptor (a list); cvt: number of centroids (an int)."))
    ranges: Optional[list[tuple[float, float]]] = Field(
        None, description="(low, high) per descriptor; default: the task's own ([0, 1] for contact fractions).")
    descriptors: Optional[list[str]] = Field(
        None, description="Environment descriptor columns by name, e.g. [\"contact:foot_geom\", "
                          "\"contact:foot_left_geom\"] (MuJoCo; names in the error if wrong).")
    qd_offset: float = Field(0.0, allow_inf_nan=False, description="Subtracted from fitness in the QD-score.")
    learning_rate: Optional[float] = Field(None, ge=0.0, le=1.0, allow_inf_nan=False, description=(
        "CMA-MAE: the cell thresholds' learning rate alpha in [0, 1] (pyribs' name; e.g. 0.01). With it the "
        "run keeps a second, plain archive of the true elites, which the metrics, picture and best read."))
    threshold_min: Optional[float] = Field(None, description=(
        "CMA-MAE: every cell's initial threshold (pyribs' name; e.g. 0 or a lower bound of the fitness); "
        "needs learning_rate. Unset (or -inf, with learning_rate 1): plain MAP-Elites."))

    @model_validator(mode="after")
    def _cells(self):
        tmin = self.threshold_min
        if tmin is not None and (tmin != tmin or tmin == float("inf")):
            raise ValueError(f"archive.threshold_min must be a finite number (or -inf), got {tmin}")
        soft_min = tmin is not None and tmin > float("-inf")
        if soft_min and self.learning_rate is None:
            raise ValueError(f"archive.threshold_min={tmin} was set without archive.learning_rate; CMA-MAE needs "
                             "both (e.g. learning_rate = 0.01, threshold_min = 0)")
        if self.learning_rate is not None and self.learning_rate != 1.0 and not soft_min:
            raise ValueError(f"archive.learning_rate={self.learning_rate} needs a finite archive.threshold_min "
                             "(CMA-MAE's initial cell threshold, e.g. 0); learning_rate 1 without it is plain "
                             "MAP-Elites")
        if self.kind == "grid" and (not isinstance(self.cells, list) or not self.cells or min(self.cells) < 1):
            raise ValueError(f"archive.cells must be a list of bins >= 1 per descriptor for a grid, got {self.cells}")
        if self.kind == "cvt" and (not isinstance(self.cells, int) or self.cells < 1):
            raise ValueError(f"archive.cells must be a number of centroids >= 1 for a cvt archive, got {self.cells}")
        for lo, hi in self.ranges or []:
            if not hi > lo:
                raise ValueError(f"archive.ranges: each (low, high) needs high > low, got ({lo}, {hi})")
        return self


class AlgorithmConfig(_Strict):
    """The algorithm (`tfevo list algorithms`) and its arguments."""

    name: str = Field("openai_es", description="Registered algorithm name.")
    popsize: int = Field(64, ge=2, description="Population size P (map_elites: candidates per iteration).")
    params: dict[str, Any] = Field(default_factory=dict, description=(
        "Strategy constructor arguments; neat: NEATConfig fields; gp: GPConfig fields; map_elites: emitter "
        "(iso_line | gaussian | cma_me) and its arguments."))


class EvaluatorConfig(_Strict):
    """How the population is evaluated."""

    kind: Literal["auto", "ingraph", "pipelined"] = Field("auto", description="auto: ingraph for TF envs.")
    num_envs: Optional[int] = Field(None, ge=1, description="Simulator slots (pipelined); default min(P, 256) for vector observations, min(P, 64) for images.")
    num_subsets: Union[Literal["auto"], int] = Field(
        "auto", description="K subsets that alternate (pipelined; 1 = serial). auto: 2 with a GPU, 1 on a "
        "CPU-only machine, where simulation and inference share the same cores and serial was faster.")

    @field_validator("num_subsets")
    @classmethod
    def _check_subsets(cls, v):
        if v != "auto" and int(v) < 1:
            raise ValueError(f"num_subsets must be 'auto' or >= 1, got {v}")
        return v
    obs_norm: bool = Field(False, description="Running observation normalization (ES on MuJoCo).")
    jit_compile: bool = Field(False, description="Force XLA for the in-graph rollout (default: try it).")
    decode_chunk: int = Field(0, ge=0, description="Compact genomes (seed_ga) decoded this many at a time (0: all).")


class DistributeConfig(_Strict):
    """Sharding the population over devices/machines with tf.distribute (off by default)."""

    strategy: Literal["none", "auto", "mirrored", "multi_worker", "one_device"] = Field(
        "none", description="none: off (tfevo train still joins a multi-machine job when TF_CONFIG is set); "
                "auto: multi_worker under TF_CONFIG, else all GPUs (see tfevo.distribute).")
    devices: Optional[int] = Field(
        None, ge=1, description="Local replicas: the first N GPUs, or N logical CPU devices without GPUs "
                                "(turns distribution on).")

    @property
    def enabled(self) -> bool:
        """Whether the run shards its population over a strategy."""
        return self.strategy != "none" or self.devices is not None


class Config(_Strict):
    """A whole run."""

    name: str = Field("run", description="Run name (default run directory runs/<name>).")
    run: RunConfig
    env: EnvConfig = Field(default_factory=EnvConfig)
    problem: Optional[ProblemConfig] = Field(None, description="A QD task instead of an environment.")
    policy: PolicyConfig = Field(default_factory=PolicyConfig)
    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig)
    archive: Optional[ArchiveConfig] = Field(None, description="MAP-Elites archive (algorithm map_elites).")
    evaluator: EvaluatorConfig = Field(default_factory=EvaluatorConfig)
    distribute: DistributeConfig = Field(default_factory=DistributeConfig)

    @model_validator(mode="before")
    @classmethod
    def _default_policy_kind(cls, data):
        """A family's own genomes are the default policy: neat -> neat, gp -> gp_tree."""
        if isinstance(data, dict):
            algo, policy = data.get("algorithm"), data.get("policy")
            name = algo.get("name") if isinstance(algo, dict) else None
            if name in ("neat", "gp") and (policy is None or (isinstance(policy, dict) and "kind" not in policy)):
                data = {**data, "policy": {**(policy or {}), "kind": FAMILY_POLICIES[name][0]}}
        return data

    @model_validator(mode="after")
    def _family(self):
        name, kind = self.algorithm.name, self.policy.kind
        accepted = FAMILY_POLICIES.get(name, VECTOR_POLICIES)
        if self.problem is None and kind not in accepted:
            raise ValueError(f"policy.kind {kind!r} cannot be evolved by algorithm.name {name!r}; {name} takes "
                             f"policy.kind {' | '.join(accepted)}")
        if self.problem is not None:
            if name != "map_elites":
                raise ValueError(f"problem is for algorithm.name 'map_elites' (quality-diversity tasks), got {name!r}")
            if self.env != EnvConfig():  # (a dumped config carries the default env table)
                raise ValueError("give either env (a control task) or problem (a QD task), not both")
            if self.policy != PolicyConfig():
                raise ValueError("policy is not used with problem (a QD task evolves its solution vectors "
                                 "directly, problem.num_dims of them); leave the policy table out")
            if self.evaluator != EvaluatorConfig():
                raise ValueError("evaluator is not used with problem (a QD task is one batched TensorFlow function "
                                 "of the solutions, with no simulator or rollout); leave the evaluator table out")
        if self.archive is not None and name != "map_elites":
            raise ValueError(f"archive is used by algorithm.name 'map_elites' only, got {name!r}")
        if self.run.seconds is not None and self.distribute.strategy == "multi_worker":
            raise ValueError(f"run.seconds={self.run.seconds} is not allowed in a multi-worker run "
                             "(distribute.strategy multi_worker, or TF_CONFIG naming a cluster): workers would stop "
                             "at different generations and wait forever; use run.generations or run.frames")
        if self.family == "map_elites" and self.distribute.enabled:
            raise ValueError("distribute shards the rollouts of strategies, NEAT and GP; map_elites runs in one "
                             "process (its sharded evaluation would have to gather descriptors too)")
        return self

    @property
    def family(self) -> str:
        """``"neat"``, ``"gp"``, ``"map_elites"`` or ``"vector"`` (a flat-vector strategy)."""
        return self.algorithm.name if self.algorithm.name in FAMILY_POLICIES else "vector"

    @property
    def run_dir(self) -> Path:
        return Path(self.run.dir) if self.run.dir else Path("runs") / self.name

    def to_dict(self) -> dict:
        return json.loads(self.model_dump_json())


#: The built-in default of `tfevo train`: CartPole-v1, OpenAI-ES, in-graph, about a minute.
DEFAULT_CONFIG: dict = {
    "name": "cartpole-openai-es",
    "run": {"seed": 0, "generations": 60},
    "env": {"id": "CartPole-v1", "episodes": 3},
    "policy": {"kind": "mlp", "hidden": [16]},
    "algorithm": {"name": "openai_es", "popsize": 64, "params": {"sigma": 0.1, "learning_rate": 0.05}},
    "evaluator": {"kind": "ingraph"},
}


def _close_fields(loc) -> list[str]:
    """The field names of the model at ``loc[:-1]`` closest to the unknown ``loc[-1]``."""
    import difflib
    import typing

    from pydantic import BaseModel

    model = Config
    for part in loc[:-1]:
        field = model.model_fields.get(part) if isinstance(part, str) else None
        if field is None:
            return []
        candidates = [field.annotation, *typing.get_args(field.annotation)]
        sub = [c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)]
        if not sub:
            return []
        model = sub[0]
    return difflib.get_close_matches(str(loc[-1]), list(model.model_fields), n=2, cutoff=0.6)


def _format_errors(err: ValidationError, source: str) -> str:
    lines = [f"invalid config {source}:"]
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"]) or "(top level)"
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            msg = "unknown field"
            close = _close_fields(e["loc"])
            if close:
                msg += f" (did you mean {' or '.join(repr(c) for c in close)}?)"
        elif e["type"] != "value_error" and isinstance(e.get("input"), (str, int, float, bool, list)):
            msg += f" (got {e['input']!r})"  # the value, next to what is accepted
        lines.append(f"  {loc}: {msg}")
    return "\n".join(lines)


def parse_config(data: dict, source: str = "<dict>") -> Config:
    """Validates a dict into a :class:`Config` (raises ConfigError naming the field)."""
    if not isinstance(data, dict):
        raise ConfigError(f"invalid config {source}: expected a table/mapping at top level")
    try:
        return Config.model_validate(data)
    except ValidationError as e:
        raise ConfigError(_format_errors(e, source)) from None


def load_config(path: str | Path) -> Config:
    """Reads a ``.toml``, ``.yaml``/``.yml`` or ``.json`` config file."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    text = path.read_text(encoding="utf-8")
    suffix = path.suffix.lower()
    try:
        if suffix == ".toml":
            data = tomllib.loads(text)
        elif suffix in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text)
        elif suffix == ".json":
            data = json.loads(text)
        else:
            raise ConfigError(f"config {path}: unknown extension {suffix!r}; use .toml, .yaml or .json")
    except ConfigError:
        raise
    except Exception as e:  # noqa: BLE001 - parse errors of three libraries
        raise ConfigError(f"config {path} could not be parsed: {e}") from None
    return parse_config(data, str(path))
