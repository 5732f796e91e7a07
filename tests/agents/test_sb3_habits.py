"""Stable-Baselines3 habits on pgrad's agents: ``verbose``, ``Cls("MlpPolicy", env, **sb3)``,
``predict`` on what ``env.reset()`` returns, a plain function as ``transform=``, one-file
``save("x.zip")``, and vector envs in Gymnasium's default NEXT_STEP autoreset."""

from __future__ import annotations

import dataclasses
import zipfile

import gymnasium as gym
import numpy as np
import pytest
import tensorflow as tf

import agents
import pgrad
from agents.catalog import sb3_names


def weights(agent) -> list[np.ndarray]:
    return [v.numpy() for v in agent.net.variables]


def assert_same_weights(a, b, rtol=1e-5, atol=1e-6):
    for x, y in zip(weights(a), weights(b), strict=True):
        np.testing.assert_allclose(x, y, rtol=rtol, atol=atol)


# -- verbose ----------------------------------------------------------------------------------


@pytest.mark.parametrize("verbose", [0, 1, 2])
def test_verbose_means_what_sb3_s_does(verbose, capsys):
    agent = agents.PPO("MlpPolicy", "CartPole-v1", verbose=verbose, n_steps=16, batch_size=8)
    try:
        assert agent.verbose == verbose
        agent.learn(32)
        err = capsys.readouterr().err
    finally:
        agent.close()
    lines = [ln for ln in err.splitlines() if ln.strip()]
    updates = [ln for ln in lines if ln.startswith("update ")]
    if verbose == 0:
        assert lines == []
    elif verbose == 1:  # progress (off a terminal: a line per 10% of the run), no metrics
        assert any(ln.startswith("step ") for ln in lines) and updates == []
    else:  # progress and one line of metrics per update
        assert [u.split()[:4] for u in updates] == [["update", "1", "step", "16"],
                                                     ["update", "2", "step", "32"]]
        assert "policy_loss" in updates[0] and "grad_norm" in updates[0]


def test_verbose_in_make_and_with_a_config_and_progress_overrides(capsys):
    ppo = agents.get("ppo")
    agent = ppo(ppo.Config(n_steps=16, minibatch_size=16, num_envs=1), "CartPole-v1", verbose=1)
    try:
        assert agent.verbose == 1
        agent.learn(16, progress=False)  # an explicit progress wins
        assert capsys.readouterr().err == ""
    finally:
        agent.close()
    agent = agents.make("a2c", "CartPole-v1", n_steps=8, verbose=0)
    try:
        assert agent.verbose == 0
        agent.learn(16)
        assert capsys.readouterr().err == ""
    finally:
        agent.close()
    for bad in (3, -1, "1", True):
        with pytest.raises(ValueError, match="verbose must be 0 .*, 1 .* or 2"):
            agents.make("a2c", "CartPole-v1", verbose=bad)


# -- the SB3 constructor ----------------------------------------------------------------------


def test_sb3_constructor_equals_the_config_form():
    env = gym.make("CartPole-v1")
    sb3 = agents.PPO("MlpPolicy", env, n_steps=32, batch_size=16, n_epochs=2, ent_coef=0.01,
                     learning_rate=1e-3, gamma=0.98, gae_lambda=0.9, clip_range=0.1,
                     policy_kwargs=dict(net_arch=[32, 32]), seed=3, verbose=0)
    cfg = agents.PPOConfig(num_envs=1, n_steps=32, minibatch_size=16, epochs=2, ent_coef=0.01,
                           learning_rate=1e-3, gamma=0.98, gae_lambda=0.9, clip_range=0.1,
                           hidden=(32, 32), encoder="mlp")
    ours = agents.PPO(cfg, env_id="CartPole-v1", seed=3)
    try:
        assert sb3.cfg == cfg and sb3.seed == 3
        sb3.step()
        ours.step()
        assert_same_weights(sb3, ours, rtol=0, atol=0)
    finally:
        sb3.close()
        ours.close()


