"""COMA's counterfactual advantage: the transform, its critic's inputs, and ``credit="coma"``.

The transform's weights against a plain loop over agents and alternative actions of a joint Q
table; its gradient through the chain (fused and materialised) against ``tape.jacobian``; the
critic's input layout decoded row by row; bad contexts and bad settings in one line; the agents
taking one update with it, and keeping the critic in their checkpoints.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import tensorflow as tf

import agents
import pgrad
from pgrad.rl.multiagent.counterfactual import (
    CounterfactualCritic,
    critic_input_size,
    critic_inputs,
)
from pgrad.rl.multiagent.cue_game import CueGame
from pgrad.transforms import TransformError, clip_ratio, transform_from_spec
from pgrad.transforms.counterfactual import counterfactual_advantage, counterfactual_advantages

N_AGENTS, K = 3, 3


def _joint_case(seed: int = 0, steps: int = 4):
    """A joint Q table ``[steps, k, k, k]``, each agent's policy ``[steps, n, k]`` and the
    joint actions ``[steps, n]``; returned with the rows the transform reads (row ``t n + a``):
    ``q[row, u'] = Q_t(u_-a, u')``, ``probs[row] = pi_a``, ``actions[row] = u_a``."""
    rng = np.random.default_rng(seed)
    table = rng.normal(size=(steps,) + (K,) * N_AGENTS).astype(np.float32)
    pi = rng.dirichlet(np.ones(K), size=(steps, N_AGENTS)).astype(np.float32)
    joint = rng.integers(K, size=(steps, N_AGENTS))
    q = np.zeros((steps * N_AGENTS, K), np.float32)
    for t, a, alt in itertools.product(range(steps), range(N_AGENTS), range(K)):
        u = joint[t].copy()
        u[a] = alt
        q[t * N_AGENTS + a, alt] = table[(t, *u)]
    return table, pi, joint, q, pi.reshape(-1, K), joint.reshape(-1).astype(np.int32)


def _loop_advantages(table, pi, joint) -> np.ndarray:
    """``A_a = Q(u) - sum_u' pi_a(u') Q(u_-a, u')`` by a plain loop, rows ``t n + a``."""
    out = []
    for t in range(joint.shape[0]):
        for a in range(N_AGENTS):
            baseline = 0.0
            for alt in range(K):
                u = joint[t].copy()
                u[a] = alt
                baseline += pi[t, a, alt] * table[(t, *u)]
            out.append(table[(t, *joint[t])] - baseline)
    return np.array(out, np.float32)


def _context(q, probs, actions, **extra):
    return {"q_values": tf.constant(q), "action_probs": tf.constant(probs),
            "taken_actions": tf.constant(actions), **extra}


def _weights(transform, ctx, steps):
    """The per-step weights the transform applies (its update on per-step gradients of 1)."""
    grads, _ = transform.update([tf.ones([steps, 1])], transform.init([]), **ctx)
    return grads[0].numpy()[:, 0]


def test_weights_equal_a_loop_over_agents_and_alternative_actions():
    table, pi, joint, q, probs, actions = _joint_case()
    want = _loop_advantages(table, pi, joint)
    np.testing.assert_allclose(counterfactual_advantages(q, probs, actions).numpy(), want,
                               rtol=1e-5, atol=1e-6)
    ctx = _context(q, probs, actions)
    np.testing.assert_allclose(_weights(counterfactual_advantage(), ctx, len(actions)), want,
                               rtol=1e-5, atol=1e-6)
    standardized = (want - want.mean()) / (want.std(ddof=1) + 1e-8)
    np.testing.assert_allclose(
        _weights(counterfactual_advantage(standardize=True), ctx, len(actions)), standardized,
        rtol=1e-4, atol=1e-5)


def test_the_baseline_ignores_the_agents_own_action():
    """Changing agent a's action changes only Q(s, u): the baseline stays (COMA's property)."""
    table, pi, joint, q, probs, actions = _joint_case(seed=1)
    first = counterfactual_advantages(q, probs, actions).numpy()
    other = (actions + 1) % K
    second = counterfactual_advantages(q, probs, other).numpy()
    rows = np.arange(len(actions))
    np.testing.assert_allclose(first - second, q[rows, actions] - q[rows, other], atol=1e-6)


def test_with_a_clip_range_it_is_ppo_clip_on_the_counterfactual_advantage():
    table, pi, joint, q, probs, actions = _joint_case(seed=2)
    T = len(actions)
    rng = np.random.default_rng(3)
    behaviour = np.log(probs[np.arange(T), actions])
    current = behaviour + rng.normal(scale=0.3, size=T).astype(np.float32)
    ctx = _context(q, probs, actions, log_probs=tf.constant(current),
                   behaviour_log_probs=tf.constant(behaviour), clip_range=tf.constant(0.2))
    got = _weights(counterfactual_advantage("clip_range"), ctx, T)
    adv = _loop_advantages(table, pi, joint)
    ppo = clip_ratio(0.2)
    want = _weights(ppo, {**ctx, "advantages": tf.constant(adv)}, T)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    ratio = np.exp(current - behaviour)  # the same, by hand
    by_hand = np.where(ratio * adv <= np.clip(ratio, 0.8, 1.2) * adv, adv * ratio, 0.0)
    np.testing.assert_allclose(got, by_hand, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("epsilon", [None, 0.2])
@pytest.mark.parametrize("path", ["fused", "full"])
def test_gradient_through_the_chain_equals_the_jacobian_reference(epsilon, path):
    """A linear-softmax policy on 12 rows: the engine's gradient of chain(counterfactual_advantage,
    mean_steps) equals sum_t c_t d log pi_t / d theta / T with the jacobian from tape.jacobian."""
    table, pi, joint, q, probs, actions = _joint_case(seed=4)
    T, D = len(actions), 5
    rng = np.random.default_rng(5)
    x = tf.constant(rng.normal(size=(T, D)).astype(np.float32))
    w = tf.Variable(rng.normal(scale=0.5, size=(D, K)).astype(np.float32))
    acts = tf.constant(actions)

    def log_prob_fn(obs, a):
        return tf.gather(tf.nn.log_softmax(obs @ w), a, axis=1, batch_dims=1)  # [T]

    behaviour = log_prob_fn(x, acts).numpy() - rng.normal(scale=0.2, size=T).astype(np.float32)
    ctx = _context(q, probs, actions, behaviour_log_probs=tf.constant(behaviour))
    chain = pgrad.chain(counterfactual_advantage(epsilon), pgrad.mean_steps())
    out = pgrad.run_engine(chain, chain.init([w]), log_prob_fn, [w], (x, acts), ctx, path=path)
    with tf.GradientTape() as tape:
        lp = log_prob_fn(x, acts)
    jac = tape.jacobian(lp, w).numpy()  # [T, D, K]
    adv = _loop_advantages(table, pi, joint)
    if epsilon is None:
        c = adv
    else:
        ratio = np.exp(lp.numpy() - behaviour)
        c = np.where(ratio * adv <= np.clip(ratio, 1 - epsilon, 1 + epsilon) * adv,
                     adv * ratio, 0.0)
    want = np.einsum("t,tdk->dk", c, jac) / T
    np.testing.assert_allclose(out.grads[0].numpy(), want, rtol=1e-4, atol=1e-6)


def _one_line(err: pytest.ExceptionInfo) -> str:
    text = str(err.value)
    assert "\n" not in text
    return text


@pytest.mark.parametrize("drop, needle", [("q_values", "'q_values'"),
                                          ("action_probs", "'action_probs'"),
                                          ("taken_actions", "'taken_actions'")])
def test_a_missing_context_key_is_one_line(drop, needle):
    _, _, _, q, probs, actions = _joint_case()
    ctx = _context(q, probs, actions)
    del ctx[drop]
    with pytest.raises(TransformError) as err:
        _weights(counterfactual_advantage(), ctx, len(actions))
    assert needle in _one_line(err) and "counterfactual_advantage" in str(err.value)


def test_wrong_action_counts_and_shapes_are_one_line():
    _, _, _, q, probs, actions = _joint_case()
    T = len(actions)
    t = counterfactual_advantage()
    with pytest.raises(TransformError) as err:  # Q over 3 actions, the policy over 4
        _weights(t, _context(q, np.full((T, 4), 0.25, np.float32), actions), T)
    assert "3 actions" in _one_line(err) and "has 4" in str(err.value)
    with pytest.raises(TransformError) as err:  # one Q value per step, not per action
        _weights(t, _context(q[:, 0], probs, actions), T)
    assert "[T, k]" in _one_line(err)
    with pytest.raises(TransformError) as err:
        _weights(t, _context(q, probs, actions.astype(np.float32)), T)
    assert "integers" in _one_line(err)
    with pytest.raises(TransformError) as err:
        _weights(t, _context(q, probs[:-1], actions), T)
    assert "steps" in _one_line(err)


def test_registered_by_name():
    _, _, _, q, probs, actions = _joint_case()
    chain = transform_from_spec(["counterfactual_advantage", "sum_steps"])
    grads, _ = chain.update([tf.ones([len(actions), 1])], chain.init([]),
                            **_context(q, probs, actions))
    want = counterfactual_advantages(q, probs, actions).numpy().sum()
    np.testing.assert_allclose(grads[0].numpy(), [want], rtol=1e-5)


# -- the critic's inputs and outputs -------------------------------------------------------------


@pytest.mark.parametrize("joint", [False, True])
def test_critic_inputs_layout(joint):
    """Row b n + i: [its own row (or the copy's rows end to end) | one-hot i | every other
    agent's action one-hot, its own block zero]."""
    T, n, B, D, k = 3, 3, 2, 4, 5
    rng = np.random.default_rng(6)
    obs = rng.normal(size=(T, n * B, D)).astype(np.float32)
    actions = rng.integers(k, size=(T, n * B))
    x = critic_inputs(obs, actions, n, k, joint=joint)
    F = critic_input_size(D, n, k, joint)
    assert x.shape == (T, n * B, F) and x.dtype == np.float32
    c = n * D if joint else D
    for t, b, i in itertools.product(range(T), range(B), range(n)):
        row = x[t, b * n + i]
        want_central = obs[t, b * n:(b + 1) * n].reshape(-1) if joint else obs[t, b * n + i]
        np.testing.assert_array_equal(row[:c], want_central)
        np.testing.assert_array_equal(row[c:c + n], np.eye(n)[i])
        blocks = row[c + n:].reshape(n, k)
        for j in range(n):
            want = np.zeros(k) if j == i else np.eye(k)[actions[t, b * n + j]]
            np.testing.assert_array_equal(blocks[j], want)


def test_critic_inputs_refuse_bad_shapes_in_one_line():
    obs = np.zeros((2, 6, 4), np.float32)
    for args, needle in [((obs, np.zeros((2, 5), int), 3, 2), "[T, n B]"),
                         ((obs, np.zeros((2, 6), int), 4, 2), "not 4 agents"),
                         ((obs, np.full((2, 6), 2), 3, 2), "[0, 2)")]:
        with pytest.raises(ValueError) as err:
            critic_inputs(*args)
        assert needle in _one_line(err)


def test_critic_answers_one_value_per_action_and_fits_its_targets():
    T, n, B, D, k = 20, 2, 8, 3, 3
    rng = np.random.default_rng(7)
    obs = rng.normal(size=(T, n * B, D)).astype(np.float32)
    actions = rng.integers(k, size=(T, n * B))
    x = critic_inputs(obs, actions, n, k).reshape(T * n * B, -1)
    critic = CounterfactualCritic(x.shape[1], k, hidden=(32,), learning_rate=3e-3, seed=1)
    assert critic.q_values(x).shape == (T * n * B, k)
    targets = (actions.reshape(-1) == 1).astype(np.float32) + obs[..., 0].reshape(-1)
    first = critic.fit(x, actions.reshape(-1), targets, 1, 4, np.random.default_rng(0))
    later = critic.fit(x, actions.reshape(-1), targets, 30, 4, np.random.default_rng(1))
    assert later < 0.5 * first
    with pytest.raises(ValueError) as err:
        critic.q_values(x[:, :-1])
    assert f"[N, {x.shape[1]}]" in _one_line(err)
    assert set(critic.trackables()) == {"counterfactual_q", "counterfactual_optimizer"}


# -- the agents ------------------------------------------------------------------------------------

SMALL = dict(num_envs=2, n_steps=8, epochs=1, num_minibatches=2, hidden=(8,), verbose=0)


def _game():
    return CueGame(n_agents=3, n_actions=3, episode_steps=4)


def _check_update(agent, joint: bool) -> None:
    assert agent.transform.name == "ppo_coma"
    assert agent.credit.joint == joint  # IPPO's rows carry no state: the joint observation
    metrics = agent.step()["metrics"]
    assert np.isfinite(metrics["coma_q_loss"]) and np.isfinite(metrics["policy_loss"])
    assert agent.credit.q.shape == (8, 6, 3)  # [T, n B, k]: what the chain's context held
    np.testing.assert_allclose(agent.credit.probs.numpy().sum(-1), 1.0, rtol=1e-5)
    assert "counterfactual_q" in agent.trackables()


def test_ippo_updates_with_the_counterfactual_chain():
    agent = agents.make("ippo", _game, seed=0, credit="coma", **SMALL)
    try:
        _check_update(agent, joint=True)
    finally:
        agent.close()
    plain = agents.make("ippo", _game, seed=0, **SMALL)  # the default is unchanged
    try:
        assert plain.transform.name == "ppo" and getattr(plain, "credit", None) is None
    finally:
        plain.close()


def test_mappo_updates_with_it_and_saves_and_loads_the_critic(tmp_path):
    agent = agents.make("mappo", "pgrad.rl.multiagent.cue_game:parallel_env", seed=0,
                        credit="coma", **{**SMALL, "num_envs": 1})
    try:
        assert agent.credit.q.shape == (8, 8, 4)
        agent.step()
        assert agent.transform.name == "ppo_coma" and not agent.credit.joint
        agent.save(tmp_path / "a")
        weights = [w.numpy() for w in agent.credit.critic.model.weights]
    finally:
        agent.close()
    loaded = agents.load(tmp_path / "a")
    try:
        assert loaded.cfg.credit == "coma"
        for got, want in zip(loaded.credit.critic.model.weights, weights):
            np.testing.assert_array_equal(got.numpy(), want)
    finally:
        loaded.close()


class _Leaves(CueGame):
    """agent_0 leaves after the first step."""

    def step(self, actions):
        gone = self.t >= 1
        self.agents = list(self.possible_agents)
        obs, rew, te, tr, info = super().step({"agent_0": 0, **actions})
        for part in (obs, rew, te, tr, info) if gone else ():
            part.pop("agent_0", None)
        te.update({} if gone else {"agent_0": True})
        self.agents = [a for a in self.agents if a != "agent_0"]
        return obs, rew, te, tr, info


def test_bad_settings_are_one_line():
    with pytest.raises(ValueError) as err:
        agents.make("mappo", _game, credit="difference", **SMALL)
    assert "credit must be one of" in _one_line(err)
    agent = agents.make("mappo", lambda: _Leaves(3, 3, 4), credit="coma", seed=0, **SMALL)
    try:
        with pytest.raises(ValueError) as err:
            agent.step()
        assert "every agent to act at every step" in _one_line(err)
    finally:
        agent.close()


def test_cue_game_rewards_the_fraction_of_matched_cues():
    game = CueGame(n_agents=4, n_actions=3, episode_steps=2)
    obs, _ = game.reset(seed=0)
    cues = [int(np.argmax(obs[a][:3])) for a in game.possible_agents]
    np.testing.assert_array_equal(game.state()[:-1], np.eye(3)[cues].reshape(-1))
    assert obs["agent_0"][-1] == 0.0 and game.state()[-1] == 0.0
    acts = {a: (c if i < 3 else (c + 1) % 3) for i, (a, c) in
            enumerate(zip(game.possible_agents, cues))}  # three of four match
    obs, rew, term, trunc, _ = game.step(acts)
    assert set(rew.values()) == {0.75} and not any(trunc.values()) and not any(term.values())
    assert obs["agent_0"][-1] == 0.5
    _, _, _, trunc, _ = game.step(dict.fromkeys(game.possible_agents, 0))
    assert all(trunc.values()) and game.agents == []
    with pytest.raises(ValueError, match="n_agents >= 2"):
        CueGame(n_agents=1)
