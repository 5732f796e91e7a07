"""The gradient core: per-step gradients and norms, Dense-layer taps, applying updates, errors.

Everything else in pgrad is built on these; they import nothing from pgrad's other layers.
"""
