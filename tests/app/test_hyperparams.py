"""Tuned per-env hyperparameters (pgrad_app/config/hyperparams/*.yaml): loading, precedence in
train.py,
--no-tuned, errors that name the file, env and key, and every shipped entry is a valid Config."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

import agents
from agents import schedules
from pgrad_app.config import tuned as hyperparams
from pgrad_app.errors import UserError, run_cli

ROOT = Path(__file__).resolve().parents[2]
MUJOCO = ("HalfCheetah-v5", "Hopper-v5", "Walker2d-v5")
REQUIRED = ("CartPole-v1", "Acrobot-v1", "LunarLander-v3", "Pendulum-v1", "InvertedPendulum-v5",
            *MUJOCO)


from pgrad_app.cli import train as train_script  # noqa: E402  (the program's main, resolve)


def resolve(*argv):
    """train.py's resolved (settings, cfg, agent class, source, tuned path) for ``argv``."""
    return train_script.resolve(train_script.build_parser().parse_args([str(a) for a in argv]))


# ---------------------------------------------------------------------------------------------
# Loading.
# ---------------------------------------------------------------------------------------------


def test_tuned_entry_is_typed_and_names_its_file():
    hyper, path = hyperparams.tuned("ppo", "HalfCheetah-v5")
    assert path == ROOT / "pgrad_app" / "config" / "hyperparams" / "ppo.yaml"
    assert hyper["hidden"] == (256, 256) and hyper["activation"] == "relu"  # a tuple, as Config
    assert hyper["learning_rate"] == 2.0633e-5 and hyper["epochs"] == 20
    assert hyper["normalize_obs"] is True and hyper["normalize_reward"] is True
    assert "n_timesteps" not in hyper
    assert hyperparams.budget("ppo", "HalfCheetah-v5") == 1_000_000
    # rl-zoo's lin_0.001 and lin_0.2 on CartPole: schedules over the run, as the zoo writes them.
    hyper, _ = hyperparams.tuned("PPO", "CartPole-v1")
    assert (hyper["learning_rate"], hyper["clip_range"]) == ("lin_1e-3", "lin_0.2")
    assert "lr_decay_steps" not in hyper and "clip_decay_steps" not in hyper
    assert hyperparams.tuned("a2c", "some_module:Pendulum-v1")[0]["gamma"] == 0.9


def test_no_entry_and_no_table_give_none(tmp_path):
    assert hyperparams.tuned("a2c", "MountainCar-v0") is None
    assert hyperparams.budget("a2c", "MountainCar-v0") is None
    assert hyperparams.tuned("a2c", "CartPole-v1", directory=tmp_path) is None  # no a2c.yaml


def test_yaml_files_are_package_data():
    """Every shipped table is matched by the wheel's package-data globs."""
    tomllib = pytest.importorskip("tomllib")
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    globs = pyproject["tool"]["setuptools"]["package-data"]["pgrad_app"]
    package = ROOT / "pgrad_app"
    shipped = set(hyperparams.CONFIG_DIR.glob("*.yaml"))
    assert shipped and hyperparams.CONFIG_DIR.is_relative_to(package)
    assert shipped <= {p for g in globs for p in package.glob(g)}


# ---------------------------------------------------------------------------------------------
# Every shipped entry.
# ---------------------------------------------------------------------------------------------


def test_every_shipped_entry_builds_a_valid_config_with_a_budget():
    tables = hyperparams.shipped()
    assert set(tables) <= set(agents.names())
    for name in ("a2c", "ppo"):
        assert set(REQUIRED) <= set(tables[name]), name
    assert "CartPole-v1" in tables["reinforce"]
    for name, envs in tables.items():
        cls = agents.get(name)
        for env in envs:
            hyper, path = hyperparams.tuned(name, env)
            assert path.name == f"{name}.yaml"
            cls.Config(**hyper).validate()
            assert hyperparams.budget(name, env) >= 10_000, (name, env)
            # A decay that ends before the budget would train on at learning rate 0.
            decay = hyper.get("lr_decay_steps", 0)
            assert decay == 0 or decay >= hyperparams.budget(name, env), env


