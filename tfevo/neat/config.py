"""Configuration of tensorized NEAT (neat-python names where they exist)."""

from __future__ import annotations

import configparser
import dataclasses
from typing import Any

import numpy as np

from tfevo.core import ConfigError
from tfevo.neat import functions as F

__all__ = ["NEATConfig", "FITNESS_DTYPES", "SPECIES_FITNESS_FUNCS", "NEAT_PYTHON_KEYS", "TENSORNEAT_ALIASES",
           "INITIAL_CONNECTIONS", "NEAT_PYTHON_DEFAULTS", "initial_pairs"]

# NEATConfig.fitness_dtype values
FITNESS_DTYPES = ("float64", "float32")
SPECIES_FITNESS_FUNCS = ("max", "min", "mean", "median", "median2")
INITIAL_CONNECTIONS = ("unconnected", "none", "fs_neat_nohidden", "fs_neat", "fs_neat_hidden", "full_nodirect", "full",
                       "full_direct", "partial_nodirect", "partial", "partial_direct")

# What neat-python 2.x uses for the optional keys a config file leaves out
# (the required ones are marked in NEAT_PYTHON_KEYS).
NEAT_PYTHON_DEFAULTS = {
    "initial_connection": "unconnected", "elitism": 0, "survival_threshold": 0.2, "min_species_size": 1,
    "species_fitness_func": "mean", "max_stagnation": 15, "species_elitism": 0,
    "bias_init_type": "gaussian", "response_init_type": "gaussian", "weight_init_type": "gaussian",
}
_R, _O = True, False
_ATTR = {"init_mean": _R, "init_stdev": _R, "init_type": _O, "replace_rate": _R, "mutate_rate": _R,
         "mutate_power": _R, "max_value": _R, "min_value": _R}
# Every key neat-python 2.0 reads, by section: key -> required (neat-python
# refuses a file without it; the optional ones take NEAT_PYTHON_DEFAULTS)
NEAT_PYTHON_KEYS = {
    "NEAT": {"pop_size": _R, "fitness_criterion": _R, "fitness_threshold": _R, "reset_on_extinction": _R,
             "no_fitness_termination": _R, "seed": _O},
    "DefaultGenome": {
        **{k: _R for k in ("num_inputs", "num_outputs", "num_hidden", "feed_forward",
                           "compatibility_disjoint_coefficient", "compatibility_weight_coefficient",
                           "conn_add_prob", "conn_delete_prob", "node_add_prob", "node_delete_prob")},
        "single_structural_mutation": _O, "structural_mutation_surer": _O, "initial_connection": _O,
        **{f"{a}_{k}": r for a in ("bias", "response", "weight") for k, r in _ATTR.items()},
        **{f"{a}_{k}": r for a in ("activation", "aggregation")
           for k, r in (("default", _O), ("options", _R), ("mutate_rate", _R))},
        **{f"time_constant_{k}": _O for k in _ATTR},
        "enabled_default": _R, "enabled_mutate_rate": _R, "enabled_rate_to_true_add": _O,
        "enabled_rate_to_false_add": _O},
    "DefaultSpeciesSet": {"compatibility_threshold": _R},
    "DefaultStagnation": {"species_fitness_func": _O, "max_stagnation": _O, "species_elitism": _O},
    "DefaultReproduction": {"elitism": _O, "survival_threshold": _O, "min_species_size": _O},
}
# the values neat-python accepts for its boolean keys: configparser's words in
# [NEAT], only true/false (any case) in [DefaultGenome], and BoolAttribute's
# words for enabled_default
_CP_BOOL = ("1", "yes", "true", "on", "0", "no", "false", "off")
_NEAT_PYTHON_BOOLS = {"reset_on_extinction": _CP_BOOL, "no_fitness_termination": _CP_BOOL,
                      "feed_forward": ("true", "false"), "single_structural_mutation": ("true", "false"),
                      "enabled_default": _CP_BOOL + ("random", "none")}
# neat-python's defaults of the node time constant (CTRNN only; the
# compatibility distance reads it, so tfevo requires equal time constants)
_TIME_CONSTANT = {"init_mean": "1.0", "init_stdev": "0.0", "init_type": "gaussian", "replace_rate": "0.0",
                  "mutate_rate": "0.0", "mutate_power": "0.0", "max_value": "10.0", "min_value": "0.01"}

