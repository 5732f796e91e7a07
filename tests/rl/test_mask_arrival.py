"""Action masks checked on arrival, and read by evaluation exactly as training reads them.

A mask is bools or integers 0/1; anything else (floats with NaN or not, strings, objects, other
integers) and a mask that forbids every action is one line naming the env and the step, before
any action is taken on it. An evaluation env that stops giving its mask is the same error as in
training, on every evaluation path. The env used here counts the illegal actions it receives:
none may arrive.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from pettingzoo.utils.env import ParallelEnv

import agents
import pgrad
from agents.callbacks import EvalCallback
from pgrad.rl.collection import masks, rollout
from pgrad.rl.envs.vector import EnvError
from pgrad.rl.multiagent import AgentRowsVectorEnv

N = 6  # actions


def encode(legal: np.ndarray, kind: str) -> np.ndarray:
    """``[N]`` bool legal actions as a mask of ``kind``."""
    return {
        "bool": lambda: legal.copy(),
        "int": lambda: legal.astype(np.int8),
        "nan": lambda: np.where(legal, 1.0, np.nan).astype(np.float32),  # NaN meant "illegal"
        "float": lambda: legal.astype(np.float32),
        "str": lambda: np.array([str(b) for b in legal]),  # 'True' / 'False'
        "two": lambda: legal.astype(np.int64) * 2,  # 0 / 2
        "minus": lambda: np.where(legal, 1, -1),
        "list": lambda: [bool(b) for b in legal],  # Python bools: fine
        "none_legal": lambda: np.zeros(N, bool),
    }[kind]()


class Strict(gym.Env):
    """Discrete(N): two legal actions per step (the observation shows them); counts the illegal
    actions it receives in the class attribute ``illegal`` (sync vector envs share it).

    Args:
      source: where the mask is: ``"info"``, ``"observation"`` (a Dict key) or ``"method"``
        (``action_masks()``).
      kind: the mask's encoding (:func:`encode`) from step ``bad_at`` on (before: bools).
      drop_at: from this step on, the info mask is left out (only in episodes reset with a
        seed >= ``drop_seed``: 10000 on are pgrad's evaluation episodes, never training's).
    """

    metadata = {"render_modes": []}
    illegal = 0

    def __init__(self, source: str = "info", kind: str = "bool", bad_at: int = 0,
                 drop_at: int | None = None, drop_seed: int = 0, horizon: int = 12):
        self.source, self.kind, self.bad_at, self.drop_at = source, kind, bad_at, drop_at
        self.drop_seed, self._dropping = drop_seed, drop_seed <= 0
        self.horizon = horizon
        self.action_space = gym.spaces.Discrete(N)
        features = gym.spaces.Box(0.0, 1.0, (N,), np.float32)
        mask_space = (gym.spaces.Box(0.0, 1.0, (N,), np.float32) if kind in ("nan", "float")
                      else gym.spaces.MultiBinary(N))
        self.observation_space = (features if source != "observation" else gym.spaces.Dict(
            {"observation": features, "action_mask": mask_space}))
        self._legal = np.zeros(N, bool)
        self._t = 0

    def _mask(self):
        return encode(self._legal, self.kind if self._t >= self.bad_at else "bool")

    def _out(self):
        x = self._legal.astype(np.float32)
        obs = {"observation": x, "action_mask": self._mask()} if self.source == "observation" \
            else x
        dropped = self._dropping and self.drop_at is not None and self._t >= self.drop_at
        info = {"action_mask": self._mask()} if self.source == "info" and not dropped else {}
        return obs, info

    def _offer(self):
        self._legal = np.zeros(N, bool)
        self._legal[self.np_random.choice(N, 2, replace=False)] = True

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if seed is not None:  # (autoreset: no seed, the episode's kind kept)
            self._dropping = seed >= self.drop_seed
        self._t = 0
        self._offer()
        return self._out()

    def step(self, action):
        if not self._legal[int(action)]:
            type(self).illegal += 1
        self._t += 1
        self._offer()
        obs, info = self._out()
        return obs, 1.0, self._t >= self.horizon, False, info


class WithMethod(Strict):
    """Strict with sb3-contrib's ``action_masks()`` method (the ``"method"`` source)."""

    def action_masks(self):
        return self._mask()