def test_shipped_values_follow_the_translation_rules():
    """Spot checks of the rl-zoo / Tianshou translation (notes/hyperparams.md)."""
    cheetah, _ = hyperparams.tuned("ppo", "HalfCheetah-v5")
    assert (cheetah["num_envs"], cheetah["n_steps"], cheetah["minibatch_size"]) == (1, 512, 64)
    assert cheetah["gamma"] == 0.98 and cheetah["log_std_init"] == -2.0
    walker, _ = hyperparams.tuned("ppo", "Walker2d-v5")
    assert "hidden" not in walker and "activation" not in walker  # zoo: no policy_kwargs
    hopper, _ = hyperparams.tuned("ppo", "Hopper-v5")  # CleanRL's: the defaults plus these
    cfg = agents.get("ppo").Config(**hopper)
    assert (cfg.num_envs, cfg.n_steps, cfg.minibatch_size, cfg.epochs) == (1, 2048, 64, 10)
    assert (cfg.normalize_obs, cfg.normalize_reward, cfg.clip_range_vf) == (True, True, 0.2)
    for env in MUJOCO:  # Tianshou's A2C: 16 x 5, RMSprop 7e-4 decayed, gae 0.95, ent 0.01
        a2c, _ = hyperparams.tuned("a2c", env)
        cfg = agents.get("a2c").Config(**a2c)
        assert (cfg.num_envs, cfg.n_steps, cfg.optimizer, cfg.learning_rate) == (
            16, 5, "rmsprop", "lin_7e-4_4.6667e-4")
        assert (cfg.gae_lambda, cfg.ent_coef, cfg.normalize_obs, cfg.optimizer_eps) == (
            0.95, 0.01, True, 1e-10)
        # Tianshou's 3M-step schedule: 2/3 of the rate left at the 1M budget.
        assert schedules.bounds(cfg.learning_rate, "lr") == [7e-4, 4.6667e-4]
        assert cfg.normalize_reward == (env == "Hopper-v5")
    # The A2C CartPole entry is pgrad's defaults: the CartPole speed rows stay as measured.
    cartpole, _ = hyperparams.tuned("a2c", "CartPole-v1")
    assert agents.get("a2c").Config(**cartpole) == agents.get("a2c").Config()


# ---------------------------------------------------------------------------------------------
# Errors name the file, the env and the key.
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("entry, fragments", [
    ({"n_step": 5}, ["unknown hyperparameter 'n_step'", "Did you mean 'n_steps'?"]),
    ({"seed": 3}, ["unknown hyperparameter 'seed'"]),
    ({"gamma": 2.0}, ["gamma must be in [0, 1]; got 2.0", ": gamma"]),
    ({"hidden": "wide"}, ["CartPole-v1: hidden: expected a list"]),
    ({"n_timesteps": 0}, ["n_timesteps must be >= 1"]),
])
def test_bad_entry_names_file_env_and_key(entry, fragments, tmp_path):
    (tmp_path / "ppo.yaml").write_text(yaml.safe_dump({"CartPole-v1": entry}))
    with pytest.raises(UserError) as err:
        hyperparams.tuned("ppo", "CartPole-v1", directory=tmp_path)
    text = str(err.value)
    assert str(tmp_path / "ppo.yaml") in text and "CartPole-v1" in text
    for fragment in fragments:
        assert fragment in text


def test_entry_that_is_not_a_mapping(tmp_path):
    (tmp_path / "a2c.yaml").write_text("CartPole-v1: [1, 2]\n")
    with pytest.raises(UserError, match="a2c.yaml: CartPole-v1: expected a mapping"):
        hyperparams.tuned("a2c", "CartPole-v1", directory=tmp_path)


def test_train_reports_a_bad_tuned_entry_in_one_line(tmp_path, monkeypatch, capsys):
    (tmp_path / "a2c.yaml").write_text("CartPole-v1:\n  gama: 0.9\n")
    monkeypatch.setattr(hyperparams, "CONFIG_DIR", tmp_path)
    code = run_cli(train_script.main, ["--out", str(tmp_path / "run"), "--total-steps", "100"])
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: ")
    assert f"{tmp_path / 'a2c.yaml'}: CartPole-v1" in lines[0] and "'gama'" in lines[0]
    assert "--no-tuned skips" in lines[0] and not (tmp_path / "run").exists()
    # --no-tuned does not read the table at all.
    settings, cfg, _, _, path = resolve("--no-tuned")
    assert path is None and cfg == agents.get("a2c").Config()


# ---------------------------------------------------------------------------------------------
# Precedence in train.py: defaults < tuned < --config < flags < --set.
# ---------------------------------------------------------------------------------------------


