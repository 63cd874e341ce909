"""Tests of jaxrdp.zcdp against hand values and independent computations.

Independent references used here (none of them calls jaxrdp.zcdp's formulas):

* hand-computed values of the closed forms (``math``);
* the δ bound of Lemma B.2 *before* its Gaussian-tail relaxations, i.e. the integral
  ``∫_ε^∞ e^{ε−z} P[Z > z] dz`` with ``P[Z > z]`` bounded by Markov's inequality minimised
  over a dense α grid (NumPy + SciPy quadrature), and its closed form with ``erfc``
  (mpmath);
* the classic RDP → (ε, δ) conversion ``min_α [rdp(α) + log(1/δ)/(α−1)]`` on a dense grid;
* the exact (ε, δ) curve of the Gaussian mechanism (Balle & Wang 2018, Theorem 8), which is
  ρ-zCDP, so every conversion must give a δ at least as large.
"""

from __future__ import annotations

import math
import warnings

import jax
import jax.numpy as jnp
import mpmath as mp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import integrate
from scipy.stats import norm

import jaxrdp
from jaxrdp import zcdp

METHODS = zcdp.CONVERSION_METHODS
HYP = settings(max_examples=40, deadline=None)

# Dense Rényi-order grid for the brute-force references: α − 1 from 1e-6 to 1e6.
DENSE_ALPHA = 1.0 + np.geomspace(1e-6, 1e6, 40001)


def f64(x):
    return np.asarray(x, dtype=np.float64)


def log_rho():
    return st.floats(min_value=-6.0, max_value=3.0)


# --------------------------------------------------------------------------- hand values


def test_gaussian_rho_hand_values():
    assert f64(zcdp.gaussian_rho(2.0)) == pytest.approx(1.0 / 8.0, rel=1e-15)
    assert f64(zcdp.gaussian_rho(2.0, sensitivity=3.0)) == pytest.approx(9.0 / 8.0, rel=1e-15)
    out = f64(zcdp.gaussian_rho(np.array([0.0, 1.0, np.inf]), np.array([1.0, 0.0, 1.0])))
    np.testing.assert_array_equal(out, [np.inf, 0.0, 0.0])
    assert zcdp.gaussian_rho(1.5).dtype == jnp.float64


def test_gaussian_rho_matches_rdp_kernel_at_q_one():
    # The SGM with q = 1 is the Gaussian mechanism: its RDP curve is exactly ρα.
    sigma, orders = 1.7, np.array([1.5, 2.0, 7.25, 64.0])
    curve = f64(zcdp.rdp_curve(zcdp.gaussian_rho(sigma), orders))
    np.testing.assert_allclose(curve, f64(jaxrdp.rdp(1.0, sigma, orders)), rtol=1e-12)


def test_rho_from_pure_dp_hand_values():
    np.testing.assert_allclose(
        f64(zcdp.rho_from_pure_dp(np.array([0.0, 0.5, 1.0, 3.0]))), [0.0, 0.125, 0.5, 4.5]
    )


def test_compose_hand_values_and_axis():
    assert f64(zcdp.compose([0.1, 0.2, 0.3])) == pytest.approx(0.6, rel=1e-15)
    rhos = np.array([[0.1, 0.2], [0.3, 0.4]])
    np.testing.assert_allclose(f64(zcdp.compose(rhos)), [0.3, 0.7])
    np.testing.assert_allclose(f64(zcdp.compose(rhos, axis=0)), [0.4, 0.6])
    out = zcdp.compose(rhos, np.array([0.0, 0.5]))
    assert isinstance(out, zcdp.Zcdp)
    np.testing.assert_allclose(f64(out.rho), [0.3, 0.7])
    np.testing.assert_allclose(f64(out.xi), [0.5, 0.5])


def test_compose_gaussians_equals_one_gaussian():
    # k Gaussian releases at σ compose to one at σ/√k (Lemma 1.7 is tight here).
    k, sigma = 9, 3.0
    total = f64(zcdp.compose(np.full(k, f64(zcdp.gaussian_rho(sigma)))))
    assert total == pytest.approx(f64(zcdp.gaussian_rho(sigma / math.sqrt(k))), rel=1e-14)


