"""Checks made before a run directory exists: what would otherwise fail only once training
started (and leave a run directory behind)."""

from __future__ import annotations

import json

from pgrad_app.errors import UserError, one_line


def check_env_kwargs(source, env_kwargs: dict | None) -> None:
    """With ``--env-kwargs``, makes one env with them, resets it and takes one random step, so
    that a value of the wrong type (``g="9.81"`` for a number) is one line naming the keywords
    before the run directory exists, not an error at the first training step.

    Raises:
      UserError: the env cannot be made, reset or stepped with these keywords.
    """
    if not env_kwargs:
        return
    from pgrad.rl import multiagent
    from pgrad.rl.envs.recipe import EnvRecipe, env_name, make_env

    shown = " ".join(f"{k}={json.dumps(v, default=str)}" for k, v in env_kwargs.items())
    env = None
    stage = "made"
    try:
        env = source() if isinstance(source, EnvRecipe) else make_env(source)
        stage = "reset"
        if multiagent.is_pettingzoo(env):  # a game: every acting agent steps once
            stage = "reset and stepped"
            _probe_game(env)
            return
        env.reset(seed=0)
        stage = "stepped"
        env.action_space.seed(0)
        env.step(env.action_space.sample())
    except Exception as err:  # noqa: BLE001  (the env's own code, any error type)
        raise UserError(f"--env-kwargs {shown}: env {env_name(source)!r} cannot be {stage} with "
                        f"them: {type(err).__name__}: {one_line(err)}") from None
    finally:
        if env is not None:
            try:
                env.close()
            except Exception:  # noqa: BLE001  (closing a probe env must not hide the answer)
                pass


def _probe_game(env) -> None:
    """Resets a PettingZoo game and steps every acting agent once with a random legal action
    (its ``action_mask`` honoured)."""
    from pgrad.rl import multiagent
    from pgrad.rl.multiagent.pettingzoo_env import MASK_KEY

    game = multiagent.as_parallel(env)
    obs, _ = game.reset(seed=0)
    actions = {}
    for agent in multiagent.acting_agents(game):
        space = game.action_space(agent)
        space.seed(0)
        seen = obs.get(agent)
        mask = seen.get(MASK_KEY) if isinstance(seen, dict) else None
        actions[agent] = space.sample() if mask is None else space.sample(mask=mask.astype("int8"))
    game.step(actions)
