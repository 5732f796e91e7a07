"""The application layer: run directories, settings, plug-ins, logs, training and evaluation
commands, tracking, sweeps. It drives ``agents`` and ``pgrad``; nothing below imports it.
"""
