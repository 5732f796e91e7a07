"""Convert an exported policy (:mod:`pgrad.rl.export.saved_model`) for deployment: TFLite and ONNX.

* :func:`to_tflite` writes one ``.tflite`` flatbuffer holding the export's signatures (one
  signature runner each): ``action``, ``sample_with_noise`` and ``distribution_params``, in
  TFLite's built-in operators only (no select TF ops).
* :func:`to_onnx` writes one ``.onnx`` graph of one signature through tf2onnx (the ``export``
  extra: ``pip install 'pgrad[export]'``): ``action``, ``sample_with_noise`` or
  ``distribution_params``.

The seeded ``sample`` stays in the SavedModel: its stateless random ops
(``StatelessRandomGetKeyCounter``, ``StatelessRandomUniformV2``) are no TFLite built-ins (with
select TF ops the model converts, but neither TensorFlow 2.21's ``tf.lite.Interpreter`` nor
LiteRT 2.3's has the Flex delegate to run it) and tf2onnx 1.17 has no conversion of them
(:func:`to_onnx` reports its error). Converted models sample with ``sample_with_noise`` and
the host's own uniforms.

Inputs and outputs keep the signatures' names: ``observation`` (or one input per observation
part), ``seed``, ``noise``; ``output_0`` (actions) or ``logits`` / ``mean``, ``log_std``.
Converted models are batched: ``[N, *shape]`` observations.

Files are written as :mod:`pgrad.rl.export.destination` says: the destination is checked before
any work, written atomically, and a file there that pgrad did not write is replaced only with
``overwrite=True``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import tensorflow as tf

from pgrad.rl.export import destination
from pgrad.rl.export import saved_model as export

#: Signatures that stay in the SavedModel, with the ops TFLite has no built-in for.
SAVED_MODEL_ONLY = {"sample": ("StatelessRandomGetKeyCounter", "StatelessRandomUniformV2")}


def _load(export_dir: str | Path) -> tuple[Path, Any]:
    """The export directory (or a run's ``policy/``) and the loaded SavedModel."""
    found = export.find_export(export_dir)
    if found is None:
        raise ValueError(f"{export_dir} holds no exported policy (no saved_model.pb).")
    return found, tf.saved_model.load(str(found))


def _first_line(err: BaseException) -> str:
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return lines[0] if lines else type(err).__name__


def _check_names(found: Path, available, wanted: list[str]) -> None:
    missing = [k for k in wanted if k not in available]
    if missing:
        raise ValueError(f"the export in {found} has no signature {', '.join(map(repr, missing))}"
                         f"; it has {', '.join(sorted(available))} (export it again with this "
                         "pgrad for the others).")


def to_tflite(export_dir: str | Path, out_file: str | Path,
              signatures: list[str] | None = None, overwrite: bool = False) -> Path:
    """Converts an export's signatures to one TFLite model (built-in operators only).

    Args:
      export_dir: the export (or a run directory / saved agent holding ``policy/``).
      out_file: the ``.tflite`` file to write (atomically).
      signatures: which signatures (default: every one the export has but ``sample``).
      overwrite: replace a file at ``out_file`` that pgrad did not write.

    Returns:
      ``out_file`` as a Path. Run it with ``tf.lite.Interpreter(model_path=...)`` (or LiteRT's
      ``ai_edge_litert.interpreter.Interpreter``): ``get_signature_runner("action")(
      observation=obs)["output_0"]``.

    Raises:
      ValueError: a destination :func:`pgrad.rl.export.destination.check` refuses, no export
        there, an unknown signature or ``sample``, or the converter's own error (its first line).
      OSError: writing failed (a full disk, ...); ``out_file`` is as it was.
    """
    destination.check(out_file, overwrite)
    found, loaded = _load(export_dir)
    available = list(loaded.signatures.keys())
    if signatures is None:
        signatures = [k for k in available if k not in SAVED_MODEL_ONLY]
    signatures = list(signatures)
    _check_names(found, available, signatures)
    for k in signatures:
        if k in SAVED_MODEL_ONLY:
            raise ValueError(f"signature {k!r} does not convert to TFLite: its "
                             f"{' and '.join(SAVED_MODEL_ONLY[k])} are no TFLite built-ins; "
                             "sample with sample_with_noise and your own uniforms.")
    converter = tf.lite.TFLiteConverter.from_saved_model(str(found), signature_keys=signatures)
    try:
        data = converter.convert()
    except Exception as err:  # noqa: BLE001  (the converter raises several error types)
        raise ValueError(f"TFLite cannot convert {', '.join(signatures)} of {found}: "
                         f"{_first_line(err)}") from None
    return destination.write(out_file, data, {"format": "tflite", "source": str(found),
                                              "signatures": signatures})


class _Collect(logging.Handler):
    """Keeps tf2onnx's error records: it logs an unsupported op and carries on."""

    def __init__(self):
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def to_onnx(export_dir: str | Path, out_file: str | Path, signature: str = "action",
            opset: int | None = None, overwrite: bool = False) -> Path:
    """Converts one signature of an export to an ONNX model with tf2onnx.

    Args:
      export_dir: the export (or a run directory / saved agent holding ``policy/``).
      out_file: the ``.onnx`` file to write (atomically).
      signature: ``action`` (default), ``sample_with_noise`` or ``distribution_params``.
      opset: the ONNX opset (default: tf2onnx's).
      overwrite: replace a file at ``out_file`` that pgrad did not write.

    Returns:
      ``out_file`` as a Path. Run it with ``onnxruntime.InferenceSession(path)``:
      ``session.run(None, {"observation": obs})[0]``.

    Raises:
      ValueError: a destination :func:`pgrad.rl.export.destination.check` refuses, tf2onnx or
        onnx not installed, no export there, an unknown signature, or tf2onnx's own error (e.g.
        for ``sample``: see the module docstring).
      OSError: writing failed (a full disk, ...); ``out_file`` is as it was.
    """
    destination.check(out_file, overwrite)
    try:
        import onnx
        import tf2onnx
    except ImportError as err:
        raise ValueError(f"to_onnx needs tf2onnx and onnx ({err.name} is not installed): pip "
                         "install 'pgrad[export]'.") from None
    found, loaded = _load(export_dir)
    _check_names(found, loaded.signatures.keys(), [signature])
    fn = loaded.signatures[signature]
    specs = fn.structured_input_signature[1]  # {name: TensorSpec}
    names = sorted(specs)

    def call(*args):
        return fn(**dict(zip(names, args)))

    collect = _Collect()
    logger = logging.getLogger("tf2onnx")
    logger.addHandler(collect)
    try:
        model, _ = tf2onnx.convert.from_function(tf.function(call),
                                                 [specs[n] for n in names], opset=opset)
        onnx.checker.check_model(model)
    except Exception as err:  # noqa: BLE001  (tf2onnx and onnx raise many error types)
        collect.messages.append(_first_line(err))
    finally:
        logger.removeHandler(collect)
    if collect.messages:  # tf2onnx's summary if it has one, else every message once
        summary = [m for m in collect.messages if m.startswith("Unsupported ops")]
        why = "; ".join(dict.fromkeys(summary or collect.messages))
        raise ValueError(f"tf2onnx {tf2onnx.__version__} (TensorFlow {tf.__version__}) cannot "
                         f"convert signature {signature!r} of {found}: {why}")
    return destination.write(out_file, model.SerializeToString(),
                             {"format": "onnx", "source": str(found), "signatures": [signature]})
