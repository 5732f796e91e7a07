"""The Keras models a policy is made of: observation encoders (MLP, CNNs, a causal
Transformer), recurrent cores, the actor-critic networks and their Dense stacks.
"""
