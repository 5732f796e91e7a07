"""Rollout workers and sweeps on Ray: same episodes as in-process, determinism, faults, sweeps.

One local Ray instance (2 CPUs) serves the whole module; train.py and sweep.py reuse a
connection the process already has.
"""

from __future__ import annotations

import sys
import time

import numpy as np
import pytest
from cli_helpers import one_error_line, read_rows, train

from pgrad.rl.collection.rollout import Trajectory
from pgrad.rl.observations.normalize import _RunningMeanStd
from pgrad_app.cli import sweep as sweep_cli
from pgrad_app.distributed import merge, session
from pgrad_app.distributed import workers as distributed
from pgrad_app.errors import UserError, run_cli
from pgrad_app.experiments.sweep import plan as sweep

SMALL = ("--no-tuned", "--num-envs", "4", "--set", "n_steps=16", "--quiet")


@pytest.fixture(scope="module")
def ray_local():
    pytest.importorskip("ray")
    with session.ray_session(num_cpus=2) as ray:
        yield ray


def kill_for_good(ray, actor) -> None:
    """Kills ``actor`` without restart and waits until it is dead: ``ray.kill`` only sends the
    request, and on a busy machine a call submitted right after it could still run."""
    ray.kill(actor, no_restart=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            ray.get(actor.ready.remote(), timeout=10)
        except ray.exceptions.RayActorError:
            return
        time.sleep(0.05)
    raise AssertionError("the killed rollout worker still answers after 60 s")


def episodes(run_dir):
    return [(r["step"], r["return"], r["length"]) for r in read_rows(run_dir / "episodes.csv")]


# -- pieces, without Ray ---------------------------------------------------------------------


def test_split_envs_covers_every_env_in_order():
    assert distributed.split_envs(5, 2) == [(0, 3), (3, 2)]
    assert distributed.split_envs(4, 4) == [(0, 1), (1, 1), (2, 1), (3, 1)]
    shares = distributed.split_envs(16, 3)
    assert sum(c for _, c in shares) == 16 and [s for s, _ in shares] == [0, 6, 11]


def test_merged_statistics_equal_one_pass_over_every_batch():
    rng = np.random.default_rng(0)
    start = [rng.normal(size=(4, 3)) for _ in range(2)]
    shards = [[rng.normal(2.0, 3.0, size=(n, 3)) for _ in range(5)] for n in (3, 2)]
    reference = _RunningMeanStd((3,))
    for x in start + [x for shard in shards for x in shard]:
        reference.update(x)
    results = []
    for shard in shards:  # each worker: the learner's statistics plus its own batches
        rms, moments = _RunningMeanStd((3,)), _RunningMeanStd((3,))
        moments.count = 0.0
        for x in start:
            rms.update(x)
        for x in shard:
            rms.update(x)
            moments.update(x)
        results.append({"stats": {"obs_norm": ((rms.mean, rms.var, rms.count),
                                               (moments.mean, moments.var, moments.count))}})
    merged = _RunningMeanStd((3,))
    merge.merge_stats(results, "obs_norm", merged)
    np.testing.assert_allclose(merged.mean, reference.mean, rtol=1e-12)
    np.testing.assert_allclose(merged.var, reference.var, rtol=1e-12)
    assert merged.count == pytest.approx(reference.count)


def _traj(T, n, mask=None):
    f = np.full((T, n), float(n), np.float32)
    obs = np.zeros((T, n, 2), np.float32)
    return Trajectory(obs, f.astype(np.int32), f, f * 0, f * 0, f, None, obs, mask)


def test_merged_trajectories_pad_and_mask_shorter_pieces_in_env_order():
    out = merge.merge_trajectories([_traj(3, 2, np.ones((3, 2), np.float32)),
                                   _traj(5, 1, np.ones((5, 1), np.float32))])
    assert out.rewards.shape == (5, 3) and out.observations.shape == (5, 3, 2)
    np.testing.assert_array_equal(out.rewards[0], [2, 2, 1])
    np.testing.assert_array_equal(out.mask[:, :2].sum(0), [3, 3])
    assert out.mask[3:, :2].sum() == 0 and out.terminated[3:, :2].min() == 1
    assert out.values is None and not out.rewards.flags.writeable
    assert merge.merge_trajectories([_traj(4, 2), _traj(4, 2)]).mask is None


def test_grid_values_and_trial_names():
    assert sweep.split_values("1e-3,3e-3") == ["1e-3", "3e-3"]
    assert sweep.split_values("[64,64],[256,256]") == ["[64,64]", "[256,256]"]
    assert sweep.grid_points(["a=1,2", "b=x"]) == [["a=1", "b=x"], ["a=2", "b=x"]]
    trials = sweep.plan(["a2c"], ["CartPole-v1"], [0], steps=100,
                        grid=["learning_rate=1e-3,3e-3"])
    assert [t.hyperparameters["learning_rate"] for t in trials] == [1e-3, 3e-3]
    assert trials[0].name == "a2c__CartPole-v1__learning-rate-1e-3__seed0"
    assert trials[1].label == "a2c learning_rate=3e-3"


# -- without Ray installed -----------------------------------------------------------------


def test_no_ray_names_the_extra_and_writes_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    code, _, err = train("--agent", "a2c", "--total-steps", "100", "--workers", "2",
                         "--out", tmp_path / "run", capsys=capsys)
    assert code == 2
    assert "pip install 'pgrad[ray]'" in one_error_line(err)
    assert not (tmp_path / "run").exists()
    code = run_cli(sweep_cli.main, ["--agents", "a2c", "--envs", "CartPole-v1",
                                               "--results", str(tmp_path / "sw")])
    assert code == 2 and "pgrad[ray]" in one_error_line(capsys.readouterr().err)


# -- on a local Ray instance -------------------------------------------------------------------


class _FakeRay:
    """``ray``'s two resource calls, with CPUs that come free after ``busy_polls`` polls."""

    def __init__(self, busy_polls):
        self.polls, self.busy_polls = 0, busy_polls

    def available_resources(self):
        self.polls += 1
        return {"CPU": 2.0 if self.polls > self.busy_polls else 1.0}

    def cluster_resources(self):
        return {"CPU": 2.0}


def test_waits_for_cpus_that_come_free_then_names_the_shortfall(monkeypatch):
    fake = _FakeRay(busy_polls=3)
    monkeypatch.setitem(sys.modules, "ray", fake)
    session.wait_for_cpus(2, patience_s=5.0)
    assert fake.polls == 4
    monkeypatch.setitem(sys.modules, "ray", _FakeRay(busy_polls=10**9))
    with pytest.raises(UserError, match=r"^--workers 2 needs 2 free CPUs in the Ray cluster; "
                                        r"it has 1 \(of 2\)\.$"):
        session.wait_for_cpus(2, patience_s=0.3)


@pytest.mark.subprocess
@pytest.mark.parametrize("agent, extra", [
    ("ppo", ("--set", "normalize_obs=true", "--set", "normalize_reward=true")),
    ("reinforce", ()),  # whole-episode batches
    ("ppo", ("--env", "CartPoleNoVel-v1", "--set", "recurrent=lstm", "--set", "lstm_units=8",
             "--set", "minibatch_size=32")),  # the LSTM's state travels with the worker
])
def test_one_worker_equals_in_process(ray_local, tmp_path, capsys, agent, extra):
    runs = {}
    for workers in (0, 1):
        out = tmp_path / f"w{workers}"
        code, _, err = train("--agent", agent, "--total-steps", "1200", "--seed", "3",
                             *SMALL, *extra, "--workers", workers, "--out", out, capsys=capsys)
        assert code == 0, err
        assert err == ""  # a clean terminal: no Ray banners or worker logs
        runs[workers] = episodes(out)
    assert len(runs[0]) > 10
    assert runs[1] == runs[0]


@pytest.mark.subprocess
def test_two_workers_are_deterministic(ray_local, tmp_path, capsys):
    runs = []
    for i in range(2):  # an env a module registers: each worker imports it
        out = tmp_path / f"r{i}"
        code, _, err = train("--agent", "a2c", "--env", "pgrad_app.perf.slow_env:SleepyCartPole-v1",
                             "--total-steps", "1500", "--seed", "1", *SMALL, "--workers", "2",
                             "--out", out, capsys=capsys)
        assert code == 0, err
        runs.append(episodes(out))
    assert "workers: 2" in (out / "config.yaml").read_text()
    steps = [int(s) for s, _, _ in runs[0]]
    assert len(runs[0]) > 20 and steps == sorted(steps)
    assert runs[0] == runs[1]


@pytest.mark.subprocess
def test_a_killed_worker_is_restarted_then_a_dead_one_stops_the_step(ray_local, capsys):
    import agents

    agent = agents.make("a2c", "CartPole-v1", seed=0, num_envs=4, n_steps=8)
    try:
        distributed.distribute(agent, 2)
        agent.step()
        ray_local.kill(agent.collector.actors[1], no_restart=False)
        info = agent.step()  # waits for Ray to restart it, then collects again
        assert info["env_steps"] == 64
        err = capsys.readouterr().err
        assert "rollout worker 2 of 2 died and was restarted" in err
        kill_for_good(ray_local, agent.collector.actors[0])
        with pytest.raises(distributed.WorkerError, match="rollout worker 1 of 2 died"):
            agent.step()
    finally:
        agent.close()


@pytest.mark.subprocess
def test_a_dead_worker_stops_the_run_with_its_checkpoint_intact(ray_local, tmp_path, capsys,
                                                                monkeypatch):
    rollout = distributed.RemoteCollector._rollout
    calls = []

    def killing(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 6:  # five updates of 64 steps done, each one checkpointed
            kill_for_good(ray_local, self.actors[1])
        return rollout(self, *args, **kwargs)

    monkeypatch.setattr(distributed.RemoteCollector, "_rollout", killing)
    out = tmp_path / "run"
    code, _, err = train("--agent", "a2c", "--total-steps", "2000", *SMALL, "--workers", "2",
                         "--checkpoint-every", "64", "--out", out, capsys=capsys)
    assert code == 1
    line = one_error_line(err)
    assert "rollout worker 2 of 2 died" in line and "is intact" in line
    monkeypatch.setattr(distributed.RemoteCollector, "_rollout", rollout)
    code, _, err = train("--resume", out, "--total-steps", "400", "--quiet", capsys=capsys)
    assert code == 0, err
    assert "resuming" in err and "from env step 320" in err


@pytest.mark.subprocess
def test_sweep_runs_trials_skips_finished_ones_and_aggregates(ray_local, tmp_path, capsys):
    script = sweep_cli
    argv = ["--agents", "a2c", "--envs", "CartPole-v1", "--seeds", "0", "1", "--grid",
            "learning_rate=1e-3,3e-3", "--steps", "300", "--eval-episodes", "2", "--results",
            str(tmp_path / "sw")]
    assert run_cli(script.main, argv) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "4 trials, 0 already" in out and "4 finished, 0 failed" in out
    runs = sorted(p.name for p in (tmp_path / "sw" / "runs").iterdir())
    assert len(runs) == 4 and all((tmp_path / "sw" / "runs" / r / "eval.json").is_file()
                                  for r in runs)
    readme = (tmp_path / "sw" / "README.md").read_text()
    assert "| a2c learning_rate=1e-3 | 2 (0, 1) |" in readme
    assert "| a2c learning_rate=3e-3 | 2 (0, 1) |" in readme
    assert (tmp_path / "sw" / "curves_CartPole-v1.png").is_file()
    assert run_cli(script.main, argv) == 0
    assert "4 trials, 4 already" in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.subprocess
def test_two_workers_learn_cartpole(ray_local, tmp_path, capsys):
    out = tmp_path / "run"
    code, _, err = train("--agent", "a2c", "--env", "CartPole-v1", "--total-steps", "200000",
                         "--seed", "0", "--stop-at-return", "475", "--workers", "2", "--quiet",
                         "--out", out, capsys=capsys)
    assert code == 0, err
    returns = [float(r) for _, r, _ in episodes(out)]
    assert np.mean(returns[-20:]) >= 475
