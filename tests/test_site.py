"""The documentation site builds in strict mode, offline, with every public name and figure.

``python -m mkdocs build --strict`` (the command of the README) fails on any warning: a broken
cross-reference or link, a docstring griffe cannot parse, a page missing from the navigation,
or a public name without a docstring (``docs/hooks.py``). The notebooks are rendered from their
stored outputs, never executed, and no network is needed.
"""

from __future__ import annotations

import html
import importlib.util
import os
import pathlib
import re
import subprocess
import sys

import pytest

pytest.importorskip("mkdocs")
pytest.importorskip("material")
pytest.importorskip("mkdocstrings_handlers.python")
pytest.importorskip("mkdocs_jupyter")

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _hooks():
    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "docs" / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return out


def test_api_reference_has_every_public_name(site):
    modules = _hooks().public_modules()
    assert {"kernels", "conversions", "accountant", "sweep", "wor", "zcdp", "bounds"} <= set(modules)
    for module, names in modules.items():
        page = (site / "api" / f"jaxrdp.{module}" / "index.html").read_text(encoding="utf-8")
        for name in names:
            assert f'id="jaxrdp.{module}.{name}"' in page, f"jaxrdp.{module}.{name} not in the API reference"


def test_notebook_pages_show_their_figures(site):
    sources = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.py"))
    for source in sources:
        page = (site / "notebooks" / source.stem / "index.html").read_text(encoding="utf-8")
        assert re.search(r'<img[^>]+src="data:image/png;base64,', page), f"{source.stem}: no figure"
        assert "Traceback" not in html.unescape(page), f"{source.stem}: an error is rendered"


def test_landing_page_has_commands_and_comparison(site):
    page = html.unescape(re.sub(r"<[^>]+>", "", (site / "index.html").read_text(encoding="utf-8")))
    assert 'python -m pip install -q -e ".[test]" && python -m pytest -q' in page
    assert "jaxrdp epsilon --dataset-size 60000" in page
    assert "dp_accounting" in page and "Opacus" in page
