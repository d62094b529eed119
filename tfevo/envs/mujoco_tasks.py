"""Rewards, terminations and observations of the MuJoCo locomotion tasks.

Each task reproduces one Gymnasium ``-v5`` environment with its default
keyword arguments (``gymnasium/envs/mujoco/<name>_v5.py``), but computes over a
whole batch of simulations at once with numpy: every function takes the raw
simulator fields of ``n`` simulations as ``[n, ...]`` float64 arrays and
returns ``[n, ...]`` results.  The physics is MuJoCo's; only the bookkeeping
around it lives here.

The raw fields a task reads are named after ``mujoco.MjData`` fields
(``qpos``, ``qvel``, ``xpos``, ``xipos``, ``cinert``, ``cvel``,
``qfrc_actuator``, ``cfrc_ext``) and hold the values MjData holds right after
``mj_step(..., nstep=frame_skip)`` (plus ``mj_rnePostConstraint`` for tasks
that read ``cfrc_ext``), exactly as Gymnasium's ``MujocoEnv`` leaves them.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Callable

import numpy as np

__all__: list[str] = []  # internal module; the public API is tfevo.envs.mujoco

Raw = dict  # field name -> float64 [n, ...]


@dataclasses.dataclass(frozen=True)
class Task:
    """One locomotion task: model file, frame skip and batched bookkeeping.

    Attributes:
      env_id: Gymnasium id, e.g. ``"HalfCheetah-v5"``.
      xml: file name in Gymnasium's ``envs/mujoco/assets`` folder.
      frame_skip: MuJoCo substeps per environment step.
      reset_noise_scale: half-width (uniform) or standard deviation (normal)
        of the reset noise added to the model's initial qpos/qvel.
      qvel_noise: ``"uniform"`` or ``"normal"``: distribution of the qvel
        reset noise (qpos noise is always uniform).
      fields: derived MjData fields the task reads besides qpos/qvel.
      rne_post: whether ``mj_rnePostConstraint`` runs after each step
        (needed for ``cfrc_ext``).
      position: ``raw -> [n, 2]`` positions whose difference over a step
        gives the forward velocity (only column 0 is rewarded).
      observe: ``raw -> [n, obs_dim]`` observation.
      reward: ``(raw, x_velocity [n], action [n, nu]) -> (reward [n],
        terminated bool [n])``.
      xy: ``raw -> [n, 2]`` final torso x-y position for descriptors.
      feet: geom names whose contact with the floor is counted for the
        feet-contact descriptors.
      floor: name of the floor geom.
      position_uses_mass: ``position`` also takes the model's ``body_mass``
        (bound by :meth:`for_model`).
    """

    env_id: str
    xml: str
    frame_skip: int
    reset_noise_scale: float
    qvel_noise: str
    fields: tuple
    rne_post: bool
    position: Callable
    observe: Callable
    reward: Callable
    xy: Callable
    feet: tuple = ()
    floor: str = "floor"
    position_uses_mass: bool = False

    def for_model(self, model) -> "Task":
        """This task with model constants (body masses) bound into its functions."""
        if not self.position_uses_mass:
            return self
        mass = np.array(model.body_mass, np.float64)
        return dataclasses.replace(self, position=functools.partial(self.position, body_mass=mass))


def _sq(a: np.ndarray) -> np.ndarray:
    return np.sum(np.square(a), axis=-1)


def _root_x(raw: Raw) -> np.ndarray:
    out = np.zeros((raw["qpos"].shape[0], 2))
    out[:, 0] = raw["qpos"][:, 0]
    return out


def _root_xy(raw: Raw) -> np.ndarray:
    return raw["qpos"][:, 0:2].copy()


# --------------------------------------------------------------------- Swimmer
def _swimmer_obs(raw: Raw) -> np.ndarray:
    return np.concatenate([raw["qpos"][:, 2:], raw["qvel"]], axis=1)


def _swimmer_reward(raw: Raw, xvel: np.ndarray, action: np.ndarray):
    reward = 1.0 * xvel - 1e-4 * _sq(action)
    return reward, np.zeros(xvel.shape, bool)


# ------------------------------------------------------- Hopper and Walker2d
def _planar_obs_clipped(raw: Raw) -> np.ndarray:
    return np.concatenate([raw["qpos"][:, 1:], np.clip(raw["qvel"], -10.0, 10.0)], axis=1)


def _hopper_reward(raw: Raw, xvel: np.ndarray, action: np.ndarray):
    q, v = raw["qpos"], raw["qvel"]
    z, angle = q[:, 1], q[:, 2]
    state = np.concatenate([q, v], axis=1)[:, 2:]
    healthy = (
        np.all((-100.0 < state) & (state < 100.0), axis=1)
        & (0.7 < z)
        & (z < np.inf)
        & (-0.2 < angle)
        & (angle < 0.2)
    )
    reward = (1.0 * xvel + healthy * 1.0) - 1e-3 * _sq(action)
    return reward, ~healthy


def _walker_reward(raw: Raw, xvel: np.ndarray, action: np.ndarray):
    q = raw["qpos"]
    z, angle = q[:, 1], q[:, 2]
    healthy = (0.8 < z) & (z < 2.0) & (-1.0 < angle) & (angle < 1.0)
    reward = (1.0 * xvel + healthy * 1.0) - 1e-3 * _sq(action)
    return reward, ~healthy


# ----------------------------------------------------------------- HalfCheetah
def _cheetah_obs(raw: Raw) -> np.ndarray:
    return np.concatenate([raw["qpos"][:, 1:], raw["qvel"]], axis=1)


def _cheetah_reward(raw: Raw, xvel: np.ndarray, action: np.ndarray):
    reward = 1.0 * xvel - 0.1 * _sq(action)
    return reward, np.zeros(xvel.shape, bool)


# ------------------------------------------------------------------------- Ant
def _ant_position(raw: Raw) -> np.ndarray:
    return raw["xpos"][:, 1, 0:2].copy()  # main_body=1 ("torso")


def _ant_contact(raw: Raw) -> np.ndarray:
    return np.clip(raw["cfrc_ext"], -1.0, 1.0)


def _ant_obs(raw: Raw) -> np.ndarray:
    n = raw["qpos"].shape[0]
    cf = _ant_contact(raw)[:, 1:].reshape(n, -1)
    return np.concatenate([raw["qpos"][:, 2:], raw["qvel"], cf], axis=1)


def _ant_reward(raw: Raw, xvel: np.ndarray, action: np.ndarray):
    q, v = raw["qpos"], raw["qvel"]
    n = q.shape[0]
    finite = np.all(np.isfinite(q), axis=1) & np.all(np.isfinite(v), axis=1)
    z = q[:, 2]
    healthy = finite & (0.2 <= z) & (z <= 1.0)
    contact_cost = 5e-4 * _sq(_ant_contact(raw).reshape(n, -1))
    reward = (xvel * 1.0 + healthy * 1.0) - (0.5 * _sq(action) + contact_cost)
    return reward, ~healthy


# -------------------------------------------------------------------- Humanoid
def _mass_center(raw: Raw, body_mass: np.ndarray) -> np.ndarray:
    """``[n, 2]``: x-y of the centre of mass from ``xipos`` (Gymnasium's mass_center)."""
    num = np.einsum("b,nbj->nj", body_mass, raw["xipos"])
    return (num / body_mass.sum())[:, 0:2].copy()


def _humanoid_obs(raw: Raw) -> np.ndarray:
    n = raw["qpos"].shape[0]
    return np.concatenate(
        [
            raw["qpos"][:, 2:],
            raw["qvel"],
            raw["cinert"][:, 1:].reshape(n, -1),
            raw["cvel"][:, 1:].reshape(n, -1),
            raw["qfrc_actuator"][:, 6:],
            raw["cfrc_ext"][:, 1:].reshape(n, -1),
        ],
        axis=1,
    )


def _humanoid_reward(raw: Raw, xvel: np.ndarray, action: np.ndarray):
    q = raw["qpos"]
    n = q.shape[0]
    healthy = (1.0 < q[:, 2]) & (q[:, 2] < 2.0)
    contact_cost = np.clip(5e-7 * _sq(raw["cfrc_ext"].reshape(n, -1)), -np.inf, 10.0)
    # Gymnasium charges data.ctrl, which holds the (unclipped) action as float64.
    reward = (1.25 * xvel + healthy * 5.0) - (0.1 * _sq(action) + contact_cost)
    return reward, ~healthy


def make_tasks() -> dict[str, Task]:
    """The ``{env_id: Task}`` table (bind model constants with ``Task.for_model``)."""
    return {
        "Swimmer-v5": Task(
            "Swimmer-v5", "swimmer.xml", 4, 0.1, "uniform", (), False,
            _root_xy, _swimmer_obs, _swimmer_reward, _root_xy,
        ),
        "Hopper-v5": Task(
            "Hopper-v5", "hopper.xml", 4, 0.005, "uniform", (), False,
            _root_x, _planar_obs_clipped, _hopper_reward, _root_x, ("foot_geom",),
        ),
        "HalfCheetah-v5": Task(
            "HalfCheetah-v5", "half_cheetah.xml", 5, 0.1, "normal", (), False,
            _root_x, _cheetah_obs, _cheetah_reward, _root_x, ("bfoot", "ffoot"),
        ),
        "Walker2d-v5": Task(
            "Walker2d-v5", "walker2d_v5.xml", 4, 0.005, "uniform", (), False,
            _root_x, _planar_obs_clipped, _walker_reward, _root_x,
            ("foot_geom", "foot_left_geom"),
        ),
        "Ant-v5": Task(
            "Ant-v5", "ant.xml", 5, 0.1, "normal", ("xpos", "cfrc_ext"), True,
            _ant_position, _ant_obs, _ant_reward, _root_xy,
            ("left_ankle_geom", "right_ankle_geom", "third_ankle_geom", "fourth_ankle_geom"),
        ),
        "Humanoid-v5": Task(
            "Humanoid-v5", "humanoid.xml", 5, 0.01, "uniform",
            ("xipos", "cinert", "cvel", "qfrc_actuator", "cfrc_ext"), True,
            _mass_center, _humanoid_obs, _humanoid_reward, _root_xy,
            ("right_foot", "left_foot"), position_uses_mass=True,
        ),
    }


ENV_IDS = tuple(make_tasks())
