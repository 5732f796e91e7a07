"""Where a PettingZoo game comes from: a ``"module:factory"`` name, an
:class:`~pgrad.rl.envs.recipe.EnvRecipe` of one with keyword options, a factory, or a game
instance -- and what rebuilds it for evaluation and loading (the many-agent learners,
:mod:`agents.learners.multiagent` and :mod:`agents.learners.self_play`).
"""

from __future__ import annotations

import functools
import importlib
from typing import Any

import gymnasium as gym

from pgrad.rl import multiagent
from pgrad.rl.envs.recipe import EnvRecipe


def _import_factory(spec: str, who: str) -> Any:
    module, sep, attr = spec.rpartition(":")
    if not sep or not module or not attr:
        raise ValueError(f"{who} trains on PettingZoo games: pass a factory, a game, or its "
                         f"'module:factory' name (e.g. 'mpe2.simple_spread_v3:parallel_env'); "
                         f"got {spec!r}.")
    try:
        factory = getattr(importlib.import_module(module), attr)
    except ImportError as err:
        raise ValueError(f"env {spec!r}: importing {module!r} failed: {err}") from None
    except AttributeError:
        raise ValueError(f"env {spec!r}: module {module!r} has no {attr!r}.") from None
    if not callable(factory):
        raise ValueError(f"env {spec!r}: {attr!r} is not a factory (a function returning a "
                         f"PettingZoo game); got {type(factory).__name__}.")
    return factory


def game_source(env_id: Any, who: str = "this agent") -> tuple[Any, Any, str | None]:
    """``(what builds the game: a factory or one instance, what rebuilds it for evaluation and
    loading or None, why it cannot be rebuilt or None)``.

    ``env_id``: a ``"module:factory"`` name, an :class:`~pgrad.rl.envs.recipe.EnvRecipe` of one
    with keyword options (no wrappers), a factory, or a PettingZoo game instance.
    """
    if isinstance(env_id, EnvRecipe):
        if env_id.wrappers:
            raise ValueError(f"{who}: Gymnasium wrappers do not apply to PettingZoo games; "
                             f"wrap the game in its factory instead.")
        base, source, why = game_source(env_id.env, who)
        if env_id.kwargs and not multiagent.is_pettingzoo(base):
            return functools.partial(base, **env_id.kwargs), env_id, why
        return base, env_id, why
    if isinstance(env_id, str):
        return _import_factory(env_id, who), env_id, None
    if multiagent.is_pettingzoo(env_id):
        return env_id, None, ("a PettingZoo game instance cannot be built again: pass its "
                              "factory or 'module:factory' name instead")
    if isinstance(env_id, (gym.Env, gym.vector.VectorEnv)):
        raise TypeError(f"{who} trains on PettingZoo games; got a Gymnasium env "
                        f"({type(env_id).__name__}): train it with a single-agent algorithm.")
    if callable(env_id):
        return env_id, env_id, None
    raise TypeError(f"{who} trains on PettingZoo games: pass a factory, a game, or its "
                    f"'module:factory' name; got {type(env_id).__name__}.")
