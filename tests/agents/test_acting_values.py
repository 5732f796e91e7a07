"""``V(o_t)`` from the acting call (``agents.base.ActorCriticAgent.values_from_acting``): a
compiled actor whose critic shares the encoder returns the values beside the distribution
parameters, the rollout stores them, and the update uses them instead of its own value pass over
the observations. Compared with the same agent and seed on the update's own pass
(``agents.base.VALUES_FROM_ACTING = False``, main's path).

Tolerance: the two sides compute each ``V(o_t)`` with the same weights on the same observations,
but on batches of different sizes (``B`` rows, or ``B / 2`` with ``vector_mode="overlap"``, in
the acting call; chunks of up to thousands of rows in the update). oneDNN may pick other kernels
or blockings by batch size, which changes float32 sums in their last bits: allowed here as
rtol 1e-5 / atol 1e-6 on values, advantages and returns (GAE adds at most ``1 / (1 - gamma
lambda)`` ~ 20 such errors), and rtol 1e-4 / atol 1e-6 on the weights after three updates (Adam
divides by the gradients' running RMS, which amplifies a relative error of small gradients). On
this machine they are bitwise equal in every case below.
"""

from __future__ import annotations

import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import tensorflow as tf

import agents
from agents import base
from agents.update import compiled as update_lib

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from policies import ImageEnv  # noqa: E402


class _RandomEnds(ImageEnv):
    """Episodes terminated at random (p = 0.15 a step) or truncated after ``length`` steps: both
    kinds of ends inside every rollout."""

    def step(self, action):
        obs, reward, _, trunc, info = super().step(action)
        term = bool(self.np_random.random() < 0.15)
        return obs, reward, term, trunc and not term, info


PLANES = "pgrad-test/ValuePlanes-v0"  # 10 x 10 x 4 bool as MinAtar (minatar_cnn, shared)
DICT = "pgrad-test/ValueDict-v0"  # Dict: 10 x 10 x 3 uint8 image and a 3-vector
if PLANES not in gym.registry:
    gym.register(PLANES, entry_point=_RandomEnds,
                 kwargs={"shape": (10, 10, 4), "dtype": np.bool_, "length": 5})
    gym.register(DICT, entry_point=_RandomEnds,
                 kwargs={"shape": (10, 10, 3), "vector": 3, "length": 5})

CASES = {
    "ppo_planes": ("ppo", PLANES, {"minibatch_size": 16, "epochs": 2, "clip_range_vf": 0.2}),
    "a2c_planes": ("a2c", PLANES, {}),
    "ppo_dict_normalised": ("ppo", DICT, {"minibatch_size": 16, "normalize_obs": True,
                                          "normalize_reward": True}),
    "ppo_overlap": ("ppo", PLANES, {"minibatch_size": 16, "vector_mode": "overlap"}),
}


_RUNS: dict = {}  # results by settings: a run repeated in another test is not run again


def _run(name: str, env: str, options: dict, from_acting: bool, monkeypatch,
         no_values_in_rollout: bool = False, updates: int = 3) -> dict:
    """``updates`` updates of 4 x 8 rollouts; returns the stored values, what the update's
    targets saw (values, next values, advantages, returns per update), the weights, and how many
    value passes each update graph traced."""
    key = (name, env, tuple(sorted(options.items())), from_acting, no_values_in_rollout, updates,
           update_lib.REUSE_NEXT_VALUES)
    if key not in _RUNS:
        _RUNS[key] = _fresh_run(name, env, options, from_acting, monkeypatch,
                                no_values_in_rollout, updates)
    return _RUNS[key]


