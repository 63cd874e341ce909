"""A sound bound of the SGM's privacy profile where few steps are sampled (private).

Where q·T is small, the line integral of :mod:`jaxrdp.profile` can be far above the truth:
the per-step loss ℓ is tiny almost surely, and large only on rare outputs (a sampled step
whose noise lands many σ out), and that rare far mode dominates |M(c + iu)|^T along the
line and the moments that bound it (measured on the domain's loose runs: 5–47× dp_accounting's
PLD ε in the median). This bound splits the rare large losses off instead.

For one direction, with P the law of one step's output, L = Σ_t ℓ(x_t) the loss of T i.i.d.
steps and K any set of outputs ("kept"), let B be the event that some step leaves K. Then
for every c > 0 (Chernoff, with (1 − e^{−y})₊ ≤ κ(c)·e^{cy}, κ(c) = (c/(c+1))^c/(c+1), the
best constant),

    δ(ε) = E_P[(1 − e^{ε−L})₊] ≤ P(B) + κ(c)·e^{−cε}·E_P[e^{cL}; B^c]
         = 1 − (1 − P(x ∉ K))^T + κ(c)·e^{−cε}·(E_P[e^{cℓ(x)}; x ∈ K])^T,

exactly (the steps are independent, and on B^c every step's output lies in K). K is a
union of cells of the output axis taken from the low-loss end, and each cell's part of
E_P[e^{cℓ}] is bounded above by convexity: with u = e^{−ℓ}, e^{cℓ} = u^{−c} is convex in
u and E_P[u; C] = Q(C) exactly, so on a cell C (P-mass P_C, ū = Q(C)/P_C, u between its
ends u₋ ≤ u₊) the chord gives

    E_P[e^{cℓ}; C] ≤ P_C·(λ·u₋^{−c} + (1 − λ)·u₊^{−c}),   λ = (u₊ − ū)/(u₊ − u₋),

as in :mod:`jaxrdp._two_steps` (any cells: their placement decides the tightness, never
the validity). Cells: uniform in x and uniform in the loss over [−13σ, 1 + 13σ], ±∞ at
the ends; cuts K between blocks of :data:`_BLOCK` cells. Every c and cut gives a sound
bound; the smallest is returned, of two passes: :data:`C_GRID` (48 values of c, 1e-2 to
1e7) on 2 × 256 cells, then 24 values within a factor 1.6 of each direction's best c on
2 × 1 024 cells. Rounding is
bounded upward: the cells' masses and ū by their error bounds, the loss at the cells' ends
widened by its rounding (a chord over a wider interval still lies above u^{−c}), and the
sums and the exponent by generous multiples of eps.

The union term. Counting P(B) in full is loose where one rare sampled step carries the
loss: there the truth is about T·P(one step's loss exceeds ε), not P(some step leaves K).
With B_t the event that step t leaves K, E_P[(1 − e^{ε−L})₊; B] ≤ Σ_t E_P[(1 − e^{ε−L})₊; B_t],
and, the steps being independent, each term is E_P[F(ε − ℓ(x_t)); x_t ∉ K] with F the
profile of the other T − 1 steps. F is non-decreasing in the outside step's loss, and the
split bound above bounds it at any ε, so

    E_P[(1 − e^{ε−L})₊; B] ≤ T·Σ_{cells C ∉ K} P(C)·min(1, P(B')
                                   + κ(c')·e^{c'(ℓ_hi(C) − ε)}·(E_P[e^{c'ℓ}; K])^{T−1})

for every c' (chosen per cell from :data:`C_GRID`), with B' the event for the other
T − 1 steps and ℓ_hi(C) the cell's largest loss. The smaller of this and P(B) is taken, at
the cuts where T·P(x ∉ K) first falls below each of :data:`_UNION_OUT` (the union bound
overcounts by about (T·P(x ∉ K))², so the cut must leave few outputs out). ε(δ): a bisection
in log ε below the Chernoff split's ε, on the first pass's cells. On the domain runs where
the split alone gave 2.3–16.6 times PLD's ε (q·√T from 4e-7 to 8e-4, σ below 1, tiny δ) it
gives 1.05–1.83 times.

Add direction (P = N(0, σ²), Q the mixture): the loss is −ℓ, at most −log(1 − q); its
δ vanishes from ε = T·(−log(1 − q)) on (exact). Single segments (one q, σ and T) only;
float64 and concrete inputs: :mod:`jaxrdp.profile` takes the smaller of this and its own
answer on the runs whose answer has no lower end. The bound gives no lower end either:
where it is the better answer the status stays ``PROFILE_LOOSE``.

Measured (``tests/test_split_chernoff.py``): δ 1.14–8.4 times the 40-digit references of
T = 2, 3 and of the line-integral rows (median 2.6; a Chernoff bound's factor), ε(δ)
1.005–1.10 times the references; on few-sampled runs where the line gave 2.2–66 times
dp_accounting's PLD ε, 1.04–1.21 times it. About 22 ms per run on a 2 vCPU CPU.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxrdp import _two_steps

_finite_abs = _two_steps.finite_abs  # a term's size in the rounding allowances

_EPS = float(np.finfo(np.float64).eps)
#: (cells uniform in x, cells uniform in the remove loss) over the window of
#: :mod:`jaxrdp._two_steps`, of the first pass (over :data:`C_GRID`) and of the second
_CELLS = ((256, 256), (1024, 1024))
_BLOCK = 4  # the cuts K lie between blocks of this many cells (sums within a block)
#: the first pass's Chernoff exponents c (log-spaced)
C_GRID = np.geomspace(1e-2, 1e7, 48)
#: the union term's cuts: for each of these bounds on T·P(x ∉ K), the first cut meeting it
_UNION_OUT = 10.0 ** -np.arange(1.0, 13.0)
#: its ε search: bisection steps in log ε over [ε·_UNION_RANGE, ε] below the Chernoff split's ε
_UNION_STEPS, _UNION_RANGE = 24, 1e-6
#: the second pass's c, relative to the first pass's best (ε is sensitive to c: on eight
#: few-sampled runs 64 grid values over the first pass's range gave ε up to 20% higher than
#: 160 did)
C_FINE = np.geomspace(1.0 / 1.6, 1.6, 24)


def _log_kappa(c):
    """log κ(c) = log((c/(c+1))^c/(c+1)): (1 − e^{−y})₊ ≤ κ(c)·e^{cy} for every y."""
    return c * (jnp.log(c) - jnp.log1p(c)) - jnp.log1p(c)


def _edges(q, sigma, x_cells, loss_cells):
    """(2, n, k + 1) cell edges in x: uniform in x and uniform in the remove loss over the
    window [−13σ, 1 + 13σ], sorted, ±∞ at the ends."""
    lo, hi = -_two_steps._WINDOW * sigma, 1.0 + _two_steps._WINDOW * sigma
    x = lo[:, None] + (hi - lo)[:, None] * jnp.linspace(0.0, 1.0, x_cells)
    ell = lambda v: jnp.log1p(q[:, None] * jnp.expm1((2.0 * v - 1.0) / (2.0 * sigma[:, None] ** 2)))
    l_lo, l_hi = ell(lo[:, None]), ell(hi[:, None])
    level = l_lo + (l_hi - l_lo) * jnp.linspace(0.0, 1.0, loss_cells + 2)[1:-1]
    # x(ℓ) = σ² log((e^ℓ − 1 + q)/q) + 1/2, increasing
    x_of = sigma[:, None] ** 2 * jnp.log1p(jnp.maximum(jnp.expm1(level) / q[:, None], -1.0)) + 0.5
    x_of = jnp.clip(x_of, lo[:, None], hi[:, None])
    inner = jnp.sort(jnp.concatenate([x, x_of], -1), -1)
    inf = jnp.full(sigma.shape + (1,), jnp.inf)
    return jnp.broadcast_to(jnp.concatenate([-inf, inner, inf], -1),
                            (2,) + inner.shape[:1] + (inner.shape[-1] + 2,))


def _log_cell_moments(q, sigma, c, cells):
    """Per direction, cells in order of increasing loss: log of an upper bound of
    E_P[e^{cℓ}; C] at every c ``(2, n, C)`` (``(2, n, C, k)``), of the cells' P-masses and
    the cells' largest loss (widened upward by its rounding), ``(2, n, k)`` each; ``cells``:
    an entry of :data:`_CELLS`."""
    edges = _edges(q, sigma, *cells)
    log_p, log_ratio, ell, rho, rho_ratio = _two_steps._cells(q, sigma, edges)
    # the loss's rounding at the ends: ℓ = log1p(y), y = q·expm1(z), z = (2x − 1)/2σ²:
    # dℓ/dz ≤ 1, and log1p turns y's relative error into |y|/(1 + y) = |expm1(−ℓ)| times it
    # (large only where q is near 1 and x far below 0)
    x = jnp.where(jnp.isfinite(edges), edges, 0.0)
    z = jnp.abs((2.0 * x - 1.0) / (2.0 * sigma[None, :, None] ** 2))
    fin = jnp.isfinite(ell)
    ell_remove = jnp.where(fin[:1], ell[:1], 0.0)  # ℓ itself (the add direction's is −ℓ)
    amp = jnp.abs(jnp.expm1(-ell_remove))
    widen = 8.0 * _EPS * (jnp.where(fin, jnp.abs(ell) + amp, 0.0) + z + 1.0)
    # the add direction's loss decreases in x: reverse its cells (low loss first)
    remove = (jnp.arange(2) == 0)[:, None, None]
    flip = lambda v: jnp.where(remove, v, v[..., ::-1])
    log_p, log_ratio, rho, rho_ratio = flip(log_p), flip(log_ratio), flip(rho), flip(rho_ratio)
    ell, widen = flip(ell), flip(widen)
    l_lo = ell[..., :-1] - widen[..., :-1]  # the low-loss end of each cell, widened down
    l_hi = ell[..., 1:] + widen[..., 1:]  # and the high-loss end, widened up
    # ū = Q(C)/P(C) lowered by its error bound (a smaller ū only raises the chord)
    # (where its bound is that loose, ū = 0: the chord's largest value)
    log_u = jnp.where(rho_ratio < 0.5, log_ratio + jnp.log1p(-jnp.minimum(rho_ratio, 0.5)),
                      -jnp.inf)
    # λ = (u₊ − ū)/(u₊ − u₋) = (1 − ū e^{ℓ_lo})/(1 − e^{ℓ_lo − ℓ_hi}), raised by the rounding
    # of both (their exponents' absolute rounding, a few eps times their parts)
    num = (-jnp.expm1(jnp.minimum(log_u + l_lo, 0.0))
           + 4.0 * _EPS * (_finite_abs(log_u) + _finite_abs(l_lo) + 2.0))
    den = (-jnp.expm1(jnp.minimum(l_lo - l_hi, 0.0))
           - 4.0 * _EPS * (_finite_abs(l_lo) + _finite_abs(l_hi) + 2.0))
    lam = jnp.where(den > 0, num / jnp.where(den > 0, den, 1.0), 1.0)
    lam = jnp.clip(jnp.where(jnp.isfinite(lam), lam, 1.0), 0.0, 1.0)
    c = c[..., None]
    gap = jnp.where(jnp.isfinite(l_lo), l_hi - l_lo, jnp.inf)[..., None, :]  # (2, n, 1, k)
    # log(λ e^{cℓ_hi} + (1 − λ) e^{cℓ_lo}) = cℓ_hi + log(λ + (1 − λ) e^{−c·gap})
    mix = jnp.log(lam[..., None, :] + (1.0 - lam[..., None, :]) * jnp.exp(-c * gap))
    c_hi = c * l_hi[..., None, :]
    log_up = (log_p + jnp.log1p(rho))[..., None, :] + c_hi + mix
    # the rounding of this sum of parts (c·ℓ_hi alone can be 1e9 where the sum is near 0)
    log_up = log_up + 4.0 * _EPS * (_finite_abs(c_hi) + _finite_abs(log_p)[..., None, :]
                                    + _finite_abs(mix) + 2.0)
    # cells of zero mass contribute nothing (their ends may be infinite)
    log_up = jnp.where(jnp.isfinite(log_p)[..., None, :], log_up, -jnp.inf)
    return log_up, log_p + jnp.log1p(rho), l_hi


def _block_sums(log_v, block):
    """log Σ e^v over consecutive blocks of ``block`` cells (last axis, padded with −∞)."""
    k = log_v.shape[-1]
    pad = -k % block
    log_v = jnp.concatenate([log_v, jnp.full(log_v.shape[:-1] + (pad,), -jnp.inf)], -1)
    return _log_sum(log_v.reshape(log_v.shape[:-1] + (-1, block)))


def _log_any_out(log_p, count):
    """log(1 − (1 − p)^count), the probability that some of ``count`` independent steps
    leaves K when each does with probability p = e^{log_p}, raised by its rounding (0, a
    probability of 1, where p ≥ 1 − 1e-16; −∞ at count = 0)."""
    p = jnp.minimum(jnp.exp(log_p), 1.0)
    out = jnp.log(-jnp.expm1(count * jnp.log1p(-jnp.minimum(p, 1.0 - 1e-16)))) + 16.0 * _EPS
    return jnp.where(p >= 1.0 - 1e-16, 0.0, out)


def _log_sum(log_v, axis=-1):
    """log Σ e^v along ``axis`` (−∞ where every term is)."""
    top = jnp.max(log_v, axis, keepdims=True)
    top = jnp.where(jnp.isfinite(top), top, 0.0)
    return jnp.log(jnp.sum(jnp.exp(log_v - top), axis)) + jnp.squeeze(top, axis)


def _cut_terms(q, sigma, steps, c, cells):
    """For every c and every cut (the cells of the first k blocks of :data:`_BLOCK` kept):
    T·log of the bound of E_P[e^{cℓ}; K] with its rounding allowance, and log P(B) (an upper
    bound), ``(2, n, C, blocks)`` and ``(2, n, blocks)``; then, for the union term, log of
    the bound of E_P[e^{cℓ}; K] itself, log P(x ∉ K) per step (``(2, n, C, blocks)``,
    ``(2, n, blocks)``) and the cells' log masses and largest losses ``(2, n, k)``."""
    log_up, log_mass, l_hi = _log_cell_moments(q, sigma, c, cells)
    cells = log_mass.shape[-1]
    # the remove direction's last cell reaches ℓ = ∞: its term is +∞ (not the NaN its chord
    # can give), so every cut that keeps it is ruled out below as not finite
    last = jnp.zeros(cells, bool).at[-1].set(True)
    endless = (jnp.arange(2) == 0)[:, None, None, None] & last
    log_up = jnp.where(endless, jnp.inf, log_up)
    blocks = _block_sums(log_up, _BLOCK)
    log_m = jax.lax.cumlogsumexp(blocks, axis=blocks.ndim - 1) + 4.0 * cells * _EPS
    # P(x ∉ K) per step: the masses of the blocks after the cut
    mass = _block_sums(log_mass, _BLOCK)
    tail = jax.lax.cumlogsumexp(mass[..., ::-1], axis=mass.ndim - 1)[..., ::-1]
    log_out = jnp.concatenate([tail[..., 1:], jnp.full(tail.shape[:-1] + (1,), -jnp.inf)], -1)
    log_out = log_out + 4.0 * cells * _EPS
    t = steps[None, :, None]
    log_b = _log_any_out(log_out, t)
    tlog_m = t[..., None, :] * log_m
    tlog_m = jnp.where(jnp.isfinite(tlog_m), tlog_m, jnp.inf)
    return tlog_m, log_b, log_m, log_out, log_mass, l_hi


