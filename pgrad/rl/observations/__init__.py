"""Observations: a Gymnasium observation space -> what the policy reads (``spaces``: layouts,
flat float32 vectors, dict parts, action masks' keys), frame buffers for stacked image
observations, and the running observation, reward and value normalisers.
"""