def factory(**kw):
    Strict.illegal = 0
    return lambda: (WithMethod if kw.get("source") == "method" else Strict)(**kw)


def register(env_id: str, **kw) -> str:
    if env_id not in gym.registry:
        gym.register(env_id, entry_point=Strict, kwargs=kw)
    Strict.illegal = 0
    return env_id


def collect(make, steps: int = 6, name: str = "strict"):
    """A two-env collector acting uniformly among the legal actions (or all, without masks)."""
    col = rollout.Collector(rollout.make_vec_env(make, 2), name)
    rng = np.random.default_rng(0)

    def policy_fn(obs, action_mask=None):
        legal = np.ones((2, N), bool) if action_mask is None else action_mask
        a = np.array([rng.choice(np.flatnonzero(m)) for m in legal], np.int32)
        return a, a.astype(np.int64), np.zeros(2, np.float32), None

    try:
        col.reset(seed=0)
        return col.collect(policy_fn, steps)
    finally:
        col.close()


def one_line(err: pytest.ExceptionInfo, *fragments: str) -> str:
    text = str(err.value)
    assert "\n" not in text, text
    for fragment in fragments:
        assert fragment in text, text
    return text


# -- the values a mask may hold -------------------------------------------------------------------


@pytest.mark.parametrize("kind, says", [
    ("nan", "holds floats (float32, NaN among them); pass bools, or integers 0 (illegal) and 1 "
            "(legal)"),
    ("float", "holds floats (float32); pass bools"),
    ("str", "holds strings (<U5, e.g. np.str_('False')"),
    ("two", "holds the integer value(s) 2; pass bools"),
    ("minus", "holds the integer value(s) -1; pass bools"),
])
def test_bool_values_refuses_what_is_not_a_mask(kind, says):
    legal = np.array([False, True, True, False, False, False])
    out, why = masks.bool_values(encode(legal, kind))
    assert out is None and why.startswith(says), why
    with pytest.raises(EnvError, match=r"^env 'E' at env step 4 gave an action_mask that holds "):
        masks.check(encode(legal, kind), (N,), 1, "env 'E' at env step 4")


def test_bool_values_accepts_bools_and_0_1_integers_of_any_width():
    legal = np.array([False, True, True, False, False, False])
    for mask in (legal, legal.astype(np.int8), legal.astype(np.uint8), legal.astype(np.int64),
                 [bool(b) for b in legal], [int(b) for b in legal],
                 np.array([legal, legal], dtype=object)[0], np.array([list(legal)], object)):
        out, why = masks.bool_values(mask)
        assert why == "" and out.dtype == bool and out.reshape(-1).tolist() == legal.tolist()
    assert masks.bool_values(np.array([[1, 0], [0, 3, 4]], dtype=object))[0] is None
    _, why = masks.bool_values(np.arange(8) - 2)
    assert "-2, -1, 2, ..." in why, why  # the first three bad values, sorted


# -- training: every source, every bad kind; no illegal action reaches the env --------------------


@pytest.mark.parametrize("source, kind, says", [
    ("info", "nan", "holds floats (float32, NaN among them)"),
    ("info", "float", "holds floats (float32)"),
    ("info", "str", "holds strings"),
    ("info", "two", "holds the integer value(s) 2"),
    ("info", "none_legal", "forbids every action (sub-env 0)"),
    # a float Box as the mask's space: even its 0.0/1.0 masks are floats, refused at the reset
    ("observation", "nan", "holds floats (float32); pass bools"),
    ("observation", "two", "holds the integer value(s) 2"),
    ("method", "nan", "holds floats (float32, NaN among them)"),
    ("method", "str", "holds strings"),
    ("method", "minus", "holds the integer value(s) -1"),
])
def test_a_bad_mask_in_training_is_one_line_naming_env_and_step(source, kind, says):
    with pytest.raises(EnvError) as err:  # good masks at steps 0, 1; bad from step 2
        collect(factory(source=source, kind=kind, bad_at=2))
    where = "reset (env step 0)" if (source, kind) == ("observation", "nan") else "env step 4"
    one_line(err, f"env 'strict' at {where} gave an action_mask that ", says)
    assert Strict.illegal == 0


