"""BenchMARL's side of ``mappo_vs_benchmarl`` and of the learning table: one MAPPO or IPPO
experiment on PettingZoo's ``simple_spread_v3`` (the ``mpe2`` package), one JSON line out.

Run by an interpreter with ``benchmarl`` (and its torch / torchrl / tensordict) and ``mpe2``
installed -- not the project's environment, which has no torch; nothing here imports pgrad::

    /work/venv-marl/bin/python pgrad_app/perf/peers/benchmarl_side.py '{"algorithm": "mappo", ...}'

The experiment is BenchMARL's own (``benchmarl.experiment.Experiment``, its ``PettingZooTask.
SIMPLE_SPREAD`` with the task's YAML, its algorithm and experiment YAML); the spec's keys
replace the values named below, nothing else. One adapter: torchrl's ``PettingZooEnv`` looks
MPE up in ``pettingzoo.mpe``, which PettingZoo 1.25 moved to the ``mpe2`` package; the lookup
is pointed at ``mpe2.simple_spread_v3`` (the same game pgrad trains on).

Spec keys (all optional): ``algorithm`` (``mappo`` | ``ippo``), ``frames`` (env steps: one step
of the parallel game, every agent acting -- BenchMARL's frames), ``seed``, ``published``
(``true``: BenchMARL's own YAML values for everything below except ``frames``), else
``frames_per_batch``, ``n_envs``, ``minibatch_size``, ``minibatch_iters`` (minibatches per
batch, over all epochs), ``hidden`` (the MLP's layers, actor and critic), ``lr``,
``clip_grad`` (global norm), ``lmbda``, ``entropy_coef``; ``max_cycles``, ``N``,
``local_ratio`` (the task's); ``continuous`` (actions; false: discrete, as pgrad's default
``parallel_env()``); ``eval_episodes`` (0: none; else greedy episodes at the end);
``threads`` (0: torch's default).

Output: ``{"side": "benchmarl", "env_steps", "wall_s" (``Experiment.run``), "setup_s",
"cpu_s", "params", "settings", "curve": [[frames, mean training episode team return,
episodes], ...], "eval": {"return_mean", "return_std", "episodes"} | null}``. The team return
of an episode is the mean over agents of each agent's return (as ``pgrad-evaluate``'s).
"""

from __future__ import annotations

import json
import resource
import sys
import tempfile
import time

try:  # BenchMARL's interpreter; the project's (no torch) only reads SPEC
    from benchmarl.experiment.callback import Callback
except ImportError:
    Callback = object

SPEC = {"algorithm": "mappo", "frames": 12_000, "seed": 0, "published": False,
        "frames_per_batch": 400, "n_envs": 8, "minibatch_size": 100, "minibatch_iters": 40,
        "hidden": [64, 64], "lr": 7e-4, "clip_grad": 10.0, "lmbda": 0.95, "entropy_coef": 0.01,
        "max_cycles": 25, "N": 3, "local_ratio": 0.5, "continuous": False, "eval_episodes": 0,
        "threads": 0}


class Record(Callback):
    """The mean training episode team return of every batch; the evaluations' returns."""

    def __init__(self):
        super().__init__()
        self.curve, self.evals = [], []

    def on_batch_collected(self, batch):
        done = batch.get(("next", "done")).reshape(-1)
        self.curve.append([int(self.experiment.total_frames),
                           float(self.experiment.mean_return), int(done.sum())])

    def on_evaluation_end(self, rollouts):
        group = next(iter(self.experiment.group_map))  # "agent": torchrl's PettingZoo group
        returns = []
        for td in rollouts:  # one episode each, cut at its end by BenchMARL's logger
            reward = td.get(("next", group, "reward"))  # [T, n_agents, 1]
            returns.append(float(reward.sum(0).mean()))
        self.evals.append(returns)


def _cpu() -> float:
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime


def _point_torchrl_at_mpe2() -> None:
    """torchrl's PettingZoo lookup finds ``simple_spread_v3`` in ``mpe2`` (PettingZoo >= 1.25
    ships MPE there: ``pettingzoo.mpe`` raises on import, and ``all_modules`` fails without the
    Atari extras)."""
    import torchrl.envs.libs.pettingzoo as tz
    from mpe2 import simple_spread_v3

    def with_mpe2() -> dict:  # torchrl's own list raises at pettingzoo.mpe's import
        return {"mpe/simple_spread_v3": simple_spread_v3}

    tz._load_available_envs = with_mpe2


