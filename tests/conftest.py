"""Shared test set-up: quiet TensorFlow first (as the scripts do), small-policy fixtures."""

import pgrad_app.quiet  # noqa: F401,I001  (before TensorFlow is imported)

import pytest
from policies import SPACES, SmallPolicy


@pytest.fixture(params=sorted(SPACES))
def policy(request):
    return SmallPolicy(SPACES[request.param])


@pytest.fixture
def categorical():
    return SmallPolicy(SPACES["categorical"])


@pytest.fixture
def gaussian():
    return SmallPolicy(SPACES["gaussian"])
