"""Argument domains: eager checks that name the argument and its value, traced masks.

A :class:`Spec` lists each argument's :class:`Range`; from it come both the eager
``ValueError`` (concrete values; naming the first bad argument and value) and the traced
mask of lanes out of their domain (NaN included), which jitted functions turn into the
documented NaN results. Checks run only on concrete values; under ``jit`` the arguments
are tracers and the masks take over.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np


class Range(NamedTuple):
    """The domain of one argument: ``[low, high]`` (ends optional), NaN never allowed."""

    low: float | None = None
    high: float | None = None
    low_inclusive: bool = True
    high_inclusive: bool = True
    allow_inf: bool = True
    integer: bool = False


#: Common ranges.
NONNEGATIVE = Range(low=0.0)
UNIT = Range(low=0.0, high=1.0)
COUNT = Range(low=0.0, allow_inf=False, integer=True)


class Spec:
    """The domains of a function's arguments, in positional order.

    ``Spec(q=UNIT, sigma=NONNEGATIVE)``: :meth:`check` raises on concrete values,
    :meth:`invalid` gives the traced mask, both from the same ranges.
    """

    def __init__(self, **ranges: Range):
        self.ranges = ranges

    def check(self, *values) -> None:
        """Raise ``ValueError`` naming the first argument out of its range (eager only)."""
        for (name, r), value in zip(self.ranges.items(), values):
            check_range(name, value, **r._asdict())

    def invalid(self, *values):
        """Boolean mask (broadcast shape) of lanes with any argument out of its range."""
        return functools.reduce(
            jnp.logical_or, [outside(v, r) for r, v in zip(self.ranges.values(), values)]
        )


def outside(value, r: Range):
    """Traced mask of elements of ``value`` outside ``r`` (NaN included)."""
    bad = jnp.isnan(value)
    if r.low is not None:
        bad = bad | ~(value >= r.low if r.low_inclusive else value > r.low)
    if r.high is not None:
        bad = bad | ~(value <= r.high if r.high_inclusive else value < r.high)
    if not r.allow_inf:
        bad = bad | jnp.isinf(value)
    if r.integer:
        bad = bad | (value != jnp.floor(value))
    return bad


#: Scalars checked without building an array (bool and int included: ``float(True) == 1``).
_SCALAR_TYPES = frozenset({float, int, bool, np.float64, np.float32, np.int64, np.int32})


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
    integer: bool = False,
) -> None:
    """Raise ``ValueError`` naming ``name`` if any element of ``value`` is out of range or NaN.

    Does nothing when ``value`` is a tracer.
    """
    if type(value) in _SCALAR_TYPES:
        # Python and NumPy scalars (the single-run call): plain comparisons, no arrays.
        x = float(value)
        if (
            x == x
            and (allow_inf or x - x == 0.0)
            and (low is None or (x >= low if low_inclusive else x > low))
            and (high is None or (x <= high if high_inclusive else x < high))
            and (not integer or x - x != 0.0 or x == math.floor(x))
        ):
            return
    elif not is_concrete(value):
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
    if integer:
        _first_bad(name, arr, arr != np.floor(arr), f"an integer ≥ {low:g}")


def check_integer(name: str, value, *, low: float) -> None:
    """Raise ``ValueError`` naming ``name`` unless every element is a finite integer ``≥ low``.

    Does nothing when ``value`` is a tracer.
    """
    check_range(name, value, low=low, allow_inf=False, integer=True)


def check_choice(name: str, value, choices: tuple) -> None:
    """Raise ``ValueError`` naming ``name`` unless ``value`` is one of ``choices``."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}; got {name}={value!r}")
