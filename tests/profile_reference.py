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
    "line_integral_delta",
    "profile_delta",
    "epsilon_for_delta",
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


# ----------------------------------------------------------------------------------------------
# Inverse Laplace transform along a vertical line (any T)
# ----------------------------------------------------------------------------------------------


class _Mgf:
    """log E[e^{zL}] of one step, L the loss, x ~ N(mean, σ²), by the trapezoid rule in x.

    ``mean`` picks the Gaussian component of P (remove: 0 or 1 with weights 1−q, q; add: 0).
    The grid covers [mean − Kσ, mean + tilt + Kσ] (the tilted density e^{cL}·φ has its bumps at
    the mean and, for remove, at mean + c), with t-step h = min(1/4, σ/3, πσ/U): the integrand
    is analytic for |Im x| < πσ² and grows at most like e^{|u|·|Im x|/σ²} there, so the
    trapezoid error is O(e^{−0.9·min(59, πU)}) relative to the integrand's size for |Im z| ≤ U.
    """

    K = 15  # φ(15) ≈ 1e-49

    def __init__(self, q, sigma, direction, mean, tilt, u_max):
        self.sign = 1 if direction == "remove" else -1
        h = min(mp.mpf(1) / 4, sigma / 3, mp.pi * sigma / max(u_max, 1))
        lo = -self.K
        hi = self.K + max(tilt, 0) / sigma
        n0, n1 = int(mp.floor(lo / h)), int(mp.ceil(hi / h))
        self.logw = []
        self.loss = []
        for k in range(n0, n1 + 1):
            t = k * h
            self.logw.append(mp.log(h) - t * t / 2 - mp.log(2 * mp.pi) / 2)
            self.loss.append(self.sign * _loss(q, sigma, mean + sigma * t))

    def __call__(self, z):
        """log M(z); complex z allowed (principal log; only exp(T·log M) is ever used)."""
        terms = [lw + z * l for lw, l in zip(self.logw, self.loss)]
        top = max(mp.re(t) for t in terms)
        return top + mp.log(mp.fsum(mp.exp(t - top) for t in terms))


def _mixture_log(parts):
    """log Σ w_i e^{a_i} for [(w_i, a_i)] (w_i > 0)."""
    top = max(mp.re(a) for _, a in parts)
    return top + mp.log(mp.fsum(w * mp.exp(a - top) for w, a in parts))


def _golden_min(f, lo, hi, iters=80):
    """Minimum of a convex f on [lo, hi] (log-spaced golden-section search)."""
    a, b = mp.log(lo), mp.log(hi)
    g = (mp.sqrt(5) - 1) / 2
    x1, x2 = b - g * (b - a), a + g * (b - a)
    f1, f2 = f(mp.exp(x1)), f(mp.exp(x2))
    for _ in range(iters):
        if f1 < f2:
            b, x2, f2 = x2, x1, f1
            x1 = b - g * (b - a)
            f1 = f(mp.exp(x1))
        else:
            a, x1, f1 = x1, x2, f2
            x2 = a + g * (b - a)
            f2 = f(mp.exp(x2))
    return mp.exp((a + b) / 2)


