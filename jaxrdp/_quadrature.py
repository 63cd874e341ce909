"""Adaptive-window Gauss–Legendre quadrature for log A_α of the Sampled Gaussian Mechanism.

With ``t ~ N(0, 1)``, ``s = 1/σ`` and ``x(t) = q·expm1(s t − s²/2)``, the moment of the SGM
(Mironov–Talwar–Zhang 2019, Sec. 2–3) is

    A_α = E[(1 + x(t))**α],   and since E[x(t)] = 0,   A_α − 1 = E[g(x(t))],
    g(x) = (1 + x)**α − 1 − α x  ≥ 0.

We integrate ``φ(t) g(x(t))`` in log space, then ``log A = log1p(A − 1)``, so tiny values
keep full relative precision and no term can make the result negative.

The integrand of A_α, ``exp(ℓ(t))`` with ``ℓ(t) = −t²/2 + α log(1 − q + q e^{st − s²/2})``,
is a mixture of unit-width Gaussians centred at ``k s`` (one for each binomial term); it
has at most two local maxima, because ``ℓ'' = −1 + α s² p(1 − p)`` (``p`` a logistic
function of ``t``) changes sign at most twice. We locate both maxima by bisection, find
where ``ℓ`` has dropped by ``depth`` nats on each side, and integrate a fixed number of
Gauss–Legendre nodes over those windows plus a central window ``[−T, T]`` that carries the
``−1 − α x`` correction. Windows are made disjoint, so nothing is counted twice. All loop
counts are static Python ints: one compiled program per shape.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxrdp import _logmath, _solver, _tilted32


class QuadratureConfig(NamedTuple):
    """Static knobs of the quadrature, chosen per dtype."""

    nodes_per_window: int
    root_iterations: int
    edge_iterations: int
    series_terms: int
    series_radius: float  # |x| below which g is summed as a series
    depth: float  # nats below each mode at which a window ends
    central_halfwidth: float


# One row per dtype: nodes per window, root and edge iterations, series terms, series
# radius, depth (nats), central half-width.
FLOAT64_CONFIG = QuadratureConfig(48, 48, 24, 14, 0.01, 48.0, 11.0)
FLOAT32_CONFIG = QuadratureConfig(24, 30, 16, 14, 0.2, 24.0, 7.5)


def config_for(dtype) -> QuadratureConfig:
    return FLOAT64_CONFIG if jnp.dtype(dtype) == jnp.float64 else FLOAT32_CONFIG


def _bisect(fn, lo, hi, iterations: int):
    """Root of ``fn`` on ``[lo, hi]`` with ``fn(lo) <= 0 <= fn(hi)``, elementwise."""
    lo, hi = _solver.bisect(lambda t: fn(t) < 0, lo, hi, iterations)
    return 0.5 * (lo + hi)


def _windows(log_q, log1m_q, s, alpha, cfg: QuadratureConfig):
    """Integration pieces and the maxima of ``ℓ`` they surround, for each element.

    Returns:
      ``(pieces, modes)``: six disjoint pieces ``(lo, hi)`` in increasing order, two per
      window (central window, window of the lower mode, window of the upper mode), and
      the two local maxima ``(mode_a, mode_b)`` (equal when there is one).
    """
    logit_q = log_q - log1m_q
    a_s = alpha * s
    curv_scale = alpha * s * s  # ℓ'' = −1 + curv_scale · p (1 − p)

    def logit_p(t):
        return s * t - 0.5 * s * s + logit_q

    def ell(t):  # log integrand of A_α, up to a constant
        return -0.5 * t * t + alpha * jnp.logaddexp(log1m_q, log_q + s * t - 0.5 * s * s)

    def slope_neg(t):  # −ℓ'(t), increasing outside the band where ℓ is convex
        return t - a_s * jax.nn.sigmoid(logit_p(t))

    # Band where ℓ is convex: p(1 − p) > 1/curv_scale, only when curv_scale > 4.
    has_band = curv_scale > 4.0
    disc = jnp.sqrt(jnp.clip(1.0 - 4.0 / jnp.where(has_band, curv_scale, 8.0), 0.0, 1.0))
    p_lo = (2.0 / jnp.where(has_band, curv_scale, 8.0)) / (1.0 + disc)  # smaller root
    logit_lo = jnp.log(p_lo) - jnp.log1p(-p_lo)
    band_lo = (logit_lo - logit_q + 0.5 * s * s) / s
    band_hi = (-logit_lo - logit_q + 0.5 * s * s) / s
    zero = jnp.zeros_like(a_s)
    band_lo = jnp.where(has_band, jnp.clip(band_lo, 0.0, a_s), a_s)
    band_hi = jnp.where(has_band, jnp.clip(band_hi, 0.0, a_s), zero)

    # Local maxima of ℓ: roots of −ℓ' (from − to +) left and right of the band.
    a_exists = slope_neg(band_lo) >= 0
    b_exists = slope_neg(band_hi) <= 0
    mode_a = _bisect(slope_neg, zero, band_lo, cfg.root_iterations)
    mode_b = _bisect(slope_neg, band_hi, a_s, cfg.root_iterations)
    mode_a = jnp.where(a_exists, mode_a, mode_b)
    mode_b = jnp.where(b_exists, mode_b, mode_a)
    two_modes = has_band & a_exists & b_exists
    # Local minimum between them: −ℓ' is decreasing inside the band.
    valley = _bisect(lambda t: -slope_neg(t), mode_a, mode_b, cfg.root_iterations)

    # Windows are cut relative to the peaks of A_α's integrand, but what we integrate is
    # A_α − 1, which can be far smaller; deepen the cut by −log(A_α − 1), estimated by
    # the leading term C(α, 2) q² (e^{s²} − 1) of the binomial expansion.
    log_leading = (
        jnp.log(0.5 * alpha * (alpha - 1.0)) + 2.0 * log_q + _logmath.log_expm1(s * s)
    )
    depth = cfg.depth + jnp.maximum(0.0, -log_leading)
    reach = jnp.sqrt(2.0 * depth)
    left_limit = -reach  # ℓ drops ≥ t²/2 below t = 0
    right_limit = a_s + reach  # and ≥ (t − αs)²/2 above t = αs

    def edge(mode, other_end):
        target = ell(mode) - depth
        # ℓ is monotone between mode and other_end; find where it crosses target.
        f_other = ell(other_end) - target
        up = other_end > mode

        def fn(t):  # ≤ 0 at the lo end of the bracket, ≥ 0 at the hi end
            d = ell(t) - target
            return jnp.where(up, -d, d)

        # fn(lo) ≤ 0 ≤ fn(hi) holds when the target is crossed; bisection then finds it.
        lo = jnp.minimum(mode, other_end)
        hi = jnp.maximum(mode, other_end)
        crossing = _bisect(fn, lo, hi, cfg.edge_iterations)
        return jnp.where(f_other >= 0, other_end, crossing)

    a_lo = edge(mode_a, left_limit)
    a_hi = edge(mode_a, jnp.where(two_modes, valley, right_limit))
    b_lo = edge(mode_b, jnp.where(two_modes, valley, left_limit))
    b_hi = edge(mode_b, right_limit)

    # Three windows in increasing order: the central window [−T, T], which carries the
    # −1 − αx part of g, then the windows of the two modes; a single mode's window is
    # cut at the mode instead, so every element uses all its nodes.
    t_c = cfg.central_halfwidth
    split_at_mode = ~two_modes
    windows = (
        (-t_c * jnp.ones_like(a_s), t_c * jnp.ones_like(a_s)),
        (a_lo, jnp.where(split_at_mode, mode_a, a_hi)),
        (jnp.where(split_at_mode, mode_a, b_lo), b_hi),
    )
    # Make them disjoint (sorted by their left ends already): drop what is covered.
    covered = jnp.full_like(a_s, -jnp.inf)
    disjoint = []
    for lo, hi in windows:
        lo = jnp.maximum(lo, covered)
        hi = jnp.maximum(hi, lo)
        covered = hi
        disjoint.append((lo, hi))

    # The integrand has complex singularities at t₁ ± iπ/s, where q·e^{st−s²/2} = −(1 − q)
    # (fractional α); Gauss–Legendre converges fast when t₁ is a panel end, so each
    # window is cut at t₁ when t₁ is inside, else in its middle.
    t1 = (-logit_q + 0.5 * s * s) / s
    pieces = []
    for lo, hi in disjoint:
        inside = (lo < t1) & (t1 < hi)
        cut = jnp.where(inside, t1, 0.5 * (lo + hi))
        pieces += [(lo, cut), (cut, hi)]
    return tuple(pieces), (mode_a, mode_b)


#: Lanes per block of :func:`log_a_minus_one`. Its temporaries hold lanes × nodes values
#: (~150 nodes per lane), and XLA's CPU runtime sets up a program's temporaries on every
#: run, even for a branch that is not taken. Measured on 256 cells × 90 orders: 865 µs
#: per cell in one piece, 449 µs in blocks of 16 cells; and the fast path's fallback
#: branch, never taken, slowed its chunks 1.6× while it was evaluated in one piece.
BLOCK_LANES = 1024


def log_a_minus_one(q, sigma, alpha, cfg: QuadratureConfig):
    """``log(A_α − 1)`` for ``0 < q < 1``, ``σ > 0``, ``α > 1`` (all finite), elementwise.

    Large inputs are evaluated in blocks of :data:`BLOCK_LANES` lanes, one after another.

    Args:
      q, sigma, alpha: arrays of one floating dtype, mutually broadcastable.
      cfg: static quadrature settings.

    Returns:
      Array of the broadcast shape.
    """
    q, sigma, alpha = jnp.broadcast_arrays(q, sigma, alpha)
    n = q.size
    if n <= BLOCK_LANES:
        return _log_a_minus_one(q, sigma, alpha, cfg)
    blocks = -(-n // BLOCK_LANES)
    pad = blocks * BLOCK_LANES - n
    # Padding lanes get a regular dummy cell (q = 1/2, σ = 1, α = 2).
    lanes = [jnp.concatenate([v.reshape(-1), jnp.full((pad,), fill, v.dtype)]).reshape(blocks, -1)
             for v, fill in ((q, 0.5), (sigma, 1.0), (alpha, 2.0))]
    out = jax.lax.map(lambda a: _log_a_minus_one(*a, cfg), tuple(lanes))
    return out.reshape(-1)[:n].reshape(q.shape)


def _log_a_minus_one(q, sigma, alpha, cfg: QuadratureConfig):
    """``log(A_α − 1)`` for ``0 < q < 1``, ``σ > 0``, ``α > 1`` (all finite), elementwise.

    Args:
      q, sigma, alpha: arrays of one floating dtype, mutually broadcastable.
      cfg: static quadrature settings.

    Returns:
      Array of the broadcast shape.
    """
    s = 1.0 / sigma
    log_q = jnp.log(q)
    log1m_q = jnp.log1p(-q)
    windows, modes = _windows(
        *(jax.lax.stop_gradient(v) for v in (log_q, log1m_q, s, alpha)), cfg
    )
    if jnp.result_type(q) == jnp.float32:
        return _tilted32.log_a_minus_one(q, sigma, alpha, windows, modes, cfg)
    nodes, weights = _logmath.gauss_legendre(cfg.nodes_per_window)
    dtype = jnp.result_type(q)
    nodes = jnp.asarray(nodes, dtype)
    log_weights = jnp.log(jnp.asarray(weights, dtype))

    q_, s_, alpha_ = q[..., None], s[..., None], alpha[..., None]
    log_q_ = log_q[..., None]
    t_parts, log_w_parts = [], []
    for lo, hi in windows:
        half = 0.5 * (hi - lo)[..., None]
        t_parts.append(0.5 * (hi + lo)[..., None] + half * nodes)
        log_w_parts.append(_logmath.log_positive(half) + log_weights)
    t = jnp.concatenate(t_parts, axis=-1)
    log_w = jnp.concatenate(log_w_parts, axis=-1)

    def lead_and_factor(t, log_w):
        parts = _logmath.node_parts(s_ * t - 0.5 * s_ * s_, q_, log_q_)
        lead, factor = _logmath.excess_factors(
            parts, alpha_, series_terms=cfg.series_terms, series_radius=cfg.series_radius
        )
        return log_w + _logmath.log_normal_pdf(t) + lead, factor

    # Shift by the largest term among the first and last node of each piece, so the sum
    # is one fused pass with no max reduction.
    ends = _logmath.panel_ends(t.shape[-1], cfg.nodes_per_window)
    shift = _logmath.shift_from_ends(*lead_and_factor(t[..., ends], log_w[..., ends]))
    lead, factor = lead_and_factor(t, log_w)
    total = jnp.sum(jnp.exp(lead - shift[..., None]) * factor, axis=-1)
    return jnp.log(total) + shift
