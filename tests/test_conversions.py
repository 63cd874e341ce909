"""Tests of jaxrdp.conversions: RDP → (ε, δ), the SGM over many steps, order refinement.

References used here are independent of jaxrdp: the paper formulas evaluated with plain
Python ``math``; dp_accounting's RdpAccountant (exact for integer orders except where its
log-space sum of terms near 1 loses digits); and mpmath (``tests/mp_reference.py``, the
exact binomial sum at 60 digits) to decide who is right where the two disagree.
"""

from __future__ import annotations

import math
import os
import sys
import warnings

import jax
import jax.numpy as jnp
import mpmath as mp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import jaxrdp
from jaxrdp import conversions
from jaxrdp.conversions import OrderAtEdgeWarning

sys.path.insert(0, os.path.dirname(__file__))
from mp_reference import log_a_fractional, log_a_integer  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::jaxrdp.conversions.OrderAtEdgeWarning")

INT_ORDERS = np.array(list(range(2, 65)) + [128, 256], dtype=np.float64)


def improved_eps(r, a, delta):
    """Canonne–Kamath–Steinke (2020) Prop. 12, solved for ε, in plain math."""
    return r + math.log1p(-1.0 / a) - math.log(delta * a) / (a - 1)


def classic_eps(r, a, delta):
    """Mironov (2017) Prop. 3 / blog Claim 21.3."""
    return r + math.log(1.0 / delta) / (a - 1)


def improved_delta(r, a, eps):
    return math.exp((a - 1) * (r - eps)) * (1 - 1 / a) ** (a - 1) / a


def kl_delta(r):
    return math.sqrt(-math.expm1(-r))


def rel(a, b):
    return abs(a / b - 1.0)


# ----------------------------------------------------------------- hand-computed values


def test_classic_hand_computed():
    rdp = [0.5, 0.8, 1.7]
    orders = [2.0, 4.0, 8.0]
    delta = 1e-5
    per_order = [classic_eps(r, a, delta) for r, a in zip(rdp, orders)]
    # 0.5 + 11.513 = 12.01, 0.8 + 3.838 = 4.64, 1.7 + 1.645 = 3.345: the last wins.
    assert np.argmin(per_order) == 2
    eps, order = conversions.epsilon_from_rdp(rdp, orders, delta, method="classic")
    assert rel(float(eps), min(per_order)) < 1e-13
    assert float(order) == 8.0
    assert eps.dtype == jnp.float64


def test_improved_hand_computed():
    rdp = np.array([[0.5, 0.8, 1.7], [0.01, 0.03, 0.1]])
    orders = [2.0, 4.0, 8.0]
    deltas = np.array([1e-5, 1e-3])
    eps, order = conversions.epsilon_from_rdp(rdp, orders, deltas)
    for row, delta, e, o in zip(rdp, deltas, np.asarray(eps), np.asarray(order)):
        per_order = [improved_eps(r, a, delta) for r, a in zip(row, orders)]
        assert rel(e, min(per_order)) < 1e-13
        assert o == orders[int(np.argmin(per_order))]
        # The improved conversion is never worse than the classic one.
        assert e < min(classic_eps(r, a, delta) for r, a in zip(row, orders))
    # First row, by hand: at α = 8, 1.7 + log(7/8) − log(8e-5)/7 = 2.8124...
    assert abs(float(eps[0]) - (1.7 + math.log(7 / 8) - math.log(8e-5) / 7)) < 1e-13


def test_kl_shortcut_gives_zero():
    # δ² = 1e-10 exceeds 1 − e^{−r} ≈ 1e-12 at the first order, so (0, δ)-DP holds.
    rdp = [1e-12, 5e-12, 1e-11]
    orders = [2.0, 3.0, 4.0]
    assert 1e-5 > kl_delta(1e-12)
    eps, _ = conversions.epsilon_from_rdp(rdp, orders, 1e-5)
    assert float(eps) == 0.0
    eps_c, _ = conversions.epsilon_from_rdp(rdp, orders, 1e-5, method="classic")
    assert float(eps_c) == 0.0
    # δ = 1e-7 is below sqrt(1 − e^{−1e-12}) ≈ 1e-6: the shortcut must not fire, and ε
    # is the improved formula at the best order.
    assert 1e-7 < kl_delta(1e-12)
    eps, order = conversions.epsilon_from_rdp(rdp, orders, 1e-7)
    expected = min(improved_eps(r, a, 1e-7) for r, a in zip(rdp, orders))
    assert expected > 1.0
    assert rel(float(eps), expected) < 1e-13
    assert float(order) == 4.0


