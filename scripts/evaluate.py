#!/usr/bin/env python
"""Evaluate a trained run: N episodes, mean ± std of return and length, DIR/eval.json.

    python scripts/evaluate.py runs/a2c-cartpole --episodes 20 --deterministic

Deterministic evaluation uses the exported policy/ SavedModel; sampled actions (the default) or a
run without an export use the newest good checkpoint. Bad input: one line, exit code 2.
"""

from __future__ import annotations

import argparse
import sys

import pgrad  # noqa: F401  (first: silences TensorFlow's start-up noise)
from pgrad.errors import UserError, run_cli


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line and exit 2, without argparse's usage block
        raise UserError(f"{message} (see {self.prog} --help)")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="evaluate.py", description="Evaluate the policy of a training run.")
    p.add_argument("run", metavar="DIR", help="run directory written by train.py")
    p.add_argument("--episodes", type=int, default=10, metavar="N",
                   help="episodes to run (default: 10)")
    p.add_argument("--deterministic", action="store_true",
                   help="greedy actions instead of sampled ones (default: sampled)")
    p.add_argument("--seed", type=int, default=None, metavar="S",
                   help="env seed of the first episode (default: the run's seed + 1000)")
    p.add_argument("--video", metavar="VDIR", default=None,
                   help="record every episode as mp4 into VDIR (needs moviepy; default: off)")
    p.add_argument("--env", metavar="ENV_ID", default=None,
                   help="evaluate on another env with the same spaces (default: the run's env)")
    p.add_argument("--debug", action="store_true", help="show tracebacks (default: off)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from pgrad.evaluate import evaluate

    r = evaluate(args.run, episodes=args.episodes, deterministic=args.deterministic,
                 seed=args.seed, video_dir=args.video, env_id=args.env)
    mode = "deterministic" if r["deterministic"] else "sampled"
    print(f"{r['env']}: {r['episodes']} episodes ({mode} actions, {r['source']}, "
          f"seed {r['seed']})")
    print(f"return {r['return_mean']:.2f} ± {r['return_std']:.2f}")
    print(f"length {r['length_mean']:.1f} ± {r['length_std']:.1f}")
    print(f"wrote {args.run.rstrip('/')}/eval.json"
          + (f"; videos in {args.video}" if args.video else ""))
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
