"""Looking inside training without changing it: the batch and per-step weights each update sees
(:mod:`agents.inspection.update_hook`)."""

# Its modules import TensorFlow: through pgrad first, so it loads without its start-up lines.
import pgrad._quiet_tf  # noqa: F401,E402
