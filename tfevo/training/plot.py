"""Learning curves from a run directory's ``progress.jsonl``."""

from __future__ import annotations

import json
from pathlib import Path

from tfevo.core import ConfigError

__all__ = ["read_progress", "plot_run", "text_curve"]


def read_progress(run_dir: str | Path) -> list[dict]:
    path = Path(run_dir) / "progress.jsonl"
    if not path.is_file():
        raise ConfigError(f"{run_dir} is not a tfevo run directory (no progress.jsonl)")
    rows = []
    for line in path.read_text().splitlines():
        line = line.strip()
        if line:
            rows.append(json.loads(line))
    return rows


def plot_run(run_dir: str | Path, out: str | Path | None = None, x: str = "generation") -> Path:
    """Writes a PNG of best/mean/median fitness against generations (or frames)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read_progress(run_dir)
    if not rows:
        raise ConfigError(f"{run_dir}: progress.jsonl is empty")
    if x not in rows[0]:
        raise ConfigError(f"unknown x axis {x!r}; use one of generation, frames, wall_time")
    xs = [r[x] for r in rows]
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    for key, style in (("best", "-"), ("mean", "--"), ("median", ":"), ("best_ever", "-")):
        ys = [r.get(key) for r in rows]
        if all(v is None for v in ys):
            continue
        ys = [float("nan") if v is None else v for v in ys]
        ax.plot(xs, ys, style, label=key.replace("_", " "), alpha=0.5 if key == "best_ever" else 1.0)
    ax.set_xlabel(x.replace("_", " "))
    ax.set_ylabel("fitness (higher is better)")
    ax.set_title(Path(run_dir).name)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    out = Path(out) if out is not None else Path(run_dir) / "learning_curve.png"
    fig.savefig(out)
    plt.close(fig)
    return out


def text_curve(rows: list[dict], width: int = 40, max_rows: int = 12) -> str:
    """A small text learning curve: sampled generations with a bar of best fitness."""
    if not rows:
        return "(no generations)"
    n = len(rows)
    k = min(n, max_rows)
    idx = sorted(set(round(i * (n - 1) / max(1, k - 1)) for i in range(k)))
    bests = [r["best"] for r in rows if r.get("best") is not None]
    lo, hi = (min(bests), max(bests)) if bests else (0.0, 1.0)
    span = hi - lo if hi > lo else 1.0
    lines = [f"{'gen':>5} {'frames':>10} {'best':>10} {'mean':>10}  "]
    for i in idx:
        r = rows[i]
        b = r.get("best")
        bar = "#" * int(round(width * (b - lo) / span)) if b is not None else ""
        mean = r.get("mean")
        lines.append(
            f"{r['generation']:>5} {r['frames']:>10} {b if b is not None else float('nan'):>10.4g} "
            f"{mean if mean is not None else float('nan'):>10.4g}  {bar}"
        )
    return "\n".join(lines)
