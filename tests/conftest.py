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

# In-process calls of the command line (cli.main) would switch JAX's persistent compilation
# cache on for the rest of the session, writing every later test's programs into the user's
# cache directory (and JAX 0.10's cache writer has crashed the process on one of them). The
# cache itself is tested in subprocesses (tests/test_cli.py), which drop this variable.
os.environ.setdefault("JAXRDP_NO_COMPILATION_CACHE", "1")

settings.register_profile("jaxrdp", deadline=None, max_examples=40, derandomize=True)
settings.load_profile("jaxrdp")

DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")


@pytest.fixture(scope="session")
def data_dir():
    return DATA_DIR
