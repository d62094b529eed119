"""`tfevo train`: a config (file, defaults, overrides) -> a run directory."""

from __future__ import annotations

import json
import os
from pathlib import Path


def _set_override(data: dict, assignment: str) -> None:
    """Applies ``a.b.c=value`` (value parsed as JSON when possible)."""
    from tfevo.core import ConfigError

    if "=" not in assignment:
        raise ConfigError(f"--set expects key=value, got {assignment!r}")
    key, raw = assignment.split("=", 1)
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    node = data
    parts = key.strip().split(".")
    for p in parts[:-1]:
        if node.get(p) is None:  # an optional table the config leaves out (to_dict writes it as null)
            node[p] = {}
        node = node[p]
        if not isinstance(node, dict):
            raise ConfigError(f"--set {key}: {p} is not a table")
    node[parts[-1]] = value


def _switch_family(data: dict, assignments) -> list[str]:
    """What ``--set algorithm.name=A`` / ``--set policy.kind=K`` leave behind of the config they change.

    The config's ``algorithm.params`` that A does not read, its ``policy.kind`` when A cannot
    evolve it (it becomes A's first policy kind), and the policy settings the new kind does not
    read (e.g. the default's ``hidden`` under ``linear``) belonged to the former choice and are
    dropped. Settings given on the command line too stay, and are refused as in a file. Returns
    what was dropped or changed, for one line of output."""
    from tfevo.training.config import _UNUSED_POLICY_FIELDS, FAMILY_POLICIES, VECTOR_POLICIES
    from tfevo.training.families import family_named

    keys = {a.split("=", 1)[0].strip() for a in assignments}
    notes = []
    algo, policy = data.get("algorithm"), data.get("policy")
    if "algorithm.name" in keys and isinstance(algo, dict):
        name = algo.get("name")
        accepted = family_named(name).param_names(name)  # ConfigError (closest name) if unknown
        params = algo.get("params")
        if accepted is not None and isinstance(params, dict):
            for k in [k for k in params if k not in accepted and f"algorithm.params.{k}" not in keys]:
                params.pop(k)
                notes.append(f"algorithm.params.{k} (not read by {name})")
        ev = data.get("evaluator")
        if (name != "seed_ga" and isinstance(ev, dict) and ev.get("decode_chunk")
                and "evaluator.decode_chunk" not in keys):
            notes.append(f"evaluator.decode_chunk (seed-list genomes; not read by {name})")
            ev.pop("decode_chunk")
        kinds = FAMILY_POLICIES.get(name, VECTOR_POLICIES)
        if (isinstance(policy, dict) and "policy.kind" not in keys and data.get("problem") is None
                and policy.get("kind", "mlp") not in kinds):
            notes.append(f"policy.kind {policy.get('kind', 'mlp')!r} (now {kinds[0]!r}: {name} takes "
                         f"{' | '.join(kinds)})")
            policy["kind"] = kinds[0]
            keys.add("policy.kind")
    if "policy.kind" in keys and isinstance(policy, dict):
        for field in _UNUSED_POLICY_FIELDS.get(policy.get("kind"), ()):
            if f"policy.{field}" not in keys and field in policy:
                policy.pop(field)
                notes.append(f"policy.{field} (not read by policy.kind {policy.get('kind')})")
    return notes


def _load(args):
    import copy

    from tfevo.training import config as C

    if args.config is None:
        data = copy.deepcopy(C.DEFAULT_CONFIG)
        source = "<built-in default>"
    else:
        path = Path(args.config)
        cfg = C.load_config(path)
        data = cfg.to_dict()
        source = str(path)
    for s in args.set or []:
        _set_override(data, s)
    notes = _switch_family(data, args.set or [])
    if notes:
        print(f"tfevo: --set replaced the config's {'; '.join(notes)}")
    if args.run_dir:
        data.setdefault("run", {})["dir"] = args.run_dir
    # budgets given on the command line set those fields; 0 or less is refused by the config's
    # validation, naming the field, exactly like the same value in a file
    for k in ("generations", "frames", "seconds"):
        if getattr(args, k, None) is not None:
            data.setdefault("run", {})[k] = getattr(args, k)
    if args.seed is not None:
        data.setdefault("run", {})["seed"] = args.seed
    if getattr(args, "devices", None) is not None:
        data.setdefault("distribute", {})["devices"] = args.devices
    from tfevo.distribute.cluster import apply_tf_config

    return C.parse_config(apply_tf_config(data), source)  # TF_CONFIG: one worker of a multi-machine job


def _differences(old, new, prefix="") -> list:
    """``[(dotted key, old value, new value)]`` of two config dicts, in key order."""
    out = []
    for k in sorted(set(old) | set(new), key=str):
        a, b = old.get(k, "<unset>"), new.get(k, "<unset>")
        if isinstance(a, dict) and isinstance(b, dict):
            out += _differences(a, b, f"{prefix}{k}.")
        elif a != b:
            out.append((f"{prefix}{k}", a, b))
    return out


def _budgets(run) -> str:
    return ", ".join(f"run.{k} = {getattr(run, k)}" for k in ("generations", "frames", "seconds")
                     if getattr(run, k) is not None)


