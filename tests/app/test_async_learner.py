"""IMPALA's asynchronous actor-learner on Ray: trajectories stream from 2 actors, the policy lag
is measured, the normalisers' statistics merged, a restore drops what was in flight, a killed
actor is restarted, the command line runs it, Ctrl-C leaves a checkpoint to resume from."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import numpy as np
import pytest
import tensorflow as tf
from cli_helpers import PY, ROOT, read_rows, train

import agents
from pgrad.rl.storage.checkpoint import CheckpointStore
from pgrad_app.distributed import async_learner, session
from pgrad_app.errors import UserError

SMALL = dict(num_envs=4, n_steps=16)


@pytest.fixture(scope="module")
def ray_local():
    pytest.importorskip("ray")
    with session.ray_session(num_cpus=2) as ray:
        yield ray


def test_only_asynchronous_agents():
    a2c = agents.make("a2c", "CartPole-v1", seed=0, **SMALL)
    with pytest.raises(UserError, match="needs --agent impala or appo; got 'a2c'"):
        async_learner.distribute(a2c, 2)
    a2c.close()


@pytest.mark.subprocess
def test_two_actors_stream_trajectories_and_report_the_lag(ray_local, tmp_path, capsys):
    agent = agents.make("impala", "CartPole-v1", seed=0, queue_size=4, normalize_obs=True,
                        normalize_reward=True, **SMALL)
    per = 16 * 4  # env steps of a trajectory
    try:
        async_learner.distribute(agent, 2)
        infos = [agent.step() for _ in range(8)]
        lags = [i["metrics"]["policy_lag"] for i in infos]
        assert infos[-1]["env_steps"] == 8 * per
        assert all(lag >= 0 and lag == int(lag) for lag in lags)
        assert max(lags) >= 1  # two requests in flight per actor: acting runs ahead
        steps = [s for i in infos for s, _, _ in i["episodes"]]
        assert steps == sorted(steps) and len(steps) > 0
        rho = [i["metrics"]["importance_weight/rho_mean"] for i in infos]
        assert all(np.isfinite(rho))
        # the statistics of every observation (return) of the learned trajectories, once each
        for norm in (agent.obs_norm, agent.reward_norm):
            assert norm.rms.count == pytest.approx(1e-4 + 8 * per, abs=1e-9)

        # A restore: the requests in flight (acted with weights the checkpoint never had) are
        # dropped when they arrive; the next trajectory learned was acted with restored weights.
        path = tf.train.Checkpoint(**agent.trackables()).write(str(tmp_path / "ckpt"))
        agent.step(), agent.step()
        tf.train.Checkpoint(**agent.trackables()).read(path).assert_consumed()
        info = agent.step()
        assert info["metrics"]["policy_lag"] == 0.0 and info["env_steps"] == 9 * per
        # Two requests per actor were in flight; each is dropped when it arrives. The first
        # fresh trajectory can come from one actor before the other's stale ones are in, so
        # those are dropped during the next updates -- never learned.
        assert 2 <= agent.source.dropped <= 4
        for _ in range(4):
            if agent.source.dropped == 4:
                break
            info = agent.step()
        assert agent.source.dropped == 4
        learned = info["env_steps"] // per
        assert info["env_steps"] == learned * per and learned <= 13
        assert agent.obs_norm.rms.count == pytest.approx(1e-4 + learned * per, abs=1e-9)

        ray_local.kill(agent.source.actors[1], no_restart=False)
        more = [agent.step() for _ in range(4)]  # actor 2 is waited for, restarted, asked again
        assert more[-1]["env_steps"] == (learned + 4) * per
    finally:
        agent.close()


@pytest.mark.subprocess
def test_train_command_runs_impala_on_two_workers(ray_local, tmp_path, capsys):
    out = tmp_path / "run"
    code, _, err = train("--agent", "impala", "--env", "CartPole-v1", "--total-steps", "640",
                         "--workers", "2", "--no-tuned", "--num-envs", "4", "--set",
                         "n_steps=16", "--quiet", "--out", out, capsys=capsys)
    assert code == 0, err
    rows = read_rows(out / "updates.csv")
    assert len(rows) == 10 and all(float(r["policy_lag"]) >= 0 for r in rows)


@pytest.mark.subprocess
def test_ctrl_c_leaves_a_checkpoint_and_the_resume_counts_no_trajectory_twice(ray_local,
                                                                              tmp_path, capsys):
    """SIGINT to the whole process group, as a terminal's Ctrl-C (the Ray actors get it too):
    exit 130 after a checkpoint; ``--resume`` on new actors keeps the episodes up to the
    checkpoint and adds only new ones (what was in flight is dropped)."""
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [PY, str(ROOT / "scripts" / "train.py"), "--agent", "impala", "--env", "CartPole-v1",
         "--workers", "2", "--total-steps", str(10**7), "--no-tuned", "--num-envs", "4",
         "--set", "n_steps=16", "--checkpoint-every", "256", "--quiet", "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    store = CheckpointStore(out / "checkpoints")
    deadline = time.monotonic() + 240
    while not store.checkpoints() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "SIGINT: saved a checkpoint at env step" in err and "Traceback" not in err
    latest = store.checkpoints()[0]
    store.verify(latest)  # intact: every file's checksum as recorded
    saved = json.loads((latest / "meta.json").read_text())["env_steps"]
    before = (out / "episodes.csv").read_text().splitlines()
    assert int(before[-1].split(",")[0]) <= saved

    code, _, err = train("--resume", out, "--total-steps", saved + 640, "--quiet", capsys=capsys)
    assert code == 0, err
    after = (out / "episodes.csv").read_text().splitlines()
    assert after[:len(before)] == before  # nothing up to the checkpoint rewritten or repeated
    rows = read_rows(out / "episodes.csv")
    steps = [int(r["step"]) for r in rows]
    assert steps == sorted(steps) and steps[-1] <= saved + 640 and len(after) > len(before)
    # each env step in at most one episode: a trajectory counted twice would break this
    assert sum(int(r["length"]) for r in rows) <= saved + 640
    updates = [int(r["step"]) for r in read_rows(out / "updates.csv")]
    assert updates == sorted(set(updates)) and updates[-1] == saved + 640
