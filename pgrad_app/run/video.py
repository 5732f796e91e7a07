"""``--capture-video``: film training episodes of env 0 as CleanRL does (Gymnasium's RecordVideo).

Imports nothing heavy until called (``pgrad-train --help`` shows :data:`DEFAULT_EVERY`).
The agent's vector env is built and reset before the run starts; its first sub-env is then
replaced by the same env made with ``render_mode="rgb_array"`` and wrapped in RecordVideo, and the
vector env is reset again with the agent's seed. Sub-env 0 gets the seed it had, so the run trains
on exactly the transitions it would have without the camera. Episodes ``0, N, 2N, ...`` of env 0
(counted from this run's start) become ``DIR/videos/rl-video-episode-K.mp4``; a resumed run names
its videos ``rl-video-from-STEP-episode-K.mp4``, so none of an earlier run's is written over.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

from pgrad_app.errors import UserError, one_line

#: Episodes of env 0 between filmed ones when ``--capture-video`` is given without N.
DEFAULT_EVERY = 100


def check_folder(folder: Path) -> None:
    """Refuses, before any work, a ``videos`` path that exists but is no folder (a file, a
    broken link): the videos would have nowhere to go, and it is not pgrad's to remove.

    Raises:
      UserError: naming the path.
    """
    try:
        exists, is_dir = folder.exists() or folder.is_symlink(), folder.is_dir()
    except OSError as err:
        raise UserError(f"--capture-video: cannot use {folder} ({err.strerror or err}).") \
            from None
    if exists and not is_dir:
        raise UserError(f"--capture-video: {folder} exists and is not a folder (videos go "
                        "into it); move it away or drop --capture-video.")


def film_first_env(agent, folder: Path, every: int, start_step: int = 0) -> None:
    """Films every ``every``-th training episode of the agent's env 0 into ``folder``.

    Raises:
      UserError: the envs are not stepped in this process (``vector_mode`` other than sync),
        the env was given as a factory or instance (it cannot be made to render frames), the env
        cannot render ``rgb_array`` frames, or moviepy is missing.
    """
    import gymnasium as gym

    from pgrad.rl.envs.native import CartPoleVector
    from pgrad.rl.envs.recipe import EnvRecipe, env_name, make_env

    if int(every) < 1:
        raise UserError(f"--capture-video takes N >= 1 (film every N-th episode); got {every}.")
    check_folder(Path(folder))
    try:
        import moviepy  # noqa: F401  (RecordVideo writes with it; fail before training)
    except ImportError:
        raise UserError("--capture-video needs moviepy: pip install 'pgrad[video]' "
                        "(or pip install moviepy).") from None
    base = agent.collector.envs.unwrapped
    if isinstance(base, CartPoleVector):  # one numpy env has no env 0 to film: Gymnasium's
        base = _gymnasium_envs_in(agent, base)  # sync envs instead (the same numbers)
    if not isinstance(base, gym.vector.SyncVectorEnv):
        raise UserError("--capture-video films env 0 in this process: it needs vector_mode "
                        "'sync' and no --workers (record after training with pgrad-evaluate "
                        "RUN --video DIR instead).")
    source = agent.env_id
    if not isinstance(source, (str, EnvRecipe)):
        raise UserError(f"--capture-video needs an env id to make env "
                        f"{env_name(source)!r} render frames; pass the id, not a factory.")
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")  # frames as arrays: no display needed
    try:
        with warnings.catch_warnings(record=True) as caught:
            env = source(render_mode="rgb_array") if isinstance(source, EnvRecipe) else make_env(
                source, render_mode="rgb_array")
    except Exception as err:  # noqa: BLE001  (the env's own constructor)
        raise UserError(f"--capture-video: env {env_name(source)!r} cannot render frames: "
                        f"{type(err).__name__}: {one_line(err)}") from None
    for w in caught:
        if "Overwriting existing videos" not in str(w.message):
            warnings.showwarning(w.message, w.category, w.filename, w.lineno, w.file, w.line)
    prefix = "rl-video" if not start_step else f"rl-video-from-{int(start_step)}"
    with warnings.catch_warnings():  # a resumed run adds to the folder, under new names
        warnings.filterwarnings("ignore", message=".*Overwriting existing videos.*")
        try:
            filmed = gym.wrappers.RecordVideo(
                env, str(folder), episode_trigger=lambda episode: episode % int(every) == 0,
                name_prefix=prefix, disable_logger=True)
        except OSError as err:  # the folder cannot be made (read-only, a file in the way)
            env.close()
            raise UserError(f"--capture-video: cannot create {folder} "
                            f"({err.strerror or err}).") from None
    old, base.envs[0] = base.envs[0], filmed
    old.close()
    agent.collector.reset(seed=agent.seed)  # every sub-env as it was after the agent's reset


def _gymnasium_envs_in(agent, native_envs):
    """Puts Gymnasium's sync vector env of the agent's CartPole in place of pgrad's numpy one
    (:mod:`pgrad.rl.envs.native`: the same transitions, but no sub-env objects to film) inside
    the agent's episode-statistics wrapper, before anything was collected; returns it (the
    caller resets the collector)."""
    from pgrad.rl.envs.native import gymnasium_envs
    from pgrad.rl.envs.vector import make_vec_env

    with gymnasium_envs():
        sync = make_vec_env(agent.env_id, native_envs.num_envs, "sync").env  # inside its wrapper
    agent.collector.envs.env = sync
    native_envs.close()
    return sync
