"""Vector envs for rollouts, and env failures as one sentence.

:func:`make_vec_env` builds a Gymnasium vector env in ``AutoresetMode.SAME_STEP`` wrapped in
``RecordEpisodeStatistics`` (the contract :class:`pgrad.rl.rollout.Collector` needs: see
:mod:`pgrad.rl.rollout`); ``mode="envpool"`` presents envpool's pools through the same contract
(:mod:`pgrad.rl.envpool_env`). :func:`make_env` builds one env the same way.

Env ids work without importing their packages first: :func:`ensure_registered` imports ale-py for
Atari ids (``ALE/Breakout-v5``, ``BreakoutNoFrameskip-v4``) and MinAtar for ``MinAtar/...`` ids.
Atari ids get the standard preprocessing of :func:`pgrad.rl.atari.make_atari` (84x84 grayscale,
4 frames stacked channel-last, episodic life, clipped learning rewards; ``env_kwargs`` change it,
``{"preprocess": False}`` gives the bare emulator) and report whole games (:data:`GAME_INFO`).
MinAtar ids are MinAtar's own envs: ``(10, 10, C)`` bool observations, sticky actions 0.1.

An env that fails -- its constructor, ``reset`` or ``step`` raises, or it returns observations
that do not fit its observation space (wrong shape, strings), or a non-scalar ``terminated`` --
raises :class:`EnvError`, one sentence naming the env, the env step and what went wrong;
:func:`describe_failure` turns the library's exception into that sentence's end.
"""

from __future__ import annotations

import functools
import importlib
from typing import Any

import gymnasium as gym

from pgrad.rl import spaces

#: "envpool": the optional C++ backend (:mod:`pgrad.rl.envpool_env`; ``pgrad[envpool]`` extra).
VECTOR_MODES = ("sync", "async", "envpool")


#: The whole-game convention: the info key (and ``metadata`` flag) of an env whose learning
#: episodes are parts of the episode to report -- Atari with episodic life, where a lost life ends
#: a learning episode and the game goes on, and learning rewards are clipped. Such an env sets
#: ``metadata["game"] = True`` and returns ``info["game"] = {"r": score, "l": steps}`` from the
#: ``step`` that ended a game, or from the ``reset`` inside which a game ended. Through a SAME_STEP
#: vector env these arrive in the info of the step that ended the game, as
#: ``info["final_info"]["game"]["r"][b]`` (mask ``info["final_info"]["_game"]``) and
#: ``info["game"]["r"][b]`` (mask ``info["_game"]``), the shape of ``RecordEpisodeStatistics``'
#: ``info["episode"]``. The Collector and :func:`pgrad.evaluate` report these games instead of
#: the learning episodes.
GAME_INFO = "game"

#: Namespaces registered on demand: id prefix -> (module, package, pgrad extra).
_NAMESPACES = {"MinAtar/": ("minatar.gym", "MinAtar", "minatar")}
_ATARI_SUFFIXES = ("NoFrameskip-v4", "NoFrameskip-v0")
#: pgrad's own env ids -> the module whose ``register()`` registers them.
_PGRAD_IDS = {"MaskedOffers-v0": "pgrad.rl.masked_envs", "PenaltyOffers-v0": "pgrad.rl.masked_envs",
              "CartPoleNoVel-v1": "pgrad.rl.novel_envs", "PendulumNoVel-v1": "pgrad.rl.novel_envs"}


class EnvError(ValueError):
    """The env failed or returned something pgrad cannot use; the message names env and step."""


def is_atari_id(env_id: Any) -> bool:
    """Whether ``env_id`` is an ale-py id that pgrad preprocesses (``ALE/...``,
    ``...NoFrameskip-v4``)."""
    return isinstance(env_id, str) and (env_id.startswith("ALE/")
                                        or env_id.endswith(_ATARI_SUFFIXES))


