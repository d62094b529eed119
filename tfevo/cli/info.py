"""`tfevo plot`, `tfevo list` and `tfevo build-ops`."""

from __future__ import annotations

import sys


def cmd_plot(args) -> int:
    """The learning curve, and the family's own picture: the best NEAT network, the best GP
    policy's formula, the MAP-Elites archive."""
    from tfevo.training.builders import write_picture
    from tfevo.training.plot import plot_run

    if args.out is not None:
        from pathlib import Path

        from tfevo.cli._paths import check_output_file

        check_output_file("--out", Path(args.out))
    out = plot_run(args.run_dir, args.out, x=args.x)
    print(f"wrote {out}")
    picture = write_picture(args.run_dir)
    if picture is not None:
        print(f"wrote {picture}")
    return 0


def cmd_list(args) -> int:
    from tfevo import registry

    kinds = {"algorithms": "strategy", "strategies": "strategy", "envs": "env", "environments": "env",
             "problems": "problem", "policies": "policy", "evaluators": "evaluator"}
    chosen = [kinds[args.kind]] if args.kind else ["strategy", "env", "problem", "policy", "evaluator"]
    titles = {"strategy": "algorithms", "env": "environments", "problem": "problems",
              "policy": "policies", "evaluator": "evaluators"}
    import shutil
    import textwrap

    width = max(shutil.get_terminal_size((100, 24)).columns, 60)

    def row(name, doc):
        # long descriptions wrap under themselves, so a name always starts its line
        print(textwrap.fill(doc, width=width, initial_indent=f"  {name:<28} ", subsequent_indent=" " * 31,
                            break_on_hyphens=False, break_long_words=False))

    from typing import get_args

    from tfevo.training.config import FAMILY_POLICIES, VECTOR_POLICIES, ProblemConfig

    qd_tasks = get_args(ProblemConfig.model_fields["name"].annotation)

    def what_it_takes(kind, name):
        """What a config pairs the entry with: an algorithm's policy kinds, a QD task's algorithm."""
        if kind == "strategy":
            text = f"Config: policy.kind {' | '.join(FAMILY_POLICIES.get(name, VECTOR_POLICIES))}"
            return text + (", or a [problem] QD task." if name == "map_elites" else ".")
        if kind == "problem":
            if name in qd_tasks:
                return "Config: [problem] of algorithm map_elites."
            return "Python API only (registry.get('problem', name)); not a config [problem]."
        return ""

    for kind in chosen:
        table = registry.names(kind)
        print(f"{titles[kind]}:")
        for name, doc in table.items():
            extra = what_it_takes(kind, name)
            if extra and doc and not doc.endswith((".", "!", "?")):
                doc += "."
            row(name, f"{doc} {extra}" if extra else doc)
        if kind == "env":
            row("ALE/<Game>-v5", "Atari 2600 games through ale-py's native vector env (deep-neuroevolution "
                                 "preprocessing by default).")
            row("<any Gymnasium id>", "Gymnasium's own vector env (fallback).")
        print()
    return 0


def cmd_build_ops(args) -> int:
    from tfevo import ops

    def report(name, res, seconds):
        state = f"FAILED: {str(res).strip().splitlines()[0] if str(res).strip() else type(res).__name__}" \
            if isinstance(res, Exception) else str(res)
        print(f"  {name:<16} {seconds:6.1f} s  {state}", flush=True)

    if ops._compiler() is None:  # nothing to build: not an error, tfevo runs on the references
        print("tfevo: no C++ compiler found (install g++ or set CXX to build the C++ kernels); nothing built, "
              "tfevo uses its pure-TensorFlow references", file=sys.stderr)
        return 0
    print(f"building {len(ops.names())} custom ops into {ops.cache_dir()}", flush=True)
    results = ops.build_all(jobs=args.jobs, force=args.force, report=report)
    failed = [n for n, r in results.items() if isinstance(r, Exception)]
    if failed:
        print(f"tfevo: {len(failed)} op(s) failed to build: {', '.join(failed)}; they fall back to their "
              "pure-TensorFlow references", file=sys.stderr)
        return 1
    return 0


