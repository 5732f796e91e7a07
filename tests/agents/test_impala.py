"""IMPALA / APPO in process: the deterministic actor schedule, A2C when on-policy, and the
V-trace-corrected update against a plain-Python reference when the actor lags."""

from __future__ import annotations

import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import tensorflow as tf
from test_learning import train

import agents

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from policies import ImageEnv  # noqa: E402

SMALL = dict(num_envs=4, n_steps=6)
PLANES = "pgrad-test/Planes-v0"  # 10 x 10 x 4 bool, as MinAtar (registered as in test_pixels)


def paper_vtrace(r, v, nv, term, trunc, mu, pi, gamma, rho_bar=1.0, c_bar=1.0):
    """V-trace targets and ``q_s`` (Espeholt et al. 2018, eq. 1) summed term by term per env
    in float64; the sum stops at an episode's end or the rollout's."""
    r, v, nv, mu, pi = (np.asarray(x, np.float64) for x in (r, v, nv, mu, pi))
    t_len, b = r.shape
    rho = np.exp(pi - mu)
    vs, q = np.zeros_like(r), np.zeros_like(r)
    for j in range(b):
        for s in range(t_len):
            total, weight = 0.0, 1.0
            for t in range(s, t_len):
                nxt = 0.0 if term[t, j] else nv[t, j]
                total += weight * min(rho_bar, rho[t, j]) * (r[t, j] + gamma * nxt - v[t, j])
                if term[t, j] or trunc[t, j]:
                    break
                weight *= gamma * min(c_bar, rho[t, j])
            vs[s, j] = v[s, j] + total
        for s in range(t_len):
            if term[s, j]:
                nxt = 0.0
            elif trunc[s, j] or s == t_len - 1:
                nxt = nv[s, j]
            else:
                nxt = vs[s + 1, j]
            q[s, j] = r[s, j] + gamma * nxt
    return vs, q, rho


def recording(agent):
    """Wraps the agent's source: every batch it hands out is appended to the returned list."""
    seen, source = [], agent.source
    inner = source.next

    def next_(updates):
        batch = inner(updates)
        seen.append(batch)
        return batch

    source.next = next_
    return seen


def weights(agent):
    return [v.numpy().copy() for v in agent.net.variables]


def test_lag_0_is_a2c_with_lambda_1():
    """On-policy (rho = c = 1): the V-trace targets are the n-step returns and q - V is GAE(1),
    so each update is A2C's on the same trajectories."""
    imp = agents.make("impala", "CartPole-v1", seed=3, gae_lambda=1.0, **SMALL)
    a2c = agents.make("a2c", "CartPole-v1", seed=3, gae_lambda=1.0,
                      optimizer_eps=imp.cfg.optimizer_eps, **SMALL)  # IMPALA's RMSprop floor
    seen = recording(imp)
    for _ in range(4):
        a, b = a2c.step(), imp.step()
        assert b["metrics"]["policy_lag"] == 0.0
        assert b["metrics"]["importance_weight/rho_mean"] == pytest.approx(1.0, abs=1e-5)
        assert a["episodes"] == b["episodes"] and a["env_steps"] == b["env_steps"]
        for x, y in zip(weights(a2c), weights(imp)):
            np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)
    assert len(seen) == 4 and all(s.version == u for u, s in enumerate(seen))
    a2c.close()
    imp.close()


def test_appo_at_lag_0_is_ppo():
    """On-policy, APPO's update is PPO's on the same trajectories: V-trace's advantages are
    GAE(lambda) (rlax's lambda mix), then the same epochs of shuffled minibatches, advantages
    standardised per minibatch and the clip on pi / mu. So APPO at lag 0 beside PPO with APPO's
    trajectory shape is one algorithm run twice, apart from float round-off
    (docs/benchmarks/async/README.md, "Why APPO is behind PPO on LunarLander-v3")."""
    kw = dict(SMALL, epochs=2, minibatch_size=8, gae_lambda=0.9, normalize_advantage=True,
              optimizer="adam", learning_rate=1e-3, optimizer_eps=1e-5, clip_range=0.2,
              ent_coef=0.01)
    appo = agents.make("appo", "CartPole-v1", seed=3, **kw)
    ppo = agents.make("ppo", "CartPole-v1", seed=3, **kw)
    for _ in range(3):
        a, b = ppo.step(), appo.step()
        assert b["metrics"]["policy_lag"] == 0.0
        assert a["episodes"] == b["episodes"] and a["env_steps"] == b["env_steps"]
        for x, y in zip(weights(ppo), weights(appo)):
            np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)
    ppo.close()
    appo.close()