@pytest.mark.parametrize("kind", ["nan", "str", "two"])
def test_a_bad_mask_at_the_reset_stops_before_any_step(kind):
    with pytest.raises(EnvError) as err:
        collect(factory(kind=kind))
    one_line(err, "env 'strict' at reset (env step 0) gave an action_mask that holds ")
    assert Strict.illegal == 0


@pytest.mark.parametrize("kind", ["nan", "str", "two", "none_legal"])
def test_action_masker_masks_are_checked(kind):
    Strict.illegal = 0
    with pytest.raises(EnvError) as err:
        collect(lambda: masks.ActionMasker(Strict(source="none"),
                                           lambda env: encode(env.unwrapped._legal, kind)))
    one_line(err, "env 'strict' at reset (env step 0) gave an action_mask that ")
    assert Strict.illegal == 0


@pytest.mark.parametrize("source, kind", [("info", "bool"), ("info", "int"), ("info", "list"),
                                          ("observation", "int"), ("method", "int"),
                                          ("method", "list")])
def test_bool_and_0_1_masks_still_work(source, kind):
    traj, _ = collect(factory(source=source, kind=kind), steps=30)
    assert traj.action_mask.dtype == bool and traj.action_mask.sum(-1).tolist() == [[2, 2]] * 30
    assert Strict.illegal == 0


def test_a_training_agent_stops_on_a_nan_mask_before_acting_on_it():
    agent = agents.make("a2c", register("StrictMaskNan-v0", kind="nan", bad_at=3), seed=0,
                        num_envs=2, hidden=(8,), n_steps=4)
    try:
        with pytest.raises(EnvError) as err:
            agent.learn(64, progress=False)
        one_line(err, "env 'StrictMaskNan-v0' at env step 6 gave an action_mask that holds "
                      "floats (float32, NaN among them)")
        assert Strict.illegal == 0
    finally:
        agent.close()


# -- predict(..., action_masks=) and a Dict observation's own mask --------------------------------


@pytest.fixture(scope="module")
def trained():
    """A small A2C agent on Strict (bool masks in info) after two updates; illegal actions: 0."""
    agent = agents.make("a2c", register("StrictMask-v0"), seed=0, num_envs=2, hidden=(8,),
                        n_steps=4)
    agent.step()
    agent.step()
    assert Strict.illegal == 0
    yield agent
    agent.close()


@pytest.mark.parametrize("kind", ["nan", "float", "str", "two", "none_legal"])
def test_predict_refuses_a_bad_mask(trained, kind):
    legal = np.array([False, True, True, False, False, False])
    obs = legal.astype(np.float32)
    for batch in (False, True):
        given = encode(legal, kind)
        with pytest.raises(ValueError) as err:
            trained.predict(obs[None] if batch else obs,
                            action_masks=np.asarray(given)[None] if batch else given)
        one_line(err, "predict/act(action_masks=...) gave an action_mask that ")
    good = trained.predict(obs, action_masks=legal.astype(np.int8))[0]
    assert legal[good]


def test_predict_checks_a_dict_observation_s_own_mask():
    agent = agents.make("a2c", register("StrictMaskDict-v0", source="observation", kind="int"),
                        seed=0, num_envs=2, hidden=(8,), n_steps=4)
    try:
        legal = np.array([False, True, True, False, False, False])
        x = legal.astype(np.float32)
        for kind in ("float", "str", "two"):
            with pytest.raises(ValueError) as err:
                agent.predict({"observation": x, "action_mask": encode(legal, kind)})
            one_line(err, "predict/act: the observation's action_mask holds ")
        with pytest.raises(ValueError) as err:  # NaN: refused with the observation's NaNs
            agent.predict({"observation": x, "action_mask": encode(legal, "nan")})
        one_line(err, "predict: the observation['action_mask'] holds NaN")
        for kind in ("bool", "int"):
            action = agent.predict({"observation": x, "action_mask": encode(legal, kind)})[0]
            assert legal[action]
    finally:
        agent.close()


