"""TRPO: the line search against a plain NumPy loop, and one agent update against NPG's
reference step (tests/agents/test_npg.py) shrunk by the factor the search reports."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_probability as tfp
from test_agents import ACTION_SPACES, factory, small
from test_npg import reference_policy_step

import agents
from agents.update.line_search import BacktrackingLineSearch

M, OBS, ACTIONS = 256, 3, 4


def softmax(z):
    z = z - z.max(-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(-1, keepdims=True)


def reference_search(w0, step, obs, actions, adv, behaviour, max_kl, shrink, max_steps):
    """``(j, accepted, w)`` of TRPO's rule in float64: the first ``w0 + shrink^j step`` whose
    mean KL(new || old) is below ``max_kl`` and whose surrogate beats the old one, else ``w0``."""
    old = softmax(obs @ w0)
    rows = np.arange(len(actions))

    def surrogate(p):
        return np.mean(adv * p[rows, actions] / np.exp(behaviour))

    for j in range(max_steps):
        w = w0 + shrink ** j * step
        new = softmax(obs @ w)
        kl = np.mean(np.sum(new * (np.log(new) - np.log(old)), -1))
        if kl < max_kl and surrogate(new) > surrogate(old):
            return j, True, w
    return max_steps, False, w0


@pytest.fixture
def batch():
    rng = np.random.default_rng(7)
    w0 = rng.normal(0, 0.3, (OBS, ACTIONS))
    obs = rng.normal(size=(M, OBS))
    probs = softmax(obs @ w0)
    actions = np.array([rng.choice(ACTIONS, p=p) for p in probs])
    behaviour = np.log(probs[np.arange(M), actions])  # on-policy: mu = pi_old
    adv = rng.normal(size=M)
    # The surrogate's gradient at w0 (its ascent direction), in closed form.
    onehot = np.eye(ACTIONS)[actions]
    grad = obs.T @ ((onehot - probs) * adv[:, None]) / M
    return w0, obs, actions, behaviour, adv, grad


@pytest.mark.parametrize("scale, expect", [
    (0.1, "j == 0"),  # a small step: kept whole
    (1.0, "j > 0"),  # past max_kl: backtracked (to j = 6)
    (-5.0, "rejected"),  # downhill: the surrogate never improves, the weights come back
])
def test_the_line_search_is_trpos_rule(batch, scale, expect):
    w0, obs, actions, behaviour, adv, grad = batch
    step = scale * grad / np.linalg.norm(grad)
    max_kl, shrink, max_steps = 0.01, 0.8, 10
    want_j, want_ok, want_w = reference_search(w0, step, obs, actions, adv, behaviour, max_kl,
                                               shrink, max_steps)
    assert {"j == 0": want_j == 0, "j > 0": want_ok and want_j > 0,
            "rejected": not want_ok}[expect], (want_j, want_ok)  # the case is the one named

    w = tf.Variable(w0 + step, dtype=tf.float32)
    before = [tf.constant(w0, tf.float32)]
    o = tf.constant(obs, tf.float32)
    a = tf.constant(actions)

    def evaluate():
        dist = tfp.distributions.Categorical(logits=o @ w)
        return dist, dist.log_prob(a)

    old_dist = tfp.distributions.Categorical(logits=o @ before[0])
    search = BacktrackingLineSearch(max_kl, shrink, max_steps)

    @tf.function  # as the compiled update calls it
    def run():
        return search([w], before, evaluate, tf.constant(adv, tf.float32),
                      tf.constant(behaviour, tf.float32), (old_dist, old_dist.log_prob(a)))

    metrics = run()
    assert int(metrics["line_search_steps"]) == want_j
    assert bool(metrics["line_search_accepted"]) == want_ok
    np.testing.assert_allclose(w.numpy(), want_w, atol=1e-5)
    if not want_ok:  # exactly the weights before the step
        np.testing.assert_array_equal(w.numpy(), before[0].numpy())


def test_bad_line_search_settings_are_one_line():
    for kwargs, text in [({"max_kl": 0.0}, "max_kl > 0"), ({"shrink": 1.0}, "in \\(0, 1\\)"),
                         ({"max_steps": 0}, "\\[1, 100\\]")]:
        with pytest.raises(ValueError, match=text):
            BacktrackingLineSearch(**{"max_kl": 0.01, **kwargs})
    with pytest.raises(ValueError, match="TRPO's line search needs a feed-forward policy"):
        agents.TRPOConfig(recurrent="lstm").validate()
    with pytest.raises(ValueError, match="line_search_shrink must be in"):
        agents.TRPOConfig(line_search_shrink=1.5).validate()


@pytest.mark.parametrize("space", ["discrete", "box"])
@pytest.mark.parametrize("max_kl", [0.01, 0.5])  # 0.5: the quadratic model overshoots more
def test_one_update_is_npgs_step_shrunk_by_the_search(space, max_kl):
    cfg = small(agents.TRPO, damping=0.1, max_kl=max_kl)
    agent = agents.TRPO(cfg, env_id=factory(ACTION_SPACES[space]), seed=0)
    want = reference_policy_step(agent, cfg)  # NPG's step: the direction TRPO searches along
    before = np.concatenate([v.numpy().ravel() for v in agent.net.policy_variables])
    metrics = agent.step()["metrics"]
    after = np.concatenate([v.numpy().ravel() for v in agent.net.policy_variables])
    j, accepted = metrics["line_search_steps"], metrics["line_search_accepted"]
    assert accepted in (0.0, 1.0) and 0 <= j <= cfg.line_search_steps
    want = cfg.line_search_shrink ** j * want if accepted else 0 * want
    err = np.linalg.norm(after - before - want) / max(np.linalg.norm(want), 1e-12)
    assert err < 2e-4 if accepted else np.array_equal(after, before), (j, accepted, err)
    agent.close()


def test_trpo_is_declared_in_one_module_with_its_search_space():
    from agents.catalog import registry

    decl = registry.declaration("trpo")
    assert decl.config is agents.TRPOConfig and decl.policy_step is not None
    assert decl.config.__module__ == "agents.algorithms.trpo"
    assert decl.search_space["max_kl"]["choices"][0] == 0.1
    cfg = agents.TRPOConfig()  # sb3-contrib's defaults
    assert (cfg.max_kl, cfg.damping, cfg.cg_iters, cfg.critic_updates, cfg.n_steps) == (
        0.01, 0.1, 15, 10, 2048)
