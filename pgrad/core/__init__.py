"""The gradient core: per-step gradients and norms, layer taps, applying updates, errors.

Everything else in pgrad is built on these; they import nothing from pgrad's other layers.
"""