def test_clipping_at_zero_without_kl():
    # One order, α = 10, r = 0.05, δ = 0.2: the KL bound sqrt(1 − e^{−0.05}) = 0.22 > δ
    # does not apply, but the improved formula is negative, so ε = 0; this is sound
    # because the order's own δ-bound at ε = 0 is below 0.2.
    r, a, delta = 0.05, 10.0, 0.2
    assert kl_delta(r) > delta
    assert improved_eps(r, a, delta) < 0
    eps, _ = conversions.epsilon_from_rdp([r], [a], delta)
    assert float(eps) == 0.0
    d0, _ = conversions.delta_from_rdp([r], [a], 0.0)
    assert rel(float(d0), improved_delta(r, a, 0.0)) < 1e-13
    assert float(d0) <= delta


def test_delta_hand_computed():
    rdp = [0.5, 0.8, 1.7]
    orders = [2.0, 4.0, 8.0]
    for eps in (3.0, 5.0):
        d, order = conversions.delta_from_rdp(rdp, orders, eps)
        per_order = [min(improved_delta(r, a, eps), kl_delta(r)) for r, a in zip(rdp, orders)]
        assert rel(float(d), min(per_order)) < 1e-12
        assert float(order) == orders[int(np.argmin(per_order))]
        dc, _ = conversions.delta_from_rdp(rdp, orders, eps, method="classic")
        classic = [min(math.exp((a - 1) * (r - eps)), kl_delta(r)) for r, a in zip(rdp, orders)]
        assert rel(float(dc), min(classic)) < 1e-12
        assert float(d) < float(dc)
    # KL bound wins for a tiny RDP: improved gives e^{1e-6}/4 at α = 2, KL gives ~1e-3.
    d, _ = conversions.delta_from_rdp([1e-6], [2.0], 0.0)
    assert rel(float(d), kl_delta(1e-6)) < 1e-12
    # Large RDP, small ε: the bound exceeds 1 and is clipped.
    d, _ = conversions.delta_from_rdp([50.0], [2.0], 0.0)
    assert float(d) == 1.0


def test_round_trip_epsilon_delta():
    rdp = np.array([0.5, 0.8, 1.7, 3.0])
    orders = np.array([2.0, 4.0, 8.0, 16.0])
    for method in conversions.METHODS:
        for delta in (1e-9, 1e-5, 1e-2):
            eps, order = conversions.epsilon_from_rdp(rdp, orders, delta, method=method)
            back, _ = conversions.delta_from_rdp(rdp, orders, eps, method=method)
            assert float(back) <= delta * (1 + 1e-12)
            assert float(back) >= delta * (1 - 1e-9)


def test_infinite_order_is_pure_dp():
    rdp = [0.3, 0.5]
    orders = [2.0, math.inf]
    eps, order = conversions.epsilon_from_rdp(rdp, orders, 1e-5)
    assert float(eps) == pytest.approx(0.5, rel=1e-14) and float(order) == math.inf
    eps0, _ = conversions.epsilon_from_rdp(rdp, orders, 0.0)  # pure DP works at δ = 0
    assert float(eps0) == pytest.approx(0.5, rel=1e-14)
    d, _ = conversions.delta_from_rdp(rdp, orders, 0.5)
    assert float(d) == 0.0
    d, _ = conversions.delta_from_rdp(rdp, orders, 0.4)
    assert rel(float(d), min(improved_delta(0.3, 2.0, 0.4), kl_delta(0.3))) < 1e-12


# ----------------------------------------------------------------- special values, errors


def test_delta_zero_infinity_and_delta_one():
    eps, _ = conversions.epsilon_from_rdp([0.1, 0.2], [2.0, 3.0], 0.0)
    assert float(eps) == math.inf
    eps, _ = conversions.epsilon_from_rdp([0.0, 0.0], [2.0, 3.0], 0.0)
    assert float(eps) == 0.0
    eps, _ = conversions.epsilon_from_rdp([math.inf, math.inf], [2.0, 3.0], 1.0)
    assert float(eps) == 0.0
    eps, _ = conversions.epsilon_from_rdp([math.inf, math.inf], [2.0, 3.0], 0.5)
    assert float(eps) == math.inf
    eps, _ = conversions.epsilon(0.01, 1.0, 100, 0.0)
    assert float(eps) == math.inf


