"""Evaluate a trained policy and record its episodes as video.

``pgrad.evaluate(target, episodes=N, video_dir=DIR)`` runs greedy episodes (``deterministic``
as SB3 and rl-zoo evaluate) and films each one with Gymnasium's ``RecordVideo`` into
``DIR/eval-<i>-episode-0.mp4`` (needs moviepy: ``pip install 'pgrad[video]'``). The target is an
agent, a saved directory (``agent.save`` or a ``pgrad-train`` run) or an exported ``policy/``
SavedModel; episode ``i`` is reset with ``seed + i``, so the films and the numbers are the same
on every run. The command line does the same:
``pgrad-evaluate RUN_DIR --episodes 3 --video videos/``.

The script trains A2C on CartPole-v1 until its training return reaches ``--target``, saves it,
evaluates the saved directory with video and reads each file back: a frame for every step
of its episode (and the reset frame), at the env's 50 frames per second.

Run: ``python examples/evaluate_video.py`` (about a minute); ``--target 50 --episodes 1`` for a
smoke run.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

# isort: off
from pgrad_app.quiet import silence  # noqa: I001

silence()  # first: TensorFlow's start-up noise off (what pgrad's commands do)
import agents  # noqa: E402
import pgrad  # noqa: E402

# isort: on


def frame_count(path: Path) -> int:
    """Frames in an mp4, read back with imageio (its ffmpeg plugin, as moviepy wrote it)."""
    import imageio.v3 as iio

    return sum(1 for _ in iio.imiter(path))


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", type=float, default=475.0,
                        help="training return to stop at (rolling mean of 20 episodes)")
    parser.add_argument("--steps", type=int, default=300_000, help="env steps to train at most")
    parser.add_argument("--episodes", type=int, default=3, help="episodes to evaluate and film")
    parser.add_argument("--out", type=Path, default=None,
                        help="folder for the saved agent and the videos (default: temporary)")
    args = parser.parse_args(argv)

    out = args.out or Path(tempfile.mkdtemp(prefix="pgrad-video-"))
    agent = agents.make("a2c", "CartPole-v1", seed=0)
    agent.learn(args.steps, callbacks=agents.callbacks.StopAtReturn(args.target), progress=False)
    agent.save(out / "agent")
    agent.close()

    videos = out / "videos"
    result = pgrad.evaluate(out / "agent", episodes=args.episodes, video_dir=videos, seed=0)
    print(f"greedy return {result['return_mean']:.1f} +- {result['return_std']:.1f} over "
          f"{args.episodes} episodes (lengths {result['lengths']})")
    files = sorted(videos.glob("*.mp4"))
    frames = [frame_count(f) for f in files]
    for f, n in zip(files, frames):
        print(f"  {f.name}: {f.stat().st_size:,} bytes, {n} frames")
    return {"return_mean": result["return_mean"], "videos": float(len(files)),
            "frames": frames, "lengths": [int(n) for n in result["lengths"]]}


if __name__ == "__main__":
    main()
