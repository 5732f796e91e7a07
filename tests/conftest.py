"""Shared test set-up: quiet TensorFlow first (as the scripts do), small-policy fixtures."""

import os

if os.environ.get("PYTEST_XDIST_WORKER"):
    # One thread per pytest-xdist worker (make test-quick runs one per core): TensorFlow's
    # default pools, one thread per core in every worker, oversubscribe the cores and spin.
    for _var in ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS", "OMP_NUM_THREADS"):
        os.environ.setdefault(_var, "1")

import pytest  # noqa: E402,I001

from pgrad_app.quiet import silence  # noqa: E402

silence()  # as the commands do, before TensorFlow is imported

# The names of policies.SPACES. policies imports TensorFlow, so it is imported in the fixtures:
# pytest-xdist's controller process loads this file too and never runs a test.
SPACE_NAMES = ("categorical", "gaussian", "multibinary", "multidiscrete")


def _small_policy(name):
    from policies import SPACES, SmallPolicy

    assert SPACE_NAMES == tuple(sorted(SPACES)), "update SPACE_NAMES to policies.SPACES"
    return SmallPolicy(SPACES[name])


@pytest.fixture(params=SPACE_NAMES)
def policy(request):
    return _small_policy(request.param)


@pytest.fixture
def categorical():
    return _small_policy("categorical")


@pytest.fixture
def gaussian():
    return _small_policy("gaussian")


@pytest.fixture
def physics_calls(monkeypatch):
    """``{"n": calls}`` of the native CartPole's physics (pgrad/rl/envs/native.py), counted."""
    from pgrad.rl.envs import native

    calls = {"n": 0}
    physics = native._physics

    def counted(state, a):
        calls["n"] += 1
        return physics(state, a)

    monkeypatch.setattr(native, "_physics", counted)
    return calls