@pytest.mark.slow
def test_epsilon_never_negative_or_nan_on_extreme_grid():
    q = np.array([0.0, 1e-5, 0.5, 1.0])[:, None, None, None]
    sigma = np.array([0.0, 0.5, 20.0, np.inf])[None, :, None, None]
    steps = np.array([0, 1, 10**7])[None, None, :, None]
    delta = np.array([0.0, 1e-12, 0.5, 1.0])[None, None, None, :]
    eps, order = conversions.epsilon(q, sigma, steps, delta)
    eps = np.asarray(np.broadcast_to(eps, (4, 4, 3, 4)))
    assert not np.any(np.isnan(eps))
    assert np.all(eps >= 0)
    qb, sb, tb, db = np.broadcast_arrays(q, sigma, steps, delta)
    trivial = (qb == 0) | np.isinf(sb) | (tb == 0)
    assert np.all(eps[trivial] == 0)
    assert np.all(eps[db == 1] == 0)
    assert np.all(np.isinf(eps[~trivial & (db == 0)]))
    assert np.all(np.isinf(eps[~trivial & (sb == 0) & (db < 1)]))
    finite = ~trivial & (sb > 0) & (db > 0) & (db < 1)
    assert np.all(np.isfinite(eps[finite]))
    assert np.all(eps[finite & (db == 1e-12)] > 0)
    d, _ = conversions.delta(q, sigma, steps, np.array([0.0, 1.0, np.inf])[None, None, None, :])
    d = np.asarray(d)
    assert not np.any(np.isnan(d)) and np.all((d >= 0) & (d <= 1))


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: conversions.epsilon_from_rdp([0.1, -0.2], [2.0, 3.0], 1e-5), "rdp.*-0.2"),
        (lambda: conversions.epsilon_from_rdp([0.1, np.nan], [2.0, 3.0], 1e-5), "rdp"),
        (lambda: conversions.delta_from_rdp([-1e-3], [2.0], 1.0), "rdp"),
        (lambda: conversions.epsilon_from_rdp([0.1], [2.0], 1.5), "delta.*1.5"),
        (lambda: conversions.epsilon_from_rdp([0.1], [2.0], -1e-5), "delta"),
        (lambda: conversions.epsilon_from_rdp([0.1], [1.0], 1e-5), "orders.*1.0"),
        (lambda: conversions.epsilon_from_rdp([0.1, 0.2], [2.0, 3.0, 4.0], 1e-5), r"shape \(3,\)"),
        (
            lambda: conversions.epsilon_from_rdp(np.zeros((2, 3)), [2, 3, 4], [1e-5] * 3),
            "delta.*shape",
        ),
        (lambda: conversions.epsilon_from_rdp([0.1], [2.0], 1e-5, method="tight"), "method"),
        (lambda: conversions.delta_from_rdp([0.1], [2.0], -0.5), "epsilon.*-0.5"),
        (lambda: conversions.epsilon(0.01, 1.0, -1, 1e-5), "steps"),
        (lambda: conversions.epsilon(0.01, 1.0, 2.5, 1e-5), "steps.*2.5"),
        (lambda: conversions.epsilon(1.5, 1.0, 10, 1e-5), "q.*1.5"),
        (lambda: conversions.epsilon(0.01, -1.0, 10, 1e-5), "sigma"),
        (lambda: conversions.epsilon(0.01, 1.0, 10, 2.0), "delta.*2.0"),
        (lambda: conversions.epsilon(0.01, 1.0, 10, 1e-5, orders=[0.5, 2.0]), "orders.*0.5"),
        (lambda: conversions.epsilon([0.01, 0.02], [1.0, 2.0, 3.0], 10, 1e-5), "broadcast"),
        (lambda: conversions.delta(0.01, 1.0, 10, -1.0), "epsilon"),
        (lambda: conversions.compose_rdp([0.01, 0.02], [1.0, 2.0], [10, -3]), "steps"),
        (lambda: conversions.compose_rdp([0.01, 0.02], [1.0, 2.0, 3.0], [10, 3]), "broadcast"),
    ],
)
def test_bad_inputs_raise_naming_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_traced_invalid_inputs_give_nan_not_zero():
    f = jax.jit(lambda r, d: conversions.epsilon_from_rdp(r, jnp.array([2.0, 3.0]), d))
    eps, order = f(jnp.array([0.1, -0.2]), jnp.float32(1e-5))
    assert np.isnan(float(eps)) and np.isnan(float(order))
    eps, _ = f(jnp.array([1e-12, -1e-9]), jnp.float32(0.5))  # would be 0 by KL otherwise
    assert np.isnan(float(eps))
    eps, _ = f(jnp.array([0.1, 0.2]), jnp.float32(1.5))
    assert np.isnan(float(eps))
    eps, _ = f(jnp.array([0.1, 0.2]), jnp.float32(1e-5))
    assert np.isfinite(float(eps)) and float(eps) > 0
    g = jax.jit(lambda r, e: conversions.delta_from_rdp(r, jnp.array([2.0, 3.0]), e))
    assert np.isnan(float(g(jnp.array([0.1, -0.2]), jnp.float32(1.0))[0]))
    assert np.isnan(float(g(jnp.array([0.1, 0.2]), jnp.float32(-1.0))[0]))
    h = jax.jit(lambda s: conversions.epsilon(0.01, 1.0, s, 1e-5)[0])
    assert np.isnan(float(h(jnp.int32(-5))))
    assert float(h(jnp.int32(0))) == 0.0


