"""Many agents: PPO on the agent rows of a PettingZoo game, with one policy for every agent.

* ``ippo`` -- independent PPO (de Witt et al. 2020): each agent's step is a row of the batch
  (:mod:`pgrad.rl.multiagent`), actor and critic read the agent's own observation, and the
  parameters are shared by all agents.
* ``mappo`` -- multi-agent PPO (Yu et al. 2022): the same, with a centralised critic reading
  the game's global ``state()`` (the agents' observations end to end where it has none) while
  the actor reads its own observation; ``critic_input="state_and_obs"`` (the default) gives
  the critic MAPPO's agent-specific global state, the state beside the agent's observation.
* ``credit="coma"`` (either agent) -- each step weighted by COMA's counterfactual advantage
  from a centralised Q critic (Foerster et al. 2018; :mod:`pgrad.transforms.counterfactual`,
  :mod:`agents.learners.counterfactual`), through PPO's clip.

The agents take a PettingZoo ``ParallelEnv`` / ``AECEnv`` factory, an instance, or its
``"module:factory"`` name (``pgrad-train --algo ippo --env mpe2.simple_spread_v3:parallel_env``)
and build the rows themselves (:mod:`agents.learners.multiagent`). ``num_envs`` counts copies of
the game; each update takes ``n_steps x n_agents x num_envs`` rows in ``num_minibatches``
minibatches; env steps count steps of the game (BenchMARL's frames).

Defaults are the MAPPO paper's for MPE (Yu et al. 2022; on-policy's ``config.py`` and
``train_mpe_spread.sh``): learning rate 7e-4, 10 epochs, clip 0.2, entropy 0.01, gamma 0.99,
GAE 0.95, gradient norm 10, 64-64 tanh layers, orthogonal initialisation (policy output gain
0.01), Adam epsilon 1e-5; ``mappo`` adds the paper's value normalisation (``value_norm``) and
clipped value loss (``clip_range_vf`` 0.2, in normalised units); its Huber loss (delta 10,
coefficient 1) is ``vf_coef`` 0.5 times the squared error wherever the normalised error is under
10. The differences, and why (docs/multiagent/index.md, "MAPPO's settings"): smaller batches
than its 128 threads x 25 steps (8 copies x 50 steps, in 4 minibatches), one gradient-norm clip
over actor and critic together (the paper clips each), no LayerNorm in the MLPs, feed-forward
policies (the spread script trains the recurrent rMAPPO), and ``ippo`` keeps value
normalisation off by default (set ``value_norm=True clip_range_vf=0.2`` for the paper's IPPO).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from agents.algorithms.ppo import PPOConfig, ppo_chain
from agents.catalog.declare import Algorithm
from agents.config import doc, preset

#: ``encoder`` value of ippo's board CNN (pgrad.rl.multiagent.board.BOARD_CNN; the config
#: module imports no TensorFlow).
BOARD_CNN = "board_cnn"

#: How the critic of ``mappo`` reads a row (:class:`MAPPOConfig.critic_input`).
CRITIC_INPUTS = ("state_and_obs", "state")

#: How a step's weight is assigned (:attr:`IPPOConfig.credit`): "gae", the advantage of the
#: agent's own critic; "coma", COMA's counterfactual advantage (docs/multiagent/credit.md).
CREDITS = ("gae", "coma")


@dataclass
class IPPOConfig(PPOConfig):
    """IPPO hyperparameters: PPO's fields, ``num_envs`` counting copies of the game."""

    num_envs: int = field(default=8, metadata=doc(
        "copies of the game (B); the agent steps n_agents x B rows"))
    n_steps: int = preset("n_steps", 50)
    epochs: int = preset("epochs", 10)
    minibatch_size: int = field(default=0, metadata=doc(
        "must stay 0: the rows per minibatch follow from num_minibatches"))
    num_minibatches: int = field(default=4, metadata=doc(
        "minibatches per epoch over the n_steps x n_agents x num_envs rows (MAPPO's "
        "num_mini_batch); must divide them"))
    learning_rate: float = preset("learning_rate", 7e-4)
    ent_coef: float | str = preset("ent_coef", 0.01)
    max_grad_norm: float = preset("max_grad_norm", 10.0)
    agent_id: bool = field(default=False, metadata=doc(
        "append each agent's index, one-hot, to its observation"))
    encoder: str = field(default="auto", metadata=doc(
        "what reads a row: 'auto' / 'mlp' (the MLP of hidden on the flat row), or "
        "'board_cnn' (ippo, board games: the observation's 3-D Box board (H, W, C) reshaped "
        "from the row, board_filters 3x3 ReLU convolutions, then the MLP of hidden with the "
        "row's other columns beside them; pgrad.rl.multiagent.board); from Python as "
        "ActorCriticConfig's"))
    board_filters: tuple[int, ...] = field(default=(64, 64), metadata=doc(
        "encoder='board_cnn': the output channels of each 3x3 'same' convolution"))
    value_norm: bool = field(default=False, metadata=doc(
        "MAPPO's value normalisation: the critic regresses returns normalised by running "
        "statistics and its output is denormalised for GAE (agents/update/value_norm.py); "
        "credit='gae' only (with 'coma' the critic fits raw returns)"))
    credit: str = field(default="gae", metadata=doc(
        "each step's weight: 'gae' (the GAE advantage of the agent's critic) or 'coma' (COMA's "
        "counterfactual advantage from a centralised Q critic: the chain "
        "counterfactual_advantage('clip_range'), mean_steps())"))
    self_play: bool = field(default=False, metadata=doc(
        "two-player games: the learner plays one seat (alternating) against the latest policy "
        "or a snapshot from a pool of past ones; only its rows enter the update "
        "(docs/multiagent/self_play.md)"))
    pool_size: int = field(default=10, metadata=doc(
        "self_play: past snapshots kept as opponents (the newest replaces the oldest)"))
    snapshot_interval: int = field(default=10, metadata=doc(
        "self_play: updates between snapshots added to the pool (the first at update 0)"))
    latest_prob: float = field(default=0.5, metadata=doc(
        "self_play: probability a game's opponent is the latest policy, not a snapshot"))
    random_prob: float = field(default=0.0, metadata=doc(
        "self_play: probability a game's opponent is a uniform random legal player (drawn "
        "first; latest_prob splits the other games)"))
    tactics_prob: float = field(default=0.0, metadata=doc(
        "self_play: probability a game's opponent is a one-move-deep tactical player (takes a "
        "win on the board, else blocks the opponent's; connect_four_v3 and tictactoe_v3), "
        "drawn among the games not against the random player; random_prob + tactics_prob <= 1"))
    anchor_update: int = field(default=20, metadata=doc(
        "self_play: the update whose policy is kept as the fixed earlier opponent of "
        "evaluation (0: the initial policy)"))

    def validate(self) -> None:
        if isinstance(self.encoder, str) and self.encoder == BOARD_CNN:
            # ippo's own encoder (built on the rows, agents.learners.multiagent): every other
            # field checked as with the MLP
            if not self.board_filters or not all(1 <= int(f) <= 1024
                                                  for f in self.board_filters):
                raise ValueError(f"board_filters must be 1 to 1024 channels per convolution, "
                                 f"at least one; got {self.board_filters}")
            dataclasses.replace(self, encoder="mlp").validate()
            return
        # First (PPO's check reads it in copies). The agent's update runs on a copy of the
        # config counting rows (agents.learners.multiagent), marked so.
        if int(self.minibatch_size) != 0 and not getattr(self, "counts_rows", False):
            raise ValueError(f"minibatch_size must be 0 for agents on rows (their count depends "
                             f"on the game's agents); set num_minibatches instead; got "
                             f"{self.minibatch_size}")
        super().validate()
        if not 1 <= int(self.num_minibatches) <= 10_000:
            raise ValueError(f"num_minibatches must be in [1, 10000]; got {self.num_minibatches}")
        if self.rollout != "steps":
            raise ValueError(f"agents on rows collect rollout='steps'; got {self.rollout!r}")
        if self.recurrent:
            raise ValueError(f"agents on rows take feed-forward policies: recurrent must be ''; "
                             f"got {self.recurrent!r}")
        if self.vector_mode != "sync":
            raise ValueError(f"agents on rows step their copies in this process: vector_mode "
                             f"must be 'sync'; got {self.vector_mode!r}")
        if self.credit not in CREDITS:
            raise ValueError(f"credit must be one of {CREDITS}; got {self.credit!r}")
        self.validate_self_play()

    def validate_self_play(self) -> None:
        """The self-play settings' ranges, and what self-play cannot run with."""
        for name, low in (("pool_size", 1), ("snapshot_interval", 1), ("anchor_update", 0)):
            if not low <= int(getattr(self, name)) <= 10**9:
                raise ValueError(f"{name} must be in [{low}, 1e9]; got {getattr(self, name)}")
        for name in ("latest_prob", "random_prob", "tactics_prob"):
            if not 0.0 <= float(getattr(self, name)) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1]; got {getattr(self, name)}")
        if float(self.random_prob) + float(self.tactics_prob) > 1.0 + 1e-9:
            raise ValueError(f"random_prob + tactics_prob must be at most 1; got "
                             f"{self.random_prob} + {self.tactics_prob}")
        if self.self_play and self.normalize_obs:
            raise ValueError("self_play acts past snapshots on the observations as they are: "
                             "normalize_obs must be False")
        if self.self_play and self.credit != "gae":
            raise ValueError(f"self_play updates on the learner's rows with credit='gae'; got "
                             f"credit={self.credit!r}")


