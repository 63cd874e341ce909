"""High-precision references for log A_α of the Sampled Gaussian Mechanism, in mpmath.

Independent of jaxrdp's formulation: integer orders use the exact binomial sum of
Mironov–Talwar–Zhang (2019), Sec. 3.3, Case I; fractional orders integrate the
*definition* A_α = E_{z∼N(0,σ²)}[((1−q) + q·e^{(2z−1)/2σ²})^α] with tanh–sinh quadrature
at high working precision, the real line cut at points where the integrand has its bumps.
"""

from __future__ import annotations

import mpmath as mp

DPS = 60


def log_a_integer(q, sigma, alpha: int, dps: int = DPS):
    """log A_α for integer α ≥ 0 by the exact binomial sum (A − 1 summed term by term)."""
    with mp.workdps(dps):
        q, sigma = mp.mpf(q), mp.mpf(sigma)
        if q == 0:
            return mp.mpf(0)
        total = mp.mpf(0)
        for k in range(2, alpha + 1):
            total += (
                mp.binomial(alpha, k)
                * q**k
                * (1 - q) ** (alpha - k)
                * mp.expm1(mp.mpf(k * (k - 1)) / (2 * sigma**2))
            )
        return mp.log1p(total)


def log_a_fractional(q, sigma, alpha, dps: int = DPS):
    """log A_α for real α > 1 by quadrature of the definition over t = z/σ."""
    with mp.workdps(dps + 20):
        q, sigma, alpha = mp.mpf(q), mp.mpf(sigma), mp.mpf(alpha)
        if q == 0:
            return mp.mpf(0)
        s = 1 / sigma

        def log_integrand(t):
            mix = (1 - q) + q * mp.exp(s * t - s * s / 2)
            return -t * t / 2 + alpha * mp.log(mix)

        # Cut the line where mass may sit: the bulk, each binomial bump k·s up to α·s,
        # and the crossover t₁ where q·e^{...} = 1 − q.
        t1 = (mp.log((1 - q) / q) + s * s / 2) / s
        cuts = {mp.mpf(v) for v in (-12, -6, 0, 6, 12)}
        top = alpha * s
        for centre in (top, t1, q * alpha * s):
            for d in (-12, -6, -3, 0, 3, 6, 12):
                cuts.add(centre + d)
        k = 1
        while k * s < top + 12 and k < 4096:
            cuts.add(k * s)
            k += 1 if s > 0.5 else max(1, int(1 / s))
        points = [-mp.inf] + sorted(c for c in cuts if -40 < c < top + 40) + [mp.inf]
        # Scale by the largest sampled value so the integrand stays O(1).
        peak = max(log_integrand(c) for c in points[1:-1])
        integral = mp.quad(
            lambda t: mp.exp(log_integrand(t) - peak), points, maxdegree=10
        ) / mp.sqrt(2 * mp.pi)
        log_a = peak + mp.log(integral)
        return log_a
