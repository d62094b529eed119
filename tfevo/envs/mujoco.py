"""Batched MuJoCo locomotion environments stepped in native threads.

:class:`MujocoVectorEnv` runs ``num_envs`` copies of one Gymnasium ``-v5``
locomotion task (Swimmer, Hopper, HalfCheetah, Walker2d, Ant, Humanoid) on one
``MjModel`` compiled from the very XML file Gymnasium uses.  Each step gives
the same observations, rewards, terminations and truncations as
``gymnasium.make(env_id)`` with its default keyword arguments, from the same
start state and actions (the tests check this to ~1e-12 in float64).

Two backends step the simulations (:mod:`tfevo.envs.mujoco_host`): ``"batch"``,
MuJoCo's own batched stepper, for the tasks that read only what ``mj_step``
computes, and ``"threads"``, a pool of Python threads around ``mj_step`` (Ant
and Humanoid, which read ``cfrc_ext`` after the step).  Both release the GIL,
so ``send`` returns at once and TensorFlow can run inference while the physics
runs.

Rewards, terminations, observations and reset noise are computed with numpy
over the whole batch (:mod:`tfevo.envs.mujoco_tasks`).  Creating an environment
turns off MuJoCo's default ``MUJOCO_LOG.TXT`` file in the current directory
(:func:`~tfevo.envs.mujoco_host.disable_log_file`).
"""

from __future__ import annotations

import collections
import inspect
import os

import numpy as np

from tfevo.core import ConfigError, ShapeError
from tfevo.envs import mujoco_tasks
from tfevo.envs.base import ActionSpec, HostVectorEnv
from tfevo.envs.mujoco_host import (_BatchBackend, _compile, _has_batch, _mix64, _mujoco, _normal, _selector,
                                    _ThreadBackend, _uniform01, disable_log_file)
from tfevo.envs.mujoco_host import assets_dir  # noqa: F401  (part of this module's public names)
from tfevo.registry import register

__all__ = ["MujocoVectorEnv", "MUJOCO_ENV_IDS"]

MUJOCO_ENV_IDS = mujoco_tasks.ENV_IDS