@dataclass
class MAPPOConfig(IPPOConfig):
    """MAPPO hyperparameters: IPPO's, value normalisation and value clipping on (the paper's
    ``use_valuenorm``, ``use_clipped_value_loss`` with ``clip_param`` 0.2), and what the
    centralised critic reads."""

    value_norm: bool = field(default=True, metadata=doc(
        "MAPPO's value normalisation: the critic regresses returns normalised by running "
        "statistics and its output is denormalised for GAE (agents/update/value_norm.py); "
        "credit='gae' only (with 'coma' the critic fits raw returns)"))
    clip_range_vf: float | str = preset("clip_range_vf", 0.2)
    critic_input: str = field(default="state_and_obs", metadata=doc(
        "what the critic reads: 'state_and_obs' (the global state beside the agent's own "
        "observation: MAPPO's agent-specific global state) or 'state' (the state alone, with "
        "the agent's one-hot if agent_id)"))

    def validate(self) -> None:
        super().validate()
        if self.self_play:
            raise ValueError("self_play runs on ippo (its snapshots act with the policy "
                             "alone); mappo's critic reads the state: use ippo")
        if self.critic_input not in CRITIC_INPUTS:
            raise ValueError(f"critic_input must be one of {CRITIC_INPUTS}; got "
                             f"{self.critic_input!r}")
        own = getattr(self.encoder, "mappo_columns", False)  # the agent's own, for its update
        if not own and (not isinstance(self.encoder, str) or self.encoder not in ("auto", "mlp")):
            raise ValueError(f"mappo builds its own actor and critic MLPs (hidden widths, "
                             f"activation): encoder must be 'auto' or 'mlp'; got {self.encoder!r}")


