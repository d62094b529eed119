"""Budgets of the examples: ``TFEVO_EXAMPLE_TOY=1`` shrinks every example to a few
seconds so that the test suite runs each of them as a script; unset, they run at
the budget their docstring describes."""

import os

TOY = os.environ.get("TFEVO_EXAMPLE_TOY", "") not in ("", "0")


def budget(full, toy):
    """``toy`` under ``TFEVO_EXAMPLE_TOY=1``, else ``full``."""
    return toy if TOY else full
