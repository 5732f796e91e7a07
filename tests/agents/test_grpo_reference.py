"""The grpo agent's reference policy (beta > 0): the KL term against the starting weights,
checked against the tape gradient of the chain's loss; the reference frozen, saved and
restored, and TR-DPO's soft update."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import tensorflow as tf

import agents
from pgrad.rl.tokens import register
from pgrad.transforms import sequence_loss

register()
TINY = {"num_envs": 8, "group_size": 4, "d_model": 16, "num_heads": 2, "num_layers": 1}


def reversal():
    return gym.make("pgrad/Reversal-v0", min_digits=2, max_digits=3, shaping=True)


def flat_weights(net):
    return np.concatenate([v.numpy().ravel() for v in net.policy_variables])


def batch_of_update(agent, updates):
    """The rows update ``updates + 1`` trains on, re-collected as the agent collects them."""
    cfg = agent.cfg
    rng = np.random.default_rng([agent.seed, updates])
    seeds = np.random.default_rng([agent.seed, updates, 1]).integers(
        2**31 - 1, size=cfg.num_envs // cfg.group_size).tolist()
    traj, _ = agent.collector.collect_groups(agent.acting_fn(rng), seeds)
    T, B = traj.rewards.shape
    keep = traj.mask.reshape(-1) > 0
    adv, _, extra = agent.make_targets().inner(
        tf.constant(traj.rewards), tf.constant(traj.terminated), tf.constant(traj.truncated),
        tf.zeros((T, B)), tf.zeros((T, B)))

    def rows(x):
        return tf.boolean_mask(tf.reshape(x, [T * B, *np.shape(x)[2:]]), keep)

    return (rows(tf.constant(traj.observations, tf.float32)), rows(tf.constant(traj.actions)),
            {"advantages": rows(adv), "behaviour_log_probs": rows(tf.constant(traj.log_probs)),
             "sequence_ids": rows(extra["sequence_ids"]),
             "completion_mask": rows(extra["completion_mask"])})


def test_the_kl_term_pulls_toward_the_starting_weights_as_the_chains_loss_says():
    cfg = {**TINY, "optimizer": "sgd", "learning_rate": 0.5, "max_grad_norm": 0.0,
           "beta": 0.5, "loss_type": "grpo"}
    agent = agents.make("grpo", reversal, seed=0, **cfg)
    initial = flat_weights(agent.net)
    ref_net = agent.update_targets.reference.net
    np.testing.assert_array_equal(flat_weights(ref_net), initial)  # the reference: the start
    agent.step()  # now policy != reference
    moved = flat_weights(agent.net)
    # update 2's batch, re-collected: a group rollout resets its envs with seeds drawn from
    # (seed, update), so the agent's own update 2 collects these rows again
    obs, actions, context = batch_of_update(agent, 1)
    ref = agent.head.distribution(ref_net.params(obs)).log_prob(actions)
    variables = agent.net.policy_variables
    with tf.GradientTape() as tape:
        log_probs = agent.head.distribution(agent.net.params(obs)).log_prob(actions)
        loss = sequence_loss(agent.transform, log_probs=log_probs, ref_log_probs=ref,
                             **context)
    want = np.concatenate([(-0.5 * tf.convert_to_tensor(g)).numpy().ravel()
                           for g in tape.gradient(loss, variables)])
    # the agent makes update 2 on that batch (the transformer policy: the reference's
    # log-probs from one causal pass per completion)
    agent.step()
    got = flat_weights(agent.net) - moved
    assert np.linalg.norm(want) > 1e-4
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 1e-4
    np.testing.assert_array_equal(flat_weights(ref_net), initial)  # still the start
    agent.close()


def test_the_reference_is_saved_and_restored(tmp_path):
    agent = agents.make("grpo", reversal, seed=1, beta=0.1, encoder="mlp", **TINY)
    agent.learn(200, progress=False)
    agent.save(tmp_path / "a")
    loaded = agents.load(tmp_path / "a", env_id=reversal)
    np.testing.assert_array_equal(flat_weights(loaded.update_targets.reference.net),
                                  flat_weights(agent.update_targets.reference.net))
    for a in (agent, loaded):
        a.step()
    np.testing.assert_array_equal(flat_weights(agent.net), flat_weights(loaded.net))
    agent.close(), loaded.close()


def test_the_soft_update_mixes_the_policy_into_the_reference():
    agent = agents.make("grpo", reversal, seed=2, beta=0.1, sync_ref_model=True,
                        ref_model_sync_steps=2, ref_model_mixup_alpha=0.25, encoder="mlp",
                        **TINY)
    ref = agent.update_targets.reference.net
    before = flat_weights(ref)
    agent.step()
    np.testing.assert_array_equal(flat_weights(ref), before)  # 1 update: no sync yet
    agent.step()
    want = 0.25 * flat_weights(agent.net) + 0.75 * before
    np.testing.assert_allclose(flat_weights(ref), want, rtol=1e-6, atol=1e-7)
    agent.close()
