"""A run's checkpoints and the logs kept in step with them.

``tf.train.CheckpointManager`` writes the data files first and only then
points the ``checkpoint`` index at them, so a run killed at any moment
(SIGKILL included) resumes from the last complete checkpoint.  On resume,
everything a killed run wrote after that checkpoint is undone before the
first new generation: log lines and TensorBoard events of later generations
are dropped (also when the run died before its first checkpoint), and
half-written checkpoint files (``ckpt-N_temp/``, temporary index files) are
deleted, so the logs of a resumed run equal those of the uninterrupted one.

Under ``MultiWorkerMirroredStrategy`` only the chief has a run directory.
It restores its latest checkpoint, packs the files and sends them to every
worker (:func:`tfevo.distribute.broadcast_from_chief`); each worker restores
the same checkpoint from a scratch directory that is deleted when the run
ends.  All workers thus resume from the chief's state, whichever of them was
killed, without a file system shared between machines.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import tempfile
import weakref
from pathlib import Path

import numpy as np
import tensorflow as tf

from tfevo.core import ConfigError
from tfevo.training.progress import GenerationLog

__all__ = ["CheckpointMixin", "pack_checkpoint", "unpack_checkpoint", "run_signature"]


def pack_checkpoint(path: str) -> bytes:
    """The files of checkpoint ``path`` (``.../ckpt-N``) as one byte string (an ``.npz`` of byte arrays)."""
    files = {p.name: np.frombuffer(p.read_bytes(), np.uint8) for p in Path(path).parent.glob(Path(path).name + ".*")}
    buf = io.BytesIO()
    np.savez(buf, **files)
    return buf.getvalue()


def unpack_checkpoint(data: bytes, directory) -> str:
    """Writes the files packed by :func:`pack_checkpoint` into ``directory``; returns the checkpoint prefix."""
    with np.load(io.BytesIO(data), allow_pickle=False) as z:
        names = list(z.files)
        for name in names:
            Path(directory, name).write_bytes(z[name].tobytes())
    index = [n for n in names if n.endswith(".index")]
    if len(index) != 1:
        raise ValueError(f"a packed checkpoint holds one .index file, got {names}")
    return str(Path(directory, index[0][: -len(".index")]))


def drop_events_after(tb_dir: Path, generation: int) -> int:
    """Rewrites the TensorBoard event files in ``tb_dir`` without summaries of steps > ``generation``.

    Returns how many events were dropped.  A file cut short by a kill is read up
    to its last complete record.
    """
    dropped = 0
    for path in sorted(tb_dir.glob("events.out.tfevents.*")):
        records, cut = [], False
        try:
            for raw in tf.data.TFRecordDataset(str(path)).as_numpy_iterator():
                records.append(raw)
        except tf.errors.DataLossError:  # a record cut short by a kill
            cut = True
        kept = []
        for raw in records:
            ev = tf.compat.v1.Event.FromString(raw)
            if ev.HasField("summary") and ev.step > generation:
                continue
            kept.append(raw)
        if len(kept) == len(records) and not cut:
            continue
        dropped += len(records) - len(kept)
        tmp = path.with_name(path.name + ".rewrite")
        with tf.io.TFRecordWriter(str(tmp)) as w:
            for raw in kept:
                w.write(raw)
        os.replace(tmp, path)
    return dropped



def run_signature(algorithm) -> str:
    """What a resumed run must share with the run in its checkpoint, as JSON: the algorithm's class,
    population size, dimension and seed, read from the algorithm as built (before any restore).

    A checkpoint restores the algorithm's variables, its seed stream included, but not what its
    constructor fixed in Python (the population size, the weights derived from it), so another
    popsize or seed would continue the old run under the new settings without any error.
    """
    inner = getattr(algorithm, "algorithm", None)  # a family seen through FlatAlgorithm
    parts = [algorithm] + ([inner] if hasattr(inner, "ask") else [])
    sig = {"algorithm": type(parts[-1]).__name__}
    for key in ("popsize", "num_dims"):
        value = next((getattr(a, key) for a in parts if isinstance(getattr(a, key, None), (int, np.integer))), None)
        if value is not None:
            sig[key] = int(value)
    seeds = [getattr(getattr(a, "seeds", None), "seed", None) for a in parts]
    seed = next((v for v in seeds if isinstance(v, tf.Variable)), None)
    if seed is not None:
        sig["seed"] = int(seed.numpy())
    return json.dumps(sig, sort_keys=True)


class CheckpointMixin:
    """Restore, save and log clean-up of a :class:`~tfevo.training.Trainer` (``_checkpoint``, ``_manager``)."""

    def _check_signature(self, path: str, shown: str | None = None):
        """ConfigError naming each setting in which the run of checkpoint ``path`` differs from this
        Trainer's algorithm; checked before restoring, so another dimension does not end in a shape error."""
        key = "trainer/signature/.ATTRIBUTES/VARIABLE_VALUE"
        reader = tf.train.load_checkpoint(path)
        if not reader.has_tensor(key):  # written before runs carried one
            return
        saved = reader.get_tensor(key)
        saved = saved.decode() if isinstance(saved, bytes) else str(saved)
        built = self.signature.numpy().decode()
        if saved == built:
            return
        old, new = json.loads(saved), json.loads(built)
        changed = "; ".join(f"{k}: {old.get(k, '<unset>')!r} in the run, {new.get(k, '<unset>')!r} now"
                            for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k))
        raise ConfigError(f"{shown or path} was written by a run with other algorithm settings ({changed}); "
                          "resuming would continue that run under the new settings. Use the run's settings, or "
                          "another run directory for a new run")

    def _restore(self):
        """Restores the run's latest checkpoint: this run directory's, or on every worker of a
        multi-worker run the chief's (sent over the strategy's collectives)."""
        path = self._manager.latest_checkpoint if self._manager is not None else None
        refused = None
        if path is not None:
            try:
                self._check_signature(path)
            except ConfigError as e:
                if not self.multi_worker:
                    raise
                refused = e  # raised after the broadcast, so the other workers are not left waiting for it
            if refused is None:
                self._checkpoint.restore(path).expect_partial()
        if self._manager is not None and refused is None:
            self._clean_dead_checkpoints()
            self._truncate_logs(int(self.generation.numpy()))
        if self.multi_worker:
            path = self._restore_from_chief(path)  # the other workers refuse the same checkpoint
            if refused is not None:
                raise refused
            self._check_same_state()
        self.restored_from = path
        if self.verbose and path is not None:
            print(f"tfevo: resumed from {path} (generation {int(self.generation.numpy())})")

    def _restore_from_chief(self, path: str | None) -> str | None:
        """Every worker ends with the chief's checkpoint ``path`` restored (``None``: a fresh start)."""
        from tfevo.distribute.cluster import broadcast_from_chief

        data = broadcast_from_chief(self.strategy, pack_checkpoint(path) if path and self.is_chief else b"")
        if self.is_chief or not data:
            return path
        # TensorFlow's advice for non-chief workers: a scratch directory, deleted afterwards.  It lives
        # until the run ends, since variables created later (the best member) are restored from it then.
        scratch = tempfile.mkdtemp(prefix="tfevo-worker-")
        self._scratch = weakref.finalize(self, shutil.rmtree, scratch, True)
        local = unpack_checkpoint(data, scratch)
        self._check_signature(local, f"the chief's {Path(local).name}")
        self._checkpoint.restore(local).expect_partial()
        return f"the chief's {Path(local).name}"

    def _check_same_state(self):
        """Refuses to start unless every worker holds the chief's state (same algorithm, sizes, seeds).

        Workers started with different configs would otherwise evaluate different populations under
        the same gather and give a wrong run without any error.
        """
        from tfevo.distribute.cluster import gather_bytes

        h = hashlib.sha256()
        counters = [self.generation, self.frames, self.evaluations]
        for v in [v for obj in self._state_sources for v in getattr(obj, "variables", ())] + counters:
            x = np.asarray(v.numpy())
            h.update(f"{x.dtype.str}{x.shape}".encode())
            h.update(np.ascontiguousarray(x).tobytes())
        rows = gather_bytes(self.strategy, h.digest())
        chief = next(d for d, c in rows if c)
        differ = [r for r, (d, _) in enumerate(rows) if d != chief]
        if differ:
            raise ConfigError(
                f"the workers' states differ from the chief's after restoring (replica(s) {differ}): every worker "
                "must run the same config (algorithm, popsize, seed, policy) with the same tfevo version")

    def _clean_dead_checkpoints(self):
        """Deletes what a write killed midway left: ``ckpt-N_temp/`` directories, temporary
        index files, and data files of checkpoints the index never pointed at."""
        ckpt_dir = Path(self._manager.directory)
        if not ckpt_dir.is_dir():
            return
        kept = {Path(p).name for p in self._manager.checkpoints}
        prefix = "ckpt"  # CheckpointManager's checkpoint_name
        for p in ckpt_dir.iterdir():
            name = p.name
            if name.endswith("_temp") or (name.startswith("checkpoint") and ".tmp" in name):
                shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
            elif name.startswith(prefix + "-") and name.split(".", 1)[0] not in kept:
                number = name[len(prefix) + 1:].split(".", 1)[0]
                if number.isdigit():  # a checkpoint whose index update never happened
                    shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)

    def _truncate_logs(self, gen: int):
        """Drops log lines and TensorBoard events of generations after ``gen`` (the restored one)."""
        log_path = self.run_dir / "progress.jsonl"
        if log_path.exists():
            kept = []
            for line in log_path.read_text().splitlines():
                try:
                    if json.loads(line)["generation"] <= gen:
                        kept.append(line)
                except (ValueError, KeyError, TypeError):
                    continue  # a line cut short by a kill
            tmp = log_path.with_suffix(".tmp")
            tmp.write_text("".join(k + "\n" for k in kept))
            os.replace(tmp, log_path)
            fields = {k: f for k, f in GenerationLog.__dataclass_fields__.items() if k != "extra"}
            for line in kept:
                d = json.loads(line)
                # the algorithm's metrics were written as top-level keys (GenerationLog.to_json)
                extra = {k: float("nan") if v is None else v for k, v in d.items() if k not in fields}
                self.history.append(GenerationLog(**{
                    k: (d[k] if d.get(k) is not None else (f.default if k == "compile_seconds" else float("nan")))
                    for k, f in fields.items()}, extra=extra))
        tb_dir = self.run_dir / "tensorboard"
        if tb_dir.is_dir():
            drop_events_after(tb_dir, gen)

    def save(self) -> str | None:
        if self._manager is None:
            return None
        return self._manager.save(checkpoint_number=int(self.generation.numpy()))
