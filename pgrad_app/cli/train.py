"""Train a pgrad agent on a Gymnasium env and write a complete, resumable run directory.

    pgrad-train --agent a2c --env CartPole-v1 --total-steps 100000 --seed 0 \\
        --out runs/a2c-cartpole

Settings are resolved in this order (later wins): defaults < the agent's tuned hyperparameters
for the env (pgrad_app/config/hyperparams/AGENT.yaml; --no-tuned skips them) < --config FILE < flags
< --set.
Every bad input is reported in one line with exit code 2 before anything is written; --debug
shows the traceback. See docs/scripts.md and docs/troubleshooting.md.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path

from pgrad_app.cli import OneLineParser
from pgrad_app.cli.resolve import resolve, resolve_resume, run_defaults, tuned_note
from pgrad_app.config import plugins
from pgrad_app.config import settings as config_lib
from pgrad_app.errors import EXIT_SIGTERM, Interrupted, RunError, UserError, command
from pgrad_app.run.starting import make_agent, make_run_dir, warn_about_work
from pgrad_app.run.video import DEFAULT_EVERY as DEFAULT_VIDEO_EVERY

# TensorFlow (through pgrad, agents and the run modules) is imported only after the arguments
# are parsed: --bogus or a missing value is answered at once (issue 24, item 5).


def _agent_epilog() -> str:
    """Every agent's hyperparameters with their defaults (for --help; --set NAME=VALUE): the
    config dataclasses are data, so this imports no TensorFlow."""
    import agents
    lines = ["hyperparameters (--set NAME=VALUE or in --config FILE):"]
    for name in agents.names():
        lines.append(f"  {name}:")
        for field, text, default in config_lib.field_help(agents.config_class(name)):
            lines.append(f"    {field}={json.dumps(default)}  {text}")  # as --set takes it
    return "\n".join(lines)


#: rl-zoo / CleanRL flags with no same-meaning pgrad flag -> pgrad's way (--algo, -n,
#: --n-timesteps, --total-timesteps, --eval-freq, --save-freq, --env-id, --env-kwargs, --seed
#: are accepted as they are).
FOREIGN_FLAGS = {
    "-params": "--set KEY=VALUE (repeatable)", "--hyperparams": "--set KEY=VALUE (repeatable)",
    "--vec-env": "--set vector_mode=sync|async|envpool|overlap",
    "-f": "--out DIR", "--log-folder": "--out DIR", "--tensorboard-log": "--out DIR "
    "(TensorBoard files in DIR/tb)", "-tb": "--out DIR (TensorBoard files in DIR/tb)",
    "-i": "--resume DIR", "--trained-agent": "--resume DIR",
    "--learning-rate": "--set learning_rate=X", "--num-steps": "--set n_steps=N",
    "--n-envs": "--num-envs N", "--wandb-project-name": "--track wandb (WANDB_PROJECT=NAME)",
    "--env-wrapper-kwargs": "--config FILE with env_wrapper: [{NAME: {KEY: VALUE}}]",
}


class _Refuse(argparse.Action):
    """A peer's flag: refused in one line with pgrad's spelling."""

    def __init__(self, option_strings, dest, hint: str = "", **kwargs):
        super().__init__(option_strings, dest, **kwargs)
        self.hint = hint

    def __call__(self, parser, namespace, values, option_string=None):
        raise UserError(f"{option_string} is not a pgrad-train flag; did you mean {self.hint}? "
                        f"(see {parser.prog} --help, docs/migration.md)")


def build_parser() -> argparse.ArgumentParser:
    d = run_defaults()
    p = _parser = OneLineParser(
        prog=command("train"),
        description="Train a policy-gradient agent and write a run directory.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=_agent_epilog(),
    )
    add = p.add_argument
    add("--agent", "--algo",
        help=f"agent to train: a2c, ppo, npg or reinforce (default: {d['agent']})")
    add("--env", "--env-id", help="Gymnasium env id, or module:EnvId to import a module that "
        f"registers it (default: {d['env']})")
    add("--env-kwargs", nargs="+", action="extend", default=[], metavar="KEY=VALUE",
        help="keyword arguments of the env's gymnasium.make, values read as YAML: "
        "--env-kwargs continuous=true g=9.81 (rl-zoo's key:value works too; default: none)")
    add("--env-wrapper", action="append", default=[], metavar="NAME",
        help="wrap each env in this Wrapper, by dotted name (gymnasium.wrappers."
        "TimeAwareObservation, or module:Class); repeatable, applied in order (default: none)")
    add("--gym-packages", nargs="+", action="extend", default=[], metavar="MODULE",
        help="import these modules first, to register their env ids (default: none)")
    add("--total-steps", "--total-timesteps", "--n-timesteps", "-n", type=int, metavar="N",
        help=f"env steps to train for (default: the "
        f"tuned entry's n_timesteps, else {d['total_steps']}); with --resume, the new total, "
        "above the run's step")
    add("--more-steps", type=int, metavar="N", help="with --resume: train N env steps more than "
        "the checkpoint holds (default: off; --total-steps gives the total instead)")
    add("--seed", type=int, help=f"random seed (default: {d['seed']})")
    add("--seeds", nargs="+", metavar="SEED", help="train a population: these seeds (or "
        "ranges A..B) in one process, each into OUT/seedS/ (docs/populations.md; default: off)")
    add("--out", metavar="DIR", help="run directory (default: runs/AGENT-ENV-seedSEED)")
    add("--num-envs", type=int, metavar="N",
        help="parallel envs (default: the agent's num_envs: 16 for a2c and npg, 8 for "
        "reinforce, 1 for ppo, unless a tuned entry sets it)")
    add("--config", metavar="FILE", help="YAML file with run settings and hyperparameters "
        "(default: none; a run's config.yaml works)")
    add("--no-tuned", action="store_true", help="ignore the agent's tuned hyperparameters "
        "for the env (pgrad_app/config/hyperparams/AGENT.yaml) and start from the plain defaults "
        "(default: use them when the env has an entry)")
    add("--set", action="append", default=[], metavar="KEY=VALUE",
        help="override one setting or hyperparameter, typed from its field (repeatable; "
        "default: none)")
    add("--transform", metavar="MODULE:ATTR", help="your gradient transform: a GradientTransform, "
        "a factory of one (its keyword arguments from --transform-arg), or a plain function "
        "fn(grads, **context) -> grads. The plain function gets per-step gradients [T, *shape]; "
        "if it returns them per step, the mean over steps follows; if it returns aggregated "
        "ones [*shape], they are the gradient (decided by shape). MODULE may be a .py path. It "
        "runs inside a compiled TensorFlow graph: its Python side effects (print, counters, "
        "file writes) happen once, when the graph is traced, not at every update; use tf.print "
        "for per-update output (default: the agent's own chain)")
    add("--transform-arg", action="append", default=[], metavar="KEY=VALUE",
        help="a keyword argument for the --transform factory, typed from its default or "
        "annotation like --set (repeatable; default: none)")
    add("--diagnostics", action="store_true", default=None,
        help="per-step gradient diagnostics each update: diag_* columns in updates.csv, "
        "TensorBoard histograms of per-step norms (hyperparameter diagnostics; default: off)")
    add("--adversarial-epsilon", type=float, metavar="E", help="act on FGSM-perturbed "
        "observations while training, L-inf radius E in raw observation units "
        "(hyperparameter adversarial_epsilon; default: 0 = off)")
    add("--stop-at-return", type=float, metavar="R", help="stop when the mean return of the "
        "last 20 training episodes reaches R (default: off)")
    add("--eval-every", "--eval-freq", type=int, metavar="N",
        help="evaluate on separate envs every N env "
        "steps with deterministic actions: a row in eval.csv each time, the best policy so far "
        "in best/ (default: 0 = off)")
    add("--eval-episodes", "--n-eval-episodes", type=int, metavar="K",
        help=f"episodes per evaluation (default: "
        f"{d['eval_episodes']})")
    add("--capture-video", type=int, nargs="?", const=DEFAULT_VIDEO_EVERY, metavar="N",
        help="film every N-th training episode of env 0 into DIR/videos/*.mp4, as CleanRL's "
        "--capture-video (gymnasium's RecordVideo; needs moviepy; sync envs in this process; "
        f"N default {DEFAULT_VIDEO_EVERY}; default: off)")
    add("--track", choices=("wandb",), help="also log the run to an experiment tracker: config, "
        "updates, episodes, evaluations, the learning curve (pip install 'pgrad[wandb]'; "
        "WANDB_MODE=offline works; the run directory stays the record; default: off)")
    add("--checkpoint-every", "--save-freq", type=int, metavar="N",
        help="env steps between checkpoints (default: 0 = one every --checkpoint-seconds of "
        "training; one is also saved at the end, on Ctrl-C and on a stop)")
    add("--checkpoint-seconds", type=float, metavar="S",
        help=f"seconds of training between checkpoints when --checkpoint-every is 0 "
        f"(default: {d['checkpoint_seconds']:g})")
    add("--log-every", type=int, metavar="N", help="updates between rows of updates.csv and "
        "TensorBoard, each the mean over them (KEY_max beside the gradient norms and NaN/Inf "
        "skips); rows also at every checkpoint and the end (default: the agent's, as "
        "Stable-Baselines3: a2c 100, ppo and npg 1 = once per rollout, reinforce 10)")
    add("--max-nonfinite-skips", type=int, metavar="N", help="stop after N consecutive updates "
        f"skipped for NaN/Inf gradients (default: {d['max_nonfinite_skips']})")
    add("--workers", type=int, metavar="N", help="collect rollouts on N Ray actors, the envs "
        "split among them; the same algorithm, synchronous (needs pgrad[ray]; "
        "default: 0 = in this process)")
    add("--ray-address", metavar="ADDR", help="with --workers: a running Ray cluster to use "
        "(e.g. auto, or ray://HOST:10001; default: start a local instance for this run)")
    add("--resume", metavar="DIR", help="continue the run in DIR from its newest good checkpoint "
        "(default: off)")
    add("--overwrite", action="store_true", help="replace the run in --out, deleting only the "
        "files pgrad wrote there (default: refuse)")
    add("--trust-run-code", action="store_true", help="with --resume: import the env module and "
        "transform the run's config.yaml names without naming them again (default: refuse)")
    add("--quiet", action="store_true", help="no progress bar; logs and summary only "
        "(default: off)")
    add("--reproducible", action="store_true", help="the same seed and settings give the same "
        "run bit for bit: TensorFlow's oneDNN kernels off (slower convolutions) and its op "
        "determinism on; also PGRAD_REPRODUCIBLE=1 (default: off: oneDNN's kernels may change "
        "a sum's last bits from run to run)")
    add("--debug", action="store_true", help="show tracebacks for errors (default: off)")
    for flag, hint in FOREIGN_FLAGS.items():  # rl-zoo's / CleanRL's flags pgrad spells otherwise
        add(flag, nargs="*", action=_Refuse, hint=hint, help=argparse.SUPPRESS)
    del _parser
    return p


# ---------------------------------------------------------------------------------------------
# Output directory.
# ---------------------------------------------------------------------------------------------


def _resumed_budget(args, trainer, settings, cfg, text: str):
    """``(config text, settings)`` with ``--more-steps`` added to the restored step; a
    ``--total-steps`` at or below it refused in one line (it is the new total, not more)."""
    import dataclasses

    at = int(trainer.resumed_from or 0)
    if args.more_steps is not None:
        settings = dataclasses.replace(settings, total_steps=at + int(args.more_steps))
        trainer.settings = trainer.recorder.settings = settings
        return config_lib.dump_run_config(settings, cfg), settings
    if args.total_steps is not None and settings.total_steps <= at:
        raise UserError(f"--total-steps {settings.total_steps:,} is not above the run's step "
                        f"{at:,}: with --resume it is the new total; give a larger total, or "
                        "--more-steps N to train N more.")
    return text, settings


# ---------------------------------------------------------------------------------------------
# Main.
# ---------------------------------------------------------------------------------------------


class _StartupSignal(BaseException):
    """SIGTERM before training started; a BaseException, as KeyboardInterrupt, so that no
    handler of env or plug-in errors on the way takes it for one of theirs."""


def _startup_sigterm(signum, frame) -> None:
    if os.getpid() != _startup_pid:
        # an async env's worker, forked during start-up, inherited this handler: its parent ends
        # it with SIGTERM when start-up fails; it ends the default way, without a traceback
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return
    raise _StartupSignal


_startup_pid = os.getpid()


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from pgrad_app.run.population import is_population

    if args.seeds is not None or is_population(args.resume):  # many seeds: their own module
        from pgrad_app.cli import population

        return population.main(args)
    from pgrad.rl.storage.files import write_atomic
    from pgrad_app.run import directory as rundir
    from pgrad_app.run.layout import RunLayout
    from pgrad_app.run.trainer import Trainer, summary

    resume = args.resume is not None
    if resume and args.overwrite:
        raise UserError("--resume continues a run and --overwrite replaces one; choose one.")
    if args.more_steps is not None:
        if not resume:
            raise UserError("--more-steps adds steps to a resumed run (--resume DIR); a new run "
                            "takes --total-steps N.")
        if args.total_steps is not None:
            raise UserError("--more-steps N adds N steps and --total-steps N sets the total; "
                            "choose one.")
        if args.more_steps < 1:
            raise UserError(f"--more-steps must be >= 1; got {args.more_steps}.")
    if args.trust_run_code and not resume:
        raise UserError("--trust-run-code only applies to --resume (a new run imports only "
                        "what you name).")
    lock = ray_run = None
    # Until training starts (its own handler checkpoints), SIGTERM ends start-up cleanly: the
    # lock released, an --overwrite's old run put back; a re-run replaces what was written.
    global _startup_pid
    _startup_pid = os.getpid()
    previous = signal.signal(signal.SIGTERM, _startup_sigterm)
    try:
        if resume:
            out = Path(args.resume)
            rundir.check_path(out, f"--resume {out}")
            if RunLayout(out).replaced.is_dir():  # an --overwrite killed before a checkpoint
                with rundir.RunLock(out):
                    rundir.settle(out)
            settings, cfg, agent_cls = resolve_resume(args)
            tuned_path = None  # a resumed run's config.yaml holds every value already
            lock = rundir.RunLock(out)  # before anything in the run changes
        else:
            settings, cfg, agent_cls, _, tuned_path = resolve(args)
            out = Path(args.out or f"runs/{settings.agent}-{settings.env.split(':')[-1]}"
                       f"-seed{settings.seed}")
            rundir.check_new(out, args.overwrite)
        warn_about_work(settings, cfg)
        if settings.track:  # its package and its login, before the run directory is written
            from pgrad_app.run.tracking import check_can_start

            check_can_start(settings.track)
        if settings.workers:
            from pgrad_app.distributed import session

            session.import_ray()  # not installed: one line naming the extra, exit 2
            if settings.gym_packages:
                raise UserError("--gym-packages registers envs in this process only; with "
                                "--workers name the module in --env MODULE:EnvId (each worker "
                                "imports it).")
        elif args.ray_address:
            raise UserError("--ray-address needs --workers N.")
        # Resuming, config.yaml's specs were allowed by resolve_resume (named again: then the
        # user's own spelling is imported; or trusted); a module inside the run directory itself
        # is still refused.
        env_spec = (args.env or settings.env) if resume else settings.env
        transform_spec = (args.transform or settings.transform) if resume else settings.transform
        forbid = out if resume else None
        plugins.import_gym_packages(settings.gym_packages, forbid_dir=forbid)
        env_id = plugins.env_source(plugins.resolve_env(env_spec, forbid_dir=forbid),
                                    settings.env_kwargs, settings.env_wrapper, forbid_dir=forbid)
        transform = (plugins.load_transform(transform_spec, settings.transform_args,
                                            forbid_dir=out if resume else None)
                     if transform_spec else None)
        if not resume:  # before the run directory exists
            from pgrad_app.run.preflight import check_env_kwargs

            check_env_kwargs(env_id, settings.env_kwargs)
        if settings.capture_video:  # before the run's files are written or change
            from pgrad_app.run.video import check_folder

            check_folder(RunLayout(out) / RunLayout.VIDEOS)
        agent = make_agent(agent_cls, cfg, env_id, settings.seed, transform)
        if settings.workers:  # the envs on Ray actors; closed after agent.close()
            try:
                from pgrad_app.distributed import async_learner, workers

                # impala/appo: actors stream trajectories (no barrier); else synchronous workers
                runner = async_learner if hasattr(agent, "use_source") else workers
                ray_run = runner.start(agent, settings.workers, args.ray_address,
                                       plugins.env_source(env_spec, settings.env_kwargs,
                                                          settings.env_wrapper))
            except BaseException:
                agent.close()
                raise
        try:
            text = config_lib.dump_run_config(settings, cfg)
            if not resume:
                lock = make_run_dir(out, args.overwrite, text)
            trainer = Trainer(agent, settings, out, resume=resume, quiet=args.quiet)
            if settings.capture_video:  # env 0 films from the step the run goes on from
                from pgrad_app.run.video import film_first_env

                film_first_env(agent, RunLayout(out) / RunLayout.VIDEOS, settings.capture_video,
                               trainer.resumed_from or 0)
            if resume:  # restored: the step it holds decides the budget
                text, settings = _resumed_budget(args, trainer, settings, cfg, text)
            if resume:  # restored: only now may the run's files change
                config = RunLayout(out).config
                if not config.is_file() or text != config.read_text():  # a new --total-steps
                    try:
                        write_atomic(config, text)
                    except OSError as err:  # atomic: the old config.yaml is as it was
                        raise RunError(f"cannot write {config}: {err.strerror or err}; the run "
                                       "is as it was.") from None
                if not rundir.is_run(out):  # a run of an older pgrad
                    rundir.write_marker(out)
                print(f"resuming {out} from env step {trainer.resumed_from:,} "
                      f"(checkpoint {trainer.last_checkpoint.name})", file=sys.stderr)
            if tuned_path is not None:  # on stdout once training starts: stderr is for problems
                print(tuned_note(settings.agent, settings.env, tuned_path), flush=True)
            result = trainer.run()
        finally:
            signal.signal(signal.SIGTERM, previous)  # start-up is over: not "during start-up"
            agent.close()
            if ray_run is not None:
                ray_run.close()
    except _StartupSignal:
        raise Interrupted("SIGTERM during start-up: nothing was trained; run the same command "
                          "again (it replaces what start-up wrote).", EXIT_SIGTERM) from None
    finally:
        signal.signal(signal.SIGTERM, previous)
        if lock is not None:
            rundir.settle_quietly(out)  # an --overwrite that stopped before its first checkpoint
            lock.release()
    print(summary(result))
    return 0

