"""``jit_compile``: the agent's update as one XLA computation
(``agents.update.compiled.CompiledUpdate``).

Compared with the same agent and seed on the plain graph. Tolerance: XLA fuses the update's
kernels and sums float32 values in another order, so one update on the same rollout agrees to
float32 round-off (rtol 1e-5 on the metrics; 1e-4 on the weights, as RMSprop divides by the
gradients' running RMS, which amplifies a relative error of small gradients). After a few
updates the rollouts themselves differ in the last bits of the actions, so the later checks are
looser.
An update XLA cannot compile (an op without an XLA kernel, a loop whose shapes change) warns
once and runs on the plain graph: then the run is the plain agent's, bit for bit. Episode
batches (a new shape every update) never use XLA, which would compile again for each.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import tensorflow as tf

import agents
import pgrad

SETTINGS = {"num_envs": 2, "n_steps": 5, "normalize_obs": True, "normalize_reward": True}


def _weights(agent) -> list[np.ndarray]:
    return [v.numpy() for v in agent.net.variables]


def _runs_under_xla(agent) -> bool:
    """Whether the traced update function is marked for XLA (what ``jit_compile`` sets)."""
    return bool(agent.updater.traced.fn._jit_compile)


def _pair(name: str, env: str, steps: int, transform=None, **hp):
    out = {}
    for jit in (False, True):
        agent = agents.make(name, env, seed=4, transform=transform, jit_compile=jit,
                            **{**SETTINGS, **hp})
        metrics = [agent.step() for _ in range(steps)]
        out[jit] = (agent, metrics)
    return out


def test_one_xla_update_matches_the_plain_graph():
    """Same seed, same first rollout: the first update's metrics and weights agree to float32
    round-off, and the update is traced once and runs marked for XLA."""
    runs = _pair("a2c", "Pendulum-v1", 1)
    (plain, m0), (xla, m1) = runs[False], runs[True]
    assert xla.updater.jit_compiled and not plain.updater.jit_compiled
    assert _runs_under_xla(xla) and not _runs_under_xla(plain)
    assert xla.updater.tracing_count() == 1
    for key in ("policy_loss", "value_loss", "entropy", "grad_norm", "explained_variance"):
        np.testing.assert_allclose(m1[0]["metrics"][key], m0[0]["metrics"][key], rtol=1e-5,
                                   atol=1e-6, err_msg=key)
    for a, b in zip(_weights(plain), _weights(xla)):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-6)
    for agent in (plain, xla):
        agent.close()


def test_xla_updates_follow_the_plain_run():
    """Ten updates with episode ends and normalisers: the weights stay within a loose bound of
    the plain run's, and the updates moved them (no-op updates would also be "close")."""
    runs = _pair("a2c", "CartPole-v1", 10)
    (plain, _), (xla, metrics) = runs[False], runs[True]
    start = _weights(agents.make("a2c", "CartPole-v1", seed=4, **SETTINGS))
    for a, b in zip(_weights(plain), _weights(xla)):
        np.testing.assert_allclose(b, a, rtol=1e-3, atol=1e-5)
    assert max(float(np.max(np.abs(b - s))) for b, s in zip(_weights(xla), start)) > 1e-3
    assert xla.env_steps == plain.env_steps == 100
    assert all(np.isfinite(m["metrics"]["policy_loss"]) for m in metrics)
    for agent in (plain, xla):
        agent.close()


def _python_scale():
    """A user transform with an op XLA has no kernel for (``tf.py_function``)."""
    def update(grads, state, *, advantages, **context):
        w = tf.py_function(lambda a: a * 1.0, [advantages], tf.float32)
        w = tf.reshape(w, [-1])
        grads = [g * tf.reshape(w, [-1] + [1] * (len(g.shape) - 1)) for g in grads]
        return grads, state

    scale = pgrad.GradientTransform(lambda variables: (), update, name="python_scale")
    return pgrad.chain(scale, pgrad.mean_steps(), name="python_scale")


@pytest.mark.parametrize("case", ["python_op", "ppo_minibatches"])
def test_what_xla_cannot_compile_warns_once_and_runs_plain(case):
    """A transform with a Python op, PPO's shuffled minibatch loop: one RuntimeWarning naming
    ``jit_compile``, then the plain graph: the same weights as the agent without XLA, bit for
    bit."""
    name, hp = (("a2c", {}) if case == "python_op"
                else ("ppo", {"n_steps": 16, "minibatch_size": 8, "epochs": 2}))
    transform = _python_scale() if case == "python_op" else None
    plain = agents.make(name, "CartPole-v1", seed=4, transform=transform,
                        **{**SETTINGS, **hp})
    for _ in range(3):
        plain.step()
    xla = agents.make(name, "CartPole-v1", seed=4, transform=transform, jit_compile=True,
                      **{**SETTINGS, **hp})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            xla.step()
    said = [str(w.message) for w in caught if "jit_compile" in str(w.message)]
    assert len(said) == 1 and "runs without XLA" in said[0] and "\n" not in said[0]
    assert not xla.updater.jit_compiled
    for a, b in zip(_weights(plain), _weights(xla)):
        np.testing.assert_array_equal(b, a)
    for agent in (plain, xla):
        agent.close()


def test_episode_batches_stay_on_the_plain_graph():
    """REINFORCE's whole-episode batches change shape every update: with ``jit_compile`` they
    run on the plain graph (no warning, bit for bit the agent without it, traced as often)."""
    plain = agents.make("reinforce", "CartPole-v1", seed=4, batch_steps=64)
    xla = agents.make("reinforce", "CartPole-v1", seed=4, batch_steps=64, jit_compile=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            plain.step()
            xla.step()
    assert not [w for w in caught if "jit_compile" in str(w.message)]
    assert xla.updater.jit_compiled
    assert xla.updater.tracing_count() == plain.updater.tracing_count()
    assert not xla.updater.traced.fn_varying._jit_compile
    for a, b in zip(_weights(plain), _weights(xla)):
        np.testing.assert_array_equal(b, a)
    for agent in (plain, xla):
        agent.close()


def test_an_error_of_the_transform_is_still_raised():
    """A transform that fails while tracing is not XLA's problem: it is raised as without
    ``jit_compile``, with no fallback warning."""
    def update(grads, state, *, advantages, **context):
        raise ValueError("user check failed")

    bad = pgrad.chain(pgrad.GradientTransform(lambda v: (), update, name="always_fails"),
                      pgrad.mean_steps(), name="always_fails")
    agent = agents.make("a2c", "CartPole-v1", seed=4, transform=bad, jit_compile=True,
                        **SETTINGS)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(Exception, match="user check failed"):
            agent.step()
    assert not [w for w in caught if "jit_compile" in str(w.message)]
    agent.close()