def test_group_privacy_hand_values():
    np.testing.assert_allclose(f64(zcdp.group_privacy(0.5, np.array([1, 2, 3]))), [0.5, 2.0, 4.5])
    # Tight for the Gaussian mechanism: groups of k have sensitivity k.
    assert f64(zcdp.group_privacy(zcdp.gaussian_rho(2.0), 5)) == pytest.approx(
        f64(zcdp.gaussian_rho(2.0, sensitivity=5.0)), rel=1e-14
    )
    out = zcdp.group_privacy(0.5, np.array([1, 3, 4]), xi=0.1)
    np.testing.assert_allclose(f64(out.rho), [0.5, 4.5, 8.0])
    harmonic = np.array([1.0, 1 + 1 / 2 + 1 / 3, 1 + 1 / 2 + 1 / 3 + 1 / 4])
    np.testing.assert_allclose(f64(out.xi), 0.1 * np.array([1, 3, 4]) * harmonic, rtol=1e-13)
    # ρ = 0 is pure ξ-DP: groups of k get kξ.
    np.testing.assert_allclose(f64(zcdp.group_privacy(0.0, 4, xi=0.1).xi), 0.4, rtol=1e-15)


def test_rdp_curve_shapes_and_values():
    rho, orders = np.array([0.1, 0.2]), np.array([2.0, 3.0, np.inf])
    out = f64(zcdp.rdp_curve(rho, orders, xi=np.array([0.05, 0.0])))
    np.testing.assert_allclose(out, [[0.25, 0.35, np.inf], [0.4, 0.6, np.inf]])
    np.testing.assert_array_equal(f64(zcdp.rdp_curve(0.0, orders, xi=0.3)), [0.3, 0.3, 0.3])


def test_conversion_hand_values():
    rho, delta, xi = 0.5, 1e-5, 0.1
    log_inv = math.log(1 / delta)
    expected13 = xi + rho + 2 * math.sqrt(rho * log_inv)
    for method in ("prop1.3", "lemma3.5"):
        got = f64(zcdp.epsilon_from_zcdp(rho, delta, xi, method=method))
        assert got == pytest.approx(expected13, rel=1e-14)
    closed = xi + rho + math.sqrt(4 * rho * math.log(math.sqrt(math.pi * rho) / delta))
    got = f64(zcdp.epsilon_from_zcdp(rho, delta, xi, method="lemma3.6-closed-form"))
    assert got == pytest.approx(closed, rel=1e-14)
    # δ-forms at ε = ξ + ρ + t.
    t = 2.0
    u = t / (2 * rho)
    option3 = 2 / (1 + u + math.sqrt((1 + u) ** 2 + 4 / (math.pi * rho)))
    base = math.exp(-t * t / (4 * rho))
    for method, factor in [
        ("prop1.3", 1.0),
        ("lemma3.5", 1.0),
        ("lemma3.6-closed-form", math.sqrt(math.pi * rho)),
        ("lemma3.6", option3),
    ]:
        got = f64(zcdp.delta_from_zcdp(rho, xi + rho + t, xi, method=method))
        assert got == pytest.approx(base * factor, rel=1e-13), method


def test_lemma37_hand_values():
    out = zcdp.zcdp_from_dp_curve(0.1, 0.5)
    assert f64(out.rho) == pytest.approx(0.125, rel=1e-15)
    assert f64(out.xi) == pytest.approx(0.1 - 0.125 + 5 * 0.5**0.25, rel=1e-15)


def test_special_cases():
    # ρ = 0 is pure ξ-DP (Lemma 3.2): ε = ξ at any δ, δ = 0 for ε ≥ ξ.
    for method in METHODS:
        assert f64(zcdp.epsilon_from_zcdp(0.0, 1e-9, 0.3, method=method)) == 0.3
        assert f64(zcdp.delta_from_zcdp(0.0, 0.3, 0.3, method=method)) == 0.0
        assert f64(zcdp.delta_from_zcdp(0.0, 0.2, 0.3, method=method)) == 1.0
        # Below ξ + ρ: δ = 1 − e^{ε−ξ−ρ}(1 − min(1, δ(ξ+ρ))), never a silent 0.
        at_edge = min(1.0, float(f64(zcdp.delta_from_zcdp(1.0, 1.0, method=method))))
        below = f64(zcdp.delta_from_zcdp(1.0, 0.5, method=method))
        assert below == pytest.approx(1 - math.exp(-0.5) * (1 - at_edge), rel=1e-14)
        if method in ("prop1.3", "lemma3.5"):
            assert below == 1.0
        # Continuous at ε = ξ + ρ.
        just_below = f64(zcdp.delta_from_zcdp(1.0, 1.0 - 1e-9, method=method))
        assert just_below == pytest.approx(at_edge, rel=1e-8)
        assert f64(zcdp.epsilon_from_zcdp(1.0, 0.0, method=method)) == np.inf
        assert f64(zcdp.epsilon_from_zcdp(np.inf, 1e-5, method=method)) == np.inf
        assert f64(zcdp.delta_from_zcdp(1.0, np.inf, method=method)) == 0.0
        # δ = 1 needs no slack beyond ξ + ρ (the closed form of Lemma 3.6 keeps its
        # √(πρ) > 1 factor, as printed).
        if method != "lemma3.6-closed-form":
            assert f64(zcdp.epsilon_from_zcdp(0.7, 1.0, 0.1, method=method)) == pytest.approx(0.8)


