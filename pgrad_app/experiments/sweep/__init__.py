"""Sweeps on Ray: the benchmark's runs times a grid of ``--set`` values, each trial a run directory
and a result in the benchmark's schema (planned in ``plan``, run in ``launch``)."""