def _line_delta(logmgf_total, eps, c, u_max, digits, log_delta_est, h_scale=1):
    """(1/2π)∫ Re[e^{K(z)} e^{−zε}/(z(z+1))] du on Re z = c by the trapezoid rule in u.

    K(z) = log of the T-step MGF. By Poisson summation the trapezoid sum with step h equals
    Σ_k δ(ε + 2πk/h)·e^{2πck/h}: the k < 0 aliases are ≤ e^{−2πc/h} in total (δ ≤ 1), the k > 0
    ones are ~ exp(−(2π/h)²/(2K''(c))) relative to δ(ε). h is set so both are below
    10^{−digits}·δ; the sum is truncated where the integrand has fallen below 10^{−digits−5} of
    its peak, before u_max (else None is returned: not converged).
    """

    def f(u):
        z = mp.mpc(c, u)
        return mp.re(mp.exp(logmgf_total(z) - z * eps) / (z * (z + 1)))

    # second derivative of K at c (real), numerically
    d = c * mp.mpf(10) ** -8
    k2 = (logmgf_total(c + d) - 2 * logmgf_total(c) + logmgf_total(c - d)) / d**2
    k2 = mp.re(k2) + 1 / c**2 + 1 / (c + 1) ** 2
    target = digits * mp.log(10) + 10
    h_alias_neg = 2 * mp.pi * c / (target - log_delta_est)
    h_alias_pos = 2 * mp.pi / mp.sqrt(2 * target * k2)
    h = min(h_alias_neg, h_alias_pos) * h_scale
    peak = abs(f(0))
    total = f(0) / 2
    k = 1
    small_run = 0
    while True:
        u = k * h
        if u > u_max:
            return None, h
        v = f(u)
        total += v
        if abs(v) < peak * mp.mpf(10) ** (-digits - 5):
            small_run += 1
            if small_run >= 20:
                break
        else:
            small_run = 0
        k += 1
    return total * h / mp.pi, h


def line_integral_delta(q, sigma, steps, eps, direction="remove", dps=30, c=None, split=None,
                        u_max=None, return_info=False, h_scale=1 / 3):
    """δ_dir(ε) after T steps by the inverse Laplace transform along Re z = c.

    δ_dir(ε) = (1/2π) ∫ Re[M(c+iu)^T e^{−(c+iu)ε} / ((c+iu)(c+iu+1))] du, M(z) = E_P[e^{zL}],
    M from the trapezoid rule in x (:class:`_Mgf`), the u-integral by the trapezoid rule with
    its step from the Poisson-summation alias bound (:func:`_line_delta`). c defaults to the
    saddle point of T·log M(c) − cε − log(c(c+1)).

    ``split=True`` (remove only) evaluates instead the exact decomposition by the number k of
    sampled steps, δ = Σ_k Bin(k; T, q)·δ_k(ε), where δ_k has MGF M₁^k·M₀^{T−k} (M_m the MGF
    under the component N(m, σ²)) and its own saddle point. This removes the near-atom of the
    unsampled steps that makes the single line integral hard when q·√T is small. Terms are
    summed until the binomial tail is below 10^{−dps} of the running total.
    Returns an mpf, or None if the u-integral did not converge before u_max.

    ``h_scale`` multiplies the u-step from the Gaussian alias estimate; the default 1/3 is
    needed because the tilted T-step loss has heavier-than-Gaussian right tails (at the full
    step the DP-SGD case q = 256/50000, σ = 1, T = 2000, ε = 1.24 is off by 2e-6 relative; at
    1/3 and 1/6 it agrees to 18 digits). Check accuracy by repeating with h_scale halved.

    Limits: for few steps (T ≲ 10 with small q) the integrand decays slowly in u (the
    near-atom of unsampled steps) and this routine may return None or take very long; use
    :func:`convolution_delta` for T ≤ 3. ``split=True`` is experimental and NOT validated: its
    k = 0 term keeps a near-atom at its own saddle and did not finish in minutes at
    q = 4.1e-4, σ = 0.96, T = 1480.
    """
    _check_direction(direction)
    steps = int(steps)
    with mp.workdps(dps + 15):
        q, sigma, eps = mp.mpf(q), mp.mpf(sigma), mp.mpf(eps)
        if split is None:
            split = False
        if split and direction != "remove":
            raise ValueError("split is only defined for the remove direction")
        info = {}
        if not split:
            comps = _components(q, direction)
            parts_fn = lambda m_list: (lambda z: steps * _mixture_log(  # noqa: E731
                [(w, m(z)) for (w, _), m in zip(comps, m_list)]))
            # Saddle on a coarse real grid first (grid independent of u).
            def real_mgf(tilt):
                return [_Mgf(q, sigma, direction, mean, tilt, 0) for _, mean in comps]

            if c is None:
                ms = real_mgf(max(1, 4 * sigma**2 * max(eps, 1) + 10))

                def obj(cc):
                    return parts_fn(ms)(cc) - cc * eps - mp.log(cc * (cc + 1))

                c = _golden_min(obj, mp.mpf(10) ** -4, mp.mpf(10) ** 5)
                # refine with a grid sized for the found c
                ms = real_mgf(c)
                c = _golden_min(obj, c / 4, c * 4, iters=60)
            c = mp.mpf(c)
            info["c"] = c
            ms = real_mgf(c)
            K = parts_fn(ms)
            log_est = K(c) - c * eps - mp.log(c * (c + 1))
            # u-range: Gaussian estimate of the bump width, then grid for that range.
            d = c * mp.mpf(10) ** -8
            k2 = mp.re(K(c + d) - 2 * K(c) + K(c - d)) / d**2 + 1 / c**2
            u_est = mp.sqrt(2 * (dps + 10) * mp.log(10) / k2) * 3
            umax = mp.mpf(u_max) if u_max is not None else u_est
            for _ in range(4 if u_max is None else 1):
                ms = [_Mgf(q, sigma, direction, mean, c, umax) for _, mean in comps]
                val, h = _line_delta(parts_fn(ms), eps, c, umax, dps, log_est, h_scale)
                if val is not None:
                    break
                umax *= 4
            info.update(h=h, u_max=umax)
            out = val
        else:
            m0 = None
            total = mp.mpf(0)
            k_mean = q * steps
            terms = []
            k = 0
            while k <= steps:
                w = mp.binomial(steps, k) * q**k * (1 - q) ** (steps - k)
                # binomial tail beyond k (bounded by the next term's geometric series)
                if k > k_mean + 1 and total > 0 and w < total * mp.mpf(10) ** (-dps - 5):
                    break
                if w == 0:
                    k += 1
                    continue
                dk = _split_term(q, sigma, steps, k, eps, dps)
                if dk is None:
                    return (None, info) if return_info else None
                terms.append((k, w, dk))
                total += w * dk
                k += 1
            info["terms"] = terms
            out = total
    return (out, info) if return_info else out


