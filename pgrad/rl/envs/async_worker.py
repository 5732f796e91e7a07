"""The subprocess worker of ``vector_mode="async"``: gymnasium's, with the env's construction inside
its error reporting.

Gymnasium's ``AsyncVectorEnv`` worker builds its env before its ``try``: a constructor that fails
only in the subprocess (a licence check, a display, a device the parent holds) prints the worker's
traceback to stderr and leaves the parent a bare ``ConnectionResetError``. :func:`guarded_worker`
builds the env first; if that raises, it puts a :class:`ChildEnvError` (the exception's type name
and text, plain strings, so it always unpickles in the parent) on gymnasium's error queue, answers
the parent's first command with a failure -- gymnasium's own protocol, so the parent's constructor
raises it -- and exits without a traceback (SIGTERM, which the parent then sends, ends it
quietly). Once the env is built it runs gymnasium's worker
unchanged.
"""

from __future__ import annotations

import signal
from multiprocessing.connection import Connection
from typing import Any

try:  # gymnasium's private worker; its trailing arguments changed across 1.x, passed through
    from gymnasium.vector.async_vector_env import _async_worker
except ImportError:  # pragma: no cover - another gymnasium layout: its own worker is used
    _async_worker = None  # type: ignore[assignment]

#: The start of the messages gymnasium's ``logger.error`` warns with (after a colour code) when a
#: worker reports an error; :func:`pgrad.rl.envs.vector.make_vec_env` silences them while it builds
# the
#: envs, since it raises the error itself in one line.
WORKER_LOG = r"(\x1b\[[0-9;]*m)?ERROR: "


class ChildEnvError(RuntimeError):
    """An env's constructor raised in an async env's subprocess: ``args`` are the exception's
    type name and text."""

    @property
    def type_name(self) -> str:
        return str(self.args[0][0]) if self.args and isinstance(self.args[0], tuple) else ""

    @property
    def text(self) -> str:
        return str(self.args[0][1]) if self.args and isinstance(self.args[0], tuple) else ""


def guarded_worker(index: int, env_fn: Any, pipe: Connection, parent_pipe: Connection,
                   shared_memory: Any, error_queue: Any, *rest: Any) -> None:
    """``AsyncVectorEnv(worker=...)``: gymnasium's ``_async_worker`` with ``env_fn()`` guarded
    (same arguments; ``rest`` -- ``autoreset_mode``, ``semaphore`` in gymnasium 1.4 -- passed
    through as they come)."""
    try:
        env = env_fn()
    except Exception as err:  # noqa: BLE001 -- any constructor failure goes to the parent
        # The parent ends this process with SIGTERM once it has the error; a handler inherited
        # from it (the commands' start-up one raises) would print a traceback from here.
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        parent_pipe.close()
        # gymnasium's parent raises ``exctype(value)``: ChildEnvError((type name, text)).
        error_queue.put((index, ChildEnvError, (type(err).__name__, str(err)), ""))
        try:
            pipe.recv()  # the parent's first command (its space check) ...
            pipe.send((None, False))  # ... answered "failed": it then reads the queue
        except (EOFError, OSError):
            pass  # the parent is gone already
        finally:
            pipe.close()
        return
    _async_worker(index, lambda: env, pipe, parent_pipe, shared_memory, error_queue, *rest)
