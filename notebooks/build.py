"""Build the stored notebooks (with outputs) from their jupytext sources.

The source of every example notebook is the percent-format script ``notebooks/NN_name.py``
(jupytext, https://jupytext.readthedocs.io): edit it with any editor, or open it in Jupyter
with jupytext installed (``notebooks/jupytext.toml`` pairs it with the ``.ipynb``). The
``.ipynb`` next to it is what a reader sees, so it is stored *with* its outputs; rebuild it
after changing a source or the library::

    python notebooks/build.py                 # every notebook
    python notebooks/build.py 02_mtz2019_figure1.py   # some of them
    python notebooks/build.py --execute-only          # run the sources, write nothing

Each source is read with jupytext, executed top to bottom with nbclient in a fresh
``python3`` kernel (working directory ``notebooks/``, the jaxrdp of this checkout first on
``PYTHONPATH``, matplotlib's inline backend so figures become PNG outputs) and written as
``.ipynb`` with stable cell ids and no timing metadata, so a rebuild only changes what the
cells print. A cell that raises (a failed ``assert`` included) stops the build with an error.
``tests/test_notebooks.py`` checks that every stored notebook matches its source and was
executed, and re-executes every source.
"""

from __future__ import annotations

import os
import pathlib
import sys

import jupytext
import nbclient
import nbformat

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
CELL_TIMEOUT_S = 600
KERNELSPEC = {"display_name": "Python 3", "language": "python", "name": "python3"}


def sources() -> list[pathlib.Path]:
    """The notebook sources, ``notebooks/NN_*.py``, in order."""
    return sorted(p for p in HERE.glob("[0-9][0-9]_*.py"))


def read_source(path: pathlib.Path) -> nbformat.NotebookNode:
    """The notebook of a jupytext source, without outputs, with stable cell ids."""
    nb = jupytext.read(path)
    nb.metadata = {"kernelspec": dict(KERNELSPEC), "language_info": {"name": "python"}}
    for i, cell in enumerate(nb.cells):
        cell.id = f"cell-{i:02d}"
        cell.metadata = {}
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    return nb


def kernel_env(inline_figures: bool = True) -> dict[str, str]:
    """Environment for the kernel: this checkout's jaxrdp first on ``PYTHONPATH``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    if inline_figures:
        env.pop("MPLBACKEND", None)  # ipykernel's inline backend turns figures into PNG outputs
    else:
        env["MPLBACKEND"] = "Agg"
    return env


def execute(nb: nbformat.NotebookNode, inline_figures: bool = True) -> nbformat.NotebookNode:
    """Run every cell of ``nb`` in place (raises ``CellExecutionError`` on the first error)."""
    saved = dict(os.environ)
    env = kernel_env(inline_figures)  # (read before the environment is cleared)
    os.environ.clear()
    os.environ.update(env)  # the kernel inherits this process's environment
    try:
        nbclient.NotebookClient(
            nb,
            kernel_name="python3",
            timeout=CELL_TIMEOUT_S,
            record_timing=False,
            resources={"metadata": {"path": str(HERE)}},
        ).execute()
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return nb


def build(path: pathlib.Path) -> pathlib.Path:
    """Execute one source and write its ``.ipynb`` with outputs; returns the written path."""
    nb = execute(read_source(path))
    nbformat.validate(nb)
    target = path.with_suffix(".ipynb")
    nbformat.write(nb, target)
    return target


def main(argv: list[str]) -> None:
    check = "--execute-only" in argv  # run the sources (figures to Agg), write nothing
    names = [a for a in argv if a != "--execute-only"]
    paths = [HERE / a for a in names] if names else sources()
    for path in paths:
        if check:
            execute(read_source(path), inline_figures=False)
            print(f"executed {path.relative_to(ROOT)}", flush=True)
        else:
            print(f"building {build(path).relative_to(ROOT)}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