# TensorNEAT hyperparameter name -> NEATConfig field (same meaning).
TENSORNEAT_ALIASES = {
    "inputs": "num_inputs",
    "outputs": "num_outputs",
    "max_nodes": "max_nodes",
    "max_conns": "max_conns",
    "max_species": "max_species",
    "compatibility_disjoint": "compatibility_disjoint_coefficient",
    "compatibility_homologous": "compatibility_weight_coefficient",
    "node_add": "node_add_prob",
    "node_delete": "node_delete_prob",
    "conn_add": "conn_add_prob",
    "conn_delete": "conn_delete_prob",
    "genome_elitism": "elitism",
    "bias_init_std": "bias_init_stdev",
    "response_init_std": "response_init_stdev",
    "weight_init_std": "weight_init_stdev",
    "activation_replace_rate": "activation_mutate_rate",
    "aggregation_replace_rate": "aggregation_mutate_rate",
    "fitness_target": "fitness_threshold",
}


@dataclasses.dataclass
class NEATConfig:
    """Every hyperparameter of :class:`tfevo.neat.NEAT`.

    Names follow neat-python's config file where one exists; the TensorNEAT
    paper's names are accepted by :meth:`from_dict` (see ``TENSORNEAT_ALIASES``).

    Problem and capacity:
      num_inputs, num_outputs: network inputs / outputs (input keys are
        ``0..I-1``, output keys ``I..I+O-1``; both are real nodes in slots
        ``0..I+O-1`` of every genome).
      pop_size: P, the population size.
      max_nodes: N_max, node slots per genome (inputs and outputs included).
      max_conns: C_max, connection slots per genome.
      feed_forward: True -> acyclic genomes (add-connection rejects cycles);
        False -> recurrent genomes (any connection, state carried over steps).
      num_hidden: hidden nodes of the initial genomes.
      initial_connection: neat-python's values: ``"unconnected"`` (alias
        ``"none"``), ``"fs_neat_nohidden"``/``"fs_neat"`` (one random input
        to every output), ``"fs_neat_hidden"`` (one random input to every
        hidden and output node), ``"full_nodirect"``/``"full"``
        (inputs->hidden->outputs; inputs->outputs only without hidden
        nodes), ``"full_direct"`` (also inputs->outputs), and
        ``"partial_nodirect"``/``"partial"``/``"partial_direct"`` (a random
        ``round(n * connection_fraction)`` of the corresponding full set);
        recurrent genomes' full and partial sets also hold every output and
        hidden node's self-connection.
      connection_fraction: the fraction of ``partial*`` (neat-python writes it
        after the value: ``initial_connection = partial_direct 0.5``).

    Speciation (distance = node part + connection part, each
    ``(weight_coeff * sum of homologous gene distances + disjoint_coeff *
    #disjoint) / max(#genes)``; a node gene's distance is
    ``|dbias| + |dresponse| + [activation differs] + [aggregation differs]``,
    a connection's ``|dweight| + [enabled differs]``, connections aligned by
    (in, out) key; input nodes are not genes):
      compatibility_disjoint_coefficient (TensorNEAT ``compatibility_disjoint``)
      compatibility_weight_coefficient (TensorNEAT ``compatibility_homologous``)
      compatibility_threshold: a genome joins the closest species whose
        representative is nearer than this, else founds a new species.
      max_species: species slots; when full, genomes join the closest species.

    Stagnation and reproduction:
      species_fitness_func: ``"max"`` | ``"mean"`` | ``"min"`` | ``"median"``
        | ``"median2"``, a species' fitness for stagnation and ranking, as
        neat-python's ``stat_functions``: ``median`` is the upper middle
        value of an even-sized species, ``median2`` the mean of the two.
      max_stagnation: a species is removed after this many generations without improvement.
      species_elitism: the best this-many species are never removed.
      elitism: best genomes of each species copied unchanged (TensorNEAT
        ``genome_elitism``).
      survival_threshold: fraction of each species (best first) allowed to
        reproduce (at least 2 members when there are 2).
      min_species_size: fewest offspring a surviving species gets.
      spawn_number_change_rate: smoothing of offspring counts, the fraction of
        the gap between last size and the target size closed per generation
        (neat-python hard-codes 0.5).
      allotment: ``"fitness"`` (neat-python: mean adjusted fitness,
        normalised by the population's fitness range) or ``"rank"`` (linear
        in species rank, TensorNEAT style).
      interspecies_crossover_prob: chance that the second parent comes from
        any species' survivors.
      crossover_prob: chance that a non-elite child is a crossover of two
        parents (else a mutated copy of one); neat-python always crosses
        (a pair may be the same genome).
      reset_on_extinction: when every species is stagnant (possible only
        with ``species_elitism=0``) the population is replaced by a fresh
        initial population and the species are cleared (neat-python with
        ``reset_on_extinction = True``); False keeps the best species alive
        (neat-python would raise ``CompleteExtinctionException``).

    Structural mutation (each applied independently per child, or at most
    one of them with ``single_structural_mutation``):
      node_add_prob, node_delete_prob, conn_add_prob, conn_delete_prob.
      single_structural_mutation: one uniform per child picks at most one
        structural mutation, each with probability ``prob / max(1, sum of
        the four probs)`` (neat-python's option of that name).
      share_split_innovations: splits of one connection in one generation
        share the new node key and markers (NEAT paper); default False: each
        split makes a new key and markers (neat-python).
      per_generation_innovations: a new (in, out) pair shares a fresh marker
        only with the children adding it in the same generation (neat-python
        2.0), so a pair re-added later is not homologous in crossover; False:
        it takes the pair's marker anywhere in the population.
      structural_mutation_surer: add-connection on an existing connection
        re-enables it, and add-node on a genome without connections tries
        add-connection instead (neat-python's option of that name; default
        False: nothing happens).

    Attribute mutation (per gene; ``*_mutate_rate`` perturbs by
    ``N(0, *_mutate_power)``, ``*_replace_rate`` draws a fresh initial value,
    one uniform deciding as in neat-python, so a gene is replaced with
    probability ``min(replace_rate, 1 - mutate_rate)``;
    values are clipped to ``[*_min_value, *_max_value]``; ``*_init_type`` is
    ``"gaussian"`` or ``"uniform"``):
      bias_*, response_*, weight_* as neat-python.
      enabled_default, enabled_mutate_rate (a hit sets a random state),
        enabled_rate_to_true_add / enabled_rate_to_false_add (added to the
        rate of a disabled / enabled connection, as neat-python's
        BoolAttribute; a rate of 1 or more always hits).
      activation_default, activation_options, activation_mutate_rate
        (TensorNEAT ``activation_replace_rate``).
      aggregation_default, aggregation_options, aggregation_mutate_rate.

    Runner:
      fitness_criterion: ``"max"`` | ``"min"`` | ``"mean"`` of a generation's
        fitness that :meth:`NEAT.run` compares with ``fitness_threshold``.
      fitness_threshold: :meth:`NEAT.run` stops when that statistic reaches it.
      no_fitness_termination: ignore ``fitness_threshold``.

    Numerics:
      fitness_dtype: ``"float64"`` (default, as neat-python's Python floats)
        or ``"float32"``.  The type in which supervised problems evaluate
        networks and compute fitness, and in which :meth:`NEAT.tell` ranks
        fitness (species fitness, stagnation, offspring allotment, parents).
        In float32, networks whose outputs saturate the sigmoid tie exactly
        (e.g. at 6.0 on 3-bit parity) where double still orders them by
        their margins.  Genomes are stored in float32 either way.
      distance_dtype: ``"float64"`` (default) or ``"float32"``: the type of
        the compatibility distances of speciation.  ``"float64"`` computes them
        in double from the genomes' float32 values and compares them with the
        double threshold, as neat-python's Python floats do; float32 can put a
        genome whose distance is within float32 rounding of
        ``compatibility_threshold`` (or of another species' distance) on the
        other side.  Either way about the same cost.
    """

    num_inputs: int = 2
    num_outputs: int = 1
    pop_size: int = 150
    max_nodes: int = 32
    max_conns: int = 64
    feed_forward: bool = True
    num_hidden: int = 0
    initial_connection: str = "full"
    connection_fraction: float = 1.0

    compatibility_disjoint_coefficient: float = 1.0
    compatibility_weight_coefficient: float = 0.5
    compatibility_threshold: float = 3.0
    max_species: int = 32

    species_fitness_func: str = "max"
    max_stagnation: int = 20
    species_elitism: int = 2
    elitism: int = 2
    survival_threshold: float = 0.2
    min_species_size: int = 2
    spawn_number_change_rate: float = 0.5
    allotment: str = "fitness"
    interspecies_crossover_prob: float = 0.0
    crossover_prob: float = 1.0
    reset_on_extinction: bool = True

    node_add_prob: float = 0.2
    node_delete_prob: float = 0.2
    conn_add_prob: float = 0.5
    conn_delete_prob: float = 0.5
    structural_mutation_surer: bool = False
    single_structural_mutation: bool = False
    share_split_innovations: bool = False
    per_generation_innovations: bool = True

    bias_init_mean: float = 0.0
    bias_init_stdev: float = 1.0
    bias_init_type: str = "gaussian"
    bias_max_value: float = 30.0
    bias_min_value: float = -30.0
    bias_mutate_power: float = 0.5
    bias_mutate_rate: float = 0.7
    bias_replace_rate: float = 0.1

    response_init_mean: float = 1.0
    response_init_stdev: float = 0.0
    response_init_type: str = "gaussian"
    response_max_value: float = 30.0
    response_min_value: float = -30.0
    response_mutate_power: float = 0.0
    response_mutate_rate: float = 0.0
    response_replace_rate: float = 0.0

    weight_init_mean: float = 0.0
    weight_init_stdev: float = 1.0
    weight_init_type: str = "gaussian"
    weight_max_value: float = 30.0
    weight_min_value: float = -30.0
    weight_mutate_power: float = 0.5
    weight_mutate_rate: float = 0.8
    weight_replace_rate: float = 0.1

    enabled_default: bool = True
    enabled_mutate_rate: float = 0.01
    enabled_rate_to_true_add: float = 0.0
    enabled_rate_to_false_add: float = 0.0

    activation_default: str = "sigmoid"
    activation_options: tuple = ("sigmoid",)
    activation_mutate_rate: float = 0.0
    aggregation_default: str = "sum"
    aggregation_options: tuple = ("sum",)
    aggregation_mutate_rate: float = 0.0

    fitness_criterion: str = "max"
    fitness_threshold: float = float("inf")
    no_fitness_termination: bool = False

    fitness_dtype: str = "float64"
    distance_dtype: str = "float64"

    def __post_init__(self):
        self.activation_options = tuple(_as_names(self.activation_options))
        self.aggregation_options = tuple(_as_names(self.aggregation_options))
        self.validate()

    # ------------------------------------------------------------------
    def validate(self) -> "NEATConfig":
        """Raises :class:`ConfigError` naming the first impossible value: the
        field, the value and the accepted range (see ``_RANGES``)."""
        _check_fields(self)
        I, O = self.num_inputs, self.num_outputs
        if self.elitism > self.pop_size:
            raise ConfigError(f"elitism must be <= pop_size={self.pop_size}, got {self.elitism}")
        if self.min_species_size > self.pop_size:
            raise ConfigError(f"min_species_size must be <= pop_size={self.pop_size}, got {self.min_species_size}")
        need = I + O + int(self.num_hidden)
        if self.max_nodes < need:
            raise ConfigError(
                f"max_nodes={self.max_nodes} is smaller than inputs+outputs+num_hidden={need}"
            )
        if self.initial_connection not in INITIAL_CONNECTIONS:
            raise ConfigError(f"initial_connection must be one of {', '.join(INITIAL_CONNECTIONS)}, "
                              f"got {self.initial_connection!r}")
        nconn = self._initial_conn_count()
        if self.max_conns < max(nconn, 1):
            raise ConfigError(
                f"max_conns={self.max_conns} cannot hold the {nconn} initial connections "
                f"of initial_connection={self.initial_connection!r}"
            )
        if self.fitness_criterion not in ("max", "min", "mean"):
            raise ConfigError(f"fitness_criterion must be 'max', 'min' or 'mean', got {self.fitness_criterion!r}")
        if self.species_fitness_func not in SPECIES_FITNESS_FUNCS:
            raise ConfigError(f"species_fitness_func must be one of {', '.join(SPECIES_FITNESS_FUNCS)}, "
                              f"got {self.species_fitness_func!r}")
        if self.distance_dtype not in FITNESS_DTYPES:
            raise ConfigError(f"distance_dtype must be one of {', '.join(repr(d) for d in FITNESS_DTYPES)}, "
                              f"got {self.distance_dtype!r}")
        if self.fitness_dtype not in FITNESS_DTYPES:
            raise ConfigError(f"fitness_dtype must be one of {', '.join(repr(d) for d in FITNESS_DTYPES)}, "
                              f"got {self.fitness_dtype!r}")
        if self.allotment not in ("fitness", "rank"):
            raise ConfigError(f"allotment must be 'fitness' or 'rank', got {self.allotment!r}")
        for a in ("bias", "response", "weight"):
            lo, hi = getattr(self, f"{a}_min_value"), getattr(self, f"{a}_max_value")
            if lo > hi:
                raise ConfigError(f"{a}_min_value must be <= {a}_max_value, got {lo} > {hi}")
            t = getattr(self, f"{a}_init_type")
            if t not in ("gaussian", "normal", "uniform"):
                raise ConfigError(f"{a}_init_type must be 'gaussian' or 'uniform', got {t!r}")
        for field, lookup in (("activation", F.activation_id), ("aggregation", F.aggregation_id)):
            for k in (f"{field}_options", f"{field}_default"):
                for n in _as_names(getattr(self, k)):
                    try:
                        lookup(n)
                    except ConfigError as e:
                        raise ConfigError(f"{k}: {e}") from None
        if self.activation_default not in self.activation_options:
            raise ConfigError(f"activation_default {self.activation_default!r} is not in activation_options")
        if self.aggregation_default not in self.aggregation_options:
            raise ConfigError(f"aggregation_default {self.aggregation_default!r} is not in aggregation_options")
        return self

    @property
    def fitness_tf_dtype(self):
        """``fitness_dtype`` as a ``tf.DType``."""
        import tensorflow as tf

        return tf.float64 if self.fitness_dtype == "float64" else tf.float32

    def _initial_conn_count(self) -> int:
        """Most connections an initial genome holds."""
        n = len(initial_pairs(self))
        mode = self.initial_connection
        if mode.startswith("partial"):
            return int(round(n * self.connection_fraction))
        if mode.startswith("fs_neat"):
            return self.num_outputs + (self.num_hidden if mode == "fs_neat_hidden" else 0)
        return n

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "NEATConfig":
        """Builds a config from a dict using neat-python or TensorNEAT names."""
        fields = {f.name for f in dataclasses.fields(cls)}
        out = {}
        for k, v in d.items():
            k2 = TENSORNEAT_ALIASES.get(k, k)
            if k2 not in fields:
                raise ConfigError(f"unknown NEAT hyperparameter {k!r}{_suggestion(k, fields)}")
            out[k2] = v
        return cls(**out)

    @classmethod
    def from_neat_python(cls, path: str, **overrides) -> "NEATConfig":
        """Reads a neat-python 2.0 config file with neat-python's meaning.

        Every key is read from its own section (:data:`NEAT_PYTHON_KEYS`), as
        neat-python parses it: a required key that is missing, a section that
        is missing, a key a section does not read (neat-python refuses those
        in ``[NEAT]``, ``[DefaultSpeciesSet]``, ``[DefaultStagnation]`` and
        ``[DefaultReproduction]`` and ignores them in ``[DefaultGenome]``;
        tfevo refuses them there too, since a misspelt optional key would be
        silently left out), and a value neat-python would not accept (a
        boolean other than ``true``/``false`` in ``[DefaultGenome]``, or
        than ``configparser``'s words in ``[NEAT]``; an unknown
        ``*_init_type``) are :class:`ConfigError` naming the section, key,
        value and what is accepted.  NEATConfig's own fields (``max_nodes``,
        ``max_conns``, ...) may stand in any section; ``overrides`` set
        fields after the file (and may supply a required key it lacks).
        ``max_species`` defaults to ``pop_size`` (neat-python has no cap on
        the species; NEATConfig's default 32 would make genomes join the
        closest species once 32 exist).

        Optional keys the file leaves out take neat-python's defaults
        (:data:`NEAT_PYTHON_DEFAULTS`: e.g. ``elitism = 0``,
        ``species_fitness_func = mean``, ``initial_connection =
        unconnected``); ``single_structural_mutation`` and
        ``structural_mutation_surer = default`` are read as neat-python 2.0
        runs them: a file without ``single_structural_mutation`` runs single
        structural mutations with the surer add-connection (neat-python's
        default for that key is the string ``'false'``, which its mutation
        code tests as true), so write ``single_structural_mutation = false``
        for independent mutations.  neat-python settings tfevo does not
        model raise :class:`ConfigError` unless they are off: a ``random``/``none``
        default (activation, aggregation or enabled; an omitted
        ``activation_default``/``aggregation_default`` is neat-python's
        ``random`` and is read as the only option when there is one), and
        ``time_constant_*`` values that give genomes different time
        constants.  ``seed`` is read by neat-python only: pass
        ``NEAT(config, seed=...)``."""
        cp = configparser.ConfigParser()
        try:
            found = cp.read(path)
        except configparser.Error as e:
            raise ConfigError(f"{path}: not a valid config file ({e})") from None
        if not found:
            raise ConfigError(f"cannot read neat-python config {path!r}")
        fields = {f.name: f for f in dataclasses.fields(cls)}
        home = {k: sec for sec, keys in NEAT_PYTHON_KEYS.items() for k in keys}
        raw: dict[str, str] = {}
        where: dict[str, str] = {}
        for sec in NEAT_PYTHON_KEYS:
            if not cp.has_section(sec):
                raise ConfigError(f"{path}: no [{sec}] section (neat-python requires it, even if empty)")
            for k, v in cp.items(sec):
                if k in NEAT_PYTHON_KEYS[sec] or (k in fields and k not in home):
                    raw[k], where[k] = v.strip(), sec
                elif k in home:
                    raise ConfigError(f"{path}: [{sec}] {k}: neat-python reads {k} in [{home[k]}], not in [{sec}]")
                else:
                    known = set(NEAT_PYTHON_KEYS[sec]) | (set(fields) - set(home))
                    raise ConfigError(f"{path}: [{sec}] {k} is not a key neat-python reads in [{sec}]"
                                      f"{_suggestion(k, known)}")
        for sec, keys in NEAT_PYTHON_KEYS.items():
            for k, required in keys.items():
                if required and k not in raw and k not in overrides:
                    raise ConfigError(f"{path}: [{sec}] {k} is missing (neat-python requires it)")

        def bad(k, v, accepted):
            return ConfigError(f"{path}: [{where[k]}] {k} = {v!r} is not accepted; {accepted}")

        for k, words in _NEAT_PYTHON_BOOLS.items():
            if k in raw and raw[k].lower() not in words:
                raise bad(k, raw[k], "use one of " + ", ".join(words))
        tc = {n: raw.get(f"time_constant_{n}", d) for n, d in _TIME_CONSTANT.items()}
        try:
            tcv = {n: float(v) for n, v in tc.items() if n != "init_type"}
        except ValueError:
            raise ConfigError(f"{path}: [DefaultGenome] time_constant_* must be numbers, got {tc}") from None
        if tcv["init_stdev"] != 0.0 or (tcv["mutate_rate"] > 0 and tcv["mutate_power"] != 0.0):
            raise ConfigError(f"{path}: [DefaultGenome] time_constant_init_stdev = {tc['init_stdev']}, "
                              f"time_constant_mutate_rate = {tc['mutate_rate']}, time_constant_mutate_power = "
                              f"{tc['mutate_power']}: genomes with different time constants (which neat-python's "
                              "compatibility distance reads) are not supported by tfevo.neat; leave the "
                              "time_constant_* keys out")
        raw["single_structural_mutation"] = raw.get("single_structural_mutation", "true").lower()
        surer = raw.pop("structural_mutation_surer", "default").lower()
        if surer in ("1", "yes", "true", "on"):
            raw["structural_mutation_surer"] = "true"
        elif surer in ("0", "no", "false", "off"):
            raw["structural_mutation_surer"] = "false"
        elif surer == "default":  # neat-python: the value of single_structural_mutation
            raw["structural_mutation_surer"] = raw["single_structural_mutation"]
        else:
            raise ConfigError(f"{path}: [DefaultGenome] structural_mutation_surer must be true, false or default "
                              f"(or 1/yes/on, 0/no/off), got {surer!r}")
        for k in ("activation_default", "aggregation_default", "enabled_default"):
            if raw.get(k, "").lower() in ("random", "none"):
                raise ConfigError(f"{path}: [DefaultGenome] {k} = {raw[k]} (a random initial value per gene) is "
                                  "not supported by tfevo.neat; name one value")
        for a in ("activation", "aggregation"):
            if f"{a}_default" not in raw and f"{a}_default" not in overrides and f"{a}_options" in raw:
                opts = raw[f"{a}_options"].split()
                if len(set(opts)) != 1:
                    raise ConfigError(f"{path}: [DefaultGenome] {a}_default is missing, which neat-python reads "
                                      f"as 'random' (a random option per node among {' '.join(opts)}); tfevo.neat "
                                      f"needs one value: add {a}_default = <one of {a}_options>")
                raw[f"{a}_default"] = opts[0]
        for a in ("bias", "response", "weight"):
            k = f"{a}_init_type"
            if k in raw:
                t = raw[k].lower()  # neat-python: 'gauss' or 'normal' in it, else 'uniform' in it
                if "gauss" in t or "normal" in t:
                    raw[k] = "gaussian"
                elif "uniform" in t:
                    raw[k] = "uniform"
                else:
                    raise bad(k, raw[k], "use gaussian (or normal) or uniform")
        vals: dict[str, Any] = {k: v for k, v in NEAT_PYTHON_DEFAULTS.items() if k not in raw}
        for k, v in raw.items():
            if k not in fields:
                continue
            default = fields[k].default
            if isinstance(default, bool):
                if v.lower() not in _CP_BOOL:
                    raise bad(k, v, "use one of " + ", ".join(_CP_BOOL))
                vals[k] = v.lower() in ("true", "1", "yes", "on")
            elif isinstance(default, int):
                vals[k] = _parse_int(k, v, f"{path}: [{where.get(k, 'DefaultGenome')}]")
            elif isinstance(default, float):
                try:
                    vals[k] = float(v)
                except ValueError:
                    raise ConfigError(f"{path}: [{where.get(k, 'DefaultGenome')}] {k} must be a number, "
                                      f"got {v!r}") from None
            elif isinstance(default, tuple):
                vals[k] = tuple(v.split())
            else:
                parts = v.split()
                vals[k] = parts[0] if parts else v
                if k == "initial_connection" and parts and parts[0].startswith("partial"):
                    if len(parts) != 2:
                        raise ConfigError(f"{path}: initial_connection = {v!r} needs a fraction, e.g. "
                                          f"'{parts[0]} 0.5'")
                    try:
                        vals["connection_fraction"] = float(parts[1])
                    except ValueError:
                        raise ConfigError(f"{path}: the fraction of initial_connection must be a number, "
                                          f"got {parts[1]!r}") from None
        vals.update(overrides)
        if "max_species" not in vals and "pop_size" in vals:  # neat-python has no cap on the species
            vals["max_species"] = vals["pop_size"]
        try:
            return cls(**vals)
        except ConfigError as e:  # a value out of range: name the file and the key's section
            msg = str(e)
            field = msg.split(" ", 1)[0].rstrip(":")
            if field == "connection_fraction" and "connection_fraction" in vals and field not in overrides:
                field, msg = "initial_connection", f"initial_connection = {raw['initial_connection']}: {msg}"
            sec = where.get(field) if field not in overrides else None
            slots = field.split("=")[0]
            if slots in ("max_nodes", "max_conns") and slots not in vals:  # tfevo's slots, not a neat-python key
                msg += (f"; neat-python has no such limit: give tfevo's {slots} (slots per genome) as "
                        f"from_neat_python(path, {slots}=...) or a '{slots} = ...' line in the file")
            raise ConfigError(f"{path}: [{sec}] {msg}" if sec else f"{path}: {msg}") from None


