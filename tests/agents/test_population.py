"""Populations (agents/population/): N seeds in one process equal N single runs.

Tolerance: a member's weights after its updates equal those of the same agent trained alone
with its seed to 1e-6 (absolute; float32 round-off: exactly 0 with the shared trace run once per
member, which the tests check; at most 6e-8 with each member traced into the outer graph; at
most 4.3e-7 (A2C, 3 updates) and 7.5e-9 (PPO, 2) with the updates vectorized over the members,
whose batched matmuls sum in another order; NPG and TRPO vectorized: at most 5e-6, their
conjugate-gradient solve amplifying that round-off), and its episodes, counters and update
counts are identical.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import agents
from agents.population import (
    Population,
    build_members,
    check_memory,
    check_seeds,
)

TOL = 1e-6
#: NPG and TRPO vectorized: their solve amplifies round-off (see the test that uses it).
TOL_SOLVE = 5e-6
#: Small nets (one hidden layer of 16: a cheaper trace, the same code paths) and rollouts.
SMALL = {"a2c": {"num_envs": 4, "hidden": (16,)},
         "ppo": {"num_envs": 4, "n_steps": 16, "minibatch_size": 32, "epochs": 2,
                 "hidden": (16,)},
         "reinforce": {"num_envs": 2, "batch_steps": 20, "hidden": (16,)}}


@pytest.fixture(autouse=True)
def vectorize_small_groups(monkeypatch):
    """These tests' populations are small (groups of 2-3, to keep them fast): vectorized as
    ten seeds' groups of five would be (the rule itself: test_vectorizing_only_where_it_pays)."""
    from agents.update import batched

    monkeypatch.setattr(batched, "VECTORIZE_MIN_MEMBERS", 2)


def _max_diff(a, b) -> float:
    return max(float(np.max(np.abs(x.numpy() - y.numpy())))
               for x, y in zip(a.net.variables, b.net.variables))


@pytest.mark.parametrize("algo,updates,groups,vectorize", [
    ("a2c", 3, 2, True), ("a2c", 3, 2, False), ("ppo", 2, 2, True),
    pytest.param("a2c", 3, 1, True, marks=pytest.mark.slow),  # slow: keeps the file fast
    pytest.param("reinforce", 2, 2, True, marks=pytest.mark.slow)])
def test_a_population_equals_its_seeds_trained_alone(algo, updates, groups, vectorize,
                                                     monkeypatch):
    """groups 2: two groups' updates overlap the other's collection; 1: one update per round.
    vectorize: the members' updates as one vectorized set of ops where the update allows
    (A2C); False: the shared trace once per member, bit for bit each member's own run."""
    from agents.population import loop as population_loop
    from agents.update import batched

    monkeypatch.setattr(population_loop, "GROUPS", groups)
    monkeypatch.setattr(batched, "VECTORIZE", vectorize)
    seeds = [3, 4, 5] if algo != "reinforce" else [3, 4]
    kw = SMALL[algo]
    episodes: dict[int, list] = {s: [] for s in seeds}

    def recorder(seed):
        return lambda loop: episodes[seed].extend(loop.new_episodes)

    pop = Population(algo, "CartPole-v1", seeds=seeds, **kw)
    steps = 120 if algo == "reinforce" else updates * pop.agents[0].steps_per_update()
    assert pop.learn(steps, callbacks=recorder) is pop
    try:
        for seed, member in zip(seeds, pop.agents):
            alone = agents.make(algo, "CartPole-v1", seed=seed, **kw)
            own: list = []
            alone.learn(steps, callbacks=lambda loop, own=own: own.extend(loop.new_episodes),
                        progress=False)
            assert member.env_steps == alone.env_steps
            assert int(member.updates_var.numpy()) == int(alone.updates_var.numpy()) >= updates
            assert _max_diff(member, alone) <= (TOL if vectorize else 0.0)
            assert [(s, n) for s, _, n in episodes[seed]] == [(s, n) for s, _, n in own]
            np.testing.assert_allclose([r for _, r, _ in episodes[seed]],
                                       [r for _, r, _ in own])
            alone.close()
        if algo != "reinforce":  # fixed shapes: never a trace per member or per call; the
            # vectorized trace for a group of several, the shared one (a member's, run for
            # any member) for a group of one: with groups=2 of three seeds, one of each
            assert pop.update.shared is not None
            assert pop.update.tracing_count() == (2 if vectorize and groups == 2 else 1)
        # Fixed-shape updates (A2C, PPO's epochs of minibatches) vectorize over the members;
        # REINFORCE's whole-episode batches change shape each update and do not.
        assert pop.update.vectorized == (vectorize and algo != "reinforce")
        assert pop.update.not_vectorized is None
        assert not pop.failures
    finally:
        pop.close()


