"""End-to-end figures: A2C training speed against bare env stepping, and the fixed cost of an
update."""

from __future__ import annotations

import numpy as np

from pgrad.rl.envs.native import gymnasium_envs
from pgrad_app.perf.common import figure, interleaved, ratio, rounds


@gymnasium_envs()  # against Gymnasium's own CartPole (not pgrad's numpy one)
def a2c_speed_ratio(repeats: int) -> dict:
    """A2C training (collect + update, default config) vs random stepping of the same vector env.

    Throughput ratio: env steps per second of ``agent.step()`` over those of random-action
    stepping of a vector env like the agent's (CartPole-v1, same number of envs and steps).
    """
    import agents
    from pgrad.rl.collection import rollout

    cls = agents.get("a2c")
    cfg = cls.Config()
    agent = cls(cfg, env_id="CartPole-v1", seed=0)
    updates = 10
    vector_steps = updates * cfg.n_steps
    raw_envs = rollout.make_vec_env("CartPole-v1", cfg.num_envs)
    raw_envs.reset(seed=0)
    actions = np.random.default_rng(0).integers(0, 2, size=(vector_steps, cfg.num_envs))

    def raw():
        for a in actions:
            raw_envs.step(a)

    times = interleaved({"raw": raw, "a2c": rounds(agent.step, updates)},
                        max(5, repeats // 3), warmup=2)
    value = ratio(times, "raw", "a2c")
    env_steps = vector_steps * cfg.num_envs
    steps_per_s = {k: round(env_steps / float(np.median(v))) for k, v in times.items()}
    agent.close()
    raw_envs.close()
    return figure("a2c_speed_ratio", value, ">= 0.5", value >= 0.5, num_envs=cfg.num_envs,
                  n_steps=cfg.n_steps, updates_per_round=updates, env_steps_per_s=steps_per_s,
                  note="A2C's episodes grow longer as it learns (fewer resets than random "
                  "stepping): a slight advantage to the A2C side")


@gymnasium_envs()  # against Gymnasium's own CartPole (not pgrad's numpy one)
def update_overhead(repeats: int) -> dict:
    """Fixed cost per update: ``agent.step()`` on a 1 env x 1 step rollout minus collecting it."""
    import agents
    from pgrad.rl.collection import rollout

    cls = agents.get("a2c")
    agent = cls(cls.Config(num_envs=1, n_steps=1), env_id="CartPole-v1", seed=0)
    rng = np.random.default_rng(0)
    policy_fn = agent.acting_fn(rng)
    raw_envs = rollout.make_vec_env("CartPole-v1", 1)
    raw_envs.reset(seed=0)
    one = np.zeros(1, np.int64)
    # The machine's speed moves between windows at the same load (docs/performance.md): a
    # trivial concrete tf.function timed in the same rounds says how fast TensorFlow calls ran.
    import tensorflow as tf

    x = tf.constant(1.0)
    trivial = tf.function(lambda v: v + 1.0).get_concrete_function(x)
    calls = 50
    fns = {"step": rounds(agent.step, calls),
           "collect": rounds(lambda: agent.collector.collect(policy_fn, 1), calls),
           "env": rounds(lambda: raw_envs.step(one), calls),
           "trivial_tf_call": rounds(lambda: trivial(x).numpy(), calls)}
    times = interleaved(fns, max(10, repeats // 2))
    per_call = {k: v / calls for k, v in times.items()}
    overhead = per_call["step"] - per_call["collect"]
    value = float(np.median(overhead)) * 1e3
    agent.close()
    raw_envs.close()
    return figure("update_overhead_ms", value, "<= 0.5 ms", value <= 0.5,
                  ms_per_call={k: round(float(np.median(v)) * 1e3, 4) for k, v in per_call.items()},
                  overhead_in_trivial_tf_calls=round(float(np.median(
                      overhead / per_call["trivial_tf_call"])), 2),
                  what="agent.step() of A2C with num_envs=1, n_steps=1 on CartPole-v1 minus "
                  "collecting the same 1-step rollout (policy + env + recording); median over "
                  f"rounds of {calls} calls each")
