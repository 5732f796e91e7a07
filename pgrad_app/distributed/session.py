"""Ray sessions for pgrad's commands: import Ray or name the extra, connect to a cluster or
start (and stop) a local instance, and the runtime env that puts this checkout on the path of
pgrad's actors and tasks (:mod:`pgrad_app.distributed.workers`,
:mod:`pgrad_app.experiments.sweep.launch`)."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from pgrad_app.errors import UserError, one_line

ROOT = Path(__file__).resolve().parents[1]  # the folder holding pgrad/, agents/, pgrad_app/
INSTALL_HINT = "pip install 'pgrad[ray]'"
NICENESS_VAR = "RAY_worker_niceness"


def import_ray(what: str = "--workers"):
    """The ``ray`` module, or a :class:`UserError` naming the extra to install."""
    try:
        import ray
    except ImportError:
        raise UserError(f"{what} needs Ray, which is not installed: {INSTALL_HINT}") from None
    return ray


#: Seconds to wait for a TCP connection to ``--ray-address`` before Ray is asked to connect.
PROBE_SECONDS = 5.0


def probe(address: str) -> None:
    """Refuses ``HOST:PORT`` (or ``ray://HOST:PORT``) where nothing accepts a connection: Ray
    itself retries such an address for minutes, deaf to SIGTERM. ``auto`` and addresses without
    a port are left to Ray.

    Raises:
      UserError: naming the address and the socket error.
    """
    import socket

    host, sep, port = address.split("://", 1)[-1].rpartition(":")
    if not sep or not port.isdigit() or not host:
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=PROBE_SECONDS).close()
    except OSError as err:
        why = "timed out" if isinstance(err, TimeoutError) else (err.strerror or str(err))
        raise UserError(f"cannot connect to the Ray cluster at {address}: {host}:{port} does not "
                        f"accept connections ({why}); is the cluster running (ray start "
                        "--head)?") from None


@contextlib.contextmanager
def ray_session(address: str | None = None, num_cpus: int | None = None,
                what: str = "--workers") -> Iterator[Any]:
    """Yields the ``ray`` module with a connection: to ``address`` (a running cluster; ``auto``
    finds a local one) or to a local instance started here (``num_cpus``: default the cores)
    and shut down on exit. A process already connected keeps its connection (and it is left
    open). No dashboard, no worker logs on this terminal."""
    ray = import_ray(what)
    if ray.is_initialized():
        yield ray
        return
    kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False,
                              "logging_level": "ERROR", "configure_logging": True}
    if address:
        probe(address)  # before ray.init, which would retry a dead port for minutes
        kwargs["address"] = address
    else:
        kwargs["num_cpus"] = num_cpus or os.cpu_count() or 1
    # Ray runs its workers at nice 15 by default; the learner waits on them every update, so
    # a local instance runs them at the learner's priority.
    saved = os.environ.get(NICENESS_VAR)
    if not address:
        os.environ.setdefault(NICENESS_VAR, "0")
    try:
        ray.init(**kwargs)
    except (ConnectionError, RuntimeError, ValueError) as err:
        where = f"the Ray cluster at {address}" if address else "a local Ray instance"
        raise UserError(f"cannot connect to {where}: {one_line(err)}") from None
    finally:
        if saved is None:
            os.environ.pop(NICENESS_VAR, None)
    try:
        yield ray
    finally:
        ray.shutdown()


def start_with(distribute: Callable[..., Any], agent, workers: int, address: str | None = None,
               env_spec: Any = None, num_cpus: int | None = None) -> contextlib.ExitStack:
    """:func:`ray_session` + ``distribute(agent, workers, env_spec)`` for a script: returns what
    to ``close()`` after ``agent.close()`` (shuts down the local Ray instance it started)."""
    stack = contextlib.ExitStack()
    try:
        stack.enter_context(ray_session(address, num_cpus or max(workers, os.cpu_count() or 1)))
        distribute(agent, workers, env_spec)
    except BaseException:
        stack.close()
        raise
    return stack


def wait_for_cpus(workers: int, patience_s: float = 10.0) -> None:
    """Wait until the connected Ray cluster has ``workers`` free CPUs, or raise one line.

    Actors that cannot be placed would wait forever; actors just stopped (a previous
    ``distribute`` in this process) give their CPUs back within a few seconds.

    Raises:
      UserError: still fewer free CPUs than ``workers`` after ``patience_s`` seconds.
    """
    import ray

    deadline = time.monotonic() + patience_s
    while (free := ray.available_resources().get("CPU", 0.0)) < workers \
            and time.monotonic() < deadline:
        time.sleep(0.2)
    if free < workers:
        raise UserError(f"--workers {workers} needs {workers} free CPUs in the Ray cluster; it "
                        f"has {free:g} (of {ray.cluster_resources().get('CPU', 0.0):g}).")


def worker_runtime_env() -> dict:
    """Ray ``runtime_env`` of pgrad's actors and tasks: this checkout first on their path (as
    on the driver's; a folder a node lacks is skipped there, which then uses its install)."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    return {"env_vars": {"PYTHONPATH": path}}