# -- PettingZoo agents ----------------------------------------------------------------------------


class Game(ParallelEnv):
    """A two-agent PettingZoo ParallelEnv whose action masks are of ``kind`` from step 1."""

    metadata = {"name": "mask_game", "is_parallelizable": True}

    def __init__(self, kind: str):
        self.kind = kind
        self.possible_agents = ["p0", "p1"]
        self.agents: list[str] = []
        self.t = 0

    def observation_space(self, agent):
        mask = (gym.spaces.Box(0.0, 1.0, (3,), np.float32) if self.kind in ("nan", "float")
                else gym.spaces.MultiBinary(3))
        return gym.spaces.Dict({"observation": gym.spaces.Box(0.0, 1.0, (2,), np.float32),
                                "action_mask": mask})

    def action_space(self, agent):
        return gym.spaces.Discrete(3)

    def _obs(self):
        legal = np.array([True, False, True])
        mask = encode(legal, self.kind if self.t >= 1 else "int")
        return {a: {"observation": np.zeros(2, np.float32), "action_mask": mask}
                for a in self.agents}

    def reset(self, seed=None, options=None):
        self.t, self.agents = 0, list(self.possible_agents)
        return self._obs(), {a: {} for a in self.agents}

    def step(self, actions):
        self.t += 1
        zero = {a: 0.0 for a in self.agents}
        return (self._obs(), zero, {a: False for a in self.agents},
                {a: False for a in self.agents}, {a: {} for a in self.agents})

    def close(self):
        pass

    def state(self):
        raise NotImplementedError


@pytest.mark.parametrize("kind, says", [("nan", "holds floats (float32, NaN among them)"),
                                        ("float", "holds floats (float32)"),
                                        ("str", "holds strings"),
                                        ("two", "holds the integer value(s) 2")])
def test_a_pettingzoo_agent_s_bad_mask_names_env_agent_and_step(kind, says):
    envs = AgentRowsVectorEnv(lambda: Game(kind), 1)
    _, info = envs.reset(seed=0)
    assert info["action_mask"].tolist() == [[True, False, True]] * 2
    with pytest.raises(EnvError) as err:
        envs.step(np.array([0, 2]))
    one_line(err, "env 'mask_game' (copy 0), agent 'p0' at step 1: action_mask ", says)


# -- evaluation reads masks as training does ------------------------------------------------------

DROP = "env 'StrictMaskDrop-v0' gave no info['action_mask'] at step 3 of evaluation episode 0"


@pytest.fixture
def dropping():
    """A registered Strict env that leaves its info mask out from step 3 on."""
    return register("StrictMaskDrop-v0", drop_at=3)


@pytest.mark.parametrize("deterministic", [True, False])
def test_evaluation_refuses_an_env_that_drops_its_mask(trained, dropping, deterministic):
    with pytest.raises(EnvError) as err:
        pgrad.evaluate(trained, env_id=dropping, episodes=3, deterministic=deterministic)
    one_line(err, DROP, "an env that masks actions must give the mask from its reset and "
                        "every step")
    assert Strict.illegal == 0


def test_training_refuses_the_same_env_with_the_same_words(dropping):
    with pytest.raises(EnvError) as err:
        collect(lambda: gym.make(dropping), steps=8, name=dropping)
    one_line(err, f"env {dropping!r} gave no info['action_mask'] at env step 6 (sub-env(s) "
                  "[0, 1]); an env that masks actions must give the mask from its reset and "
                  "every step")


def test_evaluation_refuses_masks_at_some_resets_only(trained):
    made = iter([Strict(), Strict(source="none"), Strict()])
    with pytest.raises(EnvError) as err:
        pgrad.evaluate(trained, env_id=lambda: next(made), episodes=3)
    one_line(err, "gave an action mask at the reset of evaluation episode 0 but none at that of "
                  "episode 1")