def rows_chain(cfg: IPPOConfig):
    """PPO's chain, or with ``credit="coma"`` PPO's clip on COMA's counterfactual advantage:
    ``chain(counterfactual_advantage("clip_range", standardize=normalize_advantage),
    mean_steps())`` (:mod:`pgrad.transforms.counterfactual`)."""
    if getattr(cfg, "credit", "gae") != "coma":
        return ppo_chain(cfg)
    import pgrad
    from pgrad.transforms.counterfactual import counterfactual_advantage

    return pgrad.chain(counterfactual_advantage("clip_range",
                                                standardize=bool(cfg.normalize_advantage)),
                       pgrad.mean_steps(), name="ppo_coma")


_LEARNER = "agents.learners.multiagent"

#: pgrad-tune's space: the MAPPO paper's MPE knobs (Yu et al. 2022, appendix) around its values.
SEARCH_SPACE = {
    "learning_rate": {"type": "log_float", "low": 1e-4, "high": 3e-3},
    "epochs": {"type": "categorical", "choices": [5, 10, 15]},
    "num_minibatches": {"type": "categorical", "choices": [1, 2, 4]},
    "clip_range": {"type": "categorical", "choices": [0.1, 0.2, 0.3]},
    "ent_coef": {"type": "log_float", "low": 1e-4, "high": 0.05},
    "hidden": {"type": "categorical", "choices": [[64, 64], [128, 128]]},
}

ALGORITHMS = (
    Algorithm("ippo", "IPPO", IPPOConfig, chain=rows_chain, agent=f"{_LEARNER}:IPPO",
              search_space=SEARCH_SPACE,
              summary="PPO on the agent rows of a PettingZoo game, parameters shared by all "
                      "agents"),
    Algorithm("mappo", "MAPPO", MAPPOConfig, chain=rows_chain, agent=f"{_LEARNER}:MAPPO",
              search_space=SEARCH_SPACE,
              summary="IPPO with a centralised critic reading the game's global state"),
)
