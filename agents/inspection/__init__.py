"""Looking inside training without changing it: the batch and per-step weights each update sees
(:mod:`agents.inspection.update_hook`)."""