def _rounding(tlog_m, kappa, other):
    """An upper bound of the rounding of the bound's exponent (nats)."""
    return 32.0 * _EPS * (jnp.abs(tlog_m) + jnp.abs(kappa) + jnp.abs(other) + 10.0)


def _add_loss_cap(q, steps):
    """δ_add(ε) = 0 from ε = T·(−log(1 − q)) on (the add loss is below it surely)."""
    return -steps * jnp.log1p(-q) * (1.0 + 8.0 * _EPS)


def _log_delta_on(q, sigma, steps, eps, c, cells):
    """The bound's log δ per direction at every c ``(2, n, C)``, its best cut taken."""
    tlog_m, log_b, *_ = _cut_terms(q, sigma, steps, c, cells)
    kappa = _log_kappa(c)[..., None]
    ce = c[..., None] * eps[None, :, None, None]
    expo = kappa + tlog_m - ce + _rounding(tlog_m, kappa, ce)
    return jnp.min(jnp.logaddexp(log_b[..., None, :], expo), axis=-1)


def _epsilon_on(q, sigma, steps, log_delta_target, c, cells):
    """The bound's ε per direction at every c ``(2, n, C)``, its best cut taken (∞ where
    no cut leaves room: P(B) ≥ δ)."""
    tlog_m, log_b, *_ = _cut_terms(q, sigma, steps, c, cells)
    ld = log_delta_target[None, :, None]
    room = log_b < ld  # log(δ − P(B)) where P(B) < δ
    log_rest = ld + jnp.log(-jnp.expm1(jnp.where(room, log_b - ld, -1.0)))
    log_rest = jnp.where(room, log_rest, -jnp.inf)[..., None, :]
    kappa = _log_kappa(c)[..., None]
    num = kappa + tlog_m - log_rest + _rounding(tlog_m, kappa, log_rest)
    return jnp.min(jnp.where(jnp.isfinite(num), num, jnp.inf), axis=-1) / c