# --------------------------------------------------------------------------- independent references


def _b2_integral_numeric(rho, eps, xi):
    """∫_ε^∞ e^{ε−z} min(1, min_α e^{(α−1)(ξ+ρα−z)}) dz with α on a dense grid."""
    am1 = DENSE_ALPHA - 1.0

    def integrand(s):  # s = z − ε ≥ 0
        z = eps + s
        log_tail = np.min(am1 * (xi + rho * DENSE_ALPHA - z))
        return math.exp(-s + min(0.0, log_tail))

    # The grid minimum has tiny kinks; 1e-4 agreement is all the test asks of quad.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", integrate.IntegrationWarning)
        value, _ = integrate.quad(integrand, 0.0, np.inf, limit=400, epsabs=0.0, epsrel=1e-8)
    return value


def _b2_integral_exact(rho, eps, xi):
    """Same integral in closed form: e^{ε−ξ}·2√(πρ)·P[N(0,1) > (ε+ρ−ξ)/√(2ρ)] (mpmath)."""
    with mp.workdps(40):
        rho, eps, xi = mp.mpf(rho), mp.mpf(eps), mp.mpf(xi)
        x = (eps + rho - xi) / mp.sqrt(2 * rho)
        return mp.exp(eps - xi) * 2 * mp.sqrt(mp.pi * rho) * mp.erfc(x / mp.sqrt(2)) / 2


@pytest.mark.parametrize(
    "rho, t, xi",
    [(1e-3, 0.05, 0.0), (0.01, 0.3, 0.0), (0.1, 1.5, 0.2), (0.5, 3.0, 0.0), (2.0, 8.0, 1.0)],
)
def test_lemma36_delta_against_numeric_b2_integral(rho, t, xi):
    """Lemma 3.6's δ bounds the Markov-tail integral of Lemma B.2 from above, tightly."""
    eps = xi + rho + t
    numeric = _b2_integral_numeric(rho, eps, xi)
    exact = float(_b2_integral_exact(rho, eps, xi))
    assert numeric == pytest.approx(exact, rel=1e-4)  # the two references agree
    got = f64(zcdp.delta_from_zcdp(rho, eps, xi, method="lemma3.6"))
    assert got >= exact * (1 - 1e-12)
    assert got <= exact * 1.06  # the h(x) relaxation costs at most 5.83 % (at x ≈ 0.9)
    # The integral itself never exceeds Markov's bound at ε (Lemma 3.5).
    assert exact <= f64(zcdp.delta_from_zcdp(rho, eps, xi, method="lemma3.5")) * (1 + 1e-12)


@given(log_rho(), st.floats(min_value=0.0, max_value=20.0), st.floats(min_value=0.0, max_value=1.0))
@HYP
def test_lemma36_never_below_b2_integral(lr, t_scale, xi):
    rho = 10.0**lr
    eps = xi + rho + t_scale * math.sqrt(rho)
    exact = _b2_integral_exact(rho, eps, xi)
    got = mp.mpf(float(f64(zcdp.delta_from_zcdp(rho, eps, xi, method="lemma3.6"))))
    if exact > mp.mpf("1e-290"):
        assert got >= exact * (1 - mp.mpf("1e-12"))
        assert got <= exact * mp.mpf("1.0583")


