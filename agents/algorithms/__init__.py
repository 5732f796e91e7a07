"""The algorithms: each a config plus a chain of transforms (and optional parts) on the one
actor-critic agent -- REINFORCE, A2C, PPO, NPG, IMPALA, APPO. Their configs and the registry
that finds them by name are in :mod:`agents.catalog`.
"""
