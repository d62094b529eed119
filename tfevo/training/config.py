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
           "DistributeConfig", "load_config", "parse_config", "DEFAULT_CONFIG"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


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
    max_steps: Optional[int] = Field(None, gt=0, description="Step cap per episode (default: the env's own).")
    kwargs: dict[str, Any] = Field(default_factory=dict, description="Extra arguments for tfevo.envs.make.")


class PolicyConfig(_Strict):
    """The network each member parameterizes."""

    kind: Literal["mlp", "nature_dqn", "linear"] = Field("mlp", description="Network family.")
    hidden: list[int] = Field(default_factory=lambda: [32, 32], description="Hidden sizes (mlp).")
    activation: str = Field("tanh", description="Hidden activation (mlp).")
    continuous: Literal["tanh", "clip"] = Field("tanh", description="Squashing of continuous actions.")
    weight_dtype: Literal["float32", "float16"] = Field(
        "float32", description="Precision of the weights rollouts compute with; float16 halves the bytes a "
        "large network streams per step (Atari nature_dqn), float32 arithmetic either way.")

    @model_validator(mode="after")
    def _sizes(self):
        if any(h < 1 for h in self.hidden):
            raise ValueError(f"policy.hidden sizes must be >= 1, got {self.hidden}")
        return self


class AlgorithmConfig(_Strict):
    """The strategy (`tfevo list strategies`) and its constructor arguments."""

    name: str = Field("openai_es", description="Registered strategy name.")
    popsize: int = Field(64, ge=2, description="Population size P.")
    params: dict[str, Any] = Field(default_factory=dict, description="Strategy constructor arguments.")


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
        "none", description="none: off; auto: multi_worker under TF_CONFIG, else all GPUs (see tfevo.distribute).")
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
    policy: PolicyConfig = Field(default_factory=PolicyConfig)
    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig)
    evaluator: EvaluatorConfig = Field(default_factory=EvaluatorConfig)
    distribute: DistributeConfig = Field(default_factory=DistributeConfig)

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


def _format_errors(err: ValidationError, source: str) -> str:
    lines = [f"invalid config {source}:"]
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"]) or "(top level)"
        msg = e["msg"]
        if e["type"] == "extra_forbidden":
            msg = "unknown field"
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
