"""Slow reference values, computed once and kept in ``tests/data/stored.json``.

Some references are mpmath quadratures that take seconds each (complex moments on 200
pieces, root searches of the exact profile) or dp_accounting's calibrations: recomputing
them on every run made them a large part of the suite's time. A function decorated with
:func:`stored` returns the kept value of a call when there is one and computes it
otherwise, so the tests assert against the same independent references as before, read
from disk.

A value is kept under the function's name, a hash of its source text and its arguments,
so that editing the reference function or a test's inputs never meets a stale value: such
a call is computed again (slowly), and ``python tests/make_stored.py`` refreshes the file.
Values are decimal strings of :data:`DIGITS` significant digits, read back as mpmath
numbers at that precision. ``tests/test_stored.py`` recomputes a sample of the kept values
of every function on every run.
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import importlib
import inspect
import json
import os
import time

import mpmath as mp

from helpers import DATA_DIR

__all__ = ["DIGITS", "PATH", "RECORD_VARIABLE", "kept_functions", "prune", "recompute_sample",
           "stored"]

PATH = os.path.join(DATA_DIR, "stored.json")
#: significant digits kept (the references are computed at 30 to 60 digits)
DIGITS = 40
#: set to 1 (``tests/make_stored.py`` does) to add computed values to :data:`PATH` at exit
RECORD_VARIABLE = "JAXRDP_TEST_RECORD_STORED"

_functions: dict[str, object] = {}
_recorded: dict[str, dict] = {}


def _load() -> dict:
    try:
        with open(PATH, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        return {}


def _save(table: dict) -> None:
    with open(PATH, "w", encoding="utf-8") as f:
        json.dump(table, f, indent=1, sort_keys=True)
        f.write("\n")


_table = _load()


def _canonical(value):
    """A call's argument as JSON-ready data, exactly (floats round-trip through ``repr``)."""
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    if isinstance(value, mp.mpc):
        return {"mpc": [_canonical(value.real), _canonical(value.imag)]}
    if isinstance(value, mp.mpf):
        exact = mp.mpf(float(value)) == value
        return {"mpf": float(value) if exact else mp.nstr(value, 60)}
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        return value.item()  # NumPy scalars
    return value


def _arguments(data):
    """Inverse of :func:`_canonical` (lists come back as lists)."""
    if isinstance(data, list):
        return [_arguments(v) for v in data]
    if isinstance(data, dict) and "mpc" in data:
        return mp.mpc(*(_arguments(v) for v in data["mpc"]))
    if isinstance(data, dict) and "mpf" in data:
        return mp.mpf(data["mpf"])
    return data


def _encode(value) -> str:
    with mp.workdps(DIGITS + 5):  # (mp.mpf(·) rounds to the working precision)
        return _encode_at_precision(value)


def _encode_at_precision(value) -> str:
    if isinstance(value, tuple):
        return "t:" + json.dumps([_encode_at_precision(v) for v in value])
    if isinstance(value, (complex, mp.mpc)):
        tag = "c:" if isinstance(value, mp.mpc) else "C:"
        value = mp.mpc(value)
        return tag + mp.nstr(value.real, DIGITS) + "|" + mp.nstr(value.imag, DIGITS)
    if isinstance(value, bool):
        return "b:" + str(int(value))
    tag = "f:" if isinstance(value, mp.mpf) else "F:"
    return tag + mp.nstr(mp.mpf(value), DIGITS)


def _decode(text: str):
    kind, body = text[:2], text[2:]
    if kind == "t:":
        return tuple(_decode(v) for v in json.loads(body))
    if kind == "b:":
        return bool(int(body))
    with mp.workdps(DIGITS + 5):
        if kind in ("c:", "C:"):
            re, im = body.split("|")
            value = mp.mpc(mp.mpf(re), mp.mpf(im))
            return value if kind == "c:" else complex(value)
        value = mp.mpf(body)
        return value if kind == "f:" else float(value)