def test_sb3_constructor_keywords_and_other_classes():
    a2c = agents.A2C(policy="MlpPolicy", env="CartPole-v1", n_steps=5, tensorboard_log=None)
    try:
        assert isinstance(a2c, agents.A2C) and a2c.cfg.n_steps == 5
        assert a2c.cfg.encoder == "mlp" and a2c.cfg.num_envs == a2c.Config().num_envs
    finally:
        a2c.close()
    envs = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 2,
                                    autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    ppo = agents.PPO("MultiInputPolicy", envs, n_steps=8, batch_size=8)
    try:
        assert ppo.cfg.num_envs == 2 and ppo.cfg.encoder == "auto"
    finally:
        ppo.close()


def test_num_timesteps_is_the_env_step_counter():
    """SB3's ``model.num_timesteps`` reads pgrad's ``env_steps``: 0 before learning, then the
    env steps of the whole updates ``learn`` ran (2 updates of 4 envs x 5 steps)."""
    a2c = agents.A2C("MlpPolicy", "CartPole-v1", n_envs=4, n_steps=5, seed=0)
    try:
        assert a2c.num_timesteps == a2c.env_steps == 0
        a2c.learn(total_timesteps=40)
        assert a2c.num_timesteps == a2c.env_steps == 40
    finally:
        a2c.close()


def test_policy_names_and_refusals():
    assert {k: sb3_names.encoder_of(k) for k in sb3_names.POLICIES} == {
        "MlpPolicy": "mlp", "CnnPolicy": "nature_cnn", "MultiInputPolicy": "auto"}
    with pytest.raises(TypeError, match="policy 'LnMlpPolicy': pgrad takes 'MlpPolicy'.*"
                                        "Cls\\(Cls.Config\\(...\\), env_id=...\\)"):
        agents.PPO("LnMlpPolicy", "CartPole-v1")
    with pytest.raises(ValueError, match="nature_cnn"):  # a CNN on vector observations
        agents.PPO("CnnPolicy", "CartPole-v1")
    with pytest.raises(TypeError, match="dataclasses.replace\\(cfg, n_steps=...\\)"):
        agents.PPO(agents.PPOConfig(), "CartPole-v1", n_steps=8)
    with pytest.raises(TypeError, match="device is Stable-Baselines3's; pgrad: "):
        agents.PPO("MlpPolicy", "CartPole-v1", device="cpu")
    with pytest.raises(TypeError, match="Config.*unexpected keyword argument 'nonsense'"):
        agents.PPO("MlpPolicy", "CartPole-v1", nonsense=1)
    with pytest.raises(TypeError, match="policy given twice"):
        agents.PPO("MlpPolicy", "CartPole-v1", policy="MlpPolicy")


# -- predict on env.reset()'s pair ------------------------------------------------------------


def test_predict_on_the_reset_pair_says_to_pass_the_observation():
    env = gym.make("CartPole-v1")
    agent = agents.make("ppo", "CartPole-v1", num_envs=1)
    try:
        with pytest.raises(ValueError, match="^predict got the \\(obs, info\\) pair "
                                             "env.reset\\(\\) returns; pass the observation: "
                                             "obs, info = "):
            agent.predict(env.reset(seed=0))
        with pytest.raises(ValueError, match="env.step\\(\\) returns; pass the observation"):
            agent.predict(env.step(0))
        obs, _ = env.reset(seed=0)
        action, state = agent.predict(obs)
        assert env.action_space.contains(action.item()) and state is None
    finally:
        agent.close()


# -- a plain function as the transform --------------------------------------------------------


def doubled_advantage_weights(grads, advantages, **context):
    """``2 A_t grad log pi_t`` per step (per-step results: averaged over the steps)."""
    del context
    return [2.0 * g * tf.reshape(advantages, [-1] + [1] * (g.shape.rank - 1)) for g in grads]


