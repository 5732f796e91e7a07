"""Refusals before an evaluation runs any episode, each one line (:class:`UserError`): an env
that cannot be created, one whose spaces differ from the training env's, one that cannot render
frames for ``--video``, a video folder that cannot be written; and :func:`build_env`, one env of
an id or a recipe."""

from __future__ import annotations

from pathlib import Path

from pgrad_app.errors import UserError, one_line


def build_env(env_id, **kwargs):
    """One env of an id or recipe (its options plus ``kwargs``)."""
    from pgrad.rl.envs.recipe import EnvRecipe, make_env

    return env_id(**kwargs) if isinstance(env_id, EnvRecipe) else make_env(env_id, **kwargs)


def check_creates(env_id: str) -> None:
    """Refuses an env whose constructor fails, in one line, before anything is loaded."""

    from pgrad.rl.envs.recipe import env_name

    try:
        env = build_env(env_id)
    except Exception as err:  # noqa: BLE001  (the env's own constructor)
        raise UserError(f"env {env_name(env_id)!r} could not be created: {type(err).__name__}: "
                        f"{one_line(err)}") from None
    env.close()


def check_renders(env_id: str) -> None:
    """Refuses --video for an env that cannot render frames (e.g. no ``render_mode`` argument)."""
    import warnings

    from pgrad.rl.envs.recipe import env_name

    try:
        with warnings.catch_warnings(record=True) as caught:  # shown only if it works
            env = build_env(env_id, render_mode="rgb_array")
    except Exception as err:  # noqa: BLE001  (the env's own constructor)
        hint = (" (its constructor takes no render_mode)" if "render_mode" in str(err) else "")
        raise UserError(f"--video: env {env_name(env_id)!r} cannot render frames{hint}: "
                        f"{type(err).__name__}: {one_line(err)}") from None
    for w in caught:
        warnings.showwarning(w.message, w.category, w.filename, w.lineno, w.file, w.line)
    env.close()


def check_same_spaces(env_id: str, trained_id: str) -> None:
    """Refuses an evaluation env whose spaces differ from the training env's."""
    import gymnasium as gym

    from pgrad.rl.envs.recipe import env_name

    def short(space) -> str:
        if isinstance(space, gym.spaces.Box):
            return f"Box{space.shape} {space.dtype}"
        return str(space)

    ours, trained = build_env(env_id), build_env(trained_id)
    try:
        for what in ("observation_space", "action_space"):
            a, b = getattr(ours, what), getattr(trained, what)
            # Bounds may differ (the policy still runs); kind, shape and sizes may not.
            if short(a) != short(b):
                raise UserError(
                    f"--env {env_name(env_id)}: its {what.replace('_', ' ')} {short(a)} differs "
                    f"from "
                    f"{short(b)} of {env_name(trained_id)}, which the policy was trained on."
                )
    finally:
        ours.close()
        trained.close()


def check_writable_dir(path: Path) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".pgrad-write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as err:
        raise UserError(f"--video {path}: cannot write there ({err.strerror or err}).") from None
