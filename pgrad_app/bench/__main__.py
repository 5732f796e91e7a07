"""``python -m pgrad_app.bench``: the same program as ``python scripts/bench.py``."""

import sys

import pgrad_app.quiet  # noqa: F401,I001  (first: silences TensorFlow and picks its allocator)
from pgrad_app.bench.driver import main

sys.exit(main())
