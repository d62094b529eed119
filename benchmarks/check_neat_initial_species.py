"""Initial species of a neat-python config file with num_hidden > 0: neat-python
2.0 against tfevo.neat (NEATConfig.from_neat_python), seeds 0..S-1 on each side.

    python benchmarks/check_neat_initial_species.py [--seeds 10] [--hidden 2] [--max-species 0 32]

Prints, per setting, the species counts of the speciated initial population
(neat-python: Population(config).species after its generation-0 speciation;
tfevo: NEAT.num_species after the first tell with all-zero fitness, which
speciates the initial population and removes nothing at generation 0)."""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))


def config_text(hidden: int, mode: str) -> str:
    text = open(os.path.join(os.path.dirname(__file__), "configs", "neat_parity3.cfg")).read()
    return (text.replace("num_hidden              = 0", f"num_hidden = {hidden}")
            .replace("initial_connection      = full", f"initial_connection = {mode}"))


def neat_python_species(path: str, seed: int) -> int:
    import contextlib
    import io

    import neat

    random.seed(seed)
    cfg = neat.Config(neat.DefaultGenome, neat.DefaultReproduction, neat.DefaultSpeciesSet,
                      neat.DefaultStagnation, path)
    with contextlib.redirect_stderr(io.StringIO()):  # its 'full with hidden nodes' warning per genome
        pop = neat.Population(cfg)
    return len(pop.species.species)


def tfevo_species(path: str, seed: int, max_species: int) -> int:
    from tfevo.neat import NEAT, NEATConfig

    cfg = NEATConfig.from_neat_python(path, **({"max_species": max_species} if max_species else {}))
    algo = NEAT(cfg, seed=seed)
    algo.tell(algo.ask(), np.zeros(cfg.pop_size))
    return algo.num_species


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--hidden", type=int, default=2)
    ap.add_argument("--modes", nargs="+", default=["full", "full_direct", "partial_direct 0.5"])
    ap.add_argument("--max-species", type=int, nargs="+", default=[0, 32],
                    help="tfevo species slots; 0: from_neat_python's default (pop_size)")
    a = ap.parse_args()
    for mode in a.modes:
        fd, path = tempfile.mkstemp(suffix=".cfg")
        with os.fdopen(fd, "w") as f:
            f.write(config_text(a.hidden, mode))
        from scipy.stats import mannwhitneyu

        npy = [neat_python_species(path, s) for s in range(a.seeds)]
        print(f"hidden {a.hidden} {mode!r}: neat-python species {npy} median {np.median(npy)}")
        for ms in a.max_species:
            tf_ = [tfevo_species(path, s, ms) for s in range(a.seeds)]
            name = f"max_species={ms}" if ms else "max_species=pop_size (default)"
            print(f"hidden {a.hidden} {mode!r}: tfevo {name} species {tf_} median {np.median(tf_)}, "
                  f"Mann-Whitney p vs neat-python {mannwhitneyu(tf_, npy).pvalue:.2f}")
        os.unlink(path)


if __name__ == "__main__":
    main()
