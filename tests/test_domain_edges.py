"""The privacy profile and the δ conversions at the edges of the domain: full batches (q = 1),
ε beyond e^ε's overflow, and δ too small for a float.

References are independent: the Gaussian mechanism's exact profile and the single step's
normal tails at 60 digits (``profile_reference``, mpmath), and the closed-form cumulants of a
Gaussian privacy loss.
"""

import jax
import jax.numpy as jnp
import mpmath as mp
import numpy as np
import pytest

import jaxrdp
from jaxrdp import _complex_moments as cm
from jaxrdp import profile, zcdp

import profile_reference as ref

TINY = float(np.finfo(np.float64).tiny)


def _gaussian_epsilon(sigma_eff, delta):
    """The exact ε of a Gaussian mechanism with noise σ_eff at δ: bisection on the mpmath
    profile (one step, q = 1), bracket below 1e-25 relative."""
    if ref.gaussian_delta(0, sigma_eff, 1) <= delta:
        return mp.mpf(0)
    lo, hi = mp.mpf(0), mp.mpf(1)
    while ref.gaussian_delta(hi, sigma_eff, 1) > delta:
        hi *= 2
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if ref.gaussian_delta(mid, sigma_eff, 1) > delta else (lo, mid)
    return hi


def test_full_batch_runs_are_exact_gaussians():
    """q = 1 (full-batch DP-GD): T steps at σ compose to one Gaussian mechanism with noise
    σ/√T (a schedule: (Σ T_i/σ_i²)^{−1/2}), which the single-step closed form evaluates.
    Before, such runs went through the line integral, which failed at small σ/√T: q = 1,
    σ = 0.3, T = 2, ε = 10 fell back to RDP's δ 0.889 against the exact 0.510. Now every run
    with ε ≤ 500 is PROFILE_OK, δ(ε) and ε(δ) are never below the exact values and within
    1e-9 of them (measured: 1.4e-10 on δ, 3.9e-12 on ε)."""
    rng = np.random.default_rng(3)
    n = 12
    steps = np.round(10 ** rng.uniform(0, 7, n))
    sigma = 10 ** rng.uniform(np.log10(0.3), 4, n)
    delta = 10 ** rng.uniform(-20, np.log10(0.5), n)
    sigma[0], steps[0] = 0.3, 2  # the failing run above
    s_eff = sigma / np.sqrt(steps)
    res = profile.epsilon(1.0, sigma, steps, delta)
    eps, status = np.asarray(res.epsilon), np.asarray(res.status)
    assert np.all(eps <= np.asarray(res.epsilon_rdp))
    assert np.all(status != profile.RDP_FALLBACK)
    worst, inside = 0.0, []
    for i in range(n):
        exact = _gaussian_epsilon(s_eff[i], delta[i])
        inside.append(exact <= 500)
        assert exact <= eps[i], i
        if exact == 0:  # δ(0) already meets the target
            assert eps[i] == 0.0 and status[i] == profile.PROFILE_OK, i
        elif exact <= 500:  # the domain (one draw is beyond: ε = 7.5e5, loose)
            assert status[i] == profile.PROFILE_OK and eps[i] <= exact * (1 + 1e-9), i
            worst = max(worst, float(eps[i] / exact - 1))
    # δ(ε) at those ε (in the domain) and at ε = 10 for the first run
    keep = np.flatnonzero(inside)
    sigma, steps, e = sigma[keep], steps[keep], np.where(keep == 0, 10.0, eps[keep])
    got = profile.delta(1.0, sigma, steps, e)
    assert np.all(np.asarray(got.status) == profile.PROFILE_OK)
    d, worst_d = np.asarray(got.delta), 0.0
    for i in range(keep.size):
        exact = ref.gaussian_delta(e[i], sigma[i], steps[i])
        assert exact <= d[i] <= exact * (1 + 1e-9), i
        worst_d = max(worst_d, float(d[i] / exact - 1))
    assert abs(d[0] - 0.5103214) < 1e-6  # was RDP's 0.889
    print("worst excess: ε", worst, "δ", worst_d)