def cmd_train(args) -> int:
    import tensorflow as tf

    from tfevo.core import ConfigError
    from tfevo.distribute import broadcast_from_chief, read_tf_config
    from tfevo.training import config as C
    from tfevo.training import Trainer
    from tfevo.training.builders import build, write_picture
    from tfevo.training.plot import plot_run, read_progress, text_curve

    import math

    if not (math.isfinite(args.progress_every) and args.progress_every >= 0):
        raise ConfigError(f"--progress-every must be a number of seconds >= 0, got {args.progress_every}")
    cfg = _load(args)
    run_dir = cfg.run_dir
    saved = run_dir / "config.json"
    refusal = None  # a changed config: refused at once, or by every worker of a multi-worker job together
    if saved.exists():
        # through the schema, so fields added since the run started compare as their defaults
        old = C.parse_config(json.loads(saved.read_text()), str(saved)).to_dict()
        new = cfg.to_dict()
        # run.dir says where the run lives, and it is found here: a moved or copied run directory, or the
        # same one spelled another way (./runs/x, an absolute path), is the same run
        budget_keys = ("generations", "frames", "seconds", "dir")
        # the budget and the device layout may change (results do not depend on the replica count),
        # but not whether the population is sharded (that picks the evaluator)
        sharded = lambda d: C.DistributeConfig(**d.get("distribute", {})).enabled  # noqa: E731
        strip = lambda d: {**d, "run": {k: v for k, v in d["run"].items() if k not in budget_keys},  # noqa: E731
                           "distribute": sharded(d)}
        if strip(old) != strip(new):
            changed = _differences(strip(old), strip(new))
            shown = "; ".join(f"{k}: {a!r} in the run, {b!r} now" for k, a, b in changed[:5])
            refusal = (f"{run_dir} holds a run with a different config ({shown}); pass --run-dir to start a new run "
                       "(only the budget and distribute.devices/strategy may change when resuming)")
    multi_worker = read_tf_config() is not None
    if refusal is not None and not multi_worker:
        raise ConfigError(refusal)
    task = f"{cfg.problem.name} (D={cfg.problem.num_dims})" if cfg.problem is not None else cfg.env.id
    print(f"tfevo: {cfg.name}: {cfg.algorithm.name} ({cfg.policy.kind if cfg.problem is None else 'solutions'}) "
          f"on {task}, popsize {cfg.algorithm.popsize}, run directory {run_dir}")
    setup = build(cfg)
    if multi_worker and isinstance(setup.strategy, tf.distribute.MultiWorkerMirroredStrategy):
        # only the chief's run directory counts; had it refused before joining the cluster, the other
        # workers would wait for it at start-up for ever, so every worker stops here with its answer
        refusal = broadcast_from_chief(setup.strategy, (refusal or "").encode()).decode() or None
    if refusal is not None:
        raise ConfigError(refusal)
    if setup.strategy is None or setup.strategy.extended.should_checkpoint:  # multi-worker: only the chief writes
        run_dir.mkdir(parents=True, exist_ok=True)
        tmp = saved.with_suffix(".tmp")
        tmp.write_text(json.dumps(cfg.to_dict(), indent=2))
        os.replace(tmp, saved)
    print(f"tfevo: {setup.num_params} parameters per member")
    trainer = Trainer(
        setup.algorithm, setup.evaluator, run_dir=run_dir,
        generations=cfg.run.generations, frames=cfg.run.frames, seconds=cfg.run.seconds,
        checkpoint_every=cfg.run.checkpoint_every, keep_checkpoints=cfg.run.keep_checkpoints,
        progress=not args.no_progress, progress_every=args.progress_every, extra_trackables=setup.trackables,
        strategy=setup.strategy,
    )
    if setup.strategy is not None:
        print(f"tfevo: population sharded over {setup.strategy.num_replicas_in_sync} replica(s) "
              f"({type(setup.strategy).__name__})")
    if trainer.restored_from is not None and trainer._done():
        print(f"tfevo: the run has reached its budget ({_budgets(cfg.run)}); nothing to train. Raise "
              "--generations, --frames or --seconds to continue it")
    trainer.run()
    if trainer.run_dir is None:  # a non-chief worker of a multi-worker run writes nothing
        print(f"tfevo: worker done after {int(trainer.generation.numpy())} generations; the chief writes {run_dir}")
        return 0
    rows = read_progress(run_dir)
    print("\nlearning curve:")
    print(text_curve(rows))
    png = plot_run(run_dir)
    picture = write_picture(run_dir, setup)
    last = rows[-1] if rows else {}
    gens = last.get("generation", 0)
    print(f"\nbest fitness {float(trainer.best_fitness.numpy()):.4g} after {gens} generation{'' if gens == 1 else 's'}, "
          f"{last.get('frames', 0)} frames, {last.get('wall_time', 0.0):.1f} s")
    print(f"run saved in {run_dir} (checkpoints, progress.jsonl, tensorboard/); curve: {png}"
          + (f"; picture: {picture}" if picture else ""))
    print(f"next: tfevo eval {run_dir}   |   tensorboard --logdir {run_dir / 'tensorboard'}")
    return 0