def test_at_edge_flag_and_warning():
    orders = [2.0, 4.0, 8.0]
    with pytest.warns(OrderAtEdgeWarning, match="edge"):
        info = conversions.epsilon_from_rdp([0.5, 0.8, 1.7], orders, 1e-5, return_info=True)
    assert bool(info.at_edge) and float(info.order) == 8.0
    with warnings.catch_warnings():
        warnings.simplefilter("error", OrderAtEdgeWarning)
        info = conversions.epsilon_from_rdp([0.5, 1.0, 3.0], orders, 1e-5, return_info=True)
        assert float(info.order) == 4.0 and not bool(info.at_edge)
        # ε = 0 by the KL shortcut at the first order is not an "edge" problem.
        info = conversions.epsilon_from_rdp([1e-12, 1e-11, 1e-10], orders, 1e-3, return_info=True)
        assert float(info.epsilon) == 0.0 and not bool(info.at_edge)
    # Large σ, few steps: the optimum wants orders beyond the top of the grid.
    with pytest.warns(OrderAtEdgeWarning):
        info = conversions.epsilon(1e-3, 20.0, 10, 1e-5, orders=INT_ORDERS, return_info=True)
    assert bool(info.at_edge) and float(info.order) == 256.0
    with pytest.warns(OrderAtEdgeWarning):
        info = conversions.delta(1e-3, 20.0, 10, 0.05, orders=INT_ORDERS, return_info=True)
    assert bool(info.at_edge)


# ----------------------------------------------------------------- dp_accounting parity

Q_SUITE = np.array([1e-5, 1e-4, 1e-3, 0.01, 0.1, 0.5])
SIGMA_SUITE = np.array([0.5, 0.8, 1.0, 2.0, 5.0, 10.0, 20.0])
STEPS_SUITE = np.array([1, 10, 1000, 10**5, 10**7])
DELTA_SUITE = np.array([1e-12, 1e-8, 1e-5, 1e-3])
EPS_SUITE = np.array([0.1, 1.0, 4.0, 16.0])


def _dpa_accountant(q, sigma, steps, orders):
    dpa = pytest.importorskip("dp_accounting")  # skips only the tests that need it
    acc = dpa.rdp.RdpAccountant(list(orders))
    acc.compose(dpa.PoissonSampledDpEvent(float(q), dpa.GaussianDpEvent(float(sigma))), int(steps))
    return acc


_MP_RDP_CACHE: dict = {}


def _mp_rdp_curve(q, sigma, orders):
    """Exact RDP (mpmath, 60 digits) at each order: binomial sum or quadrature."""
    key = (float(q), float(sigma), tuple(orders))
    if key not in _MP_RDP_CACHE:
        curve = []
        for a in orders:
            if float(a).is_integer():
                la = log_a_integer(q, sigma, int(a))
            else:
                la = log_a_fractional(q, sigma, a)
            curve.append(la / (mp.mpf(a) - 1))
        _MP_RDP_CACHE[key] = curve
    return _MP_RDP_CACHE[key]


def _mp_epsilon(q, sigma, steps, delta, orders):
    with mp.workdps(50):
        best = mp.inf
        for a, r in zip(orders, _mp_rdp_curve(q, sigma, orders)):
            total = steps * r
            if 2 * mp.log(delta) > mp.log(-mp.expm1(-total)):
                return 0.0
            a = mp.mpf(a)
            best = min(best, total + mp.log1p(-1 / a) - mp.log(mp.mpf(delta) * a) / (a - 1))
        return float(max(best, 0))


def _mp_delta(q, sigma, steps, eps, orders):
    with mp.workdps(50):
        best = mp.mpf(0)
        for a, r in zip(orders, _mp_rdp_curve(q, sigma, orders)):
            total = steps * r
            a = mp.mpf(a)
            log_d = (a - 1) * (total - eps + mp.log1p(-1 / a)) - mp.log(a)
            best = min(best, log_d, mp.log(-mp.expm1(-total)) / 2)
        return float(mp.e**best)


def _mp_suite_epsilon(i, j, k, m):
    q, s, n, d = Q_SUITE[i], SIGMA_SUITE[j], int(STEPS_SUITE[k]), DELTA_SUITE[m]
    return _mp_epsilon(q, s, n, d, INT_ORDERS)


