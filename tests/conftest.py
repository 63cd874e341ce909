"""Shared test configuration.

Tests leave JAX's global configuration alone (jaxrdp must work without x64 switched on);
float64 work happens inside ``jax.enable_x64(True)`` scopes or through jaxrdp's host-level
API, which opens such a scope itself.
"""

import gc
import os
import shutil
import sys
import tempfile

import jax
import pytest
from hypothesis import settings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# In-process calls of the command line (cli.main) would switch JAX's persistent compilation
# cache on for the rest of the session, writing every later test's programs into the user's
# cache directory (and JAX 0.10's cache writer has crashed the process on one of them). The
# cache itself is tested in subprocesses (tests/test_cli.py), which drop this variable.
os.environ.setdefault("JAXRDP_NO_COMPILATION_CACHE", "1")

#: XLA's CPU backend compiles the test processes' programs without its optimisations (the
#: notebooks' kernels inherit the environment). The suite is compile-bound, and level 0
#: compiles the profile's ε program in 4.8 s against 6.9 s; on a 2 vCPU CPU test_kernels.py
#: took 356 s against 609 s, test_profile.py's quick tests 150 s against 193 s, the whole
#: suite 1 734 s against 2 115 s. Values may differ in the last bits, and a lane's path with
#: them; tests/test_xla_optimisation.py runs reference checks at the default level.
#: ``JAXRDP_TEST_XLA_DEFAULT=1`` (or an optimisation level already in ``XLA_FLAGS``) keeps
#: the default.
XLA_FAST_COMPILE_FLAG = "--xla_backend_optimization_level=0"
XLA_DEFAULT_VARIABLE = "JAXRDP_TEST_XLA_DEFAULT"


def _compile_without_backend_optimisation():
    """Adds :data:`XLA_FAST_COMPILE_FLAG` to ``XLA_FLAGS`` (read when JAX's backend starts,
    after this module is imported: no test has run a program yet)."""
    flags = os.environ.get("XLA_FLAGS", "")
    if os.environ.get(XLA_DEFAULT_VARIABLE) or "xla_backend_optimization_level" in flags:
        return
    os.environ["XLA_FLAGS"] = f"{flags} {XLA_FAST_COMPILE_FLAG}".strip()


_compile_without_backend_optimisation()

#: On a GPU each test process would take 75% of the device's memory when its backend starts
#: (JAX's default): the workers of a parallel run then ran out of it (six of six
#: tests/test_split_chernoff.py workers on one H200, CUDA_ERROR_OUT_OF_MEMORY). The tests
#: allocate as they go instead; a value the user set is kept. No effect on the CPU.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

settings.register_profile("jaxrdp", deadline=None, max_examples=40, derandomize=True)
settings.load_profile("jaxrdp")

from helpers import DATA_DIR  # noqa: E402  (after the path above)


@pytest.fixture(scope="session")
def data_dir():
    return DATA_DIR


def _memory_mappings():
    """Number of memory mappings of this process (Linux), or None where unknown."""
    try:
        with open("/proc/self/maps") as maps:
            return sum(1 for _ in maps)
    except OSError:
        return None


def _release_past(limit: int, when_unknown: bool) -> None:
    """Drops JAX's compiled programs if this process holds more than ``limit`` mappings."""
    count = _memory_mappings()
    if (when_unknown if count is None else count > limit):
        jax.clear_caches()
        gc.collect()


@pytest.fixture(scope="module", autouse=True)
def _release_compiled_programs():
    """Drops JAX's compiled programs after a test module once they hold many mappings.

    Every XLA:CPU executable keeps its own memory mappings, and the suite compiles a few
    thousand programs: kept for the whole session they pass Linux's default limit of
    65 530 mappings per process (vm.max_map_count), after which the next compilation
    fails inside XLA with a segmentation fault. Clearing only past a third of that limit
    keeps the programs that neighbouring modules share (where the count cannot be read,
    after every module).
    """
    yield
    _release_past(20_000, when_unknown=True)


@pytest.fixture(autouse=True)
def _release_near_the_limit():
    """The same within a module, after any test that leaves the mappings past 40 000: a
    single module can compile enough programs on its own (``test_profile.py``: the
    escalation's steps at several chunk sizes, the refined calibrations) to reach the
    limit, where XLA then aborts the process while compiling."""
    yield
    _release_past(40_000, when_unknown=False)


def _notebook_runs(session):
    """The selected ``test_notebook_executes`` items (tests/test_notebooks.py)."""
    return [item for item in session.items
            if getattr(item, "originalname", None) == "test_notebook_executes"]


