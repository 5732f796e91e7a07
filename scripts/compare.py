#!/usr/bin/env python
"""The compare program as a script (pgrad_app/cli/; see pgrad_app/cli/entry.py)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's pgrad, if any
from pgrad_app.cli.entry import finish, run  # noqa: E402

if __name__ == "__main__":
    finish(run("compare"))