@pytest.fixture(scope="module")
def integer_suite():
    grid = np.ix_(Q_SUITE, SIGMA_SUITE, STEPS_SUITE, DELTA_SUITE)
    eps, order = conversions.epsilon(*grid, orders=INT_ORDERS)
    eps_grid = np.ix_(Q_SUITE, SIGMA_SUITE, STEPS_SUITE, EPS_SUITE)
    dlt, _ = conversions.delta(*eps_grid, orders=INT_ORDERS)
    ref_eps = np.zeros(eps.shape)
    ref_delta = np.zeros(dlt.shape)
    for i, q in enumerate(Q_SUITE):
        for j, s in enumerate(SIGMA_SUITE):
            for k, n in enumerate(STEPS_SUITE):
                acc = _dpa_accountant(q, s, n, INT_ORDERS)
                for m, d in enumerate(DELTA_SUITE):
                    ref_eps[i, j, k, m] = acc.get_epsilon(d)
                for m, e in enumerate(EPS_SUITE):
                    ref_delta[i, j, k, m] = acc.get_delta(e)
    return np.asarray(eps), np.asarray(order), ref_eps, np.asarray(dlt), ref_delta


def test_epsilon_matches_dp_accounting_integer_orders(integer_suite):
    eps, _, ref, _, _ = integer_suite
    assert np.all(np.isfinite(eps)) and np.all(eps >= 0)
    # ε = 0 (KL shortcut, tiny RDP and large δ) at exactly the same configurations.
    assert np.array_equal(eps == 0, ref == 0) and (eps == 0).sum() < 0.1 * eps.size
    rel_err = np.where(ref > 0, np.abs(eps / np.where(ref > 0, ref, 1) - 1), 0.0)
    disagree = np.argwhere(rel_err > 1e-9)
    # Where dp_accounting's integer log A (a log-space sum of terms ≈ 1) has lost digits,
    # the exact mpmath value decides: jaxrdp must match it, dp_accounting must not.
    for i, j, k, m in disagree:
        exact = _mp_suite_epsilon(i, j, k, m)
        assert rel(eps[i, j, k, m], exact) < 1e-12, (Q_SUITE[i], SIGMA_SUITE[j], STEPS_SUITE[k])
        assert rel(ref[i, j, k, m], exact) > 1e-9
        assert Q_SUITE[i] <= 1e-4  # only tiny RDP values are affected
    # The agreement is not vacuous: the vast majority agrees to 1e-9.
    assert len(disagree) < 0.02 * eps.size
    # And independently of dp_accounting, a sample agrees with mpmath everywhere.
    for i, j, k, m in [(0, 6, 4, 3), (3, 2, 2, 2), (5, 0, 0, 0), (4, 4, 3, 1), (2, 1, 4, 0)]:
        exact = _mp_suite_epsilon(i, j, k, m)
        assert rel(eps[i, j, k, m], exact) < 1e-12


def test_delta_matches_dp_accounting_integer_orders(integer_suite):
    _, _, _, dlt, ref = integer_suite
    assert np.all((dlt > 0) & (dlt <= 1))
    # Where dp_accounting's δ underflows (to 0 or a subnormal), jaxrdp reports the smallest
    # normal number, an upper bound (never 0: the true δ is positive); both clip to 1 alike.
    tiny = np.finfo(np.float64).tiny
    assert np.array_equal(dlt == tiny, ref < tiny) and np.array_equal(dlt == 1, ref == 1)
    inner = (ref >= tiny) & (ref < 1)
    assert inner.sum() > 0.3 * ref.size
    rel_err = np.where(inner, np.abs(dlt / np.where(inner, ref, 1) - 1), 0)
    for i, j, k, m in np.argwhere(rel_err > 1e-9):
        exact = _mp_delta(Q_SUITE[i], SIGMA_SUITE[j], int(STEPS_SUITE[k]), EPS_SUITE[m], INT_ORDERS)
        # jaxrdp errs upwards only (the kernels' 5e-13 margin on log A, amplified by
        # (α−1)·T·rdp in the exponent of δ); dp_accounting is off by more, either way.
        assert 0.0 <= dlt[i, j, k, m] / exact - 1 < 1e-9
        assert rel(ref[i, j, k, m], exact) > 1e-9
    assert (rel_err > 1e-9).sum() < 0.1 * inner.sum()


