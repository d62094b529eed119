import sys, json
sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))
from pathlib import Path
from tb_audit import events, compare
run = Path(sys.argv[1])
ev = events(run)
steps = [s for s, _ in ev["fitness/best"]]
print("  TB fitness/best steps:", steps[:3], "...", steps[-3:], "count", len(steps), "dups", len(steps) - len(set(steps)))
if len(sys.argv) > 2:
    ref = Path(sys.argv[2])
    T = ("wall_time", "generation_seconds", "frames_per_second", "compile_seconds")
    rows = lambda p: [{k: v for k, v in json.loads(l).items() if k not in T} for l in (p / "progress.jsonl").read_text().splitlines()]
    print("  jsonl == uninterrupted:", rows(run) == rows(ref))
    er = events(ref)
    same = all(ev[t] == er[t] for t in er if t.startswith(("fitness/", "algorithm/")) or t in ("progress/frames", "progress/evaluations"))
    print("  TB (non-timing) == uninterrupted:", same, "| TB vs own jsonl:", compare(run) or "OK")
