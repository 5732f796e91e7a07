"""pgrad's performance figures (``python scripts/bench.py``), one module per family of figures.

- :mod:`~pgrad_app.bench.common`: timing (interleaved rounds, ratios), peak memory, the result
  record of a figure and the goal table;
- :mod:`~pgrad_app.bench.gradients`: per-step, fused, clipped, jacobian and diagnostics
  gradients against one batched gradient;
- :mod:`~pgrad_app.bench.collection`: rollout collection against bare env stepping, and the
  vector-env backends;
- :mod:`~pgrad_app.bench.speed`: A2C training speed end to end, and the fixed cost per update;
- :mod:`~pgrad_app.bench.sb3`: training runs side by side with Stable-Baselines3;
- :mod:`~pgrad_app.bench.scaling`: A2C collection on Ray rollout workers;
- :mod:`~pgrad_app.bench.driver`: the figure table, the command line, one process per figure.

Nothing is imported here: ``pgrad_app.quiet`` must come before TensorFlow (the driver does it).
"""
