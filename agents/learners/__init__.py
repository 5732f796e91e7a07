"""Agents with a step of their own: IMPALA and APPO's actor-learner (trajectories from a
source of actors, V-trace targets). Their declarations: :mod:`agents.algorithms.impala`.
"""