def test_a_plain_function_transform_equals_its_chain():
    kw = dict(n_steps=8, num_envs=2, seed=1)
    by_fn = agents.make("a2c", "CartPole-v1", transform=doubled_advantage_weights, **kw)
    by_chain = agents.make("a2c", "CartPole-v1", transform=pgrad.chain(
        pgrad.weight_by("advantages"), pgrad.scale(2.0), pgrad.mean_steps()), **kw)
    plain = agents.make("a2c", "CartPole-v1", **kw)  # the default chain: without the 2
    try:
        assert by_fn.transform.name == "doubled_advantage_weights"
        start = weights(by_fn)
        for agent in (by_fn, by_chain, plain):
            agent.step()
        # the function runs on the materialised per-step path, the chain on the fused one
        assert by_fn.updater.step.transform.fused_form() is None
        assert by_chain.updater.step.transform.fused_form() is not None
        assert_same_weights(by_fn, by_chain)
        moved = [np.abs(b - a).max() for a, b in zip(start, weights(by_fn))]
        moved_plain = [np.abs(b - a).max() for a, b in zip(start, weights(plain))]
        assert max(abs(m - p) for m, p in zip(moved, moved_plain)) > 1e-6
    finally:
        for agent in (by_fn, by_chain, plain):
            agent.close()


def test_transform_of_another_kind_is_one_line():
    with pytest.raises(TypeError, match="transform must be a pgrad.GradientTransform or a "
                                        "function fn\\(grads, \\*\\*context\\); got int"):
        agents.make("a2c", "CartPole-v1", transform=3)


def test_dataclass_fields_unchanged_by_sb3_names():
    """The SB3 names map onto fields; the Config classes themselves are untouched."""
    fields = {f.name for f in dataclasses.fields(agents.PPOConfig)}
    assert {"minibatch_size", "epochs", "hidden"} <= fields
    assert not {"batch_size", "n_epochs", "policy_kwargs", "verbose"} & fields


# -- save("x.zip"): one file ------------------------------------------------------------------


def test_zip_save_is_one_file_that_loads_back_exactly(tmp_path):
    agent = agents.make("ppo", "CartPole-v1", num_envs=2, n_steps=16, minibatch_size=8,
                        epochs=2, seed=4)
    try:
        agent.step()
        assert agent.save(tmp_path / "x.zip") == tmp_path / "x.zip"
        assert sorted(p.name for p in tmp_path.iterdir()) == ["x.zip"]  # nothing left beside
        assert (tmp_path / "x.zip").is_file()
        with zipfile.ZipFile(tmp_path / "x.zip") as zf:
            names = zf.namelist()
        assert "agent.json" in names and any(n.startswith("checkpoints/") for n in names)
        assert any(n.startswith("policy/") for n in names) and ".pgrad-lock" not in names
        assert agents.PPO.load(tmp_path / "x.zip").env_steps == 32
        loaded = [agents.load(tmp_path / "x.zip"), agents.load(str(tmp_path / "x"))]
        try:
            for other in loaded:
                assert other.env_steps == agent.env_steps and other.cfg == agent.cfg
                assert_same_weights(other, agent, rtol=0, atol=0)
                opt = [v.numpy() for v in agent.optimizer.variables]
                for a, b in zip(opt, [v.numpy() for v in other.optimizer.variables], strict=True):
                    np.testing.assert_array_equal(a, b)
            # a continued step equals the original's (each from its env's reset by the seed, as
            # a loaded agent's env starts)
            agent.collector.reset(seed=agent.seed)
            agent.step()
            for other in loaded:
                other.step()
                assert other.env_steps == agent.env_steps
                assert_same_weights(other, agent, rtol=0, atol=0)
        finally:
            for other in loaded:
                other.close()
        agent.save(tmp_path / "dir")  # directory saves as before
        assert (tmp_path / "dir" / "agent.json").is_file()
        again = agents.load(tmp_path / "dir")
        assert again.env_steps == agent.env_steps
        again.close()
    finally:
        agent.close()


