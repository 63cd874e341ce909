"""log M(z) of one SGM step's privacy loss at complex z = c + iu (private).

remove: M(z) = A_{1+z} = E_{N(0,σ²)}[r(x)^{1+z}];  add: M(z) = B_{1+z} = E_{N(0,σ²)}[r(x)^{−z}],
with r(x) = (1−q) + q·e^{(2x−1)/2σ²} (Mironov–Talwar–Zhang 2019, Sec. 3).

Both are ∫ φ_σ(x) exp(w·ℓ(x)) dx with ℓ = log r real and w = 1+z (remove) or −z (add); the
direction is a sign ``d`` (+1 remove, −1 add), so that w = (1+d)/2 + d·z and the loss is d·ℓ.
Every function broadcasts over leading axes, so both directions, all runs and all segments of
a schedule are one batch.

On a vertical line Re z = c the magnitude |φ e^{wℓ}| = φ e^{aℓ}, a = Re w, does not depend on
u, so one x-grid (the trapezoid rule on a window of ±12σ around the modes of φ e^{aℓ},
spectrally accurate for this analytic, Gaussian-decaying integrand) is shared by every point
u of the line. Terms are exp(g_k − m + i·u·d·ℓ_k) with g_k = log(φ(x_k) h_x) + aℓ_k and
m = max_k g_k, so no overflow and no cancellation in ℓ. On the equispaced points u_k = k·h of
the line proper (:func:`log_moment_uniform_line`) the sum over x is a matrix product, by
blocks of k, with far fewer exponentials (:func:`block_phases`). The error is bounded: the
aliasing by the strip bound of Trefethen–Weideman (2014, Thm 5.1) at every u
(:func:`_log_real_aliasing`, whose factor e^{|u|θ} bounds the phase in the strip), for
remove also by e^{−_RESOLVE²/2}·Σ|terms| up to a per-run limit of |u|
(:func:`_aliasing_limit`: the same strip argument per shell of x, with the slope ℓ' of the
shell, which reaches far beyond where the tilted mass sits at small ℓ', few sampled steps);
plus a rounding term eps·(16 + k + |u|·mean|ℓ| + mean|g−m|)·Σ|terms|/|S| (means weighted
by the terms' sizes; 16 covers the product of :func:`block_phases`; k the additions a term
meets in the sum over x, whose order is fixed: ⌈log₂ n_x⌉ by a tree, ≤ 63 + ⌈log₂(n_x/64)⌉
by matrix products over pieces of 64 nodes, where an open order would allow n_x − 1) and one
for the exponents g_k − m themselves (:func:`_parts_rounding`), plus a bound on what the
window leaves out (:func:`_log_window_tail`; for remove at large σ and c the window may stop
short of a far mode that weighs nothing, :func:`far_part`, whose bound is added). (Until 2026-11 the
aliasing was estimated from the nested rule of step 2h_x, η = ∞ where h_x·(|u|/σ² + 10/σ) >
2π; on 1 024 runs' lines the strip bound is below 1e-8 wherever that estimate was, and at
1 063 of 49 152 nodes more.)
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxrdp import _logmath

_EPS = 2.220446049250313e-16
#: half-width of the x-window beyond the modes, in σ (Gaussian tail e^{-72}).
_WIDTH = 12.0
#: remove: up to the limit of :func:`_aliasing_limit` the x-rule's aliasing is below
#: e^{−_RESOLVE²/2} ≈ e^{−50} of Σ|terms|
_RESOLVE = 10.0

REMOVE = 1.0
ADD = -1.0
#: remove: the cut point X/a of :func:`far_part`
_CUT_FRACTION = 0.5
#: pieces of [X, a + _WIDTH·σ] on which :func:`far_part` bounds the integrand
_FAR_PIECES = 8
#: a cut is used only where its far part's bound is below e^{_FAR_MAX} (raw; M(c) ≥ 1)
_FAR_MAX = -800.0


def log_r(x, q, sigma):
    """ℓ = log((1−q) + q e^{(2x−1)/2σ²}) and t = (2x−1)/2σ², elementwise, real.

    ``log1p(q·expm1(t))`` where |t| < 1 (r near 1), else the sum of the two positive terms
    in log space: far left, 1 − q + q·e^t is tiny when q is 1 or close to it, and
    ``q·expm1(t)`` rounds to −1 there (ℓ = −inf, and a NaN in every weighted sum).
    """
    t = (2.0 * x - 1.0) / (2.0 * sigma**2)
    small = jnp.abs(t) < 1.0
    t_small = jnp.where(small, t, 0.0)
    low = jnp.log1p(q * jnp.expm1(t_small))
    high = jnp.logaddexp(_log_one_minus(q), jnp.log(q) + t)
    return jnp.where(small, low, high), t


def _log_one_minus(q):
    """log(1 − q), −inf at q = 1 (safe for gradients there)."""
    return jnp.where(q < 1.0, jnp.log1p(-jnp.where(q < 1.0, q, 0.0)), -jnp.inf)


def exponent(c, d):
    """Real part a of w on the line Re z = c: 1 + c (remove, d = +1) or −c (add, d = −1)."""
    return 0.5 * (1.0 + d) + d * c


class FarPart(NamedTuple):
    """The remove direction's far part [X, ∞) of the output axis, left out of a cut window.

    ``on``: the cut is used (else every other field is a finite stand-in); ``hi``: the
    window's right end with the cut; ``x_cut``: X; ``ends``: the pieces' ends X = p_0 < … <
    p_P = a + _WIDTH·σ ``B + (P+1,)``; ``log_sup``: log of a bound on f = φ·r^a on each piece
    ``B + (P,)`` (see :func:`far_part`); ``log_end``: log f(p_P). All of shape ``B`` but the
    two arrays; raw units (not scaled by the window's largest term).
    """

    on: jax.Array
    hi: jax.Array
    x_cut: jax.Array
    ends: jax.Array
    log_sup: jax.Array
    log_end: jax.Array


def far_part(q, sigma, c, d) -> FarPart:
    """Where the remove direction's window may stop short of its far mode, and the bounds on
    what it then leaves out (:class:`FarPart`); arguments broadcast to a batch shape ``B``.

    Every stationary point of log f = −x²/2σ² + aℓ(x) solves x = aρ(x) with ρ = ℓ'σ²
    increasing, so those left of a cut X lie in [0, aρ(X)]: a window reaching
    ``_WIDTH``·σ + 1.5 beyond aρ(X) leaves out [hi, X], where log f falls at least as fast as
    past an uncut window (:func:`_log_window_tail`'s bound holds there unchanged), and [X, ∞),
    which holds the far mode near x = a. On [X, ∞) f is bounded piece by piece up to
    p_P = a + _WIDTH·σ: ℓ is convex (a log-sum-exp of t), so on [p_j, p_{j+1}] aℓ lies below
    its chord and log f below the concave quadratic −x²/2σ² + chord, whose largest value on
    the piece is in closed form (+1 for rounding); beyond p_P log f falls at least as fast as
    −_WIDTH/σ (its slope (aρ − x)/σ² ≤ (a − x)/σ²). The cut is taken at X =
    :data:`_CUT_FRACTION`·a where the window ends below X and the bound on the far part,
    lattice nodes included for any step up to the window's width, is below e^{_FAR_MAX}:
    then it is at most e^{_FAR_MAX} of M(c) (M(c) = A_{1+c} ≥ 1 by Jensen), and it is added to
    the bounds on what the window leaves out all the same (:func:`_log_window_tail`,
    :func:`_aliasing_limit`). The envelope's statistics read off the grid (the split points'
    masses, total variations and moments) leave it out: at most e^{_FAR_MAX} = e^{−800} of
    M(c) per step, against the envelope's floor of 1e-300 (e^{−691}) per step. Where a far
    mode matters (small σ, or c of a few σ) no cut
    passes and the window is the uncut one. Under a transformation: no derivative (a
    numerical choice, and bounds).

    Measured on q = 0.00753, σ = 155 at the saddle c ≈ 8.8·10⁴ of T = 3, δ = 7.5e-18: the
    uncut window is 590σ wide (h_x = 4.6σ at 129 nodes: the rule does not resolve M) and the
    far part's weight is about e^{−2.7·10⁵}; cut, the window is 50σ wide (h_x = 0.39σ).
    """
    q, sigma, c, d = (jax.lax.stop_gradient(v) for v in jnp.broadcast_arrays(q, sigma, c, d))
    a = jnp.maximum(exponent(c, d), 1.0)
    log_beta = jnp.log(q) - _log_one_minus(jnp.minimum(q, 0.5))  # ρ = sigmoid(log β + t)
    x_cut = _CUT_FRACTION * a
    rho = jax.nn.sigmoid(log_beta + (2.0 * x_cut - 1.0) / (2.0 * sigma**2))
    hi = a * rho + _WIDTH * sigma + 1.5
    k = jnp.arange(_FAR_PIECES + 1, dtype=a.dtype) / _FAR_PIECES
    ends = x_cut[..., None] + (a + _WIDTH * sigma - x_cut)[..., None] * k  # B + (P+1,)
    se, ae = sigma[..., None], a[..., None]
    ell, _ = log_r(ends, q[..., None], se)
    # ℓ is convex, so a·ℓ lies below its chord on each piece, and log f below the concave
    # quadratic −x²/2σ² + chord: its largest value on the piece, at x* = clip(a·slope·σ²)
    lo, width = ends[..., :-1], jnp.diff(ends, axis=-1)
    slope = ae * jnp.diff(ell, axis=-1) / width
    top = jnp.clip(slope * se**2, lo, ends[..., 1:])
    log_sup = _log_phi(top, se) + ae * ell[..., :-1] + slope * (top - lo) + 1.0  # +1: rounding
    log_end = _log_phi(ends[..., -1], sigma) + a * ell[..., -1] + 1.0
    # the lattice bound of :func:`_log_far_lattice` at the largest step (the window's width)
    span = hi - jnp.minimum(0.0, a) + _WIDTH * sigma + 1.5
    log_far = _log_far_lattice(ends, log_sup, log_end, jnp.log(span), sigma)
    on = (hi <= x_cut) & (log_far < _FAR_MAX) & (d > 0) & (q < 0.5)
    return FarPart(on=on, hi=hi, x_cut=x_cut, ends=ends, log_sup=log_sup, log_end=log_end)


def _log_far_lattice(ends, log_sup, log_end, log_hx, sigma):
    """log of a bound on h_x·Σ f(x_k) over the lattice nodes x_k ≥ X (any offset), raw units.

    A piece of width w holds at most w/h_x + 1 nodes, each at most its bound; beyond the last
    end p_P, h_x·f(p_P) for the first node and ∫ ≤ f(p_P)·σ/_WIDTH for the rest (log f falls
    by at least _WIDTH/σ per unit there). ``ends`` ``B + (P+1,)``, ``log_sup`` ``B + (P,)``,
    ``log_end``, ``log_hx``, ``sigma``: ``B + ()`` broadcastable.
    """
    log_w = jnp.log(jnp.diff(ends, axis=-1))
    per_piece = log_sup + jnp.logaddexp(log_w, log_hx[..., None])
    tail = log_end + jnp.logaddexp(log_hx, jnp.log(sigma / _WIDTH))
    return jnp.logaddexp(jax.scipy.special.logsumexp(per_piece, axis=-1), tail)


def log_far_left_out(far: FarPart, hx, sigma):
    """log of the bound on what a cut window leaves beyond X, raw units ``B``; −∞ uncut."""
    log_far = _log_far_lattice(far.ends, far.log_sup, far.log_end, jnp.log(hx), sigma)
    return jnp.where(far.on, log_far, -jnp.inf)


def _uncut_window(q, sigma, c, d):
    """The window's ends (lo, hi) ``B`` reaching every mode of the integrand (uncut)."""
    a = exponent(c, d)
    # add (a < 0): log of the integrand φ·r^a is concave with curvature ≤ −1/σ², its mode x*
    # solves x = a·ρ(x) with ρ = ℓ'σ² = q e^t/r increasing, so x* ∈ [a·ρ(0), 0]: for small q
    # the window need not reach a (it would waste the nodes: a·ρ(0) ≈ a·q e^{−1/2σ²})
    qs, ss = jax.lax.stop_gradient(q), jax.lax.stop_gradient(sigma)  # a numerical choice
    rho0 = jax.nn.sigmoid(jnp.log(qs) - jnp.log1p(-jnp.minimum(qs, 1.0)) - 0.5 / ss**2)
    lo = jnp.minimum(0.0, a * jnp.where(a < 0, rho0, 1.0)) - _WIDTH * sigma - 1.5
    hi = jnp.maximum(0.0, a) + _WIDTH * sigma + 1.5
    return lo, hi


def log_far_mode(q, sigma, c, d):
    """log φ(a)·r(a)^a, the integrand's value near its far mode x ≈ a (remove: a = 1 + c), an
    estimate to steer by (not a bound), ``B``."""
    a = exponent(c, d)
    ell, _ = log_r(a, q, sigma)
    return _log_phi(a, sigma) + a * ell


def uncut_log_aliasing(q, sigma, c, d, nx: int):
    """log of the remove direction's strip bound on the aliasing of ``nx`` nodes on the uncut
    window (:func:`_log_real_aliasing` without the add factor), ``B``: whether the rule would
    resolve M(c) without :func:`far_part`'s cut (the window's tail and rounding left out)."""
    q, sigma, c, d = jnp.broadcast_arrays(q, sigma, c, d)
    lo, hi = _uncut_window(q, sigma, c, d)
    return _log_real_aliasing(q, sigma, c, d, (hi - lo) / (nx - 1), nx)


def grid(q, sigma, c, d, nx: int):
    """Shared x-nodes ``(..., nx)`` and step h_x ``(...)`` for the line Re z = c."""
    x, hx, _ = _grid(q, sigma, c, d, nx)
    return x, hx


def _grid(q, sigma, c, d, nx: int, cut: bool = True):
    """:func:`grid`, and the :func:`far_part` its window stops short of (``cut=False``:
    none, the window uncut)."""
    lo, hi = _uncut_window(q, sigma, c, d)
    # remove: stop short of a far mode that weighs nothing (:func:`far_part`)
    far = far_part(q, sigma, c, d) if cut else _no_far_part(hi)
    hi = jnp.where(far.on, far.hi, hi)
    k = jnp.arange(nx, dtype=jnp.result_type(c))
    hx = (hi - lo) / (nx - 1)
    return lo[..., None] + hx[..., None] * k, hx, far


def _no_far_part(like) -> FarPart:
    """A :class:`FarPart` that is off, of ``like``'s shape (finite stand-ins)."""
    zero = jnp.zeros_like(like)
    ends = zero[..., None] + jnp.arange(_FAR_PIECES + 1, dtype=zero.dtype)
    return FarPart(on=jnp.zeros(like.shape, bool), hi=zero, x_cut=zero, ends=ends,
                   log_sup=ends[..., 1:], log_end=zero)


class Terms(NamedTuple):
    """The x-rule's terms on the line Re z = c (:func:`line_terms`), batch shape ``B``.

    ``ell``, ``t``: ℓ and t at the nodes; ``ga``: the log terms g_k = log(φ(x_k)h_x) + aℓ_k;
    ``x``: the nodes; ``sizes``: the sizes of the parts g_k is summed from
    (:func:`_parts_rounding`), all ``B + (nx,)``; ``hx``: the step ``B``; ``far``: the window's
    :func:`far_part`.
    """

    ell: jax.Array
    t: jax.Array
    ga: jax.Array
    hx: jax.Array
    x: jax.Array
    sizes: jax.Array
    far: FarPart


def line_terms(q, sigma, c, d, nx: int) -> Terms:
    """The x-rule's :class:`Terms` for the line Re z = c; arguments broadcast to ``B``.

    Computed once per line and handed to :func:`split_stats`, :func:`aliasing_limit`,
    :func:`log_moment_line` and :func:`log_moment_uniform_line`, which otherwise compute it
    each (under :func:`jax.lax.stop_gradient` it serves the callers without derivatives).
    A direction given as a number (not an array) that is ``ADD`` has no far part to cut: its
    program leaves :func:`far_part` out.
    """
    cut = not (isinstance(d, (int, float)) and d < 0)
    q, sigma, c, d = jnp.broadcast_arrays(q, sigma, c, d)
    x, hx, far = _grid(q, sigma, c, d, nx, cut)
    qe, se = q[..., None], sigma[..., None]
    ell, t = log_r(x, qe, se)
    a = exponent(c, d)[..., None]
    g = _log_phi(x, se) + jnp.log(hx)[..., None]
    sizes = (x**2 / (2.0 * se**2) + jnp.abs(jnp.log(jnp.sqrt(2.0 * jnp.pi) * se))
             + jnp.abs(jnp.log(hx))[..., None] + jnp.abs(a * ell))
    return Terms(ell, t, g + a * ell, hx, x, jax.lax.stop_gradient(sizes), far)


def _parts_rounding(sizes, m, mag):
    """A bound on the rounding of the exponents g_k − m, relative to e^m, ``B + (1,)``.

    g_k − m is a sum of parts of the sizes P_k = x_k²/2σ² + |log √(2π)σ| + |log h_x| + |aℓ_k|
    and |m|, each part within 3·eps of its size (x²/2σ² and aℓ take three roundings each) and
    each sum within eps of the sizes summed so far, so g_k − m is within 8·eps·(P_k + |m|) of
    its value even where it is small (the parts of the far mode's terms cancel, to within a
    few hundred where they are thousands), and each term e^{g_k − m} within that relative
    error: 8·eps·Σ_k (P_k + |m|)·e^{g_k − m} in all (exp's own rounding is in the caller's
    eps·|g_k − m|).
    """
    return 8.0 * _EPS * jnp.sum((sizes + jnp.abs(m)) * mag, axis=-1, keepdims=True)


def _log_phi(x, sigma):
    """log of the N(0, σ²) density."""
    return -(x**2) / (2.0 * sigma**2) - jnp.log(jnp.sqrt(2.0 * jnp.pi) * sigma)


def _log_window_tail(ga, m, hx, sigma, log_far):
    """log of a bound on what the window leaves out, in units of e^m: ``B``.

    Every stationary point of log(φ r^a) = −x²/2σ² + aℓ(x) solves x = aρ(x), ρ = ℓ'σ² ∈ [0, 1]
    (and ρ ≤ ρ(0) left of 0), so it lies in [0, a] (remove) or [aρ(0), 0] (add), and the
    window reaches g = ``_WIDTH``·σ (+1.5) beyond that interval on both sides. Past the right
    end hi the log-slope (aρ(x) − x)/σ² is at most −g/σ², past the left end lo at least g/σ²,
    so the integrand's mass beyond the window is at most (f(lo) + f(hi))·σ²/g; the same holds
    for |φ r^w| at any complex w with Re w = a (|r^w| = r^a) and, f being monotone there, for
    the trapezoid sum's nodes beyond the window (the sum over the whole lattice is what the
    strip bounds of Trefethen–Weideman control). A window cut at X (:func:`far_part`) keeps
    that slope on [hi, X], and adds ``log_far``, the bound on the lattice nodes beyond X
    (:func:`log_far_left_out`, raw units; −∞ uncut).

    Args: ``ga``: the log terms g_k (with log h_x) ``B + (nx,)``; ``m``: ``B + (1,)``;
    ``hx, sigma, log_far``: ``B``.
    """
    edges = jnp.logaddexp(ga[..., 0], ga[..., -1]) - m[..., 0]
    return jnp.logaddexp(edges + jnp.log(sigma / _WIDTH) - jnp.log(hx), log_far - m[..., 0])


def _scaled(ga):
    """m = max_k g_k and the terms' magnitudes e^{g_k − m} (no overflow)."""
    m = jnp.max(ga, axis=-1, keepdims=True)
    return m, jnp.exp(ga - m)


#: split points of the envelope bound (every nx/_SPLITS-th node).
_SPLITS = 16


#: θ = y/σ² of the strips tried by :func:`_log_real_aliasing`, as multiples of min(2π/h_x,
#: 0.95π) (2π/h_x: the optimum where F = 1; any θ < π gives a bound)
_THETA_SCALE = (1.0, 0.5, 0.25, 0.125, 0.0625)


def _log_real_aliasing(q, sigma, c, d, hx, nx: int, nodes=None, u=None):
    """log of a bound η on the x-rule's relative error in M(c) at real c (u = 0), ``B``, or
    in |M(c + iu)| relative to M(c) at ``u`` ``B + (N,)``.

    Trefethen–Weideman (2014), Thm 5.1, as in :func:`_aliasing_limit`: the trapezoid rule of
    step h_x on f = φ·r^a errs by at most 2·sup_{|b|≤y}∫|f(x+ib)|dx/(e^{2πy/h_x} − 1). With
    θ = y/σ² < π, r(x+ib) = (1−q) + q e^{t}e^{iθ'} (|θ'| ≤ θ) stays off (−∞, 0], and
    |φ(x+ib)| ≤ φ(x)e^{y²/2σ²}. |r(x+ib)|² = r²(1 − 2p(1 − cos θ')) with p = ρ(1−ρ) ≤ 1/4,
    ρ = q e^t/r, so remove (a > 0): |r^a| ≤ r^a; add (a = −c): |r^a| ≤ r^a·F,
    F = (1 − 2p(1 − cos θ))^{−c/2}. Hence η ≤ 2e^{y²/2σ²}·(∫φ r^a F/M)/(e^{2πy/h_x} − 1), the
    ratio of integrals by the same rule (as :func:`_aliasing_limit` takes its shells'
    masses), at the best of a few θ ≤ 2π/h_x (the optimum where F = 1); at real c plus 4·eps
    per node (rounding). The window's truncation is bounded apart (:func:`_log_window_tail`).
    At complex z = c + iu the phase adds a factor |e^{iuℓ(x+ib)}| ≤ e^{|u|θ}: with r(x+ib) =
    (1−q) + q e^{t}e^{iθ'}, a positive number plus one of argument θ', |arg r| ≤ |θ'| ≤ θ < π.

    Args: ``q, sigma, c, d, hx``: the batch shape ``B``; ``nodes``: ``(log p, log of the
    terms over M)`` at the x-nodes ``B + (nx,)``, or None (F left out: a bound for remove
    only, cheaper, to steer the contour).
    """
    s2 = sigma**2
    theta = (jnp.minimum(2.0 * jnp.pi / hx, 0.95 * jnp.pi)[..., None]
             * jnp.asarray(_THETA_SCALE, hx.dtype))  # B + (Θ,)
    log_ratio = 0.0
    if nodes is not None:
        log_p, log_w = nodes
        omc = (2.0 * jnp.sin(0.5 * theta) ** 2)[..., None]  # 1 − cos θ, B + (Θ, 1)
        log_f = -0.5 * c[..., None, None] * jnp.log1p(-2.0 * jnp.exp(log_p[..., None, :]) * omc)
        log_ratio = jax.scipy.special.logsumexp(log_w[..., None, :] + log_f, axis=-1)
        log_ratio = jnp.where(d[..., None] > 0, 0.0, log_ratio)
    log_eta = (np.log(2.0) + 0.5 * theta**2 * s2[..., None] + log_ratio
               - _logmath.log_expm1(2.0 * jnp.pi * theta * s2[..., None] / hx[..., None]))
    if u is not None:  # B + (N, Θ); the line's rounding is bounded by its caller
        return jnp.min(log_eta[..., None, :] + jnp.abs(u)[..., None] * theta[..., None, :], -1)
    return jnp.logaddexp(jnp.min(log_eta, axis=-1), np.log(4.0 * _EPS * nx))


def _strip_nodes(q, ell, t, ga, m, s0):
    """The nodes' data of :func:`_log_real_aliasing`'s add factor: log p = log ρ(1 − ρ) =
    log(q(1−q)e^t/r²) and the log terms over their sum, ``B + (nx,)``."""
    log_p = (jnp.log(q) + _log_one_minus(q))[..., None] + t - 2.0 * ell
    return log_p, ga - m - jnp.log(s0)[..., None]


def real_stats(q, sigma, c, d, nx: int, add_factor: bool = True, rounding: bool = True):
    """Statistics of the tilted loss at real z = c; arguments broadcast to a shape ``B``.

    Returns ``(κ, κ', κ'', μ₄, w, log v, var_left, μ₄_left, log η)``: κ = log M(c); κ', κ'' its
    first two derivatives (mean and variance of the loss under the tilted measure); μ₄ the
    tilted loss's fourth central moment (all of shape ``B``); and, for split points x_k of the
    grid (``B + (K,)``), w_k the tilted mass left of x_k, v_k = (g(x_k) + TV_{[x_k, ∞)} g)/M(c)
    for g = φ r^a/|ℓ'| (the tilted density in the loss variable; TV from the grid, ×1.05), and
    the variance and fourth central moment of the tilted loss conditioned on x < x_k. One
    integration by parts on [x_k, ∞) and the Taylor bound on (−∞, x_k) give
    |M(c+iu)|/M(c) ≤ w_k·Q_k(u) + min(1 − w_k, v_k/|u|) for every k, with
    Q_k(u) = √(1 − var_k u² + (μ₄,k/12 + var_k²/4)u⁴) (capped at 1; the symmetrised
    fourth-order bound of ``profile._quartic``). k = 0 is the plain total-variation bound.
    η bounds the x-rule's relative error in M(c) (:func:`_log_real_aliasing` with the
    window's truncation, :func:`_log_window_tail`, and the exponents' rounding,
    :func:`_parts_rounding`): the line's
    bounds use M(c)(1 ± η), and η ≥ 1 means the rule does not resolve M(c) at all (a window
    far wider than σ: c in the hundreds of σ). ``add_factor=False``: η without the add
    direction's factor (:func:`_log_real_aliasing`; a bound for remove only);
    ``rounding=False``: without the exponents' rounding nor a cut window's far part
    (:func:`far_part`; for statistics that only steer,
    where η is compared with 1e-2; the searches call this at every step, and the rounding
    term there cost 15% of the profile's time).
    The left part matters when most of the tilted mass sits in a narrow
    spike of near-zero loss (few sampled steps): its own small variance gives the T-fold
    product the Gaussian decay e^{−T w var u²/2} that the whole loss's moments cannot show.
    """
    ell, t, ga, hx, _, sizes, far = line_terms(q, sigma, c, d, nx)
    q, sigma, d = jnp.broadcast_arrays(q, sigma, d)
    m, wts = _scaled(ga)
    s0 = jnp.sum(wts, axis=-1)
    loss = d[..., None] * ell
    k1 = jnp.sum(wts * loss, axis=-1) / s0
    dev2 = (loss - k1[..., None]) ** 2
    k2 = jnp.sum(wts * dev2, axis=-1) / s0
    k4 = jnp.sum(wts * dev2**2, axis=-1) / s0
    kappa = m[..., 0] + jnp.log(s0)
    w, log_v, lvar, lm4 = _split_stats(q, sigma, ell, t, ga, hx, loss, m, wts, s0)
    qb, sb, cb, db = (jnp.broadcast_to(v, hx.shape) for v in (q, sigma, c, d))
    nodes = _strip_nodes(q, ell, t, ga, m, s0) if add_factor else None
    # the cut window's far part (≤ e^{_FAR_MAX} of M(c)) is bounded on the paths that bound,
    # not on the searches that steer (``rounding=False``)
    log_far = (log_far_left_out(far, hx, sb) if rounding
               else jnp.full(hx.shape, -jnp.inf, hx.dtype))
    log_left_out = _log_window_tail(ga, m, hx, sb, log_far)
    if rounding:
        log_left_out = jnp.logaddexp(log_left_out, jnp.log(_parts_rounding(sizes, m, wts)[..., 0]))
    log_eta = jnp.logaddexp(_log_real_aliasing(qb, sb, cb, db, hx, nx, nodes),
                            log_left_out - jnp.log(s0))
    return kappa, k1, k2, k4, w, log_v, lvar, lm4, log_eta


def split_stats(q, sigma, c, d, nx: int, terms: Terms | None = None):
    """The split points' statistics of :func:`real_stats` alone, ``(w, log v, var_left,
    μ₄_left)`` ``B + (K,)``: for a caller that needs κ at more points than the envelope (the
    profile's line: κ at c and c ± a, the envelope at c only). ``terms``: the
    :func:`line_terms` of the same arguments (computed if None)."""
    if terms is None:
        terms = line_terms(q, sigma, c, d, nx)
    ell, t, ga, hx = terms.ell, terms.t, terms.ga, terms.hx
    q, sigma, d = jnp.broadcast_arrays(q, sigma, d)
    m, wts = _scaled(ga)
    return _split_stats(q, sigma, ell, t, ga, hx, d[..., None] * ell, m, wts,
                        jnp.sum(wts, axis=-1))


def _split_stats(q, sigma, ell, t, ga, hx, loss, m, wts, s0):
    """w, log v, var_left, μ₄_left at the split points (see :func:`real_stats`), from the
    x-rule's terms."""
    nx = ga.shape[-1]
    # g = φ r^a / ℓ', ℓ' = q e^t/(σ² r); relative to the integrand's scale e^m / h_x.
    log_g = ell - jnp.log(q)[..., None] - t + 2.0 * jnp.log(sigma)[..., None]
    mg = jnp.max(ga + log_g, axis=-1, keepdims=True)
    gv = jnp.exp(ga + log_g - mg)
    steps = jnp.abs(jnp.diff(gv, axis=-1))
    right_tv = jnp.cumsum(steps[..., ::-1], axis=-1)[..., ::-1]  # Σ_{j ≥ k} |Δg_j|
    right_tv = jnp.concatenate([right_tv, jnp.zeros_like(right_tv[..., :1])], axis=-1)
    split = jnp.arange(0, nx - 1, max(1, (nx - 1) // _SPLITS))
    left = jnp.cumsum(wts, axis=-1) - wts  # mass strictly left of node k
    w = left[..., split] / s0[..., None]
    v = 1.05 * (gv[..., split] + right_tv[..., split] + gv[..., -1:])
    log_v = (mg - m) + jnp.log(v) - jnp.log(s0)[..., None] - jnp.log(hx)[..., None]
    # central moments of the loss conditioned on x < x_k (the part left of each split point)
    mask = jnp.arange(nx) < split[:, None]  # (K, nx)
    lw = jnp.where(mask, wts[..., None, :], 0.0)
    lsum = jnp.maximum(jnp.sum(lw, axis=-1), 1e-300)
    lmean = jnp.sum(lw * loss[..., None, :], axis=-1) / lsum
    ldev2 = (loss[..., None, :] - lmean[..., None]) ** 2
    lvar = jnp.sum(lw * ldev2, axis=-1) / lsum
    lm4 = jnp.sum(lw * ldev2**2, axis=-1) / lsum
    return w, log_v, lvar, lm4


def _line_sums(ell, mag, d, u):
    """The trapezoid sums of mag·e^{iu·dℓ} at every u, directly, and the number of roundings
    their summation adds to a term (static; see :func:`_finish`)."""
    cos, sin = _logmath.cos_sin(u[..., :, None] * (d[..., None] * ell)[..., None, :])
    re, depth = _logmath.tree_sum(mag[..., None, :] * cos)
    im, _ = _logmath.tree_sum(mag[..., None, :] * sin)
    return re + 1j * im, depth


def _phase_run(phi, count: int, first: int = 0):
    """(cos, sin) of kφ for first ≤ k < first + count: ``(..., m)`` → ``(..., count, m)``."""
    angle = (first + jnp.arange(count, dtype=jnp.result_type(phi)))[:, None] * phi[..., None, :]
    # computed once: XLA would otherwise recompute them inside each product that uses them
    return jax.lax.optimization_barrier(_logmath.cos_sin(angle))


def block_size(n: int) -> int:
    """The block b of :func:`block_phases` for n points: a power of two near √n."""
    return 1 << max(0, (int(n - 1).bit_length() + 1) // 2)


def block_phases(phi, n: int, first_row: int = 0):
    """e^{ikφ}, k = bm + j < n, as factors e^{ibmφ} ``(..., R, m)`` and e^{ijφ} ``(..., b, m)``.

    With ``first_row`` = r (static) the rows are those of m = r, …, r + R − 1: the points
    k = b·r + bm + j, each phase still the product of e^{i(r+m)·bφ} and e^{ijφ}.

    ``phi``: ``(..., m)``. b ≈ √n is a power of two and R = ⌈n/b⌉ (padded to a power of two),
    each factor from cos/sin directly (:func:`jaxrdp._logmath.cos_sin`, 2.5× faster than
    XLA's float64 pair on CPU): at n = 1 024, 64 complex exponentials instead of
    1 024. (Splitting the factors further, into products of shorter runs, was 1.5× slower on
    CPU: the products' arrays cost more memory traffic than the cos/sin they save.) A phase
    carries the rounding of its factors' angles (eps·|kφ| in all) and of one complex product
    (measured against mpmath: below 0.5·eps·(16 + |kφ|)).
    """
    b = block_size(n)
    rows = 1 << max(0, int(-(-n // b) - 1).bit_length())
    return _phase_run(b * phi, rows, first_row), _phase_run(phi, b)


def equispaced_phases(phi, n: int):
    """e^{ikφ} for k < n, shape ``phi.shape + (n,)``, from :func:`block_phases`."""
    (oc, os_), (ic, is_) = block_phases(phi[..., None], n)
    out = (oc + 1j * os_)[..., :, None, 0] * (ic + 1j * is_)[..., None, :, 0]
    return out.reshape(out.shape[:-2] + (-1,))[..., :n]


def _uniform_line_sums(ell, mag, d, h, n: int, first: int = 0):
    """The sums of :func:`_line_sums` at u_k = (first + k)·h, k < n, by blocks: (b·m + j)·h.

    e^{i(bm + j)hθ} = e^{ibmhθ}·e^{ijhθ}, so the sum over the x-nodes is a matrix product
    of an ``(n/b, nx)`` and an ``(nx, b)`` matrix (one per batch element and parity of the
    node): (n/b + b)·nx complex exponentials instead of n·nx. Each factor's phase carries an
    absolute rounding error of eps·|phase| and the product one more unit, so a term's
    error stays within the eps·(16 + |uℓ_k|) of :func:`_finish`. The products run over
    consecutive pieces of :data:`_PIECE` x-nodes (in an order XLA chooses: at most
    ``_PIECE − 1`` roundings per term) and the pieces are summed by
    :func:`jaxrdp._logmath.tree_sum`; the sums come with the count of both (static).
    """
    b = block_size(n)
    if first % b:
        raise ValueError(f"first point {first} is not a multiple of the block {b} of {n} points")
    (oc, os_), (ic, is_) = block_phases(h[..., None] * d[..., None] * ell, n, first // b)
    rows = oc.shape[-2]
    left = jnp.concatenate([mag[..., None, :] * oc, mag[..., None, :] * os_], -2)  # (..., 2R, nx)
    right = jnp.concatenate([ic, is_], -2)  # (..., 2b, nx)
    nx = left.shape[-1]
    piece = min(_PIECE, nx)
    pieces = -(-nx // piece)

    def split(v):  # (..., k, nx) → (..., k, pieces, piece), zero-padded (exact)
        v = jnp.pad(v, [(0, 0)] * (v.ndim - 1) + [(0, pieces * piece - nx)])
        return v.reshape(v.shape[:-1] + (pieces, piece))

    p = jnp.einsum("...rcx,...jcx->...rjc", split(left), split(right),
                   precision=jax.lax.Precision.HIGHEST)
    p, depth = _logmath.tree_sum(p)
    re = p[..., :rows, :b] - p[..., rows:, b:]
    im = p[..., :rows, b:] + p[..., rows:, :b]
    out = (re + 1j * im).reshape(re.shape[:-2] + (rows * b,))
    return out[..., :n], piece - 1 + depth


#: x-nodes per matrix product in :func:`_uniform_line_sums` (64: at n_x = 1 025 and 1 024
#: points, 1.3× the time of one product over all nodes; 32: 3.9×)
_PIECE = 64
_TAIL_PIECES = 8  # pieces of width σ right of the window, then a closed-form tail
_GROUPS = 16  # groups of consecutive x-nodes (each with the slope just beyond its last)
#: candidate strip half-widths y/σ (10 down to 0.16, ratio 2^{1/4}; cost per run, not per u)
_Y_OVER_SIGMA = tuple(10.0 * 2.0 ** (-k / 4) for k in range(25))


def _log_upper_tail(z):
    """A bound on log Φ̄(z), the standard normal upper tail: −z²/2 − log 2 for z ≥ 0, else 0.

    (Φ̄(z) ≤ e^{−z²/2}/2 for z ≥ 0; cheaper to compile than ``log_ndtr``, and every use here is
    far in the tail, where it is loose only by the factor ~z√(π/2).)
    """
    return jnp.where(z > 0.0, -0.5 * z**2 - np.log(2.0), 0.0)


def _slope(log_v, sigma):
    """Bound L(x) on |Im ℓ(x+iy)|/y for every y < πσ² (remove direction), elementwise.

    With v = e^{log_v} = q e^t/(1−q) at the real point x and θ = y/σ²:
    ℓ(x+iy) = log(1−q) + log(1 + v e^{iθ}). For v < 1 the derivative ρ/σ² of ℓ has
    |ρ| ≤ v/(1−v) along the whole vertical line, and |arg(1 + v e^{iθ})| ≤ θ/2 (increasing in
    v, equal to θ/2 at v = 1): L = min(v/(1−v), 1/2)/σ². For v ≥ 1,
    ℓ = log q + t + iθ + log(1 + e^{−iθ}/v) with that last argument in [−θ/2, 0]: L = 1/σ²
    (r has no zero while θ < π).
    """
    small = log_v < 0.0
    v = jnp.exp(jnp.where(small, log_v, -1.0))
    return jnp.where(small, jnp.minimum(v / (1.0 - v), 0.5), 1.0) / sigma**2


def _aliasing_limit(q, sigma, a, x, ell, t, ga, m, hx, far: FarPart):
    """The largest |u| at which the x-rule's aliasing stays below e^{−_RESOLVE²/2}·Σ|terms|.

    For the remove direction (a = 1 + c > 0); used beside the strip bound at every u
    (:func:`_log_real_aliasing`), the smaller of the two is used.

    Trefethen–Weideman (2014), Thm 5.1: the trapezoid rule of step h_x errs by at most
    2·sup_{|b|≤y} ∫|f(x+ib)|dx/(e^{2πy/h_x} − 1) for f analytic in the strip |Im x| < y. For
    f = φ·r^{a+iu} (a > 0): |φ(x+ib)| = φ(x)e^{b²/2σ²}, |r(x+ib)| ≤ r(x) and
    |e^{iuℓ(x+ib)}| ≤ e^{|u|·b·L(x)} (:func:`_slope`), so the sup is at most
    e^{y²/2σ²}∫φ r^a e^{|u|yL}. That integral is bounded by shells of known mass and largest
    slope: the x-nodes in :data:`_GROUPS` consecutive groups (L increases with x, so a
    group's largest is at its last node), left of the window φ's tail times r(lo)^a, right of
    it pieces [p_j, p_j + σ] of mass ≤ σφ(p_j)r(p_j + σ)^a, and beyond them the closed form
    ∫_p^∞ φ r^a ≤ 2^{max(a−1, 0)}[(1−q)^a Φ̄(p/σ) + q^a e^{a(a−1)/2σ²}Φ̄((p−a)/σ)], or
    (1 + 1/v(p))^a q^a e^{a(a−1)/2σ²}Φ̄((p−a)/σ) (r = q e^t(1 + 1/v), v increasing), with
    L = 1/σ² (normal tails bounded by :func:`_log_upper_tail`). Of a few y < πσ²
    (:data:`_Y_OVER_SIGMA`) the one that gives the largest limit is taken.

    Where the tilted mass sits at small ρ = ℓ'σ² (few sampled steps: the loss's near-zero
    mode) this lets the rule reach |u| far beyond the uniform criterion's 2πσ²/h_x, which
    takes L = 1/σ² everywhere.

    A window cut at X (:func:`far_part`) takes, instead of that closed form: [p, X], where
    log f falls at least as fast as −(p − aρ(X))/σ² (mass ≤ f(p)σ²/(p − aρ(X)), slope L(X));
    the far part's pieces (mass ≤ width·bound, slope L at the piece's right end); and beyond
    its last end p_P = a + _WIDTH·σ mass ≤ f(p_P)·σ/_WIDTH at slope 1/σ².

    Args: ``q, sigma, a, hx``: the batch shape ``B``; ``x, ell, t, ga``: ``B + (nx,)`` (the
    nodes, ℓ, t and log terms of :func:`line_terms`), ``m``: ``B + (1,)``; ``far``: the
    :func:`far_part` of the same run and line.

    Returns:
      ``B``: the largest |u| at which the bound holds (it grows with |u|); −1 where none.
    """
    nx = x.shape[-1]
    log1mq = _log_one_minus(q)
    log_beta_true = jnp.where(q < 1.0, jnp.log(q) - log1mq, jnp.inf)  # v = e^{log β + t}
    log_beta = jnp.where(q < 0.5, log_beta_true, jnp.inf)[..., None]  # slopes: 1/σ² at q ≥ 1/2
    se = sigma[..., None]
    # window: groups of consecutive nodes, mass Σ e^{g−m}, slope at the node after the group's
    # last (its cell reaches half a step beyond it; the last group's: half a step beyond hi)
    ends = np.minimum(np.arange(1, _GROUPS + 1) * (nx // _GROUPS), nx - 1)
    ends[-1] = nx - 1
    cum = jnp.cumsum(jnp.exp(ga - m), axis=-1)[..., ends]
    w_win = jnp.diff(cum, prepend=0.0, axis=-1)
    log_w = [jnp.log(jnp.maximum(w_win, 1e-300))]
    t_next = t[..., np.minimum(ends + 1, nx - 1)]
    t_next = t_next.at[..., -1].add(hx / (2.0 * sigma**2))  # t = (2x − 1)/2σ²
    slopes = [_slope(log_beta + t_next, se)]
    total = jnp.log(cum[..., -1])
    lo, hi = x[..., 0], x[..., -1]
    ae = a[..., None]

    def node(p):  # log φ(p) and ℓ, slope at p (..., k)
        ell_p, t_p = log_r(p, q[..., None], se)
        return _log_phi(p, se), ell_p, _slope(log_beta + t_p, se)

    # left of the window: r ≤ r(lo) (r increases), L ≤ L(lo)
    _, ell_lo, s_lo = node(lo[..., None])
    log_w.append(_log_upper_tail(-lo / sigma)[..., None] + ae * ell_lo - m)
    slopes.append(s_lo)
    # right of it: pieces of width σ
    p = hi[..., None] + se * jnp.arange(_TAIL_PIECES + 1, dtype=x.dtype)
    lphi, ell_p, s_p = node(p)
    log_w.append(jnp.log(se) + lphi[..., :-1] + ae * ell_p[..., 1:] - m)
    slopes.append(s_p[..., 1:])
    # beyond: closed form, slope 1/σ²; r = q e^t (1 + 1/v) ≤ q e^t (1 + 1/v(p)) for x ≥ p, or
    # r^a ≤ 2^{max(a−1, 0)}((1−q)^a + q^a e^{at}), whichever is smaller
    pe = p[..., -1]
    sampled = a * jnp.log(q) + a * (a - 1.0) / (2.0 * sigma**2) + _log_upper_tail((pe - a) / sigma)
    split = jnp.maximum(a - 1.0, 0.0) * np.log(2.0) + jnp.logaddexp(
        a * log1mq + _log_upper_tail(pe / sigma), sampled)
    log_v_end = log_beta_true + (2.0 * pe - 1.0) / (2.0 * sigma**2)
    closed = jnp.minimum(split, sampled + a * jnp.logaddexp(0.0, -log_v_end))
    log_w.append(jnp.where(far.on, -jnp.inf, closed)[..., None] - m)
    slopes.append(jnp.broadcast_to(1.0 / se**2, closed.shape + (1,)))
    # a cut window: [p, X], the far part's pieces, and beyond them (−∞ where uncut)
    cut = far.on[..., None]
    lead = pe - (far.hi - _WIDTH * sigma - 1.5)  # p − aρ(X) ≥ (8 + _WIDTH)σ + 1.5
    log_gap = (lphi[..., -1] + a * ell_p[..., -1] + 2.0 * jnp.log(sigma) - jnp.log(lead))
    log_gap = jnp.where(pe < far.x_cut, log_gap, -jnp.inf)
    pieces = far.log_sup + jnp.log(jnp.diff(far.ends, axis=-1))
    beyond = far.log_end + jnp.log(sigma / _WIDTH)
    for mass, at in ((log_gap[..., None], far.x_cut[..., None]), (pieces, far.ends[..., 1:]),
                     (beyond[..., None], None)):
        log_w.append(jnp.where(cut, mass - m, -jnp.inf))
        slope = (_slope(log_beta + (2.0 * at - 1.0) / (2.0 * se**2), se) if at is not None
                 else jnp.broadcast_to(1.0 / se**2, mass.shape))
        slopes.append(jnp.broadcast_to(slope, mass.shape))
    log_w = jnp.concatenate(log_w, -1)[..., None, :]  # B + (1, shells)
    slopes = jnp.concatenate(slopes, -1)[..., None, :]
    y = jnp.minimum(se * jnp.asarray(_Y_OVER_SIGMA, x.dtype), 0.95 * jnp.pi * se**2)  # B + (Y,)
    # Σ_s W_s e^{|u|yL_s} ≤ S·max_s over the S shells of some mass: every shell within the
    # budget left by the other factors
    shells = jnp.sum(log_w > -jnp.inf, axis=-1)  # B + (1,)
    budget = (total[..., None] - 0.5 * _RESOLVE**2 - jnp.log(2.0 * shells)
              + _logmath.log_expm1(2.0 * jnp.pi * y / hx[..., None]) - y**2 / (2.0 * se**2))
    room = budget[..., None] - log_w  # B + (Y, shells)
    yl = y[..., None] * slopes
    u_shell = jnp.where(room < 0.0, -1.0, jnp.where(yl > 0.0, room / jnp.where(yl > 0.0, yl, 1.0),
                                                     jnp.inf))
    return jnp.max(jnp.min(u_shell, axis=-1), axis=-1)


def aliasing_limit(q, sigma, c, d, nx: int, terms: Terms | None = None):
    """The largest |u| at which the x-rule of ``nx`` nodes is trusted by :func:`_aliasing_limit`.

    For the remove direction (d > 0); −1 for add (the uniform criterion alone). Computed once
    per line and handed to :func:`log_moment_uniform_line` and :func:`log_moment_line` (the
    line's nodes and its check points share one x-grid). No derivative.

    Args:
      q, sigma, c, d: broadcastable to a batch shape ``B``.
      nx: number of x-nodes (static).
      terms: the :func:`line_terms` of the same arguments (computed if None).

    Returns:
      ``B``.
    """
    q, sigma, c, d = (jax.lax.stop_gradient(v) for v in jnp.broadcast_arrays(q, sigma, c, d))
    if terms is None:
        terms = line_terms(q, sigma, c, d, nx)
    ell, t, ga, hx, x, _, far = jax.tree_util.tree_map(jax.lax.stop_gradient, terms)
    m, _ = _scaled(ga)
    remove = d > 0
    a = jnp.where(remove, exponent(c, d), 1.0)
    return jnp.where(remove, _aliasing_limit(q, sigma, a, x, ell, t, ga, m, hx, far), -1.0)


def _finish(fine, terms: Terms, m, mag, q, sigma, c, d, u, limit, roundings: int):
    """log M from the sums, and a bound on its relative error (see the module docstring).

    ``roundings``: the additions a term meets in the sum over x (static). By matrix products
    the real and imaginary parts are each within roundings·(eps/2)·Σ mag·(|cos α cos β| +
    |sin α sin β|) ≤ roundings·(eps/2)·Σ mag; directly, within roundings·(eps/2)·Σ mag|cos|
    and ·Σ mag|sin|. Either way the complex sum is within roundings·eps·Σ mag (√2 < 2).
    """
    ell, t, ga, hx, _, sizes, far = terms
    absfine = jnp.maximum(jnp.abs(fine), 1e-300)
    s0 = jnp.sum(mag, axis=-1)
    amp = s0[..., None] / absfine
    # aliasing: the strip bound at every u (relative to the terms' sum), and for remove
    # e^{−_RESOLVE²/2} within the per-run limit
    nodes = _strip_nodes(q, ell, t, ga, m, s0)
    log_strip = _log_real_aliasing(q, sigma, c, d, hx, ell.shape[-1], nodes, u)
    in_limit = jnp.abs(u) <= limit[..., None]
    log_alias = jnp.where(in_limit, jnp.minimum(log_strip, -0.5 * _RESOLVE**2), log_strip)
    # each term's own rounding, eps·(16 + |u ℓ_k| + |g_k − m|) of its size, summed with the sizes
    # as weights (their means, not maxima: a far node's |g_k − m| ~ 70 comes with a size e^{−70})
    mean = lambda v: jnp.sum(mag * v, axis=-1, keepdims=True) / s0[..., None]
    eta_round = (_EPS * (16.0 + roundings + jnp.abs(u) * mean(jnp.abs(ell)) + mean(jnp.abs(ga - m)))
                 * amp
                 + _parts_rounding(sizes, m, mag) / absfine)
    log_m = m + jnp.log(jnp.where(absfine > 1e-300, fine, 1.0))  # safe for gradients
    log_m = jnp.where(absfine > 1e-300, log_m, -jnp.inf)
    log_far = log_far_left_out(far, hx, sigma)
    eta_window = jnp.exp(_log_window_tail(ga, m, hx, sigma, log_far))[..., None] / absfine
    eta = jnp.exp(jnp.minimum(log_alias, 700.0)) * amp + eta_round + eta_window
    return log_m, jnp.where(absfine > 1e-300, eta, jnp.inf)


def log_moment_line(q, sigma, c, d, u, nx: int, limit=None, terms: Terms | None = None):
    """log M(c + iu) and its relative error estimate.

    Args:
      q, sigma, c, d: broadcastable to a batch shape ``B`` (c > 0; d = ±1, the direction).
      u: shape ``B + (N,)``.
      nx: number of x-nodes (static).
      limit: ``B``, :func:`aliasing_limit` of the same arguments (computed if None).
      terms: the :func:`line_terms` of the same arguments (computed if None).

    Returns:
      ``(log_m, eta)``: complex log M (principal branch) and a bound on its relative error,
      both of shape ``B + (N,)``.
    """
    if terms is None:
        terms = line_terms(q, sigma, c, d, nx)
    if limit is None:
        limit = aliasing_limit(q, sigma, c, d, nx, terms)
    q, sigma, c, d = (jnp.broadcast_to(v, terms.hx.shape) for v in (q, sigma, c, d))
    m, mag = _scaled(terms.ga)
    fine, roundings = _line_sums(terms.ell, mag, d, u)
    return _finish(fine, terms, m, mag, q, sigma, c, d, u, limit, roundings)


def log_moment_uniform_line(q, sigma, c, d, h, n: int, nx: int, limit=None,
                            terms: Terms | None = None, first: int = 0):
    """:func:`log_moment_line` at the equispaced points u_k = (first + k)·h, k < n, by blocks.

    Args:
      q, sigma, c, d, h: broadcastable to a batch shape ``B`` (h > 0, the step on the line).
      n: number of points (static).
      nx: number of x-nodes (static).
      limit: ``B``, :func:`aliasing_limit` of the same arguments (computed if None).
      terms: the :func:`line_terms` of the same arguments (computed if None).
      first: index of the first point (static), a multiple of :func:`block_size` ``(n)``:
        the points then share the phases' rounding bound of k < first + n.

    Returns:
      ``(log_m, eta)`` of shape ``B + (n,)``, as :func:`log_moment_line` at u = (first + k)·h.

    Raises:
      ValueError: ``first`` is not a multiple of the block.
    """
    if terms is None:
        terms = line_terms(q, sigma, c, d, nx)
    if limit is None:
        limit = aliasing_limit(q, sigma, c, d, nx, terms)
    q, sigma, c, d, h = (jnp.broadcast_to(v, terms.hx.shape) for v in (q, sigma, c, d, h))
    m, mag = _scaled(terms.ga)
    fine, roundings = _uniform_line_sums(terms.ell, mag, d, h, n, first)
    u = h[..., None] * (first + jnp.arange(n, dtype=terms.ell.dtype))
    return _finish(fine, terms, m, mag, q, sigma, c, d, u, limit, roundings)


# ------------------------------------------------------- a bound along a shifted x-contour

#: shifts θ = f·πσ² of the x-contour tried by :func:`log_shifted_bound` (fractions f)
_SHIFTS = (1.0 / 128.0, 1.0 / 32.0, 1.0 / 8.0, 0.25, 0.45)
#: x-nodes of :func:`log_shifted_bound`'s trapezoid rule
SHIFT_NODES = 257


def log_shifted_bound(q, sigma, c, d, u, log_m_up, nx: int = SHIFT_NODES):
    """log of a bound on |M(c + iu')| for every u' ≥ u ≥ 0, from the x-contour moved off ℝ.

    The integrand f(x) = φ(x)·r(x)^w (w = 1 + z remove, −z add) is analytic in
    |Im x| < πσ² (r has no zero there), so M = ∫ f(x + iθ_d) dx for θ_d = d·θ, 0 < θ < πσ²
    (Cauchy; f decays like a Gaussian). With ψ(x) = arg((1 − q) + q e^{t(x)} e^{iθ/σ²}) ≥ 0
    and R(x) = Re ℓ(x + iθ) (so ℓ(x ± iθ) = R ± iψ),
    |f(x + iθ_d)| = g_u(x) = exp(a·R(x) − u·ψ(x) − (x² − θ²)/2σ²)/(√(2π)σ), a = 1 + c or −c:
    positive, no oscillation, and non-increasing in u. So |M(c + iu')| ≤ ∫ g_u for u' ≥ u.
    That integral is bounded by the trapezoid rule on ``nx`` nodes of a window holding
    every mode, plus
    * the rule's error (Trefethen–Weideman 2014, Thm 5.1): g_u(x) = exp((H(x) + H̄(x))/2) with
      H = log f(· + iθ_d), analytic in |Im x| < πσ² − θ, and
      |g_u(x + iy)| = (|f(x + iθ_d + iy)|·|f(x + iθ_d − iy)|)^{1/2}. For |y| ≤ δ ≤ θ both
      lines lie on the side of ℝ where |r^{iu}| ≤ 1 (Im ℓ ≥ 0 for remove, ≤ 0 for add), and
      |r(x + iy)| ≤ r(x) (remove), |r(x − iy)| ≥ r(x)·cos(y/2σ²) (add: |a + b e^{iβ}| ≥
      (a + b)·cos(β/2)), so ∫|g_u(· + iy)| ≤ M(c)·e^{(θ² + δ²)/2σ²}·[cos((θ + δ)/2σ²)^{−c}, add];
      the error is at most twice that over e^{2πδ/h_x} − 1;
    * the nodes beyond the window: g_u ≤ g_0 ≤ e^{θ²/2σ²}·(the real integrand, times
      cos(θ/2σ²)^{−c} for add), and past the window's ends that is at most a Gaussian whose
      node sum is at most its integral (remove, right of c + 1: ℓ(x) ≤ ℓ(hi) + (x − hi)/σ²,
      left of 0: ℓ(x) ≤ ℓ(lo); add: e^{−cℓ} ≤ e^{−cℓ(hi)} right of 0, ≤ (1 − q)^{−c} left);
    * the rounding: 64·eps·(the largest exponent + 10) in log.
    The smallest bound over the shifts of :data:`_SHIFTS` is returned. Where few steps are
    sampled and the line is short it bounds little (ψ ≈ q e^t θ/σ² is tiny at the near-zero
    mode), but where the integrand has fallen it sees the fall with no Lipschitz term and no
    resolution of the phase e^{iuℓ}: the x-rule's step need only be a fraction of θ.

    Args:
      q, sigma, c, d: broadcastable to a batch shape ``B`` (c > 0; d = ±1, the direction).
      u: ``B + (P,)``, u ≥ 0.
      log_m_up: ``B``, log of an upper bound on M(c) (for the rule's error).
      nx: number of x-nodes (static).

    Returns:
      ``B + (P,)``: log of the bound on |M(c + iu')|, u' ≥ u (raw units, not over M(c)).
    """
    shape = jnp.broadcast_shapes(*(jnp.shape(v) for v in (q, sigma, c, d, log_m_up)))
    q, sigma, c, d, log_m_up = (jnp.broadcast_to(v, shape) for v in (q, sigma, c, d, log_m_up))
    remove = d > 0
    a = exponent(c, d)
    s2 = sigma**2
    lo = jnp.where(remove, -_WIDTH * sigma, -c - _WIDTH * sigma)
    hi = jnp.where(remove, c + 1.0 + _WIDTH * sigma, _WIDTH * sigma)
    hx = (hi - lo) / (nx - 1)
    x = lo[..., None] + hx[..., None] * jnp.arange(nx, dtype=q.dtype)
    log_1mq = _log_one_minus(q)
    ell_lo, _ = log_r(lo, q, sigma)
    ell_hi, _ = log_r(hi, q, sigma)
    # the nodes beyond the window, over e^{θ²/2σ²} (and cos(θ/2σ²)^{−c} for add); the
    # standard normal tail at _WIDTH by _log_upper_tail
    tail = _log_upper_tail(jnp.asarray(_WIDTH, q.dtype))
    right_rem = a * ell_hi - a * hi / s2 + a**2 / (2.0 * s2) + tail
    left_rem = a * ell_lo + tail
    right_add = a * ell_hi + tail
    left_add = a * log_1mq + _log_upper_tail(-lo / sigma)
    log_out = jnp.where(remove, jnp.logaddexp(right_rem, left_rem),
                        jnp.logaddexp(right_add, left_add))
    t = (2.0 * x - 1.0) / (2.0 * s2[..., None])
    big_a = jnp.broadcast_to(log_1mq[..., None], t.shape)
    big_b = jnp.log(q)[..., None] + t
    top = jnp.maximum(big_a, big_b)
    ea, eb = jnp.exp(big_a - top), jnp.exp(big_b - top)
    log_phi = _log_phi(x, sigma[..., None])
    uu = u[..., :, None]
    best = None
    for f in _SHIFTS:
        beta = np.pi * f  # θ/σ²
        theta2 = (np.pi * f) ** 2 * s2  # θ²/σ²
        cos_b, sin_b = np.cos(beta), np.sin(beta)
        # R − ℓ-scale: log|A + B e^{iβ}| and ψ = arg(A + B e^{iβ}), scaled by e^{top}
        big_r = top + 0.5 * jnp.log(ea**2 + 2.0 * ea * eb * cos_b + eb**2)
        psi = jnp.arctan2(eb * sin_b, ea + eb * cos_b)
        base = a[..., None] * big_r + log_phi + 0.5 * theta2[..., None]
        expo = base[..., None, :] - uu * psi[..., None, :]
        log_sum = jax.scipy.special.logsumexp(expo, axis=-1) + jnp.log(hx)[..., None]
        rounding = 64.0 * _EPS * (jnp.max(jnp.abs(expo), axis=-1) + 10.0)
        g = min(f, 0.98 - f)  # δ/(πσ²): the strip of the rule's error
        cos_arg = 0.5 * np.pi * (f + g)  # (θ + δ)/2σ²
        add_factor = jnp.where(remove, 0.0, -c * np.log(np.cos(cos_arg)))
        log_alias = (np.log(2.0) + log_m_up + 0.5 * (theta2 + (np.pi * g) ** 2 * s2) + add_factor
                     - _logmath.log_expm1(2.0 * np.pi * np.pi * g * s2 / hx))
        out_factor = 0.5 * theta2 + jnp.where(remove, 0.0, -c * np.log(np.cos(0.5 * beta)))
        extra = jnp.logaddexp(log_alias, log_out + out_factor)[..., None]
        bound = jnp.logaddexp(log_sum + rounding, extra)
        best = bound if best is None else jnp.minimum(best, bound)
    return best
