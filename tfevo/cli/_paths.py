"""Checks of the files a command writes, made before any work (an episode, a model build)."""

from __future__ import annotations

import os
from pathlib import Path


def check_output_file(flag: str, out: Path, suffixes=None, what: str = "") -> Path:
    """:class:`ConfigError` naming ``flag`` unless ``out`` can be written: its suffix is one of
    ``suffixes`` (if given), its folder exists and is writable, and it is not a directory."""
    from tfevo.core import ConfigError

    out = Path(out)
    if suffixes is not None and out.suffix.lower() not in suffixes:
        raise ConfigError(f"{flag} must end in {' or '.join(suffixes)}{what}, got {out.name!r}")
    folder = out.parent if str(out.parent) else Path(".")
    if not folder.is_dir():
        raise ConfigError(f"{flag} {str(out)!r}: folder {str(folder)!r} does not exist")
    if out.is_dir():
        raise ConfigError(f"{flag} {str(out)!r} is a directory; give a file name")
    if not os.access(folder, os.W_OK) or (out.exists() and not os.access(out, os.W_OK)):
        raise ConfigError(f"{flag} {str(out)!r}: not writable")
    return out
