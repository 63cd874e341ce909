"""Tests of jaxrdp.bounds against the exact kernel and independent re-derivations.

* Theorem 11 (Mironov, Talwar, Zhang 2019): on a dense grid of (q, σ, α), wherever the
  theorem's hypotheses hold, the exact RDP from :func:`jaxrdp.rdp` must not exceed
  ``2q²α/σ²`` — this checks the theorem and the kernel against each other. The mask is
  compared with a plain-NumPy transcription of conditions (4) and (5), and the maximum
  orders with SciPy root finding on that transcription.
* Abadi et al.'s asymptotic formula: documented configurations where it falls below the
  exact RDP (so it must never be used as a guarantee).
* Claim 24 of the RDP blog: against the formula evaluated in mpmath.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import mpmath as mp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import optimize

import jaxrdp
from jaxrdp import bounds

HYP = settings(max_examples=40, deadline=None)


def f64(x):
    return np.asarray(x, dtype=np.float64)


# --------------------------------------------------------------------------- reference transcription


def conditions_reference(q, sigma, alpha):
    """Conditions (4) and (5) of Theorem 11, written as in the paper (NumPy float64)."""
    q, sigma, alpha = (np.asarray(v, np.float64) for v in (q, sigma, alpha))
    big_l = np.log(1.0 + 1.0 / (q * (alpha - 1.0)))
    rhs4 = 0.5 * sigma**2 * big_l - 2.0 * np.log(sigma)
    rhs5 = (0.5 * sigma**2 * big_l**2 - np.log(5.0) - 2.0 * np.log(sigma)) / (
        big_l + np.log(q * alpha) + 1.0 / (2.0 * sigma**2)
    )
    return (1.0 < alpha) & (alpha <= rhs4), alpha <= rhs5, rhs4, rhs5


# --------------------------------------------------------------------------- Theorem 11


@pytest.fixture(scope="module")
def theorem11_grid():
    """(q, σ, α) grid: 30 rates × 20 noise levels × (40 fractional + 40 integer orders
    scaled to each cell's maximum order, plus the integers 2..129)."""
    q = np.geomspace(1e-4, 0.2, 30)
    sigma = np.geomspace(4.0, 100.0, 20)
    big_q, big_s = np.meshgrid(q, sigma, indexing="ij")
    alpha_max = f64(bounds.theorem11_max_order(big_q, big_s).alpha_max)
    u = np.geomspace(1e-3, 1.0, 40)
    frac = 1.0 + (alpha_max[..., None] - 1.0) * u
    integer = np.maximum(2.0, np.floor(frac))
    fixed = np.broadcast_to(np.arange(2.0, 130.0), big_q.shape + (128,))
    alpha = np.concatenate([frac, integer, fixed], axis=-1)
    res = bounds.theorem11_rdp(big_q[..., None], big_s[..., None], alpha)
    exact = f64(jaxrdp.rdp(big_q[..., None], big_s[..., None], alpha))
    return dict(q=big_q, sigma=big_s, alpha=alpha, alpha_max=alpha_max,
                bound=f64(res.bound), valid=np.asarray(res.valid), exact=exact)


def test_theorem11_exact_rdp_never_exceeds_bound_where_valid(theorem11_grid):
    g = theorem11_grid
    valid = g["valid"]
    assert valid.sum() > 90_000  # most of the 124 800 points are inside the theorem's range
    ratio = g["exact"][valid] / g["bound"][valid]
    assert np.all(ratio <= 1.0)  # Theorem 11 (and the kernel) hold
    # Tightness: the bound is ≈ 4× the exact value (exact ≈ q²α(e^{1/σ²}−1)/2 at small q).
    assert 0.25 <= ratio.min() and np.median(ratio) < 0.26 and ratio.max() < 0.27


def test_theorem11_mask_matches_paper_conditions(theorem11_grid):
    g = theorem11_grid
    q, s, a = g["q"][..., None], g["sigma"][..., None], g["alpha"]
    c4, c5, rhs4, rhs5 = conditions_reference(q, s, a)
    expected = c4 & c5  # q ≤ 1/5 and σ ≥ 4 hold on this grid
    # Rounding may only matter within a relative 1e-12 of either boundary.
    near = (np.abs(a - rhs4) <= 1e-12 * a) | (np.abs(a - rhs5) <= 1e-12 * a)
    assert np.all((g["valid"] == expected) | near)
    # And the mask is exactly "α ≤ alpha_max".
    assert np.all(g["valid"] == (a <= g["alpha_max"][..., None]))


def test_theorem11_conditions_are_intervals_in_alpha():
    """Each condition holds on (1, α*] (the premise of the bisection)."""
    q = np.geomspace(1e-5, 1.0, 25)[:, None, None]
    sigma = np.array([4.0, 5.0, 10.0, 30.0, 300.0])[None, :, None]
    alpha = 1.0 + np.geomspace(1e-6, 1e7, 4000)[None, None, :]
    c4, c5, _, _ = conditions_reference(q, sigma, alpha)
    for cond in (c4, c5):
        # Once False, stays False along α: the cumulative minimum equals the mask.
        assert np.array_equal(np.minimum.accumulate(cond, axis=-1), cond)
        assert cond[..., 0].all()


@pytest.mark.parametrize("q", [1e-4, 1e-3, 0.01, 0.05, 0.2, 0.6])
@pytest.mark.parametrize("sigma", [4.0, 10.0, 50.0])
def test_theorem11_max_order_against_root_finding(q, sigma):
    out = bounds.theorem11_max_order(q, sigma)
    for which, got in ((0, out.alpha_max_cond4), (1, out.alpha_max_cond5)):
        def gap(log_d, which=which):
            alpha = 1.0 + math.exp(log_d)
            c = conditions_reference(q, sigma, alpha)
            return float(alpha - (c[2] if which == 0 else c[3]))

        root = 1.0 + math.exp(optimize.brentq(gap, math.log(1e-6), math.log(1e9), xtol=1e-14))
        assert f64(got) == pytest.approx(root, rel=1e-9)
    expected = min(f64(out.alpha_max_cond4), f64(out.alpha_max_cond5)) if q <= 0.2 else 1.0
    assert f64(out.alpha_max) == expected
    if q <= 0.2:
        alpha_max = f64(out.alpha_max)
        assert bool(bounds.theorem11_rdp(q, sigma, alpha_max).valid)
        assert not bool(bounds.theorem11_rdp(q, sigma, alpha_max * (1 + 1e-9)).valid)


def test_theorem11_hypotheses():
    # q > 1/5 or σ < 4: the theorem does not apply at any order.
    assert not np.asarray(bounds.theorem11_rdp(0.21, 10.0, 2.0).valid)
    assert not np.asarray(bounds.theorem11_rdp(0.01, 3.99, 2.0).valid)
    assert np.asarray(bounds.theorem11_rdp(0.2, 4.0, 2.0).valid)
    assert f64(bounds.theorem11_max_order(0.21, 10.0).alpha_max) == 1.0
    assert f64(bounds.theorem11_max_order(0.01, 3.0).alpha_max) == 1.0
    assert np.isnan(f64(bounds.theorem11_max_order(0.01, 3.0).alpha_max_cond4))
    # q = 0: L is undefined, so not "valid", but the bound 0 is exact.
    res = bounds.theorem11_rdp(0.0, 10.0, 5.0)
    assert f64(res.bound) == 0.0 and not np.asarray(res.valid)
    assert f64(bounds.theorem11_rdp(0.01, 4.0, 10.0).bound) == pytest.approx(2e-4 * 10 / 16)


def test_theorem11_bound_can_fail_outside_its_conditions():
    """The conditions matter: far beyond alpha_max the exact RDP exceeds 2q²α/σ²."""
    q, sigma = 0.01, 4.0
    alpha_max = f64(bounds.theorem11_max_order(q, sigma).alpha_max)
    assert 14.0 < alpha_max < 14.5
    alpha = np.array([alpha_max, 100.0, 160.0, 200.0])
    exact = f64(jaxrdp.rdp(q, sigma, alpha))
    bound = f64(bounds.theorem11_rdp(q, sigma, alpha).bound)
    assert exact[0] < bound[0] and exact[1] < bound[1]
    assert exact[2] > bound[2] and exact[3] > bound[3]


def test_theorem11_float32_and_jit():
    out = bounds.theorem11_max_order(jnp.float32(0.01), jnp.float32(4.0))
    assert out.alpha_max.dtype == jnp.float32
    reference = f64(bounds.theorem11_max_order(0.01, 4.0).alpha_max)
    assert float(out.alpha_max) == pytest.approx(reference, rel=1e-5)
    f = jax.jit(bounds.theorem11_rdp)
    res = f(jnp.array([0.01, -0.1]), jnp.float32(5.0), jnp.float32(3.0))
    assert bool(res.valid[0]) and not bool(res.valid[1]) and np.isnan(np.asarray(res.bound[1]))
    g = jax.jit(bounds.theorem11_max_order)
    assert np.isnan(np.asarray(g(jnp.float32(0.0), jnp.float32(5.0)).alpha_max))


# --------------------------------------------------------------------------- Abadi et al.


def test_abadi_formula_hand_value():
    assert f64(bounds.abadi_asymptotic_rdp(0.01, 4.0, 10.0)) == pytest.approx(
        1e-4 * 10 / (0.99 * 16), rel=1e-14
    )
    np.testing.assert_array_equal(
        f64(bounds.abadi_asymptotic_rdp(np.array([0.0, 1.0]), 2.0, 3.0)), [0.0, np.inf]
    )


# (q, σ, α, in Abadi's regime?, upper limit on asymptotic / exact). Measured ratios:
# 0.1493, 0.8415, 0.9359 (inside the regime as stated in Table 1 of Mironov et al.),
# 3.2e-4, 2.5e-4, 8.8e-3, 0.51 (outside it: large α, or large q).
UNDERSHOOTS = [
    (1e-4, 0.5, 2.0, True, 0.15),
    (0.014735393118656924, 0.8, 2.0, True, 0.85),
    (0.051113713263475656, 1.0, 3.9, True, 0.94),
    (0.01, 1.1, 32.0, False, 3.2e-4),
    (0.01, 2.0, 256.0, False, 2.4e-4),
    (0.05, 1.0, 16.0, False, 8.8e-3),
    (0.3727514268270927, 1.0, 16.0, False, 0.52),
]


@pytest.mark.parametrize("q, sigma, alpha, in_regime, max_ratio", UNDERSHOOTS)
def test_abadi_asymptotic_undershoots_exact_rdp(q, sigma, alpha, in_regime, max_ratio):
    exact = f64(jaxrdp.rdp(q, sigma, alpha))
    asym = f64(bounds.abadi_asymptotic_rdp(q, sigma, alpha))
    assert bool(bounds.abadi_conditions(q, sigma, alpha)) == in_regime
    assert asym < exact
    assert asym / exact <= max_ratio


def test_abadi_asymptotic_overestimates_in_regime_for_sigma_above_1p1():
    """Where it is meant to be used (its regime, σ ≥ 1.1) it is ≈ 2× the exact value."""
    q = np.geomspace(1e-5, 0.05, 30)[:, None, None]
    sigma = np.geomspace(1.1, 50.0, 20)[None, :, None]
    alpha = np.concatenate([np.linspace(1.05, 10.0, 60), np.arange(11.0, 257.0, 5.0)])
    alpha = alpha[None, None, :]
    regime = np.asarray(bounds.abadi_conditions(q, sigma, alpha))
    ratio = f64(bounds.abadi_asymptotic_rdp(q, sigma, alpha)) / f64(jaxrdp.rdp(q, sigma, alpha))
    assert regime.sum() > 10_000
    assert ratio[regime].min() > 1.0
    assert 1.9 < np.median(ratio[regime]) < 2.05


# --------------------------------------------------------------------------- Claim 24


def generic_reference(eps, lam, r):
    with mp.workdps(50):
        eps, lam, r = mp.mpf(eps), mp.mpf(lam), mp.mpf(r)
        return mp.log1p(r * mp.expm1((lam - 1) * eps)) / (lam - 1)


@given(
    st.floats(min_value=-8.0, max_value=1.5),  # log10 ε
    st.floats(min_value=1.01, max_value=300.0),  # λ
    # r: XLA on CPU flushes subnormals to zero, so stay clear of them.
    st.one_of(st.just(0.0), st.floats(min_value=1e-300, max_value=1.0)),
)
@HYP
def test_generic_subsampling_matches_mpmath(log_eps, lam, r):
    eps = 10.0**log_eps
    got = f64(bounds.generic_subsampling_rdp(eps, lam, r))
    ref = generic_reference(eps, lam, r)
    if ref == 0:
        assert got == 0.0
    else:
        # Relative 1e-12, except where float64 itself goes subnormal.
        assert abs(mp.mpf(float(got)) - ref) <= 1e-12 * ref + mp.mpf("1e-290")
    assert got <= eps * (1 + 1e-14)  # never above the base mechanism's RDP


def test_generic_subsampling_limits_and_api():
    sigma = 3.0
    orders = np.array([1.5, 2.0, 8.0, 64.0, 1000.0])
    base = orders / (2.0 * sigma**2)  # Gaussian mechanism, ρ = 1/(2σ²)
    # r → 1: the subsampled bound tends to the base curve ρλ (exactly ρλ at r = 1).
    np.testing.assert_allclose(f64(bounds.generic_subsampling_rdp(base, orders, 1.0)), base,
                               rtol=1e-14)
    near_one = f64(bounds.generic_subsampling_rdp(base, orders, 1.0 - 1e-9))
    np.testing.assert_allclose(near_one, base, rtol=1e-7)
    assert np.all(near_one <= base)
    np.testing.assert_array_equal(f64(bounds.generic_subsampling_rdp(base, orders, 0.0)), 0.0)
    # r → 0: linear in r, r(e^{(λ−1)ε} − 1)/(λ−1).
    r = 1e-12
    small = f64(bounds.generic_subsampling_rdp(base[:3], orders[:3], r))
    linear = r * np.expm1((orders[:3] - 1) * base[:3]) / (orders[:3] - 1)
    np.testing.assert_allclose(small, linear, rtol=1e-9)
    # Monotone in r.
    rs = np.linspace(0.0, 1.0, 51)[:, None]
    vals = f64(bounds.generic_subsampling_rdp(base, orders, rs))
    assert np.all(np.diff(vals, axis=0) >= 0)
    # A callable base curve is the same as its values.
    from_callable = f64(bounds.generic_subsampling_rdp(lambda a: a / (2.0 * sigma**2), orders, 0.1))
    np.testing.assert_array_equal(from_callable,
                                  f64(bounds.generic_subsampling_rdp(base, orders, 0.1)))
    # Limits at infinity: λ = ∞ or ε = ∞ give ε itself (r > 0).
    assert f64(bounds.generic_subsampling_rdp(0.5, np.inf, 0.1)) == 0.5
    assert f64(bounds.generic_subsampling_rdp(np.inf, 2.0, 0.1)) == np.inf


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "call, name",
    [
        (lambda: bounds.theorem11_rdp(1.5, 4.0, 2.0), "q"),
        (lambda: bounds.theorem11_rdp(0.1, -4.0, 2.0), "sigma"),
        (lambda: bounds.theorem11_rdp(0.1, 4.0, 1.0), "alpha"),
        (lambda: bounds.theorem11_max_order(0.0, 4.0), "q"),
        (lambda: bounds.theorem11_max_order(0.1, np.nan), "sigma"),
        (lambda: bounds.abadi_asymptotic_rdp(0.1, 4.0, 0.5), "alpha"),
        (lambda: bounds.abadi_conditions(-0.1, 4.0, 2.0), "q"),
        (lambda: bounds.generic_subsampling_rdp(-1.0, 2.0, 0.1), "base_rdp"),
        (lambda: bounds.generic_subsampling_rdp(1.0, 1.0, 0.1), "orders"),
        (lambda: bounds.generic_subsampling_rdp(1.0, 2.0, 1.1), "r"),
    ],
)
def test_bad_input_raises_naming_the_argument(call, name):
    with pytest.raises(ValueError, match=rf"\b{name}\b"):
        call()
