"""``scripts/learning_targets.py``: reproduces the learning-targets table in docs/agents.md.

    python scripts/learning_targets.py                      # every row (hours)
    python scripts/learning_targets.py --rows a2c-cartpole  # one row
    python scripts/learning_targets.py --rows a2c-cartpole --seeds 0 1 2 --set n_steps=8

Prints one JSON object per run and a markdown table at the end
(:mod:`pgrad_app.experiments.benchmark.targets`). For the multi-seed final-evaluation benchmark,
see scripts/benchmark.py.
"""

from __future__ import annotations

import json

from pgrad_app.cli import OneLineParser


def build_parser() -> OneLineParser:
    from pgrad_app.experiments.benchmark.targets import ROWS

    parser = OneLineParser(prog="learning_targets.py", description=__doc__.splitlines()[0])
    parser.add_argument("--rows", nargs="*", default=list(ROWS), choices=list(ROWS))
    parser.add_argument("--seeds", nargs="*", type=int, default=[0, 1, 2])
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="hyperparameter override, typed as pgrad-train's --set")
    parser.add_argument("--debug", action="store_true", help="show tracebacks for errors")
    return parser


def main(argv: list[str] | None = None) -> int:
    from pgrad_app.config.values import parse_set
    from pgrad_app.experiments.benchmark import targets

    args = build_parser().parse_args(argv)
    overrides = dict(parse_set(p) for p in args.set)
    results = []
    for row in args.rows:
        for seed in args.seeds:
            result = targets.run(row, seed, overrides)
            print(json.dumps(result), flush=True)
            results.append(result)
    print()
    print(targets.markdown(results))
    return 0