def test_tuned_layer_sits_between_defaults_and_everything_else(tmp_path):
    ppo = agents.get("ppo").Config
    settings, cfg, cls, source, path = resolve("--agent", "ppo", "--env", "HalfCheetah-v5")
    assert cls is agents.get("ppo") and path == hyperparams.path_for("ppo")
    assert cfg.learning_rate == 2.0633e-5 and cfg.hidden == (256, 256)  # tuned beats defaults
    assert cfg.clip_range_vf == ppo().clip_range_vf  # not in the entry: the default
    assert source["learning_rate"] == f"{path}: HalfCheetah-v5: learning_rate"

    config = tmp_path / "run.yaml"
    config.write_text("env: HalfCheetah-v5\nhyperparameters:\n  learning_rate: 5.0e-4\n"
                      "  num_envs: 2\n  n_steps: 256\n")
    _, cfg, _, source, _ = resolve("--agent", "ppo", "--config", config)  # env from the file
    assert cfg.learning_rate == 5e-4 and cfg.gamma == 0.98  # --config beats tuned; rest tuned
    assert source["learning_rate"] == f"{config}: learning_rate"
    _, cfg, _, _, _ = resolve("--agent", "ppo", "--config", config, "--num-envs", 4)
    assert cfg.num_envs == 4  # a flag beats --config
    _, cfg, _, _, _ = resolve("--agent", "ppo", "--config", config, "--num-envs", 4,
                              "--set", "num_envs=8", "--set", "learning_rate=1e-3")
    assert cfg.num_envs == 8 and cfg.learning_rate == 1e-3  # --set beats everything

    # A file that sets every tuned value (a run's config.yaml) leaves nothing tuned to report.
    full = tmp_path / "full.yaml"
    tuned, _ = hyperparams.tuned("ppo", "HalfCheetah-v5")
    full.write_text(yaml.safe_dump({"env": "HalfCheetah-v5", "total_steps": 5000,
                                    "hyperparameters": {
        k: list(v) if isinstance(v, tuple) else v for k, v in tuned.items()}}))
    assert resolve("--agent", "ppo", "--config", full)[4] is None

    _, cfg, _, _, path = resolve("--agent", "ppo", "--env", "HalfCheetah-v5", "--no-tuned")
    assert path is None and cfg == ppo()
    _, cfg, _, _, path = resolve("--agent", "ppo", "--set", "env=Hopper-v5")  # env from --set
    assert path is not None and cfg.clip_range_vf == 0.2


def test_a_tuned_value_that_conflicts_with_a_flag_is_reported_with_its_source():
    # Tuned Walker2d minibatch 32 with 1 env x 512 steps; --set n_steps=48 leaves 32 dividing 48
    # impossible: the message names the values, the run stops before anything is written.
    with pytest.raises(UserError, match="minibatch_size must divide") as err:
        resolve("--agent", "ppo", "--env", "Walker2d-v5", "--set", "n_steps=48")
    assert f"{hyperparams.path_for('ppo')}: Walker2d-v5: minibatch_size" in str(err.value)


def test_train_says_when_tuned_values_apply_and_records_them(tmp_path, capsys):
    out = tmp_path / "run"
    code = run_cli(train_script.main, ["--agent", "ppo", "--env", "CartPole-v1", "--total-steps",
                                       "256", "--quiet", "--out", str(out)])
    captured = capsys.readouterr()
    path = hyperparams.path_for("ppo")
    assert code == 0, captured.err
    assert (f"using tuned hyperparameters for ppo on CartPole-v1 from {path} "
            "(--no-tuned for the plain defaults)") in captured.out
    recorded = yaml.safe_load((out / "config.yaml").read_text())["hyperparameters"]
    tuned, _ = hyperparams.tuned("ppo", "CartPole-v1")
    expected = dataclasses.asdict(agents.get("ppo").Config(**tuned))
    assert recorded == {k: list(v) if isinstance(v, tuple) else v for k, v in expected.items()}
    assert recorded["n_steps"] == 32 and recorded["num_envs"] == 8


def test_help_lists_no_tuned():
    assert "--no-tuned" in train_script.build_parser().format_help()


def test_family_entries_cover_atari_and_minatar_ids():
    """rl-zoo's ``atari`` key: an id without its own entry takes its family's; its own wins."""
    assert hyperparams.family("MinAtar/Breakout-v1") == "minatar"
    assert hyperparams.family("ALE/Pong-v5") == hyperparams.family("PongNoFrameskip-v4") == "atari"
    assert hyperparams.family("CartPole-v1") is None
    for game in ("Asterix", "Breakout", "Freeway", "Seaquest", "SpaceInvaders"):
        hyper, _ = hyperparams.tuned("ppo", f"MinAtar/{game}-v1")
        assert (hyper["num_envs"], hyper["n_steps"], hyper["epochs"]) == (64, 128, 4)
        assert hyper["learning_rate"] == "lin_2.5e-3"  # benchmarks/minatar-tuning
        assert hyperparams.budget("ppo", f"MinAtar/{game}-v1") == 5_000_000
        a2c, _ = hyperparams.tuned("a2c", f"MinAtar/{game}-v1")  # benchmarks/minatar-a2c-tuning
        assert (a2c["num_envs"], a2c["n_steps"], a2c["optimizer"]) == (64, 4, "adam")
    hyper, _ = hyperparams.tuned("ppo", "ALE/Breakout-v5")
    assert (hyper["learning_rate"], hyper["clip_range"]) == ("lin_2.5e-4", "lin_0.1")
    assert hyperparams.budget("a2c", "BreakoutNoFrameskip-v4") == 10_000_000
    assert hyperparams.entry_key("ppo", "ALE/Pong-v5") == "atari"
    assert hyperparams.entry_key("ppo", "CartPole-v1") == "CartPole-v1"
    assert hyperparams.tuned("reinforce", "MinAtar/Breakout-v1") is None  # no family entry


