import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TFEVO_CACHE", os.path.join(os.path.dirname(__file__), "..", ".tfevo_cache"))