def _split_term(q, sigma, steps, k, eps, dps):
    """δ_k(ε) for the loss Σ of k steps with x ~ N(1,σ²) and T−k with x ~ N(0,σ²) (remove)."""

    def build(tilt, umax):
        m0 = _Mgf(q, sigma, "remove", mp.mpf(0), tilt, umax) if steps - k else None
        m1 = _Mgf(q, sigma, "remove", mp.mpf(1), tilt, umax) if k else None

        def K(z):
            s = 0
            if m0 is not None:
                s += (steps - k) * m0(z)
            if m1 is not None:
                s += k * m1(z)
            return s

        return K

    K = build(max(1, 4 * sigma**2 * max(eps, 1) + 10), 0)

    def obj(cc):
        return K(cc) - cc * eps - mp.log(cc * (cc + 1))

    c = _golden_min(obj, mp.mpf(10) ** -4, mp.mpf(10) ** 6)
    K = build(c, 0)
    c = _golden_min(obj, c / 4, c * 4, iters=60)
    K = build(c, 0)
    log_est = obj(c)
    if log_est < -(dps + 40) * mp.log(10) - 50:  # negligible term (e.g. k = 0 far tail)
        pass
    d = c * mp.mpf(10) ** -8
    k2 = mp.re(K(c + d) - 2 * K(c) + K(c - d)) / d**2 + 1 / c**2
    umax = mp.sqrt(2 * (dps + 10) * mp.log(10) / k2) * 3
    for _ in range(4):
        val, _ = _line_delta(build(c, umax), eps, c, umax, dps, log_est)
        if val is not None:
            return val
        umax *= 4
    return None


# ----------------------------------------------------------------------------------------------
# Dispatch and inversion
# ----------------------------------------------------------------------------------------------


