"""Populations: many seeds of one agent trained in one process, each exactly its own run.

:mod:`agents.population.members` holds the population (its members, checks and rounds);
:mod:`agents.population.loop` its training loop (each member's own ``agents.learning.Loop``,
driven in rounds); :mod:`agents.population.exports` the members' policy exports with one
trace. See docs/populations.md.
"""

from agents.population.members import (
    SUPPORTED,
    Population,
    Round,
    available_mb,
    build_members,
    check_memory,
    check_seeds,
    check_supported,
)

__all__ = ["SUPPORTED", "Population", "Round", "available_mb", "build_members", "check_memory",
           "check_seeds", "check_supported"]
