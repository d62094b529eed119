"""The code examples of the docs site (docs/*.md): every ```python block and every ``tfevo ...`` line of a
```bash block, with the HTML comments that tell the test how to run them.

A page's python blocks run in page order in one interpreter and share one namespace, so a block may use
names an earlier block of the same page defined (as a reader pasting them one after the other would).
Comments on the lines just above a fence, not shown on the site:

* ``<!-- test: skip REASON -->``: the block is not run; the test reports the reason.
* ``<!-- test: replace OLD => NEW -->``: the test runs the block with OLD replaced by NEW (OLD must occur),
  e.g. a smaller budget; the page keeps the size a user runs.

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
_DIRECTIVE = re.compile(r"<!--\s*test:\s*(skip|replace)\b\s*(.*?)\s*-->", flags=re.S)


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
    """[{page, line, code, skip, replace}] of every ```LANG block, page by page in file order."""
    out = []
    for path in sorted(DOCS.glob("*.md")):
        if pages and path.stem not in pages and path.name not in pages:
            continue
        text = path.read_text(encoding="utf-8")
        for m in _FENCE.finditer(text):
            if m.group(1) != lang:
                continue
            skip, replace = None, []
            for kind, arg in _directives(text, m.start()):
                if kind == "skip":
                    skip = arg or "no reason given"
                else:
                    old, sep, new = arg.partition("=>")
                    if not sep:
                        raise ValueError(f"{path.name}: 'test: replace' needs OLD => NEW, got {arg!r}")
                    replace.append((old.strip(), new.strip()))
            out.append({"page": path.name, "line": text[:m.start()].count("\n") + 1, "code": m.group(2),
                        "skip": skip, "replace": replace})
    return out


def test_code(block):
    """The block's code with its replacements made; ValueError if an OLD does not occur (a stale comment)."""
    code = block["code"]
    for old, new in block["replace"]:
        if old not in code:
            raise ValueError(f"{block['page']}:{block['line']}: 'test: replace {old} => {new}': "
                             f"{old!r} is not in the block")
        code = code.replace(old, new)
    return code


def command_lines(pages=None):
    """[{page, line, command, skip, replace}]: the ``tfevo ...`` lines of the ```bash blocks."""
    out = []
    for block in blocks("bash", pages):
        for i, raw in enumerate(block["code"].split("\n")):
            line = raw.split("#", 1)[0].strip() if not raw.strip().startswith("#") else ""
            if line.startswith("tfevo "):
                out.append({**block, "line": block["line"] + 1 + i, "command": line})
    return out


def specs(block_list, workdir, full=False):
    """_script_batch specs: one shared session and working directory per page."""
    result = []
    for b in block_list:
        page = b["page"][:-3]
        result.append({"name": f"{b['page']}:{b['line']}", "code": b["code"] if full else test_code(b),
                       "cwd": os.path.join(workdir, page), "session": page})
    return result


def main(argv):
    import tempfile
    import time

    sys.path.insert(0, str(Path(__file__).parent))
    from _script_batch import run_batch

    full = "--full" in argv
    pages = [a for a in argv if not a.startswith("--")] or None
    todo = [b for b in blocks("python", pages) if not b["skip"]]
    for b in blocks("python", pages):
        if b["skip"]:
            print(f"SKIP {b['page']}:{b['line']}: {b['skip']}")
    env = {**os.environ, "MPLBACKEND": "Agg",
           "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for page in dict.fromkeys(b["page"] for b in todo):
            page_blocks = [b for b in todo if b["page"] == page]
            t0 = time.time()
            results = run_batch(specs(page_blocks, tmp, full), tmp, env, timeout=3600)
            for r in results:
                failed += r["returncode"] != 0
                status = "ok  " if r["returncode"] == 0 else "FAIL"
                print(f"{status} {r['name']}", flush=True)
                if r["returncode"]:
                    print("   " + (r["error"] or r["output"])[-1500:].replace("\n", "\n   "), flush=True)
            print(f"     {page}: {time.time() - t0:.1f} s wall", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
