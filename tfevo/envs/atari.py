"""Atari 2600 games through ale-py's native threaded vector environment.

:class:`AtariEnv` drives ``ale_py.ALEVectorInterface`` (the C++ engine behind
``ale_py.vector_env.AtariVectorEnv``: emulators step on native worker threads,
frames are pre-processed -- frame skip, max-pool, resize, grayscale, frame
stack, no-op starts -- in C++) and exposes tfevo's host-env contract:

* ``reset(indices, seeds)`` resets only the given slots, each with its own
  seed (see "Seeding" for when an episode is a pure function of it);
* ``send(actions, indices)`` returns at once while the emulators step on
  their threads; ``recv()`` waits and returns the results of exactly the
  slots that were sent;
* slots never reset on their own under the caller's feet: results of a slot
  after its episode ended are the caller's business (the pipelined evaluator
  resets it before giving it to the next member).

ale-py 0.12's synchronous mode always steps the whole batch, so slots that
were not sent are stepped with NOOP and their results dropped; they cost
emulator time but never change what a sent slot sees.  Keep the number of
slots at or below the number of members waiting (the pipelined evaluator
streams a large population through fewer slots) to keep that waste small.

Presets (``preset=``):

``"deep_neuroevolution"`` (default) -- the setting of Such et al.'s Deep GA /
  "Accelerating deep neuroevolution": frame skip 4 (max-pooled over the last
  two frames), up to 30 random no-ops at the start of every episode, 84x84
  grayscale frames, a stack of the last 4, deterministic emulation (sticky
  actions 0), raw (unclipped) game score as reward, no life-loss
  termination, no FIRE on reset, the full 18-action set (one network shape
  for every game; pass ``full_action_space=False`` for the minimal set), and
  an episode cap of 20,000 emulator frames (5,000 agent steps).  The paper
  text we follow gives frame skip 4 and 30 no-ops; the 20k-frame cap and the
  18-action choice are ours (stated here so results are comparable).

``"gymnasium"`` -- the dynamics of Gymnasium's ``ALE/<Game>-v5`` ids:
  sticky actions with probability 0.25, frame skip 4, the minimal action set,
  a cap of 108,000 frames, no no-ops, unclipped rewards -- with the same
  84x84x4 grayscale observations (``ALE/...-v5`` itself returns raw RGB
  frames).

Seeding (``seed_mode=``): ale-py can only re-seed an emulator by reloading
its ROM, which makes a seeded reset ~20x slower than a plain one.  With
``"fast"`` (the default whenever sticky actions are off) emulators are never
re-seeded (Atari emulation is deterministic), and the random no-op start is
done here instead -- the first ``n ~ U{0..noop_max}`` agent steps after a
reset play NOOP whatever action is sent (the DQN protocol's "up to 30 no-op
actions"), with ``n`` drawn from the reset's seed.  An episode is then a
function of (seed, actions) only in games whose program re-initializes all
of its state on a console reset: ALE's ``reset_game`` keeps the RAM, and
some games read it.  Frostbite does: after 20 random-action steps, a reset
and one more step, the same seed and actions play a different episode
(``benchmarks/audit_atari_slot_history.py``), so in a pipelined evaluation a
member's score can depend on what its slot ran before (the schedule, the
number of slots, the chunking) -- a run with the same settings and seed still
repeats exactly.  ``"exact"`` (the default with sticky actions, whose random
stream lives inside the emulator) reloads the ROM and re-seeds ale-py on
every seeded reset (tens to hundreds of milliseconds each; a power-on state,
so the seed replays whatever ran in the slot before) and lets ale-py do the no-ops,
which ale-py plays as up to ``noop_max`` single emulator frames before the
first observation (Gymnasium's ``AtariPreprocessing`` plays 1..``noop_max``
frames), not as agent steps: "fast" starts idle for up to ``noop_max *
frameskip`` frames, "exact" for up to ``noop_max``.  ``"fast"`` with sticky
actions is refused, as it could not replay an episode.

Against Gymnasium (``gym.make(id, frameskip=1, ...)`` + ``AtariPreprocessing``
+ ``FrameStackObservation``, same settings, seed and actions) every step's
frames, rewards and ``terminated``/``truncated`` are equal, with one
difference: the stack of an episode's first frames is padded with zeros
(``FrameStackObservation(..., padding_type="zero")``), where Gymnasium's
default repeats the reset frame.  ``benchmarks/audit_atari_gymnasium.py``
runs that comparison.

Every preset value can be overridden by keyword (``noop_max=0``,
``max_num_frames_per_episode=...``, ``repeat_action_probability=...``, ...).

Example:

>>> env = AtariEnv("ALE/Pong-v5", num_envs=8)          # deep_neuroevolution preset
>>> obs = env.reset(np.arange(8), seeds=np.arange(8))   # uint8 [8, 84, 84, 4]
>>> env.send(np.zeros(8, np.int32), np.arange(8))
>>> idx, obs, reward, terminated, truncated = env.recv()
"""

