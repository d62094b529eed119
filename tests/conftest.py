import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# Test modules live in sub-folders mirroring tfevo/; the few helpers they share
# (_nets, _serial_reference) sit here, next to this file.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
