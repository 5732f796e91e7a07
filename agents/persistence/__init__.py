"""What an agent keeps on disk: ``agent.save`` / ``agents.load``, checkpoints of a running
agent, the exported policy, and ``best/`` (the best policy so far with the row that chose it).
"""

# Its modules import TensorFlow: through pgrad first, so it loads without its start-up lines.
import pgrad._quiet_tf  # noqa: F401,E402
