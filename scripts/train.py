#!/usr/bin/env python
"""``pgrad-train`` as a script; the code is in pgrad_app/cli/train.py."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's pgrad, if any
import pgrad_app.quiet  # noqa: E402,F401,I001  (first: silences TensorFlow's start-up noise)
from pgrad_app.cli.train import build_parser, entry, main, resolve  # noqa: E402,F401

if __name__ == "__main__":
    sys.exit(entry())
