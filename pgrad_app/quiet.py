"""Silence TensorFlow's start-up noise before TensorFlow is imported: the scripts' job.

Importing this module does it; the scripts and installed commands import it first, before
anything imports TensorFlow (the library itself changes nothing global). TensorFlow's C++
runtime writes "Could not find cuda drivers" and absl's "All log messages before
absl::InitializeLog()" straight to file descriptor
2 while it loads, before ``TF_CPP_MIN_LOG_LEVEL`` is read, so we point fd 2 at /dev/null for the
duration of the import only. Python-level errors still surface: they are raised after fd 2 is
restored. Set ``PGRAD_TF_LOGS=1`` to see everything TensorFlow says.

Python warnings (e.g. Gymnasium's env checker) are printed as one ``warning: ...`` line each,
without the source line and colour codes, like pgrad's own warnings.
"""

import logging
import os
import re
import sys
import warnings

_VERBOSE = os.environ.get("PGRAD_TF_LOGS", "") not in ("", "0")

if not _VERBOSE:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")  # its notice, and stable CPU maths
    noisy = r"(tensorflow|keras|tf_keras|tensorflow_probability|absl|google|gymnasium)"
    warnings.filterwarnings("ignore", category=DeprecationWarning, module=noisy + r".*")
    warnings.filterwarnings("ignore", module=r"tensorflow_probability.*")
    warnings.filterwarnings("ignore", module=r"tf_keras.*")


def _one_line_warning(message, category, filename, lineno, line=None) -> str:
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(message)).strip()
    text = text.removeprefix("WARN: ")
    return f"warning: {' '.join(text.split())}\n"


if not _VERBOSE:
    warnings.formatwarning = _one_line_warning

# TensorFlow's pooled (BFC) CPU allocator, for the processes the scripts start. With the default
# malloc-based one, every large tensor (per-step gradients are [T, params]: ~38 MB for a 64-64
# MLP at T=2048) is a fresh mmap whose
# page faults cost more than computing it; measured in docs/performance.md. Has effect only if
# TensorFlow is imported after this module.
os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")


def _import_tensorflow_quietly():
    if _VERBOSE or "tensorflow" in sys.modules:
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


_import_tensorflow_quietly()

import tensorflow as tf  # noqa: E402

if not _VERBOSE:
    tf.get_logger().setLevel(logging.ERROR)
    try:
        import absl.logging

        absl.logging.set_verbosity(absl.logging.ERROR)
    except ImportError:  # pragma: no cover
        pass
