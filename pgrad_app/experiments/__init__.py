"""Learning experiments over many runs: the benchmark (``benchmark/``), sweeps on Ray (``sweep/``)
and hyperparameter search (``tuning/``). Imports run, distributed and config below it."""
