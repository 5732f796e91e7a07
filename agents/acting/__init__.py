"""Acting: the agent's policy as the rollout, ``predict`` and rollout workers use it, its public
acting methods, and opt-in adversarial acting during training.
"""

# Its modules import TensorFlow: through pgrad first, so it loads without its start-up lines.
import pgrad._quiet_tf  # noqa: F401,E402