class _Union(NamedTuple):
    """The ε-free parts of the union term at the cuts picked by :data:`_UNION_OUT`, for
    ε up to ``eps_hi`` (its rounding allowances use it): M cuts, C values of c, k cells."""

    kept: jax.Array  # log κ(c) + T·log E[e^{cℓ}; K] with its rounding, (2, n, C, M)
    c: jax.Array  # (2, n, C)
    log_any: jax.Array  # log P(some step leaves K), (2, n, M)
    log_rest: jax.Array  # log P(some of the other T − 1 steps leaves K), (2, n, M)
    inner: jax.Array  # log κ(c) + (T − 1)·log E[e^{cℓ}; K] + c·ℓ_hi of each cell, (2, n, M, k, C)
    log_cell: jax.Array  # log of each cell's P-mass where it lies outside K, else −∞, (2, n, M, k)
    log_t: jax.Array  # log T, (1, n, 1)


def _union_setup(q, sigma, steps, c, cells, eps_hi):
    """:class:`_Union` of the runs ``(n,)`` at c ``(2, n, C)`` on ``cells`` (an entry of
    :data:`_CELLS`), for ε ≤ ``eps_hi`` ``(n,)``."""
    tlog_m, log_b, log_m, log_out, log_mass, l_hi = _cut_terms(q, sigma, steps, c, cells)
    t = steps[None, :, None]
    # the cuts: for each bound on T·P(x ∉ K), the first cut (the smallest K) meeting it
    meets = (jnp.log(t) + log_out)[..., None, :] <= jnp.log(_UNION_OUT)[:, None]
    cut = jnp.where(jnp.any(meets, -1), jnp.argmax(meets, -1), log_out.shape[-1] - 1)
    at_cut = lambda v: jnp.take_along_axis(v, cut[..., None, :], -1)  # (2, n, C, M)
    log_kappa = _log_kappa(c)[..., None]
    c_eps = c[..., None] * eps_hi[None, :, None, None]
    tlog_k = at_cut(tlog_m)
    kept = log_kappa + tlog_k + _rounding(tlog_k, log_kappa, c_eps)
    # the other T − 1 steps (none at T = 1: their factor is 1)
    others = jnp.where(t[..., None] > 1, (t[..., None] - 1.0) * at_cut(log_m), 0.0)
    others = jnp.where(jnp.isnan(others), jnp.inf, others)
    a = jnp.moveaxis(log_kappa + others, -2, -1)[..., None, :]  # (2, n, M, 1, C)
    cl = c[:, :, None, None, :] * l_hi[:, :, None, :, None]  # (2, n, 1, k, C)
    c_eps_hi = (c * eps_hi[None, :, None])[:, :, None, None, :]
    allowance = 32.0 * _EPS * (_finite_abs(a) + jnp.abs(cl) + c_eps_hi + 10.0)
    inner = a + cl + allowance
    inner = jnp.where(jnp.isnan(inner), jnp.inf, inner)
    first_out = (cut + 1) * _BLOCK  # the cells from this index on lie outside K
    outside = jnp.arange(log_mass.shape[-1]) >= first_out[..., None]
    log_cell = jnp.where(outside, log_mass[:, :, None, :], -jnp.inf)
    take = lambda v: jnp.take_along_axis(v, cut, -1)
    return _Union(kept=kept, c=c, log_any=take(log_b),
                  log_rest=_log_any_out(take(log_out), t - 1.0), inner=inner,
                  log_cell=log_cell, log_t=jnp.log(t))


