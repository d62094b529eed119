"""Copies of a fitted estimator through every route a scikit-learn user saves one by."""

import copy
import io
import pickle


def saved_copies(est) -> list:
    """``est`` through pickle, ``copy.deepcopy`` and joblib (each a fresh object)."""
    import joblib

    buf = io.BytesIO()
    joblib.dump(est, buf)
    buf.seek(0)
    return [pickle.loads(pickle.dumps(est)), copy.deepcopy(est), joblib.load(buf)]
