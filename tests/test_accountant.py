"""Tests of jaxrdp.accountant: pure pytree functions under jit/scan, and the host class.

References: jaxrdp.conversions in float64 on the host (itself checked against
dp_accounting and mpmath in test_conversions.py), dp_accounting's RdpAccountant for DpEvent
parity (integer orders, configurations where its integer log A is exact), and plain
arithmetic for the zCDP curve ξ + ρα.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrdp
from jaxrdp import accountant, conversions, kernels

dpa = pytest.importorskip("dp_accounting")

pytestmark = pytest.mark.filterwarnings("ignore::jaxrdp.conversions.OrderAtEdgeWarning")

INT_ORDERS = np.array(list(range(2, 65)) + [128, 256], dtype=np.float64)


def rel(a, b):
    return abs(a / b - 1.0)


def _dp_sgd_loop(length, q, sigma, delta, budget):
    """A toy DP-SGD loop: one SGM step per iteration, stop once ε would exceed the budget."""

    def run(state):
        def step(carry, _):
            state, stopped, taken = carry
            candidate = accountant.compose(state, q, sigma)
            eps, _ = accountant.get_epsilon(candidate, delta)
            stop = stopped | (eps > budget)
            keep = lambda old, new: jnp.where(stop, old, new)  # noqa: E731
            state = jax.tree_util.tree_map(keep, state, candidate)
            return (state, stop, taken + jnp.where(stop, 0, 1)), eps

        init = (state, jnp.asarray(False), jnp.asarray(0, jnp.int32))
        (state, stopped, taken), trace = jax.lax.scan(step, init, None, length=length)
        eps, order = accountant.get_epsilon(state, delta)
        return state, stopped, taken, eps, order, trace

    return jax.jit(run)


@pytest.mark.slow
def test_dp_sgd_scan_float32_in_graph_budget():
    assert not jax.config.jax_enable_x64  # the default in user graphs
    q, sigma, delta, budget = 0.01, 1.0, 1e-5, 2.0
    state0 = accountant.init()
    assert state0.rdp.dtype == jnp.float32
    state, stopped, taken, eps, order, trace = _dp_sgd_loop(1500, q, sigma, delta, budget)(state0)
    taken = int(taken)
    assert bool(stopped) and 100 < taken < 1500
    assert eps.dtype == jnp.float32
    eps32 = float(eps)
    assert eps32 <= budget
    # The step that was refused would have exceeded the budget.
    assert float(trace[taken]) > budget
    # Host float64 reference at the same (float32-rounded) orders, and at the exact ones.
    orders32 = np.asarray(state.orders, np.float32).astype(np.float64)
    eps64, _ = conversions.epsilon(q, sigma, taken, delta, orders=orders32)
    eps64_exact_orders, _ = conversions.epsilon(q, sigma, taken, delta)
    for ref in (float(eps64), float(eps64_exact_orders)):
        assert eps32 >= ref  # soundness: float32 never reports less than float64
        assert eps32 <= ref * (1 + 1e-4)
    # The next step in float64 is over the budget: the loop stopped at the right place.
    eps_next, _ = conversions.epsilon(q, sigma, taken + 1, delta, orders=orders32)
    assert float(eps_next) > budget * (1 - 1e-4)


def test_dp_sgd_scan_float64_matches_host():
    q, sigma, delta, budget = 0.02, 1.2, 1e-6, 2.0
    with jax.enable_x64(True):
        state0 = accountant.init(INT_ORDERS)
        assert state0.rdp.dtype == jnp.float64
        state, stopped, taken, eps, order, _ = _dp_sgd_loop(600, q, sigma, delta, budget)(state0)
        taken, eps, order = int(taken), float(eps), float(order)
    assert bool(stopped) and 10 < taken < 600
    ref, ref_order = conversions.epsilon(q, sigma, taken, delta, orders=INT_ORDERS)
    assert rel(eps, float(ref)) < 1e-12 and order == float(ref_order)
    acc = dpa.rdp.RdpAccountant(list(INT_ORDERS))
    acc.compose(dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(sigma)), taken)
    assert rel(eps, acc.get_epsilon(delta)) < 1e-9


def test_float32_accumulation_is_compensated():
    """10⁵ small float32 increments: naive summation drifts by ~1e-4 relative; the state's
    double-word sum stays within a few ulps of the exact total (and above it)."""
    orders = np.array([2.0, 8.0, 32.0])
    rho = 3.3e-7
    n = 100_000

    @jax.jit
    def run(state):
        body = lambda s, _: (accountant.compose_zcdp(s, rho), None)  # noqa: E731
        return jax.lax.scan(body, state, None, length=n)[0]

    state = run(accountant.init(orders, dtype=jnp.float32))
    total = np.asarray(state.rdp, np.float64) + np.asarray(state.residual, np.float64)
    exact = n * np.float64(rho) * orders
    assert np.all(total >= exact)
    assert np.all(total <= exact * (1 + 1e-6))
    increment32 = jnp.asarray(np.float32(rho) * orders.astype(np.float32))
    naive_body = lambda a, _: (a + increment32, None)  # noqa: E731
    naive_sum = jax.jit(lambda x: jax.lax.scan(naive_body, x, None, length=n)[0])(
        jnp.zeros(3, jnp.float32)
    )
    assert np.max(np.abs(np.asarray(naive_sum, np.float64) / exact - 1)) > 1e-5  # the problem fixed


def test_compensation_survives_a_constant_state_under_jit():
    # A state captured by a jitted function is a compile-time constant; XLA would turn
    # TwoSum's (s − state) into the increment and lose the error term without the barrier.
    state = accountant.compose_zcdp(accountant.init(np.array([2.0, 8.0]), dtype=jnp.float32), 0.25)
    out = jax.jit(lambda rho: accountant.compose_zcdp(state, rho))(jnp.float32(1e-9))
    total = np.asarray(out.rdp, np.float64) + np.asarray(out.residual, np.float64)
    exact = np.asarray(state.rdp, np.float64) + np.float64(np.float32(1e-9)) * np.array([2.0, 8.0])
    assert np.all(np.asarray(out.residual) != 0)
    np.testing.assert_allclose(total, exact, rtol=1e-12)


def test_pure_functions_match_conversions_float64():
    with jax.enable_x64(True):
        state = accountant.init(INT_ORDERS, dtype=jnp.float64)
        state = accountant.compose(state, 0.01, 1.1, steps=500)
        state = accountant.compose_gaussian(state, 20.0, steps=3)
        state = accountant.compose_zcdp(state, 0.002, xi=0.01)
    expected = (
        500 * np.asarray(jaxrdp.rdp(0.01, 1.1, INT_ORDERS))
        + 3 * INT_ORDERS / (2 * 20.0**2)
        + (0.01 + 0.002 * INT_ORDERS)
    )
    total = np.asarray(state.rdp) + np.asarray(state.residual)
    np.testing.assert_allclose(total, expected, rtol=1e-13)
    eps, order = accountant.get_epsilon(state, 1e-5)
    ref_eps, ref_order = conversions.epsilon_from_rdp(expected, INT_ORDERS, 1e-5)
    assert rel(float(eps), float(ref_eps)) < 1e-13 and float(order) == float(ref_order)
    dlt, _ = accountant.get_delta(state, float(eps))
    assert float(dlt) <= 1e-5 * (1 + 1e-12)
    # Steps = 0 is a no-op even with σ = 0 (infinite RDP per step).
    same = accountant.compose(state, 0.5, 0.0, steps=0)
    np.testing.assert_array_equal(np.asarray(same.rdp), np.asarray(state.rdp))


def test_heterogeneous_composition_equals_sum_of_separate_compositions():
    qs = np.array([0.01, 0.02, 0.004])
    sigmas = np.array([1.0, 1.4, 0.9])
    steps = np.array([300, 120, 1000])
    curve = np.asarray(conversions.compose_rdp(qs, sigmas, steps, orders=INT_ORDERS))
    acc = accountant.RdpAccountant(INT_ORDERS)
    for q, s, n in zip(qs, sigmas, steps):
        acc.compose_sgm(q, s, int(n))
    np.testing.assert_allclose(acc.rdp, curve, rtol=1e-14)
    eps_curve, _ = conversions.epsilon_from_rdp(curve, INT_ORDERS, 1e-5)
    assert rel(acc.get_epsilon(1e-5), float(eps_curve)) < 1e-14
    # And both match dp_accounting (integer orders, exact region).
    ref = dpa.rdp.RdpAccountant(list(INT_ORDERS))
    for q, s, n in zip(qs, sigmas, steps):
        ref.compose(dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(s)), int(n))
    assert rel(float(eps_curve), ref.get_epsilon(1e-5)) < 1e-9


def _event():
    sgm = dpa.PoissonSampledDpEvent(0.01, dpa.GaussianDpEvent(1.1))
    composed_gaussians = dpa.ComposedDpEvent([dpa.GaussianDpEvent(2.0), dpa.GaussianDpEvent(3.0)])
    return dpa.ComposedDpEvent(
        [
            dpa.SelfComposedDpEvent(sgm, 100),
            dpa.GaussianDpEvent(10.0),
            dpa.ZCDpEvent(0.01, 0.001),
            dpa.PoissonSampledDpEvent(0.1, composed_gaussians),
            dpa.NoOpDpEvent(),
        ]
    )


def test_dp_event_parity_with_dp_accounting():
    event = _event()
    ours = accountant.RdpAccountant(INT_ORDERS).compose(event, 3)
    ref = dpa.rdp.RdpAccountant(list(INT_ORDERS))
    ref.compose(event, 3)
    np.testing.assert_allclose(ours.rdp, ref._rdp, rtol=1e-9)
    for delta in (1e-10, 1e-5):
        assert rel(ours.get_epsilon(delta), ref.get_epsilon(delta)) < 1e-9
        eps, order = ours.get_epsilon_and_optimal_order(delta)
        ref_eps, ref_order = ref.get_epsilon_and_optimal_order(delta)
        assert order == ref_order
    for eps in (0.5, 2.0):
        assert rel(ours.get_delta(eps), ref.get_delta(eps)) < 1e-9
    # count as keyword, and self-composition, give the same curve.
    again = accountant.RdpAccountant(INT_ORDERS).compose(dpa.SelfComposedDpEvent(event, 3))
    np.testing.assert_allclose(again.rdp, ours.rdp, rtol=1e-13)
    kw = accountant.RdpAccountant(INT_ORDERS).compose(event, count=3)
    np.testing.assert_allclose(kw.rdp, ours.rdp, rtol=1e-13)


def test_non_private_and_unsupported_events():
    acc = accountant.RdpAccountant(INT_ORDERS)
    acc.compose(dpa.NonPrivateDpEvent())
    assert acc.get_epsilon(1e-5) == math.inf
    acc = accountant.RdpAccountant(INT_ORDERS).compose_sgm(0.01, 1.0, 10)
    before = acc.rdp
    for bad in (
        dpa.LaplaceDpEvent(1.0),
        dpa.PoissonSampledDpEvent(0.1, dpa.LaplaceDpEvent(1.0)),
        dpa.ComposedDpEvent([dpa.GaussianDpEvent(1.0), dpa.LaplaceDpEvent(1.0)]),
    ):
        with pytest.raises(TypeError, match="LaplaceDpEvent"):
            acc.compose(bad)
        assert not acc.supports(bad)
        np.testing.assert_array_equal(acc.rdp, before)  # nothing was composed
    assert acc.supports(_event())
    with pytest.raises(TypeError, match="str"):
        acc.compose("gaussian")
    with pytest.raises(ValueError, match="count"):
        acc.compose(dpa.GaussianDpEvent(1.0), -1)
    with pytest.raises(ValueError, match="count"):
        acc.compose(dpa.GaussianDpEvent(1.0), 1.5)
    with pytest.raises(ValueError, match="noise_multiplier"):
        acc.compose(dpa.GaussianDpEvent(-1.0))
    with pytest.raises(ValueError, match="rho"):
        acc.compose(dpa.ZCDpEvent(-0.1))


def test_bad_inputs_raise_naming_the_argument():
    state = accountant.init(INT_ORDERS)
    with pytest.raises(ValueError, match="q"):
        accountant.compose(state, 1.5, 1.0)
    with pytest.raises(ValueError, match="sigma"):
        accountant.compose(state, 0.1, -1.0)
    with pytest.raises(ValueError, match="steps"):
        accountant.compose(state, 0.1, 1.0, steps=2.5)
    with pytest.raises(ValueError, match="steps"):
        accountant.compose(state, 0.1, 1.0, steps=-1)
    with pytest.raises(ValueError, match="rho"):
        accountant.compose_zcdp(state, -1.0)
    with pytest.raises(ValueError, match="xi"):
        accountant.compose_zcdp(state, 1.0, xi=-0.5)
    with pytest.raises(ValueError, match="delta"):
        accountant.get_epsilon(state, 1.5)
    with pytest.raises(ValueError, match="epsilon"):
        accountant.get_delta(state, -1.0)
    with pytest.raises(ValueError, match="orders"):
        accountant.init([0.5, 2.0])
    with pytest.raises(TypeError, match="sigma"):
        accountant.RdpAccountant(INT_ORDERS).compose(0.1)  # sigma missing


def test_traced_invalid_inputs_give_nan():
    @jax.jit
    def f(q, rho):
        state = accountant.init(INT_ORDERS)
        state = accountant.compose(state, q, 1.0, steps=10)
        state = accountant.compose_zcdp(state, rho)
        return accountant.get_epsilon(state, 1e-5)[0]

    assert np.isfinite(float(f(0.01, 0.0)))
    assert np.isnan(float(f(1.5, 0.0)))
    assert np.isnan(float(f(0.01, -1.0)))


def test_zcdp_and_gaussian_closed_forms():
    acc = accountant.RdpAccountant(INT_ORDERS)
    acc.compose(dpa.ZCDpEvent(0.05, 0.1), 2)
    np.testing.assert_allclose(acc.rdp, 2 * (0.1 + 0.05 * INT_ORDERS), rtol=1e-14)
    acc = accountant.RdpAccountant(INT_ORDERS).compose(dpa.GaussianDpEvent(4.0), 5)
    np.testing.assert_allclose(acc.rdp, 5 * INT_ORDERS / 32.0, rtol=1e-13)
    # ε of the Gaussian by hand: min_α 5α/32 + log1p(−1/α) − log(δα)/(α−1).
    delta = 1e-6
    by_hand = min(
        5 * a / 32 + math.log1p(-1 / a) - math.log(delta * a) / (a - 1) for a in INT_ORDERS
    )
    assert rel(acc.get_epsilon(delta), by_hand) < 1e-13


def test_state_orders_are_static_so_jit_takes_the_fast_path():
    seen = []

    def step(state, q, sigma):
        seen.append(type(state.orders))
        return accountant.compose(state, q, sigma)

    with jax.enable_x64(True):
        state = accountant.init(dtype=jnp.float64)
        assert len(jax.tree_util.tree_leaves(state)) == 2  # rdp and residual only
        jitted = jax.jit(step)(state, 0.01, 1.1)
        eager = accountant.compose(state, 0.01, 1.1)
        q = jnp.full(state.orders.shape, 0.01)
        elementwise = kernels.rdp(q, jnp.full_like(q, 1.1), jnp.asarray(state.orders))
    assert seen == [np.ndarray]
    np.testing.assert_array_equal(jitted.orders, kernels.DEFAULT_ORDERS)
    # Fast and elementwise paths differ by ~1e-14; jit reproduces the eager fast path.
    np.testing.assert_allclose(jitted.rdp, eager.rdp, rtol=1e-15, atol=0)
    assert np.max(np.abs(np.asarray(elementwise) / np.asarray(eager.rdp) - 1)) > 1e-15
    np.testing.assert_allclose(elementwise, eager.rdp, rtol=1e-12)
