"""High-precision references for the privacy profile δ(ε) of the Sampled Gaussian Mechanism.

Independent of jaxrdp (only mpmath is used): these functions are what the tests of
``jaxrdp.profile`` compare against.

Setting (add-or-remove adjacency, sensitivity 1, one step):

- remove: P = (1−q)·N(0,σ²) + q·N(1,σ²), Q = N(0,σ²);
- add:    P = N(0,σ²),                    Q = (1−q)·N(0,σ²) + q·N(1,σ²).

The privacy loss of one step is L = log(p/q) under P. With ℓ(x) = log((1−q) + q·e^{(2x−1)/2σ²})
it is L = ℓ(x) (remove) and L = −ℓ(x) (add). After T steps L_T is the sum of T i.i.d. copies, and

    δ_dir(ε) = E_P[(1 − e^{ε − L_T})₊],        δ(ε) = max(δ_remove(ε), δ_add(ε)).

Four independent evaluations:

- :func:`gaussian_delta` — q = 1, the exact Gaussian (Balle & Wang 2018, Thm. 8) with μ = √T/σ;
- :func:`single_step_delta` — T = 1, any q: {L > ε} is a half-line in x, so δ is a
  combination of normal tail probabilities (no quadrature);
- :func:`convolution_delta` — T = 2, 3: δ_T(ε) = E[δ_1(ε − L_1 − … − L_{T−1})], the
  closed form of T = 1 integrated over the other T−1 steps by (nested) mpmath quadrature;
- :func:`line_integral_delta` — any T: the inverse two-sided Laplace transform

      δ_dir(ε) = (1/2π) ∫ Re[M(c+iu)^T · e^{−(c+iu)ε} / ((c+iu)(c+iu+1))] du,  c > 0,

  with M(z) = E_P[e^{zL}] from a trapezoid rule over x (error exponentially small in the
  node spacing) and the u-integral by mpmath quadrature on subintervals.

:func:`definition_delta` integrates E_P[(1 − e^{ε−L})₊] directly (T = 1) to check the closed
form, and :func:`epsilon_for_delta` inverts any of these by root finding.

Every function works inside a local ``mp.workdps`` context and returns an ``mpmath.mpf``.
"""

from __future__ import annotations

import mpmath as mp

__all__ = [
    "gaussian_delta",
    "single_step_delta",
    "definition_delta",
    "convolution_delta",
]

DPS = 40
DIRECTIONS = ("remove", "add")


def _check_direction(direction):
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be 'remove' or 'add', got {direction!r}")


def _ncdf(x):
    """Φ(x), accurate in both tails (erfc, no cancellation)."""
    return mp.erfc(-x / mp.sqrt(2)) / 2


def gaussian_delta(eps, sigma, steps, dps: int = DPS):
    """Exact δ(ε) of T Gaussian steps (q = 1): Φ(−εs + 1/(2s)) − e^ε Φ(−εs − 1/(2s)), s = σ/√T.

    Both directions coincide at q = 1. The difference is evaluated at ``dps + 20`` digits,
    enough for δ down to ~10^{−dps}·(Φ terms) without losing the requested digits.
    """
    with mp.workdps(dps + 20):
        eps, sigma, steps = mp.mpf(eps), mp.mpf(sigma), mp.mpf(steps)
        s = sigma / mp.sqrt(steps)
        a = _ncdf(-eps * s + 1 / (2 * s))
        b = mp.exp(eps) * _ncdf(-eps * s - 1 / (2 * s))
        out = a - b
    return out


