"""Eager argument checks that name the argument and its offending value.

Checks run only on concrete values; under ``jit`` the arguments are tracers and the
kernels' documented NaN conventions take over.
"""

from __future__ import annotations

import jax
import numpy as np


def is_concrete(*values) -> bool:
    """True when no argument is a JAX tracer (i.e. we are not inside a transformation)."""
    return not any(isinstance(v, jax.core.Tracer) for v in values)


def _first_bad(name: str, arr: np.ndarray, bad: np.ndarray, requirement: str):
    if np.any(bad):
        value = float(arr[bad].flat[0] if arr.ndim else arr)
        raise ValueError(f"{name} must be {requirement}; got {name}={value!r}")


def check_range(
    name: str,
    value,
    *,
    low: float | None = None,
    high: float | None = None,
    low_inclusive: bool = True,
    high_inclusive: bool = True,
    allow_inf: bool = True,
) -> None:
    """Raise ``ValueError`` naming ``name`` if any element of ``value`` is out of range or NaN.

    Does nothing when ``value`` is a tracer.
    """
    if not is_concrete(value):
        return
    arr = np.asarray(value, dtype=np.float64)
    lo = "[" if low_inclusive else "("
    hi = "]" if high_inclusive else ")"
    requirement = f"in {lo}{'-inf' if low is None else low}, {'inf' if high is None else high}{hi}"
    _first_bad(name, arr, np.isnan(arr), f"a number ({requirement})")
    if not allow_inf:
        _first_bad(name, arr, np.isinf(arr), f"finite ({requirement})")
    if low is not None:
        _first_bad(name, arr, arr < low if low_inclusive else arr <= low, requirement)
    if high is not None:
        _first_bad(name, arr, arr > high if high_inclusive else arr >= high, requirement)


def check_integer(name: str, value, *, low: float) -> None:
    """Raise ``ValueError`` naming ``name`` unless every element is a finite integer ``≥ low``.

    Does nothing when ``value`` is a tracer.
    """
    if not is_concrete(value):
        return
    check_range(name, value, low=low, allow_inf=False)
    arr = np.asarray(value, dtype=np.float64)
    _first_bad(name, arr, arr != np.floor(arr), f"an integer ≥ {low:g}")


def check_choice(name: str, value, choices: tuple) -> None:
    """Raise ``ValueError`` naming ``name`` unless ``value`` is one of ``choices``."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}; got {name}={value!r}")
