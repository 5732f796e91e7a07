"""Environments for rollouts: making them (registered ids, recipes with options and wrappers,
Atari, EnvPool), wrapping (masks, no-velocity and no-trail variants) and vectorising them
(sync, async, overlapped), with env failures as one sentence.
"""
from __future__ import annotations

from pgrad.rl._lazy import lazy_getattr

#: The public names of this room, by the module that defines them (imported on first use).
_HOME = {
    "EnvError": "pgrad.rl.envs.vector",
    "describe_failure": "pgrad.rl.envs.vector",
    "make_vec_env": "pgrad.rl.envs.vector",
    "EnvRecipe": "pgrad.rl.envs.recipe",
    "apply_wrapper": "pgrad.rl.envs.recipe",
    "env_name": "pgrad.rl.envs.recipe",
    "env_source": "pgrad.rl.envs.recipe",
    "import_name": "pgrad.rl.envs.recipe",
    "make_env": "pgrad.rl.envs.recipe",
    "recipe_of": "pgrad.rl.envs.recipe",
    "wrapper_list": "pgrad.rl.envs.recipe",
    "GAME_INFO": "pgrad.rl.envs.ids",
    "ensure_registered": "pgrad.rl.envs.ids",
    "is_atari_id": "pgrad.rl.envs.ids",
}

__all__ = sorted(_HOME)

__getattr__ = lazy_getattr(__name__, _HOME)
