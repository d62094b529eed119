"""Pictures of archives."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tfevo.core import ConfigError

__all__ = ["archive_heatmap"]


def archive_heatmap(archive, out: str | Path, title: str | None = None, cmap: str = "magma",
                    labels=("descriptor 1", "descriptor 2")) -> Path:
    """Writes a PNG heatmap of a 2-D archive's elite fitness (empty cells blank).

    Grid archives are drawn as an image; CVT archives as a scatter of their
    centroids coloured by fitness.  ``labels`` name the two descriptor axes;
    the colour bar shows the elites' fitness.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if archive.descriptor_dim != 2:
        raise ConfigError(f"heatmaps need a 2-D archive, this one has {archive.descriptor_dim} descriptor dims")
    occ = archive.occupied.numpy()[: archive.num_cells]
    fit = np.where(occ, archive.fitness.numpy()[: archive.num_cells], np.nan)
    fig, ax = plt.subplots(figsize=(5.5, 4.6), dpi=110)
    if hasattr(archive, "dims"):
        grid = fit.reshape(archive.dims)
        (x0, x1), (y0, y1) = archive.ranges
        im = ax.imshow(grid.T, origin="lower", extent=[x0, x1, y0, y1], aspect="auto", cmap=cmap)
    else:
        c = archive.centroids.numpy()
        im = ax.scatter(c[:, 0], c[:, 1], c=fit, s=max(2, 4000 // archive.num_cells), cmap=cmap)
    fig.colorbar(im, ax=ax, label="elite fitness (empty cells blank)")
    m = archive.metrics()
    ax.set_title(title or f"coverage {m['coverage']:.1%}, QD-score {m['qd_score']:.4g}")
    if len(labels) != 2:
        raise ConfigError(f"labels must name the 2 descriptor axes, got {list(labels)}")
    ax.set_xlabel(labels[0])
    ax.set_ylabel(labels[1])
    fig.tight_layout()
    out = Path(out)
    fig.savefig(out)
    plt.close(fig)
    return out
