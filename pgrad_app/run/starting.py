"""Starting a run: its directory created and locked, a warning when one update outgrows the
budget, and the agent built with its errors as one line (``pgrad-train`` for one seed and for a
population, :mod:`pgrad_app.cli.train` and :mod:`pgrad_app.cli.population`).
"""

from __future__ import annotations

import sys
from pathlib import Path

from pgrad_app.errors import UserError, one_line


def make_run_dir(out: Path, overwrite: bool, config_text: str):
    """Creates ``out`` (after all checks passed), locks it and writes its ``config.yaml``; with
    overwrite, removes the old run's files (only those pgrad wrote). Returns the held lock."""
    from pgrad_app.run import directory as rundir

    lock, kept = rundir.create(out, overwrite, config_text)
    if kept:
        shown = ", ".join(str(p.relative_to(out)) for p in kept[:3])
        more = f" and {len(kept) - 3} more" if len(kept) > 3 else ""
        print(f"note: --overwrite kept {len(kept)} file(s) pgrad did not write: {shown}{more}",
              file=sys.stderr)
    return lock


def warn_about_work(settings, cfg) -> None:
    """One warning line when one update alone takes more env steps than the whole run asks."""
    per_update = cfg.steps_per_update() if hasattr(cfg, "steps_per_update") else 0
    if per_update > settings.total_steps:
        what = ("batch_steps" if getattr(cfg, "rollout", "steps") == "episodes"
                else f"n_steps x num_envs = {cfg.n_steps} x {cfg.num_envs}")
        print(f"warning: one update collects {what} = {per_update:,} env steps, more than "
              f"total_steps={settings.total_steps:,}; the run will take at least "
              f"{per_update:,} env steps.", file=sys.stderr, flush=True)


def make_agent(agent_cls, cfg, env_id, seed: int, transform):
    import signal

    import gymnasium as gym

    # Subprocess envs (vector_mode=async) are forked here: with SIGINT ignored while they start,
    # they inherit that, so Ctrl-C (sent to the whole process group) reaches only this process,
    # which then checkpoints and closes them in order.
    from pgrad.rl.collection.rollout import EnvError, env_name

    async_envs = getattr(cfg, "vector_mode", "sync") == "async"
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if async_envs else None
    try:
        return agent_cls(cfg, env_id=env_id, seed=seed, transform=transform)
    except EnvError as err:  # the env's own code failed while being created or reset
        raise UserError(f"cannot create {agent_cls.__name__}: {one_line(str(err))}") from err
    except (ValueError, TypeError, gym.error.Error, ImportError) as err:
        raise UserError(f"cannot create {agent_cls.__name__} on {env_name(env_id)!r}: "
                        f"{one_line(str(err))}") from err
    finally:
        if async_envs:
            signal.signal(signal.SIGINT, previous)
