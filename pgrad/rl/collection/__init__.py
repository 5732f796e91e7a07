"""Collection: rollouts from vector envs into immutable time-major ``Trajectory`` batches
(``[T, B]``), the episodes they hold, the action masks read from the envs, and the finite-value
check on every step collected.
"""
