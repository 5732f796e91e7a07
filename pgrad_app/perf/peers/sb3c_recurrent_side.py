"""sb3-contrib's side of the ``recurrent_ppo_vs_sb3c`` speed figure: RecurrentPPO on CartPoleNoVel.

Run as a file under an interpreter that has ``torch``, ``stable-baselines3`` and
``sb3-contrib`` (it imports nothing of pgrad but the env module, loaded by its path: pgrad's
package imports TensorFlow, which that interpreter need not have)::

    /work/venv-trl/bin/python pgrad_app/perf/peers/sb3c_recurrent_side.py '{"steps": 20480}'

rl-zoo's ``ppo_lstm`` entry for CartPoleNoVel-v1 (``hyperparams/ppo_lstm.yml``): 8 envs x 32
steps, one minibatch of 256 (the whole rollout), 20 epochs, gamma 0.98, lambda 0.8, learning
rate and clip range linear from 1e-3 and 0.2, no entropy bonus, ``VecNormalize`` (observations
and rewards, gamma 0.98), ``MlpLstmPolicy`` with an LSTM of 64 for the actor and one for the
critic (``enable_critic_lstm``), ``net_arch`` pi [64] vf [64], ReLU, no orthogonal init.
torch with ``threads`` threads (default 1: on this 2-core machine one thread is sb3's faster
setting, see :mod:`pgrad_app.perf.peers.side_by_side`).

Prints one JSON line ``{"side": "sb3c", ...}``: ``env_steps``, ``wall_s`` and ``cpu_s`` of
``learn`` alone (the model and its envs built before the clock), ``setup_s`` (building them),
the last-20 training return, ``episodes``, ``torch_threads`` and the versions.
"""

from __future__ import annotations

import importlib.util
import json
import resource
import sys
import time
from pathlib import Path

#: pgrad's velocity-masked envs, loaded by path (gymnasium and numpy only).
NOVEL = Path(__file__).resolve().parents[3] / "pgrad" / "rl" / "envs" / "novel.py"

DEFAULTS = {"env": "CartPoleNoVel-v1", "steps": 20480, "seed": 0, "threads": 1}
#: rl-zoo's ppo_lstm entry for CartPoleNoVel-v1 in RecurrentPPO's names (``lin_X``: linear from
#: X to 0 over the run), plus ``n_envs`` and ``VecNormalize`` 's gamma (``normalize: true``).
ZOO = {"n_envs": 8, "n_steps": 32, "batch_size": 256, "n_epochs": 20, "gamma": 0.98,
       "gae_lambda": 0.8, "ent_coef": 0.0, "learning_rate": "lin_1e-3", "clip_range": "lin_0.2",
       "normalize": True}
#: ``policy_kwargs`` of the entry (``activation_fn`` by name: ReLU).
ARCH = {"ortho_init": False, "activation_fn": "ReLU", "lstm_hidden_size": 64,
        "enable_critic_lstm": True, "net_arch": {"pi": [64], "vf": [64]}}


def register_novel() -> None:
    """Registers ``CartPoleNoVel-v1`` from pgrad's own module (the same env as pgrad trains)."""
    spec = importlib.util.spec_from_file_location("pgrad_novel_envs", NOVEL)
    module = importlib.util.module_from_spec(spec)
    sys.modules["pgrad_novel_envs"] = module  # the registration's entry point names it
    spec.loader.exec_module(module)
    module.register()


def _cpu() -> float:
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime


def run(spec: dict) -> dict:
    unknown = sorted(set(spec) - set(DEFAULTS))
    if unknown:
        raise ValueError(f"sb3c_recurrent_side: unknown spec keys {unknown}; known: "
                         f"{sorted(DEFAULTS)}")
    s = {**DEFAULTS, **spec}
    sys.modules["tensorflow"] = None  # SB3's TensorBoard hook would import it: not SB3's cost
    import sb3_contrib
    import stable_baselines3
    import torch
    from sb3_contrib import RecurrentPPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.utils import LinearSchedule
    from stable_baselines3.common.vec_env import VecNormalize

    torch.set_num_threads(int(s["threads"]))
    register_novel()
    returns: list[float] = []

    class Episodes(BaseCallback):
        def _on_step(self) -> bool:
            returns.extend(float(i["episode"]["r"]) for i in self.locals["infos"]
                           if "episode" in i)
            return True

    start = time.perf_counter()
    hp = dict(ZOO)
    n_envs, normalize = hp.pop("n_envs"), hp.pop("normalize")
    for key in ("learning_rate", "clip_range"):  # rl-zoo's lin_X
        hp[key] = LinearSchedule(float(hp[key].removeprefix("lin_")), 0.0, 1.0)
    envs = make_vec_env(s["env"], n_envs=n_envs, seed=s["seed"])
    if normalize:
        envs = VecNormalize(envs, gamma=hp["gamma"])
    arch = {**ARCH, "activation_fn": getattr(torch.nn, ARCH["activation_fn"])}
    model = RecurrentPPO("MlpLstmPolicy", envs, seed=s["seed"], device="cpu",
                         policy_kwargs=arch, **hp)
    setup = time.perf_counter() - start
    start, cpu0 = time.perf_counter(), _cpu()
    model.learn(int(s["steps"]), callback=Episodes())
    wall, cpu = time.perf_counter() - start, _cpu() - cpu0
    envs.close()
    last = returns[-20:]
    return {"side": "sb3c", "env_steps": int(model.num_timesteps), "wall_s": round(wall, 3),
            "cpu_s": round(cpu, 3), "setup_s": round(setup, 3),
            "last20_return": sum(last) / len(last) if last else None,
            "episodes": len(returns), "torch_threads": torch.get_num_threads(),
            "params": sum(p.numel() for p in model.policy.parameters()),
            "versions": {"sb3_contrib": sb3_contrib.__version__,
                         "stable_baselines3": stable_baselines3.__version__,
                         "torch": torch.__version__}}


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: sb3c_recurrent_side.py '<JSON spec>'", file=sys.stderr)
        return 2
    print(json.dumps(run(json.loads(argv[0]))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
