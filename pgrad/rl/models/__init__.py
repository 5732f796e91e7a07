"""The Keras models a policy is made of: encoders, recurrent cores, heads.
"""