#: The run's shared compilation cache: made by the first process (the controller of a
#: parallel run, or the single process), inherited by the workers through the environment.
_CACHE_VARIABLE = "JAXRDP_TEST_COMPILATION_CACHE"
#: programs that compiled faster than this are not stored (the many tiny ones)
_CACHE_MIN_COMPILE_SECONDS = 0.5


def pytest_configure(config):
    """One persistent compilation cache for the whole run, in a temporary directory.

    The suite's time is mostly XLA compilation (on a 2 vCPU machine, 60% of the workers'
    time), and a parallel run's workers, or one process after the module fixture below has
    dropped its programs, compile some programs again; with the cache they load them
    instead (fresh-clone runs: 2 038 and 2 259 s against 2 618 s without). A cache the user configured
    (``JAX_COMPILATION_CACHE_DIR`` or ``jax_compilation_cache_dir``) is left as it is.
    """
    if os.environ.get("JAX_COMPILATION_CACHE_DIR") or jax.config.jax_compilation_cache_dir:
        return
    directory = os.environ.get(_CACHE_VARIABLE)
    if not directory:
        directory = tempfile.mkdtemp(prefix="jaxrdp-tests-xla-")
        os.environ[_CACHE_VARIABLE] = directory
        config.stash[_cache_owner] = directory
    jax.config.update("jax_compilation_cache_dir", directory)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", _CACHE_MIN_COMPILE_SECONDS)


_cache_owner = pytest.StashKey[str]()


def shared_cache_environment() -> dict[str, str]:
    """This process's environment with the run's compilation cache (:func:`pytest_configure`)
    as JAX's persistent cache, for a subprocess (a notebook's kernel, the console script):
    it then loads the programs that the tests or an earlier subprocess compiled. Without a
    run cache (a cache the user configured), the environment as it is."""
    env = dict(os.environ)
    cache = env.get(_CACHE_VARIABLE)
    if cache and not env.get("JAX_COMPILATION_CACHE_DIR"):
        env["JAX_COMPILATION_CACHE_DIR"] = cache
        env.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", str(_CACHE_MIN_COMPILE_SECONDS))
    return env


def pytest_unconfigure(config):
    """Removes the run's compilation cache (in the process that made it)."""
    directory = config.stash.get(_cache_owner, None)
    if directory:
        os.environ.pop(_CACHE_VARIABLE, None)
        shutil.rmtree(directory, ignore_errors=True)


#: at most this many test workers for ``-n auto`` (each holds its own compiled programs).
_MAX_WORKERS = 4


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config):
    """``-n auto``: one worker per CPU, at most :data:`_MAX_WORKERS`."""
    return max(1, min(os.cpu_count() or 1, _MAX_WORKERS))


#: Test files by their share of a parallel run, longest first (worker seconds in a fresh
#: clone's run with ``--durations=0``, 2 vCPU AMD EPYC, 2026-12-02): a parallel run hands
#: out whole files in this order (``--no-loadscope-reorder`` in ``pyproject.toml``), so the
#: longest start first and the short ones fill the end. By xdist's default order, most
#: tests first, the longest files started last (once, the run's last 4% of tests took 7
#: minutes). Files not listed follow, in collection order.
_LONGEST_FIRST = (
    "test_profile.py",  # 466 s
    "test_kernels.py",  # 464
    "test_notebooks.py",  # 284
    "test_profile_calibration.py",  # 210
    "test_profile_properties.py",  # 178
    "test_sweep.py",  # 127
    "test_conversions.py",  # 118
    "test_profile_two_steps.py",  # 115
    "test_cli.py",  # 94
    "test_xla_optimisation.py",  # 88
    "test_split_chernoff.py",  # 86
    "test_wor.py",  # 81
    "test_domain_edges.py",  # 69
    "test_precision.py",  # 46
    "test_accountant.py",  # 39
    "test_profile_reference.py",  # 28
)


def pytest_collection_modifyitems(session, config, items):
    """Orders the tests file by file as :data:`_LONGEST_FIRST` (tests of a file keep theirs)."""
    rank = {name: i for i, name in enumerate(_LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


def pytest_collection_finish(session):
    """Starts the selected notebook executions in the background (in a single process: a
    parallel run's workers each collect every test, so there each notebook test runs its
    own notebook, in whichever worker it lands)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    runs = _notebook_runs(session)
    if runs:
        runs[0].module.start_in_background([item.callspec.params["source"] for item in runs])


def pytest_sessionfinish(session):
    """Cancels the notebook executions not started yet (after -x or an interrupt)."""
    runs = _notebook_runs(session)
    if runs:
        runs[0].module.stop_background()
