"""``python -m pgrad_app PROGRAM [ARGS]``: any of pgrad's programs from an installed package, e.g.
``python -m pgrad_app train --agent a2c --env CartPole-v1`` (what the sweep's trials run)."""

import sys

from pgrad_app.cli.entry import PROGRAMS, finish, run

if len(sys.argv) < 2 or sys.argv[1] not in PROGRAMS:
    print(f"usage: python -m pgrad_app {{{','.join(PROGRAMS)}}} [ARGS...]", file=sys.stderr)
    sys.exit(2)
finish(run(sys.argv[1], sys.argv[2:]))
