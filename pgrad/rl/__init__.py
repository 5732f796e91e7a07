"""RL building blocks: returns and GAE (pure functions), action heads, observation spaces and
encoders, normalisers, rollouts into time-major trajectories, networks, acting (the numpy
policy, compiled calls for CNNs), export, evaluation.
"""
