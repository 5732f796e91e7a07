"""Silence TensorFlow's start-up noise: what the entry points do before TensorFlow is imported.

Importing this module changes nothing; :func:`silence` does, and only the entry points call it
(``scripts/*.py``, the installed commands in :mod:`pgrad_app.cli.entry`, the child processes
pgrad starts), before anything imports TensorFlow -- the library and every other module of the
application change nothing global. TensorFlow's C++ runtime writes "Could not find cuda
drivers" and absl's "All log messages before absl::InitializeLog()" straight to file descriptor
2 while it loads, before ``TF_CPP_MIN_LOG_LEVEL`` is read, so fd 2 points at /dev/null for the
duration of the import only. Python-level errors still surface: they are raised after fd 2 is
restored. Set ``PGRAD_TF_LOGS=1`` to see everything TensorFlow says. (A library import,
``import pgrad`` in a user's script, filters the same start-up lines instead of discarding fd 2:
``pgrad._quiet_tf``; it changes nothing global. Here the commands own their process.)

Python warnings (e.g. Gymnasium's env checker) are printed as one ``warning: ...`` line each,
without the source line and colour codes, like pgrad's own warnings.

``PGRAD_REPRODUCIBLE=1`` (``--reproducible``) is the other setting that must be made before
TensorFlow's import, so it is made here too: oneDNN's kernels off, op determinism on.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import re
import sys
import warnings

_NOISY = r"(tensorflow|keras|tf_keras|tensorflow_probability|absl|google|gymnasium)"
_done = False


def verbose() -> bool:
    """Whether the user asked to see TensorFlow's own logs (``PGRAD_TF_LOGS=1``)."""
    return os.environ.get("PGRAD_TF_LOGS", "") not in ("", "0")


#: The environment variable ``--reproducible`` sets (child processes inherit it).
REPRODUCIBLE = "PGRAD_REPRODUCIBLE"


def reproducible() -> bool:
    """Whether runs in this process must repeat bit for bit (``PGRAD_REPRODUCIBLE=1``,
    ``--reproducible``)."""
    return os.environ.get(REPRODUCIBLE, "") not in ("", "0")


def _make_reproducible() -> None:
    """Before TensorFlow's import: its oneDNN CPU kernels off, then op determinism on.

    With oneDNN's kernels (TensorFlow's default on x86) the same update on the same inputs and
    weights can differ in a float32 sum's last bit from call to call and from process to process
    (measured Dec 4: A2C on HalfCheetah-v5, 1 env x 5 steps, two outcomes of one update in 12
    calls, one or two threads alike; runs of one seed drift apart from about the 15th update).
    With them off the same seed gives the same run (tested), at no cost for MLP policies
    (measured) but slower convolutions (docs/performance.md). ``enable_op_determinism`` is
    TensorFlow's own switch: deterministic kernels where it has them (GPU included), an error
    naming the op where it has none.
    """
    if "tensorflow" in sys.modules:
        warnings.warn("--reproducible / PGRAD_REPRODUCIBLE=1 came after TensorFlow was imported: "
                      "its oneDNN kernels stay on, so runs may still differ in their last bits; "
                      "set it before importing TensorFlow.", stacklevel=3)
    else:
        os.environ["TF_ENABLE_ONEDNN_OPTS"] = "0"


