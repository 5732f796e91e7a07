"""Self-play's tactical opponent (``tactics_prob``, :mod:`pgrad.rl.multiagent.tactics`): its
winning moves equal what PettingZoo's own games say wins (each legal move stepped on a copy of
the game, in positions reached by random play), it takes a win, else blocks, else moves
uniformly; in the mix it replaces the opponents a run without it draws, in about
``tactics_prob`` of the games; unknown games and bad shares are one line."""

from __future__ import annotations

import numpy as np
import pytest

import agents
from pgrad.rl.multiagent.opponents import random_legal
from pgrad.rl.multiagent.self_play import LATEST, RANDOM, TACTICS
from pgrad.rl.multiagent.tactics import LINE_GAMES, line_game, tactics_player

classic = pytest.importorskip("pettingzoo.classic")

TTT = "pettingzoo.classic.tictactoe_v3:env"
TINY = dict(num_envs=16, n_steps=64, epochs=1, num_minibatches=2, hidden=(8,),
            snapshot_interval=1, pool_size=3)
GAMES = {"connect_four_v3": classic.connect_four_v3, "tictactoe_v3": classic.tictactoe_v3}


def replay(name: str, moves: list[int]):
    """A fresh game with ``moves`` played (PettingZoo's games deep-copy as new games)."""
    env = GAMES[name].raw_env()
    env.reset(seed=0)
    for move in moves:
        env.step(move)
    return env


def positions(name: str, count: int, seed: int):
    """``count`` positions of random play, the mover to act: ``(moves so far, observation row
    [D], mask [A] bool)``."""
    rng = np.random.default_rng(seed)
    out = []
    while len(out) < count:
        moves: list[int] = []
        env = replay(name, moves)
        while not any(env.terminations.values()):
            observed = env.observe(env.agent_selection)
            mask = observed["action_mask"].astype(bool)
            out.append((list(moves), observed["observation"].reshape(-1).astype(np.float32),
                        mask))
            moves.append(int(rng.choice(np.flatnonzero(mask))))
            env.step(moves[-1])
    return out[:count]


def wins_by_stepping(name: str, moves: list[int], mask) -> set[int]:
    """The legal moves after which the mover's reward is +1: the game's own rule."""
    won = set()
    for a in np.flatnonzero(mask):
        env = replay(name, moves)
        mover = env.agent_selection
        env.step(int(a))
        if env.rewards[mover] == 1:
            won.add(int(a))
    return won


@pytest.mark.parametrize("name", sorted(LINE_GAMES))
def test_winning_moves_are_the_moves_the_game_itself_scores_as_wins(name):
    """In 300 positions of random play (with dozens holding a win), the mover's winning moves
    are exactly those PettingZoo rewards +1; the opponent's are the mover's on the board with
    the planes swapped."""
    game = LINE_GAMES[name]
    holding = 0
    for moves, obs, mask in positions(name, 300, seed=len(name)):
        board = game.board(obs)
        mine = set(game.winning_moves(board, 1, mask).tolist())
        assert mine == wins_by_stepping(name, moves, mask), moves
        holding += bool(mine)
        swapped = obs.reshape(game.rows, game.cols, 2)[..., ::-1].reshape(-1)
        theirs = game.winning_moves(board, 2, mask).tolist()
        assert theirs == game.winning_moves(game.board(swapped), 1, mask).tolist()
    assert holding >= 20, holding


def board_row(game, mine, theirs) -> np.ndarray:
    """An observation row with the mover's pieces at ``mine`` and the opponent's at ``theirs``
    (cells ``(r, c)``)."""
    planes = np.zeros((game.rows, game.cols, 2), np.float32)
    for r, c in mine:
        planes[r, c, 0] = 1
    for r, c in theirs:
        planes[r, c, 1] = 1
    return planes.reshape(-1)


def test_the_player_wins_first_blocks_second_and_otherwise_moves_uniformly():
    game = LINE_GAMES["connect_four_v3"]
    act = tactics_player(np.random.default_rng(0), game)
    # Row 0: three of the mover's in the bottom row (columns 0-2) and three of the opponent's in
    # column 6: winning (column 3) beats blocking (column 6). Row 1: only the opponent's three
    # in column 6: block. Row 2: nothing on the board: uniform among the legal moves.
    win_and_block = board_row(game, [(5, 0), (5, 1), (5, 2)], [(5, 6), (4, 6), (3, 6)])
    block = board_row(game, [(5, 0), (5, 1)], [(5, 6), (4, 6), (3, 6)])
    empty = board_row(game, [], [])
    obs = np.stack([win_and_block, block, empty])
    legal = np.ones((3, 7), bool)
    legal[2, 4] = False  # row 2: column 4 is (as if) full
    seen = np.zeros(7)
    for _ in range(2000):
        moves = act(obs, legal)
        assert moves[0] == 3 and moves[1] == 6 and legal[2, moves[2]]
        seen[moves[2]] += 1
    expected = 2000 / 6
    assert seen[4] == 0 and np.all(np.abs(np.delete(seen, 4) - expected)
                                   < 4 * np.sqrt(expected * 5 / 6)), seen
    # Without masks a full column is not legal: the fallback never plays it.
    full = board_row(game, [(r, 0) for r in range(0, 6, 2)], [(r, 0) for r in range(1, 6, 2)])
    assert all(act(full[None], None)[0] != 0 for _ in range(200))