@pytest.mark.parametrize("which", ["running", "natural"])
def test_vectorized_updates_keep_each_members_transform_state_and_solves(which):
    """A chain with state of its own (running statistics of the advantages) and one that solves
    a linear system per update (natural gradient): vectorized over three members, each equals
    its single run."""
    import pgrad

    chain = (pgrad.chain(pgrad.weight_by_running("advantages"), pgrad.clip_per_step(1.0),
                         pgrad.mean_steps()) if which == "running"
             else pgrad.chain(pgrad.weight_by("advantages"), pgrad.natural_gradient(0.1)))
    kw = {"num_envs": 4, "hidden": (16,)}
    pop = Population("a2c", "CartPole-v1", seeds=[3, 4, 5], transform=chain, **kw)
    try:
        pop.learn(3 * pop.agents[0].steps_per_update())
        assert pop.update.vectorized
        for seed, member in zip([3, 4, 5], pop.agents):
            alone = agents.make("a2c", "CartPole-v1", seed=seed, transform=chain, **kw)
            alone.learn(3 * alone.steps_per_update(), progress=False)
            assert _max_diff(member, alone) <= TOL
            alone.close()
    finally:
        pop.close()


@pytest.mark.parametrize("flat", [True, False])
def test_groups_of_one_size_run_one_vectorized_graph_each_on_its_own_members(flat,
                                                                              monkeypatch):
    """Two groups of two: one outer graph (the members' variables are its arguments) traced
    once and run for both groups, each group's call reading and writing its own members only
    (each equals its single run); ``flat``: through the flat entry point or the public call."""
    from agents.population import loop as population_loop
    from pgrad.rl import flat_call

    monkeypatch.setattr(population_loop, "GROUPS", 2)
    monkeypatch.setattr(flat_call, "FLAT_CALLS", flat)
    seeds = [3, 4, 5, 6]
    kw = SMALL["a2c"]
    pop = Population("a2c", "CartPole-v1", seeds=seeds, **kw)
    try:
        pop.learn(2 * pop.agents[0].steps_per_update())
        assert pop.update.vectorized
        (pure,) = pop.update._pure.values()
        assert pure.outer().experimental_get_tracing_count() == 1
        for seed, member in zip(seeds, pop.agents):
            alone = agents.make("a2c", "CartPole-v1", seed=seed, **kw)
            alone.learn(2 * alone.steps_per_update(), progress=False)
            assert int(member.updates_var.numpy()) == int(alone.updates_var.numpy()) == 2
            assert _max_diff(member, alone) <= TOL
            alone.close()
    finally:
        pop.close()


