"""One NPG update against the reference step, recomputed from the same rollout in float64."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from policies import jacobian_reference
from test_agents import ACTION_SPACES, factory, small

import agents
import pgrad


def reference_policy_step(agent, cfg):
    """The parameter change one NPG update should make, from a re-collected first rollout.

    Advantages: GAE(lambda) from the critic before the update, standardised with the sample
    std plus 1e-8 (Stable-Baselines3); step: ``x = (F + d I)^-1 g`` (dense float64), scaled to
    ``sqrt(2 max_kl / q)`` with ``q = x^T (F + d I) x`` (``damped_kl``) or ``x^T F x``.
    """
    rng = np.random.default_rng([agent.seed, 0])  # what step() uses for update 0
    traj, _ = agent.collector.collect(agent.acting_fn(rng), cfg.n_steps)
    agent.collector.reset(seed=0)  # same episodes again for step()
    net, head = agent.net, agent.head
    n = cfg.n_steps * cfg.num_envs
    flat = lambda x: tf.reshape(tf.constant(x), [n, *x.shape[2:]])  # noqa: E731
    obs, nxt = flat(traj.observations), flat(traj.next_observations)
    shape = [cfg.n_steps, cfg.num_envs]
    adv = pgrad.gae(traj.rewards, tf.reshape(net.value(obs), shape),
                    tf.reshape(net.value(nxt), shape), traj.terminated, traj.truncated,
                    cfg.gamma, cfg.gae_lambda)
    adv = np.reshape(adv.numpy(), [-1]).astype(np.float64)
    adv = (adv - adv.mean()) / (adv.std(ddof=1) + 1e-8)

    def log_prob(o, a):
        return head.distribution(net.params(o)).log_prob(a)

    jac = jacobian_reference(log_prob, net.policy_variables, obs, flat(traj.actions))
    rows = np.concatenate([np.reshape(j.numpy(), [n, -1]) for j in jac], 1).astype(np.float64)
    fisher = rows.T @ rows / n
    g = rows.T @ adv / n
    x = np.linalg.solve(fisher + cfg.damping * np.eye(len(g)), g)
    if cfg.max_kl == 0:
        return cfg.learning_rate * x
    quad = x @ (fisher + (cfg.damping if cfg.damped_kl else 0.0) * np.eye(len(g))) @ x
    return np.sqrt(2 * cfg.max_kl / quad) * x


@pytest.mark.parametrize("space", ["discrete", "box"])
@pytest.mark.parametrize("options", [
    {},  # the defaults: exact step under TRPO's damped measure
    {"damped_kl": False},  # pgrad's earlier measure, x^T F x
    {"max_kl": 0.0, "learning_rate": 0.01},  # unscaled: the standardisation's scale shows
])
def test_one_update_is_the_reference_step(space, options):
    cfg = small(agents.NPG, damping=0.1, **options)
    agent = agents.NPG(cfg, env_id=factory(ACTION_SPACES[space]), seed=0)
    want = reference_policy_step(agent, cfg)
    before = np.concatenate([v.numpy().ravel() for v in agent.net.policy_variables])
    agent.step()
    after = np.concatenate([v.numpy().ravel() for v in agent.net.policy_variables])
    got = after - before
    # float32 weights and per-step gradients: measured 4e-7 to 6e-6; swapping either convention
    # in the reference (damped_kl, or ddof 0) makes it 4e-2 to 1e-1.
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 2e-4
    agent.close()