def initial_pairs(cfg: NEATConfig) -> list[tuple[int, int]]:
    """Every connection an initial genome of ``cfg`` may hold, in
    neat-python's order (inputs->hidden, hidden->outputs, inputs->outputs,
    then the self-connections of recurrent genomes); the pair at position
    ``m`` carries innovation marker ``m``.  Which of them a genome holds is
    :func:`tfevo.neat.genome.initial_connections`' choice."""
    I, O, H = cfg.num_inputs, cfg.num_outputs, cfg.num_hidden
    mode = cfg.initial_connection
    if mode in ("unconnected", "none"):
        return []
    inputs, outputs, hidden = range(I), range(I, I + O), range(I + O, I + O + H)
    ih = [(i, h) for i in inputs for h in hidden]
    ho = [(h, o) for h in hidden for o in outputs]
    io = [(i, o) for i in inputs for o in outputs]
    if mode.startswith("fs_neat"):
        return io + (ih if mode == "fs_neat_hidden" else [])
    direct = mode.endswith("_direct") or H == 0
    selfs = [] if cfg.feed_forward else [(n, n) for n in list(outputs) + list(hidden)]
    return ih + ho + (io if direct else []) + selfs



_INF = float("inf")
_PROB = (0.0, 1.0, False, False)
# field -> (lowest, highest, lowest excluded, highest excluded) for every numeric field
# (neat-python's meaning); integer fields are the int-typed defaults
_RANGES = {
    "num_inputs": (1, _INF, False, True), "num_outputs": (1, _INF, False, True),
    "pop_size": (2, _INF, False, True), "max_nodes": (1, _INF, False, True), "max_conns": (1, _INF, False, True),
    "num_hidden": (0, _INF, False, True), "connection_fraction": _PROB,
    "compatibility_disjoint_coefficient": (0.0, _INF, False, True),
    "compatibility_weight_coefficient": (0.0, _INF, False, True),
    "compatibility_threshold": (0.0, _INF, True, True), "max_species": (1, _INF, False, True),
    "max_stagnation": (1, _INF, False, True), "species_elitism": (0, _INF, False, True),
    "elitism": (0, _INF, False, True), "survival_threshold": (0.0, 1.0, True, False),
    "min_species_size": (1, _INF, False, True), "spawn_number_change_rate": _PROB,
    "interspecies_crossover_prob": _PROB, "crossover_prob": _PROB,
    "node_add_prob": _PROB, "node_delete_prob": _PROB, "conn_add_prob": _PROB, "conn_delete_prob": _PROB,
    "enabled_mutate_rate": _PROB, "enabled_rate_to_true_add": (0.0, _INF, False, True),
    "enabled_rate_to_false_add": (0.0, _INF, False, True), "activation_mutate_rate": _PROB,
    "aggregation_mutate_rate": _PROB,
    "fitness_threshold": (-_INF, _INF, False, False),
}
for _a in ("bias", "response", "weight"):
    _RANGES.update({f"{_a}_init_mean": (-_INF, _INF, True, True), f"{_a}_init_stdev": (0.0, _INF, False, True),
                    f"{_a}_max_value": (-_INF, _INF, True, True), f"{_a}_min_value": (-_INF, _INF, True, True),
                    f"{_a}_mutate_power": (0.0, _INF, False, True), f"{_a}_mutate_rate": _PROB,
                    f"{_a}_replace_rate": _PROB})


