"""Log-space primitives shared by the kernels.

Everything here is elementwise, dtype-generic and safe under ``jax.grad``: lanes that a
``jnp.where`` discards are fed harmless inputs first ("double where"), so that neither
their values nor their gradients can turn into NaN.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np


@functools.lru_cache(maxsize=None)
def gauss_legendre(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Gauss–Legendre nodes and weights on [-1, 1] as float64 NumPy arrays.

    Args:
      n: number of nodes (a Python int, static).

    Returns:
      ``(nodes, weights)``, each of shape ``(n,)``.
    """
    nodes, weights = np.polynomial.legendre.leggauss(n)
    return nodes, weights


@functools.lru_cache(maxsize=None)
def gauss_hermite(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Gauss–Hermite nodes and weights for the weight ``e^{−t²/2}`` (float64 NumPy, ``(n,)`` each)."""
    nodes, weights = np.polynomial.hermite_e.hermegauss(n)
    return nodes, weights


def log_positive(v):
    """``log v`` where ``v > 0``, and ``−inf`` (with zero gradient) where ``v <= 0``."""
    positive = v > 0
    return jnp.where(positive, jnp.log(jnp.where(positive, v, 1.0)), -jnp.inf)


def log_expm1(y):
    """``log(exp(y) - 1)`` for ``y > 0``, accurate for tiny and huge ``y`` alike."""
    return y + jnp.log(-jnp.expm1(-y))


class NodeParts(NamedTuple):
    """Order-independent quantities at quadrature nodes, shared by every order α."""

    x: jax.Array  # q·expm1(v), capped so that it stays finite
    log1p_x: jax.Array  # log(1 + x), exact even where x is capped
    x_over_1px: jax.Array  # x / (1 + x)
    log_abs_x: jax.Array  # log|x| (−inf at x = 0)


def node_parts(v, q, log_q) -> NodeParts:
    """Order-independent parts of ``x = q·expm1(v)`` for :func:`excess_factors`."""
    v_cap = 0.5 * np.log(np.finfo(jnp.result_type(v)).max)
    log_x = log_q + v  # log(q·e^v)
    # Where log(q·e^v) > v_cap, x ≫ 1 and log(1 + x) = log q + v to working precision (x is
    # capped). A v beyond v_cap with a tiny q (log q + v ≤ v_cap) is not large: there
    # x = q·e^v − q, computed as e^{log q + v} − q without overflow.
    big = log_x > v_cap
    x = jnp.where(
        v > v_cap,
        jnp.exp(jnp.minimum(log_x, v_cap)) - q,
        q * jnp.expm1(jnp.minimum(v, v_cap)),
    )
    log1p_x = jnp.where(big, log_x, jnp.log1p(x))
    x_over_1px = jnp.where(big, 1.0, x / (1.0 + x))
    log_abs_x = jnp.where(big, log_x, jnp.log(jnp.abs(x)))
    return NodeParts(x, log1p_x, x_over_1px, log_abs_x)


def series_branch(parts: NodeParts, alpha, series_radius: float):
    """Where :func:`excess_factors` sums the series: ``|x| <= min(series_radius, 0.5/alpha)``.

    Decided on ``log|x|``, which stays exact where ``x`` itself is capped.
    """
    return parts.log_abs_x <= jnp.log(jnp.minimum(series_radius, 0.5 / alpha))


def excess_factors(
    parts: NodeParts, alpha, *, series_terms: int, series_radius: float, coefficients=None
):
    """``(log_prefix, factor)`` with ``(1 + x)**alpha − 1 − alpha·x = exp(log_prefix)·factor``.

    The excess is non-negative by convexity and vanishes like
    ``C(alpha, 2) x**2`` at ``x = 0``. With ``b = (alpha − 1) log1p(x)`` it equals
    ``(1 + x)·[expm1(b) − (alpha − 1)·x/(1 + x)]`` for every ``x > −1``, which we use
    where ``|x| > x_c``; there the subtraction loses at most a factor of about
    ``4 / (alpha·x_c)`` in relative precision. For ``|x| <= x_c`` we sum the binomial
    series ``sum_j C(alpha, j) x**j`` instead (Horner form, ``series_terms`` terms, exact
    for integer ``alpha < series_terms``), with ``x_c = min(series_radius, 0.5 / alpha)``,
    so each term is at most ``(1/2)^j / j!`` of the first. One ``expm1`` per element.

    Args:
      parts: :class:`NodeParts` of ``x`` (shape ``S``).
      alpha: array broadcastable against ``S``, ``alpha > 1``.
      series_terms: static number of series terms.
      series_radius: static upper limit of ``x_c`` (float64: 0.01, costing at most a
        factor 400 = 4e-14 relative; float32: 0.2, a factor 20).
      coefficients: optional sequence of the series' coefficients ``C(α, j)/C(α, 2)``,
        ``j = 2, 3, …`` (each broadcastable against ``alpha``; e.g. the rows of
        :func:`series_coefficients` for static orders), which replace ``series_terms``
        and save recomputing the ratios at every node.

    Returns:
      Two arrays of the broadcast shape: the log prefactor (``-inf`` where ``x == 0``)
      and a positive factor, so that callers can sum ``exp(log_weight + log_prefix −
      shift)·factor`` with a single ``exp`` per term.
    """
    x = parts.x
    beta = alpha - 1.0
    small = series_branch(parts, alpha, series_radius)

    # Series: g = C(alpha, 2) x^2 [1 + r_2 x (1 + r_3 x (1 + ...))],
    # r_j = (alpha - j) / (j + 1) = C(alpha, j + 1) / C(alpha, j).
    xs = jnp.where(small, x, 0.0)
    if coefficients is None:
        acc = jnp.ones_like(xs * alpha)
        for j in range(series_terms - 1, 1, -1):
            acc = 1.0 + (alpha - j) * (1.0 / (j + 1)) * xs * acc
    else:
        acc = coefficients[-1] * jnp.ones_like(xs)
        for c in coefficients[-2::-1]:
            acc = c + xs * acc

    # Elsewhere: g / (1 + x) = expm1(b) − β·x/(1 + x), with b capped against overflow
    # (beyond the cap expm1(b) dwarfs the subtracted term, so the excess is added back).
    b = beta * parts.log1p_x
    b_cap = 0.5 * np.log(np.finfo(jnp.result_type(b)).max)
    b_c = jnp.minimum(b, b_cap)
    inner = jnp.expm1(b_c) - beta * parts.x_over_1px

    factor = jnp.where(small, acc, jnp.where(small, 1.0, inner))
    log_prefix = jnp.where(
        small,
        jnp.log(0.5 * alpha * beta) + 2.0 * parts.log_abs_x,
        parts.log1p_x + (b - b_c),
    )
    return log_prefix, factor


#: Truncation of :func:`series_coefficients`: the first omitted term is at most this
#: fraction of the leading one.
SERIES_TAIL = 2.0**-60


@functools.lru_cache(maxsize=64)
def series_coefficients(alphas: tuple[float, ...], radius: float) -> np.ndarray:
    """Coefficients ``C(α, j)/C(α, 2)``, ``j = 2 … m``, of ``g/(C(α,2)x²)`` as a series in x.

    ``c_j = Π_{i=2}^{j−1} (α − i)/(i + 1)``, in float64 for static orders. ``m`` is the
    smallest count with ``m ≥ max α`` whose first omitted term is below
    :data:`SERIES_TAIL` of the leading one for every order at ``|x| = radius``; beyond it
    the terms fall by a ratio ``|α − j|/(j + 1)·|x| ≤ radius``, so the omitted tail sums
    to less than ``SERIES_TAIL/(1 − radius)`` of the leading term.

    Args:
      alphas: static orders, ``G`` of them.
      radius: static largest ``|x|`` at which the series is used (below 1).

    Returns:
      Array ``(G, m − 1)``, column ``i`` holding the coefficient of ``x^i``.
    """
    alpha = np.asarray(alphas, dtype=np.float64)[:, None]
    coefficients = [np.ones_like(alpha)]
    j = 2
    while True:
        coefficients.append(coefficients[-1] * (alpha - j) / (j + 1))
        j += 1  # the newest column is c_j, the coefficient of x^{j−2}
        if j > alpha.max() and np.max(np.abs(coefficients[-1])) * radius ** (j - 2) <= SERIES_TAIL:
            coefficients.pop()
            break
    return np.concatenate(coefficients, axis=1)


def panel_ends(n_total: int, n_nodes: int) -> np.ndarray:
    """Indices of the first and last node of each panel of ``n_nodes`` consecutive nodes."""
    return np.concatenate([np.arange(0, n_total, n_nodes), np.arange(n_nodes - 1, n_total, n_nodes)])


def shift_from_ends(lead, factor):
    """Log-sum-exp shift from terms ``exp(lead)·factor`` at the panel ends (last axis).

    The first and last node of every panel give a shift within a few nats of the largest
    term (the log-integrand plus ``(t − c)²/2`` is convex away from ``x = 0``), so the sum
    needs no max pass over every node. Constant under ``jax.grad``; 0 where not finite.
    """
    shift = jnp.max(lead + jnp.log(factor), axis=-1)
    return jax.lax.stop_gradient(jnp.where(jnp.isfinite(shift), shift, 0.0))


def log_normal_pdf(t):
    """Log density of the standard normal distribution."""
    return -0.5 * t * t - 0.5 * np.log(2.0 * np.pi)


def horner(x, coefficients):
    """``Σ_k coefficients[k]·x^k`` by Horner's rule, elementwise (a static tuple of floats)."""
    out = jnp.full_like(x, coefficients[-1])
    for c in coefficients[-2::-1]:
        out = out * x + c
    return out


# π/2 in three parts (Cody–Waite): the first two have 30 significant bits, so n·part is exact
# for |n| < 2²³; their sum is π/2 to 4e-35.
_HALF_PI_PARTS = (float.fromhex("0x1.921fb54000000p+0"), float.fromhex("0x1.10b4611800000p-30"),
                  float.fromhex("0x1.313198a2e0370p-61"))
#: |angle| below which :func:`cos_sin` reduces exactly; larger arrays use ``jnp.cos``/``jnp.sin``.
COS_SIN_REDUCED_RANGE = 2.0**22
# Taylor coefficients of sin r / r and cos r in r², for |r| ≤ π/4 (truncation < 1e-19)
_SIN_COEFFS = tuple((-1) ** k / math.factorial(2 * k + 1) for k in range(9))
_COS_COEFFS = tuple((-1) ** k / math.factorial(2 * k) for k in range(10))


def _reduced_cos_sin(a):
    n = jnp.round(a * (2.0 / np.pi))
    p1, p2, p3 = _HALF_PI_PARTS
    r = ((a - n * p1) - n * p2) - n * p3  # a − n·π/2, |r| ≤ π/4 (+ rounding)
    r2 = r * r
    s, c = r * horner(r2, _SIN_COEFFS), horner(r2, _COS_COEFFS)
    k = n.astype(jnp.int32) & 3  # the quadrant: rotate (c, s) by k·π/2
    odd = (k & 1) == 1
    cos = jnp.where(odd, s, c) * jnp.where((k == 1) | (k == 2), -1.0, 1.0)
    sin = jnp.where(odd, c, s) * jnp.where(k >= 2, -1.0, 1.0)
    return cos, sin


def cos_sin(a):
    """``(cos a, sin a)`` of a float64 array, about 2.5× faster than ``jnp.cos``, ``jnp.sin``.

    One Cody–Waite reduction by π/2 (exact for the arrays it is used on: every
    ``|a| < COS_SIN_REDUCED_RANGE``) and Taylor polynomials on ``|r| ≤ π/4``; measured against
    80-bit references, the error is below 0.75 eps absolute (XLA's pair: 19 ns per element
    on CPU, this one 7.5). An array with a larger or non-finite angle takes ``jnp.cos`` and
    ``jnp.sin`` (one ``lax.cond`` per array). Differentiable (polynomials and a rounding of
    zero derivative). Other dtypes go to ``jnp.cos``/``jnp.sin`` directly.
    """
    if a.dtype != jnp.float64:
        return jnp.cos(a), jnp.sin(a)
    inside = jnp.all(jnp.abs(a) < COS_SIN_REDUCED_RANGE)  # False for NaN too
    return jax.lax.cond(inside, _reduced_cos_sin, lambda v: (jnp.cos(v), jnp.sin(v)), a)


def tree_sum(x):
    """Σ over the last axis as a balanced tree of elementwise additions (pairwise summation).

    XLA leaves the order of a ``reduce`` open; it does not reassociate explicit additions, so
    each term meets ``depth`` roundings: |error| ≤ depth·(eps/2)·Σ|x| (Higham 2002, Sec. 4.2),
    where a sum in any order could meet (n − 1)·(eps/2)·Σ|x|. Zero padding is exact.

    Args:
      x: ``(..., n)``, real.

    Returns:
      ``(sum, depth)``: the sum ``(...)`` and depth = ⌈log₂ n⌉, a Python int.
    """
    n = x.shape[-1]
    depth = (n - 1).bit_length()
    x = jnp.concatenate([x, jnp.zeros(x.shape[:-1] + ((1 << depth) - n,), x.dtype)], -1)
    while x.shape[-1] > 1:
        half = x.shape[-1] // 2
        x = x[..., :half] + x[..., half:]
    return x[..., 0], depth
