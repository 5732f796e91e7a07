"""``pgrad-train --seeds 80..89``: many seeds of one agent trained in one process.

    pgrad-train --agent a2c --env CartPole-v1 --seeds 80..89 --total-steps 100000 \\
        --out runs/a2c-cartpole
    pgrad-train --resume runs/a2c-cartpole       # each seed from its own newest checkpoint

Writes ``OUT/seedS/`` for each seed ``S`` -- the run directory ``pgrad-train --seed S`` writes --
and ``OUT/population.json``. Settings resolve as for one run (every seed the same but its seed).
Bad input -- a repeated seed, an empty list, an unsupported agent, more seeds than the memory
holds (estimated once two are built, before anything is written) -- is one line, exit 2.
See docs/populations.md.
"""

from __future__ import annotations

import copy
import dataclasses
import sys
import time
from pathlib import Path

from pgrad_app.config import plugins
from pgrad_app.config import settings as config_lib
from pgrad_app.errors import RunError, UserError, one_line

#: Flags a population does not take (it trains in this process, without a terminal per seed).
REFUSED = {"workers": "--workers", "ray_address": "--ray-address",
           "capture_video": "--capture-video", "track": "--track"}


def parse_seeds(values: list[str]) -> list[int]:
    """``--seeds`` values -> distinct ints: integers and inclusive ranges ``A..B``."""
    from agents.population import check_seeds

    seeds: list[int] = []
    for value in values:
        text = value.strip()
        try:
            if ".." in text:
                low, high = (int(p) for p in text.split("..", 1))
                if high < low:
                    raise UserError(f"--seeds: the range {text} is empty (write it low..high).")
                seeds.extend(range(low, high + 1))
            else:
                seeds.append(int(text))
        except ValueError:
            raise UserError(f"--seeds: {value!r} is not a seed or a range A..B of "
                            "seeds.") from None
    try:
        return check_seeds(seeds, "--seeds")
    except (ValueError, TypeError) as err:
        raise UserError(str(err)) from None


def main(args) -> int:
    """Trains the population ``args`` describe (parsed by pgrad-train's parser)."""
    from pgrad_app.run import directory as rundir
    from pgrad_app.run import population as poprun
    from pgrad_app.run.layout import RunLayout

    resume = args.resume is not None
    if args.seed is not None:
        raise UserError("--seed trains one seed and --seeds a population; choose one.")
    for dest, flag in REFUSED.items():
        if getattr(args, dest, None):
            raise UserError(f"{flag} is not available with --seeds (a population trains in this "
                            "process); train those seeds one per run.")
    if resume and args.overwrite:
        raise UserError("--resume continues a run and --overwrite replaces one; choose one.")
    if resume and args.seeds is not None:
        raise UserError("--resume continues the population's own seeds; leave out --seeds.")
    if args.more_steps is not None and (not resume or args.total_steps is not None
                                        or args.more_steps < 1):
        raise UserError("--more-steps N (N >= 1) adds steps to a resumed population, instead of "
                        "--total-steps.")
    if resume:
        out = Path(args.resume)
        record = poprun.read_population(out)
        seeds = list(record["runs"])
        dirs = [out / record["runs"][s] for s in seeds]
        missing = [str(d) for d in dirs if not d.is_dir()]
        if missing:
            raise UserError(f"--resume {out}: the seed directory {missing[0]} is missing.")
        resolved = [_resolve_resumed(args, d) for d in dirs]
        tuned_path = None  # each config.yaml holds every value already
    else:
        seeds = parse_seeds(args.seeds)
        settings, cfg, agent_cls, _, tuned_path = _resolve_new(args)
        out = Path(args.out or f"runs/{settings.agent}-{settings.env.split(':')[-1]}"
                   f"-seeds{seeds[0]}-{seeds[-1]}")
        if rundir.is_run(out) or (out / RunLayout.CONFIG).is_file():
            raise UserError(f"--out {out} holds a single run; a population writes one run "
                            "directory per seed into a folder of its own: choose another --out.")
        if poprun.is_population(out) and not args.overwrite:
            raise UserError(f"--out {out} holds a population already; --resume {out} continues "
                            "it, --overwrite replaces its seeds' runs; or choose another --out.")
        dirs = [out / poprun.seed_dir_name(s) for s in seeds]
        for d in dirs:
            rundir.check_new(d, args.overwrite)
        resolved = [(dataclasses.replace(settings, seed=s), cfg, agent_cls) for s in seeds]
    settings0, cfg0, agent_cls = resolved[0]
    from agents.population import check_supported

    try:
        check_supported(agent_cls, cfg0)
    except ValueError as err:
        raise UserError(str(err)) from None
    if tuned_path is not None:
        from pgrad_app.cli.resolve import tuned_note

        print(tuned_note(settings0.agent, settings0.env, tuned_path), flush=True)
    return _train(args, out, seeds, dirs, resolved, resume)


def _resolve_new(args):
    from pgrad_app.cli.resolve import resolve

    one = copy.copy(args)
    one.seed = None
    return resolve(one)


def _resolve_resumed(args, seed_dir: Path):
    from pgrad_app.cli.resolve import resolve_resume
    from pgrad_app.run import directory as rundir

    rundir.check_path(seed_dir, f"--resume {seed_dir}")
    one = copy.copy(args)
    one.resume = str(seed_dir)
    return resolve_resume(one)


