"""Comparing algorithms over many runs with rliable (``pgrad-compare``): runs found and grouped,
scores normalised where published references exist, statistics, figures and a summary."""
