"""The code examples of the docs site (docs/*.md): every ```python block and every ``tfevo ...`` line of a
```bash block, with the HTML comments that tell the test how to run them.  A command line runs as the
CLI's ``main`` in the page's interpreter, from a directory that links examples/ as a checkout has it.

A page's python blocks run in page order in one interpreter and share one namespace, so a block may use
names an earlier block of the same page defined (as a reader pasting them one after the other would).
Comments on the lines just above a fence, not shown on the site:

* ``<!-- test: skip REASON -->``: the block is not run; the test reports the reason.
* ``<!-- test: replace OLD => NEW -->``: the test runs the block with OLD replaced by NEW (OLD must occur),
  e.g. a smaller budget; the page keeps the size a user runs.
* ``<!-- test: before tfevo ARGS -->``: a command the test runs (in the page's directory) before the block,
  e.g. the training run whose directory the block reads.
* ``<!-- test: file NAME -->`` above a block of any language: the block is a file the page's examples read;
  it is written as NAME into the page's working directory before they run.

``python tests/_docs_blocks.py [--full] [PAGE ...]`` runs them all and prints one line per block
(``--full``: without the replacements).
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"

_FENCE = re.compile(r"^```(\w*)\n(.*?)^```\s*$", flags=re.S | re.M)
_DIRECTIVE = re.compile(r"<!--\s*test:\s*(skip|replace|file|before)\b\s*(.*?)\s*-->", flags=re.S)


def _directives(text, fence_start):
    """The ``<!-- test: ... -->`` comments on the lines right above a fence (blank lines allowed)."""
    lines = text[:fence_start].split("\n")[:-1]
    found = []
    while lines and (not lines[-1].strip() or lines[-1].strip().startswith("<!--")):
        line = lines.pop().strip()
        if line:
            m = _DIRECTIVE.fullmatch(line)
            if m:
                found.append((m.group(1), m.group(2)))
    return found[::-1]


def blocks(lang="python", pages=None):
    """[{page, line, lang, code, skip, replace, file, before}] of every ```LANG block (None: every block),
    page by page in file order."""
    out = []
    for path in sorted(DOCS.glob("*.md")):
        if pages and path.stem not in pages and path.name not in pages:
            continue
        text = path.read_text(encoding="utf-8")
        for m in _FENCE.finditer(text):
            if lang is not None and m.group(1) != lang:
                continue
            skip, replace, file, before = None, [], None, []
            for kind, arg in _directives(text, m.start()):
                if kind == "skip":
                    skip = arg or "no reason given"
                elif kind == "file":
                    file = arg
                elif kind == "before":
                    if not arg.startswith("tfevo "):
                        raise ValueError(f"{path.name}: 'test: before' takes a tfevo command line, got {arg!r}")
                    before.append(arg[len("tfevo "):])
                else:
                    old, sep, new = arg.partition("=>")
                    if not sep:
                        raise ValueError(f"{path.name}: 'test: replace' needs OLD => NEW, got {arg!r}")
                    replace.append((old.strip(), new.strip()))
            out.append({"page": path.name, "line": text[:m.start()].count("\n") + 1, "lang": m.group(1),
                        "code": m.group(2), "skip": skip, "replace": replace, "file": file, "before": before})
    return out


def suite_code(block):
    """The block's code with its replacements made; ValueError if an OLD does not occur (a stale comment)."""
    code = block["code"]
    for old, new in block["replace"]:
        if old not in code:
            raise ValueError(f"{block['page']}:{block['line']}: 'test: replace {old} => {new}': "
                             f"{old!r} is not in the block")
        code = code.replace(old, new)
    return code


def command_lines(block):
    """The ``tfevo ...`` lines of a ```bash block (its test code: replacements made), without ``tfevo``."""
    lines = []
    for raw in suite_code(block).split("\n"):
        line = raw.split(" #", 1)[0].strip()
        if line.startswith("tfevo "):
            lines.append(line[len("tfevo "):])
    return lines


def cli_code(args):
    """A ``tfevo ARGS`` command line as code for _script_batch: the CLI's main in this interpreter."""
    return f"import shlex, sys\nfrom tfevo.cli import main\nsys.exit(main(shlex.split({args!r})))\n"


def page_specs(page, workdir, full=False):
    """(_script_batch specs, skipped blocks) of one page, in page order, in one session and working
    directory that holds the page's files and a link to examples/ (commands name examples/configs/...)."""
    cwd = os.path.join(workdir, page[:-3])
    os.makedirs(cwd, exist_ok=True)
    if not os.path.exists(os.path.join(cwd, "examples")):
        os.symlink(ROOT / "examples", os.path.join(cwd, "examples"))
    specs, skipped = [], []
    for b in blocks(None, [page]):
        if b["file"]:
            Path(cwd, b["file"]).write_text(b["code"], encoding="utf-8")
        if b["lang"] not in ("python", "bash") or b["file"]:
            continue
        if b["lang"] == "bash" and not command_lines(b):
            continue
        name = f"{page}:{b['line']}"
        if b["skip"]:
            skipped.append((name, b["skip"]))
            continue
        for i, args in enumerate(b["before"]):
            specs.append({"name": f"{name} before {i}", "code": cli_code(args), "cwd": cwd, "session": page})
        if b["lang"] == "python":
            specs.append({"name": name, "code": b["code"] if full else suite_code(b), "cwd": cwd, "session": page})
        else:
            for i, args in enumerate(command_lines(b)):
                specs.append({"name": f"{name} command {i}", "code": cli_code(args), "cwd": cwd, "session": page})
    return specs, skipped


def main(argv):
    import tempfile
    import time

    sys.path.insert(0, str(Path(__file__).parent))
    from _script_batch import run_batch

    full = "--full" in argv
    pages = [a if a.endswith(".md") else a + ".md" for a in argv if not a.startswith("--")]
    pages = pages or [p.name for p in sorted(DOCS.glob("*.md"))]
    env = {**os.environ, "MPLBACKEND": "Agg",
           "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for page in pages:
            page_spec, skipped = page_specs(page, tmp, full)
            for name, reason in skipped:
                print(f"SKIP {name}: {reason}", flush=True)
            if not page_spec:
                continue
            t0 = time.time()
            results = run_batch(page_spec, tmp, env, timeout=3600)
            for r in results:
                failed += r["returncode"] != 0
                status = "ok  " if r["returncode"] == 0 else "FAIL"
                print(f"{status} {r['name']}  ({r.get('cpu_seconds', 0):.1f} s CPU)", flush=True)
                if r["returncode"]:
                    print("   " + (r["error"] or r["output"])[-1500:].replace("\n", "\n   "), flush=True)
            print(f"     {page}: {time.time() - t0:.1f} s wall", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
