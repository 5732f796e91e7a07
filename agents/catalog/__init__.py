"""The catalogue of agents, below the agents themselves: every algorithm's config class (no
TensorFlow), the registry that finds an agent by name, and Stable-Baselines3's names mapped onto
pgrad's.
"""
