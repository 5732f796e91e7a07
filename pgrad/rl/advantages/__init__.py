"""Advantages as pure functions: discounted and lambda returns, GAE, V-trace (``returns``) and
group-relative advantages for sequence tasks (``groups``: GRPO's mean/std, RLOO's leave-one-out,
per-token process baselines).
"""