class MujocoVectorEnv(HostVectorEnv):
    """``num_envs`` copies of a Gymnasium ``-v5`` MuJoCo locomotion task.

    Same models, frame skips, rewards, terminations, observations and reset
    noise distributions as ``gymnasium.make(env_id)`` with default kwargs,
    truncation after ``max_episode_steps`` (Gymnasium's ``TimeLimit``).
    Actions are not clipped (MuJoCo clips controls to ``ctrlrange`` inside the
    step; control costs use the action as given, as Gymnasium does).

    Args:
      env_id: one of ``Swimmer-v5``, ``Hopper-v5``, ``HalfCheetah-v5``,
        ``Walker2d-v5``, ``Ant-v5``, ``Humanoid-v5``.
      num_envs: number of simulations (slots).
      num_threads: native threads stepping them (default: all CPUs).
      backend: ``"batch"`` (MuJoCo's batched stepper), ``"threads"`` (a
        Python thread pool around ``mj_step``) or ``"auto"`` (batch where the
        task allows it; Ant and Humanoid need ``"threads"``).
      seed: seeds the reset noise of slots reset without an explicit seed.
      reset_rng: ``"counter"`` (default): reset noise from a counter-based
        stream drawn for all reset slots at once with numpy; a slot's noise
        depends only on its seed.  ``"gymnasium"``: one
        ``np.random.default_rng`` per slot drawn exactly as Gymnasium does,
        so ``reset(seeds=[s])`` starts from the very state that
        ``gymnasium.make(env_id).reset(seed=s)`` does (a short per-slot loop
        at reset time; steps are unaffected).
      max_episode_steps: steps before ``truncated`` (Gymnasium: 1000).
      obs_dtype: dtype of observations (float32, or float64 for exactness).

    Example::

        import numpy as np
        from tfevo.envs import make
        env = make("HalfCheetah-v5", 64)
        obs = env.reset(np.arange(64), seeds=np.arange(64))
        env.send(np.zeros((64, 6), np.float32), np.arange(64))
        # ... run TensorFlow inference for another group here ...
        idx, obs, reward, terminated, truncated = env.recv()
        print(env.descriptors(idx).shape)   # (64, 4): x, y, 2 feet
    """

    def __init__(
        self,
        env_id: str,
        num_envs: int = 1,
        num_threads: int | None = None,
        backend: str = "auto",
        seed: int = 0,
        reset_rng: str = "counter",
        max_episode_steps: int = 1000,
        obs_dtype=np.float32,
    ):
        tasks = mujoco_tasks.make_tasks()
        if env_id not in tasks:
            raise ConfigError(
                f"unknown MuJoCo environment {env_id!r}; known: {', '.join(tasks)}"
            )
        if int(num_envs) < 1:
            raise ConfigError(f"num_envs must be >= 1, got {num_envs}")
        if int(max_episode_steps) < 1:
            raise ConfigError(f"max_episode_steps must be >= 1, got {max_episode_steps}")
        if backend not in ("auto", "batch", "threads"):
            raise ConfigError(f"backend must be 'auto', 'batch' or 'threads', got {backend!r}")
        task = tasks[env_id]
        if backend == "auto":
            backend = "threads" if task.rne_post or not _has_batch() else "batch"
        elif backend == "batch" and not _has_batch():
            raise ConfigError("backend='batch' needs mujoco.batch (MuJoCo >= 4.0); use backend='threads'")
        if backend == "batch" and task.rne_post:
            raise ConfigError(
                f"{env_id} reads cfrc_ext after mj_rnePostConstraint, which mujoco.batch cannot "
                "compute; use backend='threads'"
            )
        if reset_rng not in ("counter", "gymnasium"):
            raise ConfigError(f"reset_rng must be 'counter' or 'gymnasium', got {reset_rng!r}")
        obs_dtype = np.dtype(obs_dtype)
        if obs_dtype not in (np.float32, np.float64):
            raise ConfigError(f"obs_dtype must be float32 or float64, got {obs_dtype}")
        num_threads = (os.cpu_count() or 1) if num_threads is None else int(num_threads)
        if num_threads < 1:
            raise ConfigError(f"num_threads must be >= 1, got {num_threads}")

        disable_log_file()
        mujoco = _mujoco()
        self.env_id = env_id
        self.num_envs = int(num_envs)
        self.max_episode_steps = int(max_episode_steps)
        self.observation_dtype = obs_dtype
        self.model = _compile(task)
        m = self.model
        self.task = task = task.for_model(m)
        self.dt = float(m.opt.timestep * task.frame_skip)
        ref = mujoco.MjData(m)
        self.init_qpos = ref.qpos.copy()
        self.init_qvel = ref.qvel.copy()
        low, high = m.actuator_ctrlrange.copy().astype(np.float32).T
        self.action_spec = ActionSpec(discrete=False, shape=(m.nu,), low=low, high=high)
        self.num_threads = num_threads
        cls = _BatchBackend if backend == "batch" else _ThreadBackend
        self._sim = cls(m, task, self.num_envs, num_threads)
        self.backend = self._sim.name
        obs = task.observe(self._rows(np.arange(1)))
        self.observation_shape = (int(obs.shape[1]),)
        self.foot_geoms = tuple(task.feet)
        self.descriptor_names = ("x", "y") + tuple(f"contact:{g}" for g in task.feet)
        # per-slot bookkeeping
        self.seed = int(seed)
        self.reset_rng = reset_rng
        self._base_key = _mix64(np.array([np.uint64(int(seed) & 0xFFFFFFFFFFFFFFFF)]))[0]
        self._gym_rngs: dict = {}  # slot -> np.random.Generator (reset_rng="gymnasium")
        self._episode = np.zeros(self.num_envs, np.uint64)
        self._steps = np.zeros(self.num_envs, np.int64)
        self._contact_steps = np.zeros((self.num_envs, len(task.feet)), np.int64)
        self._busy = np.zeros(self.num_envs, bool)
        self._was_reset = np.zeros(self.num_envs, bool)  # a slot steps only after its first reset
        self._position = self.task.position(self._rows(np.arange(self.num_envs)))  # [N, 2], per slot
        self._pending: collections.deque = collections.deque()
        self._closed = False

    # ------------------------------------------------------------ helpers
    def _rows(self, ids: np.ndarray, fields=None) -> dict:
        """Raw fields of the slots ``ids`` (views for a contiguous range, else copies)."""
        raw = self._sim.raw
        sel = _selector(ids)
        return {f: raw[f][sel] for f in (fields or raw)}

    @staticmethod
    def _sort(idx: np.ndarray):
        """(order or None if already increasing, sorted int32 ids)."""
        if idx.size < 2 or (idx[1:] > idx[:-1]).all():
            return None, np.ascontiguousarray(idx, dtype=np.int32)
        order = np.argsort(idx, kind="stable")
        return order, np.ascontiguousarray(idx[order], dtype=np.int32)

    def _check_indices(self, indices, what: str) -> np.ndarray:
        return self._check_indices_order(indices, what)[0]

    def _check_indices_order(self, indices, what: str) -> tuple[np.ndarray, bool]:
        """``(int64 indices, whether they are strictly increasing)`` after the checks."""
        if indices is None:
            return np.arange(self.num_envs), True
        idx = np.asarray(indices)
        if idx.ndim != 1 or (idx.size and idx.dtype.kind not in "iu"):
            raise ShapeError(f"{what}: indices must be a 1-D integer array, got shape {idx.shape} {idx.dtype}")
        if idx.dtype != np.int64:
            idx = idx.astype(np.int64)
        increasing = idx.size < 2 or bool((idx[1:] > idx[:-1]).all())
        if idx.size:
            # increasing indices (the usual case: a scheduler's active slots) need no reductions
            lo, hi = (int(idx[0]), int(idx[-1])) if increasing else (int(idx.min()), int(idx.max()))
            if lo < 0 or hi >= self.num_envs:
                raise ShapeError(f"{what}: indices must be in [0, {self.num_envs}), got {lo}..{hi}")
        if not increasing and np.unique(idx).size != idx.size:
            raise ShapeError(f"{what}: indices must be unique")
        if self._closed:
            raise ConfigError(f"{what}: the environment is closed")
        return idx, increasing

    def _check_idle(self, idx: np.ndarray, what: str) -> None:
        if self._busy[idx].any():
            raise ConfigError(f"{what}: slots {idx[self._busy[idx]][:5].tolist()} are still stepping; call recv() first")

    def _obs(self, raw: dict) -> np.ndarray:
        return self.task.observe(raw).astype(self.observation_dtype, copy=False)

    def _start(self, idx: np.ndarray, qpos: np.ndarray, qvel: np.ndarray) -> np.ndarray:
        order, ids = self._sort(idx)
        if order is not None:
            qpos, qvel = qpos[order], qvel[order]
        self._sim.set_state(ids, qpos, qvel)
        self._was_reset[idx] = True
        self._steps[idx] = 0
        self._contact_steps[idx] = 0
        rows = self._rows(ids)
        self._position[ids] = self.task.position(rows)
        obs = self._obs(rows)
        if order is None:
            return obs
        out = np.empty_like(obs)
        out[order] = obs
        return out

    # ------------------------------------------------------------ public API
    def reset(self, indices: np.ndarray | None = None, seeds: np.ndarray | None = None) -> np.ndarray:
        """Resets slots to the model's initial state plus Gymnasium's reset noise.

        qpos gets uniform noise in ``[-s, s]``; qvel gets uniform or normal
        (std ``s``) noise as the Gymnasium task does, ``s`` its
        ``reset_noise_scale``.  The noise of a slot is a function of its seed
        only (a counter-based stream, drawn for all slots at once); without
        seeds, slot ``i``'s k-th reset uses a seed derived from (``seed``, i, k).

        Returns:
          float observations ``[n, obs_dim]``.
        """
        idx = self._check_indices(indices, "reset")
        self._check_idle(idx, "reset")
        n = idx.size
        if seeds is not None:
            seeds = np.asarray(seeds)
            if seeds.shape != (n,) or not np.issubdtype(seeds.dtype, np.integer):
                raise ShapeError(f"reset: seeds must be integers of shape ({n},), got {seeds.shape} {seeds.dtype}")
        nq, nv, sc = self.model.nq, self.model.nv, self.task.reset_noise_scale
        if self.reset_rng == "gymnasium":
            qpos, qvel = self._gymnasium_noise(idx, seeds)
            return self._start(idx, self.init_qpos + qpos, self.init_qvel + qvel)
        if seeds is None:
            with np.errstate(over="ignore"):
                keys = _mix64(_mix64(self._base_key ^ _mix64(idx.astype(np.uint64))) + self._episode[idx])
            self._episode[idx] += np.uint64(1)
        else:
            keys = _mix64(seeds.astype(np.int64).view(np.uint64) ^ np.uint64(0x5DEECE66D))
        qpos = self.init_qpos + (-sc + 2.0 * sc * _uniform01(keys, nq, 0))
        if self.task.qvel_noise == "normal":
            qvel = self.init_qvel + sc * _normal(keys, nv, nq)
        else:
            qvel = self.init_qvel + (-sc + 2.0 * sc * _uniform01(keys, nv, nq))
        return self._start(idx, qpos, qvel)

    def _gymnasium_noise(self, idx: np.ndarray, seeds):
        """Per-slot Generators drawn in Gymnasium's order (reset_rng="gymnasium")."""
        nq, nv, sc = self.model.nq, self.model.nv, self.task.reset_noise_scale
        if seeds is not None and (seeds < 0).any():
            raise ConfigError("reset: Gymnasium seeds must be non-negative")
        dq = np.empty((idx.size, nq))
        dv = np.empty((idx.size, nv))
        for j, i in enumerate(idx.tolist()):  # reset path only, a few microseconds per slot
            if seeds is not None:
                self._gym_rngs[i] = np.random.default_rng(int(seeds[j]))
            elif i not in self._gym_rngs:
                self._gym_rngs[i] = np.random.default_rng([self.seed & 0xFFFFFFFF, i])
            rng = self._gym_rngs[i]
            dq[j] = rng.uniform(low=-sc, high=sc, size=nq)
            if self.task.qvel_noise == "normal":
                dv[j] = sc * rng.standard_normal(nv)
            else:
                dv[j] = rng.uniform(low=-sc, high=sc, size=nv)
        return dq, dv

    def set_state(self, indices: np.ndarray, qpos: np.ndarray, qvel: np.ndarray) -> np.ndarray:
        """Starts episodes in ``indices`` from given joint positions/velocities.

        Does what Gymnasium's reset does after drawing its noise
        (``mj_resetData``, write qpos/qvel, ``mj_forward``), so copying
        ``env.unwrapped.data.qpos/qvel`` from a Gymnasium env after its reset
        continues identically.  Returns the observations ``[n, obs_dim]``.
        """
        idx = self._check_indices(indices, "set_state")
        self._check_idle(idx, "set_state")
        qpos = np.asarray(qpos, np.float64)
        qvel = np.asarray(qvel, np.float64)
        if qpos.shape != (idx.size, self.model.nq):
            raise ShapeError(f"set_state: qpos must have shape ({idx.size}, {self.model.nq}), got {qpos.shape}")
        if qvel.shape != (idx.size, self.model.nv):
            raise ShapeError(f"set_state: qvel must have shape ({idx.size}, {self.model.nv}), got {qvel.shape}")
        return self._start(idx, qpos, qvel)

    def get_state(self, indices: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``(qpos [n, nq], qvel [n, nv])`` of the slots (float64 copies)."""
        idx = self._check_indices(indices, "get_state")
        self._check_idle(idx, "get_state")
        return (np.array(self._sim.raw["qpos"][idx], np.float64), np.array(self._sim.raw["qvel"][idx], np.float64))

    def send(self, actions: np.ndarray, indices: np.ndarray | None = None) -> None:
        """Starts one step of the slots ``indices`` with ``actions [n, nu]``; returns at once.

        Several sends on disjoint slots may be in flight; ``recv`` returns
        their results in the order they were sent.
        """
        idx, increasing = self._check_indices_order(indices, "send")
        self._check_idle(idx, "send")
        a = np.asarray(actions)
        nu = self.model.nu
        if a.shape != (idx.size, nu):
            raise ShapeError(
                f"send: {self.env_id} takes actions of shape (len(indices), {nu}) = ({idx.size}, {nu}), got {a.shape}"
            )
        if a.dtype.kind not in "iuf":  # complex, bool, object: Gymnasium's Box refuses them too
            raise ShapeError(f"send: actions must be real numbers (int or float), got {a.dtype}")
        if not self._was_reset[idx].all():
            raise RuntimeError(f"send: slots {idx[~self._was_reset[idx]][:5].tolist()} were never reset; "
                               "call reset() before stepping them")
        if increasing:
            order, ids = None, idx.astype(np.int32)
        else:
            order, ids = self._sort(idx)
        ctrl = np.ascontiguousarray(a if order is None else a[order], dtype=np.float64)
        before = self._position[_selector(ids)].copy()  # == task.position of the slots' current raw fields
        self._busy[ids] = True
        try:
            job = self._sim.start_step(ids, ctrl, lambda: self._finish_step(idx, order, ids, ctrl, before))
        except BaseException:
            self._busy[ids] = False
            raise
        self._pending.append((ids, job))

    def _finish_step(self, idx, order, ids, ctrl, before):
        """Rewards, terminations, observations and counters of a finished step.

        Runs in the worker thread that finished the step's physics (the slots
        are busy, so no other call touches their rows meanwhile).
        """
        raw = self._rows(ids)
        after = self.task.position(raw)
        self._position[ids] = after
        xvel = (after[:, 0] - before[:, 0]) / self.dt
        reward, terminated = self.task.reward(raw, xvel, ctrl)
        obs = self._obs(raw)
        self._steps[ids] += 1
        truncated = self._steps[ids] >= self.max_episode_steps
        if self.task.feet:
            self._contact_steps[ids] += raw["sensordata"][:, : len(self.task.feet)] > 0
        reward = reward.astype(np.float32)
        if order is None:
            return idx, obs, reward, terminated, truncated
        n = idx.size
        o = np.empty_like(obs)
        r = np.empty(n, np.float32)
        te = np.empty(n, bool)
        tr = np.empty(n, bool)
        o[order], r[order], te[order], tr[order] = obs, reward, terminated, truncated
        return idx, o, r, te, tr

    def recv(self):
        """Waits for the oldest ``send`` and returns its results.

        Returns:
          ``(indices [n] int64, obs [n, obs_dim], reward float32 [n],
          terminated bool [n], truncated bool [n])`` in the order of the
          ``indices`` given to ``send``.
        """
        if not self._pending:
            raise ConfigError("recv() without a pending send()")
        ids, job = self._pending.popleft()
        try:
            return job.wait()
        finally:
            self._busy[ids] = False

    def descriptors(self, indices: np.ndarray | None = None) -> np.ndarray:
        """Behaviour descriptors of the current episodes of ``indices``.

        Columns (see ``descriptor_names``): final torso ``x, y`` (root joint
        position; ``y`` is 0 for the planar Hopper, Walker2d and HalfCheetah),
        then for each foot geom in ``foot_geoms`` the fraction of steps of the
        episode at whose end that geom touched the floor, in [0, 1].
        """
        idx = self._check_indices(indices, "descriptors")
        self._check_idle(idx, "descriptors")
        xy = self.task.xy(self._rows(idx))
        steps = np.maximum(self._steps[idx], 1)[:, None]
        frac = self._contact_steps[idx] / steps
        return np.concatenate([xy, frac], axis=1).astype(np.float32)

    def episode_steps(self, indices: np.ndarray | None = None) -> np.ndarray:
        """Steps taken in the current episode of each slot."""
        idx = self._check_indices(indices, "episode_steps")
        return self._steps[idx].copy()

    def get_data(self, index: int):
        """An ``MjData`` holding slot ``index``'s simulation (for rendering)."""
        return self._sim.get_data(int(self._check_indices([index], "get_data")[0]))

    def close(self) -> None:
        """Stops the worker threads; the environment cannot step afterwards."""
        if not self._closed:
            while self._pending:
                try:
                    self._pending.popleft()[-1].wait()
                except Exception:  # noqa: BLE001 - closing anyway
                    pass
            self._sim.close()
            self._closed = True

    def __del__(self):  # pragma: no cover - best effort
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        return f"MujocoVectorEnv({self.env_id!r}, num_envs={self.num_envs}, backend={self.backend!r})"


def _factory(env_id: str):
    def make_env(num_envs: int = 1, **kwargs) -> MujocoVectorEnv:
        unknown = sorted(set(kwargs) - set(_OPTIONS))
        if unknown:  # a typo in a config's env.kwargs: name the options instead of a bare TypeError
            raise ConfigError(f"{env_id}: unknown option(s) {unknown}; known options: {', '.join(_OPTIONS)}")
        return MujocoVectorEnv(env_id, num_envs=num_envs, **kwargs)

    make_env.__name__ = f"make_{env_id.split('-')[0].lower()}"
    make_env.__doc__ = (
        f"{env_id}: Gymnasium's MuJoCo task (same numbers), batched and stepped in native threads.\n\n"
        f"``make_env(num_envs, **options)`` -> :class:`MujocoVectorEnv` (options: {', '.join(_OPTIONS)})."
    )
    return make_env


#: Keyword options of MujocoVectorEnv that ``make(id, n, **options)`` accepts.
_OPTIONS = tuple(k for k in inspect.signature(MujocoVectorEnv.__init__).parameters
                 if k not in ("self", "env_id", "num_envs"))

for _id in MUJOCO_ENV_IDS:
    register("env", _id)(_factory(_id))
del _id
