"""The privacy profile of a single SGM step in closed form (private).

For one step of the Sampled Gaussian Mechanism (sampling rate q, noise multiplier σ) the
set {p > e^ε p'} is a half-line in the output x, so both directions of the add-or-remove
profile are Gaussian tail probabilities. With the Gaussian mechanism's profile
(sensitivity 1, noise σ; Balle and Wang 2018, Theorem 8)

    δ_G(s) = Φ̄(A) − e^s Φ̄(B),   A = σs − 1/2σ,  B = A + 1/σ,   s ≥ 0,

one step gives (q > 0, ε ≥ 0):

* remove (P the mixture, Q = N(0, σ²)): δ_rem(ε) = q·δ_G(s_r), s_r = log(1 + (e^ε − 1)/q);
* add (P = N(0, σ²), Q the mixture): δ_add(ε) = e^ε c·δ_G(s_a), c = q + e^{−ε} − 1,
  s_a = log(q/c), where c > 0; δ_add = 0 where c ≤ 0.

δ_G is a difference of nearly equal terms where A is large or σ is (B − A = 1/σ). For
A < :data:`_MILLS_FROM` it is computed as Φ̄(A)·(1 − e^d), d = s + log Φ̄(B) − log Φ̄(A),
whose relative error is the absolute error of d over expm1(−d). Beyond, with the Mills
ratio R = Φ̄/φ and e^s φ(B) = φ(A), δ_G = φ(A)(R(A) − R(B)) = φ(A)∫_A^B w(x) dx with
w = 1 − xR > 0, written as w = K·R for the tail K of Laplace's continued fraction
R(x) = 1/(x + 1/(x + 2/(x + 3/(x + …)))): no cancellation at all; the integral by
Gauss–Legendre nodes (16, checked against 8: a nested estimate, as elsewhere in the
package). Each value comes with a relative error bound that also carries the rounding of
s through d log δ_G/ds = −e^s Φ̄(B)/δ_G.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import log_ndtr

from jaxrdp import _logmath

_EPS = float(np.finfo(np.float64).eps)  # float64 only: the callers use it for float64 runs
_ULPS = 64.0  # rounding allowed per term (log_ndtr, sums, logs): generous
_MILLS_FROM = 4.0  # A from which δ_G is integrated through the Mills ratio
_CF_TERMS = 64  # Laplace's continued fraction: below 1e-17 relative for x ≥ 4
_LOG_SQRT_2PI = 0.5 * np.log(2.0 * np.pi)
_GL16 = _logmath.gauss_legendre(16)
_GL8 = _logmath.gauss_legendre(8)
#: both rules' nodes on [−1, 1], the 16-point rule's first (one continued fraction for all)
_GL_NODES = np.concatenate([_GL16[0], _GL8[0]])
_N16 = _GL16[0].size


def _mills_parts(x):
    """(R(x), K(x)) for x ≥ 1 by the continued fraction (backward, static length)."""
    t = jnp.zeros_like(x)
    for k in range(_CF_TERMS, 1, -1):
        t = k / (x + t)
    tail = 1.0 / (x + t)  # K = 1/(x + 2/(x + 3/(x + …)))
    return 1.0 / (x + tail), tail


def _log_gaussian_delta(s, sigma, ds):
    """log δ_G(s) and a relative error bound (s ≥ 0, σ > 0; ``ds`` bounds the error of s)."""
    a = sigma * s - 0.5 / sigma
    b = a + 1.0 / sigma
    # direct form (A below _MILLS_FROM)
    lpa, lpb = log_ndtr(-a), log_ndtr(-b)
    d = s + lpb - lpa
    gap = -jnp.expm1(jnp.minimum(d, 0.0))
    direct_ok = gap > 0
    log_direct = lpa + jnp.log(jnp.where(direct_ok, gap, 1.0))
    err_d = _ULPS * _EPS * (1.0 + s + jnp.abs(lpa) + jnp.abs(lpb))
    eta_direct = jnp.where(direct_ok, err_d / jnp.where(direct_ok, gap, 1.0), jnp.inf)
    # its slope: d log δ_G/ds = −e^{s + log Φ̄(B)}/δ_G = −e^d/(1 − e^d)
    slope_direct = jnp.exp(jnp.minimum(d, 0.0)) / jnp.where(direct_ok, gap, 1.0)
    # Mills form (A from _MILLS_FROM on; safe inputs elsewhere)
    mills = a >= _MILLS_FROM
    am = jnp.where(mills, a, _MILLS_FROM)
    bm = am + 1.0 / sigma
    # w = K·R at both rules' nodes on [A, B] and R at B: one continued fraction for all
    half = 0.5 * (bm - am)
    x = jnp.concatenate([(am + half)[..., None] + half[..., None] * _GL_NODES, bm[..., None]], -1)
    r, k = _mills_parts(x)
    w = k[..., :-1] * r[..., :-1]
    i16 = half * jnp.sum(_GL16[1] * w[..., :_N16], axis=-1)
    i8 = half * jnp.sum(_GL8[1] * w[..., _N16:], axis=-1)
    rel_q = jnp.abs(i16 - i8) / i16
    log_mills = -0.5 * am * am - _LOG_SQRT_2PI + jnp.log(i16)
    eta_mills = 10.0 * rel_q**2 + _ULPS * _EPS * (1.0 + 0.5 * am * am)
    slope_mills = r[..., -1] / i16  # R(B)/∫w
    log_g = jnp.where(mills, log_mills, log_direct)
    eta = jnp.where(mills, eta_mills, eta_direct)
    slope = jnp.where(mills, slope_mills, slope_direct)
    eta = eta + jnp.expm1(jnp.minimum(ds * slope, 700.0))  # the error of s, through the slope
    return jnp.where(jnp.isfinite(eta), log_g, -jnp.inf), eta


def _arguments(q, eps):
    """Both directions' Gaussian arguments at ε ≥ 0: (s_r, ds_r) for remove, and for add
    (s_a, ds_a, log(e^ε c), the relative error of c, whether c > 0)."""
    log_q = jnp.log(q)
    # remove: s_r = log(1 + (e^ε − 1)/q); from ε = 1 on as ε − log q + log1p(−(1 − q)e^{−ε}),
    # which stays finite where e^ε overflows (ε ≳ 709)
    big = eps > 1.0
    e_big, e_small = jnp.where(big, eps, 1.0), jnp.where(big, 1.0, eps)
    s_r = jnp.where(big, e_big - log_q + jnp.log1p(-(1.0 - q) * jnp.exp(-e_big)),
                    jnp.log1p(jnp.expm1(e_small) / q))
    ds_r = 4.0 * _EPS * (s_r + jnp.where(big, jnp.abs(log_q) + 1.0, 0.0))
    # add: c = q − (1 − e^{−ε}), open where c > 0. From q = 1/2 on, 1 − q is exact and
    # c = e^{−ε}(1 − r), r = (1 − q)e^ε, is kept in logs: the sum q + expm1(−ε) cancels as
    # q → 1, and e^{−ε} underflows beyond ε ≈ 745 while q = 1 (r = 0) keeps c > 0. (For
    # q < 1 and ε > 700, r > 1: closed.)
    half = q >= 0.5
    r = jnp.where(half, (1.0 - q) * jnp.exp(jnp.minimum(eps, 700.0)), 0.0)
    open_half = r < 1.0
    r_safe = jnp.where(open_half, r, 0.0)
    log_ec_half = jnp.log1p(-r_safe)  # log(e^ε c)
    eta_c_half = 6.0 * _EPS * (1.0 + r_safe) / (1.0 - r_safe)
    em = jnp.expm1(-eps)
    c_low = q + em
    open_low = c_low > 0
    c_low_safe = jnp.where(open_low, c_low, q)
    eta_c_low = 4.0 * _EPS * (q - em) / c_low_safe
    open_ = jnp.where(half, open_half, open_low)
    log_ec = jnp.where(half, log_ec_half, eps + jnp.log(c_low_safe))
    eta_c = jnp.where(half, eta_c_half, eta_c_low)  # relative error of c
    s_a = log_q + eps - log_ec  # log(q/c)
    ds_a = eta_c + 4.0 * _EPS * (jnp.abs(s_a) + eps + jnp.abs(log_q))
    return s_r, ds_r, s_a, ds_a, log_ec, eta_c, open_


def _finish(log_q, eps, lg_r, eta_r, lg_a, eta_a, log_ec, eta_c, open_):
    """(log δ_rem, log δ_add, η_rem, η_add) from both directions' log δ_G and bounds."""
    log_add = jnp.where(open_, log_ec + lg_a, -jnp.inf)
    eta_add = jnp.where(open_, eta_a + eta_c + 4.0 * _EPS * eps, 0.0)
    return log_q + lg_r, log_add, eta_r, eta_add