def test_broadcast_interval_sets_the_acting_version():
    imp = agents.make("impala", "CartPole-v1", seed=0, broadcast_interval=3, **SMALL)
    seen = recording(imp)
    lags = [imp.step()["metrics"]["policy_lag"] for _ in range(7)]
    assert lags == [0, 1, 2, 0, 1, 2, 0]
    assert [s.version for s in seen] == [0, 0, 0, 3, 3, 3, 6]
    imp.close()


def log_probs_under(agent, variables, traj):
    """``[T, B]`` log pi(a_t | o_t) of the stored actions with the network set to ``variables``
    (the current weights are put back after)."""
    net = agent.net
    now = weights(agent)
    for v, w in zip(net.variables, variables):
        v.assign(w)
    T, B = traj.rewards.shape
    obs = tf.reshape(traj.observations, [T * B, -1])
    out = agent.head.distribution(net.params(obs)).log_prob(tf.reshape(traj.actions, [T * B]))
    for v, w in zip(net.variables, now):
        v.assign(w)
    return tf.reshape(out, [T, B]).numpy()


@pytest.mark.parametrize("name", ["impala", "appo"])
def test_lagged_update_is_the_v_trace_correction(name):
    """lag 2: the trajectory of update u was acted with the weights after update u - 2; the update
    is one SGD step on ``-mean(min(1, rho) (q - V) log pi) + vf_coef mean((v_s - V)^2)`` (APPO:
    PPO's clipped surrogate of rho on the same q - V) with V-trace written out above."""
    lr, gamma, vf = 0.05, 0.9, 0.5
    imp = agents.make(name, "CartPole-v1", seed=1, lag=2, optimizer="sgd", learning_rate=lr,
                      max_grad_norm=0.0, gamma=gamma, vf_coef=vf, **SMALL)
    seen = recording(imp)
    history = [weights(imp)]
    for _ in range(4):
        info = imp.step()
        history.append(weights(imp))
    assert info["metrics"]["policy_lag"] == 2.0
    assert [s.version for s in seen] == [0, 0, 0, 1]

    batch = seen[3]
    traj = batch.traj
    np.testing.assert_allclose(traj.log_probs, log_probs_under(imp, history[1], traj),
                               rtol=1e-5, atol=1e-5)  # acted with version 1's weights
    net, before, after = imp.net, history[3], history[4]
    for v, w in zip(net.variables, before):
        v.assign(w)
    T, B = traj.rewards.shape
    obs = tf.reshape(traj.observations, [T * B, -1])
    nxt = tf.reshape(traj.next_observations, [T * B, -1])
    values = tf.reshape(net.value(obs), [T, B]).numpy()
    next_values = tf.reshape(net.value(nxt), [T, B]).numpy()
    pi = log_probs_under(imp, before, traj)
    vs, q, rho = paper_vtrace(traj.rewards, values, next_values, traj.terminated, traj.truncated,
                              traj.log_probs, pi, gamma)
    assert np.any(np.abs(rho - 1) > 1e-3)  # the actor really was off-policy
    adv = (q - values).reshape(-1).astype(np.float32)
    with tf.GradientTape() as tape:
        logp = agent_log_probs(imp, obs, traj)
        if name == "impala":
            pg = tf.reduce_mean(np.minimum(1.0, rho).reshape(-1).astype(np.float32) * adv * logp)
        else:
            ratio = tf.exp(logp - traj.log_probs.reshape(-1))
            clip = 0.4
            pg = tf.reduce_mean(tf.minimum(ratio * adv,
                                           tf.clip_by_value(ratio, 1 - clip, 1 + clip) * adv))
        v_loss = tf.reduce_mean(tf.square(vs.reshape(-1).astype(np.float32)
                                          - tf.reshape(net.value(obs), [-1])))
        loss = -pg + vf * v_loss
    grads = tape.gradient(loss, net.variables)
    expected = [w - lr * g.numpy() for w, g in zip(before, grads)]
    for got, want in zip(after, expected):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
    # The correction matters here: on-policy targets (rho = 1) are measurably different.
    vs_on, q_on, _ = paper_vtrace(traj.rewards, values, next_values, traj.terminated,
                                  traj.truncated, pi, pi, gamma)
    assert np.abs(vs - vs_on).max() > 1e-3 and np.abs(q - q_on).max() > 1e-3
    for v, w in zip(net.variables, after):
        v.assign(w)
    imp.close()


def agent_log_probs(agent, obs, traj):
    T, B = traj.rewards.shape
    return agent.head.distribution(agent.net.params(obs)).log_prob(
        tf.reshape(traj.actions, [T * B]))


def rmsprop_steps(grads, lr, rho, eps):
    """Keras's RMSprop (epsilon inside the root) in plain Python: each update's step."""
    v, steps = 0.0, []
    for g in grads:
        v = rho * v + (1 - rho) * g * g
        steps.append(lr * g / (v + eps) ** 0.5)
    return steps


