import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# Test modules live in sub-folders mirroring tfevo/; the few helpers they share
# (_nets, _serial_reference) sit here, next to this file.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# The docs and example scripts are the suite's longest tests; collected last (top-level files come after
# the sub-folders), they would leave one xdist worker running them alone at the end.  Run them first;
# every other test keeps its order.
_FIRST = ("test_docs.py", "test_examples.py")


def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda item: os.path.basename(str(item.fspath)) not in _FIRST)