def log_delta(q, sigma, eps):
    """(log δ_rem, log δ_add, relative error bound) of one step at ε ≥ 0, elementwise.

    Arguments broadcast; ``q`` in (0, 1], ``σ > 0`` (other lanes: anything finite, results
    unused). The bound holds for both directions (and so for their maximum).
    """
    s_r, ds_r, s_a, ds_a, log_ec, eta_c, open_ = _arguments(q, eps)
    # both directions' δ_G in one evaluation (one copy of the continued fraction)
    lg, eta_g = _log_gaussian_delta(jnp.stack(jnp.broadcast_arrays(s_r, s_a)), sigma,
                                    jnp.stack(jnp.broadcast_arrays(ds_r, ds_a)))
    (lg_r, lg_a), (eta_r, eta_a) = lg, eta_g
    log_rem, log_add, eta_r, eta_add = _finish(jnp.log(q), eps, lg_r, eta_r, lg_a, eta_a,
                                                log_ec, eta_c, open_)
    return log_rem, log_add, jnp.maximum(eta_r, eta_add)


def log_delta_of(q, sigma, eps, remove):
    """log δ of one direction per element (``remove``: boolean, broadcast) at ε ≥ 0, and its
    relative error bound: :func:`log_delta` evaluating only the chosen direction's δ_G."""
    s_r, ds_r, s_a, ds_a, log_ec, eta_c, open_ = _arguments(q, eps)
    lg, eta = _log_gaussian_delta(jnp.where(remove, s_r, s_a), sigma,
                                  jnp.where(remove, ds_r, ds_a))
    log_rem, log_add, eta_r, eta_add = _finish(jnp.log(q), eps, lg, eta, lg, eta, log_ec,
                                                eta_c, open_)
    return jnp.where(remove, log_rem, log_add), jnp.where(remove, eta_r, eta_add)