@pytest.mark.parametrize("rho", [1e-4, 0.01, 0.3, 5.0])
@pytest.mark.parametrize("delta", [1e-10, 1e-5, 0.1])
def test_lemma35_equals_classic_rdp_conversion_on_dense_grid(rho, delta):
    """ε = min_α [ρα + log(1/δ)/(α−1)] (the classic RDP conversion) is Lemma 3.5."""
    xi = 0.05
    curve = f64(zcdp.rdp_curve(rho, DENSE_ALPHA, xi=xi))
    classic = np.min(curve + math.log(1 / delta) / (DENSE_ALPHA - 1.0))
    got = f64(zcdp.epsilon_from_zcdp(rho, delta, xi, method="lemma3.5"))
    assert got <= classic * (1 + 1e-12)
    assert got == pytest.approx(classic, rel=1e-6)
    # δ form: min_α exp((α−1)(ξ + ρα − ε)), Claim 21 (1) of the RDP blog.
    eps = float(got) + 0.3
    markov = np.exp(np.min((DENSE_ALPHA - 1) * (curve - eps)))
    assert f64(zcdp.delta_from_zcdp(rho, eps, xi, method="lemma3.5")) == pytest.approx(
        markov, rel=1e-5
    )


@given(st.floats(min_value=0.05, max_value=30.0), st.floats(min_value=0.0, max_value=10.0))
@HYP
def test_all_conversions_are_valid_for_the_gaussian_mechanism(sigma, eps):
    """The Gaussian mechanism is ρ-zCDP: no conversion may report a δ below its true δ."""
    mu = 1.0 / sigma
    true_delta = norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * norm.cdf(-eps / mu - mu / 2)
    rho = float(f64(zcdp.gaussian_rho(sigma)))
    for method in METHODS:
        got = float(f64(zcdp.delta_from_zcdp(rho, eps, method=method)))
        assert got >= true_delta - 1e-15, method


# --------------------------------------------------------------------------- ordering, round trips


@given(log_rho(), st.floats(min_value=-12.0, max_value=-0.31), st.floats(0.0, 2.0))
@HYP
def test_epsilon_ordering(lr, log10_delta, xi):
    rho, delta = 10.0**lr, 10.0**log10_delta
    eps = {m: float(f64(zcdp.epsilon_from_zcdp(rho, delta, xi, method=m))) for m in METHODS}
    assert eps["prop1.3"] == eps["lemma3.5"]  # the same statement
    assert eps["lemma3.6"] <= eps["lemma3.5"] * (1 + 1e-14)
    assert eps["lemma3.6"] <= eps["lemma3.6-closed-form"] * (1 + 1e-14)
    assert eps["lemma3.6"] >= xi + rho


@given(log_rho(), st.floats(min_value=0.0, max_value=30.0), st.floats(0.0, 2.0))
@HYP
def test_delta_ordering(lr, t_scale, xi):
    rho = 10.0**lr
    eps = xi + rho + t_scale * math.sqrt(rho)
    d = {m: float(f64(zcdp.delta_from_zcdp(rho, eps, xi, method=m))) for m in METHODS}
    assert d["prop1.3"] == d["lemma3.5"]
    assert d["lemma3.6"] <= d["lemma3.5"] * (1 + 1e-14)
    assert d["lemma3.6"] <= d["lemma3.6-closed-form"] * (1 + 1e-14)
    assert 0.0 <= d["lemma3.6"] <= 1.0


@pytest.mark.parametrize("method", METHODS)
def test_round_trip_epsilon_delta(method):
    rho = np.geomspace(1e-6, 1e3, 19)[:, None]
    delta = np.array([1e-15, 1e-10, 1e-6, 1e-3, 0.2])[None, :]
    xi = 0.3
    eps = zcdp.epsilon_from_zcdp(rho, delta, xi, method=method)
    back = f64(zcdp.delta_from_zcdp(rho, eps, xi, method=method))
    eps = f64(eps)
    assert np.all(back <= delta * (1 + 1e-9))  # ε is never too small for the target δ
    interior = eps > xi + rho + 1e-9  # away from the clamp at t = 0
    np.testing.assert_allclose(back[interior], np.broadcast_to(delta, back.shape)[interior],
                               rtol=1e-8)
    # δ → ε → δ: ε(δ(ε)) recovers ε.
    eps2 = f64(zcdp.epsilon_from_zcdp(rho, back, xi, method=method))
    np.testing.assert_allclose(eps2[interior], eps[interior], rtol=1e-9)


