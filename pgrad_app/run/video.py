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


def film_first_env(agent, folder: Path, every: int, start_step: int = 0) -> None:
    """Films every ``every``-th training episode of the agent's env 0 into ``folder``.

    Raises:
      UserError: the envs are not stepped in this process (``vector_mode`` other than sync),
        the env was given as a factory or instance (it cannot be made to render frames), the env
        cannot render ``rgb_array`` frames, or moviepy is missing.
    """
    import gymnasium as gym

    from pgrad.rl.envs.recipe import EnvRecipe, env_name, make_env

    if int(every) < 1:
        raise UserError(f"--capture-video takes N >= 1 (film every N-th episode); got {every}.")
    try:
        import moviepy  # noqa: F401  (RecordVideo writes with it; fail before training)
    except ImportError:
        raise UserError("--capture-video needs moviepy: pip install 'pgrad[video]' "
                        "(or pip install moviepy).") from None
    base = agent.collector.envs.unwrapped
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
        filmed = gym.wrappers.RecordVideo(
            env, str(folder), episode_trigger=lambda episode: episode % int(every) == 0,
            name_prefix=prefix, disable_logger=True)
    old, base.envs[0] = base.envs[0], filmed
    old.close()
    agent.collector.reset(seed=agent.seed)  # every sub-env as it was after the agent's reset
