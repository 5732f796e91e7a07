"""Atari's standard preprocessing, real game scores, env ids that register themselves, MinAtar.

The Gymnasium pipeline is checked against a *twin*: the same ale-py env under Gymnasium's bare
``AtariPreprocessing`` (no episodic life, FIRE reset, clipping or stack), with the same seed and
actions. Both run the same emulator frames (sticky actions come from ALE's own seeded generator),
so every learning-side difference -- a lost life marked ``terminated``, the no-op and FIRE steps
that follow it, clipped rewards -- is visible step by step, and the game score the stack reports
must be the twin's summed raw rewards. The envpool backend is checked in lockstep against the
Gymnasium pipeline where envpool's semantics allow (see pgrad/rl/envs/envpool_atari.py).
"""

from __future__ import annotations

import sys

import gymnasium as gym
import numpy as np
import pytest

import pgrad  # noqa: F401  (first: silences TensorFlow)
from pgrad.rl.collection import rollout
from pgrad.rl.envs import atari
from pgrad.rl.envs import envpool as envpool_env
from pgrad.rl.envs import vector as envs
from pgrad.rl.evaluation import evaluate_policy as evaluation

pytest.importorskip("ale_py")
pytest.importorskip("cv2")


def twin(env_id: str) -> gym.Env:
    return gym.wrappers.AtariPreprocessing(gym.make(env_id, frameskip=1), noop_max=30)


def random_actions(seed: int, n: int):
    rng = np.random.default_rng(seed)
    return lambda: int(rng.integers(n))


def vector_games(info: dict) -> dict[int, tuple[float, int]]:
    """``{sub-env: (score, length)}`` of the games a vector env's step info reports."""
    out = {}
    for src in (info, info.get("final_info", {})):
        for b in np.flatnonzero(src.get("_" + envs.GAME_INFO, [])):
            out[int(b)] = (src[envs.GAME_INFO]["r"][b], src[envs.GAME_INFO]["l"][b])
    return out


# -- the stack ------------------------------------------------------------------------------------

def test_observations_are_channel_last_uint8_frame_stacks():
    env = envs.make_env("ALE/Pong-v5")
    assert env.observation_space == gym.spaces.Box(0, 255, (84, 84, 4), np.uint8)
    assert env.metadata[envs.GAME_INFO] is True
    obs, _ = env.reset(seed=0)
    assert obs.shape == (84, 84, 4) and obs.dtype == np.uint8
    assert env.observation_space.contains(obs)
    for c in range(3):  # a new stack repeats the first frame
        np.testing.assert_array_equal(obs[..., c], obs[..., 3])
    frames = [obs]
    for a in (2, 3, 2, 3, 0):
        frames.append(env.step(a)[0])
    for prev, nxt in zip(frames, frames[1:]):  # each step shifts one new frame in at the end
        np.testing.assert_array_equal(nxt[..., :3], prev[..., 1:])
    assert not np.array_equal(frames[-1][..., 3], frames[-1][..., 0])  # the paddles moved
    env.close()
    env = envs.make_env("ALE/Pong-v5", frame_stack=2, stack_padding="zero", grayscale=False)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (84, 84, 6)
    assert not obs[..., :3].any() and obs[..., 3:].any()  # zero padding, then the RGB frame
    env.close()
    raw = envs.make_env("ALE/Pong-v5", preprocess=False)
    assert raw.observation_space.shape == (210, 160, 3) and envs.GAME_INFO not in raw.metadata
    raw.close()


