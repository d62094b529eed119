"""tfevo.neat -- tensorized NEAT, CPPN and HyperNEAT.

Genomes are NaN-padded tensors (``nodes [P, N_max, 5]``, ``conns [P, C_max,
5]``); :class:`NEAT` evolves them with ask/tell; :mod:`tfevo.neat.network` runs
the whole population; problems, policies, HyperNEAT and export build on that.
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from tfevo.neat.config import NEATConfig, TENSORNEAT_ALIASES  # noqa: E402
from tfevo.neat.functions import register_activation, register_aggregation  # noqa: E402
from tfevo.neat.genome import Population  # noqa: E402
from tfevo.neat.neat import NEAT  # noqa: E402
from tfevo.neat.network import Network, forward, recurrent_step, transform, initial_state  # noqa: E402
from tfevo.neat.problems import XOR, XOR3, FunctionFit, Multiplexer, Parity, SupervisedProblem  # noqa: E402
from tfevo.neat.policy import ControlProblem, NEATPolicy  # noqa: E402
from tfevo.neat.hyperneat import HyperNEAT, HyperNEATProblem, Substrate, cppn_config, query_cppn  # noqa: E402
from tfevo.neat.export import NEATNetworkLayer, draw, to_keras, to_neat_python, to_sympy  # noqa: E402

__all__ = ["NEATConfig", "TENSORNEAT_ALIASES", "NEAT", "Population", "Network", "transform", "forward",
           "recurrent_step", "initial_state", "register_activation", "register_aggregation",
           "XOR", "XOR3", "Parity", "Multiplexer", "FunctionFit", "SupervisedProblem", "ControlProblem", "NEATPolicy",
           "HyperNEAT", "HyperNEATProblem", "Substrate", "cppn_config", "query_cppn", "NEATNetworkLayer",
           "draw", "to_keras", "to_neat_python", "to_sympy"]
