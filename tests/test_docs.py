"""Every public name has a docstring; functions document their arguments and results."""

import ast
import inspect

import pytest

import jaxrdp

PUBLIC_MODULES = [
    "accountant", "bounds", "conversions", "kernels", "profile", "zcdp", "sweep", "cli", "wor"
]


def _public_names():
    names = [("jaxrdp", n) for n in jaxrdp.__all__]
    for mod_name in PUBLIC_MODULES:
        module = getattr(jaxrdp, mod_name, None) or __import__(f"jaxrdp.{mod_name}", fromlist=["x"])
        assert hasattr(module, "__all__"), f"jaxrdp.{mod_name} has no __all__"
        names += [(f"jaxrdp.{mod_name}", n) for n in module.__all__]
    return names


@pytest.mark.parametrize("where, name", _public_names())
def test_public_name_is_documented(where, name):
    module = __import__(where, fromlist=["x"])
    obj = getattr(module, name)
    if inspect.ismodule(obj) or inspect.isclass(obj) or callable(obj):
        doc = inspect.getdoc(obj)
        assert doc and len(doc) > 40, f"{where}.{name} lacks a docstring"
        if inspect.isfunction(obj) and inspect.signature(obj).parameters:
            assert "Args:" in doc or "Arguments:" in doc, f"{where}.{name}: no Args section"
            assert "Returns:" in doc or "Yields:" in doc or name == "main", (
                f"{where}.{name}: no Returns section"
            )
    else:  # a constant: documented by a "#:" comment or an attribute docstring
        assert _constant_is_documented(name), f"{where}.{name} is undocumented"


def _constant_is_documented(name):
    for mod_name in PUBLIC_MODULES:
        module = __import__(f"jaxrdp.{mod_name}", fromlist=["x"])
        if name not in getattr(module, "__all__", []):
            continue
        source = inspect.getsource(module)
        lines = source.splitlines()
        tree = ast.parse(source)
        body = tree.body
        for i, node in enumerate(body):
            targets = getattr(node, "targets", None) or (
                [node.target] if isinstance(node, ast.AnnAssign) else []
            )
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                before = lines[node.lineno - 2].strip() if node.lineno >= 2 else ""
                after = body[i + 1] if i + 1 < len(body) else None
                has_docstring = (
                    isinstance(after, ast.Expr)
                    and isinstance(after.value, ast.Constant)
                    and isinstance(after.value.value, str)
                )
                return before.startswith("#:") or has_docstring
    return False