@pytest.mark.parametrize("kind", ["nan", "str"])
def test_evaluation_refuses_a_bad_mask(trained, kind):
    Strict.illegal = 0
    with pytest.raises(EnvError) as err:
        pgrad.evaluate(trained, env_id=lambda: Strict(kind=kind, bad_at=2), episodes=2)
    one_line(err, "at step 2 of evaluation episode 0 (seed 0) gave an action_mask that holds ")
    assert Strict.illegal == 0


def test_eval_callback_refuses_an_env_that_drops_its_mask(dropping, tmp_path):
    agent = agents.make("a2c", register("StrictMask-v0"), seed=0, num_envs=2, hidden=(8,),
                        n_steps=4)
    try:
        callback = EvalCallback(env_id=dropping, every=8, episodes=2, log_dir=tmp_path)
        with pytest.raises(EnvError) as err:
            agent.learn(32, callbacks=[callback], progress=False)
        one_line(err, DROP)
        assert Strict.illegal == 0 and agent.env_steps >= 8
    finally:
        agent.close()


def test_a_recurrent_policy_s_evaluation_refuses_it(dropping):
    agent = agents.make("a2c", register("StrictMask-v0"), seed=0, num_envs=2, hidden=(8,),
                        n_steps=4, recurrent="lstm", lstm_units=8)
    try:
        assert agent.net.recurrent
        agent.step()
        for deterministic in (True, False):
            with pytest.raises(EnvError) as err:
                pgrad.evaluate(agent, env_id=dropping, episodes=2, deterministic=deterministic)
            one_line(err, DROP)
        ok = pgrad.evaluate(agent, episodes=2)  # its own env keeps giving masks: all legal
        assert ok["returns"] == [12.0, 12.0] and Strict.illegal == 0
    finally:
        agent.close()


def test_an_exported_policy_from_a_save_directory_refuses_it(trained, dropping, tmp_path):
    trained.save(tmp_path / "run")
    for deterministic in (True, False):
        with pytest.raises(EnvError) as err:
            pgrad.evaluate(str(tmp_path / "run"), env_id=dropping, episodes=2,
                           deterministic=deterministic)
        one_line(err, DROP)
    ok = pgrad.evaluate(str(tmp_path / "run"), episodes=3)  # the env it records: StrictMask-v0
    assert ok["env"] == "StrictMask-v0" and ok["returns"] == [12.0] * 3
    assert Strict.illegal == 0


@pytest.mark.subprocess  # the commands end to end, as a user runs them (in this process)
def test_pgrad_train_and_evaluate_refuse_an_eval_env_that_drops_its_mask(dropping, tmp_path,
                                                                         capsys):
    from cli_helpers import evaluate, one_error_line, train

    late = register("StrictMaskEvalDrop-v0", drop_at=3, drop_seed=10_000)  # evaluation only
    code, _, err = train("--agent", "a2c", "--env", late, "--out", tmp_path / "every",
                         "--total-steps", 64, "--num-envs", 2, "--quiet", "--set", "n_steps=8",
                         "--set", "hidden=[8]", "--eval-every", 16, capsys=capsys)
    line = one_error_line(err)
    assert code == 1 and ("env 'StrictMaskEvalDrop-v0' gave no info['action_mask'] at step 3 of "
                          "evaluation episode 0 (seed 10000)") in line, line
    run = tmp_path / "run"
    code, _, err = train("--agent", "a2c", "--env", register("StrictMask-v0"), "--out", run,
                         "--total-steps", 64, "--num-envs", 2, "--quiet", "--set", "n_steps=8",
                         "--set", "hidden=[8]", capsys=capsys)
    assert code == 0, err
    for extra in ((), ("--stochastic",)):
        code, _, err = evaluate(run, "--env", dropping, "--episodes", 2, *extra, capsys=capsys)
        line = one_error_line(err)
        assert code == 1 and f"error: {DROP} (seed 10000)" in line, line
    code, out, err = evaluate(run, "--episodes", 2, capsys=capsys)
    assert code == 0 and "return 12.00 ± 0.00" in out, out + err
    assert Strict.illegal == 0