@pytest.mark.slow
def test_fractional_orders_never_worse_than_dp_accounting():
    """With dp_accounting's own (fractional) default orders and with jaxrdp's superset,
    jaxrdp's ε is at most dp_accounting's, except where dp_accounting's value is below the
    exact value at its own chosen order (checked with mpmath)."""
    pytest.importorskip("dp_accounting")
    from dp_accounting.rdp.rdp_privacy_accountant import DEFAULT_RDP_ORDERS

    dpa_orders = np.array(DEFAULT_RDP_ORDERS, dtype=np.float64)
    qs, sigmas = np.array([1e-5, 1e-3, 0.01, 0.1]), np.array([0.5, 1.0, 5.0, 20.0])
    steps, deltas = np.array([1, 1000, 10**6]), np.array([1e-10, 1e-5])
    grid = np.ix_(qs, sigmas, steps, deltas)
    eps_same, _ = conversions.epsilon(*grid, orders=dpa_orders)
    eps_default, _ = conversions.epsilon(*grid)
    eps_same, eps_default = np.asarray(eps_same), np.asarray(eps_default)
    ref = np.zeros(eps_same.shape)
    ref_order = np.zeros(eps_same.shape)
    for i, q in enumerate(qs):
        for j, s in enumerate(sigmas):
            for k, n in enumerate(steps):
                acc = _dpa_accountant(q, s, n, dpa_orders)
                for m, d in enumerate(deltas):
                    ref[i, j, k, m], ref_order[i, j, k, m] = acc.get_epsilon_and_optimal_order(d)
    assert np.all(eps_default <= eps_same * (1 + 1e-12))
    above = np.argwhere(eps_same > ref * (1 + 1e-12))
    for i, j, k, m in above:
        at_order = [ref_order[i, j, k, m]]
        exact_at_dpa_order = _mp_epsilon(qs[i], sigmas[j], int(steps[k]), deltas[m], at_order)
        assert eps_same[i, j, k, m] <= exact_at_dpa_order * (1 + 1e-12)
        assert ref[i, j, k, m] < exact_at_dpa_order  # dp_accounting is the one that is low
    assert len(above) < 0.05 * ref.size
    smaller = eps_same < ref * (1 - 1e-9)
    assert smaller.sum() > 0.25 * ref.size  # fractional orders do make a difference
    ratio = eps_default[ref > 0] / ref[ref > 0]
    assert np.min(ratio) < 0.5  # e.g. q = 0.1, σ = 0.5: dp_accounting gives up near α = 1


# ----------------------------------------------------------------- precision paths


@pytest.mark.slow
def test_float32_traced_epsilon_is_sound_and_close():
    f = jax.jit(lambda q, s, t, d: conversions.epsilon(q, s, t, d)[0])
    q = jnp.array([1e-3, 0.01, 0.1, 0.5], jnp.float32)
    s = jnp.array([0.8, 1.0, 5.0, 20.0], jnp.float32)
    t = jnp.array([10**5, 1000, 10**4, 10], jnp.int32)
    d = jnp.array([1e-5, 1e-8, 1e-5, 1e-3], jnp.float32)
    eps32 = np.asarray(f(q, s, t, d))
    assert eps32.dtype == np.float32
    q64, s64, d64 = (np.asarray(v, dtype=np.float64) for v in (q, s, d))
    eps64, _ = conversions.epsilon(q64, s64, np.asarray(t), d64)
    eps64 = np.asarray(eps64)
    assert np.all(eps32 >= eps64)
    assert np.all(eps32 <= eps64 * (1 + 1e-4))


def test_compose_rdp_sums_segments():
    q = np.array([0.01, 0.02, 0.005])
    sigma = np.array([1.0, 1.5, 0.8])
    steps = np.array([100, 250, 0])
    total = np.asarray(conversions.compose_rdp(q, sigma, steps, orders=INT_ORDERS))
    assert total.shape == INT_ORDERS.shape
    separate = sum(n * np.asarray(jaxrdp.rdp(a, s, INT_ORDERS)) for a, s, n in zip(q, sigma, steps))
    np.testing.assert_allclose(total, separate, rtol=1e-14)
    eps_sched, _ = conversions.epsilon_from_rdp(total, INT_ORDERS, 1e-5)
    eps_one, _ = conversions.epsilon(0.01, 1.0, 100, 1e-5, orders=INT_ORDERS)
    assert float(eps_sched) > float(eps_one)


# ----------------------------------------------------------------- refinement and properties

def log_uniform(lo, hi):
    return st.floats(math.log10(lo), math.log10(hi)).map(lambda e: 10.0**e)


