"""Acting: the agent's policy as the rollout, ``predict`` and rollout workers use it, its public
acting methods, and opt-in adversarial acting during training.
"""