def _union_log_delta(u: _Union, eps):
    """The union term's bound of log δ per direction at ε ``(n,)`` (≤ the ``eps_hi`` of
    ``u``), the best of its cuts, ``(2, n)``.

    For the cut's K: δ ≤ κ(c)e^{−cε}E[e^{cℓ}; K]^T + min(P(B), Σ_t E[(1 − e^{ε−L})₊; x_t ∉ K]),
    and each term of the sum is at most T·Σ_{cells C ∉ K} P(C)·F(ε − ℓ_hi(C)), with F the
    profile of the other T − 1 steps (non-decreasing in ℓ), itself at most
    min(1, P(B') + κ(c')e^{−c'(ε − ℓ)}E[e^{c'ℓ}; K]^{T−1}) for every c'.
    """
    e = eps[None, :, None]
    kept = jnp.min(u.kept - u.c[..., None] * e[..., None], axis=-2)  # (2, n, M)
    g = jnp.min(u.inner - u.c[:, :, None, None, :] * e[..., None, None], axis=-1)  # (2, n, M, k)
    f = jnp.minimum(jnp.logaddexp(u.log_rest[..., None], g), 0.0)
    k = u.log_cell.shape[-1]
    union = u.log_t + _log_sum(u.log_cell + f) + 4.0 * k * _EPS
    out = jnp.minimum(union, u.log_any)
    return jnp.min(jnp.logaddexp(kept, out), axis=-1) + 16.0 * _EPS