def ensure_registered(env_id: Any) -> None:
    """Registers the Gymnasium ids of ``env_id``'s package if they are not registered yet.

    ale-py for Atari ids (``ALE/...``, ``...NoFrameskip-v4``), MinAtar for ``MinAtar/...``,
    pgrad's own (``MaskedOffers-v0``, ``PenaltyOffers-v0``: :mod:`pgrad.rl.masked_envs`;
    ``CartPoleNoVel-v1``, ``PendulumNoVel-v1``: :mod:`pgrad.rl.novel_envs`); any
    other id (or a factory) is left alone. Cheap once registered (one dict look-up).

    Raises:
      ImportError: the package is not installed; one line naming the pgrad extra to install.
    """
    if not isinstance(env_id, str) or env_id in gym.registry:
        return
    if env_id in _PGRAD_IDS:  # pgrad's own small tasks
        importlib.import_module(_PGRAD_IDS[env_id]).register()
        return
    if is_atari_id(env_id):
        module, package, extra = "ale_py", "ale-py", "atari"
    else:
        prefix = next((p for p in _NAMESPACES if env_id.startswith(p)), None)
        if prefix is None:
            return
        module, package, extra = _NAMESPACES[prefix]
    try:
        mod = importlib.import_module(module)
    except ImportError as err:
        raise ImportError(f"env {env_id!r} needs {package} (pip install 'pgrad[{extra}]'); "
                          f"importing it failed: {' '.join(str(err).split())}") from None
    if module == "ale_py":
        gym.register_envs(mod)  # (importing ale_py registers its ids)
    elif not any(k.startswith("MinAtar/") for k in gym.registry):
        mod.register_envs()


def make_env(env_id, **kwargs) -> gym.Env:
    """One env: a registered id (see :func:`ensure_registered`) with ``kwargs``, or a factory.

    Atari ids get :func:`pgrad.rl.atari.make_atari` (``kwargs`` are its options and ``gym.make``'s;
    ``preprocess=False``: the bare ale-py env); other ids ``gym.make(env_id, **kwargs)``.
    """
    if not isinstance(env_id, str):
        if kwargs:
            raise TypeError(f"env options {sorted(kwargs)} need an env id; the factory "
                            f"{env_name(env_id)} takes its own arguments.")
        return env_id()
    ensure_registered(env_id)
    preprocess = kwargs.pop("preprocess", True)
    if preprocess and is_atari_id(env_id):
        from pgrad.rl.atari import make_atari

        return make_atari(env_id, **kwargs)
    return gym.make(env_id, **kwargs)


# Library messages that mean little on their own -> what they mean for an env.
_HINTS = (
    ("wrong shape", "an observation does not fit the observation space {space}"),
    ("could not broadcast", "an observation does not fit the observation space {space}"),
    ("array element with a sequence",
     "reward, terminated and truncated must be one number / bool per env"),
    ("Expects terminated signal to be a boolean",
     "reward, terminated and truncated must be one number / bool per env"),
    ("Expects truncated signal to be a boolean",
     "reward, terminated and truncated must be one number / bool per env"),
    ("could not convert string", "observations must be numeric, as {space} says"),
    ("dtype('<U", "observations must be numeric, as {space} says"),
    ("dtype('S", "observations must be numeric, as {space} says"),
)


def describe_failure(err: BaseException, space: Any = None) -> str:
    """``"Type: message (hint)"`` in one line, for an exception an env raised."""
    text = " ".join(str(err).split()) or "(no message)"
    if len(text) > 300:
        text = text[:297] + "..."
    hint = next((h for key, h in _HINTS if key in str(err)), None)
    out = f"{type(err).__name__}: {text}"
    if hint:
        out += f" ({hint.format(space=space)})"
    return out


def env_name(env_id) -> str:
    """A readable name for an env id or env factory (for error messages)."""
    if isinstance(env_id, str):
        return env_id
    return getattr(env_id, "__name__", None) or repr(env_id)


