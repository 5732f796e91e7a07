"""The update on image rollouts whose frames are stored once
(pgrad.rl.observations.frames.NextFrames):
the same weights, bit for bit, as on the whole next observations, and one trace for every
number of final frames."""

from __future__ import annotations

import sys
from pathlib import Path

import gymnasium as gym
import numpy as np

import agents
import pgrad  # noqa: F401

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from policies import ImageEnv  # noqa: E402


class _RandomEnds(ImageEnv):
    """Episodes terminated at random (p = 0.2 a step) or truncated after 5 steps: a different
    number of final frames in each rollout, some at its last row."""

    def step(self, action):
        obs, reward, _, trunc, info = super().step(action)
        term = bool(self.np_random.random() < 0.2)
        return obs, reward, term, trunc and not term, info


ENDS_DICT = "pgrad-test/RandomEndsDict-v0"  # Dict: 10 x 10 x 3 uint8 image and a 3-vector
if ENDS_DICT not in gym.registry:
    gym.register(ENDS_DICT, entry_point=_RandomEnds,
                 kwargs={"shape": (10, 10, 3), "vector": 3, "length": 5})


def _run(env: str, whole: bool, monkeypatch) -> tuple[list, list[int], int]:
    """Two PPO updates; ``whole``: the graph gets the whole next observations (the form
    before frames were stored once: rows 1..T of the frames with the finals put back, then the
    comparison of every next observation with the following row). Returns the weights, the
    number of final frames of each rollout (and of them at its last row) and the update's
    trace count."""
    agent = agents.make("ppo", env, seed=7, num_envs=3, n_steps=8, minibatch_size=8, epochs=2,
                        normalize_obs=True)
    io, finals = agent.updater.io, []
    inputs, unpack = io.inputs, io.unpack

    def counted(traj, *args):
        index = traj.next_frames.index  # [K, 2] (t, b)
        finals.append((len(index), int((index[:, 0] == 7).sum())))  # K, of them at the last row
        return inputs(traj, *args)

    def whole_next(*args):
        out = unpack(*args)
        return (out[0], io.next_observations(out[1]), *out[2:])

    monkeypatch.setattr(io, "inputs", counted)
    if whole:
        monkeypatch.setattr(io, "unpack", whole_next)
    for _ in range(2):
        agent.step()
    weights = [v.numpy() for v in agent.net.variables]
    traces = agent.updater.tracing_count()
    agent.close()
    return weights, finals, traces


def test_update_on_frames_stored_once_equals_the_update_on_whole_next_observations(monkeypatch):
    """On Dict observations (an image and a normalised vector: both kinds of part; a plain
    image is the same path without the vector)."""
    got, finals, traces = _run(ENDS_DICT, False, monkeypatch)
    want, finals_whole, _ = _run(ENDS_DICT, True, monkeypatch)
    assert finals == finals_whole and len({k for k, _ in finals}) > 1  # K changed
    assert any(last for _, last in finals)  # episodes ended at the last row too
    assert traces == 1  # one trace for every K
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)  # bit for bit: the same rows in the same passes
