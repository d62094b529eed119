"""An unknown keyword argument to a NEAT, HyperNEAT or MAP-Elites class is a ConfigError that names
the class, the closest accepted argument and all of them (not Python's bare TypeError)."""
import pytest

from tfevo.core import ConfigError
from tfevo.neat import NEAT, XOR, HyperNEAT, HyperNEATProblem
from tfevo.qd import (CVTArchive, GaussianEmitter, GridArchive, IsoLineEmitter, MAPElites,
                      PolynomialMutationEmitter)

CASES = [
    (NEAT, "sed", "seed"),
    (HyperNEAT, "max_weigth", "max_weight"),
    (HyperNEATProblem, "max_fitnes", "max_fitness"),
    (MAPElites, "emiters", "emitters"),
    (GridArchive, "dim", "dims"),
    (CVTArchive, "cell", "cells"),
    (GaussianEmitter, "sigm", "sigma"),
    (IsoLineEmitter, "iso_sigm", "iso_sigma"),
    (PolynomialMutationEmitter, "etaa", "eta"),
]


@pytest.mark.parametrize("cls, wrong, right", CASES, ids=[c[0].__name__ for c in CASES])
def test_unknown_keyword_is_a_config_error_with_the_closest_name(cls, wrong, right):
    import inspect

    assert right in inspect.signature(cls.__init__).parameters, (cls, right)
    with pytest.raises(ConfigError) as e:
        cls(**{wrong: 1})
    msg = str(e.value)
    assert msg.startswith(cls.__name__ + ":") and repr(wrong) in msg and f"did you mean {right!r}" in msg
    assert "accepts:" in msg


def test_known_arguments_still_construct():
    cfg = XOR().config(pop_size=10)
    assert NEAT(cfg, seed=3).config.pop_size == 10
