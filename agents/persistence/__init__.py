"""What an agent keeps on disk: ``agent.save`` / ``agents.load``, checkpoints of a running
agent, the exported policy, and ``best/`` (the best policy so far with the row that chose it).
"""