def test_tic_tac_toe_cells_follow_the_observation_layout():
    """Action a is cell (a // 3, a % 3) of the planes (PettingZoo's squares reshaped)."""
    game = LINE_GAMES["tictactoe_v3"]
    act = tactics_player(np.random.default_rng(0), game)
    obs = board_row(game, [(0, 2), (1, 1)], [(0, 0), (0, 1)])  # win at (2, 0): action 6
    legal = np.ones((1, 9), bool)
    legal[0, [0, 1, 2, 4]] = False
    assert act(obs[None], legal)[0] == 6


@pytest.fixture(scope="module")
def agent():
    made = agents.make("ippo", TTT, seed=0, self_play=True, **TINY)
    made.step()
    made.step()
    yield made
    made.close()


def test_tactics_games_replace_the_opponents_a_run_without_them_draws(agent):
    """With random_prob 0.25 and tactics_prob 0.3: the random games are those a run without
    tactics has, the other opponents agree wherever they are not tactical, and about 0.3 of all
    games are tactical (within 4 standard errors). Every tactical move is legal."""
    pool = agent.self_play.pool.snapshots()[0]
    policy = agent.acting_fn(np.random.default_rng(1))
    draws: dict = {}
    for tactics in (0.0, 0.3):
        firsts = []
        for key in range(16):
            seen: list = []

            def spy(obs, action_mask=None, seen=seen):
                seen.append(agent.collector.opponent.copy())
                return policy(obs, action_mask=action_mask)

            agent.collector.collect_games(spy, 8, [key, 2], pool, 0.5, random_prob=0.25,
                                          tactics_prob=tactics)
            firsts.append(seen[0])
        draws[tactics] = np.concatenate(firsts)
    without, mixed = draws[0.0], draws[0.3]
    assert TACTICS not in without and {LATEST, RANDOM} <= set(without.tolist())
    np.testing.assert_array_equal(mixed == RANDOM, without == RANDOM)
    kept = mixed != TACTICS
    np.testing.assert_array_equal(mixed[kept], without[kept])
    share = 1 - kept.mean()
    assert abs(share - 0.3) < 4 * np.sqrt(0.3 * 0.7 / len(mixed)), share


def test_a_tactics_rollout_trains_and_its_opponent_takes_wins(agent):
    """Every game against the tactical player: a rollout's episodes are reported and the
    learner's update runs on them."""
    pool = agent.self_play.pool.snapshots()[0]
    traj, episodes = agent.collector.collect_games(
        agent.acting_fn(np.random.default_rng(2)), 64, [3, 4], pool, 0.5, tactics_prob=1.0)
    assert (agent.collector.opponent == TACTICS).all() and len(episodes) >= 16
    assert traj.mask.any()


@pytest.mark.parametrize("sets, says", [
    (dict(tactics_prob=1.5), r"tactics_prob must be in \[0, 1\]"),
    (dict(tactics_prob=0.5, random_prob=0.75), "random_prob \\+ tactics_prob must be at most 1"),
])
def test_bad_shares_are_one_line(sets, says):
    with pytest.raises(ValueError, match=says) as caught:
        agents.make("ippo", TTT, seed=0, self_play=True, **sets, **TINY)
    assert "\n" not in str(caught.value)


def test_a_game_the_tactical_player_does_not_know_is_one_line():
    with pytest.raises(ValueError, match="game 'go_v5' is none of them: set tactics_prob=0"):
        line_game("go_v5", 100, 10)
    with pytest.raises(ValueError, match=r"reads a \[6, 7, 2\] board and 7 actions"):
        line_game("connect_four_v3", 18, 9)


def test_evaluation_plays_the_tactical_player_in_the_games_it_knows(agent):
    """Beside random and the anchor, the learner's results against the tactical player, as a
    match played by hand with the same generator gives them; random's and the anchor's games
    are those an evaluation without it plays (their generators are unchanged)."""
    from agents.learners.self_play import evaluation_rows
    from pgrad.rl.multiagent.evaluate import match_results

    got = agent.evaluate_team(8, seed=5)
    games = got["games"]
    assert set(games) == {"random", "anchor", "tactics", "anchor_update"}
    for seat, name in enumerate(("first", "second")):
        rows = evaluation_rows(agent)(8)
        try:
            by_hand = match_results(lambda o, m: agent.act(o, True, m),
                                    tactics_player(np.random.default_rng([5, 2, seat]),
                                                   LINE_GAMES["tictactoe_v3"]), rows, seat, 5)
        finally:
            rows.close()
        assert games["tactics"][name] == by_hand
        assert got[f"tactics_win_rate_{name}"] == by_hand["win"]
    rows = evaluation_rows(agent)(8)
    try:
        random_first = match_results(lambda o, m: agent.act(o, True, m),
                                     random_legal(np.random.default_rng([5, 0, 0]), 9), rows, 0, 5)
    finally:
        rows.close()
    assert games["random"]["first"] == random_first
