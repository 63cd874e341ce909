"""Traced programs kept on disk for the command line, so that a later process skips tracing.

A ``jaxrdp`` command evaluates one or two programs once and exits. With JAX's persistent
compilation cache warm, most of what is left of its time is *tracing and lowering* those
programs (Python work that the compilation cache cannot skip, since its key is the lowered
module): about 0.45 s for the profile's ε program, against 0.03 s to lower the same program
read back as a :class:`jax.export.Exported`. This module stores each program, exported, in
a directory the command line chooses (:func:`enable`), keyed by everything the program
depends on: the program's name and static arguments, the argument shapes and dtypes, the
versions of jax and jaxlib, the backend, the x64 flag and a hash of jaxrdp's own sources.

Off unless :func:`enable` was called (only :mod:`jaxrdp.cli` does): library calls are
untouched. Any failure to read, load or write a stored program falls back to tracing the
program as usual, so the cache can only change how long a command takes, never its values
(beyond the last bit where the compiler options differ; they do not here: the stored program
is compiled with the caller's options). Stored programs are Python pickles in the user's own
cache directory, trusted as :mod:`jax`'s own cache entries there are.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import pathlib
import pickle
import tempfile

import jax
import numpy as np

__all__ = ["call", "disable", "enable"]

_directory: pathlib.Path | None = None
_programs: dict = {}  # path → the stored program, compiled, for later calls in this process


#: XLA options for a program that a process evaluates once: on CPU, compiled without the
#: backend's optimisations it compiles in about 60% of the time (the profile's ε program:
#: 1.6 s instead of 2.6 s) and runs about 2× longer (tens of milliseconds for one run);
#: values differ in the last bits at most (the optimiser rewrites, e.g., divisions by
#: constants), within every bound the programs state.
ONE_SHOT_OPTIONS = {"xla_backend_optimization_level": 0}


def one_shot_options():
    """:data:`ONE_SHOT_OPTIONS` on CPU, ``None`` (the defaults) on accelerators."""
    return ONE_SHOT_OPTIONS if jax.default_backend() == "cpu" else None


def enable(directory) -> None:
    """Store and read programs under ``directory`` (created when missing)."""
    global _directory
    _directory = pathlib.Path(directory)


def disable() -> None:
    global _directory
    _directory = None
    _programs.clear()


@functools.lru_cache(maxsize=1)
def _sources_digest() -> str:
    """Hash of jaxrdp's own modules: a stored program is stale once any of them changes."""
    digest = hashlib.sha256()
    for path in sorted(pathlib.Path(__file__).parent.glob("*.py")):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _key(name: str, static: tuple, args) -> str:
    import jaxlib

    avals = tuple((np.shape(a), np.result_type(a).str) for a in args)
    parts = (name, repr(static), repr(avals), jax.__version__, jaxlib.__version__,
             jax.default_backend(), bool(jax.config.jax_enable_x64), _sources_digest())
    return hashlib.sha256(repr(parts).encode()).hexdigest()


def _load(path: pathlib.Path):
    try:
        exported = pickle.loads(path.read_bytes())
    except Exception:  # missing, truncated, from another jax: trace anew
        return None
    return exported if isinstance(exported, jax.export.Exported) else None


def _store(path: pathlib.Path, exported) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        blob = pickle.dumps(dataclasses.replace(exported, _get_vjp=None))
        with tempfile.NamedTemporaryFile(dir=path.parent, delete=False) as fh:
            fh.write(blob)
        os.replace(fh.name, path)  # atomic: a concurrent reader sees all or nothing
    except Exception:
        pass


@functools.lru_cache(maxsize=16)
def _jitted(fn, n_args: int, n_static: int, options: tuple):
    return jax.jit(fn, static_argnums=tuple(range(n_args, n_args + n_static)),
                   compiler_options=dict(options))


def _direct(fn, args, static, compiler_options):
    """``fn(*args, *static)`` traced as usual, compiled with ``compiler_options`` if any."""
    if compiler_options is None:
        return fn(*args, *static)
    options = tuple(sorted(compiler_options.items()))
    return _jitted(fn, len(args), len(static), options)(*args, *static)


def call(name: str, fn, args, static: tuple = (), compiler_options=None):
    """``fn(*args, *static)``, through a stored program when :func:`enable` was called.

    Args:
      name: the program's name (part of the key).
      fn: a function of the array arguments followed by the static ones, traceable with
        the static ones fixed (it may be jitted, without compiler options of its own).
      args: the array arguments (NumPy or JAX, concrete).
      static: the static arguments, ints, floats, strings, bools or ``None`` (keyed by
        ``repr``).
      compiler_options: XLA options for compiling the program (``jax.jit``'s); while the
        cache is on, :func:`one_shot_options` when not given (a process that stores its
        programs runs each once).

    Returns:
      What ``fn`` returns.
    """
    if _directory is None:
        return _direct(fn, args, static, compiler_options)
    if compiler_options is None:
        compiler_options = one_shot_options()
    path = _directory / (_key(name, static, args) + ".pkl")
    program = _programs.get(path)
    if program is None:
        exported = _load(path)
        if exported is None:
            try:
                exported = jax.export.export(jax.jit(lambda *a: fn(*a, *static)))(*args)
            except Exception:  # a program export cannot represent: run it as usual
                return _direct(fn, args, static, compiler_options)
            _store(path, exported)
        program = _programs[path] = jax.jit(exported.call, compiler_options=compiler_options)
    return program(*args)