@pytest.mark.parametrize("algo,vectorize", [("npg", True), ("trpo", True), ("trpo", False)])
def test_natural_gradient_agents_equal_their_seeds_line_searches_included(algo, vectorize,
                                                                           monkeypatch):
    """NPG and TRPO: a conjugate-gradient solve per update, a critic trained by its own Adam
    passes (``critic_updates``), and TRPO's line search, a loop that backtracks a different
    number of times for each member inside one vectorized call (``max_kl`` 0.3 makes some
    backtrack here). Each member's weights, episodes and line-search metrics equal its single
    run's: exactly member by member; vectorized to ``TOL_SOLVE``, the conjugate-gradient solve
    and the step scaled to ``max_kl`` amplifying the batched kernels' round-off (at most
    7.7e-7 here; 3e-5 with ``max_kl`` 1.0, whose steps are ~3x larger)."""
    from agents.update import batched

    monkeypatch.setattr(batched, "VECTORIZE", vectorize)
    seeds = [3, 4, 5]
    kw = {"num_envs": 4, "n_steps": 16, "hidden": (16,), "critic_updates": 3,
          "critic_minibatch_size": 32}
    if algo == "trpo":
        kw["max_kl"] = 0.3
    keys = ("line_search_steps", "line_search_accepted") if algo == "trpo" else ()
    seen: dict[int, list] = {s: [] for s in seeds}

    def record(log):
        return lambda loop: log.append((loop.new_episodes, [loop.metrics[k] for k in keys]))

    pop = Population(algo, "CartPole-v1", seeds=seeds, **kw)
    steps = 3 * pop.agents[0].steps_per_update()
    try:
        pop.learn(steps, callbacks=lambda seed: record(seen[seed]))
        assert pop.update.vectorized == vectorize and pop.update.not_vectorized is None
        for seed, member in zip(seeds, pop.agents):
            alone = agents.make(algo, "CartPole-v1", seed=seed, **kw)
            own: list = []
            alone.learn(steps, callbacks=record(own), progress=False)
            assert int(member.updates_var.numpy()) == int(alone.updates_var.numpy()) == 3
            assert _max_diff(member, alone) <= (TOL_SOLVE if vectorize else 0.0)
            assert [m for _, m in seen[seed]] == [m for _, m in own]
            assert [[(s, n) for s, _, n in e] for e, _ in seen[seed]] == [
                [(s, n) for s, _, n in e] for e, _ in own]
            alone.close()
        if algo == "trpo":  # the members backtracked, and not all alike in one update
            per_update = list(zip(*[[m[0] for _, m in seen[s]] for s in seeds]))
            assert any(len(set(js)) > 1 for js in per_update), per_update
    finally:
        pop.close()


@pytest.mark.parametrize("seeds,kw,why", [
    (4, {}, "a group of 2 member(s): vectorizing pays from 4"),  # vectorized no faster, its
    # trace longer: the shared trace
    (8, {}, None),  # groups of 4, 80 steps an update: vectorized
    (8, {"n_steps": 40, "num_envs": 8}, "updates of 320 env steps: vectorizing pays up to 256"),
])  # (the members' updates side by side on the two cores beat one batched op on one)
def test_vectorizing_only_where_it_pays(seeds, kw, why, monkeypatch):
    from agents.update import batched

    monkeypatch.setattr(batched, "VECTORIZE_MIN_MEMBERS", 4)
    kw = {"num_envs": 16, "n_steps": 5, "hidden": (16,), **kw}
    pop = Population("a2c", "CartPole-v1", seeds=range(seeds), **kw)
    try:
        pop.learn(pop.agents[0].steps_per_update())
        assert pop.update.vectorized == (why is None) and not pop.failures
        assert (pop.update.not_vectorized or "").startswith(why or "")
        assert (pop.update.not_vectorized is None) == (why is None)
    finally:
        pop.close()


def test_minibatch_shuffles_draw_the_same_numbers_inside_a_vectorized_update():
    """epochs._uniform takes the older stateless op inside a variables_as_values block (the
    one tf.vectorized_map can run): the same numbers as tf.random.stateless_uniform's."""
    import tensorflow as tf

    from agents.update import epochs
    from pgrad.core.variables_as_values import variables_as_values

    v = tf.Variable(0.0)
    for n, seed in [(7, (3, 0)), (256, (12345 * 7919, 41)), (2048, (-5, 2**20))]:
        seed = tf.constant(seed, tf.int32)
        outside = epochs._uniform([n], seed)
        with variables_as_values([(v, tf.constant(1.0))]):
            inside = epochs._uniform([n], seed)
        np.testing.assert_array_equal(inside.numpy(), outside.numpy())


def test_members_share_nothing():
    pop = Population("a2c", "CartPole-v1", seeds=[0, 1], num_envs=2, hidden=(16,))
    a, b = pop.agents
    try:
        ids = lambda m: {id(v) for v in m.net.variables}  # noqa: E731
        assert not ids(a) & ids(b)
        assert a.optimizer is not b.optimizer and a.collector is not b.collector
        assert _max_diff(a, b) > 0  # seeded apart
    finally:
        pop.close()


@pytest.mark.parametrize("seeds,err,text", [
    ([1, 2, 1], ValueError, "repeats seed(s) 1"),
    ([], ValueError, "is empty"),
    ("12", TypeError, "list of integer seeds"),
    ([1, 2.5], TypeError, "seeds are integers"),
    ([-1], ValueError, ">= 0"),
])
def test_bad_seed_lists_are_one_line(seeds, err, text):
    with pytest.raises(err, match=None) as info:
        check_seeds(seeds)
    assert text in str(info.value) and "\n" not in str(info.value)


