#!/usr/bin/env python
"""``pgrad-train`` as a script (the code is pgrad_app/cli/train.py; ``--help`` lists every option)."""
import sys

import pgrad_app.quiet  # noqa: F401,I001  (first: silences TensorFlow's start-up noise)
from pgrad_app.cli.train import build_parser, main, resolve, entry  # noqa: F401

if __name__ == "__main__":
    sys.exit(entry())