from __future__ import annotations

import re

import numpy as np

from tfevo.core import ConfigError, ShapeError
from tfevo.envs.base import ActionSpec, HostVectorEnv

__all__ = ["AtariEnv", "make_atari", "PRESETS", "game_name"]

#: Option sets for :class:`AtariEnv` (see the module docstring).
PRESETS: dict[str, dict] = {
    "deep_neuroevolution": dict(
        frameskip=4,
        noop_max=30,
        img_height=84,
        img_width=84,
        grayscale=True,
        stack_num=4,
        maxpool=True,
        repeat_action_probability=0.0,
        max_num_frames_per_episode=20_000,
        full_action_space=True,
        episodic_life=False,
        reward_clipping=False,
        use_fire_reset=False,
    ),
    "gymnasium": dict(
        frameskip=4,
        noop_max=0,
        img_height=84,
        img_width=84,
        grayscale=True,
        stack_num=4,
        maxpool=True,
        repeat_action_probability=0.25,
        max_num_frames_per_episode=108_000,
        full_action_space=False,
        episodic_life=False,
        reward_clipping=False,
        use_fire_reset=False,
    ),
}

_OPTIONS = set(PRESETS["deep_neuroevolution"])


def game_name(env_id: str) -> str:
    """``"ALE/MsPacman-v5"`` / ``"MsPacman"`` / ``"ms_pacman"`` -> ale-py ROM id ``"ms_pacman"``."""
    name = env_id
    if name.startswith("ALE/"):
        name = name[4:]
    name = re.sub(r"-v\d+$", "", name)
    name = re.sub(r"NoFrameskip$", "", name)
    if name != name.lower():
        name = re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()
    return name


def _check_rom(game: str, env_id: str) -> str:
    from ale_py import roms

    valid = roms.get_all_rom_ids()
    if game not in valid:
        close = [g for g in valid if g.startswith(game[:3])][:8]
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise ConfigError(
            f"unknown Atari game {env_id!r} (ROM id {game!r}){hint}; list valid names with "
            "`python -c \"import ale_py.roms as r; print(r.get_all_rom_ids())\"` and use "
            "ids like 'ALE/Pong-v5' or 'ALE/MsPacman-v5'"
        )
    return str(roms.get_rom_path(game))


