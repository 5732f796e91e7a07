"""IMPALA's asynchronous actor-learner on Ray: trajectories stream from 2 actors, the policy lag
is measured, a killed actor is restarted, the command line runs it."""

from __future__ import annotations

import numpy as np
import pytest
from cli_helpers import read_rows, train

import agents
from pgrad_app.distributed import async_learner, session
from pgrad_app.errors import UserError

SMALL = dict(num_envs=4, n_steps=16)


@pytest.fixture(scope="module")
def ray_local():
    pytest.importorskip("ray")
    with session.ray_session(num_cpus=2) as ray:
        yield ray


def test_only_asynchronous_agents_and_no_normalisers():
    a2c = agents.make("a2c", "CartPole-v1", seed=0, **SMALL)
    with pytest.raises(UserError, match="needs --agent impala or appo; got 'a2c'"):
        async_learner.distribute(a2c, 2)
    a2c.close()
    imp = agents.make("impala", "CartPole-v1", seed=0, normalize_obs=True, **SMALL)
    with pytest.raises(UserError, match="turn normalize_obs and normalize_reward off"):
        async_learner.distribute(imp, 2)
    imp.close()


@pytest.mark.subprocess
def test_two_actors_stream_trajectories_and_report_the_lag(ray_local, capsys):
    agent = agents.make("impala", "CartPole-v1", seed=0, queue_size=4, **SMALL)
    try:
        async_learner.distribute(agent, 2)
        infos = [agent.step() for _ in range(8)]
        lags = [i["metrics"]["policy_lag"] for i in infos]
        assert infos[-1]["env_steps"] == 8 * 16 * 4
        assert all(lag >= 0 and lag == int(lag) for lag in lags)
        assert max(lags) >= 1  # two requests in flight per actor: acting runs ahead
        steps = [s for i in infos for s, _, _ in i["episodes"]]
        assert steps == sorted(steps) and len(steps) > 0
        rho = [i["metrics"]["importance_weight/rho_mean"] for i in infos]
        assert all(np.isfinite(rho))

        ray_local.kill(agent.source.actors[1], no_restart=False)
        more = [agent.step() for _ in range(4)]  # actor 2 is waited for, restarted, asked again
        assert more[-1]["env_steps"] == 12 * 16 * 4
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