def test_vector_env_and_its_ids():
    v = envs.make_vec_env("PongNoFrameskip-v4", 2, max_obs_dim=1 << 20)
    assert v.single_observation_space.shape == (84, 84, 4) and v.metadata[envs.GAME_INFO]
    base = v.unwrapped.envs[0].unwrapped
    assert base._frameskip == 1 and base.ale.getFloat("repeat_action_probability") == 0.0
    v.close()
    env = envs.make_env("ALE/Pong-v5")  # v5: sticky actions, as ale-py registers the id
    assert env.unwrapped.ale.getFloat("repeat_action_probability") == pytest.approx(0.25)
    env.close()
    assert envs.is_atari_id("ALE/Breakout-v5") and envs.is_atari_id("BreakoutNoFrameskip-v4")
    assert not envs.is_atari_id("CartPole-v1") and not envs.is_atari_id("MinAtar/Breakout-v1")
    with pytest.raises(ValueError, match="frame_skip, not frameskip"):
        envs.make_env("ALE/Pong-v5", frameskip=4)
    with pytest.raises(ValueError, match="frame_stack"):
        envs.make_env("ALE/Pong-v5", frame_stack=0)


@pytest.mark.subprocess
@pytest.mark.parametrize("user_import", [False, True])
def test_no_emulator_banner_on_stderr(user_import):
    """ALE prints "A.L.E: Arcade Learning Environment ... [Powered by Stella]" for each emulator
    unless its logger is set to errors only; pgrad does so when it registers the ids and again
    in make_atari (ids the user's own ``import ale_py`` registered)."""
    import subprocess

    code = ("import gymnasium as gym, ale_py; gym.register_envs(ale_py)\n" if user_import else ""
            ) + ("from pgrad.rl.envs.vector import make_vec_env\n"
                 "v = make_vec_env('ALE/Pong-v5', 2, 'async'); v.reset(seed=0); v.close()\n"
                 "print('made')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0 and "made" in out.stdout, out.stderr[-2000:]
    assert "Stella" not in out.stderr and "A.L.E" not in out.stderr, out.stderr[-2000:]


def test_fire_reset_only_where_the_game_has_fire():
    def chain(env):
        names = []
        while isinstance(env, gym.Wrapper):
            names.append(type(env).__name__)
            env = env.env
        return names

    breakout, freeway = envs.make_env("ALE/Breakout-v5"), envs.make_env("ALE/Freeway-v5")
    assert "FireReset" in chain(breakout) and "FireReset" not in chain(freeway)
    assert "FIRE" not in freeway.unwrapped.get_action_meanings()
    off = envs.make_env("ALE/Breakout-v5", fire_reset=False)
    breakout.reset(seed=1)
    off.reset(seed=1)  # the same no-ops (the seed), then FIRE and action 2: 4 frames each
    assert (breakout.unwrapped.ale.getEpisodeFrameNumber()
            == off.unwrapped.ale.getEpisodeFrameNumber() + 8)
    for env in (breakout, freeway, off):
        env.close()


# -- episodic life, clipping and the real score, against the twin ----------------------------------

@pytest.mark.parametrize("env_id, seed, lives", [("ALE/Breakout-v5", 3, 5),
                                                  ("SpaceInvadersNoFrameskip-v4", 0, 3)])
def test_a_whole_game_against_the_bare_twin(env_id, seed, lives):
    """Episodic life ends learning episodes at each lost life without resetting the emulator;
    learning rewards are clipped; the reported game is the whole game's raw score."""
    ours, ref = envs.make_env(env_id), twin(env_id)
    ale = ours.unwrapped.ale
    obs, _ = ours.reset(seed=seed)
    ref_obs, _ = ref.reset(seed=seed)
    raw = 0.0  # the twin's rewards: the game's real score
    for a in (1, 2):  # FireReset
        ref_obs, r, *_ = ref.step(a)
        raw += r
    np.testing.assert_array_equal(obs[..., -1], ref_obs)
    act, steps, lost, clipped = random_actions(seed, ours.action_space.n), 0, 0, 0.0
    alive = ale.lives()
    assert alive == lives
    while True:
        a = act()
        obs, reward, term, trunc, info = ours.step(a)
        ref_obs, ref_reward, ref_term, ref_trunc, _ = ref.step(a)
        steps, raw = steps + 1, raw + ref_reward
        np.testing.assert_array_equal(obs[..., -1], ref_obs, err_msg=f"step {steps}")
        assert reward == np.sign(ref_reward)  # clipped for learning only
        clipped += reward
        assert not trunc and not ref_trunc
        assert (envs.GAME_INFO in info) == ref_term
        if term and not ref_term:  # a lost life: terminated for learning, the game goes on
            assert 0 < ale.lives() == alive - 1
            alive, frame, lost = ale.lives(), ale.getEpisodeFrameNumber(), lost + 1
            obs, info = ours.reset()
            assert envs.GAME_INFO not in info
            # not reset: the same game, one no-op step, FIRE and action 2 later
            assert ale.lives() == alive and ale.getEpisodeFrameNumber() == frame + 12
            for b in (0, 1, 2):
                ref_obs, r, *_ = ref.step(b)
                raw += r
            np.testing.assert_array_equal(obs[..., -1], ref_obs)
            assert all(np.array_equal(obs[..., c], obs[..., 3]) for c in range(3))  # new stack
        elif ref_term:  # game over
            assert term and ale.lives() == 0
            assert info[envs.GAME_INFO] == {"r": raw, "l": steps}
            obs, info = ours.reset()
            assert envs.GAME_INFO not in info and ale.lives() == lives  # a new game
            break
        else:
            assert not term
    assert lost == lives - 1
    if env_id.startswith("SpaceInvaders"):
        assert raw > clipped > 0  # aliens are worth 5..30 points: the score is not clipped
    ours.close()
    ref.close()


def test_options_turn_off_episodic_life_and_clipping():
    env = envs.make_env("ALE/Breakout-v5", episodic_life=False, clip_rewards=False)
    env.reset(seed=3)
    act, total, steps = random_actions(3, 4), 0.0, 0
    while True:
        _, reward, term, trunc, info = env.step(act())
        total, steps = total + reward, steps + 1
        if term or trunc:
            assert env.unwrapped.ale.lives() == 0  # only the game over ends the episode
            assert info[envs.GAME_INFO] == {"r": total, "l": steps}
            break
    env.close()


# -- the Collector and evaluation report whole games ----------------------------------------------

@pytest.mark.parametrize("mode", ["sync", "async"])
def test_collector_reports_whole_games(mode):
    """The vector env's episodes are the sub-envs' games (as a single env replayed reports
    them); learning episodes (lives), clipped rewards and observations are the single env's."""
    num_envs, env_id = 2, "ALE/Breakout-v5"
    v = envs.make_vec_env(env_id, num_envs, mode)
    col = rollout.Collector(v, env_id)
    col.reset(seed=0)
    rng, taken = np.random.default_rng(0), []

    def policy(obs):
        a = rng.integers(4, size=obs.shape[0])
        taken.append(a)
        return a, a, np.zeros(len(a), np.float32), None

    parts, episodes = [], []
    for _ in range(3):  # 300 steps: random Breakout games take 100-250
        traj, eps = col.collect(policy, 100)
        parts.append(traj)
        episodes += eps
    col.close()
    rewards = np.concatenate([t.rewards for t in parts])
    terminated = np.concatenate([t.terminated for t in parts])
    observations = np.concatenate([t.observations for t in parts])
    expected = []
    for b in range(num_envs):
        env = envs.make_env(env_id)
        obs, _ = env.reset(seed=b)
        for t, a in enumerate(taken):
            np.testing.assert_array_equal(observations[t, b], np.asarray(obs))  # images as they are
            obs, r, term, trunc, info = env.step(int(a[b]))
            assert rewards[t, b] == r and terminated[t, b] == term
            if term or trunc:
                if envs.GAME_INFO in info:
                    game = info[envs.GAME_INFO]
                    expected.append(((t + 1) * num_envs, game["r"], game["l"]))
                obs, _ = env.reset()
        env.close()
    assert sorted(episodes) == sorted(expected)
    assert len(episodes) >= 2 and terminated.sum() >= 4 * len(episodes)  # lives ended more often


class ObsPolicy:
    """A deterministic function of the observation, so a replay takes the same actions."""

    observation_space = gym.spaces.Box(0, 255, (84, 84, 4), np.uint8)

    def flatten(self, obs):
        return np.asarray(obs, np.float32).reshape(len(obs), -1)

    def act_flat(self, flat, deterministic, rng):
        return (flat[:, ::53].sum(1).astype(np.int64) // 5) % 4


def test_evaluation_plays_whole_games():
    env_id, policy = "ALE/Breakout-v5", ObsPolicy()
    returns, lengths = evaluation.run_episodes(policy, lambda i: envs.make_env(env_id), 2, seed=5)
    for i in range(2):
        env, score, steps, info = envs.make_env(env_id, clip_rewards=False), 0.0, 0, {}
        obs, _ = env.reset(seed=5 + i)
        while envs.GAME_INFO not in info and steps < 10_000:
            action = policy.act_flat(policy.flatten(obs[None]), True, None)[0]
            obs, reward, term, trunc, info = env.step(int(action))
            score, steps = score + reward, steps + 1
            if (term or trunc) and envs.GAME_INFO not in info:
                obs, info = env.reset()
        assert (returns[i], lengths[i]) == (info[envs.GAME_INFO]["r"], steps)
        assert env.unwrapped.ale.lives() == 0  # the game really was over
        assert returns[i] == score  # unclipped (Breakout's FIRE steps score nothing)
        env.close()


def test_a_game_that_ends_inside_a_reset_is_reported_by_that_reset():
    """The frame limit can fall in the no-op step after a lost life: EpisodicLife's reset then
    resets the game, and the report comes in the reset's info (env, Collector, evaluation)."""
    env_id, policy, seed = "ALE/Breakout-v5", ObsPolicy(), 5
    act = lambda obs: int(policy.act_flat(policy.flatten(obs[None]), True, None)[0])  # noqa: E731
    env = envs.make_env(env_id, clip_rewards=False)
    obs, _ = env.reset(seed=seed)
    steps, score, term = 0, 0.0, False
    while not term:  # to the first lost life
        obs, reward, term, _, _ = env.step(act(obs))
        steps, score = steps + 1, score + reward
    limit = env.unwrapped.ale.getEpisodeFrameNumber() + 2  # inside the next no-op step
    env.close()
    env = envs.make_env(env_id, clip_rewards=False, max_num_frames_per_episode=limit)
    obs, _ = env.reset(seed=seed)
    for _ in range(steps):
        obs, _, term, trunc, info = env.step(act(obs))
    assert term and not trunc and envs.GAME_INFO not in info  # a lost life ...
    obs, info = env.reset()  # ... and the game's frame limit inside the reset
    assert info[envs.GAME_INFO] == {"r": score, "l": steps}
    assert env.unwrapped.ale.lives() == 5  # a new game
    env.close()

    v = envs.make_vec_env(env_id, 1, env_kwargs={"max_num_frames_per_episode": limit})
    col = rollout.Collector(v, env_id)
    col.reset(seed=seed)
    fn = lambda o: ((policy.act_flat(policy.flatten(o), True, None),) * 2  # noqa: E731
                    + (np.zeros(len(o), np.float32), None))
    _, episodes = col.collect(fn, steps)
    assert episodes == [(steps, score, steps)]
    col.close()
    returns, lengths = evaluation.run_episodes(
        policy, lambda i: envs.make_env(env_id, max_num_frames_per_episode=limit), 1, seed=seed)
    assert (returns, lengths) == ([score], [steps])


# -- ids that register themselves; MinAtar; missing packages --------------------------------------

def _unregister(monkeypatch, prefix: str):
    for key in [k for k in gym.registry if k.startswith(prefix)]:
        monkeypatch.delitem(gym.registry, key)


def test_minatar_registers_on_demand(monkeypatch):
    pytest.importorskip("minatar")
    _unregister(monkeypatch, "MinAtar/")
    envs.ensure_registered("MinAtar/Breakout-v1")
    assert {f"MinAtar/{g}-v1" for g in ("Asterix", "Breakout", "Freeway", "Seaquest",
                                        "SpaceInvaders")} <= set(gym.registry)
    _unregister(monkeypatch, "MinAtar/")
    v = envs.make_vec_env("MinAtar/Breakout-v1", 2)  # registers itself too
    space = v.single_observation_space
    assert space.shape == (10, 10, 4) and space.dtype == bool
    assert envs.GAME_INFO not in v.metadata  # MinAtar's episodes are its games
    col = rollout.Collector(v, "MinAtar/Breakout-v1")
    col.reset(seed=0)
    policy = lambda o: (np.zeros(len(o), np.int64),) * 2 + (np.zeros(len(o), np.float32), None)
    traj, episodes = col.collect(policy, 200)
    assert traj.observations.shape == (200, 2, 10, 10, 4) and episodes  # standing still loses
    col.close()


def test_ensure_registered_leaves_other_ids_alone():
    envs.ensure_registered("CartPole-v1")
    envs.ensure_registered("NoSuchEnv-v0")  # gym.make says what is wrong with it
    envs.ensure_registered(lambda: None)


@pytest.mark.parametrize("env_id, modules, extra", [
    ("ALE/Pong-v5", ["ale_py"], "atari"),
    ("PongNoFrameskip-v4", ["ale_py"], "atari"),
    ("MinAtar/Breakout-v1", ["minatar", "minatar.gym"], "minatar")])
def test_a_missing_package_is_one_line_naming_the_extra(monkeypatch, env_id, modules, extra):
    for m in modules:
        monkeypatch.setitem(sys.modules, m, None)  # import -> ImportError
    monkeypatch.delitem(gym.registry, env_id, raising=False)
    for call in (lambda: envs.ensure_registered(env_id), lambda: envs.make_vec_env(env_id, 2),
                 lambda: envs.make_env(env_id)):
        with pytest.raises(ImportError) as err:
            call()
        text = str(err.value)
        assert "\n" not in text and env_id in text and f"pip install 'pgrad[{extra}]'" in text


def test_missing_opencv_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "cv2", None)
    with pytest.raises(ImportError, match=r"OpenCV \(pip install 'pgrad\[atari\]'\)"):
        atari.make_atari("ALE/Pong-v5")


# -- envpool: the same contract, and lockstep where envpool allows --------------------------------

needs_envpool = pytest.mark.skipif(not envpool_env.is_available(),
                                   reason="envpool is not installed (pip install 'pgrad[envpool]')")


@needs_envpool
def test_envpool_atari_contract():
    v = envs.make_vec_env("ALE/Breakout-v5", 2, "envpool")
    pool = v.unwrapped
    assert "EnvpoolAtari" in repr(pool) and v.metadata[envs.GAME_INFO]
    assert v.single_observation_space == gym.spaces.Box(0, 255, (84, 84, 4), np.uint8)
    config = pool._pool.config
    assert config["repeat_action_probability"] == pytest.approx(0.25)  # ale-py's v5
    assert config["episodic_life"] and config["reward_clip"] and config["stack_num"] == 4
    assert pool.max_episode_steps == 27_000  # 108,000 frames
    obs, _ = v.reset(seed=0)
    act = random_actions(0, 4)
    for _ in range(50):
        nxt, r, term, trunc, info = v.step(np.array([act(), act()]))
        assert nxt.shape == (2, 84, 84, 4) and nxt.dtype == np.uint8 and nxt.flags.c_contiguous
        assert set(np.unique(r)) <= {-1.0, 0.0, 1.0}
        for b in np.flatnonzero(~(term | trunc)):
            np.testing.assert_array_equal(nxt[b, ..., :3], obs[b, ..., 1:])
        obs = nxt
    v.close()
    v = envs.make_vec_env("BreakoutNoFrameskip-v4", 1, "envpool")
    assert v.unwrapped._pool.config["repeat_action_probability"] == 0.0
    v.close()
    with pytest.raises(ValueError, match="stack_padding='reset'"):
        envs.make_vec_env("ALE/Breakout-v5", 1, "envpool", env_kwargs={"stack_padding": "zero"})


#: settings under which envpool and make_atari run the same emulator frames
SAME_FRAMES = {"noop_max": 1, "fire_reset": False}


def lockstep(episodic_life: bool, num_envs: int = 2, games: int = 1, seed: int = 0):
    """Steps envpool's and Gymnasium's Breakout (no sticky actions) in lockstep; asserts that
    they agree (with episodic life: up to each env's first lost life). Returns the games seen."""
    kwargs = dict(SAME_FRAMES, episodic_life=episodic_life)
    ours = envs.make_vec_env("BreakoutNoFrameskip-v4", num_envs, "envpool", env_kwargs=kwargs)
    ref = envs.make_vec_env("BreakoutNoFrameskip-v4", num_envs, env_kwargs=kwargs)
    obs, _ = ours.reset(seed=seed)
    ref_obs, _ = ref.reset(seed=seed)
    np.testing.assert_array_equal(obs, ref_obs)
    live = np.ones(num_envs, bool)  # envs still compared
    seen, rng = np.zeros(num_envs, int), np.random.default_rng(seed)
    for t in range(3000):
        actions = rng.integers(4, size=num_envs)
        o, r, term, trunc, info = ours.step(actions)
        ro, rr, rterm, rtrunc, rinfo = ref.step(actions)
        where = f"step {t}"
        for b in np.flatnonzero(live):
            assert r[b] == rr[b] and term[b] == rterm[b] and trunc[b] == rtrunc[b], where
            if term[b] or trunc[b]:
                np.testing.assert_array_equal(info["final_obs"][b], rinfo["final_obs"][b], where)
                game = vector_games(info).get(b)
                assert game == vector_games(rinfo).get(b), where
                seen[b] += game is not None
                if episodic_life:  # from here envpool continues the game its own way
                    live[b] = False
                    continue
            np.testing.assert_array_equal(o[b], ro[b], where)
        if not live.any() or (seen >= games).all():
            break
    ours.close()
    ref.close()
    return seen


@needs_envpool
def test_envpool_matches_gymnasium_frame_for_frame():
    seen = lockstep(episodic_life=False)
    assert (seen >= 1).all()  # whole games agree (and the next game's start, for all but one)


@needs_envpool
def test_envpool_episodic_life_matches_up_to_the_first_lost_life():
    lockstep(episodic_life=True)


@needs_envpool
def test_envpool_game_scores_sum_its_lives():
    """With episodic life and unclipped rewards, a game's score and length are the sums of its
    learning episodes (RecordEpisodeStatistics over the adapter's own rewards)."""
    v = envs.make_vec_env("ALE/SpaceInvaders-v5", 2, "envpool", env_kwargs={"clip_rewards": False})
    v.reset(seed=0)
    lives_r, lives_l, games, continued = np.zeros(2), np.zeros(2, int), [], 0
    act = random_actions(0, 6)
    for _ in range(3000):
        _, r, term, trunc, info = v.step(np.array([act(), act()]))
        for b in np.flatnonzero(term & ~trunc):
            if b not in vector_games(info):  # a lost life: the same game goes on
                assert 0 < info["lives"][b] < 3
                continued += 1
        for b in np.flatnonzero(info.get("_episode", [])):
            lives_r[b] += info["episode"]["r"][b]
            lives_l[b] += info["episode"]["l"][b]
        for b, game in vector_games(info).items():
            games.append(game)
            assert game == (lives_r[b], lives_l[b])
            lives_r[b], lives_l[b] = 0.0, 0
        if len(games) >= 2:
            break
    assert len(games) >= 2 and min(g[0] for g in games) > 0 and continued >= 4
    v.close()