def profile_delta(q, sigma, steps, eps, direction="both", dps=30, split=False):
    """δ(ε) (direction "both": the max of remove and add) by the best available reference.

    q = 1: :func:`gaussian_delta`; T = 1: :func:`single_step_delta`; T = 2, 3:
    :func:`convolution_delta`; otherwise :func:`line_integral_delta` (``split`` forwarded to the
    remove direction). Returns (value, method).
    """
    steps = int(steps)
    if direction == "both":
        r, m = profile_delta(q, sigma, steps, eps, "remove", dps, split)
        a, _ = profile_delta(q, sigma, steps, eps, "add", dps, split)
        if r is None or a is None:
            return None, m
        return max(r, a), m
    if mp.mpf(q) == 1:
        return gaussian_delta(eps, sigma, steps, dps), "closed_gaussian"
    if steps == 1:
        return single_step_delta(q, sigma, eps, direction, dps), "closed_single"
    if steps <= 3:
        return convolution_delta(q, sigma, steps, eps, direction, min(dps, 25)), "convolution"
    sp = split if direction == "remove" else False
    return line_integral_delta(q, sigma, steps, eps, direction, dps, split=sp), "line_integral"


def epsilon_for_delta(q, sigma, steps, delta, dps=30, split=False, rel_tol=1e-13,
                      bracket=(1e-6, 500.0), max_iter=60):
    """ε with δ(ε) = delta (δ = max over directions), by the Illinois (safeguarded regula
    falsi) method on g(ε) = log δ(ε) − log delta, which is monotone non-increasing in ε.

    Returns the upper end of the final bracket, so δ(returned ε) ≤ delta, the bracket's
    relative width ≤ rel_tol (or the secant step below rel_tol). Returns 0 if δ(bracket[0]) ≤
    delta already.
    """
    with mp.workdps(dps + 10):
        logt = mp.log(mp.mpf(delta))

        def g(e):
            v, _ = profile_delta(q, sigma, steps, e, "both", dps, split)
            if v is None:
                raise RuntimeError("reference did not converge")
            return mp.log(v) - logt if v > 0 else mp.mpf(-10) ** 6

        a, b = mp.mpf(bracket[0]), mp.mpf(bracket[1])
        ga, gb = g(a), g(b)
        if ga <= 0:
            return mp.mpf(0)
        if gb > 0:
            raise ValueError("delta not reached below the bracket's upper end")
        # Shrink a huge bracket geometrically first (g is far from linear over decades).
        while b / a > 2:
            m = mp.sqrt(a * b)
            gm = g(m)
            if gm > 0:
                a, ga = m, gm
            else:
                b, gb = m, gm
        side = 0
        for _ in range(max_iter):
            m = (a * gb - b * ga) / (gb - ga)
            gm = g(m)
            if gm > 0:
                a, ga = m, gm
                if side == -1:
                    gb /= 2
                side = -1
            else:
                b, gb = m, gm
                if side == 1:
                    ga /= 2
                side = 1
            if (b - a) / b < rel_tol or gm == 0:
                break
        return b


