"""Evaluate a trained run or saved agent: N episodes, mean ± std of return and length, eval.json.

    pgrad-evaluate runs/a2c-cartpole --episodes 20             # greedy actions
    pgrad-evaluate runs/a2c-cartpole --episodes 20 --stochastic

Actions are deterministic (the policy's mode) unless --stochastic, as in Stable-Baselines3 and
rl-zoo. The policy is the run's exported policy/ (or, for a run without one, its newest good
checkpoint). Bad input: one line, exit code 2.

Robustness to observation attacks (the checkpointed policy; epsilon in raw observation units):

    pgrad-evaluate runs/a2c-cartpole --attack fgsm --epsilon 0.01,0.05,0.1
    pgrad-evaluate runs/a2c-cartpole --attack pgd --pgd-steps 10

prints return (mean ± std) per epsilon (0, the clean baseline, is always included), writes it
under "attack" in DIR/eval-attack-fgsm.json (each evaluation other than the plain
deterministic one has its own eval-VARIANT.json: video, sampled, another env) and plots it
to DIR/robustness.png.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping

from pgrad_app.cli import OneLineParser
from pgrad_app.errors import UserError, command


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog=command("evaluate"), description="Evaluate the policy of a training run "
                "or a saved agent (deterministic actions unless --stochastic).")
    p.add_argument("run", metavar="DIR", help="a run directory pgrad-train wrote, or a "
                   "directory agent.save wrote")
    p.add_argument("--episodes", type=int, default=10, metavar="N",
                   help="episodes to run, at most 10,000 (default: 10)")
    p.add_argument("--stochastic", action="store_true",
                   help="sample actions from the policy (default: off, greedy actions)")
    p.add_argument("--deterministic", action="store_true",
                   help="greedy actions: the default, kept for older command lines (default: on)")
    p.add_argument("--seed", type=int, default=None, metavar="S",
                   help="env seed of the first episode (default: the run's seed + 10000, the "
                   "evaluation protocol every pgrad evaluation uses)")
    p.add_argument("--video", metavar="VDIR", default=None,
                   help="record every episode as mp4 into VDIR (needs moviepy; default: off)")
    p.add_argument("--render", choices=("human",), default=None,
                   help="show the episodes on screen (gymnasium's render_mode='human'; needs a "
                   "display; writes eval-human.json; default: off)")
    p.add_argument("--env", metavar="ENV_ID", default=None,
                   help="evaluate on another env with the same spaces (default: the run's env)")
    p.add_argument("--attack", choices=("fgsm", "pgd"), default=None,
                   help="perturb every observation against the policy (default: off)")
    p.add_argument("--epsilon", metavar="E1,E2,...", default=None,
                   help="with --attack: L-inf radii in raw observation units, comma-separated; "
                   "0 is always added, 32 at most (default: 0,0.01,0.05,0.1)")
    p.add_argument("--pgd-steps", type=int, default=10, metavar="K",
                   help="with --attack pgd: sign-gradient steps, at most 10,000 (default: 10)")
    p.add_argument("--trust-run-code", action="store_true",
                   help="import the env module the run's config.yaml names (module:EnvId) without "
                   "naming it again with --env (default: refuse)")
    p.add_argument("--debug", action="store_true", help="show tracebacks (default: off)")
    return p


def check_display(environ: Mapping[str, str] = os.environ, platform: str = sys.platform) -> None:
    """Refuses ``--render human`` on a Linux machine without a display, in one line: SDL would
    otherwise fall back to drawing nowhere, and the user would watch nothing. A user's own
    ``SDL_VIDEODRIVER`` (``dummy``: render to no screen) is taken as it is."""
    if not platform.startswith("linux") or environ.get("SDL_VIDEODRIVER"):
        return
    if not (environ.get("DISPLAY") or environ.get("WAYLAND_DISPLAY")):
        raise UserError("--render human needs a display, and there is none here (neither DISPLAY "
                        "nor WAYLAND_DISPLAY is set): record the episodes with --video DIR "
                        "instead, or set SDL_VIDEODRIVER=dummy to render to no screen.")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from pgrad_app.run.evaluate import evaluate_run

    if args.attack is None and args.epsilon is not None:
        raise UserError("--epsilon needs --attack fgsm or --attack pgd.")
    if args.stochastic and args.deterministic:
        raise UserError("--stochastic and --deterministic contradict each other; choose one.")
    if args.render is not None:
        check_display()
    r = evaluate_run(args.run, episodes=args.episodes, deterministic=not args.stochastic,
                 seed=args.seed, video_dir=args.video, env_id=args.env, attack=args.attack,
                 epsilons=args.epsilon, pgd_steps=args.pgd_steps,
                 trust_run_code=args.trust_run_code, render=args.render)
    if args.attack is not None:
        from pgrad_app.run.robustness import table

        a = r["attack"]
        mode = "deterministic" if r["deterministic"] else "sampled"
        steps = f" ({a['pgd_steps']} steps)" if a["kind"] == "pgd" else ""
        print(f"{r['env']}: {a['kind'].upper()}{steps} attack, {r['episodes']} episodes per "
              f"epsilon ({mode} actions, {r['source']}, seeds {r['seed']}..)")
        print(table(a))
        out = args.run.rstrip("/")
        print(f"wrote {r['written']} and {out}/robustness.png")
        return 0
    mode = "deterministic" if r["deterministic"] else "sampled (--stochastic)"
    print(f"{r['env']}: {r['episodes']} episodes ({mode} actions, {r['source']}, "
          f"seeds {r['seed']}..{r['seed'] + r['episodes'] - 1})")
    print(f"return {r['return_mean']:.2f} ± {r['return_std']:.2f}"
          + ("  (the team's: the mean over agents; each: " + ", ".join(
              f"{k} {v:.2f}" for k, v in r["agent_return_mean"].items()) + ")"
             if "agent_return_mean" in r else ""))
    print(f"length {r['length_mean']:.1f} ± {r['length_std']:.1f}")
    if "success_rate" in r:  # the env reports info["is_success"] at each episode's end
        print(f"success rate {r['success_rate']:.2f}")
    for line in match_lines(r.get("games")):  # a self-play run: the learner's games
        print(line)
    print(f"wrote {r['written']}"
          + (f"; videos in {args.video}" if args.video else ""))
    return 0


def match_lines(games: dict | None) -> list[str]:
    """A self-play evaluation's games (``eval.json``'s ``games``) as one line per opponent:
    the learner's win and draw rates as first and as second player."""
    if not games:
        return []
    lines = []
    for opponent, seats in games.items():
        if not isinstance(seats, dict):
            continue
        name = (f"the anchor (update {games['anchor_update']})"
                if opponent == "anchor" and "anchor_update" in games
                else "the tactical player (one move deep)" if opponent == "tactics"
                else f"the {opponent} player")
        cells = [f"{seat}: {cell['win']:.1%} won, {cell['draw']:.1%} drawn ({cell['games']} games)"
                 for seat, cell in seats.items()]
        lines.append(f"vs {name}: " + "; ".join(cells))
    return lines