def test_full_batch_schedule_is_one_gaussian():
    """Two q = 1 segments (σ 1.2 × 300 steps, σ 3 × 2 000) and an unsampled one: the same
    ε as one Gaussian with σ = (300/1.44 + 2000/9)^{−1/2}, exact to 1e-9."""
    q = np.array([1.0, 1.0, 0.0])
    res = profile.epsilon_schedule(q, np.array([1.2, 3.0, 0.7]), np.array([300, 2000, 50]), 1e-6)
    s_eff = (300 / 1.44 + 2000 / 9.0) ** -0.5
    exact = _gaussian_epsilon(s_eff, 1e-6)
    assert int(res.status) == profile.PROFILE_OK
    assert exact <= float(res.epsilon) <= exact * (1 + 1e-9)


def test_one_step_beyond_the_overflow_of_exp_epsilon():
    """ε above ~709, where e^ε overflows: the single-step closed form took log1p(expm1(ε)/q)
    (NaN) and δ_add's c = q + expm1(−ε) (0 at q = 1), so such runs fell back to RDP (ε 832.6)
    or returned NaN fields. q = 1, σ = 0.5986, T = 461 (σ_eff = 0.0279) at δ = 2.67e-6:
    exact ε 805.57 (its error bound grows with ε: within 5e-9 here)."""
    res = profile.epsilon(1.0, 0.5986, 461, 2.67e-6)
    exact = _gaussian_epsilon(0.5986 / np.sqrt(461), 2.67e-6)
    assert int(res.status) == profile.PROFILE_OK
    assert exact <= float(res.epsilon) <= exact * (1 + 5e-9)  # measured 1.4e-9
    # one step at ε of 800 to 10⁴: δ far below a float, finite fields, not an RDP fallback
    for q in (1.0, 0.5, 1e-3):
        got = profile.delta(q, 1.0, 1, np.array([800.0, 2000.0, 1e4]))
        fields = [np.asarray(getattr(got, f)) for f in ("delta_remove", "delta_add", "rel_error")]
        assert all(np.all(np.isfinite(f)) for f in fields), q
        assert np.all(np.asarray(got.delta) == TINY)
        assert np.all(np.asarray(got.status) == profile.PROFILE_OK)


def test_q_one_moments_far_left_are_finite_and_gaussian():
    """At q = 1 the loss is Gaussian: κ(c) = a(a − 1)/2σ² with a = 1 + c (remove) or −c
    (add), κ' = (2c + 1)/2σ², κ'' = 1/σ², μ₄ = 3/σ⁴. log r(x) took log1p(q·expm1(t)), which
    is −inf far left (q·expm1(t) rounds to −1) and made these NaN for σ = 0.3; measured
    now: 4e-15 relative."""
    s = 0.3
    for c in (0.01, 1.0):
        for d in (cm.REMOVE, cm.ADD):
            with jax.enable_x64(True):
                got = cm.real_stats(jnp.asarray(1.0), jnp.asarray(s), jnp.asarray(c),
                                    jnp.asarray(d), 65)
            a = 0.5 * (1 + d) + d * c
            want = (a * (a - 1) / (2 * s * s), (2 * c + 1) / (2 * s * s), 1 / s**2, 3 / s**4)
            np.testing.assert_allclose([float(v) for v in got[:4]], want, rtol=1e-12)
    # and the traced route (one tier on the line), where q = 1 is not reduced: bounded
    with jax.enable_x64(True):
        out = jax.jit(lambda e: profile.delta(1.0, 0.3, 2, e))(jnp.array([1.0, 10.0]))
    exact = [float(ref.gaussian_delta(e, 0.3, 2)) for e in (1.0, 10.0)]
    assert np.all(np.isfinite(np.asarray(out.rel_error)))
    assert np.all(np.asarray(out.delta) >= exact)
    assert np.all(np.asarray(out.delta) < np.asarray(out.delta_rdp))


