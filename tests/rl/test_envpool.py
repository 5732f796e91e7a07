"""vector_mode="envpool": the adapter against Gymnasium's SAME_STEP vector env on the same env.

envpool seeds its envs with its own generator, so the two never start from the same state by
themselves. The comparison therefore copies each reset state of the envpool env into the
Gymnasium sub-env (CartPole's state is its observation; a MuJoCo state is ``qpos[1:], qvel`` of
the observation, the x position not entering the dynamics or the rewards) and then steps both
with the same actions: from there on the dynamics are deterministic, so the transitions,
termination/truncation flags, final observations and episode statistics must agree step by step.
Anything off -- a NEXT_STEP dummy step leaking through, a reset observation reported as the final
one, a flag on the wrong step, an episode length off by one -- breaks the lockstep.
"""

from __future__ import annotations

import sys

import gymnasium as gym
import numpy as np
import pytest

import agents
import pgrad  # noqa: F401  (first: silences TensorFlow)
from pgrad.rl.collection import rollout
from pgrad.rl.envs import envpool as envpool_env

needs_envpool = pytest.mark.skipif(not envpool_env.is_available(),
                                   reason="envpool is not installed (pip install 'pgrad[envpool]')")


def _has_mujoco() -> bool:
    try:
        gym.make("Hopper-v5").close()
    except Exception:
        return False
    return True


def set_cartpole_state(env, obs):
    env.unwrapped.state = np.asarray(obs, np.float64)


def set_mujoco_state(env, obs):
    u = env.unwrapped
    nq = u.model.nq
    u.set_state(np.concatenate([[0.0], obs[: nq - 1]]), np.asarray(obs[nq - 1:], np.float64))


#: env id -> (time limit, vector steps, state setter, actions(rng, B) -> [B, ...])
CASES = {
    # pushed right 80% of the time: falls in ~10-20 steps, so both kinds of end occur
    "CartPole-v1": (14, 80, set_cartpole_state, lambda rng, b: (rng.random(b) < 0.8).astype(int)),
    "Hopper-v5": (30, 100, set_mujoco_state, lambda rng, b: rng.uniform(-1, 1, (b, 3))),
    "HalfCheetah-v5": (20, 50, set_mujoco_state, lambda rng, b: rng.uniform(-1, 1, (b, 6))),
}


