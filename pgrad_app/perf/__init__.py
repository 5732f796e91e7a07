"""pgrad's speed figures (``python scripts/bench.py``), one module per family of figures; each a
ratio of two things measured side by side. Imports run, distributed, config below it.

- :mod:`~pgrad_app.perf.common`: timing (interleaved calls, alternating runs in fresh
  processes, ratios), peak memory, the result record of a figure and the goal table;
- :mod:`~pgrad_app.perf.gradients`: per-step, fused, clipped, jacobian and diagnostics
  gradients against one batched gradient;
- :mod:`~pgrad_app.perf.collection`: rollout collection against bare env stepping, and the
  vector-env backends;
- :mod:`~pgrad_app.perf.speed`: A2C training speed end to end, and the fixed cost per update;
- :mod:`~pgrad_app.perf.scaling`: A2C collection on Ray rollout workers;
- :mod:`~pgrad_app.perf.driver`: the table of figures (the command line is
  :mod:`pgrad_app.cli.bench`, one process per figure);
- :mod:`~pgrad_app.perf.peers`: pgrad beside other projects (Stable-Baselines3, sb3-contrib,
  TRL, BenchMARL), each side in its own process;
- :mod:`~pgrad_app.perf.population`: ten seeds as one population against ``pgrad-sweep``;
- :mod:`~pgrad_app.perf.slow_env`: CartPoles made 1 ms slower, for the scaling figures.
"""
