#!/usr/bin/env bash
# benchmarks/RESULTS.md = the summary (benchmarks/results/_summary.md) + every part's results file.
set -euo pipefail
cd "$(dirname "$0")"
parts=(_summary training nn strategies cma bbob classic mujoco pipeline neat neat_breed_op neat_forward_op gp qd distribute)
{
  for p in "${parts[@]}"; do
    [ -f "results/$p.md" ] || continue
    # demote each part's headings one level under the page title
    sed -e 's/^# /## /' -e 't' -e 's/^## /### /' -e 't' -e 's/^### /#### /' "results/$p.md"
    echo
  done
} > RESULTS.md
sed -i '1s/^## /# /' RESULTS.md
echo "RESULTS.md: $(wc -l < RESULTS.md) lines"
