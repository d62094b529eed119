"""The dispatch table and the C++ sources name the same ops, and ops that did not earn their place
(benchmarks/results/kernels.md) stay out of both."""
import pathlib
import re

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