def _range_text(lo, hi, lo_open, hi_open) -> str:
    if hi == _INF and hi_open and lo != -_INF:
        return f"{'>' if lo_open else '>='} {lo}"
    if lo == -_INF and hi == _INF:
        return "finite" if lo_open else "a number (not NaN)"
    return f"in {'(' if lo_open else '['}{lo}, {hi}{')' if hi_open else ']'}"


def _check_fields(cfg) -> None:
    """Types and ranges of every field (bool fields bool, int fields integers,
    float fields real numbers in ``_RANGES``); integral floats of int fields
    become ints."""
    import numbers

    for f in dataclasses.fields(cfg):
        v = getattr(cfg, f.name)
        kind = type(f.default)
        if kind is bool:
            if not isinstance(v, (bool, np.bool_)):
                raise ConfigError(f"{f.name} must be True or False, got {v!r}")
            setattr(cfg, f.name, bool(v))
            continue
        if kind not in (int, float):
            continue
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Real):
            what = "an integer" if kind is int else "a number"
            raise ConfigError(f"{f.name} must be {what}, got {v!r} ({type(v).__name__})")
        if kind is int:
            if isinstance(v, numbers.Integral):
                v = int(v)
            elif float(v).is_integer():
                v = int(v)
            else:
                raise ConfigError(f"{f.name} must be an integer, got {v!r}")
        else:
            v = float(v)
        lo, hi, lo_open, hi_open = _RANGES[f.name]
        ok = v == v and (v > lo if lo_open else v >= lo) and (v < hi if hi_open else v <= hi)
        if not ok:
            raise ConfigError(f"{f.name} must be {_range_text(lo, hi, lo_open, hi_open)}, got {v!r}")
        setattr(cfg, f.name, v)