def _fresh_run(name, env, options, from_acting, monkeypatch, no_values_in_rollout, updates):
    monkeypatch.setattr(base, "VALUES_FROM_ACTING", from_acting)
    agent = agents.make(name, env, seed=5, num_envs=4, n_steps=8, **options)
    assert agent.values_from_acting is from_acting
    if no_values_in_rollout:  # as a rollout worker's trajectories arrive: no values
        plain = agent.acting_fn
        agent.acting_fn = lambda rng, values=False: plain(rng)  # type: ignore[method-assign]
    seen: list[list[np.ndarray]] = []
    stored: list = []
    targets, inputs = agent.updater.targets, agent.updater.io.inputs

    def recording(rewards, terminated, truncated, values, next_values, *rest):
        adv, ret, extra = targets(rewards, terminated, truncated, values, next_values, *rest)

        def keep(*xs):
            seen.append([x.numpy() for x in xs])
            return 0

        tf.py_function(keep, [values, next_values, adv, ret], [tf.int32])  # runs: stateful
        return adv, ret, extra

    def spy(traj, *args):
        stored.append(traj.values)
        return inputs(traj, *args)

    passes = []
    chunked = agent.updater._chunked_values

    def counted(rows, n):
        passes.append(1)  # at trace time
        return chunked(rows, n)

    monkeypatch.setattr(agent.updater, "targets", recording)
    monkeypatch.setattr(agent.updater.io, "inputs", spy)
    monkeypatch.setattr(agent.updater, "_chunked_values", counted)
    for _ in range(updates):
        agent.step()
    out = {"seen": seen, "stored": stored, "passes": len(passes),
           "traces": agent.updater.tracing_count(),
           "weights": [v.numpy() for v in agent.net.variables]}
    agent.close()
    return out


def _assert_close(got: dict, want: dict) -> None:
    assert len(got["seen"]) == len(want["seen"]) > 0
    for a, b in zip(got["seen"], want["seen"]):
        for x, y, name in zip(a, b, ("values", "next_values", "advantages", "returns")):
            np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6, err_msg=name)
    for x, y in zip(got["weights"], want["weights"]):
        np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("case", list(CASES))
def test_values_from_acting_give_the_update_of_its_own_value_pass(case, monkeypatch):
    name, env, options = CASES[case]
    got = _run(name, env, options, True, monkeypatch)
    want = _run(name, env, options, False, monkeypatch)
    # the path really taken: values stored and one value pass (the next observations that are
    # not the following row's) instead of two
    assert len(got["stored"]) == 3 and all(v is not None and v.shape == (8, 4)
                                           for v in got["stored"])
    assert all(v is None for v in want["stored"])
    assert (got["passes"], want["passes"]) == (1, 2)
    assert got["traces"] == want["traces"] == 1
    for values, (v_update, *_) in zip(got["stored"], want["seen"]):  # stored == update's pass
        np.testing.assert_allclose(values, v_update, rtol=1e-5, atol=1e-6)
    _assert_close(got, want)


def test_the_rollouts_ends_are_inside_and_at_its_last_row(monkeypatch):
    """What the cases above cover: terminations and truncations inside every rollout (their
    next observations take the update's own pass), and the acting call's values at the rows
    after them (the reset observations)."""
    monkeypatch.setattr(base, "VALUES_FROM_ACTING", True)
    agent = agents.make("ppo", PLANES, seed=5, num_envs=4, n_steps=8, minibatch_size=16)
    traj, _ = agent.collector.collect(agent.acting_fn(np.random.default_rng(0), True), 8)
    assert traj.terminated[:-1].sum() > 0 and traj.truncated[:-1].sum() > 0
    want = agent.net.value(tf.constant(traj.observations.reshape(32, 10, 10, 4))).numpy()
    np.testing.assert_allclose(traj.values.ravel(), want, rtol=1e-5, atol=1e-6)
    agent.close()


def test_the_update_does_its_own_pass_for_a_rollout_without_values(monkeypatch):
    """A trajectory that carries no values (a Ray rollout worker's: the policy weights it gets
    leave out the critic's own layer) on an agent that takes them from acting: the update's
    own value pass, the same update."""
    got = _run("ppo", PLANES, CASES["ppo_planes"][2], True, monkeypatch,
               no_values_in_rollout=True)
    want = _run("ppo", PLANES, CASES["ppo_planes"][2], True, monkeypatch)
    assert all(v is None for v in got["stored"]) and got["passes"] == 2
    _assert_close(got, want)