@settings(max_examples=40, deadline=None)
@given(
    q=log_uniform(1e-5, 0.5),
    sigma=log_uniform(0.5, 20.0),
    steps=st.integers(0, 6).flatmap(lambda e: st.integers(10**e, 10 ** (e + 1) - 1)),
    delta=log_uniform(1e-12, 1e-3),
)
def test_refinement_never_worse_and_reaches_the_local_minimum(q, sigma, steps, delta):
    grid = conversions.epsilon(q, sigma, steps, delta, return_info=True)
    refined = conversions.epsilon(q, sigma, steps, delta, refine=True, return_info=True)
    e_grid, e_ref = float(grid.epsilon), float(refined.epsilon)
    if e_grid == 0:  # KL shortcut (tiny RDP): nothing to refine
        assert e_ref == 0
        return
    # The order reported lies in the bracket around the grid optimum, and the ε reported
    # is the plain-math Prop. 12 formula at that order with the RDP evaluated there
    # separately: a valid bound, attained where it is said to be (never below it).
    orders = jaxrdp.DEFAULT_ORDERS
    i = int(np.searchsorted(orders, float(grid.order)))
    lo, hi = orders[max(i - 1, 0)], orders[min(i + 1, len(orders) - 1)]
    alpha = float(refined.order)
    assert lo <= alpha <= hi
    r = steps * float(jaxrdp.rdp(q, sigma, alpha))
    formula = improved_eps(r, alpha, delta)
    assert e_ref == pytest.approx(formula, rel=1e-12)  # the two kernel paths agree to ~1e-13
    # And it is as good as a dense search of the bracket around the grid optimum.
    dense = np.linspace(lo, hi, 64)
    # (q of shape (64,) keeps the kernel on its elementwise path: one compiled program for
    # every example, instead of one per distinct order grid.)
    curve = steps * np.asarray(jaxrdp.rdp(np.full(64, q), sigma, dense))
    e_dense, _ = conversions.epsilon_from_rdp(curve, dense, delta)
    assert e_ref <= float(e_dense) * (1 + 1e-9)


def test_refinement_examples():
    """Documented examples of what refinement buys (printed with ``pytest -s``)."""
    cases = [
        (0.01, 1.0, 1000, 1e-5),
        (0.5, 0.5, 1, 1e-3),
        (1e-3, 0.8, 10**5, 1e-5),
        (1e-3, 5.0, 1000, 1e-5),
        (0.1, 0.5, 1000, 1e-5),
    ]
    for q, s, n, d in cases:
        g = conversions.epsilon(q, s, n, d, return_info=True)
        r = conversions.epsilon(q, s, n, d, refine=True, return_info=True)
        gd = conversions.delta(q, s, n, float(g.epsilon) * 0.9)
        rd = conversions.delta(q, s, n, float(g.epsilon) * 0.9, refine=True)
        print(
            f"q={q:g} σ={s:g} T={n} δ={d:g}: "
            f"ε grid {float(g.epsilon):.6f} (α={float(g.order):g}) → "
            f"refined {float(r.epsilon):.6f} (α={float(r.order):.4f}), "
            f"{100 * (1 - float(r.epsilon) / float(g.epsilon)):.3f}% smaller; "
            f"δ at 0.9ε: {float(gd[0]):.4e} → {float(rd[0]):.4e}"
        )
        # Each reported value is the plain-math formula at the order reported with it
        # (Prop. 12 for ε; its δ-form for δ), the RDP evaluated there separately.
        for result, kind in ((r, "eps"), (rd, "delta")):
            alpha = float(result[1])
            rdp_total = n * float(jaxrdp.rdp(q, s, alpha))
            if kind == "eps":
                want = improved_eps(rdp_total, alpha, d)
            else:
                e = float(g.epsilon) * 0.9
                want = math.exp((alpha - 1) * (rdp_total - e + math.log1p(-1 / alpha))
                                - math.log(alpha))
            assert float(result[0]) == pytest.approx(want, rel=1e-12), (q, s, n, d, kind)
    # Between integer orders the gain is visible: q = 0.01, σ = 1, T = 1000, δ = 1e-5.
    g, _ = conversions.epsilon(0.01, 1.0, 1000, 1e-5, orders=INT_ORDERS)
    r, order = conversions.epsilon(0.01, 1.0, 1000, 1e-5, orders=INT_ORDERS, refine=True)
    assert float(r) < float(g) * (1 - 1e-3) and not float(order).is_integer()
    # The sparse top of the default grid (…, 320, 384, …) leaves more: 3.5% at q = 1e-3,
    # σ = 5, T = 1000, δ = 1e-5 (grid α = 320, refined α ≈ 344).
    g, _ = conversions.epsilon(1e-3, 5.0, 1000, 1e-5)
    r, order = conversions.epsilon(1e-3, 5.0, 1000, 1e-5, refine=True)
    assert float(r) < float(g) * (1 - 0.02) and 320 < float(order) < 384