class AtariEnv(HostVectorEnv):
    """``num_envs`` Atari emulators stepped on native threads (ale-py).

    Args:
      env_id: ``"ALE/<Game>-v5"``, a CamelCase game name or an ale-py ROM id.
      num_envs: number of slots (emulators).
      preset: ``"deep_neuroevolution"`` (default) or ``"gymnasium"``.
      num_threads: emulator worker threads (0 = one per core, capped at
        ``num_envs``).
      channels_last: observations ``[n, H, W, stack]`` (Keras convention,
        default) instead of ale-py's ``[n, stack, H, W]``.
      seed_mode: ``"fast"``, ``"exact"`` or ``"auto"`` (default: fast unless
        sticky actions are on); see the module docstring.
      seed: seeds the no-op counts of resets done without explicit seeds.
      **options: overrides of preset values: ``frameskip``, ``noop_max``,
        ``img_height``, ``img_width``, ``grayscale``, ``stack_num``,
        ``maxpool``, ``repeat_action_probability``,
        ``max_num_frames_per_episode``, ``full_action_space``,
        ``episodic_life``, ``reward_clipping``, ``use_fire_reset``.

    Attributes:
      observation_shape: per-slot frame shape, e.g. ``(84, 84, 4)``.
      observation_dtype: ``np.uint8``.
      action_spec: discrete, ``num_actions`` 18 (full) or the game's minimal set.
      frames_per_step: emulator frames per agent step (the frame skip).
    """

    def __init__(
        self,
        env_id: str,
        num_envs: int = 1,
        *,
        preset: str = "deep_neuroevolution",
        num_threads: int = 0,
        channels_last: bool = True,
        seed_mode: str = "auto",
        seed: int = 0,
        **options,
    ):
        import ale_py

        if preset not in PRESETS:
            raise ConfigError(f"unknown Atari preset {preset!r}; known: {', '.join(PRESETS)}")
        unknown = set(options) - _OPTIONS
        if unknown:
            raise ConfigError(
                f"unknown AtariEnv option(s) {sorted(unknown)}; known: {', '.join(sorted(_OPTIONS))}"
            )
        if int(num_envs) < 1:
            raise ConfigError(f"num_envs must be >= 1, got {num_envs}")
        cfg = dict(PRESETS[preset])
        cfg.update(options)
        if seed_mode not in ("auto", "fast", "exact"):
            raise ConfigError(f"seed_mode must be 'auto', 'fast' or 'exact', got {seed_mode!r}")
        if seed_mode == "auto":
            seed_mode = "exact" if float(cfg["repeat_action_probability"]) > 0 else "fast"
        elif seed_mode == "fast" and float(cfg["repeat_action_probability"]) > 0:
            # the sticky-action stream lives in the emulator, which "fast" never re-seeds
            raise ConfigError(
                f"seed_mode='fast' needs repeat_action_probability=0 (got {cfg['repeat_action_probability']}): "
                "sticky actions draw from the emulator's random stream, which fast mode never re-seeds, so a "
                "seeded reset would not replay the same episode; use seed_mode='exact' (or 'auto')")
        if int(cfg["noop_max"]) < 0:
            raise ConfigError(f"noop_max must be >= 0, got {cfg['noop_max']}")
        if int(cfg["frameskip"]) < 1:
            raise ConfigError(f"frameskip must be >= 1, got {cfg['frameskip']}")
        if not 0.0 <= float(cfg["repeat_action_probability"]) <= 1.0:
            raise ConfigError(f"repeat_action_probability must be in [0, 1], got {cfg['repeat_action_probability']}")
        self.game = game_name(env_id)
        rom = _check_rom(self.game, env_id)
        self.env_id = env_id
        self.preset = preset
        self.config = cfg
        self.num_envs = int(num_envs)
        self.channels_last = bool(channels_last)
        self.frames_per_step = int(cfg["frameskip"])
        self.seed_mode = seed_mode
        self._noop_max = int(cfg["noop_max"])
        self._noops_left = np.zeros(self.num_envs, np.int64)
        self._rng = np.random.default_rng(int(seed))
        self._ale = ale_py.ALEVectorInterface(
            rom_path=rom,
            num_envs=self.num_envs,
            frame_skip=int(cfg["frameskip"]),
            stack_num=int(cfg["stack_num"]),
            img_height=int(cfg["img_height"]),
            img_width=int(cfg["img_width"]),
            grayscale=bool(cfg["grayscale"]),
            maxpool=bool(cfg["maxpool"]),
            noop_max=int(cfg["noop_max"]) if seed_mode == "exact" else 0,
            use_fire_reset=bool(cfg["use_fire_reset"]),
            episodic_life=bool(cfg["episodic_life"]),
            life_loss_info=False,
            reward_clipping=bool(cfg["reward_clipping"]),
            max_episode_steps=int(cfg["max_num_frames_per_episode"]),
            repeat_action_probability=float(cfg["repeat_action_probability"]),
            full_action_space=bool(cfg["full_action_space"]),
            batch_size=0,  # synchronous: results come back in slot order
            num_threads=int(num_threads),
            thread_affinity_offset=-1,
            autoreset_mode="NextStep",
        )
        s, h, w = int(cfg["stack_num"]), int(cfg["img_height"]), int(cfg["img_width"])
        rgb = () if cfg["grayscale"] else (3,)
        if self.channels_last:
            self.observation_shape = (h, w, s * (3 if rgb else 1))
        else:
            self.observation_shape = (s, h, w, *rgb)
        self.observation_dtype = np.uint8
        self.action_spec = ActionSpec(discrete=True, num_actions=len(self._ale.get_action_set()))
        self._noop = np.zeros(self.num_envs, np.int32)
        self._paddle = np.ones(self.num_envs, np.float32)
        self._pending: np.ndarray | None = None
        self._started = False

    # -- helpers ------------------------------------------------------------
    def _obs(self, frames: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        """ale-py frames ``[N, s, h, w(, 3)]`` -> this env's layout, keeping rows ``rows`` (all if None)."""
        if not self.channels_last:
            return frames if rows is None else frames[rows]
        if rows is not None and not (rows.size == frames.shape[0] and np.array_equal(rows, np.arange(rows.size))):
            frames = frames[rows]
        if frames.ndim == 5:  # [n, s, h, w, 3] -> [n, h, w, s*3]
            n, s, h, w, c = frames.shape
            return np.ascontiguousarray(frames.transpose(0, 2, 3, 1, 4)).reshape(n, h, w, s * c)
        # [n, s, h, w] -> [n, h, w, s]: one strided copy per stacked frame is
        # ~4x faster than numpy's generic transpose for a last axis of 4 bytes.
        n, s, h, w = frames.shape
        out = np.empty((n, h, w, s), frames.dtype)
        for j in range(s):
            out[..., j] = frames[:, j]
        return out

    def _check_indices(self, indices) -> np.ndarray:
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        if idx.size and (idx.min() < 0 or idx.max() >= self.num_envs):
            raise ShapeError(f"slot indices must be in [0, {self.num_envs}), got {idx.tolist()}")
        if np.unique(idx).size != idx.size:
            raise ShapeError(f"slot indices must be distinct, got {idx.tolist()}")
        return idx

    # -- HostVectorEnv API ----------------------------------------------------
    def reset(self, indices, seeds=None) -> np.ndarray:
        """Resets slots ``indices`` (seeded, one int seed each); returns their first frames.

        A slot reset with seed ``s`` plays exactly the same episode for the
        same actions, whatever ran in it before (``seed_mode`` "fast": the
        seed fixes the no-op count; "exact": ale-py is re-seeded).
        ``seeds=None`` draws from the env's own stream instead.
        """
        if self._pending is not None:
            raise RuntimeError("reset() called between send() and recv()")
        idx = self._check_indices(indices)
        if idx.size == 0:
            return np.empty((0, *self.observation_shape), np.uint8)
        if not self._started and idx.size < self.num_envs:
            # ale-py needs one full reset before partial ones.
            self._ale.reset(np.arange(self.num_envs, dtype=np.int32), np.full(self.num_envs, -1, np.int32))
        self._started = True
        if seeds is not None:
            seeds = np.asarray(seeds, np.int64).reshape(-1)
            if seeds.size != idx.size:
                raise ShapeError(f"need one seed per reset slot ({idx.size}), got {seeds.size}")
        if self.seed_mode == "fast":
            if seeds is None:
                noops = self._rng.integers(0, self._noop_max + 1, idx.size)
            else:
                # (a negative int64 seed maps to a non-negative one, as exact mode's modulo does)
                noops = np.array([np.random.default_rng(int(s) % 2**63).integers(0, self._noop_max + 1)
                                  for s in seeds])
            self._noops_left[idx] = noops
            seeds = np.full(idx.size, -1, np.int64)  # never re-seed (= reload) the emulator
        elif seeds is None:
            seeds = np.full(idx.size, -1, np.int64)
        else:
            seeds = np.mod(seeds, 2**31 - 1)
        frames, info = self._ale.reset(idx.astype(np.int32), seeds.astype(np.int32))
        pos = np.empty(self.num_envs, np.int64)
        pos[np.asarray(info["env_id"])] = np.arange(len(info["env_id"]))
        return self._obs(frames, pos[idx])

    def send(self, actions, indices) -> None:
        """Starts stepping slots ``indices`` with int ``actions`` [n]; returns at once."""
        if self._pending is not None:
            raise RuntimeError("send() called twice without recv()")
        if not self._started:
            raise RuntimeError("reset() the slots before stepping them")
        idx = self._check_indices(indices)
        actions = np.asarray(actions)
        if actions.dtype.kind not in "iu":  # Gymnasium's Discrete space holds integers only (not 3.7, not 3.0)
            raise ShapeError(f"Atari actions must be integers in [0, {self.action_spec.num_actions}), got dtype "
                             f"{actions.dtype} (values {actions.reshape(-1)[:5].tolist()})")
        actions = actions.reshape(-1)
        if actions.shape != (idx.size,):
            raise ShapeError(f"need one action per slot ({idx.size}), got shape {np.shape(actions)}")
        n = self.action_spec.num_actions
        if actions.size and (actions.min() < 0 or actions.max() >= n):
            raise ShapeError(f"Atari actions must be in [0, {n}), got min {actions.min()} max {actions.max()}")
        full = self._noop.copy()
        full[idx] = actions
        left = self._noops_left[idx]
        if left.any():  # random no-op start (fast seed mode): NOOP is action 0 in every action set
            forced = idx[left > 0]
            full[forced] = 0
            self._noops_left[forced] -= 1
        self._ale.send(full, self._paddle)
        self._pending = idx

    def recv(self):
        """Waits for the last ``send``; returns ``(indices, obs, reward, terminated, truncated)``."""
        idx = self._pending
        if idx is None:
            raise RuntimeError("recv() called without a pending send()")
        self._pending = None
        frames, reward, term, trunc, info = self._ale.recv()
        env_ids = np.asarray(info["env_id"])
        pos = np.empty(self.num_envs, np.int64)
        pos[env_ids] = np.arange(env_ids.size)
        rows = pos[idx]
        return (
            idx,
            self._obs(frames, rows),
            np.asarray(reward, np.float32)[rows],
            np.asarray(term, bool)[rows],
            np.asarray(trunc, bool)[rows],
        )

    def close(self) -> None:
        """Stops the emulator threads."""
        self._ale = None


def make_atari(env_id: str, num_envs: int = 1, **kwargs) -> AtariEnv:
    """Creates an :class:`AtariEnv` (what ``tfevo.envs.make("ALE/...")`` calls)."""
    return AtariEnv(env_id, num_envs=num_envs, **kwargs)
