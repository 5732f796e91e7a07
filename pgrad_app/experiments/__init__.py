"""Learning experiments over many runs: the benchmark (plan, launch, one run per process, report,
statistics), the Ray sweep and the learning targets. Imports run, distributed, config below it."""
