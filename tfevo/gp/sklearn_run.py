"""The generation loop of the scikit-learn estimators, with gplearn's
semantics: operator probabilities under gplearn's names, ``stopping_criteria``,
``warm_start``, ``max_samples`` (per-tree row subsampling with out-of-bag
fitness) and ``run_details_``.

A run's state is the engine's ``tf.Variable`` s (population, best tree,
seed stream, generation counter); a warm start continues them, so fitting
``g1`` generations and then warm-starting to ``g2`` replays exactly the
ask/tell sequence of one ``g2``-generation fit.  A pickled estimator keeps
that state as NumPy arrays, so it can warm-start after unpickling too.
"""

from __future__ import annotations

import numbers
import time
import warnings

import numpy as np
import tensorflow as tf

from tfevo.core import ConfigError, NonFiniteFitnessWarning
from tfevo.gp.algorithm import OPERATORS, GeneticProgramming
from tfevo.gp.metrics import subsample_mask

#: gplearn's operator arguments and the tfevo operator each one sets
#: (gplearn's point mutation replaces each node with probability
#: ``p_point_replace``: tfevo's ``multi_point`` with ``p_point``).
GPLEARN_OPERATORS = (("p_crossover", "crossover"), ("p_subtree_mutation", "subtree"),
                     ("p_hoist_mutation", "hoist"), ("p_point_mutation", "multi_point"))
RUN_DETAILS = ("generation", "average_length", "average_fitness", "best_length", "best_fitness",
               "best_oob_fitness", "generation_time")