def single_step_delta(q, sigma, eps, direction: str = "remove", dps: int = DPS):
    """Exact δ_dir(ε) of one step of the SGM, any real ε (negative ε allowed, for convolution).

    remove: L = ℓ(x) is increasing in x, {L > ε} = {x > x*} with
        (1−q) + q·e^{(2x*−1)/2σ²} = e^ε  ⇔  x* = 1/2 + σ²·log((e^ε − 1 + q)/q);
        δ = (1−q)Φ̄(x*/σ) + qΦ̄((x*−1)/σ) − e^ε Φ̄(x*/σ).
        If e^ε ≤ 1−q (ε at or below the minimal loss log(1−q)) the set is everything: δ = 1 − e^ε.
    add: L = −ℓ(x) is decreasing, {L > ε} = {x < x*} with
        (1−q) + q·e^{(2x*−1)/2σ²} = e^{−ε}  ⇔  x* = 1/2 + σ²·log((e^{−ε} − 1 + q)/q);
        δ = Φ(x*/σ) − e^ε[(1−q)Φ(x*/σ) + qΦ((x*−1)/σ)].
        If e^{−ε} ≤ 1−q (ε ≥ the maximal loss −log(1−q)) the set is empty: δ = 0 exactly.
    """
    _check_direction(direction)
    with mp.workdps(dps + 20):
        q, sigma, eps = mp.mpf(q), mp.mpf(sigma), mp.mpf(eps)
        if not 0 < q <= 1:
            raise ValueError("q must be in (0, 1]")
        sign = 1 if direction == "remove" else -1
        # e^{±ε} − (1 − q), written to keep digits when ε is tiny and q is tiny.
        gap = mp.expm1(sign * eps) + q
        if gap <= 0:
            out = -mp.expm1(eps) if direction == "remove" else mp.mpf(0)
            return out
        xs = mp.mpf(1) / 2 + sigma**2 * mp.log(gap / q)
        if direction == "remove":
            tail0 = _ncdf(-xs / sigma)  # Φ̄(x*/σ)
            tail1 = _ncdf(-(xs - 1) / sigma)  # Φ̄((x*−1)/σ)
            out = (1 - q) * tail0 + q * tail1 - mp.exp(eps) * tail0
        else:
            head0 = _ncdf(xs / sigma)
            head1 = _ncdf((xs - 1) / sigma)
            out = head0 - mp.exp(eps) * ((1 - q) * head0 + q * head1)
    return out


def _loss(q, sigma, x):
    """ℓ(x) = log((1−q) + q·e^{(2x−1)/2σ²}) without overflow for large x."""
    e = (2 * x - 1) / (2 * sigma**2)
    if q == 1:
        return e
    if e > 0:
        return e + mp.log(q + (1 - q) * mp.exp(-e))
    return mp.log1p(q * mp.expm1(e))


def _bisect(f, lo, hi, iters: int | None = None):
    """Root of a monotone f on [lo, hi] (f(lo), f(hi) of opposite signs) by plain bisection."""
    flo = f(lo)
    iters = iters or (mp.mp.prec + 20)
    for _ in range(iters):
        mid = (lo + hi) / 2
        fm = f(mid)
        if fm == 0:
            return mid
        if (fm < 0) == (flo < 0):
            lo, flo = mid, fm
        else:
            hi = mid
    return (lo + hi) / 2


def _components(q, direction):
    """The Gaussian components (weight, mean) of P."""
    if direction == "remove":
        return [(1 - q, mp.mpf(0)), (q, mp.mpf(1))] if q < 1 else [(mp.mpf(1), mp.mpf(1))]
    return [(mp.mpf(1), mp.mpf(0))]


def _gauss_expect(f, mean, sigma, extra_cuts=()):
    """E[f(x)] for x ~ N(mean, σ²) by tanh–sinh quadrature over t = (x − mean)/σ."""
    cuts = {mp.mpf(v) for v in (-20, -10, -5, -2, 0, 2, 5, 10, 20)}
    for c in extra_cuts:
        t = (c - mean) / sigma
        if -60 < t < 60:
            cuts.update({t - 2, t - 0.5, t, t + 0.5, t + 2})
    pts = [-mp.inf] + sorted(cuts) + [mp.inf]

    def g(t):
        return mp.npdf(t) * f(mean + sigma * t)

    return mp.quad(g, pts)


