"""Shared test configuration.

Tests leave JAX's global configuration alone (jaxrdp must work without x64 switched on);
float64 work happens inside ``jax.enable_x64(True)`` scopes or through jaxrdp's host-level
API, which opens such a scope itself.
"""

import os
import sys

import pytest
from hypothesis import settings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

settings.register_profile("jaxrdp", deadline=None, max_examples=40, derandomize=True)
settings.load_profile("jaxrdp")

DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")


@pytest.fixture(scope="session")
def data_dir():
    return DATA_DIR