def _train(args, out: Path, seeds: list[int], dirs: list[Path], resolved: list,
           resume: bool) -> int:
    from agents.population import build_members
    from pgrad_app.run import directory as rundir
    from pgrad_app.run import population as poprun
    from pgrad_app.run.starting import make_agent, make_run_dir, warn_about_work
    from pgrad_app.run.trainer import Trainer  # noqa: F401  (imported before the agents)

    settings0, cfg0, agent_cls = resolved[0]
    warn_about_work(settings0, cfg0)
    env_spec = (args.env or settings0.env) if resume else settings0.env
    transform_spec = (args.transform or settings0.transform) if resume else settings0.transform
    forbid = out if resume else None
    plugins.import_gym_packages(settings0.gym_packages, forbid_dir=forbid)
    env_id = plugins.env_source(plugins.resolve_env(env_spec, forbid_dir=forbid),
                                settings0.env_kwargs, settings0.env_wrapper, forbid_dir=forbid)
    transform = (plugins.load_transform(transform_spec, settings0.transform_args,
                                        forbid_dir=forbid) if transform_spec else None)
    if not resume:
        from pgrad_app.run.preflight import check_env_kwargs

        check_env_kwargs(env_id, settings0.env_kwargs)
    by_seed = dict(zip(seeds, resolved))
    _threads_for(env_id)

    def make_one(seed: int):
        _, cfg, cls = by_seed[seed]
        return make_agent(cls, cfg, env_id, seed, transform)

    try:
        members = build_members(make_one, seeds, say=lambda line: print(line, flush=True))
    except MemoryError as err:
        raise UserError(f"--seeds: {err}") from None
    locks: list = []
    try:
        settings = [r[0] for r in resolved]
        if resume:
            for d in dirs:
                locks.append(rundir.RunLock(d))
        else:
            out.mkdir(parents=True, exist_ok=True)
            for d, s, (_, cfg, _) in zip(dirs, settings, resolved):
                locks.append(make_run_dir(d, args.overwrite, config_lib.dump_run_config(s, cfg)))
            poprun.write_population(out, seeds, settings0.agent, settings0.env)
        run = poprun.PopulationRun(members, settings, dirs, resume=resume, quiet=args.quiet)
        if resume:
            settings = _resumed_budgets(args, run, settings, resolved, dirs)
            print(f"resuming {out}: {len(seeds)} seeds from env steps "
                  f"{', '.join(f'{t.resumed_from:,}' for t in run.trainers)}", file=sys.stderr)
        start = time.monotonic()
        results = run.run()
    finally:
        for member in members:
            member.close()
        for d, lock in zip(dirs, locks):
            rundir.settle_quietly(d)
            lock.release()
    print(poprun.summary(results, time.monotonic() - start))
    failed = [r for r in results if r.failure]
    if failed:
        raise RunError(f"{len(failed)} of {len(results)} seeds stopped (seed "
                       f"{', '.join(str(r.seed) for r in failed)}: see {poprun.FAILURE_FILE} in "
                       "their run directories); the others finished.")
    return 0


def _threads_for(source) -> None:
    """One intra-op thread for populations of flat observations
    (:mod:`agents.population.threads`), decided from one env's observation space before
    TensorFlow's runtime starts; a game (PettingZoo) or an env that fails here keeps the
    default (its error comes, as one line, when the members are built)."""
    from agents.population.threads import flat_observations, one_intra_op_thread
    from pgrad.rl import multiagent
    from pgrad.rl.envs.recipe import EnvRecipe, make_env

    try:
        env = source() if isinstance(source, EnvRecipe) else make_env(source)
    except Exception:  # noqa: BLE001  (reported when the members are built)
        return
    try:
        if not multiagent.is_pettingzoo(env) and flat_observations(env.observation_space):
            one_intra_op_thread()
    finally:
        env.close()


def _resumed_budgets(args, run, settings: list, resolved: list, dirs: list[Path]) -> list:
    """Each seed's settings with ``--more-steps`` / ``--total-steps`` applied to its restored
    step (config.yaml rewritten where the total changed), as one run's resume does."""
    from pgrad.rl.storage.files import write_atomic
    from pgrad_app.run.layout import RunLayout

    out = []
    for trainer, s, (_, cfg, _), d in zip(run.trainers, settings, resolved, dirs):
        at = int(trainer.resumed_from or 0)
        if args.more_steps is not None:
            s = dataclasses.replace(s, total_steps=at + int(args.more_steps))
        elif args.total_steps is not None and s.total_steps <= at:
            raise UserError(f"--total-steps {s.total_steps:,} is not above seed {s.seed}'s step "
                            f"{at:,}; give a larger total, or --more-steps N.")
        trainer.settings = trainer.recorder.settings = s
        text = config_lib.dump_run_config(s, cfg)
        config = RunLayout(d).config
        if not config.is_file() or config.read_text() != text:
            try:
                write_atomic(config, text)
            except OSError as err:
                raise RunError(f"cannot write {config}: {one_line(err)}") from None
        out.append(s)
    run.settings = out
    return out