@settings(max_examples=40, deadline=None)
@given(
    q=log_uniform(1e-5, 0.5),
    sigma=log_uniform(0.5, 20.0),
    steps=st.integers(1, 10**7),
    delta=log_uniform(1e-12, 1e-3),
    factor=st.floats(1.0, 4.0),
)
def test_monotonicity(q, sigma, steps, delta, factor):
    # Eight configurations in one call (fixed shapes: one compiled program).
    qs = np.array([q, q, q, q, q, q, q, min(q * factor, 1.0)])
    ss = np.array([sigma, sigma, sigma, sigma * factor, sigma, sigma, sigma, sigma])
    ts = np.array([steps, steps, steps, steps, steps, int(steps * factor), steps, steps])
    ds = np.array([delta, min(delta * factor, 1.0), delta, delta, delta, delta, delta, delta])
    eps = np.asarray(conversions.epsilon(qs, ss, ts, ds)[0])
    assert np.all(np.isfinite(eps)) and np.all(eps >= 0)
    tol = 1e-11 * eps[0] + 1e-15
    assert eps[1] <= eps[0] + tol  # non-increasing in δ
    assert eps[3] <= eps[2] + tol  # non-increasing in σ
    assert eps[5] >= eps[4] - tol  # non-decreasing in steps
    assert eps[7] >= eps[6] - tol  # non-decreasing in q


# ------------------------------------------------- one compiled program per single-run call

SINGLE_RUNS = [(256 / 60000, 1.1, 3516, 1e-5), (0.01, 0.7, 10, 1e-8), (1e-4, 8.0, 10**6, 1e-3),
               (0.3, 2.0, 1, 1e-6), (0.0, 1.0, 100, 1e-5), (0.01, 1.0, 0, 1e-5)]


@pytest.mark.parametrize("q, sigma, steps, delta", SINGLE_RUNS)
def test_single_run_is_bitwise_the_separate_steps(q, sigma, steps, delta):
    # epsilon/delta run kernel, composition and conversion as one compiled program; the
    # public steps run one by one must give the same bits.
    total = np.asarray(jaxrdp.rdp(q, sigma, jaxrdp.DEFAULT_ORDERS)) * steps if steps else 0.0
    total = total + np.zeros(len(jaxrdp.DEFAULT_ORDERS))
    eps, order = conversions.epsilon(q, sigma, steps, delta)
    ref_eps, ref_order = conversions.epsilon_from_rdp(total, jaxrdp.DEFAULT_ORDERS, delta)
    assert float(eps) == float(ref_eps) and float(order) == float(ref_order)
    target = max(float(eps), 0.5)
    dlt, order = conversions.delta(q, sigma, steps, target)
    ref_dlt, ref_order = conversions.delta_from_rdp(total, jaxrdp.DEFAULT_ORDERS, target)
    assert float(dlt) == float(ref_dlt) and float(order) == float(ref_order)


@pytest.mark.parametrize("q, sigma, steps, delta", SINGLE_RUNS)
def test_epsilon_once_is_epsilon_to_the_kernels_accuracy(q, sigma, steps, delta):
    # The command line's one-shot program (elementwise kernel, unoptimised on CPU).
    eps, order = conversions.epsilon_once(q, sigma, steps, delta)
    ref, ref_order = conversions.epsilon(q, sigma, steps, delta)
    assert float(eps) == pytest.approx(float(ref), rel=1e-13, abs=0.0)
    assert float(order) == float(ref_order)


def test_epsilon_once_program_holds_only_the_elementwise_kernel():
    # Its orders are traced and as long as the defaults, which jaxrdp.rdp would compare with
    # the defaults as the program runs (both paths compiled: 3.6 s instead of 1.6 s for the
    # command's first call). The one-shot program must not contain that branch.
    arrays = [np.float64(256 / 60000), np.float64(1.1), np.float64(3516), np.float64(1e-5),
              np.asarray(jaxrdp.DEFAULT_ORDERS)]
    programs = {}
    with jax.enable_x64(True):
        for shared in (False, True):
            body = lambda *a, s=shared: conversions._sgm_body(*a, None, "improved", "epsilon", False, s)  # noqa: E731
            programs[shared] = str(jax.make_jaxpr(body)(*map(jnp.asarray, arrays)))
    assert "cond[" not in programs[False]
    assert "cond[" in programs[True]  # the library's traced-orders call: the runtime comparison


def test_epsilon_once_names_bad_arguments():
    for args, name in [((1.5, 1.0, 10, 1e-5), "q"), ((0.1, -1.0, 10, 1e-5), "sigma"),
                       ((0.1, 1.0, 2.5, 1e-5), "steps"), ((0.1, 1.0, 10, 2.0), "delta")]:
        with pytest.raises(ValueError, match=name):
            conversions.epsilon_once(*args)
