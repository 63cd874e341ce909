"""float32 evaluation of the quadrature of :mod:`jaxrdp._quadrature`, centred at each mode.

In float32 the log-integrand ``ℓ(t) = −t²/2 + α·log(1 − q + q e^{st − s²/2})`` (``s = 1/σ``)
is, near its maximum, a moderate number made of parts as large as ``α|log q|`` or
``α²s²/2``; evaluated directly it carries an absolute error of ``ε₃₂`` times those parts,
i.e. a relative error of that size in ``A_α − 1`` (up to 1e-3 at α ≈ 4096). Instead, for
each window we pick its centre ``c`` (the mode, or 0 for the central window) and write

    ℓ(c + r) = ℓ(c) + ℓ'(c)·r − r²/2 + α·D(p_c, s r),
    D(p, y) = log(1 − p + p e^y) − p y = log1p((1 − p)·φ(−p y) + p·φ((1 − p) y)) ≥ 0,

with ``φ(z) = e^z − 1 − z ≥ 0`` and ``p_c = σ(z_c)``, ``z_c = s c − s²/2 + logit q`` (exact
algebra: ``1 − q + q e^{u + y} = (1 − q + q e^u)(1 − p + p e^y)``). ``ℓ(c)``, ``ℓ'(c)`` and
``z_c`` are computed once per window in double-float32 (:mod:`jaxrdp._doublefloat`), and
the per-node remainder involves only sums of non-negative terms of moderate size. The
integrand of ``A − 1`` is ``exp(ℓ(t))·ρ(t)/√(2π)`` with ``ρ = g(x)/(1 + x)^α ∈ [0, 1]``,
evaluated directly from ``x``. Nodes with ``x ≤ 0`` (``t ≤ s/2``, where every part is
small) use the direct form ``−t²/2 + log g(x)``.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxrdp import _doublefloat as dd
from jaxrdp import _logmath

# |arguments| of φ beyond which D is evaluated as a log-sum-exp (no cancellation there).
_PHI_LIMIT = 30.0
_PHI_SERIES_RADIUS = 0.5
_PHI_SERIES_TERMS = 12
_TINY = float(np.finfo(np.float32).tiny)


class _Centre(NamedTuple):
    """Quantities of ``ℓ`` at a window centre ``c``; each float32 array of the cell shape."""

    value_hi: jax.Array  # ℓ(c) = value_hi + value_lo (double-float)
    value_lo: jax.Array
    slope: jax.Array  # ℓ'(c)
    p: jax.Array  # p_c and 1 − p_c, each to float32 relative precision
    p_comp: jax.Array


def _with_tangent(value, plain):
    """``value`` (computed without derivatives) carrying the derivative of ``plain``."""
    return jax.lax.stop_gradient(value) + (plain - jax.lax.stop_gradient(plain))


def _centres(q, sigma, alpha, centres) -> _Centre:
    """:class:`_Centre` at window centres ``centres`` (shape ``S + (k,)``, no derivatives)
    for cells ``q, sigma, alpha`` of shape ``S``; fields have shape ``S + (k,)``."""
    ex = lambda v: v[..., None]  # noqa: E731
    q_, sigma_, alpha_ = (jax.lax.stop_gradient(v) for v in (q, sigma, alpha))
    one = dd.full_like(q_, 1.0)
    s = dd.div(one, dd.from_float(sigma_))
    # log q and log(1 − q) in one double-float log over a stacked axis.
    one_minus_q = dd.two_sum(one.hi, -q_)
    logs = dd.log(
        dd.DoubleFloat(
            jnp.stack([q_, one_minus_q.hi], axis=-1),
            jnp.stack([jnp.zeros_like(q_), one_minus_q.lo], axis=-1),
        )
    )
    log1m_q = dd.DoubleFloat(logs.hi[..., 1], logs.lo[..., 1])
    logit_q = dd.sub(dd.DoubleFloat(logs.hi[..., 0], logs.lo[..., 0]), log1m_q)
    offset = dd.add(dd.scale(dd.mul(s, s), -0.5), logit_q)  # z_c = s·c + offset

    expand = lambda a: dd.DoubleFloat(ex(a.hi), ex(a.lo))  # noqa: E731
    s_, offset_, log1m_q_ = expand(s), expand(offset), expand(log1m_q)
    alpha_dd = dd.from_float(ex(alpha_))
    one_ = dd.full_like(centres, 1.0)
    c_dd = dd.from_float(centres)
    z = dd.add(dd.mul(s_, c_dd), offset_)
    positive = z.hi >= 0
    exp_neg_abs = dd.exp(dd.where(positive, dd.neg(z), z))  # e^{−|z|}
    one_plus = dd.add(one_, exp_neg_abs)
    softplus = dd.log(one_plus)
    softplus = dd.where(positive, dd.add(z, softplus), softplus)
    value = dd.add(
        dd.scale(dd.two_prod(centres, centres), -0.5),
        dd.mul(alpha_dd, dd.add(log1m_q_, softplus)),
    )
    larger = dd.div(one_, one_plus)  # sigmoid(|z|)
    smaller = dd.mul(exp_neg_abs, larger)  # sigmoid(−|z|)
    p_dd = dd.where(positive, larger, smaller)
    slope = dd.to_float(dd.sub(dd.mul(dd.mul(s_, alpha_dd), p_dd), c_dd))

    # The same quantities in plain float32 carry the derivatives.
    s_f = ex(1.0 / sigma)
    log1m_q_f = ex(jnp.log1p(-q))
    z_f = s_f * centres - 0.5 * s_f * s_f + ex(jnp.log(q)) - log1m_q_f
    alpha_f = ex(alpha)
    value_f = -0.5 * centres * centres + alpha_f * (log1m_q_f + jax.nn.softplus(z_f))
    p_f = jax.nn.sigmoid(z_f)
    centre = _Centre(
        value_hi=_with_tangent(value.hi, value_f),
        value_lo=jax.lax.stop_gradient(value.lo),
        slope=_with_tangent(slope, alpha_f * s_f * p_f - centres),
        p=_with_tangent(dd.to_float(p_dd), p_f),
        p_comp=_with_tangent(
            dd.to_float(dd.where(positive, smaller, larger)), jax.nn.sigmoid(-z_f)
        ),
    )
    return _Centre(*dd.materialise(*centre))


def _phi(z):
    """``e^z − 1 − z ≥ 0`` to float32 relative precision, for ``|z| <= _PHI_LIMIT``."""
    small = jnp.abs(z) < _PHI_SERIES_RADIUS
    zs = jnp.where(small, z, 0.0)
    acc = jnp.ones_like(zs)
    for n in range(_PHI_SERIES_TERMS, 2, -1):
        acc = 1.0 + zs * acc / n
    series = 0.5 * zs * zs * acc
    zl = jnp.where(small, 1.0, z)
    return jnp.where(small, series, jnp.expm1(zl) - zl)


def _tilt(p, p_comp, log_p, log_p_comp, y):
    """``D(p, y) = log(1 − p + p e^y) − p y ≥ 0``, to float32 relative precision.

    ``log_p``, ``log_p_comp``: ``log p`` and ``log(1 − p)``, floored at float32's tiny.
    """
    a1, a2 = -p * y, p_comp * y  # D = log((1 − p) e^{a1} + p e^{a2}), (1 − p) a1 + p a2 = 0
    moderate = jnp.maximum(jnp.abs(a1), jnp.abs(a2)) <= _PHI_LIMIT
    a1m = jnp.clip(a1, -_PHI_LIMIT, _PHI_LIMIT)
    a2m = jnp.clip(a2, -_PHI_LIMIT, _PHI_LIMIT)
    near = jnp.log1p(p_comp * _phi(a1m) + p * _phi(a2m))
    far = jnp.logaddexp(log_p_comp + a1, log_p + a2)
    return jnp.where(moderate, near, far)


def _log_ratio(parts: _logmath.NodeParts, log_prefix, log_factor, alpha, small):
    """``log ρ = log(g(x) / (1 + x)^α) ≤ 0`` for ``x > 0``; arbitrary finite elsewhere.

    ``log_prefix`` and ``log_factor`` are :func:`jaxrdp._logmath.excess_factors`' output
    (the factor's log), so ``log g = log_prefix + log_factor``. Small ``x``: the series value
    of ``log g`` minus ``α log1p x`` (both small). Otherwise, with ``b = (α − 1) log1p x > 0``
    and ``w = (α − 1) x/(1 + x)``: ``ρ = factor·e^{−b}`` for ``b <= 1`` (both parts
    small), and ``ρ = 1 − (1 + w) e^{−b}`` beyond, which has no cancellation there.
    """
    positive = parts.x > 0
    series = log_prefix + log_factor - alpha * parts.log1p_x
    beta = alpha - 1.0
    b = jnp.where(positive, beta * parts.log1p_x, 2.0)
    w = beta * jnp.where(positive, parts.x_over_1px, 0.0)
    near = log_factor - b
    far = jnp.log1p(-(1.0 + w) * jnp.exp(-jnp.maximum(b, 1.0)))
    return jnp.where(small, series, jnp.where(b <= 1.0, near, far))


def _log_terms(q, sigma, alpha, pieces, modes, cfg):
    """``(shift, terms)`` with ``A − 1 = e^shift·Σ exp(terms)`` (terms on the last axis)."""
    centres_t = jax.lax.stop_gradient(jnp.stack([jnp.zeros_like(q), modes[0], modes[1]], -1))
    centres_all = _centres(q, sigma, alpha, centres_t)
    shift_hi = jax.lax.stop_gradient(jnp.max(centres_all.value_hi, axis=-1))

    nodes, weights = _logmath.gauss_legendre(cfg.nodes_per_window)
    nodes = jnp.asarray(nodes + 1.0, jnp.float32)  # on [0, 2]
    log_weights = jnp.log(jnp.asarray(weights, jnp.float32))

    # Nodes of all six pieces along one axis; piece k belongs to window k // 2.
    n = cfg.nodes_per_window
    per_node = lambda v: jnp.repeat(v, 2 * n, axis=-1)  # noqa: E731  S + (3,) → S + (6n,)
    lo = jnp.stack([p[0] for p in pieces], axis=-1)
    half = 0.5 * (jnp.stack([p[1] for p in pieces], axis=-1) - lo)
    centre_of_piece = jnp.repeat(centres_t, 2, axis=-1)
    spread = lambda v: jnp.repeat(v, n, axis=-1)  # noqa: E731  S + (6,) → S + (6n,)
    r = spread(lo - centre_of_piece) + spread(half) * jnp.tile(nodes, len(pieces))
    t = per_node(centres_t) + r
    log_w = spread(_logmath.log_positive(half)) + jnp.tile(log_weights, len(pieces))

    ex = lambda v: v[..., None]  # noqa: E731
    s = ex(1.0 / sigma)
    alpha_ = ex(alpha)
    parts = _logmath.node_parts(s * t - 0.5 * s * s, ex(q), ex(jnp.log(q)))
    log_prefix, factor = _logmath.excess_factors(
        parts, alpha_, series_terms=cfg.series_terms, series_radius=cfg.series_radius
    )
    small = _logmath.series_branch(parts, alpha_, cfg.series_radius)
    log_factor = _logmath.log_positive(factor)
    direct = _logmath.log_normal_pdf(t) + log_prefix + log_factor - ex(shift_hi)

    offset = (centres_all.value_hi - ex(shift_hi)) + centres_all.value_lo
    log_p, log_p_comp = (jnp.log(jnp.maximum(v, _TINY)) for v in (centres_all.p, centres_all.p_comp))
    tilt = _tilt(*(per_node(v) for v in (centres_all.p, centres_all.p_comp, log_p, log_p_comp)), s * r)
    tilted = (
        per_node(offset)
        + per_node(centres_all.slope) * r
        - 0.5 * r * r
        + alpha_ * tilt
        + _log_ratio(parts, log_prefix, log_factor, alpha_, small)
        - 0.5 * np.log(2.0 * np.pi)
    )
    return shift_hi, log_w + jnp.where(parts.x > 0, tilted, direct)


def log_a_minus_one(q, sigma, alpha, pieces, modes, cfg):
    """``log(A_α − 1)`` in float32 over the pieces of :func:`jaxrdp._quadrature._windows`.

    Args:
      q, sigma, alpha: float32 arrays of one shape ``S``, ``0 < q < 1``, ``σ > 0``, ``α > 1``.
      pieces: six ``(lo, hi)`` pairs of shape ``S`` (no derivatives), two per window.
      modes: ``(mode_a, mode_b)``, the centres of the second and third windows.
      cfg: the :class:`jaxrdp._quadrature.QuadratureConfig` (static).

    Returns:
      float32 array of shape ``S``.
    """
    shift_hi, values = _log_terms(q, sigma, alpha, pieces, modes, cfg)
    shift = jnp.max(values, axis=-1)
    shift = jax.lax.stop_gradient(jnp.where(jnp.isfinite(shift), shift, 0.0))
    total = jnp.sum(jnp.exp(values - shift[..., None]), axis=-1)
    return shift_hi + (shift + jnp.log(total))
