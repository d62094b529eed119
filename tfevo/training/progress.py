"""What a person watching a run sees: one :class:`GenerationLog` per generation, shown as progress.

A tqdm bar when stdout is a terminal; otherwise (a file, a pipe, a cluster
job, a terminal that reports no width) one plain line per generation, at most one every ``progress_every``
seconds, with generation, frames, best, mean, frames/s and the ETA of the
budget.  :class:`ProgressMixin` holds the Trainer's side of it.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass, field

__all__ = ["GenerationLog", "ProgressMixin"]


@dataclass
class GenerationLog:
    generation: int
    best: float
    mean: float
    median: float
    std: float
    best_ever: float
    frames: int
    evaluations: int
    frames_per_second: float
    generation_seconds: float
    wall_time: float
    compile_seconds: float = 0.0
    extra: dict = field(default_factory=dict)

    def to_json(self) -> str:
        d = {k: v for k, v in self.__dict__.items() if k != "extra"}
        d.update(self.extra)
        return json.dumps({k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in d.items()})


def _isatty(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # replaced or closed streams
        return False


def _bar_fits(stream) -> bool:
    """Whether ``stream`` is a terminal that reports a width: a pseudo-terminal without a window size
    (``script``, ``docker exec -t`` and the like) reports 0 columns, where tqdm draws an empty bar."""
    if not _isatty(stream):
        return False
    try:
        return os.get_terminal_size(stream.fileno()).columns > 0
    except (AttributeError, ValueError, OSError):
        return False


def _hms(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    s = int(round(seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def _num(x) -> str:
    """Compact number for progress lines: 500, 412.3, 1.23e+06."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "nan"
    return f"{x:.4g}"


class ProgressMixin:
    """Progress lines, the tqdm bar and the ETA of a :class:`~tfevo.training.Trainer`."""

    def _eta(self) -> float:
        """Seconds until the first budget is reached, from this process's steady speed.

        The first generation a process runs also pays first-call costs that are not
        tracing (XLA compilation, memory set-up), so once a second one has run the
        speed comes from the generations after it.
        """
        start = self._first_index + (1 if len(self.history) - self._first_index >= 2 else 0)
        mine = self.history[start:]
        run_s = sum(h.generation_seconds for h in mine if math.isfinite(h.generation_seconds))
        etas = []
        if mine and run_s > 0:
            if self.budget_generations is not None:
                left = self.budget_generations - int(self.generation.numpy())
                etas.append(max(left, 0) * run_s / len(mine))
            if self.budget_frames is not None:
                before = self.history[start - 1].frames if start > self._first_index else self._frames0
                done = int(mine[-1].frames) - int(before)
                if done > 0:
                    etas.append(max(self.budget_frames - int(self.frames.numpy()), 0) * run_s / done)
        if self.budget_seconds is not None:
            etas.append(max(self.budget_seconds - float(self.wall_time.numpy()), 0.0))
        return min(etas) if etas else float("nan")

    def _progress_line(self, log: GenerationLog) -> str:
        gen = f"gen {log.generation}"
        if self.budget_generations is not None:
            gen += f"/{self.budget_generations}"
        frames = f"frames {_num(log.frames)}"
        if self.budget_frames is not None:
            frames += f"/{_num(self.budget_frames)}"
        time_s = f"time {_hms(log.wall_time)}"
        if self.budget_seconds is not None:
            time_s += f"/{_hms(self.budget_seconds)}"
        parts = [gen, frames, f"best {_num(log.best)}", f"mean {_num(log.mean)}",
                 f"{_num(log.frames_per_second)} frames/s", time_s, f"ETA {_hms(self._eta())}"]
        if log.compile_seconds >= 0.05:
            parts.append(f"tracing/compiling {log.compile_seconds:.1f} s (not in frames/s)")
        return "tfevo: " + " | ".join(parts)

    def _make_bar(self):
        from tqdm.auto import tqdm

        if self.budget_generations is not None:
            total, unit, initial = self.budget_generations, "gen", int(self.generation.numpy())
        elif self.budget_frames is not None:
            total, unit, initial = self.budget_frames, "frame", int(self.frames.numpy())
        else:
            total, unit, initial = self.budget_seconds, "s", float(self.wall_time.numpy())
        self._bar_unit = unit
        return tqdm(total=total, initial=initial, unit=unit, unit_scale=unit != "gen", dynamic_ncols=True)

    def _show(self, bar, log: GenerationLog, final: bool):
        if bar is not None:
            step = {"gen": 1, "frame": None, "s": None}[self._bar_unit]
            if step is None:
                target = log.frames if self._bar_unit == "frame" else log.wall_time
                step = min(target, bar.total) - bar.n
            bar.update(step)
            bar.set_postfix(best=_num(log.best), mean=_num(log.mean), fps=f"{log.frames_per_second:.0f}",
                            eta=_hms(self._eta()))
            return
        now = time.monotonic()
        first = self._last_line is None
        if first or final or now - self._last_line >= self.progress_every:
            self._last_line = now
            print(self._progress_line(log), flush=True)
