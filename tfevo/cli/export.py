"""`tfevo export`: the best member of a run as a ``.keras`` file that loads without tfevo.

The file maps an observation batch ``[B, *obs_shape]`` to the policy's raw
network outputs, with the run's observation preprocessing folded in as built-in
Keras layers (observation normalization as ``Normalization`` plus a clip;
uint8 frame scaling as ``Rescaling``).  The action mapping (argmax, a threshold,
tanh-squash or clip to the bounds) is written next to it as JSON metadata.
"""

from __future__ import annotations

import json
from pathlib import Path

from tfevo.cli._paths import check_output_file
from tfevo.cli.evaluate import _restore_setup

#: each action rule as a NumPy expression of the model's outputs ``y [B, K]`` and the metadata's ``action``
RULES = {
    "argmax": "y.argmax(-1)",
    "greater": "(y[:, 0] > threshold).astype(np.int32)",
    "tanh": "low + (np.tanh(y) + 1) / 2 * (high - low)",
    "clip": "np.clip(y, low, high)",
    "rescale_clip": "np.clip(low + (y - output_range[0]) / (output_range[1] - output_range[0]) * (high - low), "
                    "low, high)",
    "identity": "y",
}


def _continuous(spec, rule: str, low=None, high=None, **extra) -> dict:
    """A continuous action rule; ``low``/``high`` default to the action spec's bounds."""
    import numpy as np

    shape = [int(d) for d in spec.shape]
    d = {"type": "continuous", "rule": rule, "numpy": f"a = ({RULES[rule]}).reshape(-1, *shape)", "shape": shape}
    if rule != "identity":
        low, high = (spec.low, spec.high) if low is None else (low, high)
        d["low"] = np.broadcast_to(np.asarray(low, np.float64), shape).tolist()
        d["high"] = np.broadcast_to(np.asarray(high, np.float64), shape).tolist()
    return {**d, **extra}


def _discrete(rule: str = "argmax", **extra) -> dict:
    return {"type": "discrete", "rule": rule, "numpy": "a = " + RULES[rule], **extra}


def _vector_core(cfg, parts, params, spec):
    """mlp / linear / nature_dqn: the template with the best member's weights."""
    import tensorflow as tf

    from tfevo.core import ConfigError

    policy = parts.policy
    if policy.state_shape is not None:
        raise ConfigError(f"policy.kind {cfg.policy.kind!r}: a recurrent template carries a state between steps; "
                          "the exported model would only be its first step, so export refuses it")
    params = policy._rounded(tf.constant(params[None]))[0].numpy()  # float16 runs: the rollouts' weights
    core = parts.model.to_keras(params)
    if spec.discrete:
        action = _discrete()
    elif policy._low is None:
        action = _continuous(spec, "identity")
    else:
        action = _continuous(spec, policy.continuous, policy._low, policy._high)  # "tanh" or "clip"
    return core, action, policy._scale_uint8


def _neat_core(cfg, parts, params, spec):
    import tensorflow as tf

    from tfevo.core import ConfigError
    from tfevo.neat.export import to_keras
    from tfevo.neat.functions import output_low

    policy, ncfg = parts.policy, parts.genome_config
    if not ncfg.feed_forward:
        raise ConfigError("algorithm.params.feed_forward=false: a recurrent NEAT network carries its node values "
                          "between steps (and settles settle_steps times per observation), which one stateless "
                          "Keras model cannot express; export supports feed-forward NEAT networks")
    nodes, conns = policy.unflatten(tf.constant(params[None]))
    core = to_keras(nodes[0], conns[0], ncfg)
    if any(type(layer).__module__.startswith("tfevo") for layer in core.layers):
        raise ConfigError("the best NEAT network uses a user-registered activation or aggregation, which has no "
                          "built-in Keras form; its .keras file would need tfevo to load")
    if spec.discrete:
        action = _discrete("greater", threshold=0.5) if ncfg.num_outputs == 1 else _discrete()
    elif policy.scale_outputs:
        action = _continuous(spec, "rescale_clip", output_range=[output_low(ncfg.activation_default), 1.0])
    else:
        action = _continuous(spec, "clip")
    return core, action


def _hyperneat_core(cfg, parts, params, spec):
    import tensorflow as tf

    from tfevo.neat.functions import output_low

    policy = parts.policy
    core = policy.hyperneat.to_keras(policy.unflatten_graph(tf.constant(params[None])), 0)
    if spec.discrete:
        action = _discrete()
    else:
        action = _continuous(spec, "rescale_clip", output_range=[output_low(policy.hyperneat.output_activation), 1.0])
    return core, action


def _gp_core(cfg, parts, params, spec, obs_dim):
    import keras
    import tensorflow as tf
    from keras import ops

    from tfevo.core import ConfigError
    from tfevo.gp import GPPolicy
    from tfevo.gp.export import to_keras

    policy = parts.policy
    k = policy.num_outputs
    trees = tuple(t.numpy() for t in GPPolicy.unpack(tf.constant(params[None])))
    prog = to_keras(trees, 0, num_outputs=k, num_inputs=obs_dim, model=True)
    if any(type(layer).__module__.startswith("tfevo") for layer in prog.layers):
        raise ConfigError("the best GP tree uses a user-registered function, which has no built-in Keras form; "
                          "its .keras file would need tfevo to load")
    inp = keras.Input((obs_dim,), name="inputs")
    y = prog(inp)
    if k == 1:
        y = keras.layers.Reshape((1,))(y)
    y = ops.where(ops.isfinite(y), y, ops.zeros_like(y))  # what the policy does with inf/NaN outputs
    core = keras.Model(inp, y, name="gp_policy")
    if policy.num_actions:
        action = _discrete("greater", threshold=0.0) if k == 1 else _discrete()
    else:
        action = _continuous(spec, policy.squash)
    return core, action


