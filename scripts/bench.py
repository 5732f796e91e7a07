#!/usr/bin/env python
"""pgrad's performance figures as a script; the code is in pgrad_app/bench/ (driver.py)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's pgrad, if any
import pgrad_app.quiet  # noqa: E402,F401,I001  (first: silences TensorFlow and picks its allocator)
from pgrad_app.bench.driver import FIGURES, OPT_IN, build_parser, main, run_figure  # noqa: E402,F401

if __name__ == "__main__":
    sys.exit(main())
