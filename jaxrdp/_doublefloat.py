"""Double-float32 arithmetic: a number is the unevaluated sum ``hi + lo`` of two float32s.

Used by the float32 kernel for the few per-element quantities (the value and slope of the
log-integrand at a window's centre) that are moderate numbers made of huge parts, such as
``α·log q + α(α−1)/2σ²``; a plain float32 evaluation would lose ``ε₃₂·α|log q|`` there.
Precision is about 2⁻⁴⁴ relative (``≈ 6e-14``) for every operation here.

Products are formed from 12-bit halves obtained by masking the significand, so every
partial product is exact in float32; no result depends on whether the compiler fuses a
multiply into an add, and sums use Knuth's branch-free TwoSum. Values only: the callers
wrap these results in ``stop_gradient`` and attach derivatives from plain float32 formulas.
All functions are elementwise on float32 arrays, except :func:`two_sum`, which is exact
in any binary floating dtype (the accountant uses it for float64 states too).

Reference: T. J. Dekker (1971), "A floating-point technique for extending the available
precision"; D. E. Knuth, TAOCP vol. 2, Sec. 4.2.2 (TwoSum).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

_HALF_MASK = np.uint32(0xFFFFF000)  # keeps sign, exponent and the top 11 fraction bits


class DoubleFloat(NamedTuple):
    """``hi + lo`` with ``|lo| <= ulp(hi)``; both float32 arrays of one shape."""

    hi: jax.Array
    lo: jax.Array


def _constant(value: float) -> DoubleFloat:
    hi = np.float32(value)
    return DoubleFloat(hi, np.float32(value - float(hi)))


def full_like(a, value) -> DoubleFloat:
    """The constant ``value`` (a float, or a :class:`DoubleFloat` of Python floats) as an
    array like ``a``, hidden from XLA's constant folding.

    XLA's algebraic simplifier reassociates additions of literal constants, e.g.
    ``(x + 1) − 1 → x``, which would erase TwoSum's error term; an optimization barrier
    keeps constants opaque.
    """
    c = value if isinstance(value, DoubleFloat) else _constant(value)
    return DoubleFloat(
        *jax.lax.optimization_barrier((jnp.full_like(a, c.hi), jnp.full_like(a, c.lo)))
    )


def _split(a):
    """``a = hi + lo`` exactly, each part with at most 12 significant bits."""
    bits = jax.lax.bitcast_convert_type(a, jnp.uint32) & _HALF_MASK
    hi = jax.lax.bitcast_convert_type(bits, jnp.float32)
    return hi, a - hi


def two_sum(a, b) -> DoubleFloat:
    """``a + b = hi + lo`` exactly (Knuth's TwoSum), for arrays of one floating dtype."""
    s = a + b
    b_virtual = s - a
    err = (a - (s - b_virtual)) + (b - b_virtual)
    return DoubleFloat(s, err)


def two_prod(a, b) -> DoubleFloat:
    """``a·b`` to double-float precision from four exact partial products."""
    a_hi, a_lo = _split(a)
    b_hi, b_lo = _split(b)
    cross = two_sum(a_hi * b_lo, a_lo * b_hi)
    main = two_sum(a_hi * b_hi, cross.hi)
    return two_sum(main.hi, main.lo + (cross.lo + a_lo * b_lo))


def mul_short(a: DoubleFloat, c) -> DoubleFloat:
    """``a·c`` for float32 ``c`` of at most 12 significant bits (e.g. integers up to 4 096).

    Both 12-bit halves of ``a.hi`` times ``c`` are exact, so this costs three products and
    two TwoSums instead of :func:`mul`'s Dekker product.
    """
    a_hi, a_lo = _split(a.hi)
    head = two_sum(a_hi * c, a_lo * c)
    return two_sum(head.hi, head.lo + a.lo * c)


def from_float(a) -> DoubleFloat:
    return DoubleFloat(a, jnp.zeros_like(a))


def neg(a: DoubleFloat) -> DoubleFloat:
    return DoubleFloat(-a.hi, -a.lo)


def add(a: DoubleFloat, b: DoubleFloat) -> DoubleFloat:
    s = two_sum(a.hi, b.hi)
    return two_sum(s.hi, s.lo + (a.lo + b.lo))


def sub(a: DoubleFloat, b: DoubleFloat) -> DoubleFloat:
    return add(a, neg(b))


def mul(a: DoubleFloat, b: DoubleFloat) -> DoubleFloat:
    p = two_prod(a.hi, b.hi)
    return two_sum(p.hi, p.lo + (a.hi * b.lo + a.lo * b.hi))


def scale(a: DoubleFloat, power_of_two: float) -> DoubleFloat:
    """``a`` times an exact power of two (a Python float such as 0.5)."""
    return DoubleFloat(a.hi * power_of_two, a.lo * power_of_two)


def div(a: DoubleFloat, b: DoubleFloat) -> DoubleFloat:
    """``a / b``: a float32 quotient corrected once by the double-float remainder."""
    q1 = a.hi / b.hi
    remainder = sub(a, mul(b, from_float(q1)))
    q2 = (remainder.hi + remainder.lo) / b.hi
    return two_sum(q1, q2)


def where(mask, a: DoubleFloat, b: DoubleFloat) -> DoubleFloat:
    return DoubleFloat(jnp.where(mask, a.hi, b.hi), jnp.where(mask, a.lo, b.lo))


def to_float(a: DoubleFloat):
    return a.hi + a.lo


def materialise(*arrays):
    """The float32 ``arrays`` unchanged (division by an opaque 1 is exact), each computed once.

    The long chains of cheap operations behind an array would otherwise be fused into, and
    so recomputed by, every consumer; XLA does not duplicate a division (measured on CPU:
    :func:`log` of :func:`exp` 2.4× faster). Speed only: values are the same either way.
    """
    one = full_like(arrays[0], 1.0).hi
    return tuple(a / one for a in arrays)


def _materialise(a: DoubleFloat) -> DoubleFloat:
    return DoubleFloat(*materialise(a.hi, a.lo))


def _pow2(k):
    """``2**k`` for integer-valued float32 ``k`` in [−126, 127], built from its bits."""
    biased = (k.astype(jnp.int32) + 127) << 23
    return jax.lax.bitcast_convert_type(biased, jnp.float32)


# ln 2 = _LN2_HI + _LN2_LO: the head has 12 significant bits, so k·_LN2_HI is exact for
# |k| < 4096 and k·ln 2 is good to about 2⁻⁶⁰ relative.
_LN2_HI = math.ldexp(round(math.ldexp(math.log(2.0), 11)), -11)
_LN2_LO = _constant(math.log(2.0) - _LN2_HI)
# 1/n! for the Taylor series of exp on |r| <= ln2/2: 12 terms leave < 2e-15 relative.
_EXP_TERMS = 12
_INV_FACTORIALS = [_constant(1.0 / math.factorial(n)) for n in range(_EXP_TERMS)]


def _times_ln2(k) -> DoubleFloat:
    """``k·ln 2`` for integer-valued float32 ``k``, ``|k| < 4096``."""
    tail = add(two_prod(k, _LN2_LO.hi), from_float(k * _LN2_LO.lo))
    return add(from_float(k * np.float32(_LN2_HI)), tail)


def exp(a: DoubleFloat) -> DoubleFloat:
    """``e**a`` for ``a.hi <= 88``; flushes to 0 below ``e**−87``."""
    underflow = a.hi < -87.0
    a = where(underflow, from_float(jnp.zeros_like(a.hi)), a)
    k = jnp.round(a.hi * np.float32(1.0 / math.log(2.0)))
    k_ln2 = _times_ln2(k)
    r = sub(a, k_ln2)  # |r| <= ln2/2 (plus rounding)
    acc = full_like(a.hi, _INV_FACTORIALS[-1])
    for coeff in reversed(_INV_FACTORIALS[:-1]):
        acc = add(mul(acc, r), full_like(a.hi, coeff))
    factor = jnp.where(underflow, 0.0, _pow2(jnp.clip(k, -126.0, 127.0)))
    return _materialise(DoubleFloat(acc.hi * factor, acc.lo * factor))


def log(a: DoubleFloat) -> DoubleFloat:
    """``log a`` for ``a > 0`` (normal float32 range).

    ``a = m·2**e`` with ``m ∈ [√½, √2)``; ``log m`` is the float32 ``x0 = log(m)`` plus one
    Newton step, ``log1p(δ)`` with ``δ = m·e**−x0 − 1`` evaluated in double-float.
    """
    mantissa, exponent = jnp.frexp(a.hi)  # a.hi = mantissa · 2**exponent, mantissa ∈ [½, 1)
    low = mantissa < np.float32(math.sqrt(0.5))
    exponent = (exponent - jnp.where(low, 1, 0)).astype(jnp.float32)
    factor = _pow2(-exponent)
    m = DoubleFloat(a.hi * factor, a.lo * factor)
    x0 = jnp.log(m.hi)
    delta = to_float(add(mul(m, exp(from_float(-x0))), full_like(x0, -1.0)))
    log1p_delta = delta - 0.5 * delta * delta
    return _materialise(add(_times_ln2(exponent), two_sum(x0, log1p_delta)))