def test_lemma36_beats_lemma35_by_documented_margins():
    """The ε gaps reported in the module docs (δ = 1e-5, ξ = 0)."""
    rho = np.array([1e-4, 1e-2, 0.1, 1.0, 10.0])
    e35 = f64(zcdp.epsilon_from_zcdp(rho, 1e-5, method="lemma3.5"))
    e36 = f64(zcdp.epsilon_from_zcdp(rho, 1e-5, method="lemma3.6"))
    ratio = e36 / e35
    assert np.all(ratio < 1)
    assert ratio[0] < 0.85 and ratio[1] < 0.85  # small ρ: √(πρ) factor matters most
    assert ratio[-1] > 0.97  # large ρ: nearly the same


# --------------------------------------------------------------------------- approximate zCDP


def test_compose_approximate():
    out = zcdp.compose_approximate([0.1, 0.2], [0.0, 0.1], [1e-3, 2e-3])
    assert f64(out.rho) == pytest.approx(0.3)
    assert f64(out.xi) == pytest.approx(0.1)
    assert f64(out.delta) == pytest.approx(1e-3 + 2e-3 - 2e-6, rel=1e-14)
    many = zcdp.compose_approximate(np.zeros(1000), np.zeros(1000), np.full(1000, 1e-15))
    assert f64(many.delta) == pytest.approx(1e-12, rel=1e-9)  # no 1 − (1 − δ) cancellation


def test_approximate_conversions():
    rho, eps, d0 = 0.2, 2.0, 1e-6
    inner = f64(zcdp.delta_from_zcdp(rho, eps))
    got = f64(zcdp.delta_from_approximate_zcdp(rho, eps, d0))
    assert got == pytest.approx(d0 + (1 - d0) * inner, rel=1e-14)
    # Lemma 8.8, first half: ρ = 0 gives (ξ, δ₀)-DP.
    assert f64(zcdp.delta_from_approximate_zcdp(0.0, 0.5, d0, xi=0.5)) == pytest.approx(d0)
    target = 1e-5
    e = zcdp.epsilon_from_approximate_zcdp(rho, target, d0)
    back = f64(zcdp.delta_from_approximate_zcdp(rho, e, d0))
    assert back <= target * (1 + 1e-9) and back == pytest.approx(target, rel=1e-8)
    assert f64(zcdp.epsilon_from_approximate_zcdp(rho, 1e-7, d0)) == np.inf


# --------------------------------------------------------------------------- JAX behaviour


def test_float32_path_is_conservative():
    rho = np.geomspace(1e-5, 100.0, 11)
    for method in METHODS:
        e64 = f64(zcdp.epsilon_from_zcdp(rho, 1e-6, method=method))
        rho32 = jnp.asarray(rho, jnp.float32)
        e32 = zcdp.epsilon_from_zcdp(rho32, jnp.float32(1e-6), method=method)
        assert e32.dtype == jnp.float32
        assert np.all(np.asarray(e32, np.float64) >= e64)
        d64 = f64(zcdp.delta_from_zcdp(rho, e64, method=method))
        d32 = zcdp.delta_from_zcdp(jnp.asarray(rho, jnp.float32), jnp.asarray(e64, jnp.float32),
                                   method=method)
        ok = d64 > 1e-30
        assert np.all(np.asarray(d32, np.float64)[ok] >= d64[ok] * (1 - 1e-6))


def test_float64_jax_arrays_stay_float64():
    eps = zcdp.epsilon_from_zcdp(0.1, 1e-5)  # float64 JAX array, created under local x64
    back = zcdp.delta_from_zcdp(0.1, eps)
    assert back.dtype == jnp.float64
    assert f64(back) == pytest.approx(1e-5, rel=1e-10)


def test_jit_vmap_and_nan_for_invalid_traced_inputs():
    f = jax.jit(jax.vmap(lambda r, d: zcdp.epsilon_from_zcdp(r, d)))
    out = np.asarray(f(jnp.array([0.1, -1.0, 0.1]), jnp.array([1e-5, 1e-5, 2.0])))
    assert np.isfinite(out[0]) and np.isnan(out[1]) and np.isnan(out[2])
    g = jax.jit(lambda r, e: zcdp.delta_from_zcdp(r, e))
    assert np.isnan(np.asarray(g(jnp.float32(np.nan), jnp.float32(1.0))))
    h = jax.jit(lambda r, k: zcdp.group_privacy(r, k))
    assert np.isnan(np.asarray(h(jnp.float32(0.1), jnp.float32(2.5))))


