"""The application layer: run directories, settings, plug-ins, logs, training and evaluation
commands, tracking, sweeps. It drives ``agents`` and ``pgrad``; nothing below imports it.

From Python, ``RunDirectory`` (a training callback) writes the run directory ``pgrad-train``
writes: ``agent.learn(N, callbacks=pgrad_app.RunDirectory("runs/x"))``.
"""


def __getattr__(name: str):
    if name == "RunDirectory":  # imported on use: it loads TensorFlow and the agents
        from pgrad_app.run.recorder import RunDirectory

        return RunDirectory
    raise AttributeError(f"module 'pgrad_app' has no attribute {name!r}")
