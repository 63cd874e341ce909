"""The privacy profile of two SGM steps, bracketed by convexity (private).

Two steps of the Sampled Gaussian Mechanism (the same q and σ) are the runs where the line
integral of :mod:`jaxrdp.profile` cancels most (nothing smooths the near-atom of the loss
at zero). Their profile is an expectation of the one-step closed form
(:mod:`jaxrdp._one_step`) over the first step's output x, in either direction
(δ_T(ε) = E_P[(1 − e^{ε − L_T})₊], L_2 = ℓ(x₁) + ℓ(x₂)):

    δ_2(ε) = E_{x∼P}[h(t(x))],   h(t) = δ_1(log t),   t(x) = e^{ε − ℓ(x)},

with ℓ = log dP/dQ monotone in x. h is convex and decreasing in t (a hockey-stick
divergence, E_P[(1 − t·dQ/dP)₊], is a maximum of functions affine in t), and on any set C,
E_P[t(x); C] = e^ε·Q(C). On each cell C_i of a partition of the real line, with P_i = P(C_i),
t̄_i = e^ε Q(C_i)/P_i and t_i^−, t_i^+ the ends of t over the cell, convexity gives

    P_i·h(t̄_i)  ≤  E_P[h(t); C_i]  ≤  P_i·(h(t_i^−) + λ_i (h(t_i^+) − h(t_i^−))),
    λ_i = (t̄_i − t_i^−)/(t_i^+ − t_i^−)

(Jensen's inequality below, the chord above; where t_i^+ = ∞ the chord is h(t_i^−), h being
decreasing). Both sums hold for *any* partition, so the cells' placement only decides how
tight the bracket is, never whether it holds: the cells (all masses are Gaussian tails,
:func:`_log_gauss_cells`; the ratios Q_i/P_i on narrow cells from the cell itself,
:func:`_log_local_ratio`) are placed by equidistributing a first, uniform pass's gaps (the
gap is second order in a cell's width; its third root spreads it evenly). h at negative
arguments comes from the duality δ_{P,Q}(e) = 1 − e^e + e^e δ_{Q,P}(−e), so both directions
need the one-step closed form at |e| only.

The bracket is the answer's error bound: δ(ε) is the chord sum (raised by the rounding of
every term, :func:`_bracket`), its relative error bound is (upper − lower)/lower, and ε(δ)
is searched on the upper sum (every evaluated ε whose upper sum is within δ is sound): a
coarse search on the first pass's cells places the cells once, and only t moves with ε on
them after that.
Float64 and concrete inputs only: :mod:`jaxrdp.profile` calls it on two-step runs of
concrete calls.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import log_ndtr

from jaxrdp import _one_step

_EPS = float(np.finfo(np.float64).eps)
_ULPS = 64.0  # rounding allowed per term, as in _one_step
_WINDOW = 13.0  # the cells cover [−13σ, 1 + 13σ] (each Gaussian's mass beyond: below 1e-38)
_FIRST_CELLS = 256  # uniform cells of the placing pass
CELLS = 2048  # cells of the bracket
_FLOOR = 1e-3  # every placing cell keeps this share of the largest weight
_SEARCH = 12  # Illinois steps of the ε search on [0, ε_hi] (converged by 8 on the references)
_NEAR = 1e-2  # the second search starts from [ε₀(1 − _NEAR), ε₀] where that brackets the root
_SEARCH_FINE = 4  # its Illinois steps (_SEARCH where the root lies below it)
_PROBE = 1e-4  # relative step of the slope's difference quotient at the found ε


def _log_one_step(q, sigma, e, remove):
    """log δ_1(e) of one direction (``remove``: boolean, broadcast) at any real ``e``
    (``±∞`` included), and its relative error bound.

    ``e ≥ 0``: :func:`jaxrdp._one_step.log_delta_of`. ``e < 0``: the duality
    δ_{P,Q}(e) = 1 − e^e + e^e δ_{Q,P}(−e) (remove and add are each other's swap), a sum of
    non-negative terms, so the one-step bound holds for it too.
    """
    finite = jnp.isfinite(e)
    e_safe = jnp.where(finite, e, 0.0)
    neg = e_safe < 0
    log_d, eta = _one_step.log_delta_of(q, sigma, jnp.abs(e_safe), remove != neg)
    log_gap = jnp.log(-jnp.expm1(jnp.where(neg, e_safe, -1.0)))  # log(1 − e^e)
    log_d = jnp.where(neg, jnp.logaddexp(log_gap, e_safe + log_d), log_d)
    # e = −∞: δ = 1; e = +∞: δ = 0
    log_d = jnp.where(finite, log_d, jnp.where(e < 0, 0.0, -jnp.inf))
    return log_d, jnp.where(finite, eta + 4.0 * _EPS, 0.0)


def finite_abs(v):
    """|v| where v is finite, else 0: the size of a term in a rounding allowance (infinite
    terms are handled by the callers' own rules)."""
    return jnp.where(jnp.isfinite(v), jnp.abs(v), 0.0)


def _log_gauss_cells(mean, sigma, edges):
    """log N(mean, σ²)((a_i, a_{i+1})) of consecutive ``edges`` (last axis, ±∞ allowed), and
    each value's relative error bound. Differences of tails on the side away from the mean."""
    z = (edges - mean[..., None]) / sigma[..., None]
    za, zb = z[..., :-1], z[..., 1:]
    upper = za > 0  # both ends above the mean: upper tails, else lower tails
    big = jnp.where(upper, log_ndtr(-za), log_ndtr(zb))
    small = jnp.where(upper, log_ndtr(-zb), log_ndtr(za))
    d = jnp.minimum(small - big, 0.0)
    gap = -jnp.expm1(d)
    log_mass = big + jnp.log(jnp.where(gap > 0, gap, 1.0))
    rho = _ULPS * _EPS * (1.0 + (finite_abs(big) + finite_abs(small))
                          / jnp.where(gap > 0, gap, 1.0))
    return jnp.where(gap > 0, log_mass, -jnp.inf), rho


#: Gauss–Legendre rule of :func:`_log_local_ratio` and the Bernstein ellipse of its bound
_LOCAL_NODES, _LOCAL_WEIGHTS = np.polynomial.legendre.leggauss(8)
_LOCAL_RHO = 16.0
#: (32/15)·ρ^{−2n}/(ρ² − 1): Trefethen, ATAP (2019), Thm 19.3, on an interval of half-width
#: w/2 and relative to w times the integrand's minimum there
_LOCAL_CONSTANT = 32.0 / 15.0 * _LOCAL_RHO ** (-2.0 * _LOCAL_NODES.size) / (_LOCAL_RHO ** 2 - 1.0)
#: the bound's disc |y| ≤ reach·w: it contains the ellipse (semi-major axis (ρ + 1/ρ)/4·w =
#: 4.02·w about the cell's midpoint) with room to spare, 4.52·w
_LOCAL_REACH = 0.5 * (1.0 + (_LOCAL_RHO + 1.0 / _LOCAL_RHO) / 2.0)


def _log_local_ratio(sigma, edges):
    """log R_i = log(N(1, σ²)(C_i)/N(0, σ²)(C_i)) of each finite cell C_i = (a, b), computed
    on the cell itself, and its relative error bound (+∞ on the end cells).

    With m the cell's midpoint, w = b − a and s = 1/σ², R_i = e^{s(2m − 1)/2}·J(s(1 − m))/J(−sm),
    J(β) = ∫_{−w/2}^{w/2} e^{βy − sy²/2} dy: a ratio of two integrals of positive, entire
    functions, by an 8-point Gauss–Legendre rule. Its error is at most (w/2)(64/15)·M·ρ^{−16}/(ρ² − 1)
    for |f| ≤ M on the Bernstein ellipse of parameter ρ = 16 (Trefethen, *Approximation
    Theory and Approximation Practice*, Thm 19.3), which lies in the disc |y| ≤ 4.02·w (the
    bound takes M on |y| ≤ 4.52·w, a larger disc), and
    J ≥ w·e^{−|β|w/2 − sw²/8}; so the bound below holds on every cell, and it is small where
    the cell is narrow against the Gaussians' scale. The differences of Gaussian tails in
    :func:`_log_gauss_cells` lose a factor of the tails over the cell's mass there instead
    (on 8 192 cells at ε near 1e-4, their rounding carried into t̄ was what bounded the
    bracket's gap).
    """
    s = 1.0 / sigma[..., None] ** 2
    a, b = edges[..., :-1], edges[..., 1:]
    finite = jnp.isfinite(a) & jnp.isfinite(b)
    a, b = jnp.where(finite, a, 0.0), jnp.where(finite, b, 1.0)
    m, w = 0.5 * (a + b), b - a
    y = 0.5 * w[..., None] * _LOCAL_NODES
    beta0, beta1 = -s * m, s * (1.0 - m)
    log_f = lambda beta: beta[..., None] * y - 0.5 * s[..., None] * y ** 2
    log_j = lambda beta: jax.nn.logsumexp(log_f(beta), axis=-1, b=_LOCAL_WEIGHTS)
    log_r = 0.5 * s * (2.0 * m - 1.0) + log_j(beta1) - log_j(beta0)
    reach = _LOCAL_REACH * w

    def quadrature_bound(beta):
        return _LOCAL_CONSTANT * jnp.exp(jnp.minimum(
            jnp.abs(beta) * (reach + 0.5 * w) + 0.5 * s * (reach ** 2 + 0.25 * w ** 2), 700.0))

    # the rule on both, the sums and the exponents' rounding, the exponent in front of the
    # ratio (s itself rounded), and the cell the rule integrates: m and w are rounded, so its
    # ends may differ from a and b by eps·(|a| + |b|), and |∂ log R/∂(an end)| ≤
    # s·e^{sw}·e^{|β|w + sw²} (the density ratio e^{s(x − 1/2)} varies by e^{sw} over the cell)
    spread = jnp.minimum((s + jnp.abs(beta0) + jnp.abs(beta1)) * w + s * w ** 2, 50.0)
    rho = (quadrature_bound(beta0) + quadrature_bound(beta1) + 64.0 * _EPS
           + 8.0 * _EPS * (jnp.abs(0.5 * s * (2.0 * m - 1.0)) + (jnp.abs(beta0) + jnp.abs(beta1)
                                                                   + s * w) * w + 1.0)
           + 4.0 * _EPS * s * (jnp.abs(a) + jnp.abs(b)) * jnp.exp(spread))
    return log_r, jnp.where(finite & (w > 0), rho, jnp.inf)


def _cells(q, sigma, edges):
    """The ε-free part of the cells of one direction pair: log P_i, log Q_i − log P_i, the
    loss ℓ at the cells' ends, the masses' error bound and that of Q_i/P_i. ``edges``:
    (2, n, k+1) increasing, ±∞ at the ends; axis 0 is (remove, add). Returns arrays of shape
    (2, n, k) (ℓ: (2, n, k+1)); :func:`_shift` adds ε.

    Q_i/P_i is 1/(1 − q + qR_i) (remove) or 1 − q + qR_i (add), R_i = N(1, σ²)(C_i)/N(0, σ²)(C_i),
    each R_i from the differences of tails or from :func:`_log_local_ratio`, whichever bounds
    its error closer (the error of R_i passes to Q_i/P_i at most as it is)."""
    q_, s_ = q[None, :], sigma[None, :]
    l0, r0 = _log_gauss_cells(jnp.zeros_like(q_), jnp.broadcast_to(s_, edges.shape[:2]), edges)
    l1, r1 = _log_gauss_cells(jnp.ones_like(q_), jnp.broadcast_to(s_, edges.shape[:2]), edges)
    log_q, log_1mq = jnp.log(q_)[..., None], jnp.log1p(-q_)[..., None]
    l_mix = jnp.logaddexp(log_1mq + l0, log_q + l1)
    r_mix = jnp.maximum(r0, r1) + 4.0 * _EPS
    remove = (jnp.arange(2) == 0)[:, None, None]
    log_p, log_q_cell = jnp.where(remove, l_mix, l0), jnp.where(remove, l0, l_mix)
    rho = r0 + r_mix  # of P_i (and of the tails' Q_i/P_i: both masses enter it)
    log_r, rho_local = _log_local_ratio(s_, edges)
    mixed = jnp.logaddexp(log_1mq, log_q + log_r)  # log(1 − q + qR), rounding 4eps(|·| + 2)
    local = rho_local < rho
    log_ratio = jnp.where(local, jnp.where(remove, -mixed, mixed), log_q_cell - log_p)
    rho_ratio = jnp.where(local, rho_local + 8.0 * _EPS * (finite_abs(mixed) + 2.0), rho)
    # the loss at the ends: ℓ = log(1 − q + q e^{(2x − 1)/2σ²}) (remove), −ℓ (add)
    x = jnp.where(jnp.isfinite(edges), edges, 0.0)
    ell = jnp.log1p(q_[..., None] * jnp.expm1((2.0 * x - 1.0) / (2.0 * s_[..., None] ** 2)))
    ell = jnp.where(edges == -jnp.inf, log_1mq, jnp.where(edges == jnp.inf, jnp.inf, ell))
    return log_p, log_ratio, jnp.where(remove, ell, -ell), rho, rho_ratio


def _shift(cells, eps):
    """(log P_i, log t̄_i, log t at the ends, ρ of P_i, ρ of t̄_i) of :func:`_cells` at ε
    ``(n,)``: t = e^{ε − ℓ}, t̄_i = e^ε Q_i/P_i."""
    log_p, log_ratio, ell, rho, rho_ratio = cells
    log_t = jnp.where(jnp.isinf(ell), -ell, eps[None, :, None] - ell)
    return log_p, eps[None, :, None] + log_ratio, log_t, rho, rho_ratio


def _bracket(q, sigma, eps, cells, with_lower=True):
    """(upper, lower) sums of δ_2 per direction (2, n), and each cell's upper gap (2, n, k);
    ``with_lower=False``: the upper sum only (lower and gaps None). ``cells``: :func:`_cells`
    of any partition.

    The upper sum is raised and the lower lowered by the rounding of every term: the masses'
    (ρ, relative), the one-step values' (η, relative), and t̄'s (its ratio's bound, see
    :func:`_cells`) through λ (upper) or through the slope of h at t̄ (lower; bounded by the
    chord slope of the next cell towards smaller t, h being convex).
    """
    log_p, log_tbar, log_t, rho, rho_ratio = _shift(cells, eps)
    remove = (jnp.arange(2) == 0)[:, None, None]
    qe, se = q[None, :, None], sigma[None, :, None]
    h_ends, eta_ends = _log_one_step(qe, se, log_t, remove)
    h_ends = jnp.exp(h_ends)
    # order each cell's ends by t: remove's t falls with x, add's rises
    lt_a, lt_b = log_t[..., :-1], log_t[..., 1:]
    h_a, h_b = h_ends[..., :-1], h_ends[..., 1:]
    lo_t, hi_t = jnp.where(remove, lt_b, lt_a), jnp.where(remove, lt_a, lt_b)
    h_lo, h_hi = jnp.where(remove, h_b, h_a), jnp.where(remove, h_a, h_b)
    # λ = (t̄ − t⁻)/(t⁺ − t⁻), scale-free; t⁻ = 0 (h = 1 there) and t⁺ = ∞ handled apart
    span = hi_t - lo_t
    finite_hi = jnp.isfinite(hi_t)
    from_zero = lo_t == -jnp.inf
    safe = lambda v: jnp.where(jnp.isfinite(v), v, 0.0)
    lam_rel = jnp.expm1(safe(log_tbar - lo_t)) / jnp.where(span > 0, jnp.expm1(safe(span)), 1.0)
    lam_zero = jnp.exp(safe(log_tbar - hi_t))  # t⁻ = 0: λ = t̄/t⁺
    lam = jnp.where(from_zero, lam_zero, jnp.where(span > 0, lam_rel, 0.0))
    lam = jnp.clip(lam, 0.0, 1.0)
    chord = jnp.where(finite_hi, h_lo + lam * (h_hi - h_lo), h_lo)
    # rounding of t̄ (its ratio's bound + rounding of its log) through λ: Δλ = t̄·Δ/(t⁺ − t⁻)
    d_tbar = rho_ratio + 4.0 * _EPS * (1.0 + jnp.abs(safe(log_tbar)))
    tbar_over_span = jnp.where(from_zero, lam_zero,
                               jnp.exp(safe(log_tbar - lo_t)) / jnp.where(
                                   span > 0, jnp.expm1(safe(span)), 1.0))
    err_lam = jnp.where(finite_hi & (span > 0), (h_lo - h_hi) * tbar_over_span * d_tbar, 0.0)
    p = jnp.exp(log_p)
    eta_cell = jnp.maximum(eta_ends[..., :-1], eta_ends[..., 1:])
    up_cell = p * (chord * (1.0 + rho + eta_cell) + err_lam)
    n_terms = log_p.shape[-1]
    upper = jnp.sum(up_cell, axis=-1) * (1.0 + 2.0 * n_terms * _EPS)
    if not with_lower:
        return upper, None, None
    h_bar, eta_bar = _log_one_step(qe, se, log_tbar, remove)
    h_bar = jnp.exp(h_bar)
    # the lower side: |h'(t̄)| ≤ the chord slope of the neighbour towards smaller t
    slope = jnp.where(finite_hi & (span > 0),
                      (h_lo - h_hi) / jnp.where(span > 0, jnp.exp(safe(lo_t)) * jnp.expm1(
                          safe(span)), 1.0), 0.0)
    slope = jnp.where(from_zero, (h_lo - h_hi) / jnp.exp(safe(hi_t)), slope)
    nb = jnp.where(remove, jnp.roll(slope, -1, axis=-1), jnp.roll(slope, 1, axis=-1))
    nb = jnp.maximum(nb, slope)  # the end cells (rolled around) keep their own slope
    err_bar = nb * jnp.exp(safe(log_tbar)) * d_tbar
    low_cell = p * (h_bar * (1.0 - rho - eta_bar) - err_bar)
    lower = jnp.maximum(jnp.sum(low_cell, axis=-1) * (1.0 - 2.0 * n_terms * _EPS), 0.0)
    return upper, lower, up_cell - p * h_bar


def _uniform_edges(sigma, count):
    """(2, n, count + 1) cell edges: ±∞ at the ends, uniform on the window between."""
    inner = jnp.linspace(0.0, 1.0, count - 1)
    lo, hi = -_WINDOW * sigma, 1.0 + _WINDOW * sigma
    x = lo[:, None] + (hi - lo)[:, None] * inner
    inf = jnp.full(sigma.shape + (1,), jnp.inf)
    return jnp.broadcast_to(jnp.concatenate([-inf, x, inf], -1), (2,) + x.shape[:1] + (count + 1,))


def _first_pass(q, sigma):
    """The placing pass's uniform edges (:data:`_FIRST_CELLS` cells) and their
    :func:`_cells`."""
    edges = _uniform_edges(sigma, _FIRST_CELLS)
    return edges, _cells(q, sigma, edges)


def _placed_edges(q, sigma, eps, first, cells=CELLS):
    """(2, n, cells + 1) edges that spread the gaps of the first pass (:func:`_first_pass`)
    at ε evenly (their third root)."""
    first, first_cells = first
    _, _, gap = _bracket(q, sigma, eps, first_cells)
    inner = gap[..., 1:-1]  # the window's cells
    w = jnp.cbrt(jnp.maximum(inner, 0.0) / jnp.maximum(jnp.max(inner, -1, keepdims=True),
                                                       1e-300)) + _FLOOR
    cum = jnp.concatenate([jnp.zeros(w.shape[:-1] + (1,)), jnp.cumsum(w, -1)], -1)
    target = jnp.linspace(0.0, 1.0, cells - 1) * cum[..., -1:]
    x = first[..., 1:-1]
    placed = jax.vmap(jax.vmap(jnp.interp))(target, cum, x)
    inf = jnp.full(placed.shape[:-1] + (1,), jnp.inf)
    return jnp.concatenate([-inf, placed, inf], -1)


def delta_bounds(q, sigma, eps, with_lower=True, cells: int = CELLS):
    """Upper and lower bounds of δ_2(ε) per direction, ``(2, n)`` each (axis 0: remove, add;
    ``with_lower=False``: the lower is None).

    Args:
      q, sigma: ``(n,)`` one step's rate in (0, 1) and noise multiplier (> 0).
      eps: ``(n,)`` ε ≥ 0.
      cells: cells of the bracket (a Python int; the gap shrinks about as cells⁻²).
    """
    edges = _placed_edges(q, sigma, eps, _first_pass(q, sigma), cells)
    return _bracket(q, sigma, eps, _cells(q, sigma, edges), with_lower)[:2]


@functools.partial(jax.jit, static_argnames=("cells",))
def log_delta(q, sigma, eps, cells: int = CELLS):
    """(log δ_rem, log δ_add, relative error bound) of two steps at ε, ``(n,)`` each: the
    upper sums of :func:`delta_bounds` on ``cells`` cells (static); the bound is err/est of
    the bracket of max(δ_rem, δ_add) about its midpoint, (U − L)/(U + L), as the line
    integral states its own (the truth is at least U·(1 − rel)/(1 + rel) = L)."""
    upper, lower = delta_bounds(q, sigma, eps, cells=cells)
    top, bottom = jnp.max(upper, 0), jnp.max(lower, 0)
    rel = (top - bottom) / jnp.where(top > 0, top + bottom, 1.0)  # err/est about the midpoint
    return jnp.log(upper[0]), jnp.log(upper[1]), jnp.where(top == 0, 0.0, rel)


def _illinois(f, a, fa, b, fb, steps):
    """``steps`` Illinois steps on [a, b] with f(a) > 0 ≥ f(b) (elementwise); the last b and
    f(b) (every b kept has f(b) ≤ 0 where the first had). ``steps``: an int, or per element
    (an element stops after its own count, so its result does not depend on the others)."""
    steps = jnp.broadcast_to(jnp.asarray(steps), a.shape)

    def body(i, state):
        a, fa, b, fb, side = state
        fa_, fb_ = jnp.minimum(fa, 1e300), jnp.maximum(fb, -1e300)
        c = b - fb_ * (b - a) / (fb_ - fa_)
        c = jnp.where(jnp.isfinite(c) & (c > a) & (c < b), c, 0.5 * (a + b))
        fc = f(c)
        right = fc <= 0  # c becomes b
        # Illinois: halve the kept end's value when the same end is kept twice
        fa = jnp.where(right, jnp.where(side == 1, 0.5 * fa, fa), fc)
        fb = jnp.where(right, fc, jnp.where(side == -1, 0.5 * fb, fb))
        a = jnp.where(right, a, c)
        b = jnp.where(right, c, b)
        new = (a, fa, b, fb, jnp.where(right, 1, -1).astype(side.dtype))
        live = i < steps
        return tuple(jnp.where(live, v, v0) for v, v0 in zip(new, state))

    state = (a, fa, b, fb, jnp.zeros(a.shape, jnp.int32))
    return jax.lax.fori_loop(0, jnp.max(steps), body, state)[2:4]


@functools.partial(jax.jit, static_argnames=("tolerance",))
def epsilon(q, sigma, log_delta_target, eps_hi, tolerance: float):
    """The smallest ε found whose upper bound of δ_2 is within ``exp(log_delta_target)``.

    Two Illinois searches for the root of log(upper δ_2) − log δ: on the first pass's
    uniform cells over [0, ε_hi], which places the cells at its root ε₀; then on those
    cells (computed once: only t moves with ε), from [ε₀(1 − 10⁻²), ε₀] where that brackets
    the root (``_SEARCH_FINE`` steps), from [0, ε₀(1 − 10⁻²)] where the root lies below
    (``_SEARCH`` steps; each run's result is its own, whatever the others in the call
    need); where it lies above ε₀, ε₀ is kept
    (sound on the first pass's cells). Any partition gives a sound upper sum, so every ε the
    second search keeps is sound. Its relative error bound comes from the lower sum at
    ε·(1 − r), r = 1.5× the gap's share of the slope (where that lower sum is still above
    δ, the true ε lies above ε·(1 − r)); where that r exceeds ``tolerance`` while the gap's
    share alone is within it, from the lower sum at ε·(1 − tolerance) as well (on 256
    random T = 2 runs across the domain, ε(δ) within 1e-6 in 88 of the 95 in the domain,
    from 81; ε itself unchanged; in all 95 since the ratios Q_i/P_i are computed on the
    cells, :func:`_log_local_ratio`).

    Args:
      q, sigma: ``(n,)`` as in :func:`delta_bounds`.
      log_delta_target: ``(n,)`` log δ.
      eps_hi: ``(n,)`` a sound upper bound of ε (RDP's), finite and > 0.
      tolerance: the relative error bound the caller settles for (static).

    Returns:
      ``(ε, rel, ok)``: ``ok`` false where the upper sums are above δ even at ε_hi (keep
      the fallback there); ``ε = 0`` where an upper sum at 0 is within δ.
    """
    def excess(cells):
        def f(e):
            upper = _bracket(q, sigma, e, cells, with_lower=False)[0]
            return jnp.log(jnp.max(upper, 0)) - log_delta_target
        return f

    zero = jnp.zeros_like(eps_hi)
    first = _first_pass(q, sigma)
    coarse = excess(first[1])
    f_zero_coarse = coarse(zero)
    eps0, f_coarse = _illinois(coarse, zero, f_zero_coarse, eps_hi, coarse(eps_hi), _SEARCH)
    cells = _cells(q, sigma, _placed_edges(q, sigma, eps0, first))
    f = excess(cells)
    # upper sums fall with ε on fixed cells: where the root on the placed cells lies within
    # [ε₀(1 − _NEAR), ε₀], it is searched there; where it lies above ε₀, ε₀ itself (sound
    # on the first pass's cells) is kept; where below, it is searched on [0, ε₀(1 − _NEAR)]
    near = eps0 * (1.0 - _NEAR)
    f_eps0, f_near = f(eps0), f(near)
    at_zero = f_zero_coarse <= 0  # ε = 0 already on the first pass's cells
    narrow = (f_eps0 <= 0) & (f_near > 0) & ~at_zero
    coarse_kept = (f_coarse <= 0) & (f_eps0 > 0) & ~at_zero
    below = (f_near <= 0) & ~at_zero
    # (where f(ε₀) > 0 and the first pass was above δ even at ε_hi: not ok)
    wide = jnp.any(below)  # f(0) and the longer search only where some run needs them
    f_zero = jax.lax.cond(wide, lambda: f(zero), lambda: f_near)
    a, fa = jnp.where(narrow, near, 0.0), jnp.where(narrow, f_near, f_zero)
    b, fb = jnp.where(narrow, eps0, near), jnp.where(narrow, f_eps0, f_near)
    b = _illinois(f, a, fa, b, fb, jnp.where(below, _SEARCH, _SEARCH_FINE))[0]
    eps = jnp.where(at_zero | (below & (f_zero <= 0)), 0.0, jnp.where(coarse_kept, eps0, b))
    ok = at_zero | narrow | coarse_kept | below
    # a lower end for the true ε: where the lower sum still exceeds δ
    upper, lower, _ = _bracket(q, sigma, eps, cells)
    f_eps = jnp.log(jnp.max(upper, 0)) - log_delta_target
    gap = f_eps + log_delta_target - jnp.log(jnp.maximum(jnp.max(lower, 0), 1e-300))
    # −d log δ/dε: the secant over [ε₀(1 − _NEAR), ε₀], or (where ε lies below) a difference
    # over 1e-4 of ε
    secant = (f_near - f_eps0) / jnp.maximum(eps0 - near, 1e-300)

    def probed():
        probe = eps * (1.0 - _PROBE)
        return jnp.where(below, (f(probe) - f_eps) / jnp.maximum(eps - probe, 1e-300), secant)

    slope = jnp.maximum(jax.lax.cond(wide, probed, lambda: secant), 1e-300)
    eps_safe = jnp.where(eps > 0, eps, 1.0)

    def below_truth(e):  # the true ε exceeds e where the lower sum at e is above δ
        _, lower_e, _ = _bracket(q, sigma, e, cells)
        return jnp.log(jnp.max(lower_e, 0)) > log_delta_target

    step = jnp.minimum(1.5 * gap / slope + 1e-12 * eps, eps)
    rel = jnp.where(eps > 0, jnp.where(below_truth(eps - step), step / eps_safe, jnp.inf), 0.0)
    # where that step is above the tolerance but the linearised gap itself is within it, the
    # lower sum is tried at ε·(1 − tolerance) as well (the 1.5 is a margin for the
    # linearisation; where the lower sum there is still above δ, none is needed)
    may_settle = (rel > tolerance) & (gap / slope < tolerance * eps) & (eps > 0)

    def at_tolerance():
        e_tol = eps - tolerance * (1.0 - 1e-9) * eps
        verified = may_settle & below_truth(e_tol)
        return jnp.where(verified, (eps - e_tol) / eps_safe, rel)

    return eps, jax.lax.cond(jnp.any(may_settle), at_tolerance, lambda: rel), ok
