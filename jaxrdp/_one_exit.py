"""The SGM's privacy profile where at most one step's loss is large, bracketed (private).

Where very few steps are sampled (q·√T tiny, σ small), one rare step whose output lands far
out carries the whole loss: the other steps' losses are tiny. The line integral of
:mod:`jaxrdp.profile` and the Chernoff split of :mod:`jaxrdp._split_chernoff` both bound such
runs without a lower end. This bracket has both ends there.

Remove direction, one step's output law P = (1 − q)N(0, σ²) + qN(1, σ²) against
Q = N(0, σ²), loss ℓ(x) = log(1 − q + q·e^{(2x − 1)/2σ²}) (increasing in x), T steps,
L = Σ_t ℓ(x_t). Let K = {x: ℓ(x) ≤ k} with k ≤ ε/T ("kept"), p = P(x ∉ K), and split δ(ε) =
E_{P^T}[(1 − e^{ε − L})₊] by how many steps leave K:

* none: then L ≤ T·k ≤ ε, and the term is 0 (exactly);
* two or more: the term lies in [0, P(two or more leave)] ⊂ [0, C(T, 2)·p²];
* exactly one (T choices of which): with Y = e^{−(L − ℓ(x₁))} the other steps' factor,

      T·P(K)^{T−1}·E[g(Y) | x₂ … x_T ∈ K],   g(y) = E_P[(1 − y·e^{ε − ℓ(x)})₊; x ∉ K].

  g is convex (a maximum of affine functions of y) and decreasing, so by Jensen the term is
  at least T·P(K)^{T−1}·g(μ), μ = E[Y | K] = (Q(K)/P(K))^{T−1} (E_P[e^{−ℓ}; K] = Q(K)), and,
  by Taylor's theorem with E[Y − μ | K] = 0, at most that plus T·sup g''·Var(Y | K)/2.

Since μ ≥ 1 and ℓ ≤ k ≤ ε on K, g(μ) = δ₁(ε + log μ), the one-step profile
(:mod:`jaxrdp._one_step`, with its own error bound). The other pieces, in closed form:

* Var(Y | K) = E[Y² | K] − μ², with E[Y² | K] ≤ ((1 + χ)/P(K))^{T−1} where
  E_P[e^{−2ℓ}] = E_Q[1/(1 + a)], a = q(w − 1), w = e^{(2x−1)/2σ²}, and 1/(1 + a) ≤ 1 − a +
  a²/(1 − q) (a ≥ −q), E_Q[w] = 1, E_Q[w²] = e^{1/σ²}: χ = q²(e^{1/σ²} − 1)/(1 − q).
* sup g'' over Y's range (Y ≥ e^{−(T−1)k}): for y with e = ε + log y ≥ k,
  g(y) = δ₁(e) and g''(y) = e^{2ε}·σ²·φ_σ(x*(e))/(e^e − 1 + q), x*(e) the output of loss e
  (decreasing in e where x* ≥ 0); for e < k, g is affine in y. So the supremum is at most
  that expression at e_min = max(k, ε − (T−1)k), with φ_σ(max(x*, 0)).

Every k gives a sound bracket; the best of :data:`_FRACTIONS` (k = f·ε/T) is taken. The add
direction's loss is at most −log(1 − q), so its δ is 0 from ε = −T·log(1 − q) on; below that
the bracket gives no upper bound (its lower bound of the remove direction still holds).
Rounding: the Gaussian masses by 64 eps per unit of their logarithm, the sums and exponents
by generous multiples of eps (:data:`_ALLOWANCE`), μ's logarithm by its parts' errors.

Measured on the domain sample's loose runs (``benchmarks/bench_profile_domain.py``): where
q·√T is below about 1e-5 and σ below about 0.7 the bracket closes to 1e-8–1e-6 of δ; where
more steps are sampled, or many tiny losses add up (σ large), the curvature and two-exit
terms open it (``benchmarks/README.md``).
Float64 and concrete inputs: :mod:`jaxrdp.profile` calls it on single-segment runs that its
other methods leave above the tolerance.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import log_ndtr

from jaxrdp import _logmath, _one_step, _split_chernoff

_EPS = float(np.finfo(np.float64).eps)
#: the cuts k = f·ε/T tried (f < 1 keeps T·k below ε with room for the rounding of x_k)
_FRACTIONS = np.linspace(0.2, 0.9, 15)
_ULPS = 64.0  # relative rounding allowed per Gaussian mass and per unit of its logarithm
_ALLOWANCE = 64.0 * _EPS  # per unit of the sums' terms, on the final logarithms
_LOG_SQRT_2PI = 0.5 * np.log(2.0 * np.pi)


def _x_of_loss(q, sigma, e):
    """The output x with ℓ(x) = e > log(1 − q) (remove direction)."""
    return sigma ** 2 * (jnp.log(jnp.expm1(e) + q) - jnp.log(q)) + 0.5


def _log_tails(q, sigma, x):
    """log P(X > x) under P (the mixture) and under Q = N(0, σ²), with their rounding
    allowances (relative)."""
    log_q_tail = log_ndtr(-x / sigma)
    log_p_tail = jnp.logaddexp(jnp.log1p(-q) + log_q_tail, jnp.log(q) + log_ndtr((1.0 - x) / sigma))
    return (log_p_tail, _ULPS * _EPS * (1.0 + jnp.abs(log_p_tail)),
            log_q_tail, _ULPS * _EPS * (1.0 + jnp.abs(log_q_tail)))


def _bracket_at(q, sigma, steps, eps, frac):
    """(log upper bound, log lower bound) of δ_rem(ε) with the cut k = frac·ε/T; the upper
    bound holds for max(δ_rem, δ_add) only where ε ≥ −T·log(1 − q) (the caller's check)."""
    t1 = steps - 1.0
    k = frac * eps / steps
    xk = _x_of_loss(q, sigma, k)
    log_p, rho_p, log_qo, rho_q = _log_tails(q, sigma, xk)
    p_up, p_low = jnp.exp(log_p) * (1.0 + rho_p), jnp.exp(log_p) * (1.0 - rho_p)
    qo_up, qo_low = jnp.exp(log_qo) * (1.0 + rho_q), jnp.exp(log_qo) * (1.0 - rho_q)
    log_pk_low, log_pk_up = jnp.log1p(-jnp.minimum(p_up, 1.0)), jnp.log1p(-p_low)
    log_qk_low, log_qk_up = jnp.log1p(-jnp.minimum(qo_up, 1.0)), jnp.log1p(-qo_low)
    # log μ = (T − 1)(log Q(K) − log P(K)) ≥ 0, bracketed
    slack = 4.0 * _EPS * (jnp.abs(log_qk_up) + jnp.abs(log_pk_up))
    lm_up = t1 * (log_qk_up - log_pk_low + slack)
    lm_low = jnp.maximum(t1 * (log_qk_low - log_pk_up - slack), 0.0)
    # g(μ) = δ₁(ε + log μ), decreasing in μ
    remove = jnp.ones_like(q, dtype=bool)
    ld_low, eta_low = _one_step.log_delta_of(q, sigma, eps + lm_up, remove)
    ld_up, eta_up = _one_step.log_delta_of(q, sigma, eps + lm_low, remove)
    log_t = jnp.log(steps)
    main_low = log_t + t1 * log_pk_low + ld_low + jnp.log(jnp.maximum(1.0 - eta_low, 1e-300))
    main_up = log_t + t1 * jnp.minimum(log_pk_up, 0.0) + ld_up + jnp.log1p(eta_up)
    # Var(Y | K) ≤ μ²·(e^D − 1), D = (T − 1)(log(1 + χ) − log P(K)) − 2 log μ
    log_chi = 2.0 * jnp.log(q) + _logmath.log_expm1(1.0 / sigma ** 2) - jnp.log1p(-q)
    l1c = jnp.where(log_chi > 0.0, log_chi + jnp.log1p(jnp.exp(-jnp.abs(log_chi))),
                    jnp.log1p(jnp.exp(jnp.minimum(log_chi, 0.0))))
    d_up = t1 * (l1c * (1.0 + 4.0 * _EPS) - log_pk_low) - 2.0 * lm_low
    d_up = d_up + 8.0 * _EPS * (t1 * (jnp.abs(l1c) + jnp.abs(log_pk_low)) + 2.0 * lm_up)
    log_var = 2.0 * lm_up + jnp.log(jnp.expm1(jnp.maximum(d_up, 0.0)))
    # sup g'' at e_min (k and the range's end moved by the rounding of k, the smaller the larger)
    e_min = jnp.maximum(k * (1.0 - 1e-9), eps - t1 * k * (1.0 + 1e-9))
    x_min = jnp.maximum(_x_of_loss(q, sigma, e_min), 0.0)
    log_gpp = (2.0 * eps + jnp.log(sigma) - _LOG_SQRT_2PI - 0.5 * (x_min / sigma) ** 2
               - jnp.log(jnp.expm1(e_min) + q)) + 1e-9
    curv = log_t + log_gpp + log_var - np.log(2.0)
    two = jnp.log(steps * t1 / 2.0) + 2.0 * jnp.log(jnp.minimum(p_up, 1.0))
    two = jnp.where(steps > 1.0, two, -jnp.inf)
    terms = jnp.stack([main_up, curv, two])
    log_up = jax.scipy.special.logsumexp(terms, axis=0)
    size = jnp.max(jnp.where(jnp.isfinite(terms), jnp.abs(terms), 0.0), axis=0) + 2.0 * eps
    allowance = _ALLOWANCE * (1.0 + size)
    return log_up + allowance, main_low - allowance


def _log_bracket(q, sigma, steps, eps):
    """(log upper, log lower) bounds of δ(ε) = max(δ_rem, δ_add) ``(n,)`` each: the best
    over the cuts; the upper bound is +∞ where the add direction is not yet 0."""
    f = jnp.asarray(_FRACTIONS)
    args = (a[..., None] for a in (q, sigma, steps, eps))
    up, low = _bracket_at(*args, f)
    up = jnp.min(jnp.where(jnp.isnan(up), jnp.inf, up), axis=-1)
    low = jnp.max(jnp.where(jnp.isnan(low), -jnp.inf, low), axis=-1)
    add_zero = eps >= _split_chernoff._add_loss_cap(q, steps) * (1.0 + 1e-12)
    up = jnp.where(add_zero & (eps > 0), jnp.minimum(up, 0.0), jnp.inf)
    return up, jnp.where(eps > 0, jnp.minimum(low, 0.0), -jnp.inf)


@jax.jit
def log_delta(q, sigma, steps, eps):
    """Upper bounds of (log δ_rem, log δ_add) at ε, and the bracket's relative error bound
    (err/est, as :func:`jaxrdp.profile._tighter_log_delta` reads it; ∞ where the bracket
    gives no upper bound), ``(n,)`` each, for one segment's q in (0, 1), σ > 0, T ≥ 2 and
    ε ≥ 0."""
    up, low = _log_bracket(q, sigma, steps, eps)
    ratio = jnp.exp(jnp.minimum(low - up, 0.0))
    rel = jnp.where(jnp.isfinite(up), (1.0 - ratio) / (1.0 + ratio), jnp.inf)
    add = jnp.where(jnp.isfinite(up), -jnp.inf, jnp.inf)
    return up, add, rel


_BISECTIONS = 64  # on log ε over _SPAN nats: a bracket of 5e-19 relative
_SPAN = float(np.log(1e4))  # the search covers [ε_hi·1e−4, ε_hi]


@jax.jit
def epsilon(q, sigma, steps, log_delta_target, eps_hi):
    """An ε whose bounded δ is within ``exp(log_delta_target)``, searched below ``eps_hi``
    (a sound ε, e.g. the caller's), and its relative error bound.

    Two bisections on log ε over [ε_hi·1e−4, ε_hi], sharing their evaluations: one keeps a
    point where the upper bound meets δ (sound whether or not the bound is monotone in ε),
    the other a point where the lower bound exceeds δ (the true ε lies above it).

    Returns:
      ``(ε, rel, ok)`` ``(n,)`` each: ``ok`` where the upper bound met δ at some evaluated
      point (else ε is ∞), rel = 1 − ε_low/ε (1 where no lower end was found).
    """
    def bounds(e):
        up, low = _log_bracket(q, sigma, steps, e)
        return up <= log_delta_target, low > log_delta_target

    top = jnp.log(eps_hi)
    ok_top, _ = bounds(eps_hi)
    init = (top - _SPAN, top, top - _SPAN, top, jnp.zeros_like(ok_top))

    def body(_, carry):
        lo_u, hi_u, lo_l, hi_l, found = carry
        mid_u, mid_l = 0.5 * (lo_u + hi_u), 0.5 * (lo_l + hi_l)
        meets, _ = bounds(jnp.exp(mid_u))
        _, above = bounds(jnp.exp(mid_l))
        return (jnp.where(meets, lo_u, mid_u), jnp.where(meets, mid_u, hi_u),
                jnp.where(above, mid_l, lo_l), jnp.where(above, hi_l, mid_l), found | above)

    _, hi_u, lo_l, _, found = jax.lax.fori_loop(0, _BISECTIONS, body, init)
    eps = jnp.where(ok_top, jnp.exp(hi_u), jnp.inf)
    low = jnp.where(found, jnp.exp(lo_l), 0.0)
    rel = jnp.where(ok_top, 1.0 - jnp.minimum(low, eps) / jnp.where(ok_top, eps, 1.0), jnp.inf)
    return eps, rel, ok_top
