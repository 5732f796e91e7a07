"""Watching an agent (issue 24, item 5): ``pgrad-train --capture-video N`` films env 0 during
training as CleanRL's flag does, without changing what the run trains on; ``pgrad-evaluate
--render human`` shows the episodes on screen, or says in one line that there is no screen."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from cli_helpers import ROOT, evaluate, one_error_line, train

import agents
from pgrad_app.cli.evaluate import check_display
from pgrad_app.errors import UserError
from pgrad_app.run.video import film_first_env


@pytest.fixture(scope="module")
def filmed_run(tmp_path_factory):
    """A tiny run filmed every 2nd episode of env 0, trained as a user runs the command."""
    tmp = tmp_path_factory.mktemp("capture")
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "train.py"), "--env",
                        "CartPole-v1", "--total-steps", "120", "--num-envs", "2", "--no-tuned",
                        "--capture-video", "2", "--out", "run", "--quiet"],
                       capture_output=True, text=True, timeout=300, env=env, cwd=tmp)
    assert r.returncode == 0, r.stderr
    return tmp / "run"


@pytest.mark.subprocess
def test_capture_video_films_every_nth_episode_of_env_0_and_resuming_adds_to_them(
        filmed_run, capsys):
    videos = sorted(p.name for p in (filmed_run / "videos").iterdir())
    assert videos[:2] == ["rl-video-episode-0.mp4", "rl-video-episode-2.mp4"], videos
    assert all(n.startswith("rl-video-episode-") and int(n[17:-4]) % 2 == 0 for n in videos)
    assert (filmed_run / "videos" / videos[0]).read_bytes()[4:8] == b"ftyp"  # an mp4
    config = (filmed_run / "config.yaml").read_text()
    assert "capture_video: 2" in config
    code, _, err = train("--resume", filmed_run, "--more-steps", "40", "--quiet",
                         capsys=capsys)
    assert code == 0, err
    after = sorted(p.name for p in (filmed_run / "videos").iterdir())
    assert set(videos) <= set(after)  # nothing of the first part is written over
    assert "rl-video-from-120-episode-0.mp4" in after


def test_the_camera_changes_nothing_the_agent_trains_on(tmp_path):
    plain = agents.make("a2c", "CartPole-v1", seed=4, num_envs=2, n_steps=8)
    filmed = agents.make("a2c", "CartPole-v1", seed=4, num_envs=2, n_steps=8)
    try:
        film_first_env(filmed, tmp_path, every=1)
        for _ in range(3):
            a, b = plain.step(), filmed.step()
            assert a["episodes"] == b["episodes"]
            assert a["metrics"]["policy_loss"] == b["metrics"]["policy_loss"]
        np.testing.assert_array_equal(plain.collector._raw_obs, filmed.collector._raw_obs)
    finally:
        plain.close()
        filmed.close()
    assert (tmp_path / "rl-video-episode-0.mp4").is_file()


def test_capture_video_refuses_what_it_cannot_film(tmp_path):
    agent = agents.make("a2c", "CartPole-v1", seed=0, num_envs=2, vector_mode="async")
    try:
        with pytest.raises(UserError, match="needs vector_mode 'sync'"):
            film_first_env(agent, tmp_path, every=3)
    finally:
        agent.close()
    with pytest.raises(UserError, match="N >= 1"):
        film_first_env(None, tmp_path, every=0)


def test_render_human_without_a_display_is_one_line_and_with_sdl_dummy_renders(
        filmed_run, capsys, monkeypatch):
    with pytest.raises(UserError, match="needs a display.*--video DIR"):
        check_display({}, "linux")
    check_display({"DISPLAY": ":0"}, "linux")
    check_display({"SDL_VIDEODRIVER": "dummy"}, "linux")
    check_display({}, "darwin")  # macOS and Windows always have a screen to open
    for key in ("DISPLAY", "WAYLAND_DISPLAY", "SDL_VIDEODRIVER"):
        monkeypatch.delenv(key, raising=False)
    code, _, err = evaluate(filmed_run, "--render", "human", "--episodes", "1", capsys=capsys)
    assert code == 2 and "needs a display" in one_error_line(err)
    monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")  # where pygame allows: render to no screen
    code, out, err = evaluate(filmed_run, "--render", "human", "--episodes", "2", capsys=capsys)
    assert code == 0, err
    shown = json.loads((filmed_run / "eval-human.json").read_text())
    assert shown["episodes"] == 2 and "eval-human.json" in out
    code, _, err = evaluate(filmed_run, "--render", "human", "--video", filmed_run / "v",
                            capsys=capsys)
    assert code == 2 and "choose one" in one_error_line(err)