def test_the_fused_acting_call_acts_as_the_plain_one():
    """Parameters from the call that also returns V are the plain call's, bit for bit (the
    same actions from the same generator); the values are the critic's."""
    agent = agents.make("ppo", DICT, seed=1, num_envs=4, n_steps=8, minibatch_size=16,
                        normalize_obs=True)
    mirror, layout = agent.mirror, agent.layout
    assert mirror.fused_values
    obs = agent.collector.current_obs
    params, none = mirror.forward(obs)
    fused, values = mirror.forward(obs, with_value=True)
    assert none is None
    np.testing.assert_array_equal(fused, params)
    np.testing.assert_allclose(values, agent.net.value(layout.to_tensors(obs)).numpy(),
                               rtol=1e-5, atol=1e-6)
    one, two = (agent.acting_fn(np.random.default_rng(3), v)(obs) for v in (False, True))
    np.testing.assert_array_equal(one[0], two[0])
    np.testing.assert_array_equal(one[2], two[2])
    assert one[3] is None and two[3].shape == (4,)
    agent.close()


@pytest.mark.parametrize("name, env, options, fused", [
    ("a2c", "CartPole-v1", {}, False),  # the numpy mirror: its MLP critic is cheaper batched
    ("a2c", PLANES, {"share_encoder": False}, False),  # a second CNN per acting call: not taken
    ("a2c", PLANES, {"recurrent": "lstm"}, False),  # the critic's value depends on its state
    ("impala", PLANES, {}, True),  # lagged actors: V must be the learner's
])
def test_values_stay_with_the_update_where_acting_cannot_give_them_exactly(name, env, options,
                                                                            fused, monkeypatch):
    agent = agents.make(name, env, seed=0, num_envs=2, n_steps=4, **options)
    stored, inputs = [], agent.updater.io.inputs
    monkeypatch.setattr(agent.updater.io, "inputs",
                        lambda traj, *a: stored.append(traj.values) or inputs(traj, *a))
    assert not agent.values_from_acting
    assert bool(getattr(agent.mirror, "fused_values", False)) is fused
    if fused:  # the acting call could: the agent's own rollout still takes none
        agent.step()
        assert stored == [None]
    else:  # the acting call cannot give them
        with pytest.raises(ValueError, match="values from the acting call"):
            agent.acting_fn(np.random.default_rng(0), True)
    traj, _ = agent.collector.collect(agent.acting_fn(np.random.default_rng(0)), 4)
    assert traj.values is None
    agent.close()


def test_reuse_of_next_values_off_takes_only_the_next_observations_pass(monkeypatch):
    """With ``update.REUSE_NEXT_VALUES`` off the update passes over every next observation:
    with values from acting, that pass alone."""
    monkeypatch.setattr(update_lib, "REUSE_NEXT_VALUES", False)
    got = _run("ppo", PLANES, CASES["ppo_planes"][2], True, monkeypatch, updates=1)
    want = _run("ppo", PLANES, CASES["ppo_planes"][2], False, monkeypatch, updates=1)
    assert (got["passes"], want["passes"]) == (1, 1)
    _assert_close(got, want)


def test_whole_episode_batches_with_a_baseline(monkeypatch):
    """REINFORCE with a learned baseline: whole-episode batches (masked steps, a shape that
    changes from batch to batch, the update's traced-per-shape path)."""
    options = {"baseline": True, "batch_steps": 16}
    got = _run("reinforce", PLANES, options, True, monkeypatch, updates=2)
    want = _run("reinforce", PLANES, options, False, monkeypatch, updates=2)
    assert all(v is not None for v in got["stored"]) and got["passes"] < want["passes"]
    _assert_close(got, want)