def stored(fn=None, *, depends=(), tag="", hints=()):
    """Decorator: ``fn(*args, **hints)`` read from :data:`PATH` if kept.

    ``fn`` returns a real or complex number (Python or mpmath) or a tuple of them; they
    come back as the same types (mpmath numbers with :data:`DIGITS` digits) whether kept or
    computed, so a test sees the same values either way. Arguments, positional and keyword,
    key the value, except the keywords named in ``hints``: hints that do not change the
    value (a root search's starting point), kept beside it for :func:`recompute_sample`
    but not part of the key. ``depends``: functions (or modules) ``fn``
    calls whose source also keys its values; ``tag``, text that does too (the version of a
    library the function calls, such as dp_accounting). Like the mpmath references, a call
    leaves ``mp.mp.dps`` at least :data:`DIGITS`, for the test's own arithmetic on the value.
    """
    if fn is None:
        return functools.partial(stored, depends=depends, tag=tag, hints=hints)
    source = "".join(inspect.getsource(f) for f in (fn, *depends)) + tag
    name = f"{fn.__module__.rsplit('.', 1)[-1]}.{fn.__qualname__}"
    prefix = f"{name}#{hashlib.sha256(source.encode()).hexdigest()[:12]}"
    _functions[prefix] = fn

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        given = {k: v for k, v in kwargs.items() if k in hints}
        keyed = {k: v for k, v in sorted(kwargs.items()) if k not in hints}
        key = prefix + json.dumps(_canonical(list(args)))
        if keyed:
            key += json.dumps({k: _canonical(v) for k, v in keyed.items()})
        entry = _table.get(key)
        if entry is None:
            start = time.perf_counter()
            value = fn(*args, **kwargs)
            entry = {"value": _encode(value), "seconds": round(time.perf_counter() - start, 3)}
            if given:
                entry["hints"] = {k: _canonical(v) for k, v in given.items()}
            _table[key] = _recorded[key] = entry
        mp.mp.dps = max(mp.mp.dps, DIGITS)
        return _decode(entry["value"])

    wrapper.uncached = fn
    return wrapper


def kept_functions() -> dict[str, object]:
    """``name#hash`` → the reference function (undecorated), for every function with kept
    values whose source is unchanged (imported by its module's name; ``tests/`` is on the
    path). Values of an edited function are stale and not listed."""
    found = {}
    for prefix in sorted({key.split("[", 1)[0] for key in _table}):
        importlib.import_module(prefix.split(".", 1)[0])  # its decorators register it
        fn = _functions.get(prefix)
        if fn is not None:
            found[prefix] = fn
    return found


def recompute_sample(prefix: str, count: int):
    """``(key, kept, recomputed)`` for the ``count`` kept values of the function whose keys
    start with ``prefix`` (``name#hash``) that took the least time to compute, recomputed
    from their stored arguments and hints."""
    fn = _functions[prefix]
    keys = sorted((k for k in _table if k.startswith(prefix + "[")),
                  key=lambda k: (_table[k]["seconds"], k))
    out = []
    for key in keys[:count]:
        text = key[len(prefix):]
        args, end = json.JSONDecoder().raw_decode(text)
        kwargs = json.loads(text[end:]) if text[end:] else {}
        kwargs.update(_table[key].get("hints", {}))
        kwargs = {k: _arguments(v) for k, v in kwargs.items()}
        out.append((key, _decode(_table[key]["value"]),
                    _decode(_encode(fn(*_arguments(args), **kwargs)))))
    return out


def prune(modules) -> int:
    """Drops from :data:`PATH` the values of functions that no longer exist in ``modules``
    (test module names) or whose source has changed; returns how many were dropped."""
    for module in modules:
        importlib.import_module(module)
    table = _load()
    kept = {k: v for k, v in table.items() if k.split("[", 1)[0] in _functions}
    _save(kept)
    return len(table) - len(kept)


def _write_recorded():
    if not os.environ.get(RECORD_VARIABLE) or not _recorded:
        return
    _save({**_load(), **_recorded})


atexit.register(_write_recorded)
