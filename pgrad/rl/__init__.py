"""RL building blocks: returns and GAE (pure functions), action heads, observation spaces,
normalisers, rollouts into time-major trajectories, networks, the numpy policy, export, evaluation.
"""
