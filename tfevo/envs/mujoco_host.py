"""The host side of :mod:`tfevo.envs.mujoco`: model loading, seeded noise, worker threads, backends.

Two backends step the simulations; both release the GIL, so ``send`` returns
at once and TensorFlow can run inference while the physics runs:

* ``"batch"`` -- MuJoCo's own batched stepper (``mujoco.batch.Batch``): every
  simulation is a row of one state array, stepped by a C++ thread pool, and
  the fields the task reads are copied out by MuJoCo into ``[N, ...]`` arrays,
  so no Python runs per simulation.  Used where the task reads only fields
  that ``mj_step`` computes (Swimmer, Hopper, HalfCheetah, Walker2d).
* ``"threads"`` -- one ``MjData`` per simulation and a persistent pool of
  Python threads, each looping over its share of the simulations calling
  ``mj_step`` and ``mj_rnePostConstraint`` (both release the GIL).  Needed for
  Ant and Humanoid, whose observations and contact costs use ``cfrc_ext``
  computed *after* the step, as Gymnasium does.

MuJoCo's default log handler appends warnings to ``MUJOCO_LOG.TXT`` in the
current directory; creating an environment turns that file off (console
printing stays) unless the user has configured a log file path of their own
(:func:`disable_log_file`).
"""

from __future__ import annotations

import os
import queue
import threading
import warnings
from pathlib import Path

import numpy as np

from tfevo.core import ConfigError
from tfevo.envs import mujoco_tasks

__all__ = ["assets_dir", "disable_log_file"]

_LOG_LOCK = threading.Lock()
_MASK64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def _mujoco():
    try:
        import mujoco  # noqa: F401
    except ImportError as e:  # pragma: no cover
        raise ConfigError("MuJoCo environments need the `mujoco` package: pip install mujoco") from e
    return mujoco


def _has_batch() -> bool:
    try:
        from mujoco import batch  # noqa: F401
    except ImportError:
        return False
    return True


def assets_dir() -> Path:
    """Folder of the XML models shipped with the installed Gymnasium."""
    try:
        import gymnasium
    except ImportError as e:  # pragma: no cover
        raise ConfigError("MuJoCo environments load Gymnasium's model files: pip install gymnasium") from e
    return Path(gymnasium.__file__).resolve().parent / "envs" / "mujoco" / "assets"


def disable_log_file() -> None:
    """Stops MuJoCo's default handler from writing ``MUJOCO_LOG.TXT`` in the cwd.

    Only the default relative log file is turned off; a log file path that the
    user configured with ``mujoco.MjLogConfig`` is left alone.  Warnings are
    still printed to the console.
    """
    mujoco = _mujoco()
    if not hasattr(mujoco, "MjLogConfig"):  # pragma: no cover - MuJoCo < 3.4
        return
    with _LOG_LOCK:
        cfg = mujoco.MjLogConfig.get()
        if cfg.logto_file and not os.path.isabs(cfg.logfile):
            cfg.logto_file = False
            cfg.set()


def _compile(task: mujoco_tasks.Task):
    """The task's MjModel plus floor-contact sensors for the feet descriptors.

    Contact sensors only read contacts; they do not change the dynamics (the
    agreement tests compare against Gymnasium's unmodified model).
    """
    mujoco = _mujoco()
    path = assets_dir() / task.xml
    if not path.is_file():
        raise ConfigError(f"model file {path} not found; is Gymnasium >= 1.0 installed?")
    spec = mujoco.MjSpec.from_file(str(path))
    for g in task.feet:
        spec.add_sensor(
            name=f"_tfevo_contact_{g}",
            type=mujoco.mjtSensor.mjSENS_CONTACT,
            objtype=mujoco.mjtObj.mjOBJ_GEOM,
            objname=g,
            reftype=mujoco.mjtObj.mjOBJ_GEOM,
            refname=task.floor,
            intprm=[1 << int(mujoco.mjtConDataField.mjCONDATA_FOUND), 0, 1],
        )
    # Gymnasium's XML files use attributes MuJoCo prints deprecation notes about;
    # they are not the user's concern, so compile with the console quiet.
    with _LOG_LOCK:
        cfg = mujoco.MjLogConfig.get() if hasattr(mujoco, "MjLogConfig") else None
        if cfg is not None:
            quiet = mujoco.MjLogConfig.get()
            quiet.logto_console = False
            quiet.logto_file = False
            quiet.set()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model = spec.compile()
        finally:
            if cfg is not None:
                cfg.set()
    return model


