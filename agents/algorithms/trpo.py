"""Trust region policy optimisation (TRPO, Schulman et al. 2015): NPG's step, then a line search.

The whole algorithm is this declaration -- a config, a chain and a part -- on the actor-critic
agent (docs/agents.md, "Adding an algorithm", walks through it):

* the chain is NPG's (:mod:`agents.algorithms.npg`): the damped natural gradient
  ``x = (F + damping I)^-1 g`` by conjugate gradient on Fisher-vector products, scaled so that
  ``0.5 x^T (F + damping I) x = max_kl``;
* the part is TRPO's backtracking line search (:class:`agents.update.line_search.
  BacktrackingLineSearch`): after the step, ``theta + 0.8^j x`` for ``j = 0..9`` until the mean
  KL of the whole distributions is below ``max_kl`` and the surrogate improved, else no step;
* the critic trains after each policy step with its own Adam (``critic_updates`` passes of
  ``critic_minibatch_size``).

Defaults are Stable-Baselines3-contrib's TRPO (``target_kl`` 0.01 as ``max_kl``, ``cg_damping``
0.1, ``cg_max_steps`` 15, ``n_critic_updates`` 10 of minibatch 128 at learning rate 1e-3,
``n_steps`` 2048, GAE 0.95, advantages normalised); their names map onto these fields.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agents.algorithms.npg import NPGConfig, npg_chain
from agents.catalog.declare import Algorithm
from agents.config import doc, preset


@dataclass
class TRPOConfig(NPGConfig):
    """TRPO hyperparameters: NPG's, with Stable-Baselines3-contrib's defaults, and the line
    search's."""

    num_envs: int = preset("num_envs", 1)
    n_steps: int = preset("n_steps", 2048)
    solver: str = field(default="cg", metadata=doc(
        "'cg' (conjugate gradient on Fisher-vector products, TRPO's), 'cholesky' or 'auto'"))
    cg_iters: int = field(default=15, metadata=doc(
        "conjugate-gradient iterations at most (cg_max_steps)"))
    critic_updates: int = preset("critic_updates", 10)
    critic_minibatch_size: int = preset("critic_minibatch_size", 128)
    critic_learning_rate: float | str = preset("critic_learning_rate", 1e-3)
    line_search_shrink: float = field(default=0.8, metadata=doc(
        "the line search's backtracking factor in (0, 1) (SB3-contrib's "
        "line_search_shrinking_factor)"))
    line_search_steps: int = field(default=10, metadata=doc(
        "trials of the line search at most; none accepted: no policy step "
        "(line_search_max_iter)"))

    def validate(self) -> None:
        if self.recurrent:  # first: NPG's recurrent checks would name a setting, not the cause
            raise ValueError("TRPO's line search needs a feed-forward policy: recurrent must be "
                             f"''; got {self.recurrent!r}")
        super().validate()
        if not self.max_kl > 0:
            raise ValueError(f"TRPO's line search needs max_kl > 0; got {self.max_kl}")
        if not 0 < self.line_search_shrink < 1:
            raise ValueError(f"line_search_shrink must be in (0, 1); got "
                             f"{self.line_search_shrink}")
        if not 1 <= int(self.line_search_steps) <= 100:
            raise ValueError(f"line_search_steps must be in [1, 100]; got "
                             f"{self.line_search_steps}")


def trpo_line_search(cfg: TRPOConfig):
    """The policy-step part: backtracking within ``max_kl``."""
    from agents.update.line_search import BacktrackingLineSearch

    return BacktrackingLineSearch(cfg.max_kl, cfg.line_search_shrink, cfg.line_search_steps)


#: pgrad-tune's space: rl-baselines3-zoo's sample_trpo_params (rl_zoo3/hyperparams_opt.py) in
#: pgrad's names (target_kl -> max_kl, n_critic_updates -> critic_updates, cg_max_steps ->
#: cg_iters, and SB3-contrib's learning_rate, the critic's, -> critic_learning_rate); n_steps is
#: per env.
SEARCH_SPACE = {
    "n_steps": {"type": "categorical", "choices": [8, 16, 32, 64, 128, 256, 512, 1024, 2048]},
    "gamma": {"type": "categorical", "choices": [0.9, 0.95, 0.98, 0.99, 0.995, 0.999, 0.9999]},
    "critic_learning_rate": {"type": "log_float", "low": 1e-5, "high": 1.0},
    "gae_lambda": {"type": "categorical", "choices": [0.8, 0.9, 0.92, 0.95, 0.98, 0.99, 1.0]},
    "max_kl": {"type": "categorical", "choices": [0.1, 0.05, 0.03, 0.02, 0.01, 0.005, 0.001]},
    "critic_updates": {"type": "categorical", "choices": [5, 10, 20, 25, 30]},
    "cg_iters": {"type": "categorical", "choices": [5, 10, 20, 25, 30]},
    "hidden": {"type": "categorical", "choices": [[64, 64], [256, 256]]},
    "activation": {"type": "categorical", "choices": ["tanh", "relu"]},
}

ALGORITHMS = (Algorithm("trpo", "TRPO", TRPOConfig,
                        chain=lambda cfg: npg_chain(cfg, name="trpo"),
                        policy_step=trpo_line_search, search_space=SEARCH_SPACE,
                        summary="NPG's step scaled to max_kl, then TRPO's backtracking line "
                                "search"),)