def nested_quad_delta(q, sigma, steps, eps, direction: str = "remove",
                      loss_breaks: bool = False):
    """δ_dir(ε) for T = 2, 3 by adaptive nested quadrature in double precision (scipy).

    δ_T(ε) = E[δ_1(ε − L(x_1) − … − L(x_{T−1}))] with δ_1 the one-step closed form written
    with scipy's normal tails, and the outer expectations over x_i ∼ P by ``scipy.integrate.quad``
    on the mixture's components (relative tolerance 1e-12; accurate to about 1e-10 relative
    where δ ≳ 1e-8). Independent of :func:`convolution_delta`, whose fixed trapezoid rule
    is only accurate to ~1e-3 here: the one-step profile δ_1(v) has a kink where
    e^v = 1 − q (remove) and the rule does not place a node there.

    ``loss_breaks`` (remove direction): each quadrature is split where a step's loss reaches
    ε·(1/4, 1/2, 3/4, 0.9, 1, 1.1), and the inner one also where it reaches what the outer
    step left of ε, for runs where a rare far step carries the loss (tiny q, small σ, tiny
    δ): unsplit, the far outputs' share was missed by 3.4e-6 of δ at q = 2.92e-6,
    σ = 0.483, T = 3, ε = 1.36 (δ = 2.0e-14), with scipy's round-off warnings. Slow: 1 to 6
    minutes at T = 3 (each piece to a relative 1e-13).
    """
    import numpy as np
    from scipy import integrate, special

    _check_direction(direction)
    steps = int(steps)
    if steps not in (2, 3):
        raise ValueError("nested_quad_delta supports T = 2 or 3")
    s2 = 2.0 * sigma * sigma
    ell = lambda x: np.log1p(q * np.expm1((2.0 * x - 1.0) / s2))
    sf = lambda z: 0.5 * special.erfc(z / np.sqrt(2.0))  # upper normal tail

    def threshold(v):  # x with ℓ(x) = v, or −inf when e^v ≤ 1 − q
        a = np.exp(v) - (1.0 - q)
        return -np.inf if a <= 0 else 0.5 * (s2 * (np.log(a) - np.log(q)) + 1.0)

    def scaled(v, tail):  # e^v·tail without inf·0
        return 0.0 if tail == 0.0 else np.exp(v + np.log(tail))

    def one_step(v):
        if direction == "remove":  # L = ℓ, P = mixture, Q = N(0): δ = P(x > x*) − e^v Q(x > x*)
            x0 = threshold(v)
            if x0 == -np.inf:
                return -np.expm1(v)
            p = (1.0 - q) * sf(x0 / sigma) + q * sf((x0 - 1.0) / sigma)
            return max(p - scaled(v, sf(x0 / sigma)), 0.0)
        # add: L = −ℓ, P = N(0), Q = mixture; L > v ⇔ x < x*(−v)
        x0 = threshold(-v)
        if x0 == -np.inf:
            return 0.0
        p = sf(-x0 / sigma)
        qq = (1.0 - q) * sf(-x0 / sigma) + q * sf(-(x0 - 1.0) / sigma)
        return max(p - scaled(v, qq), 0.0)

    sign = 1.0 if direction == "remove" else -1.0
    means = (0.0, 1.0) if direction == "remove" else (0.0,)
    weights = (1.0 - q, q) if direction == "remove" else (1.0,)

    def breaks(left):  # outputs where one step's loss reaches a share of what is left of ε
        if not loss_breaks or direction != "remove" or left <= 0.0:
            return []
        return [threshold(f * left) for f in (0.25, 0.5, 0.75, 0.9, 1.0, 1.1)]

    def expect(f, extra=()):  # E_P[f(x)] over P's Gaussian components
        total = 0.0
        for m, w in zip(means, weights):
            if w == 0.0:
                continue
            g = lambda x: np.exp(-0.5 * ((x - m) / sigma) ** 2) / (sigma * np.sqrt(2 * np.pi)) * f(x)
            lo, hi = m - 40.0 * sigma, m + 40.0 * sigma
            inner = sorted({m - sigma, m, m + sigma}
                           | {p for p in extra if lo < p < hi and np.isfinite(p)})
            if not loss_breaks:
                val, _ = integrate.quad(g, lo, hi, epsabs=0.0, epsrel=1e-12, limit=400,
                                        points=inner)
            else:  # piece by piece (scipy's points miss narrow far features)
                edges = [lo, *inner, hi]
                val = sum(integrate.quad(g, a, b, epsabs=0.0, epsrel=1e-13, limit=500)[0]
                          for a, b in zip(edges[:-1], edges[1:]))
            total += w * val
        return total

    if steps == 2:
        return expect(lambda x: one_step(eps - sign * ell(x)), breaks(eps))
    def inner_breaks(x):  # and where the second step's loss reaches what the first left
        left = eps - sign * ell(x)
        return breaks(eps) + ([threshold(left)] if loss_breaks and left > 0.0 else [])

    return expect(lambda x: expect(lambda y: one_step(eps - sign * (ell(x) + ell(y))),
                                   inner_breaks(x)), breaks(eps))
