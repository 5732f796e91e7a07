"""Gradient tools: custom-gradient ops and layers, gradient checking, per-sample training in
Keras ``fit()`` (PerSampleModel), per-step gradient diagnostics and observation attacks.
"""