def test_unsupported_algorithms_and_settings_are_refused_naming_them():
    with pytest.raises(ValueError, match="cannot train 'impala'"):
        Population("impala", "CartPole-v1", seeds=[0, 1])
    with pytest.raises(ValueError, match="recurrent='lstm'"):
        Population("ppo", "CartPole-v1", seeds=[0, 1], recurrent="lstm", num_envs=2)
    with pytest.raises(ValueError, match="vector_mode='async'"):
        Population("a2c", "CartPole-v1", seeds=[0, 1], vector_mode="async", num_envs=2)


class _Member:
    closed = 0

    def __init__(self, seed):
        self.seed = seed
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (4,))

    def steps_per_update(self):
        return 80

    def close(self):
        _Member.closed += 1


def test_the_memory_estimate_refuses_before_building_the_rest():
    line = check_memory(10, 2, 12.0, available=10_000.0)
    assert line.startswith("10 seeds: about 12.0 MiB per seed")
    with pytest.raises(MemoryError, match=r"more than the 0.01 GiB available: train at most"):
        check_memory(5000, 2, 12.0, available=10.0)
    built = []

    def make(seed):
        built.append(seed)
        return _Member(seed)

    _Member.closed = 0
    with pytest.raises(MemoryError):
        build_members(make, list(range(100)), available=0.001)
    assert built == [0, 1] and _Member.closed == 2  # stopped after two, both closed


class _CrashOnSeed(gym.Wrapper):
    """CartPole whose sub-env reset with seed 21 fails at its 30th step."""

    def reset(self, *, seed=None, options=None):
        if seed is not None:
            self.doomed, self.count = seed == 21, 0
        return self.env.reset(seed=seed, options=options)

    def step(self, action):
        self.count += 1
        if self.doomed and self.count >= 30:
            raise RuntimeError("the simulator lost its state")
        return self.env.step(action)


def _crashing_env():
    return _CrashOnSeed(gym.make("CartPole-v1"))


def test_one_seed_whose_env_crashes_stops_alone(capsys):
    pop = Population("a2c", _crashing_env, seeds=[10, 20], num_envs=2, hidden=(16,))
    try:
        pop.learn(200)
        assert list(pop.failures) == [20] and "the simulator lost its state" in pop.failures[20]
        assert pop.agents[0].env_steps >= 200  # the other seed trained on to its total
        assert 0 < pop.agents[1].env_steps < 200
        err = capsys.readouterr().err
        assert "warning: seed 20 stopped:" in err and "the other seeds go on" in err
    finally:
        pop.close()


def test_callbacks_by_seed_and_a_member_that_stops_alone():
    seen: dict[int, int] = {}

    def count(seed):
        def fn(loop):
            seen[seed] = seen.get(seed, 0) + 1
            return seed != 1 or seen[seed] < 2  # seed 1 stops after its 2nd update

        return fn

    pop = Population("a2c", "CartPole-v1", seeds=[0, 1], num_envs=2, n_steps=5, hidden=(16,))
    try:
        pop.learn(40, callbacks=count)
        assert seen == {0: 4, 1: 2}
        with pytest.raises(ValueError, match="outside the population"):
            pop.learn(10, callbacks={7: count(7)})
    finally:
        pop.close()


def test_a_transform_that_captures_a_tensor_of_its_own_traces_each_member():
    import tensorflow as tf

    import pgrad

    factor = tf.Variable(0.5)  # not a member's variable: the shared trace cannot stand in
    chain = pgrad.chain(pgrad.weight_by("advantages"), pgrad.mean_steps(),
                        pgrad.stateless(lambda grads, **context: [g * factor for g in grads]))
    pop = Population("a2c", "CartPole-v1", seeds=[1, 2], transform=chain, num_envs=2,
                     hidden=(16,))
    try:
        pop.learn(2 * pop.agents[0].steps_per_update())
        assert pop.update.shared is None and pop.update.tracing_count() >= 1
        for seed, member in zip([1, 2], pop.agents):
            alone = agents.make("a2c", "CartPole-v1", seed=seed, transform=chain, num_envs=2,
                                hidden=(16,))
            alone.learn(2 * alone.steps_per_update(), progress=False)
            assert _max_diff(member, alone) <= TOL
            alone.close()
    finally:
        pop.close()
