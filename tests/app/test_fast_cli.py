"""The command line answers argument mistakes and --help before TensorFlow loads (issue 24, item
5): the programs' modules import no TensorFlow, and a subprocess proves it end to end."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from cli_helpers import ROOT

from pgrad_app.cli.entry import PARSE_FIRST, PROGRAMS

PROBE = """
import sys
from pgrad_app.cli import entry
code = entry.run({program!r}, {argv!r})
print("TF", "tensorflow" in sys.modules, "CODE", code)
"""


def probe(program: str, *argv: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-c", PROBE.format(program=program, argv=list(argv))],
                          capture_output=True, text=True, timeout=120, env=env)


@pytest.mark.subprocess
@pytest.mark.parametrize("program", ["train", "evaluate", "export"])
def test_a_bad_flag_is_answered_without_tensorflow(program):
    r = probe(program, "--no-such-flag")
    assert "TF False CODE 2" in r.stdout, r.stderr
    assert r.stderr.startswith("error: ") and len(r.stderr.splitlines()) == 1, r.stderr


@pytest.mark.subprocess
def test_help_without_tensorflow_and_train_help_still_lists_hyperparameters():
    r = probe("evaluate", "--help")
    assert "TF False CODE 0" in r.stdout and "--episodes" in r.stdout, r.stderr
    r = probe("train", "--help")
    assert "TF False CODE 0" in r.stdout, r.stderr
    listed = r.stdout[r.stdout.index("hyperparameters (--set NAME=VALUE"):]
    # every agent's every field, with its preset's default: the full table, not a summary
    import agents
    from pgrad_app.config.settings import field_help

    for name in agents.names():
        assert f"\n  {name}:\n" in listed
        block = listed[listed.index(f"\n  {name}:\n"):]
        for field_name, _, default in field_help(agents.config_class(name)):
            assert f"    {field_name}={json.dumps(default)}  " in block, (name, field_name)
    assert "clip_range=0.4" in listed and "max_kl=0.01" in listed  # appo's and npg's own


def test_the_agents_configs_are_data_and_the_agents_load_on_first_use():
    code = ("import sys, agents\n"
            "print('tensorflow' in sys.modules, agents.names())\n"
            "cfg = agents.config_class('PPO')(n_steps=64)\n"
            "print('tensorflow' in sys.modules, cfg.n_steps, cfg.clip_range)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert r.stdout.splitlines() == [
        "False ['a2c', 'appo', 'grpo', 'impala', 'ippo', 'mappo', 'npg', 'ppo', 'reinforce', "
        "'rloo', 'trpo']",
        "False 64 0.2"
    ], r.stderr
    import agents  # here TensorFlow may load: the classes come on first use, with their configs

    for name in agents.names():
        assert agents.get(name).Config is agents.config_class(name)
    assert agents.PPO.Config is agents.PPOConfig and agents.get("APPO") is agents.APPO


def test_every_parse_first_program_imports_no_tensorflow_with_its_module():
    code = ("import sys, importlib\n"
            f"for m in {[PROGRAMS[p] for p in PARSE_FIRST]!r}: importlib.import_module(m)\n"
            "print('tensorflow' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert r.stdout.strip() == "False", r.stderr


FINISH = """
import atexit, sys, threading, time, weakref
from pgrad_app.cli.entry import finish
class Held:
    def __del__(self):  # runs in the interpreter's teardown, which finish() skips
        print(" teardown", end="")
held = Held()
weakref.finalize(held, print, "finalizer ran")  # atexit=True: run at exit, as normally
atexit.register(lambda: open({marker!r}, "w").write("atexit ran"))
print("buffered, no newline", end="")
sys.stderr.write("err buffered")
if {thread}:  # a non-daemon thread still working: waited for, as a normal exit does
    threading.Thread(target=lambda: (time.sleep(0.5), print(" thread done", end=""))).start()
