"""Stable-Baselines3's keyword names (issue 24, item 2): mapped onto pgrad's or refused in one
line with pgrad's way; rl-zoo / CleanRL flags accepted as aliases or refused with "did you mean"."""

from __future__ import annotations

import pytest
from cli_helpers import one_error_line, train

import agents
import pgrad


def test_sb3_constructor_names_map_onto_pgrad_fields():
    agent = agents.make("ppo", "CartPole-v1", n_envs=2, n_steps=16, batch_size=8, n_epochs=3,
                        verbose=0, policy_kwargs=dict(net_arch=dict(pi=[32], vf=[32]),
                                                      activation_fn="ReLU", ortho_init=False))
    try:
        cfg = agent.cfg
        assert (cfg.num_envs, cfg.minibatch_size, cfg.epochs) == (2, 8, 3)
        assert (cfg.hidden, cfg.activation, cfg.ortho_init) == ((32,), "relu", False)
        assert agent.learn(total_timesteps=32, progress_bar=False) is agent
        assert agent.env_steps == 32
        result = pgrad.evaluate(agent, n_eval_episodes=2)
        assert result["episodes"] == 2
    finally:
        agent.close()


def test_sb3_names_without_a_pgrad_field_point_to_pgrad_s_way():
    with pytest.raises(TypeError, match="tb_log_name is Stable-Baselines3's; pgrad: .*"
                                        "tensorboard_log=DIR"):
        agents.make("ppo", tb_log_name="x")
    with pytest.raises(ValueError, match="keys pi and vf only"):
        agents.make("ppo", policy_kwargs=dict(net_arch=dict(pi=[64], qf=[128])))
    with pytest.raises(ValueError, match="supports tanh and relu"):
        agents.make("ppo", policy_kwargs=dict(activation_fn="elu"))
    with pytest.raises(TypeError, match="policy_kwargs \\['features_extractor_class'\\]"):
        agents.make("ppo", policy_kwargs=dict(features_extractor_class=object))


def test_class_load_as_sb3(tmp_path):
    agent = agents.make("a2c", "CartPole-v1", num_envs=1)
    agent.save(tmp_path / "a")
    agent.close()
    loaded = agents.A2C.load(tmp_path / "a")
    assert isinstance(loaded, agents.A2C)
    loaded.close()
    with pytest.raises(ValueError, match="holds a a2c agent, not ppo; load it with agents.load"):
        agents.PPO.load(tmp_path / "a")
    with pytest.raises(TypeError, match="reset_num_timesteps is Stable-Baselines3's"):
        loaded.learn(10, reset_num_timesteps=False)


@pytest.mark.parametrize("flag,hint", [("-params", "--set KEY=VALUE"),
                                       ("--vec-env", "--set vector_mode="),
                                       ("--n-envs", "--num-envs N"),
                                       ("-f", "--out DIR")])
def test_peer_flags_refused_with_did_you_mean(flag, hint, capsys):
    code, _, err = train(flag, "x", "--total-steps", "10", capsys=capsys)
    line = one_error_line(err)
    assert code == 2 and f"{flag} is not a pgrad-train flag; did you mean {hint}" in line


def test_peer_flags_that_mean_the_same_are_aliases():
    from pgrad_app.cli.train import build_parser

    args = build_parser().parse_args(["--algo", "ppo", "--env-id", "Pendulum-v1", "-n", "500",
                                      "--eval-freq", "100", "--save-freq", "200", "--seed", "3"])
    assert (args.agent, args.env, args.total_steps, args.eval_every, args.checkpoint_every,
            args.seed) == ("ppo", "Pendulum-v1", 500, 100, 200, 3)
    args = build_parser().parse_args(["--total-timesteps", "7", "--n-timesteps", "8"])
    assert args.total_steps == 8