def _prob(name, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0.0 <= float(value) <= 1.0:
        raise ConfigError(f"{name} must be a probability in [0, 1], got {value!r}")
    return float(value)


def operator_mix(est) -> dict:
    """``GPConfig.operators`` from the estimator's gplearn probabilities and
    its ``operators`` (which holds only operators gplearn lacks)."""
    extra = est.operators
    if extra is not None and not hasattr(extra, "items"):
        raise ConfigError(f"operators must be a dict {{name: probability}} or None, got {extra!r}")
    extra = dict(extra or {})
    mix, terms = {}, []
    for arg, op in GPLEARN_OPERATORS:
        p = _prob(arg, getattr(est, arg))
        if op in extra:
            raise ConfigError(f"operators[{op!r}]={extra[op]!r} sets the operator that {arg}={p:g} sets; "
                              f"give it once, as {arg} (operators holds only operators gplearn lacks: "
                              f"{', '.join(o for o in OPERATORS if o not in dict(GPLEARN_OPERATORS).values())})")
        mix[op] = p
        terms.append(f"{arg}={p:g}")
    for op, p in extra.items():
        if op not in OPERATORS:
            raise ConfigError(f"operators: unknown operator {op!r}; known: {', '.join(OPERATORS)}")
        mix[op] = _prob(f"operators[{op!r}]", p)
        terms.append(f"operators[{op!r}]={mix[op]:g}")
    total = sum(mix.values())
    if total > 1.0 + 1e-6:
        raise ConfigError(f"operator probabilities must sum to at most 1 (the rest is reproduction), "
                          f"got {' + '.join(terms)} = {total:.4g}")
    return mix


def point_replace(est) -> float:
    """gplearn's ``p_point_replace``, or tfevo's older name ``p_point`` (which
    must agree with a non-default ``p_point_replace``)."""
    pr = _prob("p_point_replace", est.p_point_replace)
    if est.p_point is None:
        return pr
    pp = _prob("p_point", est.p_point)
    if pr != 0.05 and pp != pr:
        raise ConfigError(f"p_point={pp:g} and p_point_replace={pr:g} are the same setting "
                          f"(gplearn's name is p_point_replace); give one of them")
    return pp


def sample_rows(est, n_rows: int) -> int:
    """Rows each tree is scored on per generation (gplearn: ``int(max_samples * n)``)."""
    ms = est.max_samples
    if isinstance(ms, bool) or not isinstance(ms, numbers.Real) or not 0.0 < float(ms) <= 1.0:
        raise ConfigError(f"max_samples must be a fraction in (0, 1], got {ms!r}")
    n_in = int(float(ms) * n_rows)
    if n_in < 1:
        raise ValueError(f"max_samples={ms!r} leaves no row of the {n_rows} samples to score trees on")
    return n_in


def _structure(cfg):
    return dict(population_size=int(cfg.popsize), max_len=int(cfg.max_len), function_set=tuple(cfg.functions),
                n_features=int(cfg.num_vars), n_outputs=int(cfg.num_outputs))


def _resume(est, cfg):
    """The engine to continue (warm start with a stored run) or None."""
    live = getattr(est, "engine_", None)
    saved = getattr(est, "_run_state", None)
    if not est.warm_start or not hasattr(est, "program_") or (live is None and saved is None):
        return None
    old = _structure(live.config) if live is not None else saved["structure"]
    new = _structure(cfg)
    changed = [f"{k}: {old[k]!r} -> {new[k]!r}" for k in new if old[k] != new[k]]
    if changed:
        raise ValueError(f"warm_start cannot continue the stored run after changing {'; '.join(changed)}; "
                         f"set warm_start=False to start a new run")
    if live is not None and live.config == cfg:
        return live
    values = [v.numpy() for v in live.variables] if live is not None else saved["variables"]
    seed = int(_seed_of(live, saved))
    gp = GeneticProgramming(cfg, seed=seed)
    for var, val in zip(gp.variables, values):
        var.assign(val)
    return gp


def _seed_of(live, saved):
    return int(live.seeds.seed.numpy()) if live is not None else saved["seed"]


def run_state(gp) -> dict:
    """The engine's state as NumPy arrays (what a pickle keeps)."""
    return dict(structure=_structure(gp.config), seed=int(gp.seeds.seed.numpy()),
                variables=[v.numpy() for v in gp.variables])


BEST_PROGRAM = ("last_generation", "all_time")


def final_program(est, gp):
    """The fitted program and its fitness (higher is better): the best raw
    fitness of the last generation (``best_program="last_generation"``,
    gplearn's ``_program``) or the best raw fitness seen in any generation
    (``"all_time"``, the engine's ``best``)."""
    last = getattr(est, "_last_best", None)
    if est.best_program == "all_time" or last is None:
        best, fit = gp.best
        return type(best)(*(np.array(a) for a in best)), float(fit)
    return last


def check_best_program(value):
    if not isinstance(value, str) or value not in BEST_PROGRAM:
        raise ConfigError(f"best_program must be one of {BEST_PROGRAM}, got {value!r}")


def evolve(est, cfg, score, n_rows: int, lower_is_better: bool, keep_population: bool = False):
    """Runs (or continues) the generations of ``est``; returns the engine.

    ``score(trees, mask)`` is the raw fitness ``[P]`` of the population
    (``mask`` None or ``bool [P, N]``, each tree's rows).  With
    ``keep_population``, ``est._final_population`` is the last evaluated
    generation and its raw fitness, ``(Trees of NumPy arrays, float64 [P])``
    (None when no generation ran), for the caller to take and delete.
    """
    n_in = sample_rows(est, n_rows)
    gp = _resume(est, cfg)
    if gp is None:
        gp = GeneticProgramming(cfg, seed=est._seed())
        est.run_details_ = {k: [] for k in RUN_DETAILS}
        est._programs = []
    done = int(gp.generation.numpy())
    total = int(est.generations)
    if total < done:
        raise ValueError(f"generations={total} must be larger or equal to the {done} generations already "
                         f"run when warm_start=True")
    if total == done:
        warnings.warn("Warm-start fitting without increasing generations does not evolve new programs.")
    sign = -1.0 if lower_is_better else 1.0
    crit = est.stopping_criteria
    if crit is not None and (isinstance(crit, bool) or not isinstance(crit, numbers.Real)):
        raise ConfigError(f"stopping_criteria must be a number or None, got {crit!r}")
    seed = int(gp.seeds.seed.numpy())
    rd = est.run_details_
    for g in range(done, total):
        t0 = time.time()
        trees = gp.ask()
        mask = None
        if n_in < n_rows:  # its own stream: [seed, -1-g] never meets the engine's [seed, counter >= 0]
            mask = subsample_mask(tf.constant([seed, -1 - g], tf.int32), gp.popsize, n_rows, n_in)
        raw = score(trees, mask)
        with warnings.catch_warnings():  # a non-finite error is this estimator's "worst", by design
            warnings.simplefilter("ignore", NonFiniteFitnessWarning)
            gp.tell(trees, sign * raw)
        raw_np = raw.numpy().astype(np.float64)
        fit = sign * raw_np
        est._keep_generation(gp, trees, raw_np)
        i = int(np.argmax(np.where(np.isnan(fit), -np.inf, fit)))
        lengths = trees.sizes[:, 0].numpy()
        finite = raw_np[np.isfinite(raw_np)]
        oob = np.nan
        if mask is not None:
            best = type(trees)(*(a[i:i + 1] for a in trees))
            oob = float(score(best, ~mask[i:i + 1]).numpy()[0])
        rd["generation"].append(g)
        rd["average_length"].append(float(lengths.mean()))
        rd["average_fitness"].append(float(finite.mean()) if finite.size else np.nan)
        rd["best_length"].append(int(lengths[i]))
        rd["best_fitness"].append(float(raw_np[i]))
        rd["best_oob_fitness"].append(oob)
        rd["generation_time"].append(time.time() - t0)
        if est.verbose:
            extra = "" if mask is None else f"  oob {oob:.6g}"
            print(f"gen {g}: best fitness {raw_np[i]:.6g}  length {int(lengths[i])}  "
                  f"avg length {lengths.mean():.4g}{extra}")
        if crit is not None and (raw_np[i] <= crit if lower_is_better else raw_np[i] >= crit):
            break
    if total > done:  # gplearn's final program: the best raw fitness of the last generation
        est._last_best = (type(trees)(*(np.array(a[i:i + 1]) for a in trees)), float(fit[i]))
    if keep_population:
        est._final_population = (type(trees)(*(np.array(a) for a in trees)), raw_np) if total > done else None
    return gp


def hall_of_fame(raw_fitness, size: int, lower_is_better: bool) -> np.ndarray:
    """Indices of the ``size`` best raw fitnesses, best first (gplearn's
    transformer hall of fame).  Equal fitnesses, frequent in a final
    generation (a program plus a constant has the same correlation), are
    ordered as gplearn orders them, by NumPy's default ``argsort`` (reversed
    for a higher-is-better metric), so the same final generation gives
    gplearn's components."""
    f = np.asarray(raw_fitness, np.float64)
    order = f.argsort()
    return (order if lower_is_better else order[::-1])[:size]


def _ranks(a):
    """Average ranks (1-based) of every row, as scipy's ``rankdata``; a row
    holding NaN is all NaN."""
    srt = np.sort(a, axis=1)
    out = np.empty_like(a)
    for r in range(a.shape[0]):
        lo = np.searchsorted(srt[r], a[r], side="left")
        hi = np.searchsorted(srt[r], a[r], side="right")
        out[r] = (lo + hi + 1) / 2.0
    return np.where(np.isnan(a).any(axis=1, keepdims=True), np.nan, out)


def least_correlated(outputs, n_components: int, spearman: bool = False) -> list:
    """gplearn's choice of a transformer's components among the hall of fame.

    ``outputs`` ``[H, n]`` are the candidates' outputs on the training rows,
    best fitness first.  On the absolute correlation matrix of the outputs
    (of their ranks with ``spearman``) with a zero diagonal, the most
    correlated pair is found (``np.argmax``, so the first in row-major
    order, and a NaN, the correlation of a constant output, counts as the
    largest) and its later candidate (the less fit) is dropped, until
    ``n_components`` remain.  Returns the kept positions, ascending.
    """
    ev = np.asarray(outputs, np.float64)
    if spearman:
        ev = _ranks(ev)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        corr = np.abs(np.corrcoef(ev)).reshape(ev.shape[0], ev.shape[0])
    np.fill_diagonal(corr, 0.0)
    kept = list(range(ev.shape[0]))
    while len(kept) > n_components:
        sub = corr[np.ix_(kept, kept)]
        r, c = np.unravel_index(np.argmax(sub), sub.shape)
        kept.pop(max(r, c))
    return kept
