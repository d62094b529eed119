#!/usr/bin/env bash
# README.md is assembled from the per-part sections in docs/ (edit those, then run this).
set -euo pipefail
cd "$(dirname "$0")/.."
parts=(_header training nn strategies cma bbob classic mujoco pipeline neat gp qd distribute _footer)
{
  for p in "${parts[@]}"; do
    [ -f "docs/$p.md" ] || continue
    cat "docs/$p.md"
    echo
  done
} > README.md
echo "README.md: $(wc -l < README.md) lines"