def build_export(cfg, params, run_dir):
    """``(keras.Model, metadata dict)`` of the best member ``params [D]`` of a run."""
    import keras
    import numpy as np
    from keras import ops

    from tfevo.core import ConfigError
    from tfevo.training.builders import env_spec, make_obs_norm
    from tfevo.training.families import family_of

    if cfg.problem is not None:
        raise ConfigError(f"{run_dir} evolved solutions of the QD task {cfg.problem.name}, not a policy network: "
                          "there is no model to export; `tfevo eval` prints its best solution")
    obs_shape, obs_dtype, spec, _ = env_spec(cfg.env.id, cfg.env.kwargs)
    parts = family_of(cfg).policy(cfg, obs_shape, spec)
    params = np.asarray(params, np.float32)
    kind = cfg.policy.kind
    obs_dim = int(np.prod(obs_shape))
    scale_uint8 = False
    if kind == "neat":
        core, action = _neat_core(cfg, parts, params, spec)
    elif kind == "hyperneat":
        core, action = _hyperneat_core(cfg, parts, params, spec)
    elif kind == "gp_tree":
        core, action = _gp_core(cfg, parts, params, spec, obs_dim)
    else:
        core, action, scale_uint8 = _vector_core(cfg, parts, params, spec)

    inp = keras.Input(obs_shape, dtype="float32", name="observation")
    x = inp
    norm = make_obs_norm(cfg, obs_shape, run_dir)
    preprocessing = []
    if norm is not None:
        if float(norm.count.numpy()) <= 0:
            raise ConfigError(f"{run_dir}: evaluator.obs_norm is on but the checkpoint has no observation "
                              "statistics yet; train for at least one generation")
        # (x - mean) / sqrt(var + eps) as Keras' (x - mean) / max(sqrt(variance), 1e-7): sqrt(var + eps) >= 1e-4
        var = norm.variance.numpy() + norm.epsilon
        axis = tuple(range(1, 1 + len(obs_shape))) if len(obs_shape) > 1 else -1
        x = keras.layers.Normalization(axis=axis, mean=norm.mean.numpy(), variance=var, name="obs_norm")(x)
        preprocessing.append("normalization")
        if norm.clip is not None:
            x = ops.clip(x, -norm.clip, norm.clip)
            preprocessing.append(f"clip to [-{norm.clip:g}, {norm.clip:g}]")
    elif obs_dtype == "uint8" and scale_uint8:
        x = keras.layers.Rescaling(1.0 / 255.0, name="frame_scale")(x)
        preprocessing.append("rescaling 1/255")
    if kind in ("neat", "hyperneat", "gp_tree") and len(obs_shape) != 1:
        x = keras.layers.Reshape((obs_dim,), name="flatten_obs")(x)
    y = core(x)
    model = keras.Model(inp, y, name=f"{cfg.name}_best".replace(" ", "_").replace("/", "_"))
    meta = {
        "env_id": cfg.env.id, "env_kwargs": dict(cfg.env.kwargs), "policy_kind": kind,
        "obs_shape": list(obs_shape), "obs_dtype": obs_dtype, "preprocessing": preprocessing,
        "outputs": int(model.output.shape[-1]), "action": action,
    }
    return model, meta


def cmd_export(args) -> int:
    from tfevo.core import ConfigError

    run_dir = Path(args.run_dir)
    if not run_dir.is_dir():
        raise ConfigError(f"run directory {str(run_dir)!r} does not exist (give a directory made by tfevo train)")
    out = check_output_file("--out", Path(args.out) if args.out else run_dir / "best.keras", (".keras",),
                            " (the Keras 3 format)")
    cfg, params = _restore_setup(run_dir)
    model, meta = build_export(cfg, params, run_dir)
    meta_path = Path(str(out) + ".json")
    try:
        model.save(out)
        meta_path.write_text(json.dumps(meta, indent=1) + "\n")
    except OSError as e:
        raise ConfigError(f"--out {str(out)!r}: cannot write it ({e.strerror or e})") from None
    pre = ", ".join(meta["preprocessing"]) or "none"
    obs = ", ".join(map(str, meta["obs_shape"]))
    print(f"{cfg.env.id}: best {meta['policy_kind']} policy of {run_dir} written to {out}")
    print(f"  observations [B, {obs}] ({meta['obs_dtype']}) -> outputs [B, {meta['outputs']}]; "
          f"preprocessing inside the model: {pre}")
    act = meta["action"]
    names = ", ".join(k for k in ("threshold", "low", "high", "output_range") if k in act)
    print(f"  actions ({act['type']}): y = model(obs); {act['numpy']}")
    print(f"  ({'the rule and ' + names if names else 'the rule'} in {meta_path}; keras.models.load_model(\"{out}\") "
          "needs no tfevo)")
    return 0