# ------------------------------------------------------------------ randomness
def _mix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64 finalizer, elementwise on uint64 arrays (wrapping arithmetic)."""
    x = np.asarray(x, np.uint64)
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        x = x ^ (x >> np.uint64(31))
    return x


def _uniform01(keys: np.ndarray, count: int, offset: int = 0) -> np.ndarray:
    """``[n, count]`` float64 in [0, 1): counter-based stream per key, vectorized."""
    ctr = np.arange(offset + 1, offset + count + 1, dtype=np.uint64)
    with np.errstate(over="ignore"):
        x = keys[:, None] + ctr[None, :] * np.uint64(0x9E3779B97F4A7C15)
    return (_mix64(x) >> np.uint64(11)).astype(np.float64) * (1.0 / 9007199254740992.0)


def _normal(keys: np.ndarray, count: int, offset: int) -> np.ndarray:
    """``[n, count]`` standard normals (Box-Muller on two uniform streams)."""
    u1 = _uniform01(keys, count, offset)
    u2 = _uniform01(keys, count, offset + count)
    return np.sqrt(-2.0 * np.log1p(-u1)) * np.cos(2.0 * np.pi * u2)


def _selector(ids: np.ndarray):
    """``slice`` for sorted contiguous ids (cheap views), else the ids themselves."""
    if ids.size and int(ids[-1]) - int(ids[0]) == ids.size - 1 and (ids.size < 2 or ids[1] > ids[0]):
        return slice(int(ids[0]), int(ids[-1]) + 1)
    return ids


# --------------------------------------------------------------------- workers
class _Job:
    """Countdown latch for the parts of one send(), with error capture.

    The thread that finishes the last part runs ``on_done`` (the batched
    bookkeeping of the step) and stores its value in ``result``, so the
    caller's ``recv`` only waits and returns.
    """

    def __init__(self, parts: int, on_done=None):
        self._left = parts
        self._count_lock = threading.Lock()
        self._done = threading.Lock()  # held until the last part finishes
        self._on_done = on_done
        self.error: BaseException | None = None
        self.result = None
        self._done.acquire()
        if parts == 0:
            self._complete()

    def _complete(self) -> None:
        if self.error is None and self._on_done is not None:
            try:
                self.result = self._on_done()
            except BaseException as e:  # noqa: BLE001 - re-raised by wait()
                self.error = e
        self._done.release()

    def finish(self, error: BaseException | None = None) -> None:
        with self._count_lock:
            if error is not None and self.error is None:
                self.error = error
            self._left -= 1
            last = self._left == 0
        if last:
            self._complete()

    def wait(self):
        self._done.acquire()
        self._done.release()
        if self.error is not None:
            raise self.error
        return self.result


class _Pool:
    """A fixed set of daemon threads, each with its own FIFO of callables."""

    def __init__(self, nthreads: int, name: str):
        self._queues = [queue.SimpleQueue() for _ in range(nthreads)]
        self._threads = [
            threading.Thread(target=self._run, args=(q,), name=f"{name}-{i}", daemon=True)
            for i, q in enumerate(self._queues)
        ]
        for t in self._threads:
            t.start()

    @staticmethod
    def _run(q: queue.SimpleQueue) -> None:
        while True:
            item = q.get()
            if item is None:
                return
            fn, job = item
            try:
                fn()
            except BaseException as e:  # noqa: BLE001 - re-raised by recv()
                job.finish(e)
            else:
                job.finish()

    def submit(self, fns: list, on_done=None) -> _Job:
        """Runs ``fns[i]`` on thread ``i`` (None = nothing), then ``on_done``; returns the latch."""
        todo = [(i, f) for i, f in enumerate(fns) if f is not None]
        job = _Job(len(todo), on_done)
        for i, f in todo:
            self._queues[i].put((f, job))
        return job

    def close(self) -> None:
        for q in self._queues:
            q.put(None)
        for t in self._threads:
            t.join(timeout=5)


# -------------------------------------------------------------------- backends
class _BatchBackend:
    """All simulations as rows of one ``mujoco.batch.Batch`` (native threads)."""

    name = "batch"

    def __init__(self, model, task, num_envs: int, num_threads: int):
        from mujoco import batch as mjbatch

        self.model, self.task = model, task
        self.b = mjbatch.Batch(model, num_envs, nthread=num_threads)
        self.raw = {"qpos": self.b.bind("qpos"), "qvel": self.b.bind("qvel")}
        for f in task.fields:
            self.raw[f] = self.b.bind(f)
        if model.nsensordata:
            self.raw["sensordata"] = self.b.bind("sensordata")
        self.ctrl = self.b.bind("ctrl")
        self._pool = _Pool(1, "tfevo-mujoco-batch")
        self.b.reset()

    def set_state(self, ids: np.ndarray, qpos: np.ndarray, qvel: np.ndarray) -> None:
        mujoco = _mujoco()
        self.b.reset(ids, stage=mujoco.mjtStage.mjSTAGE_NONE.value)
        self.raw["qpos"][ids] = qpos
        self.raw["qvel"][ids] = qvel
        self.b.forward(ids)

    def start_step(self, ids: np.ndarray, ctrl: np.ndarray, on_done=None) -> _Job:
        self.ctrl[_selector(ids)] = ctrl
        nstep = self.task.frame_skip
        return self._pool.submit([lambda: self.b.step(ids, nstep=nstep)], on_done)

    def get_data(self, i: int):
        return self.b.get_data(int(i))

    def close(self) -> None:
        self._pool.close()


class _ThreadBackend:
    """One MjData per simulation; a pool of Python threads around mj_step."""

    name = "threads"

    def __init__(self, model, task, num_envs: int, num_threads: int):
        mujoco = _mujoco()
        self.model, self.task = model, task
        self.datas = [mujoco.MjData(model) for _ in range(num_envs)]
        d0 = self.datas[0]
        names = ["qpos", "qvel", *task.fields] + (["sensordata"] if model.nsensordata else [])
        self.raw = {f: np.zeros((num_envs, *np.shape(getattr(d0, f))), np.float64) for f in names}
        self._names = names
        self.nthreads = max(1, int(num_threads))
        self._pool = _Pool(self.nthreads, "tfevo-mujoco")
        for i in range(num_envs):
            self._gather(i, self.datas[i])

    def _gather(self, i: int, d) -> None:
        for f in self._names:
            self.raw[f][i] = getattr(d, f)

    def set_state(self, ids: np.ndarray, qpos: np.ndarray, qvel: np.ndarray) -> None:
        mujoco = _mujoco()
        m = self.model
        for j, i in enumerate(ids):  # reset path, not per step
            d = self.datas[i]
            mujoco.mj_resetData(m, d)
            d.qpos[:] = qpos[j]
            d.qvel[:] = qvel[j]
            mujoco.mj_forward(m, d)
            self._gather(i, d)

    def start_step(self, ids: np.ndarray, ctrl: np.ndarray, on_done=None) -> _Job:
        mujoco = _mujoco()
        m, datas, nstep, rne = self.model, self.datas, self.task.frame_skip, self.task.rne_post
        step, post, gather = mujoco.mj_step, mujoco.mj_rnePostConstraint, self._gather

        def run(lo: int, hi: int):
            def body():
                for j in range(lo, hi):
                    i = ids[j]
                    d = datas[i]
                    d.ctrl[:] = ctrl[j]
                    step(m, d, nstep)
                    if rne:
                        post(m, d)
                    gather(i, d)

            return body

        n = len(ids)
        k = min(self.nthreads, n)
        bounds = np.linspace(0, n, k + 1).astype(int) if k else [0]
        fns = [run(bounds[t], bounds[t + 1]) for t in range(k)]
        return self._pool.submit(fns, on_done)

    def get_data(self, i: int):
        return self.datas[int(i)]

    def close(self) -> None:
        self._pool.close()