@pytest.mark.slow
def test_delta_too_small_for_a_float_is_the_smallest_normal_not_zero():
    """A δ bound below the smallest normal float is reported as that number (an upper
    bound), never as 0, which claims more than holds: the SGM's loss is unbounded, so its
    true δ(ε) is positive for every finite ε. Before, these returned exactly 0. Exact zeros
    stay: ε = ∞ and nothing sampled."""
    with mp.workdps(40):  # the true δ here is positive and far below a float
        assert 0 < ref.gaussian_delta(100.0, 1.0, 1) < mp.mpf(TINY)
    cases = [
        jaxrdp.delta(8.36e-8, 16.8, 3826, 2.1)[0],
        jaxrdp.delta(1.0, 1.0, 1, 100.0)[0],
        jaxrdp.delta(8.36e-8, 16.8, 3826, 2.1, refine=True)[0],
        jaxrdp.RdpAccountant().compose_sgm(1.0, 1.0, 1).get_delta(100.0),
        profile.delta(1.0, 1.0, 1, 100.0).delta,
        profile.delta(8.36e-8, 16.8, 3826, 2.1).delta,
        zcdp.delta_from_zcdp(0.001, 10.0),
    ]
    assert [float(v) for v in cases] == [TINY] * len(cases)
    with jax.enable_x64(False):
        low = jax.jit(jaxrdp.delta)(jnp.float32(8.36e-8), jnp.float32(16.8), 3826.0,
                                    jnp.float32(2.1))[0]
    assert low.dtype == jnp.float32 and float(low) == float(np.finfo(np.float32).tiny)
    assert float(jaxrdp.delta(0.01, 1.0, 100, np.inf)[0]) == 0.0
    assert float(jaxrdp.delta(0.0, 1.0, 100, 1.0)[0]) == 0.0
    assert float(profile.delta(0.0, 1.0, 100, 1.0).delta) == 0.0


@pytest.mark.parametrize("q", [1.0, 0.9, 0.5])
def test_one_step_add_direction_near_q_one(q):
    """δ_add of one step, c = q − (1 − e^{−ε}): summed as q + expm1(−ε) it cancels as q → 1
    (at q = 1, ε = 28.5 the bound was 6.9e-3 and the run only PROFILE_LOOSE); from q = 1/2
    on it is e^{−ε} − (1 − q). Against the 60-digit single-step reference: within 1e-9."""
    for eps in (0.5, 5.0, 28.5):
        got = profile.delta(q, 0.2, 1, eps)
        want = ref.single_step_delta(q, 0.2, eps, "add")
        have = float(got.delta_add)
        assert want <= have <= want * (1 + 1e-9), eps
        assert float(got.rel_error) < 1e-9


def test_float32_delta_near_one_is_not_rounded_below_float64():
    """δ ≈ 1 − 3e-6 comes from the KL shortcut √(1 − e^{−r}), whose log is about −1.5e-6:
    the terms' outward rounding (8·eps times their size) is far below one float32 ulp of δ,
    and the final exponential rounded δ to nearest, below the float64 value at the same
    float32 inputs (measured: 14 of 4 000 random runs, by up to 4.3e-8). The exponential's
    own rounding is now covered (log δ raised by 8·eps)."""
    args32 = [np.float32(v) for v in (0.023392418399453163, 2.6094539165496826, 279560.0,
                                      0.0003671465674415231)]
    with jax.enable_x64(False):
        d32 = float(jax.jit(jaxrdp.delta)(*(jnp.asarray(v) for v in args32))[0])
    d64 = float(jaxrdp.delta(*(float(v) for v in args32))[0])
    assert 0.99999 < d64 < d32 <= d64 * (1 + 2e-6)