def one_line_warning(message, category, filename, lineno, line=None) -> str:
    """``warnings.formatwarning`` for the commands: ``warning: <message>`` on one line."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(message)).strip()
    text = text.removeprefix("WARN: ")
    return f"warning: {' '.join(text.split())}\n"


def silence(keras_extras: bool = True) -> None:
    """Quiets TensorFlow and its neighbours for this process (idempotent); imports TensorFlow.

    ``keras_extras=False`` (the commands' own processes, :mod:`pgrad_app.cli.entry`) imports
    TensorFlow without the pandas and IPython that Keras loads for optional features
    (:func:`_without_keras_extras`): ~0.2-0.3 s of CPU and ~390 modules less per process.

    Also selects TensorFlow's pooled (BFC) CPU allocator for the processes the commands start:
    with the default malloc-based one, every large tensor (per-step gradients are ``[T,
    params]``: ~38 MB for a 64-64 MLP at T=2048) is a fresh mmap whose page faults cost more
    than computing it (docs/performance.md). It has effect only before TensorFlow is imported.
    """
    global _done
    if _done:
        return
    _done = True
    quiet = not verbose()
    if quiet:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
        warnings.filterwarnings("ignore", category=DeprecationWarning, module=_NOISY + r".*")
        warnings.filterwarnings("ignore", module=r"tensorflow_probability.*")
        warnings.filterwarnings("ignore", module=r"tf_keras.*")
        warnings.formatwarning = one_line_warning
    os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")
    if reproducible():
        _make_reproducible()
    _import_probability_first()
    skipped = contextlib.nullcontext() if keras_extras else _without_keras_extras()
    with _collector_paused(), skipped:
        _import_tensorflow_quietly(quiet)
    if reproducible():
        import tensorflow as tf

        tf.config.experimental.enable_op_determinism()
    if quiet:
        import tensorflow as tf

        tf.get_logger().setLevel(logging.ERROR)
        try:
            import absl.logging

            absl.logging.set_verbosity(absl.logging.ERROR)
        except ImportError:  # pragma: no cover
            pass


@contextlib.contextmanager
def _collector_paused():
    """Pauses Python's cyclic garbage collector for TensorFlow's import, then freezes what it made.

    Importing TensorFlow and Keras (~3,600 modules) creates ~670,000 long-lived objects; with the
    collector on, each of its ~8 full collections during the import traverses all of them, ~1 s
    of CPU per process in all, and every later full collection (~0.25 s each) walks them again.
    Modules, classes and functions live as long as the process anyway, so after the import they
    are moved to the permanent generation (``gc.freeze``: a full collection then takes ~0.04
    s) and the collector runs as before on everything made afterwards (docs/performance.md).
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


#: What Keras 3 imports while TensorFlow loads (``import tensorflow`` imports all of
#: ``keras.src``), each behind its own ``try: import ... except ImportError``, for features a
#: command never uses: pandas so that ``fit`` accepts a DataFrame
#: (``keras.src.trainers.data_adapters.array_slicing``), IPython for its notebook file editor
#: (``keras.src.saving.file_editor``).
KERAS_EXTRAS = ("pandas", "IPython")


@contextlib.contextmanager
def _without_keras_extras():
    """Makes :data:`KERAS_EXTRAS` unimportable while TensorFlow is imported, then importable again.

    Keras then records them as absent (in this process, ``fit`` refuses a pandas DataFrame: pass
    ``df.to_numpy()``), and ~390 modules (~0.2-0.3 s of CPU) are not loaded. Only the commands'
    processes ask for it: pgrad hands Keras numpy arrays and tensors only. Afterwards ``import
    pandas`` works as usual (a user's env module or transform may use it); a package already
    imported is left alone.
    """
    blocked = [name for name in KERAS_EXTRAS if name not in sys.modules]
    for name in blocked:
        sys.modules[name] = None  # type: ignore[assignment]  # import raises ImportError
    try:
        yield
    finally:
        for name in blocked:
            if sys.modules.get(name, 0) is None:
                del sys.modules[name]


def _import_probability_first() -> None:
    """Imports TensorFlow Probability's top package before TensorFlow, when neither is loaded.

    TFP's ``__init__`` loads its ``experimental`` package (and ``layers``) at once when
    TensorFlow is already loaded (they register with Keras), and on first use otherwise. pgrad
    uses ``tfp.distributions`` (and ``tfp.stats``) only; imported first, the top package costs
    nothing, and the commands skip ``tfp.experimental``: ~190 modules, ~0.3 s of CPU per process
    (docs/performance.md). It still loads, in full, the first time anything touches it.
    ``tfp.distributions`` (with ``tf_keras``, which it and TFP's version check import) loads on
    its first use; a Discrete policy's update does not use it (``CategoricalHead``).
    """
    if "tensorflow" in sys.modules or "tensorflow_probability" in sys.modules:
        return
    try:
        import tensorflow_probability  # noqa: F401
    except ImportError:  # pragma: no cover - a dependency; the import that needs it will say so
        pass


def _import_tensorflow_quietly(quiet: bool) -> None:
    if not quiet or "tensorflow" in sys.modules:
        import tensorflow  # noqa: F401

        return
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no real fd 2 (some notebook front-ends)
        import tensorflow  # noqa: F401

        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        import tensorflow as tf

        tf.config.list_physical_devices("GPU")  # the cuda probe logs on first device query
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)
