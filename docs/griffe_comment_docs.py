"""Griffe extension: a module constant documented by ``#:`` comment lines gets them as docstring.

jaxrdp documents its public constants Sphinx-style, with ``#:`` comments on the lines just
above the assignment; griffe only reads string docstrings, so without this the API reference
would show those constants undocumented.
"""

from __future__ import annotations

from typing import Any

import griffe


class CommentDocstrings(griffe.Extension):
    """Turn the ``#:`` comment block above a module-level assignment into its docstring."""

    def on_attribute_instance(self, *, node: Any, attr: griffe.Attribute, agent: Any, **kwargs: Any) -> None:
        if attr.docstring is not None or attr.lineno is None or not attr.parent or not attr.parent.is_module:
            return
        lines = attr.parent.lines
        block = []
        i = attr.lineno - 2  # the line above the assignment, 0-based
        while i >= 0 and lines[i].lstrip().startswith("#:"):
            block.insert(0, lines[i].lstrip()[2:].strip())
            i -= 1
        if block:
            attr.docstring = griffe.Docstring("\n".join(block), lineno=i + 2, parent=attr)
