"""A simulated accelerator: the pipelined scheduler measured as if inference ran on a GPU.

The pipelined evaluator exists to keep host simulators and an accelerator
busy at the same time.  On a machine without a GPU the policy's forward pass
runs on the same CPU cores as the simulators, so overlap cannot show.  This
module provides an *inference stand-in* that takes the place of the policy's
forward pass and behaves, as seen from the host, like a GPU forward:

* it occupies no CPU core while "busy": the calling thread blocks on a
  timer (``time.sleep`` inside a ``tf.numpy_function``, which releases the
  GIL and the core), as a host thread blocks on a device synchronization;
* it is busy for a latency taken from a stated model of GPU time per batch,
  :class:`AcceleratorModel`: ``T_inf(rows) = launch_seconds + rows *
  member_seconds`` (:func:`nature_dqn_gpu_model` derives the two parameters
  for the Deep GA's Nature-DQN from a GPU's published memory bandwidth and
  FP32 peak; ``docs/capacity.md`` states the numbers);
* its actions are a cheap deterministic function of the member's parameters
  and the observation (a linear read-out of a strided subsample of the
  frame), so episodes -- and fitness -- depend on the members and are
  identical for any number of subsets, slots or bucket sizes.

:class:`SimulatedAcceleratorPolicy` is an ordinary policy object: pass it to
:class:`~tfevo.rollout.PipelinedEvaluator` with a real host env (ale-py's
vector env, batched MuJoCo) and the scheduler, the simulators and the
bookkeeping are exactly the code users run; only the network is replaced.

Example:

>>> from tfevo.envs import make
>>> from tfevo.rollout import PipelinedEvaluator
>>> from tfevo.rollout.simulated import SimulatedAcceleratorPolicy, nature_dqn_gpu_model
>>> env = make("ALE/Frostbite-v5", num_envs=1)
>>> policy = SimulatedAcceleratorPolicy(env.action_spec, env.observation_shape,
...                                     nature_dqn_gpu_model("rtx4090"), record=True)
>>> ev = PipelinedEvaluator("ALE/Frostbite-v5", policy, num_envs=8, num_subsets=2, max_steps=20)
>>> fitness = ev.evaluate(policy.init_params(16, seed=0))
>>> start, end, rows = policy.intervals[0]     # one (start, end, rows) per simulated forward
>>> end > start
True
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time

import numpy as np
import tensorflow as tf

from tfevo.core import ConfigError, ShapeError
from tfevo.envs.base import ActionSpec

__all__ = ["AcceleratorModel", "nature_dqn_gpu_model", "SimulatedAcceleratorPolicy"]


@dataclasses.dataclass(frozen=True)
class AcceleratorModel:
    """Time of one forward call on an accelerator: ``launch_seconds + rows * member_seconds``.

    ``launch_seconds`` is what a call costs whatever its size (kernel
    launches, the host-device round trip); ``member_seconds`` what each row
    (one member's network on one observation) adds.  For a population of
    *different* networks each row reads its own weights, so the row cost is
    not amortized by batching: the model is linear in ``rows``.
    """

    name: str
    launch_seconds: float
    member_seconds: float

    def __post_init__(self):
        for field in ("launch_seconds", "member_seconds"):
            v = getattr(self, field)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                raise ConfigError(f"AcceleratorModel.{field} must be a finite number >= 0, got {v!r}")

    def latency(self, rows: int) -> float:
        """Seconds the accelerator is busy for a forward call of ``rows`` rows."""
        rows = int(rows)
        if rows < 0:
            raise ConfigError(f"rows must be >= 0, got {rows}")
        return self.launch_seconds + rows * self.member_seconds

    def members_per_second(self, rows: int) -> float:
        """Throughput (rows per second) of back-to-back calls of ``rows`` rows."""
        return rows / self.latency(rows)

    def with_latency(self, rows: int, seconds: float, name: str | None = None) -> "AcceleratorModel":
        """The same launch cost, with ``member_seconds`` set so that ``latency(rows) == seconds``.

        Used to balance the stand-in against a measured simulator step
        (``T_inf ≈ T_sim``); ``seconds`` must be at least ``launch_seconds``.
        """
        rows, seconds = int(rows), float(seconds)
        if rows < 1:
            raise ConfigError(f"rows must be >= 1, got {rows}")
        if not seconds >= self.launch_seconds:
            raise ConfigError(f"seconds ({seconds}) must be >= launch_seconds ({self.launch_seconds})")
        per = (seconds - self.launch_seconds) / rows
        return AcceleratorModel(name or f"{self.name}, {seconds * 1e3:.3g} ms at {rows} rows",
                                self.launch_seconds, per)


# Published figures of the GPUs the model is stated for (manufacturer specifications):
# memory bandwidth (bytes/s), FP32 peak (FLOP/s), host link (bytes/s, PCIe x16 theoretical).
GPU_SPECS = {
    "rtx4090": dict(name="NVIDIA GeForce RTX 4090", bandwidth=1008e9, fp32=82.6e12, link=31.5e9),  # PCIe 4.0
    "v100": dict(name="NVIDIA Tesla V100 (PCIe)", bandwidth=900e9, fp32=14e12, link=15.75e9),  # PCIe 3.0
}

# The Deep GA's network (tfevo.nn.nature_dqn(18) on 84x84x4 frames, SAME padding):
# parameters, multiply-adds per observation, bytes of one observation, GPU kernels per forward.
NATURE_DQN_WORKLOAD = dict(
    params=4_052_658,
    macs=21 * 21 * 32 * 8 * 8 * 4 + 11 * 11 * 64 * 4 * 4 * 32 + 11 * 11 * 64 * 3 * 3 * 64 + 7744 * 512 + 512 * 18,
    obs_bytes=84 * 84 * 4,
    kernels=10,
)


def nature_dqn_gpu_model(
    gpu: str = "rtx4090",
    *,
    bandwidth_efficiency: float = 0.8,
    compute_efficiency: float = 0.3,
    link_efficiency: float = 0.8,
    kernel_launch_seconds: float = 5e-6,
    sync_seconds: float = 20e-6,
    param_bytes: int = 4,
) -> AcceleratorModel:
    """The stated model of a population-batched Nature-DQN forward on ``gpu``.

    Per row (one member, one observation): stream the member's own weights
    (``params * param_bytes`` bytes) at ``bandwidth_efficiency`` of the
    GPU's memory bandwidth, plus its ``2 * macs`` FLOPs at
    ``compute_efficiency`` of the FP32 peak, plus the observation's copy over
    the host link at ``link_efficiency`` of its rate.  Per call: ``kernels``
    launches of ``kernel_launch_seconds`` and one host-device round trip
    (``sync_seconds``).  See ``docs/capacity.md`` for the sources.
    """
    if gpu not in GPU_SPECS:
        raise ConfigError(f"unknown gpu {gpu!r}; known: {', '.join(GPU_SPECS)}")
    for nm, v in (("bandwidth_efficiency", bandwidth_efficiency), ("compute_efficiency", compute_efficiency),
                  ("link_efficiency", link_efficiency)):
        if not 0 < v <= 1:
            raise ConfigError(f"{nm} must be in (0, 1], got {v}")
    if param_bytes not in (2, 4):
        raise ConfigError(f"param_bytes must be 2 (float16) or 4 (float32), got {param_bytes}")
    g, w = GPU_SPECS[gpu], NATURE_DQN_WORKLOAD
    per = (w["params"] * param_bytes / (bandwidth_efficiency * g["bandwidth"])
           + 2 * w["macs"] / (compute_efficiency * g["fp32"])
           + w["obs_bytes"] / (link_efficiency * g["link"]))
    launch = w["kernels"] * kernel_launch_seconds + sync_seconds
    return AcceleratorModel(f"Nature-DQN on {g['name']}", launch, per)


class SimulatedAcceleratorPolicy:
    """Inference stand-in for :class:`~tfevo.rollout.PipelinedEvaluator`: GPU-like latency, no CPU while busy.

    Args:
      action_spec: the env's :class:`~tfevo.envs.base.ActionSpec`.
      observation_shape: per-slot observation shape (``(84, 84, 4)`` frames or ``(d,)`` vectors).
      model: the :class:`AcceleratorModel` giving the busy time of a call of ``rows`` rows
        (``rows`` is what the evaluator sends, i.e. after its bucket padding, as a GPU would compute).
      stride: spatial subsampling of image observations for the read-out (default: 12 for
        frames of side >= 48, else 1).
      record: keep ``(start, end, rows)`` (``time.perf_counter`` seconds) of every simulated
        forward in :attr:`intervals`.

    The read-out (``num_params`` weights per member): features = the
    observation subsampled with ``stride`` on its two leading spatial axes
    (image observations, scaled by 1/255 if uint8) or the observation itself
    (vectors); outputs = features @ W_m + b_m, as logits for discrete actions
    (the evaluator takes the argmax) or through ``tanh`` for continuous ones.
    Each row's sums run over the same elements in the same order for any
    batch size, so results do not depend on how rows are batched.

    Attributes:
      busy_seconds: total simulated accelerator time so far.
      calls: number of simulated forward calls.
      intervals: list of ``(start, end, rows)`` when ``record`` is set.
    """

    def __init__(self, action_spec: ActionSpec, observation_shape, model: AcceleratorModel, *,
                 stride: int | None = None, record: bool = False):
        if not isinstance(action_spec, ActionSpec):
            raise ConfigError(f"action_spec must be an ActionSpec, got {type(action_spec).__name__}")
        if not isinstance(model, AcceleratorModel):
            raise ConfigError(f"model must be an AcceleratorModel, got {type(model).__name__}")
        shape = tuple(int(d) for d in observation_shape)
        if not shape or min(shape) < 1:
            raise ShapeError(
                f"observation_shape must be a non-empty shape of positive sizes, got {observation_shape!r}")
        self.image = len(shape) == 3
        if stride is None:
            stride = 12 if self.image and min(shape[:2]) >= 48 else 1
        if int(stride) < 1:
            raise ConfigError(f"stride must be >= 1, got {stride}")
        self.stride = int(stride)
        self.action_spec = action_spec
        self.observation_shape = shape
        self.model = model
        if self.image:  # flat positions of the subsampled pixels, gathered from the flattened frame
            h, w, c = shape
            ii, jj, cc = np.meshgrid(np.arange(0, h, self.stride), np.arange(0, w, self.stride), np.arange(c),
                                     indexing="ij")
            self._pixels = ((ii * w + jj) * c + cc).reshape(-1).astype(np.int32)
            self.num_features = int(self._pixels.size)
        else:
            self._pixels = None
            self.num_features = int(np.prod(shape))
        self.num_outputs = int(action_spec.policy_output_size)
        if self.num_outputs < 1:
            raise ConfigError("action_spec has no outputs (num_actions or shape)")
        self.num_params = self.num_features * self.num_outputs + self.num_outputs
        self.record = bool(record)
        self.intervals: list = []
        self.busy_seconds = 0.0
        self.calls = 0
        self._lock = threading.Lock()

    def init_params(self, popsize: int, seed: int = 0) -> tf.Tensor:
        """A population ``float32 [popsize, num_params]`` of standard-normal read-out weights."""
        if int(popsize) < 1:
            raise ConfigError(f"popsize must be >= 1, got {popsize}")
        rng = np.random.default_rng(int(seed))
        return tf.constant(rng.standard_normal((int(popsize), self.num_params)).astype(np.float32))

    def reset_stats(self) -> None:
        """Clears :attr:`intervals`, :attr:`busy_seconds` and :attr:`calls`."""
        with self._lock:
            self.intervals = []
            self.busy_seconds = 0.0
            self.calls = 0

    # The evaluator passes observations unscaled to a policy that has its own preprocess().
    def preprocess(self, obs) -> tf.Tensor:
        """``[n, B, *obs]`` -> float32 features ``[n, B, num_features]``."""
        x = tf.convert_to_tensor(obs)
        n, b = tf.shape(x)[0], tf.shape(x)[1]
        x = tf.reshape(x, [n, b, int(np.prod(self.observation_shape))])
        if self._pixels is not None:
            x = tf.gather(x, self._pixels, axis=2)
        scale = 1.0 / 255.0 if x.dtype == tf.uint8 else 1.0
        x = tf.cast(x, tf.float32)
        return x * scale if scale != 1.0 else x

    def _wait(self, out: np.ndarray) -> np.ndarray:
        # Runs on a TensorFlow thread with the GIL; time.sleep releases both the GIL and the core.
        rows = int(out.shape[0])
        t0 = time.perf_counter()
        time.sleep(self.model.latency(rows))
        t1 = time.perf_counter()
        with self._lock:
            self.busy_seconds += t1 - t0
            self.calls += 1
            if self.record:
                self.intervals.append((t0, t1, rows))
        return out

    def forward(self, params, obs, indices=None):
        """Outputs ``[n, B, num_outputs]`` of members ``indices`` (all rows of ``params`` if None)."""
        params = tf.convert_to_tensor(params)
        if params.shape.rank != 2 or params.shape[-1] != self.num_params:
            raise ShapeError(f"params must be [P, {self.num_params}], got {params.shape.as_list()}")
        w = params if indices is None else tf.gather(params, indices)
        f, a = self.num_features, self.num_outputs
        W = tf.reshape(w[:, : f * a], [-1, f, a])
        b = w[:, None, f * a:]
        x = self.preprocess(obs)
        # elementwise products summed over the features: the same order for any batch size
        y = tf.reduce_sum(x[..., :, None] * W[:, None], axis=-2) + b
        if not self.action_spec.discrete:
            y = tf.tanh(y)
        y = tf.numpy_function(self._wait, [y], tf.float32, stateful=True, name="simulated_accelerator")
        return tf.ensure_shape(y, [None, None, a])

    forward_graph = forward
