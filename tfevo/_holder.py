"""A plain attribute holder that ``tf.Module`` does not track."""

from __future__ import annotations


class Untracked:
    """Attributes kept out of ``tf.Module`` tracking and of checkpoints.

    A ``tf.Module`` wraps the lists and dicts assigned to it and checkpoints the
    variables it reaches; caches of compiled functions, Python-side logs and
    trace-time flags must stay plain.  Such state lives on one of these objects,
    e.g. ``self._fns = Untracked(fns={})`` then ``self._fns.fns[key] = fn``.
    """

    def __init__(self, **fields):
        self.__dict__.update(fields)

    def __repr__(self) -> str:
        return f"Untracked({', '.join(sorted(self.__dict__))})"
