"""The example notebooks: stored up to date with their sources, with outputs, and executable.

Every notebook's source is the jupytext percent-format script ``notebooks/NN_name.py``; the
``.ipynb`` next to it is built from it with its outputs (figures) by ``python notebooks/build.py``.
These tests check that

* each stored ``.ipynb`` has exactly the code and markdown cells of its source (a stale
  notebook fails: rebuild it),
* each stored ``.ipynb`` was executed top to bottom (every code cell has an execution count,
  in order, no error output) and carries its figures (a cell that draws has a PNG output),
* each source executes without error in a fresh ``python3`` kernel (nbclient; working
  directory ``notebooks/``, ``MPLBACKEND=Agg``, this checkout's jaxrdp first on the path),
  so a failed ``assert`` on the numbers a notebook shows fails the test. In a single-process
  run (``-n 0``) they start in the background as soon as the suite is collected
  (``conftest.py``), one at a time; in the default parallel run each test runs its own.
"""

from __future__ import annotations

import concurrent.futures
import importlib.util
import pathlib
import subprocess
import sys

import pytest

import conftest

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")
pytest.importorskip("matplotlib")
pytest.importorskip("jupytext")

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOK_DIR = ROOT / "notebooks"


def _load_build():
    spec = importlib.util.spec_from_file_location("notebook_build", NOTEBOOK_DIR / "build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


build = _load_build()
SOURCES = build.sources()
DRAWING_CALLS = ("plt.", "matplotlib", ".plot(", ".imshow(", ".contour")


def _cells(nb):
    return [(cell.cell_type, cell.source) for cell in nb.cells]


def test_notebooks_present():
    assert len(SOURCES) >= 6, [p.name for p in SOURCES]
    stored = sorted(p.stem for p in NOTEBOOK_DIR.glob("[0-9][0-9]_*.ipynb"))
    assert stored == [p.stem for p in SOURCES], "every notebook needs a source and a built .ipynb"


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_stored_notebook_matches_source(source):
    stored = nbformat.read(source.with_suffix(".ipynb"), as_version=4)
    expected = build.read_source(source)
    assert _cells(stored) == _cells(expected), (
        f"{source.with_suffix('.ipynb').name} is out of date with {source.name}: "
        f"run `python notebooks/build.py {source.name}`"
    )


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_stored_notebook_has_outputs(source):
    nb = nbformat.read(source.with_suffix(".ipynb"), as_version=4)
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    assert [cell.execution_count for cell in code] == list(range(1, len(code) + 1)), (
        f"{source.stem}.ipynb was not executed top to bottom: run `python notebooks/build.py`"
    )
    figures = 0
    for cell in code:
        kinds = [out.output_type for out in cell.outputs]
        assert "error" not in kinds, f"{source.stem}: cell {cell.id} stored an error"
        pngs = sum("image/png" in out.get("data", {}) for out in cell.outputs)
        figures += pngs
        if "plt.show()" in cell.source or "plt.subplots(" in cell.source:
            assert pngs, f"{source.stem}: cell {cell.id} draws but stores no figure"
    if any(call in cell.source for cell in code for call in DRAWING_CALLS):
        assert figures, f"{source.stem} draws but stores no figure"


def _execute(source) -> subprocess.CompletedProcess:
    # the run's compilation cache (conftest.py): the kernels load the programs that the tests
    # or an earlier notebook compiled (notebook 07 took 70 s with an empty cache, 29 s with
    # its own programs cached)
    return subprocess.run([sys.executable, str(NOTEBOOK_DIR / "build.py"), "--execute-only", source.name],
                          capture_output=True, text=True, env=conftest.shared_cache_environment())


_BACKGROUND: dict[str, concurrent.futures.Future] = {}
_POOL: list[concurrent.futures.ThreadPoolExecutor] = []


def start_in_background(sources) -> None:
    """Starts executing ``sources``, one kernel at a time, beside the rest of the suite.

    Called by ``conftest.py`` once the tests are collected: each notebook runs in its own
    process, so the minutes they take overlap with the other test modules.
    """
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    _POOL.append(pool)
    for source in sources:
        _BACKGROUND[source.stem] = pool.submit(_execute, source)


def stop_background() -> None:
    for pool in _POOL:
        pool.shutdown(wait=False, cancel_futures=True)


@pytest.mark.slow
@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_notebook_executes(source):
    # A failing cell (a failed assert included) raises CellExecutionError naming it.
    future = _BACKGROUND.get(source.stem)
    run = future.result() if future is not None and not future.cancelled() else _execute(source)
    assert run.returncode == 0, f"{source.name} failed:\n{run.stdout[-2000:]}\n{run.stderr[-8000:]}"
