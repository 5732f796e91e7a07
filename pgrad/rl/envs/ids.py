"""Which env ids pgrad knows by name, and registering them on first use.

Env ids work without importing their packages first: :func:`ensure_registered` imports ale-py
for Atari ids (``ALE/Breakout-v5``, ``BreakoutNoFrameskip-v4``), MinAtar for ``MinAtar/...`` ids
and pgrad's own small tasks. Gymnasium only (no TensorFlow): :mod:`pgrad.rl.envs.vector`,
:mod:`pgrad.rl.envs.atari` and :mod:`pgrad.rl.envs.envpool_atari` all read these names from here.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import sys
import types
import warnings
from typing import Any

import gymnasium as gym

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
_PGRAD_IDS = {"MaskedOffers-v0": "pgrad.rl.envs.masked", "PenaltyOffers-v0": "pgrad.rl.envs.masked",
              "CartPoleNoVel-v1": "pgrad.rl.envs.novel", "PendulumNoVel-v1": "pgrad.rl.envs.novel",
              "MinAtar/Breakout-NoTrail-v1": "pgrad.rl.envs.notrail",
              # token tasks (docs/sequences/token_tasks.md)
              "pgrad/Reversal-v0": "pgrad.rl.tokens.tasks", "pgrad/Addition-v0":
              "pgrad.rl.tokens.tasks", "pgrad/Sort-v0": "pgrad.rl.tokens.tasks"}


def is_atari_id(env_id: Any) -> bool:
    """Whether ``env_id`` is an ale-py id that pgrad preprocesses (``ALE/...``,
    ``...NoFrameskip-v4``)."""
    return isinstance(env_id, str) and (env_id.startswith("ALE/")
                                        or env_id.endswith(_ATARI_SUFFIXES))


def quiet_ale(ale_py: Any) -> None:
    """No "A.L.E: Arcade Learning Environment ... [Powered by Stella]" banner on stderr for each
    emulator: ALE's C++ logger keeps errors only (a process-wide setting; forked env workers
    inherit it)."""
    ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)


def is_mujoco_id(env_id: Any) -> bool:
    """Whether ``env_id`` is one of Gymnasium's MuJoCo envs (``HalfCheetah-v5``, ...)."""
    spec = gym.registry.get(env_id) if isinstance(env_id, str) else None
    entry = getattr(spec, "entry_point", None)
    return isinstance(entry, str) and entry.startswith("gymnasium.envs.mujoco")


def quiet_mujoco() -> None:
    """MuJoCo's warnings as Python warnings, not lines on stderr.

    MuJoCo 4 prints "WARNING: compiler attribute 'settotalmass' is deprecated ..." for every
    Gymnasium MuJoCo model it loads (Gymnasium's own XML files use the attribute): nothing a user
    can act on, and one per env. The model compiler's deprecation notices go to the
    ``pgrad.mujoco`` logger at DEBUG level; any other MuJoCo warning (an unstable simulation,
    ...) becomes a ``RuntimeWarning`` "MuJoCo: ...". Process-wide (forked env workers inherit
    it); a handler the user installed is left alone.
    """
    import mujoco

    if mujoco.get_mju_user_warning() is not None:
        return

    def as_python_warning(message: Any) -> None:
        text = " ".join(str(message).split())
        if "is deprecated" in text:
            logging.getLogger("pgrad.mujoco").debug(text)
        else:
            warnings.warn(f"MuJoCo: {text}", RuntimeWarning, stacklevel=2)

    mujoco.set_mju_user_warning(as_python_warning)


def ensure_registered(env_id: Any) -> None:
    """Registers the Gymnasium ids of ``env_id``'s package if they are not registered yet.

    ale-py for Atari ids (``ALE/...``, ``...NoFrameskip-v4``), MinAtar for ``MinAtar/...``,
    pgrad's own (``MaskedOffers-v0``, ``PenaltyOffers-v0``: :mod:`pgrad.rl.envs.masked`;
    ``CartPoleNoVel-v1``, ``PendulumNoVel-v1``: :mod:`pgrad.rl.envs.novel`;
    ``MinAtar/Breakout-NoTrail-v1``: :mod:`pgrad.rl.envs.notrail`); any
    other id (or a factory) is left alone. Gymnasium's MuJoCo ids get :func:`quiet_mujoco`.
    Cheap once registered (a dict look-up or two).

    Raises:
      ImportError: the package is not installed; one line naming the pgrad extra to install.
    """
    if not isinstance(env_id, str):
        return
    if env_id in gym.registry:
        if is_mujoco_id(env_id):
            try:
                quiet_mujoco()
            except ImportError:  # gym.make says what to install
                pass
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
        if module == "minatar.gym":
            _defer_import("seaborn")
        mod = importlib.import_module(module)
    except ImportError as err:
        raise ImportError(f"env {env_id!r} needs {package} (pip install 'pgrad[{extra}]'); "
                          f"importing it failed: {' '.join(str(err).split())}") from None
    if module == "ale_py":
        gym.register_envs(mod)  # (importing ale_py registers its ids)
        quiet_ale(mod)
    elif not any(k.startswith("MinAtar/") and k not in _PGRAD_IDS for k in gym.registry):
        mod.register_envs()  # (once: pgrad's own MinAtar/... ids do not count)



#: Attributes a stand-in answers without importing: what code that walks ``sys.modules`` asks
#: of every module (``inspect.getmodule``, and autograph's ``_fix_linecache_record``, which runs
#: when ``tf.saved_model.save`` traces a policy export: asking it imported seaborn there, ~0.9 s
#: of a MinAtar run's end).
_NOT_LOADING = frozenset({"__file__", "__cached__"})


class _DeferredModule(types.ModuleType):
    """Stands in ``sys.modules`` for a module not imported yet; the first attribute asked of it
    imports the real one (which then replaces it there) and answers from it. ``__file__`` is
    not asked of the real module: a stand-in has none, as a built-in module has none."""

    def __getattr__(self, attr: str) -> Any:
        if attr in _NOT_LOADING:
            raise AttributeError(attr)
        if sys.modules.get(self.__name__) is self:
            del sys.modules[self.__name__]
        return getattr(importlib.import_module(self.__name__), attr)


def _defer_import(name: str) -> None:
    """Makes ``import name`` give a stand-in that imports the module on first use.

    MinAtar imports seaborn (and through it scipy.stats: ~0.6 s of a run's start-up here) only
    to colour its ``render`` window; deferred, a run that never renders never pays for it.
    (``importlib.util.LazyLoader`` would not do: a second ``import`` of the name reads its
    ``__spec__``, which loads it.) Nothing changes if ``name`` is imported or not installed.
    """
    if name not in sys.modules and importlib.util.find_spec(name) is not None:
        sys.modules[name] = _DeferredModule(name)
