"""MkDocs hooks: the notebooks and the API reference come from the repository, not from copies.

* ``notebooks/*.ipynb`` (stored with their outputs by ``python notebooks/build.py``) are added
  to the site under ``notebooks/`` before mkdocs-jupyter renders them (never executed here).
* One API page per public module, ``api/<module>.md`` holding ``::: jaxrdp.<module>``, is
  generated for every ``jaxrdp/<module>.py`` that defines ``__all__`` (mkdocstrings renders
  exactly the names in ``__all__``), plus ``api/index.md`` listing the names re-exported by
  ``jaxrdp`` itself, each linked to its documentation. A new public module gets its page
  without editing anything here.
"""

from __future__ import annotations

import ast
import pathlib

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File, Files

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "jaxrdp"
NOTEBOOKS = ROOT / "notebooks"


def _module_all(path: pathlib.Path) -> list[str] | None:
    """The literal ``__all__`` of a module's source, or None when it has none."""
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        targets = node.targets if isinstance(node, ast.Assign) else []
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            return [ast.literal_eval(elt) for elt in node.value.elts]
    return None


def public_modules() -> dict[str, list[str]]:
    """``{module: __all__}`` for every public module of the package, in name order."""
    modules = {}
    for path in sorted(PACKAGE.glob("*.py")):
        if path.stem.startswith("_"):
            continue
        names = _module_all(path)
        if names is not None:
            modules[path.stem] = names
    return modules


def _api_index(modules: dict[str, list[str]]) -> str:
    top = _module_all(PACKAGE / "__init__.py") or []
    lines = [
        "# API reference",
        "",
        "::: jaxrdp",
        "    options:",
        "      members: false",
        "",
        "## Names exported by `jaxrdp`",
        "",
        "| name | documented in |",
        "|---|---|",
    ]
    for name in top:
        if name in modules:
            lines.append(f"| `jaxrdp.{name}` | [`jaxrdp.{name}`](jaxrdp.{name}.md) |")
            continue
        home = next((m for m, names in modules.items() if name in names), None)
        if home is None:
            raise ValueError(f"jaxrdp.{name} is in jaxrdp.__all__ but in no public module's __all__")
        lines.append(f"| `jaxrdp.{name}` | [`jaxrdp.{home}.{name}`][jaxrdp.{home}.{name}] |")
    lines += ["", "## Modules", ""]
    lines += [f"- [`jaxrdp.{m}`](jaxrdp.{m}.md)" for m in modules]
    return "\n".join(lines) + "\n"


def on_config(config):
    modules = public_modules()
    api = ["api/index.md"] + [{f"jaxrdp.{m}": f"api/jaxrdp.{m}.md"} for m in modules]
    for i, entry in enumerate(config.nav):
        if isinstance(entry, dict) and "API reference" in entry:
            config.nav[i] = {"API reference": api}
    return config


@event_priority(100)  # before mkdocs-jupyter turns .ipynb files into pages
def on_files(files: Files, config) -> Files:
    for path in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")):
        files.append(
            File(
                f"notebooks/{path.name}",
                src_dir=str(ROOT),
                dest_dir=config.site_dir,
                use_directory_urls=config.use_directory_urls,
            )
        )
    check_docstrings()
    modules = public_modules()
    files.append(File.generated(config, "api/index.md", content=_api_index(modules)))
    for module in modules:
        files.append(
            File.generated(config, f"api/jaxrdp.{module}.md", content=f"::: jaxrdp.{module}\n")
        )
    return files


def check_docstrings() -> None:
    """Warn (an error under ``--strict``) for every public name without a docstring."""
    import logging

    import griffe

    log = logging.getLogger("mkdocs.hooks.jaxrdp")
    extensions = griffe.load_extensions(f"{ROOT / 'docs' / 'griffe_comment_docs.py'}:CommentDocstrings")
    package = griffe.load("jaxrdp", search_paths=[str(ROOT)], extensions=extensions, resolve_aliases=True)
    for module, names in public_modules().items():
        for name in names:
            obj = package[f"{module}.{name}"]
            if obj.is_module:
                continue
            if obj.docstring is None or not obj.docstring.value.strip():
                log.warning(f"jaxrdp.{module}.{name} has no docstring")