def build(spec: dict, callbacks: list):
    """BenchMARL's ``Experiment`` for the spec (its YAML defaults, then the spec's values)."""
    import torch
    from benchmarl.algorithms import IppoConfig, MappoConfig
    from benchmarl.environments import PettingZooTask
    from benchmarl.experiment import Experiment, ExperimentConfig
    from benchmarl.models.mlp import MlpConfig

    s = {**SPEC, **spec}
    if s["threads"]:
        torch.set_num_threads(int(s["threads"]))
    _point_torchrl_at_mpe2()
    task = PettingZooTask.SIMPLE_SPREAD.get_from_yaml()
    algo = {"mappo": MappoConfig, "ippo": IppoConfig}[s["algorithm"]].get_from_yaml()
    exp = ExperimentConfig.get_from_yaml()
    model = MlpConfig.get_from_yaml()
    critic = MlpConfig.get_from_yaml()
    if not s["published"]:
        task.config.update(max_cycles=int(s["max_cycles"]), N=int(s["N"]),
                           local_ratio=float(s["local_ratio"]))
        algo.lmbda, algo.entropy_coef = float(s["lmbda"]), float(s["entropy_coef"])
        exp.lr, exp.clip_grad_val = float(s["lr"]), float(s["clip_grad"])
        exp.on_policy_collected_frames_per_batch = int(s["frames_per_batch"])
        exp.on_policy_n_envs_per_worker = int(s["n_envs"])
        exp.on_policy_minibatch_size = int(s["minibatch_size"])
        exp.on_policy_n_minibatch_iters = int(s["minibatch_iters"])
        model.num_cells = critic.num_cells = list(s["hidden"])
    exp.prefer_continuous_actions = bool(s["continuous"])
    exp.max_n_frames = int(s["frames"])
    exp.max_n_iters = None
    exp.loggers, exp.render, exp.checkpoint_interval = [], False, 0
    exp.checkpoint_at_end, exp.keep_checkpoints_num = False, None
    exp.save_folder = tempfile.mkdtemp(prefix="benchmarl_side_")
    exp.evaluation = int(s["eval_episodes"]) > 0
    exp.create_json = exp.evaluation  # BenchMARL evaluates only when it writes somewhere
    exp.evaluation_episodes = max(1, int(s["eval_episodes"]))
    exp.evaluation_interval = int(s["frames"])  # at the start and at the end
    exp.evaluation_deterministic_actions = True
    experiment = Experiment(task=task, algorithm_config=algo, model_config=model,
                            critic_model_config=critic, seed=int(s["seed"]), config=exp,
                            callbacks=callbacks)
    settings = {"task": dict(task.config), "algorithm": s["algorithm"],
                "lmbda": algo.lmbda, "entropy_coef": algo.entropy_coef,
                "clip_epsilon": algo.clip_epsilon, "lr": exp.lr, "adam_eps": exp.adam_eps,
                "clip_grad_val": exp.clip_grad_val, "gamma": exp.gamma,
                "frames_per_batch": exp.on_policy_collected_frames_per_batch,
                "n_envs": exp.on_policy_n_envs_per_worker,
                "minibatch_size": exp.on_policy_minibatch_size,
                "minibatch_iters": exp.on_policy_n_minibatch_iters,
                "hidden": list(model.num_cells), "continuous": exp.prefer_continuous_actions,
                "share_param_critic": algo.share_param_critic,
                "share_policy_params": exp.share_policy_params}
    return experiment, settings


def run(spec: dict) -> dict:
    """One experiment: set up, ``run()`` timed, the training curve and the final evaluation."""
    import numpy as np

    unknown = sorted(set(spec) - set(SPEC))
    if unknown:
        raise ValueError(f"benchmarl_side: unknown spec keys {unknown}; known: {sorted(SPEC)}")

    record = Record()
    start, cpu0 = time.perf_counter(), _cpu()
    experiment, settings = build(spec, [record])
    setup = time.perf_counter() - start
    params = _params(experiment)
    start = time.perf_counter()
    experiment.run()
    wall, cpu = time.perf_counter() - start, _cpu() - cpu0
    evaluation = None
    if record.evals:
        last = np.asarray(record.evals[-1])
        evaluation = {"return_mean": float(last.mean()), "return_std": float(last.std()),
                      "episodes": int(last.size)}
    return {"side": "benchmarl", "env_steps": int(experiment.total_frames),
            "wall_s": round(wall, 3), "setup_s": round(setup, 3), "cpu_s": round(cpu, 3),
            "params": params, "settings": settings, "curve": record.curve, "eval": evaluation}


def _params(experiment) -> dict:
    """Trainable weights of the policy and of the critic."""
    policy = sum(p.numel() for p in experiment.policy.parameters() if p.requires_grad)
    loss = experiment.losses[next(iter(experiment.group_map))]
    critic = sum(p.numel() for p in loss.critic_network_params.values(True, True))
    return {"policy": int(policy), "critic": int(critic)}


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: benchmarl_side.py '<JSON spec>'", file=sys.stderr)
        return 2
    print(json.dumps(run(json.loads(argv[0]))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