def lockstep(env_id: str, num_envs: int = 3, seed: int = 0):
    """Steps the envpool adapter and Gymnasium's sync SAME_STEP env in lockstep; asserts agreement.

    Returns the counts of terminations and truncations seen (so callers can check coverage).
    """
    limit, steps, set_state, sample = CASES[env_id]
    ours = gym.wrappers.vector.RecordEpisodeStatistics(
        envpool_env.EnvpoolVectorEnv(env_id, num_envs, seed=seed, max_episode_steps=limit))
    ref = rollout.make_vec_env(lambda: gym.make(env_id, max_episode_steps=limit), num_envs)
    assert ours.metadata["autoreset_mode"] == ref.metadata["autoreset_mode"]
    assert ours.single_observation_space.shape == ref.single_observation_space.shape
    assert ours.single_observation_space.dtype == ref.single_observation_space.dtype
    a, ra = ours.single_action_space, ref.single_action_space
    assert type(a) is type(ra) and a.shape == ra.shape  # (MuJoCo: float64 here, float32 there)
    if isinstance(a, gym.spaces.Box):
        np.testing.assert_array_equal(a.low, ra.low)
        np.testing.assert_array_equal(a.high, ra.high)
    else:
        assert a == ra

    obs, _ = ours.reset(seed=seed)
    ref.reset(seed=seed)
    subs = ref.unwrapped.envs
    for b in range(num_envs):
        set_state(subs[b], obs[b])
    rng = np.random.default_rng(seed)
    counts = {"terminated": 0, "truncated": 0, "both": 0}
    for t in range(steps):
        actions = sample(rng, num_envs)
        o, r, term, trunc, info = ours.step(actions)
        ro, rr, rterm, rtrunc, rinfo = ref.step(actions)
        where = f"{env_id} step {t}"
        np.testing.assert_array_equal(term, rterm, err_msg=where)
        np.testing.assert_array_equal(trunc, rtrunc, err_msg=where)
        np.testing.assert_allclose(r, rr, rtol=1e-5, atol=1e-5, err_msg=where)
        assert r.dtype == rr.dtype and term.dtype == rterm.dtype == trunc.dtype
        done = term | trunc
        np.testing.assert_array_equal(info.get("_final_obs", np.zeros(num_envs, bool)), done)
        np.testing.assert_array_equal(info.get("_episode", np.zeros(num_envs, bool)),
                                      rinfo.get("_episode", np.zeros(num_envs, bool)))
        for b in range(num_envs):
            if done[b]:
                # the true last observation, not the reset one ...
                np.testing.assert_allclose(info["final_obs"][b], rinfo["final_obs"][b],
                                           rtol=1e-5, atol=1e-6, err_msg=where)
                assert info["elapsed_step"][b] == 0
                np.testing.assert_allclose(info["episode"]["r"][b], rinfo["episode"]["r"][b],
                                           rtol=1e-5, err_msg=where)
                assert info["episode"]["l"][b] == rinfo["episode"]["l"][b]
                # ... and the returned observation starts a new episode: continue both from it.
                assert not np.allclose(o[b], info["final_obs"][b])
                set_state(subs[b], o[b])
            else:
                np.testing.assert_allclose(o[b], ro[b], rtol=1e-5, atol=1e-6, err_msg=where)
        counts["terminated"] += int(term.sum())
        counts["truncated"] += int(trunc.sum())
        counts["both"] += int((term & trunc).sum())
    ours.close()
    ref.close()
    return counts


@needs_envpool
def test_cartpole_matches_gymnasium_same_step():
    counts = lockstep("CartPole-v1")
    assert counts["terminated"] >= 3 and counts["truncated"] >= 3  # both kinds of end happened
    assert counts["both"] >= 1  # a fall on the time limit's step


@needs_envpool
@pytest.mark.skipif(not _has_mujoco(), reason="gymnasium[mujoco] is not installed")
@pytest.mark.parametrize("env_id", ["Hopper-v5", "HalfCheetah-v5"])
def test_mujoco_matches_gymnasium_same_step(env_id):
    counts = lockstep(env_id)
    assert counts["truncated"] >= 3
    if env_id == "Hopper-v5":
        assert counts["terminated"] >= 1  # it falls over under random actions


def steps_to_fall(seed: int) -> int:
    """Steps until env 0 of an envpool CartPole (seed) falls when always pushed right."""
    env = envpool_env.EnvpoolVectorEnv("CartPole-v1", 1, seed=seed)
    env.reset(seed=seed)
    for t in range(1, 100):
        _, _, term, _, _ = env.step(np.ones(1, np.int64))
        if term[0]:
            env.close()
            return t
    raise AssertionError("CartPole did not fall")


@needs_envpool
def test_termination_on_the_time_limit_step_is_terminated_and_truncated():
    """As Gymnasium's TimeLimit: a fall on the last allowed step is both flags, not truncation."""
    k = steps_to_fall(seed=0)
    env = envpool_env.EnvpoolVectorEnv("CartPole-v1", 1, seed=0, max_episode_steps=k)
    env.reset(seed=0)
    flags = [env.step(np.ones(1, np.int64))[2:4] for _ in range(k)]
    expected = [(False, False)] * (k - 1) + [(True, True)]
    assert [(bool(a[0]), bool(b[0])) for a, b in flags] == expected
    env.close()
    ref = gym.make("CartPole-v1", max_episode_steps=k)
    ref.reset(seed=0)
    env = envpool_env.EnvpoolVectorEnv("CartPole-v1", 1, seed=0, max_episode_steps=k)
    obs, _ = env.reset(seed=0)
    set_cartpole_state(ref, obs[0])
    for _ in range(k):
        _, _, term, trunc, _ = ref.step(1)
    assert term and trunc