def _two_passes(value, shape):
    """``value(c, cells) -> (2, n, C)`` (to be minimised) on :data:`C_GRID` with the first
    cells, then on :data:`C_FINE` about each direction's best c with the second; the smaller
    of both passes' minima ``(2, n)`` (each is a bound in its own right)."""
    coarse = _first_c(shape)
    first = value(coarse, _CELLS[0])
    best = jnp.take_along_axis(coarse, jnp.argmin(first, -1)[..., None], -1)
    second = value(best * jnp.asarray(C_FINE), _CELLS[1])
    return jnp.minimum(jnp.min(first, -1), jnp.min(second, -1))


@jax.jit
def log_delta(q, sigma, steps, eps):
    """Upper bounds of (log δ_rem, log δ_add) at ε ``(n,)`` each.

    Args:
      q, sigma, steps: ``(n,)`` one segment's rate in (0, 1), noise multiplier (> 0) and
        number of steps (≥ 1).
      eps: ``(n,)`` ε ≥ 0.
    """
    best = _two_passes(lambda c, cells: _log_delta_on(q, sigma, steps, eps, c, cells),
                       (2,) + q.shape)
    setup = _union_setup(q, sigma, steps, _first_c((2,) + q.shape), _CELLS[0], eps)
    union = _union_log_delta(setup, eps)
    best = jnp.minimum(jnp.minimum(best, union), 0.0)  # δ ≤ 1
    add_zero = eps >= _add_loss_cap(q, steps)
    return best[0], jnp.where(add_zero, -jnp.inf, best[1])


