"""Reference checks at XLA's default optimisation level.

The test processes compile without XLA's backend optimisations (``tests/conftest.py``: the
suite is compile-bound), while users' programs compile with them. Optimisation rewrites
arithmetic (fusions, divisions by constants), so values can differ in the last bits and a
lane's intermediate values can take another path (a NaN in the profile's ε once appeared
under one fusion and not another). These checks run a selection of the suite's reference
tests, against mpmath, closed forms and dp_accounting, in a separate process at the
default level.
"""

import os
import subprocess
import sys

import pytest

import conftest

#: the kernels' float64 paths against 60-digit mpmath and their float32 path against float64
#: and mpmath, the complex moments against mpmath, the profile against the exact Gaussian and
#: dp_accounting's PLD bracket. At the suite's level only, for time (2 vCPU CPU): the
#: single-step closed form's check (18 s of this test's 132, mostly its mpmath root
#: searches) and the float32 shared-orders program's (39 s, nearly all compiling the float32
#: and float64 programs of 170 orders; the elementwise float32 path stands for float32 here)
_REFERENCE_CHECKS = (
    "tests/test_kernels.py::test_elementwise_matches_mpmath_reference",
    "tests/test_kernels.py::test_grid_path_matches_mpmath_reference",
    "tests/test_kernels.py::test_float32_is_sound_and_accurate",
    "tests/test_kernels.py::test_float32_hard_cell_against_mpmath",
    "tests/test_profile.py::test_complex_moments_match_mpmath",
    "tests/test_profile.py::test_epsilon_gaussian_sound_and_tighter_than_rdp",
    "tests/test_profile.py::test_issue_example_bracketed_by_pld",
)


@pytest.mark.slow
def test_reference_checks_pass_at_the_default_optimisation_level():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ)
    flags = env.get("XLA_FLAGS", "").replace(conftest.XLA_FAST_COMPILE_FLAG, "").strip()
    assert "xla_backend_optimization_level" not in flags
    env["XLA_FLAGS"] = flags
    env[conftest.XLA_DEFAULT_VARIABLE] = "1"
    # its own compilation cache: this run's holds programs compiled at level 0
    env.pop(conftest._CACHE_VARIABLE, None)
    env.pop("PYTEST_XDIST_WORKER", None)
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider",
         *_REFERENCE_CHECKS],
        cwd=root, env=env, capture_output=True, text=True, timeout=1800)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert " passed" in run.stdout and "skipped" not in run.stdout, run.stdout[-2000:]
