"""One run directory: its layout, lock and files, the logs, checkpoints and resume, the trainer
over ``agent.learn``, tracking, and evaluation of a run. Imports config and the errors below it."""