@pytest.mark.parametrize("name", ["impala", "a2c"])
def test_rmsprop_after_a_plateau_steps_as_the_plain_recursion(name):
    """A solved task's gradients fade (CartPole at 500: global norm < 0.005 for thousands of
    updates) and RMSprop's mean square fades with them; the next failure's gradient is then
    divided by almost nothing. IMPALA's epsilon (1e-6 inside the root) keeps that step within
    the learning rate; A2C's 1e-10 lets it reach ~10x the learning rate, which a learner that
    sees its step only `lag` updates later repeats into a collapse."""
    from agents.base import make_optimizer

    cfg = agents.get(name).Config()
    lr = 1e-3
    grads = [1e-6] * 20 + [1e-3] * 3  # a plateau (velocity from 0: as faded), then a failure
    var = tf.Variable([0.0])
    opt = make_optimizer(cfg, lr)
    got = []
    for g in grads:
        before = float(var.numpy()[0])
        opt.apply([tf.constant([g])], [var])
        got.append(before - float(var.numpy()[0]))
    want = rmsprop_steps(grads, lr, cfg.rmsprop_rho, cfg.optimizer_eps)
    np.testing.assert_allclose(got, want, rtol=1e-3)
    if name == "impala":
        assert max(got[-3:]) <= lr
    else:
        assert got[-3] > 5 * lr  # what IMPALA's floor is for


@pytest.mark.parametrize("bad,match", [
    (dict(rollout="episodes"), "fixed-length"),
    (dict(lag=-1), "lag must be"),
    (dict(broadcast_interval=0), "broadcast_interval"),
    (dict(rho_bar=0.0), "rho_bar must be > 0"),
])
def test_config_errors(bad, match):
    with pytest.raises(ValueError, match=match):
        agents.IMPALAConfig(**bad).validate()


def test_a_restore_restarts_the_actor_from_the_restored_weights(tmp_path):
    imp = agents.make("impala", "CartPole-v1", seed=0, lag=1, **SMALL)
    for _ in range(3):
        imp.step()
    path = tf.train.Checkpoint(**imp.trackables()).write(str(tmp_path / "ckpt"))
    back = agents.make("impala", "CartPole-v1", seed=0, lag=1, **SMALL)
    back.step()  # a different state to restore over
    tf.train.Checkpoint(**back.trackables()).read(path).assert_consumed()
    assert back.env_steps == imp.env_steps
    info = back.step()  # acted with the restored weights, not the ones it had kept
    assert info["metrics"]["policy_lag"] == 0.0
    np.testing.assert_array_equal(back.source.kept[0][1], imp.mirror.flat_numpy())
    back.close()
    imp.close()


def test_lag_with_an_encoder_acts_with_the_lagged_weights_and_learns_on_the_live_ones():
    """A CNN policy acts through the compiled actor on the live variables: with lag 2 the
    trajectory of update u is acted with version u - 2 swapped in, and the update starts from
    the learner's own weights (put back after the collection)."""
    if PLANES not in gym.registry:
        gym.register(PLANES, entry_point=ImageEnv, kwargs={"shape": (10, 10, 4),
                                                           "dtype": np.bool_})
    imp = agents.make("appo", PLANES, seed=2, lag=2, encoder="minatar_cnn", **SMALL)
    mirror = imp.mirror
    history = [mirror.flat_numpy().copy()]  # [P] the policy's weights after each update
    after_collect, source = [], imp.source
    inner = source.next

    def next_(updates):  # the live weights right after a collection
        batch = inner(updates)
        after_collect.append((batch, mirror.flat_numpy().copy()))
        return batch

    source.next = next_
    for _ in range(4):
        assert imp.step()["metrics"]["policy_lag"] == min(len(history) - 1, 2)
        history.append(mirror.flat_numpy().copy())
    assert [b.version for b, _ in after_collect] == [0, 0, 0, 1]
    for u, (_, live) in enumerate(after_collect):
        np.testing.assert_array_equal(live, history[u])  # the learner's, not the lagged ones
    assert not np.array_equal(history[1], history[3])
    traj = after_collect[3][0].traj
    T, B = traj.rewards.shape
    mirror.load_flat(history[1])
    obs = tf.reshape(traj.observations, [T * B, *traj.observations.shape[2:]])
    acted = imp.head.distribution(imp.net.params(obs)).log_prob(tf.reshape(traj.actions, [-1]))
    mirror.load_flat(history[4])
    np.testing.assert_allclose(traj.log_probs, tf.reshape(acted, [T, B]), rtol=1e-5, atol=1e-5)
    imp.close()


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_impala_solves_cartpole():
    agent = agents.make("impala", "CartPole-v1", seed=0, lag=1)
    returns = train(agent, 150_000, target=475.0)
    assert np.mean(returns[-20:]) >= 475.0, (agent.env_steps, np.mean(returns[-20:]))
    agent.close()