def definition_delta(q, sigma, eps, direction: str = "remove", dps: int = 30):
    """δ_dir(ε) of one step by quadrature of the definition E_P[(1 − e^{ε−L})₊] (no closed form).

    The kink of (·)₊ is located by root finding on ℓ (not by the closed-form x*) and used as a
    cut point; this is the check of :func:`single_step_delta`.
    """
    _check_direction(direction)
    with mp.workdps(dps + 10):
        q, sigma, eps = mp.mpf(q), mp.mpf(sigma), mp.mpf(eps)
        sign = 1 if direction == "remove" else -1

        def loss(x):
            return sign * _loss(q, sigma, x)

        # Bracket the kink L(x) = ε numerically, if it exists in a wide window.
        cuts = []
        lo, hi = mp.mpf(-200) * (1 + sigma**2), mp.mpf(200) * (1 + sigma**2)
        flo, fhi = loss(lo) - eps, loss(hi) - eps
        if flo * fhi < 0:
            cuts.append(_bisect(lambda x: loss(x) - eps, lo, hi))

        def f(x):
            v = -mp.expm1(eps - loss(x))
            return v if v > 0 else mp.mpf(0)

        total = mp.mpf(0)
        for w, m in _components(q, direction):
            total += w * _gauss_expect(f, m, sigma, cuts)
    return total


def _loss_level_points(q, sigma, direction, levels):
    """x where the one-step loss equals each level (where such x exists), as quadrature cuts."""
    sign = 1 if direction == "remove" else -1
    out = []
    for lev in levels:
        gap = mp.expm1(sign * lev) + q
        if gap > 0:
            out.append(mp.mpf(1) / 2 + sigma**2 * mp.log(gap / q))
    return out


def _trapezoid_nodes(sigma, radius, weight_floor):
    """Trapezoid nodes t_k = k·h on [−radius, radius] and weights h·φ(t_k) above weight_floor.

    The integrands used here are analytic in a strip |Im x| < πσ² (the log-singularities of the
    loss where (1−q) + q·e^{(2x−1)/2σ²} = 0), i.e. |Im t| < πσ; the trapezoid error for a
    Gaussian-weighted function analytic in that strip is O(e^{−2π·πσ/h}) = O(e^{−59}) with
    h = min(1/4, σ/3), relative to the integrand's size.
    """
    h = min(mp.mpf(1) / 4, sigma / 3)
    n = int(radius / h) + 1
    nodes = []
    for k in range(-n, n + 1):
        t = k * h
        w = h * mp.npdf(t)
        if w > weight_floor:
            nodes.append((t, w))
    return nodes


def convolution_delta(q, sigma, steps, eps, direction: str = "remove", dps: int = 25):
    """δ_dir(ε) for T = 1, 2, 3 steps by conditioning on all but one step.

    δ_T(ε) = E_{x_1..x_{T−1} ~ P}[δ_1(ε − L(x_1) − … − L(x_{T−1}))] where δ_1 is the exact
    one-step profile of :func:`single_step_delta` (valid for any real argument). The outer
    expectation runs over each Gaussian component of P with the trapezoid rule in
    t = (x − mean)/σ (see :func:`_trapezoid_nodes`; truncated where the product of the
    Gaussian weights falls below 1e-70, i.e. far below any δ tabulated here). Independent of
    the Laplace-transform route; cost grows like (nodes)^{T−1}, so only T ≤ 3 is supported.
    """
    _check_direction(direction)
    steps = int(steps)
    if steps not in (1, 2, 3):
        raise ValueError("convolution_delta supports steps in {1, 2, 3}")
    with mp.workdps(dps + 10):
        q, sigma, eps = mp.mpf(q), mp.mpf(sigma), mp.mpf(eps)
        sign = 1 if direction == "remove" else -1
        if steps == 1:
            return single_step_delta(q, sigma, eps, direction, dps=dps)
        floor = mp.mpf(10) ** -70
        nodes = _trapezoid_nodes(sigma, 18, floor)
        # Draws of one step: (probability weight, loss) over components × nodes.
        draws = []
        for wc, m in _components(q, direction):
            for t, w in nodes:
                draws.append((wc * w, sign * _loss(q, sigma, m + sigma * t)))

        def d1(e):
            return single_step_delta(q, sigma, e, direction, dps=dps)

        total = mp.mpf(0)
        if steps == 2:
            for w, l1 in draws:
                total += w * d1(eps - l1)
        else:
            for w1, l1 in draws:
                for w2, l2 in draws:
                    if w1 * w2 > floor:
                        total += w1 * w2 * d1(eps - l1 - l2)
    return total
