"""Runs several scripts one after the other in this one fresh interpreter, as ``__main__``.

Used by tests/test_examples.py and tests/test_docs.py: starting Python and importing
TensorFlow and tfevo once for a batch of scripts instead of once per script.  Each
script gets what a fresh ``python SCRIPT`` would give it: its own ``__main__``
globals, ``sys.argv == [SCRIPT]``, the script's folder first on ``sys.path`` (a
``-c`` code block: the empty entry) and its own working directory.  Its exit status
(an exception, or ``SystemExit`` with a non-zero code) and output are recorded per
script.  Code blocks that give the same ``"session"`` share one ``__main__``
namespace, as blocks pasted one after the other into one interpreter would.

Usage: ``python _script_batch.py SPEC.json RESULT.json`` where SPEC is a list of
``{"name", "cwd", and "path" (a script file) or "code" (a ``-c`` block)}``.
"""

import contextlib
import io
import json
import os
import runpy
import sys
import time
import traceback


def _run_one(spec, sessions):
    os.makedirs(spec["cwd"], exist_ok=True)
    os.chdir(spec["cwd"])
    path = spec.get("path")
    sys.argv = [path] if path else ["-c"]
    sys.path[0] = os.path.dirname(os.path.abspath(path)) if path else ""
    out = io.StringIO()
    code, error = 0, ""
    cpu0 = time.process_time()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            if path:
                runpy.run_path(path, run_name="__main__")
            else:
                fresh = {"__name__": "__main__", "__builtins__": __builtins__}
                namespace = sessions.setdefault(spec["session"], fresh) if spec.get("session") else fresh
                exec(compile(spec["code"], "<string>", "exec"), namespace)
        except SystemExit as e:
            code = 0 if e.code in (None, 0) else e.code if isinstance(e.code, int) else 1
            if code:
                error = f"SystemExit({e.code!r})"
        except BaseException:  # noqa: BLE001 -- recorded as this script's failure
            code, error = 1, traceback.format_exc()
    return {"name": spec["name"], "returncode": code, "error": error, "output": out.getvalue(),
            "cpu_seconds": time.process_time() - cpu0}


def run_batch(specs, workdir, env, timeout=900):
    """Runs ``specs`` in one fresh interpreter (``env`` its environment); the per-script results."""
    import subprocess

    spec_path, result_path = os.path.join(workdir, "batch.json"), os.path.join(workdir, "batch_result.json")
    with open(spec_path, "w") as f:
        json.dump(specs, f)
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), spec_path, result_path], env=env,
                          cwd=workdir, capture_output=True, text=True, timeout=timeout)
    results = []
    if os.path.exists(result_path):
        with open(result_path) as f:
            results = json.load(f)
    if proc.returncode != 0 or len(results) != len(specs):  # the interpreter itself died
        done = {r["name"] for r in results}
        results += [{"name": s["name"], "returncode": proc.returncode or 1, "output": proc.stdout[-2000:],
                     "error": f"the batch interpreter ended (status {proc.returncode}):\n{proc.stderr[-4000:]}"}
                    for s in specs if s["name"] not in done]
    return results


def main(spec_path, result_path):
    with open(spec_path) as f:
        specs = json.load(f)
    results, sessions = [], {}
    for spec in specs:
        results.append(_run_one(spec, sessions))
        with open(result_path, "w") as f:  # after each script: a crash still leaves the earlier results
            json.dump(results, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
