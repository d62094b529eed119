"""MkDocs hook: the README is the site's home page, so it is written once.

Links into ``docs/`` are made relative to the site; links elsewhere in the
repository (examples, benchmarks) point at the repository.
"""

from __future__ import annotations

import re
from pathlib import Path

from mkdocs.structure.files import File

_REPO_LINK = re.compile(r"\]\((?!https?://|#)([^)]+)\)")


def _rewrite(text: str) -> str:
    def fix(m):
        target = m.group(1)
        if target.startswith("docs/"):
            return f"]({target[len('docs/'):]})"
        return f"](https://github.com/tfevo/tfevo/blob/main/{target})"
    return _REPO_LINK.sub(fix, text)


def on_files(files, config):
    readme = Path(config["config_file_path"]).parent / "README.md"
    index = File.generated(config, "index.md", content=_rewrite(readme.read_text(encoding="utf-8")))
    files.append(index)
    return files