@needs_envpool
@pytest.mark.filterwarnings("ignore:.*precision lowered")
def test_raw_envpool_reports_a_termination_on_the_limit_as_truncation():
    """Why the adapter applies the time limit itself (if envpool changes this, re-read it)."""
    import envpool

    k = steps_to_fall(seed=0)
    pool = envpool.make("CartPole-v1", "gymnasium", num_envs=1, seed=0, max_episode_steps=k)
    pool.reset()
    for _ in range(k):
        _, _, term, trunc, _ = pool.step(np.ones(1, np.int64))
    assert not term[0] and trunc[0]
    # ... and its autoreset is NEXT_STEP: the following step is a dummy reset step.
    _, r, term, trunc, info = pool.step(np.ones(1, np.int64))
    assert r[0] == 0 and not term[0] and not trunc[0] and info["elapsed_step"][0] == 0
    pool.close()


@needs_envpool
def test_reset_seed_reproduces_episodes():
    env = envpool_env.EnvpoolVectorEnv("CartPole-v1", 2, seed=0)

    def run(seed):
        obs, _ = env.reset(seed=seed)
        out = [obs]
        for _ in range(30):
            out.append(env.step(np.ones(2, np.int64))[0])
        return np.stack(out)

    a, b, c = run(3), run(3), run(4)
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a[0], c[0])
    assert not np.allclose(a[0, 0], a[0, 1])  # sub-envs get different seeds
    env.close()


@needs_envpool
def test_unsupported_ids_are_clear_errors():
    with pytest.raises(ValueError, match="'NoSuchEnv-v0'"):
        rollout.make_vec_env("NoSuchEnv-v0", 2, "envpool")
    # envpool has LunarLander (box2d), but the backend admits classic control, MuJoCo, Atari only
    with pytest.raises(ValueError, match="'LunarLander-v3'.*envpool.box2d"):
        rollout.make_vec_env("LunarLander-v3", 2, "envpool")
    with pytest.raises(TypeError, match="registered env id"):
        rollout.make_vec_env(lambda: gym.make("CartPole-v1"), 2, "envpool")
    ids = envpool_env.supported_ids()
    assert {"CartPole-v1", "HalfCheetah-v5", "Pong-v5"} <= set(ids)
    assert "LunarLander-v3" not in ids


def test_missing_envpool_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "envpool", None)  # import envpool -> ImportError
    assert not envpool_env.is_available()
    with pytest.raises(ImportError, match=r"pip install 'pgrad\[envpool\]'"):
        rollout.make_vec_env("CartPole-v1", 2, "envpool")
    cfg = agents.A2C.Config(vector_mode="envpool")
    cfg.validate()  # the mode is always a valid setting; only making the env needs the package


@needs_envpool
def test_a2c_collects_from_envpool():
    cfg = agents.A2C.Config(num_envs=4, n_steps=8, vector_mode="envpool")
    agent = agents.A2C(cfg, env_id="CartPole-v1", seed=0)
    assert "Envpool" in repr(agent.collector.envs)
    episodes = []
    for _ in range(40):
        episodes += agent.step()["episodes"]
    traj, _ = agent.collector.collect(agent.acting_fn(np.random.default_rng(0)), 64)
    assert traj.observations.shape == (64, 4, 4) and traj.observations.dtype == np.float32
    done = (traj.terminated + traj.truncated) > 0
    assert done.any() and episodes
    # where an episode ended the next observation is its last one: out of bounds for CartPole
    # terminations, never the reset state (|x| <= 0.05 everywhere)
    ended = traj.next_observations[done.astype(bool)]
    assert (np.abs(ended).max(axis=1) > 0.05).all()
    within = ~done.astype(bool)[:-1]
    np.testing.assert_array_equal(traj.next_observations[:-1][within],
                                  traj.observations[1:][within])
    agent.close()