finish(3)
print("never")
"""


@pytest.mark.subprocess
@pytest.mark.parametrize("thread", [False, True])
def test_finish_exits_with_the_code_after_atexit_and_flushed_output(tmp_path, thread):
    """The commands end with finish(): the interpreter's module teardown is skipped (~1.5 s of
    CPU with TensorFlow loaded), nothing a normal exit shows is."""
    marker = tmp_path / "marker"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-c", FINISH.format(marker=str(marker), thread=thread)],
                       capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 3, r.stderr
    assert r.stdout.startswith("buffered, no newline")
    assert ("thread done" in r.stdout) == thread and "never" not in r.stdout
    assert ("teardown" in r.stdout) == thread  # skipped, unless a thread made it a normal exit
    assert "finalizer ran" in r.stdout
    assert r.stderr == "err buffered"
    assert marker.read_text() == "atexit ran"


@pytest.mark.subprocess
def test_a_command_ended_by_finish_has_written_every_row_it_logged(tmp_path):
    """The commands skip the interpreter's teardown (``finish``): nothing a normal exit would have
    flushed may be missing -- every update's row in updates.csv and in TensorBoard (a C++ writer
    that only a close flushes), whole episode rows, a checkpoint that loads."""
    import csv

    from cli_helpers import run
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    import agents

    out = tmp_path / "run"
    r = run("train.py", "--agent", "a2c", "--env", "CartPole-v1", "--no-tuned", "--num-envs", "2",
            "--set", "n_steps=8", "--total-steps", "1600", "--log-every", "1", "--out", out,
            "--quiet")
    assert r.returncode == 0, r.stderr[-2000:]
    with open(out / "updates.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [int(row["step"]) for row in rows] == [16 * (i + 1) for i in range(100)]
    acc = EventAccumulator(str(out / "tb"))
    acc.Reload()
    for tag in ("train/policy_loss", "train/grad_norm", "time/fps"):
        assert [e.step for e in acc.Scalars(tag)] == [int(row["step"]) for row in rows], tag
    text = (out / "episodes.csv").read_text()
    assert text.endswith("\n") and len(text.splitlines()) > 10
    assert agents.load(out).env_steps == 1600


PROBABILITY = """
import gc
import sys
from pgrad_app.quiet import silence
silence()
print("GC", gc.isenabled(), gc.get_freeze_count() > 100_000)
print("EXTRAS", "pandas" in sys.modules, "IPython" in sys.modules)
import numpy as np
import pgrad
from gymnasium.spaces import Discrete
head = pgrad.make_head(Discrete(3))
dist = head.distribution(np.zeros((2, 3), np.float32))
print("LOGP", [round(float(x), 4) for x in dist.log_prob(np.array([0, 2]))])
print("EXPERIMENTAL", "tensorflow_probability.python.experimental" in sys.modules)
import tensorflow_probability as tfp
print("ON USE", tfp.experimental.__name__, tfp.experimental.nn.__name__)
"""


DISCRETE_UPDATE = """
import sys
from pgrad_app.quiet import silence
silence()
import agents
agent = agents.make("a2c", "CartPole-v1", seed=0, num_envs=2, n_steps=4)
metrics = [agent.step()["metrics"] for _ in range(2)][-1]
print("FINITE", all(abs(v) < 1e9 for v in metrics.values()))
print("LOADED", "tensorflow_probability.python.distributions" in sys.modules,
      "tf_keras" in sys.modules)
import numpy as np
dist = agent.head.distribution(np.zeros((1, 2), np.float32))
print("ON USE", type(dist).__name__, "tf_keras" in sys.modules)
"""


@pytest.mark.subprocess
def test_a_discrete_update_loads_no_tfp_distributions():
    """A Discrete head's update takes its log-probs and entropies without tfp.distributions,
    whose first use imports the whole package and tf_keras (~0.5 s of CPU at the start of every
    CartPole run); ``head.distribution`` still returns the TFP distribution on use."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-c", DISCRETE_UPDATE], capture_output=True, text=True,
                       timeout=120, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.splitlines() == ["FINITE True", "LOADED False False",
                                     "ON USE Categorical True"]


@pytest.mark.subprocess
def test_the_commands_start_up_without_tfp_experimental_and_with_tensorflow_frozen():
    """silence() imports TFP's top package before TensorFlow, so TFP keeps ``experimental`` lazy
    (~190 modules, ~0.3 s of CPU a command never uses; it still loads in full on first use), and
    imports TensorFlow with the garbage collector paused, then freezes what the import made: the
    collector is on again afterwards."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-c", PROBABILITY], capture_output=True, text=True,
                       timeout=120, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    gc_line, extras, *lines = r.stdout.splitlines()
    assert gc_line == "GC True True"
    assert extras == "EXTRAS True True"  # silence() itself (notebooks, examples): Keras whole
    assert lines[0] == f"LOGP {[round(-float(np.log(3.0)), 4)] * 2}"
    assert lines[1] == "EXPERIMENTAL False"
    assert lines[2] == ("ON USE tensorflow_probability.python.experimental "
                        "tensorflow_probability.python.experimental.nn")


COMMAND_EXTRAS = """
import sys
from pgrad_app.cli import entry
code = entry.run("evaluate", ["/nonexistent/run-dir", "--episodes", "1"])
from keras.src.trainers.data_adapters import array_slicing
print("CODE", code, "TF", "tensorflow" in sys.modules, "SKIPPED", "pandas" not in sys.modules,
      "IPython" not in sys.modules, array_slicing.pandas is None)
import pandas
print("LATER", pandas.DataFrame({"a": [1, 2]}).shape)
"""


@pytest.mark.subprocess
def test_a_command_imports_tensorflow_without_kerass_pandas_and_ipython_which_still_import():
    """A command's process (entry.run) imports TensorFlow with pandas and IPython unimportable,
    so Keras records them as absent (~390 modules, ~0.2-0.3 s of CPU less); afterwards
    ``import pandas`` works as usual, for a user's env module or transform."""
    pytest.importorskip("pandas")
    pytest.importorskip("IPython")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-c", COMMAND_EXTRAS], capture_output=True, text=True,
                       timeout=120, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.splitlines() == ["CODE 2 TF True SKIPPED True True True", "LATER (2, 1)"]
    assert "not a directory" in r.stderr  # the command itself ran (and answered in one line)
