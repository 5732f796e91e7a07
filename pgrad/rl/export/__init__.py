"""Exported policies: a self-contained SavedModel of the actor (feed-forward or recurrent) that
answers an observation with TensorFlow alone, loaded back as a policy, and converted for
deployment (TFLite, ONNX).
"""
from __future__ import annotations

from pgrad.rl._lazy import lazy_getattr

#: The public names of this room, by the module that defines them (imported on first use).
_HOME = {
    "FILES": "pgrad.rl.export.saved_model",
    "META_FILE": "pgrad.rl.export.saved_model",
    "ExportedPolicy": "pgrad.rl.export.saved_model",
    "export_policy": "pgrad.rl.export.saved_model",
    "find_export": "pgrad.rl.export.saved_model",
    "read_metadata": "pgrad.rl.export.saved_model",
    "to_tflite": "pgrad.rl.export.deploy",
    "to_onnx": "pgrad.rl.export.deploy",
}

__all__ = sorted(_HOME)

__getattr__ = lazy_getattr(__name__, _HOME)
