"""The one rule for which floating dtype a public function computes in.

* Python and NumPy inputs, and concrete float64 JAX arrays (results of an earlier host-level
  call, which outlive the x64 scope that made them): float64, inside a local
  ``jax.enable_x64(True)`` scope, so the user's global configuration is never changed.
* Otherwise (float32 arrays, or tracers inside a user's transformation): the promoted
  floating dtype of the JAX arguments, at least float32, with nothing switched on (float32
  under a global x64 switch: traced with x64 off, so that NumPy's float64 constants inside
  the float32 kernels cannot promote them; the results are those without x64). Inside a
  transformation without x64 only the tracers' dtypes count: a concrete float64 array
  there (e.g. a host-level result captured by the traced function) is cast down rather
  than opening an x64 scope in the middle of a float32 graph.
"""

from __future__ import annotations

import contextlib
import functools

import jax
import jax.numpy as jnp


_FLOAT64 = jnp.dtype(jnp.float64)


def _under_transformation() -> bool:
    """Whether JAX is tracing (``jit``, ``grad``, ``vmap``, ``scan`` bodies), even when every
    argument of the call is concrete: then operations are staged into the user's graph,
    which must not receive float64 values unless x64 is on. JAX has no public query for
    this; without the internal one (older or newer JAX), only tracer arguments count."""
    try:
        from jax._src import core

        return not core.trace_state_clean()
    except (ImportError, AttributeError):  # pragma: no cover - depends on the JAX version
        return False


def compute_context(*args):
    """``(dtype, context)``: compute in ``dtype`` inside ``with context:``.

    Args:
      *args: the public function's array-like arguments (Python scalars, NumPy arrays,
        JAX arrays or tracers; ``None`` is ignored).

    Returns:
      The floating dtype and a context manager (a local x64 scope or a no-op).
    """
    jax_args = [a for a in args if isinstance(a, (jax.Array, jax.core.Tracer))]
    if not jax_args and not _under_transformation():
        # Host values at the top level (the common single-run call): float64, local scope.
        return _FLOAT64, jax.enable_x64(True)
    traced = _under_transformation() or any(isinstance(a, jax.core.Tracer) for a in jax_args)
    floating = [a.dtype for a in jax_args if jnp.issubdtype(a.dtype, jnp.floating)]
    if traced and not jax.config.jax_enable_x64:
        # Inside a user's transformation without x64 the graph cannot hold float64:
        # compute in the tracers' dtype (concrete float64 arguments are cast down; callers
        # that take RDP values round them upwards, see accountant._rdp_values).
        floating = [
            a.dtype
            for a in jax_args
            if isinstance(a, jax.core.Tracer) and jnp.issubdtype(a.dtype, jnp.floating)
        ]
        return functools.reduce(jnp.promote_types, floating, jnp.dtype(jnp.float32)), (
            contextlib.nullcontext()
        )
    if any(d == jnp.float64 for d in floating) or not (floating or traced):
        return jnp.dtype(jnp.float64), jax.enable_x64(True)
    if floating:
        dtype = functools.reduce(jnp.promote_types, floating, jnp.dtype(jnp.float32))
        return dtype, _scope_of(dtype)
    return jnp.dtype(jnp.result_type(float)), contextlib.nullcontext()


def _scope_of(dtype):
    """No scope, except float32 work under a global x64 switch: there NumPy's float64
    constants would promote the float32 graph, so it is traced with x64 off (float32 results
    identical to those without x64)."""
    if dtype == jnp.float32 and jax.config.jax_enable_x64:
        return jax.enable_x64(False)
    return contextlib.nullcontext()


def call(kernel, *args, **static):
    """``kernel(*args, **static)`` with ``args`` as arrays of the dtype :func:`compute_context`
    picks, inside its context (the one entry of elementwise public functions)."""
    dtype, context = compute_context(*args)
    with context:
        return kernel(*(jnp.asarray(a, dtype) for a in args), **static)
