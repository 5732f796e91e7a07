"""A directory never runs code: the one resolver for names read from run directories and saved
agents (wrappers, env modules, gym packages), and meta.json covered by its own checksum.

The gadget: an ``env_wrapper`` entry that starts with ``gymnasium.`` but walks from a Gymnasium
module through the modules it imports to ``subprocess.Popen``, with a shell script shipped inside
the run directory. Each surface that reads a directory must refuse it before anything runs: the
marker file the script would write never appears.
"""

from __future__ import annotations

import json
import shutil

import gymnasium as gym
import pytest
import yaml
from cli_helpers import evaluate, one_error_line, train

import agents
import pgrad
from pgrad.rl.envs.recipe import EnvRecipe, apply_wrapper
from pgrad.rl.storage import named_code
from pgrad.rl.storage.checkpoint import CheckpointStore, _meta_digest
from pgrad_app import RunDirectory

WRAPPER = "gymnasium.wrappers.TimeAwareObservation"
GADGET = "gymnasium.utils.seeding:np.f2py.subprocess.Popen"


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A finished run of a wrapped env (wrapper by Gymnasium name) and its saved agent."""
    root = tmp_path_factory.mktemp("wrapped")
    out, saved = root / "run", root / "saved"
    agent = agents.make("a2c", "CartPole-v1", seed=0, env_wrapper=WRAPPER, num_envs=1)
    try:
        agent.learn(40, callbacks=RunDirectory(out, checkpoint_every=20), progress=False)
        agent.save(saved)
    finally:
        agent.close()
    return out, saved


def _armed(directory, tmp_path):
    """A copy of ``directory`` with a shell script inside and the gadget everywhere it names
    wrappers; returns (copy, marker path the script would create)."""
    copy = tmp_path / directory.name
    shutil.copytree(directory, copy)
    marker = tmp_path / "PWNED"
    (copy / "x.sh").write_text(f"touch {marker}\n")
    gadget = [{GADGET: {"executable": "/bin/sh", "cwd": str(copy)}}]
    config = copy / "config.yaml"
    if config.exists():
        values = yaml.safe_load(config.read_text())
        values["env_wrapper"] = gadget
        config.write_text(yaml.safe_dump(values))
    record_file = copy / "agent.json"
    record = json.loads(record_file.read_text())
    record["env_wrapper"] = gadget
    record_file.write_text(json.dumps(record))
    for meta_file in copy.glob("checkpoints/step-*/meta.json"):
        meta = json.loads(meta_file.read_text())
        meta["env_wrapper"] = gadget  # and its checksum made to match: a careful attacker
        meta["meta_sha256"] = _meta_digest(meta)
        meta_file.write_text(json.dumps(meta))
    return copy, marker


def test_the_resolver_never_walks_into_another_module():
    with pytest.raises(named_code.DirectoryCode, match="walks into the module 'numpy'"):
        named_code.resolve(GADGET)
    with pytest.raises(named_code.DirectoryCode, match="not a public attribute"):
        named_code.resolve("gymnasium.wrappers:TimeAwareObservation.__init__")
    assert named_code.resolve(WRAPPER) is gym.wrappers.TimeAwareObservation
    assert named_code.resolve("gymnasium.wrappers:TimeAwareObservation") is \
        gym.wrappers.TimeAwareObservation


@pytest.mark.parametrize("name, ok", [
    (WRAPPER, True),
    ("gymnasium.wrappers:ClipAction", True),
    ("gymnasium.wrappers.common:TimeLimit", True),
    (GADGET, False),
    ("gymnasium.utils.seeding:np", False),       # a module, not a wrapper
    ("gymnasium.spaces.Box", False),             # Gymnasium's, but not a wrapper
    ("gymnasium.utils.seeding.np_random", False),  # a function
    ("numpy.f2py.subprocess.Popen", False),      # not Gymnasium's
    ("mymodule_that_is_not_there.Wrapper", False),
])
def test_a_directory_may_name_only_wrappers_gymnasium_defines(name, ok):
    assert (named_code.gymnasium_wrapper(name) is not None) is ok


def test_pgrad_evaluate_refuses_the_gadget_in_config_yaml(trained, tmp_path, capsys):
    run, marker = _armed(trained[0], tmp_path)
    code, _, err = evaluate(run, "--episodes", "1", capsys=capsys)
    assert code == 2
    assert GADGET in one_error_line(err)
    assert not marker.exists()
    with pytest.raises(ValueError):
        pgrad.evaluate(run, episodes=1)
    assert not marker.exists()


def test_trusting_the_run_still_never_walks_out_of_a_module(trained, tmp_path, capsys):
    run, marker = _armed(trained[0], tmp_path)
    code, _, err = evaluate(run, "--episodes", "1", "--trust-run-code", capsys=capsys)
    assert code == 2
    assert "walks into the module" in one_error_line(err)
    assert not marker.exists()


def test_agents_load_refuses_the_gadget_in_agent_json(trained, tmp_path):
    saved, marker = _armed(trained[1], tmp_path)
    with pytest.raises(ValueError, match="Popen"):
        agents.load(saved)
    assert not marker.exists()


def test_resume_refuses_the_gadget_even_with_meta_json_edited_to_match(trained, tmp_path,
                                                                       capsys):
    run, marker = _armed(trained[0], tmp_path)
    code, _, err = train("--resume", run, "--more-steps", "20", capsys=capsys)
    assert code == 2
    assert GADGET in one_error_line(err)
    code, _, err = train("--resume", run, "--more-steps", "20", "--trust-run-code",
                         capsys=capsys)
    assert code != 0 and not marker.exists()


def test_an_edited_meta_json_fails_its_own_checksum(trained, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(trained[0], run)
    store = CheckpointStore(run / "checkpoints")
    newest = store.checkpoints()[0]
    store.verify(newest)  # as written: good
    meta = json.loads((newest / "meta.json").read_text())
    assert named_code is not None and "meta_sha256" in meta
    meta["seed"] = 12345
    (newest / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="checksum mismatch in meta.json"):
        store.verify(newest)
    assert store.newest_good() == store.checkpoints()[1]  # the earlier one is used instead


def test_a_meta_json_from_before_the_digest_still_verifies(trained, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(trained[0], run)
    store = CheckpointStore(run / "checkpoints")
    newest = store.checkpoints()[0]
    meta = json.loads((newest / "meta.json").read_text())
    del meta["meta_sha256"]
    (newest / "meta.json").write_text(json.dumps(meta))
    assert store.verify(newest)["step"] == meta["step"]


def test_an_env_module_inside_the_run_directory_is_refused_even_when_named(trained, tmp_path,
                                                                           capsys):
    run = tmp_path / "run"
    shutil.copytree(trained[0], run)
    marker = tmp_path / "IMPORTED"
    (run / "module.py").write_text(
        f"open({str(marker)!r}, 'w').close()\n"
        "import gymnasium as gym\n"
        "def Factory():\n    return gym.make('CartPole-v1')\n")
    code, _, err = evaluate(run, "--env", f"{run}/module.py:CartPole-v1", "--episodes", "1",
                            capsys=capsys)
    assert code == 2 and "refusing to import" in one_error_line(err)
    with pytest.raises(ValueError, match="refusing to import"):
        pgrad.evaluate(run, env_id=f"{run}/module.py:CartPole-v1", episodes=1)
    assert not marker.exists()


def test_a_wrapper_that_returns_no_env_is_one_line():
    with pytest.raises(TypeError, match="wrapper .* returned a NoneType, not a gymnasium.Env"):
        apply_wrapper(gym.make("CartPole-v1"), lambda env: None)
    recipe = EnvRecipe("CartPole-v1", {}, (lambda env: 3,))
    with pytest.raises(TypeError, match="returned a int"):
        recipe()
