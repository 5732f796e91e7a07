"""See an update (agents/inspection/update_hook.py): the hook sees each minibatch step's batch,
the chain's per-step weights and the gradient norms, checked against tape gradients, and changes
nothing."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import agents
from agents.inspection import update_hook
from pgrad.transforms.chain import flatten


def same_weights(a, b) -> bool:
    return all(np.array_equal(x.numpy(), y.numpy())
               for x, y in zip(a.net.variables, b.net.variables, strict=True))


def test_the_hook_changes_nothing_and_sees_every_minibatch_step():
    kw = dict(num_envs=2, n_steps=16, minibatch_size=16, epochs=2, seed=0)
    hooked, plain = agents.make("ppo", "CartPole-v1", **kw), agents.make("ppo", "CartPole-v1", **kw)
    views = []
    try:
        own = hooked.updater
        with update_hook.watch(hooked, views.append):
            for _ in range(3):
                hooked.step()
        assert hooked.updater is own  # the agent's own update is back
        for _ in range(3):
            plain.step()
        assert same_weights(hooked, plain)
        hooked.step()
        plain.step()
        assert same_weights(hooked, plain) and len(views) == 3 * 2 * 2  # updates x epochs x mbs
        assert [(v.update, v.minibatch) for v in views[:5]] == [(1, 0), (1, 1), (1, 2), (1, 3),
                                                                (2, 0)]
        for v in views:
            assert v.observations.shape == (16, 4) and v.actions.shape == (16,)
            assert set(v.context) == {*update_hook.CONTEXT_KEYS, "log_probs"}
            names = [t.name for t in v.transforms]
            assert names == [t.name for t in flatten(hooked.transform)]
            first, last = v.transforms[0], v.transforms[-1]
            np.testing.assert_array_equal(first.before, np.ones(16))
            np.testing.assert_allclose(last.after, first.scale * last.scale, rtol=1e-6)
            np.testing.assert_allclose(last.scale, np.full(16, 1 / 16))  # mean_steps
            assert v.applied and v.grad_norm > 0 and v.pg_grad_norm > 0
        # the first step of the first update: the ratio is 1, so clip_ratio's weight is A_t
        np.testing.assert_allclose(views[0].transforms[0].scale, views[0].context["advantages"],
                                   rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(views[0].context["log_probs"],
                                   views[0].context["behaviour_log_probs"], atol=1e-5)
    finally:
        hooked.close()
        plain.close()


def test_weights_and_norm_equal_a_tape_reference():
    kw = dict(num_envs=1, n_steps=6, seed=2, normalize_advantage=False)
    hooked, twin = agents.make("a2c", "CartPole-v1", **kw), agents.make("a2c", "CartPole-v1", **kw)
    views = []
    try:
        with update_hook.watch(hooked, views.append):
            hooked.step()
        (view,) = views
        weight = view.transforms[-1].after  # [M] A_t / M: weight_by then mean_steps
        np.testing.assert_allclose(weight, view.context["advantages"] / 6, rtol=1e-6)
        obs, actions = tf.constant(view.observations), tf.constant(view.actions)
        variables = twin.net.policy_variables  # the weights the update started from
        with tf.GradientTape() as tape:
            logp = twin.updater.step.log_prob_only(obs, actions)  # [M]
            objective = tf.reduce_sum(tf.stop_gradient(weight) * logp)
        grads = tape.gradient(objective, variables)
        np.testing.assert_allclose(logp.numpy(), view.context["log_probs"], rtol=1e-5)
        np.testing.assert_allclose(view.pg_grad_norm, tf.linalg.global_norm(grads).numpy(),
                                   rtol=1e-4)
    finally:
        hooked.close()
        twin.close()


def doubled(grads, **context):
    del context
    return [2.0 * g for g in grads]


def test_a_function_transform_shows_per_step_norms():
    kw = dict(num_envs=1, n_steps=4, seed=3)
    hooked = agents.make("a2c", "CartPole-v1", transform=doubled, **kw)
    twin = agents.make("a2c", "CartPole-v1", transform=doubled, **kw)
    views = []
    try:
        with update_hook.watch(hooked, views.append):
            hooked.step()
        (view,) = views
        (leaf,) = view.transforms
        assert leaf.name == "doubled" and leaf.scale is None
        # reference: each step's log-prob gradient norm by a plain loop of tape gradients
        obs, actions = tf.constant(view.observations), tf.constant(view.actions)
        want = []
        for t in range(4):
            with tf.GradientTape() as tape:
                logp = twin.updater.step.log_prob_only(obs[t:t + 1], actions[t:t + 1])[0]
            want.append(tf.linalg.global_norm(tape.gradient(logp, twin.net.policy_variables)))
        np.testing.assert_allclose(leaf.norms_in, np.array(want), rtol=1e-4)
        assert leaf.norms_out is None  # the function's per-step output is averaged inside it
        twin.step()
        assert same_weights(hooked, twin)
    finally:
        hooked.close()
        twin.close()


def test_see_update_as_a_learn_callback_and_refusals():
    agent = agents.make("a2c", "CartPole-v1", num_envs=1, n_steps=8)
    seen = []
    try:
        own = agent.updater
        agent.learn(24, callbacks=update_hook.SeeUpdate(lambda v: seen.append(v.update)),
                    progress=False)
        assert seen == [1, 2, 3] and agent.updater is own
    finally:
        agent.close()
    jit = agents.make("a2c", "CartPole-v1", num_envs=1, n_steps=8, jit_compile=True)
    try:
        with pytest.raises(ValueError, match="set jit_compile=False while watching"):
            with update_hook.watch(jit, print):
                pass
    finally:
        jit.close()
