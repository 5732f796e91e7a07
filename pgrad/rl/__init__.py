"""RL building blocks, one room per job: advantages (returns, GAE, V-trace, group-relative
advantages: pure functions), distributions (action heads), observations (spaces, normalisers,
frames), envs, models (encoders and networks), acting (the numpy policy, compiled actors),
collection (rollouts into time-major trajectories), tokens (sequence tasks), multiagent,
storage, export, evaluation.
"""
