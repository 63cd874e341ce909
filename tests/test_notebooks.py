"""Execute the example notebooks in ``notebooks/`` end to end.

Each notebook runs in a fresh ``python3`` kernel (nbclient; ipykernel installed in the same
environment provides the kernel, no ``ipykernel install --user`` needed), with the
``notebooks/`` folder as working directory and ``MPLBACKEND=Agg``. A cell that raises,
including a failed ``assert`` on the numbers a notebook shows, fails the test. Outputs are
kept in memory only; the files on disk stay without outputs (checked below).
"""

from __future__ import annotations

import os
import pathlib

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")
pytest.importorskip("matplotlib")

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOK_DIR = ROOT / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
CELL_TIMEOUT_S = 300


def test_notebooks_present():
    assert len(NOTEBOOKS) >= 5, [p.name for p in NOTEBOOKS]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_stored_without_outputs(path):
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert not cell.outputs, f"{path.name}: cell {cell.get('id')} has stored outputs"
            assert cell.execution_count is None, f"{path.name}: cell {cell.get('id')} has a count"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_executes(path, monkeypatch):
    monkeypatch.setenv("MPLBACKEND", "Agg")
    # The kernel imports the jaxrdp of this checkout even when it is not installed.
    pythonpath = os.environ.get("PYTHONPATH")
    monkeypatch.setenv(
        "PYTHONPATH", str(ROOT) if not pythonpath else os.pathsep.join([str(ROOT), pythonpath])
    )
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        nb,
        kernel_name="python3",
        timeout=CELL_TIMEOUT_S,
        resources={"metadata": {"path": str(NOTEBOOK_DIR)}},
    )
    client.execute()  # raises CellExecutionError naming the failing cell
