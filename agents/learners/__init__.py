"""Agents with a step of their own: IMPALA and APPO's actor-learner (trajectories from a
source of actors, V-trace targets). Their declarations: :mod:`agents.algorithms.impala`.
"""

# Its modules import TensorFlow: through pgrad first, so it loads without its start-up lines.
import pgrad._quiet_tf  # noqa: F401,E402