def test_gradient_of_lemma36_epsilon_matches_finite_differences():
    with jax.enable_x64(True):
        for rho, delta in [(0.01, 1e-5), (0.3, 1e-8), (4.0, 1e-3)]:
            grad_rho = jax.grad(lambda r: zcdp.epsilon_from_zcdp(r, delta))(jnp.float64(rho))
            grad_delta = jax.grad(lambda d: zcdp.epsilon_from_zcdp(rho, d))(jnp.float64(delta))
            h = 1e-6 * rho
            fd_rho = (f64(zcdp.epsilon_from_zcdp(rho + h, delta))
                      - f64(zcdp.epsilon_from_zcdp(rho - h, delta))) / (2 * h)
            hd = 1e-6 * delta
            fd_delta = (f64(zcdp.epsilon_from_zcdp(rho, delta + hd))
                        - f64(zcdp.epsilon_from_zcdp(rho, delta - hd))) / (2 * hd)
            assert float(grad_rho) == pytest.approx(fd_rho, rel=1e-6)
            assert float(grad_delta) == pytest.approx(fd_delta, rel=1e-5)


@pytest.mark.parametrize("method", METHODS)
def test_gradients_are_finite_everywhere_including_edges(method):
    # Points below ξ + ρ, at δ = 1, and in the tails, where a naive where() gives NaN.
    with jax.enable_x64(True):
        d_grad = jax.vmap(jax.grad(lambda r, e: zcdp.delta_from_zcdp(r, e, method=method),
                                   argnums=(0, 1)))
        e_grad = jax.vmap(jax.grad(lambda r, d: zcdp.epsilon_from_zcdp(r, d, method=method),
                                   argnums=(0, 1)))
        rho = jnp.array([0.5, 0.5, 0.5, 1e-3, 20.0])
        for g in d_grad(rho, jnp.array([0.2, 0.5, 3.0, 0.1, 100.0])):
            assert np.all(np.isfinite(np.asarray(g)))
        for g in e_grad(rho, jnp.array([1.0, 0.3, 1e-6, 0.5, 1e-12])):
            assert np.all(np.isfinite(np.asarray(g)))


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "call, name",
    [
        (lambda: zcdp.gaussian_rho(-1.0), "sigma"),
        (lambda: zcdp.gaussian_rho(1.0, sensitivity=np.nan), "sensitivity"),
        (lambda: zcdp.rho_from_pure_dp(-0.1), "epsilon"),
        (lambda: zcdp.compose([0.1, -0.2]), "rhos"),
        (lambda: zcdp.compose([0.1, 0.2], [0.0, -1.0]), "xis"),
        (lambda: zcdp.group_privacy(0.1, 2.5), "k"),
        (lambda: zcdp.group_privacy(0.1, 0), "k"),
        (lambda: zcdp.group_privacy(-0.1, 2), "rho"),
        (lambda: zcdp.rdp_curve(0.1, [1.0, 2.0]), "orders"),
        (lambda: zcdp.epsilon_from_zcdp(0.1, 1.5), "delta"),
        (lambda: zcdp.epsilon_from_zcdp(-0.1, 1e-5), "rho"),
        (lambda: zcdp.epsilon_from_zcdp(0.1, 1e-5, xi=-1.0), "xi"),
        (lambda: zcdp.epsilon_from_zcdp(0.1, 1e-5, method="lemma9"), "method"),
        (lambda: zcdp.delta_from_zcdp(0.1, -1.0), "epsilon"),
        (lambda: zcdp.zcdp_from_dp_curve(1.5, 0.1), "xi_hat"),
        (lambda: zcdp.zcdp_from_dp_curve(0.5, -0.1), "rho_hat"),
        (lambda: zcdp.compose_approximate([0.1], [0.0], [1.5]), "deltas"),
        (lambda: zcdp.delta_from_approximate_zcdp(0.1, 1.0, -1e-3), "approx_delta"),
    ],
)
def test_bad_input_raises_naming_the_argument(call, name):
    with pytest.raises(ValueError, match=rf"\b{name}\b"):
        call()
