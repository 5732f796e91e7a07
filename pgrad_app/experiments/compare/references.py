"""Published random and reference scores, for normalised scores: ``(x - random) / (ref - random)``.

A normalised score is 0 at a uniformly random policy and 1 at the env's reference, so scores of
different envs can be aggregated (rliable's IQM and optimality gap over tasks, performance
profiles). Only numbers with a source are here, each row naming it:

* Atari (``ALE/Game-v5``, ``GameNoFrameskip-v4``): the random and professional-human scores of
  Mnih et al. 2015 (Nature), as the DeepMind DQN Zoo tabulates them (``dqn_zoo/atari_data.py``);
  1 is human level. Measured with up to 30 no-op starts and no sticky actions: scores of the
  ``-v5`` ids (sticky actions) normalise approximately.
* MuJoCo (HalfCheetah, Hopper, Walker2d, Ant): D4RL's random and expert reference scores (Fu et
  al. 2020, ``d4rl/infos.py``), measured on Gym's ``-v2`` envs and used for every version.
* Classic control: the Gymnasium env's own reference, its maximum return where the episode caps
  it (CartPole-v1: 500 steps of +1) or its registered ``reward_threshold`` (Acrobot-v1,
  LunarLander-v3); the random score measured here with Gymnasium 1.4 (1000 episodes, reset seeds
  0-999, ``action_space.sample()`` seeded 0; ``tests/app/test_compare.py`` re-measures CartPole).

MinAtar and Pendulum have no published random or reference score: comparisons on them use raw
returns.
"""

from __future__ import annotations

import dataclasses
import re


@dataclasses.dataclass(frozen=True)
class Reference:
    """The random and reference scores of one env, and where they come from."""

    random: float  # return of a uniformly random policy
    reference: float  # the score normalised to 1
    what: str  # what the reference is ("human", "D4RL expert", "max return", ...)
    source: str

    def normalise(self, score):
        """``(score - random) / (reference - random)`` (numbers or numpy arrays)."""
        return (score - self.random) / (self.reference - self.random)


_DQN = "Mnih et al. 2015, via DQN Zoo atari_data.py"
_D4RL = "Fu et al. 2020, D4RL d4rl/infos.py (Gym -v2)"
_GYM = "Gymnasium 1.4; random measured (1000 episodes)"

#: Atari games by ALE name: (random, human).
ATARI: dict[str, tuple[float, float]] = {
    "BeamRider": (363.9, 16926.5), "Breakout": (1.7, 30.5), "Enduro": (0.0, 860.5),
    "Pong": (-20.7, 14.6), "Qbert": (163.9, 13455.0), "Seaquest": (68.4, 42054.7),
    "SpaceInvaders": (148.0, 1668.7),
}
#: MuJoCo tasks by name (any version): (D4RL random, D4RL expert).
MUJOCO: dict[str, tuple[float, float]] = {
    "HalfCheetah": (-280.178953, 12135.0), "Hopper": (-20.272305, 3234.3),
    "Walker2d": (1.629008, 4592.3), "Ant": (-325.6, 3879.7),
}
#: Classic-control ids (this version only): (random measured, reference, what).
CLASSIC: dict[str, tuple[float, float, str]] = {
    "CartPole-v1": (22.2, 500.0, "max return"),
    "Acrobot-v1": (-499.09, -100.0, "reward_threshold"),
    "LunarLander-v3": (-181.71, 200.0, "reward_threshold"),
    "InvertedPendulum-v5": (5.12, 1000.0, "max return"),
}

_ALE = re.compile(r"^(?:ALE/)?([A-Za-z]+?)(?:NoFrameskip)?-v\d+$")
_MUJOCO = re.compile(r"^([A-Za-z0-9]+)-v\d+$")


def lookup(env_id: str) -> Reference | None:
    """The :class:`Reference` of ``env_id`` (``module:EnvId`` looks up ``EnvId``), or None."""
    env_id = env_id.split(":")[-1]
    if env_id in CLASSIC:
        random, reference, what = CLASSIC[env_id]
        return Reference(random, reference, what, _GYM)
    mujoco = _MUJOCO.match(env_id)
    if mujoco and mujoco.group(1) in MUJOCO:
        return Reference(*MUJOCO[mujoco.group(1)], "D4RL expert", _D4RL)
    atari = _ALE.match(env_id)
    if atari and atari.group(1) in ATARI and (env_id.startswith("ALE/") or "NoFrameskip" in env_id):
        return Reference(*ATARI[atari.group(1)], "human", _DQN)
    return None
