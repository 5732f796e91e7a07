"""The compiled update and its parts: packing a rollout into the call's inputs, tracing and
calling it, the minibatch loops, one minibatch step around the engine's policy gradient, the
loss terms as pure functions, and opt-in per-step diagnostics.
"""

# Its modules import TensorFlow: through pgrad first, so it loads without its start-up lines.
import pgrad._quiet_tf  # noqa: F401,E402