@jax.jit
def epsilon(q, sigma, steps, log_delta_target):
    """An ε ≥ 0 at which both directions' bounds are at most δ ``(n,)`` (∞ where no c and
    cut of the two passes give one), for the arguments of :func:`log_delta` and log δ
    ``(n,)``."""
    eps = _two_passes(lambda c, cells: _epsilon_on(q, sigma, steps, log_delta_target, c, cells),
                      (2,) + q.shape)
    eps = jnp.maximum(eps, 0.0)
    eps_add = jnp.minimum(eps[1], _add_loss_cap(q, steps))
    eps = jnp.maximum(eps[0], eps_add)
    return _union_epsilon(q, sigma, steps, log_delta_target, eps)


def _first_c(shape):
    """The first pass's c, :data:`C_GRID`, for each direction and run ``shape + (C,)``."""
    return jnp.broadcast_to(jnp.asarray(C_GRID), shape + (C_GRID.size,))


def _union_epsilon(q, sigma, steps, log_delta_target, eps):
    """The union term's ε where it is below ``eps`` (a sound ε ``(n,)``), else ``eps``: a
    bisection in log ε over [ε·_UNION_RANGE, ε] that only moves its upper end to points
    where both directions' bounds are at most δ."""
    finite = jnp.isfinite(eps) & (eps > 0)
    hi = jnp.where(finite, eps, 1.0)
    u = _union_setup(q, sigma, steps, _first_c((2,) + q.shape), _CELLS[0], hi)
    cap = _add_loss_cap(q, steps)

    def meets(e):
        ld = _union_log_delta(u, e)
        return jnp.maximum(ld[0], jnp.where(e >= cap, -jnp.inf, ld[1])) <= log_delta_target

    def body(_, bounds):
        lo, hi = bounds
        mid = jnp.sqrt(lo * hi)
        ok = meets(mid)
        return jnp.where(ok, lo, mid), jnp.where(ok, mid, hi)

    start = finite & meets(hi)
    _, top = jax.lax.fori_loop(0, _UNION_STEPS, body, (hi * _UNION_RANGE, hi))
    return jnp.where(start, jnp.minimum(top, eps), eps)