def test_a_failing_zip_save_leaves_the_previous_file(tmp_path, monkeypatch):
    from agents.persistence import archive

    agent = agents.make("a2c", "CartPole-v1", num_envs=1, n_steps=8)
    try:
        agent.save(tmp_path / "x.zip")
        before = (tmp_path / "x.zip").read_bytes()
        agent.step()

        def broken(directory, handle):
            handle.write(b"PK half a zip")
            raise OSError("disk full")

        monkeypatch.setattr(archive, "write_zip", broken)
        with pytest.raises(OSError, match="disk full"):
            agent.save(tmp_path / "x.zip")
        assert (tmp_path / "x.zip").read_bytes() == before
        assert sorted(p.name for p in tmp_path.iterdir()) == ["x.zip"]
        monkeypatch.undo()
        restored = agents.load(tmp_path / "x.zip")
        assert restored.env_steps == 0
        restored.close()
    finally:
        agent.close()
    (tmp_path / "bad.zip").write_bytes(b"not a zip")
    with pytest.raises(ValueError, match="bad.zip/agent.json: .*Not a directory"):
        agents.load(tmp_path / "bad.zip")


# -- vector envs in Gymnasium's default NEXT_STEP autoreset -----------------------------------


def rollouts(agent, count: int = 3, steps: int = 40) -> list:
    """``count`` collected rollouts (the agent's acting, updates between them)."""
    out = []
    for k in range(count):
        traj, episodes = agent.collector.collect(agent.acting_fn(np.random.default_rng(k)), steps)
        out.append((traj, episodes))
        agent.step()
    return out


def assert_same_rollouts(a, b):
    assert len(a) == len(b)
    for (ta, ea), (tb, eb) in zip(a, b):
        assert [e[1:] for e in ea] == [e[1:] for e in eb] and len(ea) > 0
        for name in ("observations", "actions", "rewards", "terminated", "truncated",
                     "log_probs", "next_observations"):
            np.testing.assert_array_equal(getattr(ta, name), getattr(tb, name), err_msg=name)


def sync_envs(mode, n=3):
    return gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * n, autoreset_mode=mode)


@pytest.mark.parametrize("recorded", [False, True])
def test_next_step_sync_env_collects_as_same_step(recorded):
    next_env = sync_envs("NextStep")
    if recorded:  # the user's own episode statistics inside: they stay right
        next_env = gym.wrappers.vector.RecordEpisodeStatistics(next_env)
    kw = dict(n_steps=8, seed=5)
    nxt = agents.make("a2c", next_env, **kw)
    same = agents.make("a2c", sync_envs(gym.vector.AutoresetMode.SAME_STEP), **kw)
    try:
        assert nxt.collector.envs.metadata["autoreset_mode"] == gym.vector.AutoresetMode.SAME_STEP
        got, want = rollouts(nxt), rollouts(same)
        assert_same_rollouts(got, want)
        # no reset step is a transition: each step after an episode's end continues from the
        # reset observation, never from the final one
        traj = got[0][0]
        ended = np.argwhere((traj.terminated + traj.truncated)[:-1] > 0)
        assert len(ended) > 0
        for t, b in ended:
            assert not np.array_equal(traj.observations[t + 1, b], traj.next_observations[t, b])
        assert_same_weights(nxt, same, rtol=0, atol=0)
    finally:
        nxt.close()
        same.close()


def test_make_vec_from_an_id_is_rebuilt_in_same_step():
    made = gym.make_vec("CartPole-v1", num_envs=4)  # CartPoleVectorEnv: NEXT_STEP only
    agent = agents.make("ppo", made, n_steps=32, seed=0)
    ours = agents.make("ppo", "CartPole-v1", num_envs=4, n_steps=32, seed=0)
    try:
        assert agent.cfg.num_envs == 4
        assert_same_rollouts(rollouts(agent, steps=32), rollouts(ours, steps=32))
    finally:
        agent.close()
        ours.close()


def test_a_next_step_env_that_cannot_convert_is_one_line():
    made = gym.wrappers.vector.RecordEpisodeStatistics(gym.make_vec("CartPole-v1", num_envs=2))
    with pytest.raises(ValueError, match="autoreset mode NEXT_STEP; pgrad collects with "
                                         "SAME_STEP .*AutoresetMode.SAME_STEP"):
        agents.make("a2c", made)
    disabled = sync_envs(gym.vector.AutoresetMode.DISABLED, 2)
    with pytest.raises(ValueError, match="autoreset mode DISABLED"):
        agents.make("a2c", disabled)