def test_own_entry_wins_over_family(tmp_path):
    (tmp_path / "ppo.yaml").write_text(
        "minatar:\n  num_envs: 4\nMinAtar/Breakout-v1:\n  num_envs: 2\n")
    assert hyperparams.tuned("ppo", "MinAtar/Breakout-v1", directory=tmp_path)[0] == {"num_envs": 2}
    assert hyperparams.tuned("ppo", "MinAtar/Seaquest-v1", directory=tmp_path)[0] == {"num_envs": 4}


def test_train_names_the_family_entry_as_the_source():
    _, cfg, _, source, path = resolve("--agent", "ppo", "--env", "MinAtar/Freeway-v1")
    assert cfg.num_envs == 64 and path.name == "ppo.yaml"
    assert source["num_envs"].endswith("ppo.yaml: minatar: num_envs")


# ---------------------------------------------------------------------------------------------
# One lookup: a plan reads each table once, and passes the entry down.
# ---------------------------------------------------------------------------------------------


def test_lookup_is_the_whole_entry_the_parts_agree_with():
    entry = hyperparams.lookup("ppo", "ALE/Pong-v5")
    assert (entry.key, entry.path) == ("atari", hyperparams.path_for("ppo"))
    assert entry.hyperparameters == hyperparams.tuned("ppo", "ALE/Pong-v5")[0]
    assert entry.budget == hyperparams.budget("ppo", "ALE/Pong-v5") == 10_000_000
    assert hyperparams.lookup("a2c", "MountainCar-v0") is None


@pytest.fixture
def table_reads(monkeypatch):
    """The tuned tables read (paths, in order) while the test runs."""
    from pgrad_app.config import yamlfile

    reads, real = [], yamlfile.load_yaml

    def load_yaml(path, *args, **kwargs):
        if Path(path).parent == hyperparams.CONFIG_DIR:
            reads.append(Path(path).name)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(yamlfile, "load_yaml", load_yaml)
    return reads


def test_a_sweep_plan_reads_each_tuned_table_once(table_reads):
    from pgrad_app.experiments.sweep import plan as sweep

    trials = sweep.plan(["a2c", "ppo"], ["CartPole-v1"], [0, 1],
                        grid=["learning_rate=1e-3,3e-3,1e-2"])
    assert len(trials) == 12  # 3 points x 2 agents x 2 seeds
    assert sorted(table_reads) == ["a2c.yaml", "ppo.yaml"]
    budgets = {t.agent: t.budget for t in trials}
    assert budgets == {a: hyperparams.budget(a, "CartPole-v1") for a in ("a2c", "ppo")}


def test_a_benchmark_and_a_tuning_plan_read_the_table_once(table_reads):
    from pgrad_app.experiments.benchmark import plan as benchmark
    from pgrad_app.experiments.tuning import study

    specs = benchmark.plan(["a2c"], ["CartPole-v1", "Acrobot-v1"], [0, 1, 2])
    assert len(specs) == 6 and table_reads == ["a2c.yaml", "a2c.yaml"]  # one per (agent, env)
    table_reads.clear()
    study.plan("a2c", "CartPole-v1", steps=1000)
    assert table_reads == ["a2c.yaml"]
    table_reads.clear()
    assert benchmark.plan(["a2c"], ["CartPole-v1"], [0], steps=10, no_tuned=True)
    assert table_reads == []


def test_a_run_reads_its_tuned_table_once(table_reads):
    import argparse

    from pgrad_app.cli import resolve
    from pgrad_app.cli import train as train_cli

    args = train_cli.build_parser().parse_args(["--agent", "ppo", "--env", "CartPole-v1"])
    settings, cfg, _, source, path = resolve.resolve(args)
    assert table_reads == ["ppo.yaml"] and path == hyperparams.path_for("ppo")
    assert settings.total_steps == hyperparams.budget("ppo", "CartPole-v1")
    assert isinstance(args, argparse.Namespace) and source["total_steps"].endswith("n_timesteps")
