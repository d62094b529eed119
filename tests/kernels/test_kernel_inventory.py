"""The dispatch table and the C++ sources name the same ops, and ops that did not earn their place
(benchmarks/results/kernels.md) stay out of both."""
import pathlib
import re

import pytest

from tfevo.core import ConfigError
from tfevo.kernels.dispatch import KERNELS

ROOT = pathlib.Path(__file__).resolve().parents[2]
REMOVED = {"TfevoPhiloxUniform", "TfevoAllEqual", "TfevoNeatBreedHeld"}


def _registered_ops():
    ops = set()
    for cc in (ROOT / "custom_ops").glob("*.cc"):
        ops |= set(re.findall(r'REGISTER_OP\("(\w+)"\)', cc.read_text()))
    return ops


def test_removed_ops_are_gone():
    assert not REMOVED & set(KERNELS)
    assert not REMOVED & _registered_ops()


def test_every_dispatched_op_is_registered():
    missing = set(KERNELS) - _registered_ops()
    assert not missing, f"dispatch names ops no custom_ops/*.cc registers: {sorted(missing)}"


def test_every_kernel_call_goes_through_the_dispatch():
    """No tfevo module but the dispatch loads a library or calls an op's Python function it did not get
    from ``tfevo.kernels.kernel`` (that is how the choice is made, logged and visible in ``decisions()``)."""
    symbols = "|".join(sorted({fn for _, fn in KERNELS.values()}))
    direct = re.compile(r"\bop_module\(|\bops\.load\(|load_op_library\(|\.(" + symbols + r")\(")
    allowed = {ROOT / "tfevo" / "kernels" / "dispatch.py", ROOT / "tfevo" / "ops.py"}
    found = [f"{p.relative_to(ROOT)}:{i}: {line.strip()}"
             for p in sorted((ROOT / "tfevo").rglob("*.py")) if p not in allowed
             for i, line in enumerate(p.read_text().splitlines(), 1) if direct.search(line)]
    assert not found, "kernel calls around tfevo.kernels.kernel:\n" + "\n".join(found)


def test_archive_kernels_are_decided_under_their_own_names():
    """The archive insertion and the CVT nearest-centroid lookup each ask the dispatch for their own op:
    the kernels where they run, the reference under an assumed GPU or with ``use_op=False``."""
    import numpy as np

    from tfevo import kernels
    from tfevo.qd import CVTArchive, GridArchive

    if not kernels.built("TfevoArchiveInsert"):
        pytest.skip("the qd_emit kernels are not built here")
    cent = np.random.default_rng(0).uniform(size=(64, 2)).astype(np.float32)
    x = np.random.default_rng(1).uniform(size=(16, 3)).astype(np.float32)

    def add(use_op=None):
        for a in (GridArchive(3, [4, 4], [(0, 1), (0, 1)], use_op=use_op),
                  CVTArchive(3, 64, [(0, 1), (0, 1)], centroids=cent, lookup="buckets", use_op=use_op)):
            a.add(x, x[:, 0], x[:, 1:])
        return {op: kernels.decisions().get(op, "never asked") for op in ("TfevoArchiveInsert", "TfevoNearestCentroid")}

    assert add() == {"TfevoArchiveInsert": None, "TfevoNearestCentroid": None}
    with kernels.assume_gpu():
        assert all(why.startswith("a GPU is present") for why in add().values())
    with pytest.raises(kernels.KernelUnavailableError, match="TfevoArchiveInsert.*GPU"), kernels.assume_gpu():
        GridArchive(3, [4, 4], [(0, 1), (0, 1)], use_op=True)
    with pytest.raises(ConfigError, match="use_op"):
        GridArchive(3, [4, 4], [(0, 1), (0, 1)], use_op="yes")
