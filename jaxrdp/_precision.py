"""The one rule for which floating dtype a public function computes in.

* Python and NumPy inputs, and concrete float64 JAX arrays (results of an earlier host-level
  call, which outlive the x64 scope that made them): float64, inside a local
  ``jax.enable_x64(True)`` scope, so the user's global configuration is never changed.
* Otherwise (float32 arrays, or tracers inside a user's transformation): the promoted
  floating dtype of the JAX arguments, at least float32, with nothing switched on.
"""

from __future__ import annotations

import contextlib
import functools

import jax
import jax.numpy as jnp


def compute_context(*args):
    """``(dtype, context)``: compute in ``dtype`` inside ``with context:``.

    Args:
      *args: the public function's array-like arguments (Python scalars, NumPy arrays,
        JAX arrays or tracers; ``None`` is ignored).

    Returns:
      The floating dtype and a context manager (a local x64 scope or a no-op).
    """
    jax_args = [a for a in args if isinstance(a, (jax.Array, jax.core.Tracer))]
    traced = any(isinstance(a, jax.core.Tracer) for a in jax_args)
    floating = [a.dtype for a in jax_args if jnp.issubdtype(a.dtype, jnp.floating)]
    if any(d == jnp.float64 for d in floating) or not (floating or traced):
        return jnp.dtype(jnp.float64), jax.enable_x64(True)
    if floating:
        return functools.reduce(jnp.promote_types, floating, jnp.dtype(jnp.float32)), (
            contextlib.nullcontext()
        )
    return jnp.dtype(jnp.result_type(float)), contextlib.nullcontext()


def call(kernel, *args, **static):
    """``kernel(*args, **static)`` with ``args`` as arrays of the dtype :func:`compute_context`
    picks, inside its context (the one entry of elementwise public functions)."""
    dtype, context = compute_context(*args)
    with context:
        return kernel(*(jnp.asarray(a, dtype) for a in args), **static)