def _log_delta_bounds(q, sigma, eps):
    """log of the upper and lower bounds of δ(ε) = max(δ_rem, δ_add), and the bound η."""
    log_rem, log_add, eta = log_delta(q, sigma, eps)
    eta = jax.lax.stop_gradient(eta)  # the error bound carries no derivative
    log_est = jnp.maximum(log_rem, log_add)
    return log_est + jnp.log1p(eta), log_est + jnp.log(jnp.maximum(1.0 - eta, 1e-300)), eta


_BISECTIONS = 80  # on log ε over 42 nats: a bracket of 4e-23 relative
_SPAN = 42.0  # the search covers [ε_hi·e^−42, ε_hi]


def epsilon(q, sigma, log_delta_target, eps_hi):
    """The smallest ε at which the bounded one-step δ is within ``exp(log_delta_target)``.

    Args:
      q, sigma: one step (q in (0, 1], σ > 0), broadcastable.
      log_delta_target: log δ.
      eps_hi: a sound upper bound of ε (e.g. RDP's), ``> 0`` and finite.

    Returns:
      ``(ε, rel, ok)``: ε verified (the bounded δ there is at most δ; 0 where δ(0) already
      is, ε_hi·e^−42 where that is), the relative error bound of ε (from the root of the
      lower bound of δ), and whether the upper bound met δ at ``eps_hi`` at all (else the
      caller keeps its fallback).
    """
    q, sigma, log_delta_target, eps_hi = jnp.broadcast_arrays(q, sigma, log_delta_target,
                                                               eps_hi)
    sg = jax.lax.stop_gradient
    q_in, sigma_in = q, sigma
    q, sigma, log_delta_target, eps_hi = (sg(v) for v in (q, sigma, log_delta_target, eps_hi))

    def below(e):  # (2, …) + e's shape: the upper and the lower bound of δ(e) within the target
        return jnp.stack(_log_delta_bounds(q, sigma, e)[:2]) <= log_delta_target

    # both roots (of the upper and of the lower bound) in one bisection on log ε, each
    # evaluation of δ shared by both: every bound of δ is one copy of its program
    hi = jnp.broadcast_to(jnp.log(eps_hi), (2,) + eps_hi.shape)
    lo = hi - _SPAN
    pick = np.arange(2)

    def body(_, bracket):
        lo, hi = bracket
        mid = 0.5 * (lo + hi)
        ok = below(jnp.exp(mid))[pick, pick]  # upper bound at the first, lower at the second
        return jnp.where(ok, lo, mid), jnp.where(ok, mid, hi)

    _, hi = jax.lax.fori_loop(0, _BISECTIONS, body, (lo, hi))
    # at the floor ε_hi·e^−42, at ε_hi and at 0
    (floor_up, ok, zero_up), (floor_low, _, zero_low) = below(
        jnp.stack([eps_hi * np.exp(-_SPAN), eps_hi, jnp.zeros_like(eps_hi)]))
    eps_up, eps_low = jnp.exp(hi)
    eps = jnp.where(zero_up, 0.0, jnp.where(floor_up, eps_hi * np.exp(-_SPAN), eps_up))
    # the true ε is at least the root of the lower bound (0 where that holds at 0)
    lower = jnp.where(zero_low, 0.0, jnp.where(floor_low, 0.0, eps_low))
    rel = jnp.where(eps > 0, (eps - lower) / jnp.where(eps > 0, eps, 1.0), 0.0)
    # derivatives in q and σ by the implicit function theorem (the value is unchanged):
    # dε = −d log δ / (∂ log δ/∂ε) at the root
    inner = (eps > 0) & ~floor_up
    e_safe = jnp.where(inner, eps, 1.0)
    log_d, slope = jax.jvp(lambda e: _log_delta_bounds(q_in, sigma_in, e)[0], (e_safe,),
                           (jnp.ones_like(e_safe),))
    slope = sg(slope)
    usable = inner & (slope < 0)
    corr = (log_d - sg(log_d)) / jnp.where(usable, slope, -1.0)
    return eps - jnp.where(usable, corr, 0.0), rel, ok