def _parse_int(key: str, text: str, where: str) -> int:
    try:
        x = float(text)
    except ValueError:
        raise ConfigError(f"{where} {key} must be an integer, got {text!r}") from None
    if not x.is_integer():
        raise ConfigError(f"{where} {key} must be an integer, got {text!r}")
    return int(x)


def _as_names(x) -> list[str]:
    if isinstance(x, str):
        return x.split()
    return [str(n) for n in x]


def _suggestion(name: str, fields) -> str:
    """`` (did you mean 'x'?)`` for a misspelt field name, else ``""``."""
    import difflib

    close = difflib.get_close_matches(name, sorted(fields), n=2, cutoff=0.6)
    return f" (did you mean {' or '.join(map(repr, close))}?)" if close else ""


def _checked_init(init):
    """``NEATConfig(...)`` with an unknown keyword raises a :class:`ConfigError` with the
    closest field names (TensorNEAT's names are pointed to their NEATConfig field)."""
    import functools

    fields = {f.name for f in dataclasses.fields(NEATConfig)}

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        for k in kwargs:
            if k not in fields:
                alias = TENSORNEAT_ALIASES.get(k)
                hint = f" (NEATConfig calls it {alias!r})" if alias in fields else _suggestion(k, fields)
                raise ConfigError(f"NEATConfig: unknown hyperparameter {k!r}{hint}")
        init(self, *args, **kwargs)

    return __init__


NEATConfig.__init__ = _checked_init(NEATConfig.__init__)
