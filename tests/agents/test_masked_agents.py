"""Action masks through the agents: training, acting, predict, export and evaluation."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest
import tensorflow as tf

import agents
import pgrad
from pgrad.rl.collection import masks
from pgrad.rl.envs.masked import OffersEnv

LOG3 = float(np.log(3.0))  # the entropy of 3 legal actions at most (of all 10: log 10 = 2.30)


class Counting(OffersEnv):
    """OffersEnv that counts illegal picks (a class attribute: sync vector envs share it)."""

    illegal = 0

    def step(self, action):
        if not self._legal[int(action)]:
            type(self).illegal += 1
        return super().step(action)


def counting(mask="info"):
    Counting.illegal = 0
    if mask == "method":
        return lambda: masks.ActionMasker(Counting(mask=None), lambda env: env.legal_actions())
    return lambda: Counting(mask=mask)


SMALL = {"a2c": {"n_steps": 8}, "ppo": {"n_steps": 16, "minibatch_size": 16, "epochs": 2},
         "reinforce": {"batch_steps": 40}, "npg": {"n_steps": 16}}


def make(name, env, **kw):
    return agents.make(name, env, seed=0, num_envs=2, hidden=(16,), **{**SMALL[name], **kw})


@pytest.mark.parametrize("name", sorted(SMALL))
def test_every_agent_trains_on_a_masked_env_and_never_acts_illegally(name):
    agent = make(name, counting())
    assert agent.collector.masks.source == "info"
    for _ in range(3):
        metrics = agent.step()["metrics"]
        assert np.isfinite([v for v in metrics.values() if np.isscalar(v)]).all()
        assert metrics["entropy"] <= LOG3 + 1e-5  # the update's entropy: over legal actions
    assert Counting.illegal == 0
    obs = np.stack([agent.observation_space.sample() for _ in range(50)])
    mask = obs[:, :10] > 0.5
    mask[np.arange(50), np.random.default_rng(0).integers(0, 10, 50)] = True
    for det in (True, False):
        actions = agent.predict(obs, deterministic=det, action_masks=mask)[0]
        assert mask[np.arange(50), actions].all()
    agent.close()


def test_behaviour_log_probs_are_the_update_s_masked_log_probs():
    """What acting stores is what the update recomputes on the same weights (PPO ratio 1)."""
    agent = make("ppo", counting())
    traj, _ = agent.collector.collect(agent.acting_fn(np.random.default_rng(0)), 16)
    obs = tf.constant(traj.observations.reshape(32, -1))
    actions = tf.constant(traj.actions.reshape(32))
    mask = tf.constant(traj.action_mask.reshape(32, 10))
    got = agent.updater._log_prob_only(obs, (actions, mask)).numpy()
    np.testing.assert_allclose(got, traj.log_probs.reshape(32), rtol=1e-5, atol=1e-6)
    unmasked = agent.updater._log_prob_only(obs, actions).numpy()
    assert not np.allclose(unmasked, traj.log_probs.reshape(32), atol=1e-2)
    agent.close()


def test_fused_and_full_engine_paths_give_the_same_masked_update():
    out = []
    for path in ("fused", "full"):
        agent = make("ppo", counting(), engine_path=path, ent_coef=0.01)
        agent.step()
        out.append([v.numpy() for v in agent.net.variables])
        agent.close()
    for a, b in zip(*out):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("mask", ["observation", "method"])
def test_dict_observation_and_method_conventions(mask):
    agent = make("a2c", counting(mask))
    assert agent.collector.masks.source == mask
    agent.step()
    agent.step()
    assert Counting.illegal == 0
    env = counting(mask)()
    obs, _ = env.reset(seed=1)
    for _ in range(20):  # predict on one raw observation (the Dict's key is the mask)
        given = None if mask == "observation" else env.action_masks()
        action = agent.predict(obs, action_masks=given)[0]
        obs, reward, *_ = env.step(action)
        assert reward > 0
    agent.close()


def test_predict_refuses_a_mask_that_forbids_everything():
    agent = make("a2c", counting())
    obs = np.zeros(11, np.float32)
    with pytest.raises(ValueError, match=r"predict/act\(action_masks=...\) gave an action_mask "
                                         "that forbids every action"):
        agent.predict(obs, action_masks=np.zeros(10, bool))[0]
    agent.close()


def test_masks_with_diagnostics_and_adversarial_acting():
    agent = make("a2c", counting(), diagnostics=True, adversarial_epsilon=0.05)
    metrics = agent.step()["metrics"]
    assert np.isfinite(metrics["diag_grad_snr"]) and metrics["entropy"] <= LOG3 + 1e-5
    assert Counting.illegal == 0
    agent.close()


def test_a_masked_env_with_a_box_action_space_fails_at_construction():
    class BoxOffers(OffersEnv):
        def __init__(self):
            super().__init__(mask="info")
            self.action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)

    with pytest.raises(ValueError, match="gives action masks .* is not Discrete or MultiDiscrete"):
        agents.make("a2c", BoxOffers, seed=0, num_envs=2)


# -- export and evaluation ------------------------------------------------------------------------


def offers_obs(n, seed=0):
    rng = np.random.default_rng(seed)
    obs = np.zeros((n, 11), np.float32)
    for row in obs:
        row[rng.choice(10, 3, replace=False)] = 1.0
    return obs, obs[:, :10] > 0


def test_export_acts_legally_with_a_mask_in_plain_tensorflow(tmp_path):
    agent = make("ppo", "MaskedOffers-v0")
    agent.step()
    agent.export_policy(str(tmp_path / "p"))
    loaded = tf.saved_model.load(str(tmp_path / "p"))
    obs, mask = offers_obs(64)
    out = loaded.action_masked(tf.constant(obs), tf.constant(mask)).numpy()
    assert mask[np.arange(64), out].all()
    np.testing.assert_array_equal(out, agent.predict(obs, action_masks=mask)[0])
    sig = loaded.signatures["action_masked"](observation=tf.constant(obs),
                                             action_mask=tf.constant(mask))
    np.testing.assert_array_equal(next(iter(sig.values())).numpy(), out)
    plain = loaded.action(tf.constant(obs)).numpy()  # the unmasked function is still there
    np.testing.assert_array_equal(plain, agent.predict(obs)[0])
    agent.close()


def test_export_of_a_dict_observation_policy_takes_the_mask_apart(tmp_path):
    agent = make("a2c", counting("observation"))
    agent.step()
    agent.export_policy(str(tmp_path / "p"))
    loaded = tf.saved_model.load(str(tmp_path / "p"))
    obs, mask = offers_obs(32, seed=1)
    out = loaded.action_masked(tf.constant(obs), tf.constant(mask)).numpy()
    want = agent.predict({"observation": obs, "action_mask": mask.astype(np.int8)})[0]
    np.testing.assert_array_equal(out, want)
    assert mask[np.arange(32), out].all()
    agent.close()


@pytest.mark.subprocess
def test_masked_export_runs_without_pgrad(tmp_path):
    import subprocess
    import sys

    agent = make("a2c", "MaskedOffers-v0")
    agent.step()
    agent.export_policy(str(tmp_path / "p"))
    obs, mask = offers_obs(5, seed=2)
    expected = agent.predict(obs, action_masks=mask)[0].tolist()
    agent.close()
    code = (
        "import sys, json, numpy as np, tensorflow as tf\n"
        f"m = tf.saved_model.load({str(tmp_path / 'p')!r})\n"
        f"obs = np.array({obs.tolist()!r}, np.float32)\n"
        f"mask = np.array({mask.tolist()!r}, bool)\n"
        "print(json.dumps(m.action_masked(obs, mask).numpy().tolist()))\n"
        "assert 'pgrad' not in sys.modules\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, env={"TF_CPP_MIN_LOG_LEVEL": "3", "PATH": "/usr/bin"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == expected


def test_evaluate_masks_agents_and_exports(tmp_path):
    agent = make("a2c", "MaskedOffers-v0")  # untrained: its argmax is one item most of the time
    masked = pgrad.evaluate(agent, episodes=4)
    assert min(masked["returns"]) >= 20 * 0.1  # every pick legal (worth 0.1 at least)
    plain = pgrad.evaluate(agent, env_id="PenaltyOffers-v0", episodes=4)  # no mask: illegal ones
    assert max(plain["returns"]) < min(masked["returns"])
    agent.export_policy(str(tmp_path / "p"))
    from_export = pgrad.evaluate(str(tmp_path / "p"), env_id="MaskedOffers-v0", episodes=4)
    assert from_export["returns"] == masked["returns"]
    sampled = pgrad.evaluate(agent, episodes=4, deterministic=False)
    assert min(sampled["returns"]) >= 20 * 0.1
    agent.close()


def test_evaluate_reads_a_dict_observation_mask():
    if "TestDictOffers-v0" not in gym.registry:
        gym.register("TestDictOffers-v0", entry_point=OffersEnv, kwargs={"mask": "observation"})
    agent = make("a2c", "TestDictOffers-v0")
    out = pgrad.evaluate(agent, episodes=3)
    assert min(out["returns"]) >= 20 * 0.1
    agent.close()


def test_save_and_load_keep_acting_masked(tmp_path):
    agent = make("ppo", "MaskedOffers-v0")
    agent.step()
    agent.save(tmp_path / "saved")
    loaded = agents.load(tmp_path / "saved")
    obs, mask = offers_obs(40, seed=3)
    np.testing.assert_array_equal(loaded.predict(obs, action_masks=mask)[0],
                                  agent.predict(obs, action_masks=mask)[0])
    assert loaded.collector.masks.source == "info"
    loaded.step()
    agent.close()
    loaded.close()


def test_gymnasium_taxi_info_masks():
    """Gymnasium's own masked env: Taxi-v4's info["action_mask"] (moves into walls masked)."""
    agent = agents.make("a2c", "Taxi-v4", seed=0, num_envs=2, n_steps=8)
    assert agent.collector.masks.source == "info"
    traj, _ = agent.collector.collect(agent.acting_fn(np.random.default_rng(0)), 50)
    assert not traj.action_mask.all()  # some moves were illegal, none taken
    taken = np.take_along_axis(traj.action_mask, traj.actions[..., None], -1)
    assert taken.all()
    agent.step()
    agent.close()
