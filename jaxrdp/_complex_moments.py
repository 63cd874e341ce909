"""log M(z) of one SGM step's privacy loss at complex z = c + iu (private).

remove: M(z) = A_{1+z} = E_{N(0,σ²)}[r(x)^{1+z}];  add: M(z) = B_{1+z} = E_{N(0,σ²)}[r(x)^{−z}],
with r(x) = (1−q) + q·e^{(2x−1)/2σ²} (Mironov–Talwar–Zhang 2019, Sec. 3).

Both are ∫ φ_σ(x) exp(w·ℓ(x)) dx with ℓ = log r real and w = 1+z (remove) or −z (add). On a
vertical line Re z = c the magnitude |φ e^{wℓ}| = φ e^{aℓ}, a = Re w, does not depend on u, so
one x-grid (the trapezoid rule on a window of ±12σ around the modes of φ e^{aℓ}, spectrally
accurate for this analytic, Gaussian-decaying integrand) is shared by every point u of the line.
Terms are exp(g_k − m + i·u·ℓ_k) with g_k = log(φ(x_k) h_x) + aℓ_k and m = max_k g_k, so no
overflow and no cancellation in ℓ. The error is estimated a posteriori from the nested rule
with step 2h_x (the even nodes): η_c = |S_h − S_2h|/|S_h|; the fine rule's error is taken as
10·η_c² (errors square on halving for analytic integrands) when η_c < 1e-3, else η_c, plus a
rounding term eps·(4 + |u|·max|ℓ| + max|g−m|)·Σ|terms|/|S|.
"""

from __future__ import annotations

import jax.numpy as jnp

_EPS = 2.220446049250313e-16
#: half-width of the x-window beyond the modes, in σ (Gaussian tail e^{-72}).
_WIDTH = 12.0


def log_r(x, q, sigma):
    """ℓ = log((1−q) + q e^{(2x−1)/2σ²}) and t = (2x−1)/2σ², elementwise, real."""
    t = (2.0 * x - 1.0) / (2.0 * sigma**2)
    small = t < 1.0
    t_small = jnp.where(small, t, 0.0)
    low = jnp.log1p(q * jnp.expm1(t_small))
    log1mq = jnp.where(q < 1.0, jnp.log1p(-jnp.where(q < 1.0, q, 0.0)), -jnp.inf)
    high = jnp.logaddexp(log1mq, jnp.log(q) + t)
    return jnp.where(small, low, high), t


def exponent(c, direction: str):
    """Real part a of w on the line Re z = c."""
    return 1.0 + c if direction == "remove" else -c


def grid(q, sigma, c, direction: str, nx: int):
    """Shared x-nodes (..., nx), step h_x (...) for the line Re z = c."""
    a = exponent(c, direction)
    if direction == "remove":
        lo = jnp.minimum(0.0, a) - _WIDTH * sigma - 1.5
        hi = jnp.maximum(0.0, a) + _WIDTH * sigma + 1.5
    else:
        lo = -c - _WIDTH * sigma - 1.5
        hi = _WIDTH * sigma + 1.5
    k = jnp.arange(nx, dtype=jnp.result_type(c))
    hx = (hi - lo) / (nx - 1)
    return lo[..., None] + hx[..., None] * k, hx


def _log_terms(q, sigma, c, direction, nx):
    x, hx = grid(q, sigma, c, direction, nx)
    qe, se = q[..., None], sigma[..., None]
    ell, t = log_r(x, qe, se)
    a = exponent(c, direction)[..., None]
    g = -(x**2) / (2.0 * se**2) - jnp.log(jnp.sqrt(2.0 * jnp.pi) * se) + jnp.log(hx)[..., None]
    return x, ell, t, g, g + a * ell, a


def real_stats(q, sigma, c, direction: str, nx: int):
    """(κ, κ', κ'', log TV) at real z = c.

    κ = log M(c); κ', κ'' its first two derivatives (mean and variance of the loss under the
    tilted measure); TV the total variation of h = φ r^a/ℓ' (from the grid, ×1.05), which gives
    |M(c+iu)| ≤ TV/|u| by one integration by parts.
    """
    x, ell, t, g, ga, a = _log_terms(q, sigma, c, direction, nx)
    m = jnp.max(ga, axis=-1, keepdims=True)
    wts = jnp.exp(ga - m)
    s0 = jnp.sum(wts, axis=-1)
    loss = ell if direction == "remove" else -ell
    k1 = jnp.sum(wts * loss, axis=-1) / s0
    k2 = jnp.sum(wts * (loss - k1[..., None]) ** 2, axis=-1) / s0
    kappa = m[..., 0] + jnp.log(s0)
    # h = φ r^a / ℓ', ℓ' = q e^t/(σ² r); log h without the step h_x.
    se = sigma[..., None]
    log_h = ga - jnp.log(((jnp.max(x, -1) - jnp.min(x, -1)) / (nx - 1)))[..., None]
    log_h = log_h + ell - jnp.log(q)[..., None] - t + 2.0 * jnp.log(se)
    mh = jnp.max(log_h, axis=-1, keepdims=True)
    hv = jnp.exp(log_h - mh)
    tv = jnp.sum(jnp.abs(jnp.diff(hv, axis=-1)), axis=-1) + hv[..., 0] + hv[..., -1]
    log_tv = mh[..., 0] + jnp.log(1.05 * tv)
    return kappa, k1, k2, log_tv


def log_moment_line(q, sigma, c, u, direction: str, nx: int):
    """log M(c + iu) and its relative error estimate.

    Args:
      q, sigma, c: shape ``B`` (c > 0).
      u: shape ``B + (N,)``.
      direction: ``"remove"`` or ``"add"``.
      nx: number of x-nodes (static, odd is best for the nested estimate).

    Returns:
      ``(log_m, eta)``: complex log M (principal branch) and relative error bound estimate,
      both of shape ``B + (N,)``.
    """
    x, ell, t, g, ga, a = _log_terms(q, sigma, c, direction, nx)
    m = jnp.max(ga, axis=-1, keepdims=True)
    sign = 1.0 if direction == "remove" else -1.0
    phase = sign * u[..., :, None] * ell[..., None, :]
    mag = jnp.exp(ga - m)[..., None, :]
    terms = mag * jnp.exp(1j * phase)
    fine = jnp.sum(terms, axis=-1)
    coarse = 2.0 * jnp.sum(terms[..., ::2], axis=-1)
    absfine = jnp.maximum(jnp.abs(fine), 1e-300)
    eta_c = jnp.abs(fine - coarse) / absfine
    eta_disc = jnp.where(eta_c < 1e-3, 10.0 * eta_c**2, eta_c)
    amp = jnp.sum(mag, axis=-1) / absfine
    spread = jnp.max(jnp.abs(ga - m), axis=-1, keepdims=True)
    umax = jnp.abs(u) * jnp.max(jnp.abs(ell), axis=-1, keepdims=True)
    eta_round = _EPS * (4.0 + umax + spread) * amp
    log_m = m + jnp.log(fine)
    return log_m, eta_disc + eta_round