def make_vec_env(env_id, num_envs: int, mode: str = "sync",
                 max_obs_dim: int | None = None,
                 env_kwargs: dict[str, Any] | None = None) -> gym.vector.VectorEnv:
    """A ``RecordEpisodeStatistics``-wrapped vector env in ``SAME_STEP`` autoreset mode.

    Args:
      env_id: a registered id (``"CartPole-v1"``; Atari and MinAtar ids register themselves, and
        Atari ids are preprocessed: see the module docstring) or a callable returning a
        ``gymnasium.Env``.
      num_envs: number of sub-envs.
      mode: ``"sync"`` (one process), ``"async"`` (one subprocess per env) or ``"envpool"``
        (envpool's C++ thread pool; an envpool classic-control, MuJoCo or Atari id only).
      max_obs_dim: refuse (ValueError) an env whose flat observation is wider than this, after
        building one env and before building the vector env: Gymnasium's batched spaces
        allocate ``num_envs`` x the observation size up front, which for an enormous space
        exhausts the machine's memory instead of raising.
      env_kwargs: options of each env (an id's ``gym.make`` keywords; for Atari ids also
        :func:`pgrad.rl.atari.make_atari`'s, e.g. ``{"episodic_life": False}``).

    Raises:
      EnvError: the env's constructor raised.
      ImportError: the id's package is not installed (the message names the pgrad extra).
      ValueError: an unsupported or too large observation space.
    """
    if mode not in VECTOR_MODES:
        raise ValueError(f"vector mode must be one of {VECTOR_MODES}; got {mode!r}.")
    kwargs = dict(env_kwargs or {})
    if mode == "envpool":
        from pgrad.rl.envpool_env import make_envpool

        return gym.wrappers.vector.RecordEpisodeStatistics(make_envpool(env_id, num_envs,
                                                                        **kwargs))
    if not isinstance(env_id, str) and not callable(env_id):
        raise TypeError(f"env_id must be a registered id or a callable; got {env_id!r}.")
    if kwargs and not isinstance(env_id, str):
        raise TypeError(f"env_kwargs {sorted(kwargs)} need an env id; the factory "
                        f"{env_name(env_id)} takes its own arguments.")
    ensure_registered(env_id)
    factory = functools.partial(make_env, env_id, **kwargs) if is_atari_id(env_id) else env_id
    if max_obs_dim is not None:
        _check_obs_size(env_id, max_obs_dim, kwargs)
    same_step = {"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}
    try:
        if isinstance(factory, str):
            envs = gym.make_vec(env_id, num_envs=num_envs, vectorization_mode=mode,
                                vector_kwargs=same_step, **kwargs)
        else:
            cls = gym.vector.SyncVectorEnv if mode == "sync" else gym.vector.AsyncVectorEnv
            envs = cls([factory] * num_envs, **same_step)
    except MemoryError:
        raise EnvError(f"env {env_name(env_id)!r} could not be created: out of memory "
                       f"building {num_envs} of it{_space_of(env_id, kwargs)}.") from None
    except Exception as err:
        raise EnvError(f"env {env_name(env_id)!r} could not be created: "
                       f"{describe_failure(err)}") from err
    return gym.wrappers.vector.RecordEpisodeStatistics(envs)


def _make_one(env_id, kwargs: dict | None = None) -> gym.Env:
    try:
        return make_env(env_id, **(kwargs or {}))
    except MemoryError:
        raise EnvError(f"env {env_name(env_id)!r} could not be created: out of memory.") from None
    except Exception as err:
        raise EnvError(f"env {env_name(env_id)!r} could not be created: "
                       f"{describe_failure(err)}") from err


def _check_obs_size(env_id, max_obs_dim: int, kwargs: dict) -> None:
    env = _make_one(env_id, kwargs)
    try:
        space = env.observation_space
        dim = spaces.flat_dim(space)  # ValueError: unsupported space
    finally:
        env.close()
    if dim > max_obs_dim:
        raise ValueError(f"env {env_name(env_id)!r}: observation space {space} flattens to "
                         f"{dim:,} values; the MLP policies take at most {max_obs_dim:,}.")


def _space_of(env_id, kwargs: dict) -> str:
    """``"; its observation space is ..."`` from one env, or ``""`` if even that fails."""
    try:
        env = _make_one(env_id, kwargs)
    except BaseException:  # noqa: BLE001  (only for a better message)
        return ""
    try:
        return f"; its observation space is {env.observation_space}"
    finally:
        env.close()
