"""Tests of the generic batched root finder (jaxrdp._solver) and of plugging a new ε
function into the calibrators of jaxrdp.sweep.

References: closed-form roots of toy monotone functions, and the RDP calibrators with
all their model hints (the plug-in path must reach the same root with ε alone).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrdp import _models, _solver, sweep
from jaxrdp.sweep import Status


def _toy_gaussian_epsilon(sigma, steps, delta):
    """A toy monotone ε: the Gaussian mechanism's zCDP bound, ε = ρ + 2√(ρ log 1/δ),
    ρ = steps / (2σ²); decreasing in σ, increasing in steps."""
    rho = steps / (2.0 * sigma * sigma)
    return rho + 2.0 * jnp.sqrt(rho * jnp.log(1.0 / delta))


def _toy_sigma_star(target, steps, delta):
    """Its root in closed form: √ρ* = √(L + ε) − √L, L = log 1/δ."""
    log_inv = np.log(1.0 / delta)
    sqrt_rho = np.sqrt(log_inv + target) - np.sqrt(log_inv)
    return np.sqrt(steps / 2.0) / sqrt_rho


def test_toy_epsilon_calibrated_by_its_callable_and_domain():
    """Only the ε callable and the domain are written: σ* of 40 targets matches the
    closed form to the requested tolerance, and the returned end is feasible."""
    rng = np.random.default_rng(3)
    n = 40
    target = 10 ** rng.uniform(-1, 1, n)
    steps = np.round(10 ** rng.uniform(0, 4, n))
    delta = 10 ** rng.uniform(-9, -3, n)
    rtol = 1e-9
    with jax.enable_x64(True):
        root = jax.jit(
            lambda t, s, d: _solver.find_root(
                lambda x, a: _toy_gaussian_epsilon(x, a[1], a[2]) - a[0],
                _solver.Domain(jnp.full_like(t, 1e-3), jnp.full_like(t, 1e6)),
                jnp.ones_like(t),
                tol=rtol,
                args=(t, s, d),
            )
        )(target, steps, delta)
        eps_at = np.asarray(_toy_gaussian_epsilon(root.x, steps, delta))
    exact = _toy_sigma_star(target, steps, delta)
    assert np.all(np.asarray(root.status) == _solver.SolverStatus.CONVERGED)
    assert np.all(eps_at <= target)  # the returned end was evaluated feasible
    x = np.asarray(root.x)
    assert np.all(x >= exact * (1 - 1e-14))  # feasible side of the true root
    assert np.max(x / exact - 1) < 1.5 * rtol
    print(f"\nmean evaluations (secant): {np.mean(np.asarray(root.evaluations)):.1f}")


def test_log_secant_proposer_reaches_the_same_roots_in_fewer_evaluations():
    """The profile's proposer (secant on log ε): the closed-form roots of the toy ε to the
    tolerance, from the same start, in fewer evaluations than the plain secant on ε − target
    (the toy ε is a power law in σ up to the √ρ term)."""
    rng = np.random.default_rng(4)
    n = 40
    target = 10 ** rng.uniform(-1, 1, n)
    steps = np.round(10 ** rng.uniform(0, 4, n))
    delta = 10 ** rng.uniform(-9, -3, n)
    exact = _toy_sigma_star(target, steps, delta)
    rtol = 1e-9

    def solve(proposer):
        args = _models.SearchArgs((jnp.asarray(steps),), jnp.asarray(target), jnp.asarray(delta),
                                  None)
        return _solver.find_root(
            lambda x, a: (_toy_gaussian_epsilon(x, a.extra[0], a.delta) - a.target, None),
            _solver.Domain(jnp.full(n, 1e-3), jnp.full(n, 1e6)),
            jnp.asarray(0.9 * exact),  # a start near the root, as the calibrators give
            tol=rtol, args=args, proposer=proposer)

    with jax.enable_x64(True):
        logs, plain = solve(_models.log_secant()), solve(None)
    for root in (logs, plain):
        x = np.asarray(root.x)
        assert np.all(np.asarray(root.status) == _solver.SolverStatus.CONVERGED)
        assert np.all(x >= exact * (1 - 1e-14)) and np.max(x / exact - 1) < 1.5 * rtol
    mean_logs, mean_plain = (float(np.mean(np.asarray(r.evaluations))) for r in (logs, plain))
    print(f"\nmean evaluations: log-secant {mean_logs:.1f}, secant {mean_plain:.1f}")
    assert mean_logs < mean_plain


def test_feasibility_mask_integer_domain_and_ends():
    """A bare feasibility mask (bisection) on an integer domain: the largest n with
    n² ≤ c; lanes whose whole domain is (in)feasible are reported as such."""
    c = np.array([0.5, 2.0, 10.0, 99.0, 100.0, 1e6, 5e12])
    with jax.enable_x64(True):
        root = _solver.find_root(
            lambda x, a: x * x <= a,
            _solver.Domain(jnp.ones(7), jnp.full(7, 1e6), feasible_above=False,
                           log_scale=False, integer=True),
            jnp.full(7, 3.0),
            tol=0.0,
            args=jnp.asarray(c),
        )
    status = np.asarray(root.status)
    n = np.floor(np.asarray(root.x))
    S = _solver.SolverStatus
    assert status[0] == S.NONE_FEASIBLE and not root.found[0]
    assert status[-1] == S.ALL_FEASIBLE and n[-1] == 1e6
    np.testing.assert_array_equal(status[1:-1], S.CONVERGED)
    np.testing.assert_array_equal(n[1:-1], np.floor(np.sqrt(c[1:-1] + 1e-9)))


def test_inactive_lanes_are_left_alone():
    with jax.enable_x64(True):
        root = _solver.find_root(
            lambda x, a: x - 2.0,
            _solver.Domain(jnp.full(3, 0.1), jnp.full(3, 10.0), feasible_above=False),
            jnp.ones(3),
            tol=1e-10,
            active=jnp.array([True, False, True]),
        )
    np.testing.assert_array_equal(np.asarray(root.evaluations)[1], 0)
    assert int(root.status[1]) == _solver.SolverStatus.INACTIVE
    np.testing.assert_allclose(np.asarray(root.x)[[0, 2]], 2.0, rtol=1e-9)


ORDERS = np.array(list(range(2, 33)) + [64, 128, 256], dtype=np.float64)


@pytest.fixture
def epsilon_only(monkeypatch):
    """The RDP accountant's ε registered under a second name with no hints at all:
    what a new accountant (e.g. a privacy profile) plugs in."""

    def factory(cfg):
        return _models.EpsilonModel(epsilon=_models.rdp_model(cfg.orders, cfg.method).epsilon)

    monkeypatch.setitem(sweep._ACCOUNTANTS, "plain", factory)
    return "plain"


@pytest.mark.slow
def test_a_new_epsilon_function_plugs_into_every_calibrator(epsilon_only):
    """With the ε callable alone (generic start, secant steps, a search for T), the four
    calibrators return what the RDP model with all its hints returns: the same tight,
    conservative answers (σ and q to their rtol, T and B exactly)."""
    rng = np.random.default_rng(11)
    n = 8
    eps, delta = 10 ** rng.uniform(-0.3, 1, n), 10 ** rng.uniform(-7, -4, n)
    q, steps = 10 ** rng.uniform(-3, -1, n), np.round(10 ** rng.uniform(1, 4, n))
    sigma = rng.uniform(0.7, 3.0, n)
    kw = dict(orders=ORDERS)
    for fn, args, rtol in [
        (sweep.noise_multiplier, (eps, delta, q, steps), 2e-6),
        (sweep.sampling_rate, (eps, delta, sigma, steps), 2e-6),
        (sweep.max_steps, (eps, delta, q, sigma), 0.0),
        (sweep.batch_size, (eps, delta, sigma, 2.0, 5000), 0.0),
    ]:
        hinted = fn(*args, **kw)
        plain = fn(*args, accountant=epsilon_only, **kw)
        status = np.asarray(hinted.status)
        assert np.all((status == Status.OK) | (status == Status.INFEASIBLE)), fn.__name__
        assert np.sum(status == Status.OK) >= n // 2, fn.__name__
        np.testing.assert_array_equal(np.asarray(plain.status), status, err_msg=fn.__name__)
        np.testing.assert_allclose(np.asarray(plain.value), np.asarray(hinted.value), rtol=rtol,
                                   atol=0, err_msg=fn.__name__)


def test_unknown_accountant_is_named():
    with pytest.raises(ValueError, match="accountant=.nope."):
        sweep.noise_multiplier(1.0, 1e-5, 0.01, 100, accountant="nope")


def test_refine_on_host_closes_in_on_the_boundary_from_feasible_starts():
    """The host refinement: from feasible but conservative starts, the closed-form roots
    (continuous, σ-like and q-like) and the largest integer n with n² ≤ c, every returned
    point feasible; a start with no slack is returned as it is, unevaluated beyond it."""
    rng = np.random.default_rng(5)
    n = 30
    target = 10 ** rng.uniform(-1, 1, n)
    steps = np.round(10 ** rng.uniform(0, 4, n))
    delta = 10 ** rng.uniform(-9, -3, n)
    exact = _toy_sigma_star(target, steps, delta)
    calls = []

    def value(idx, x):  # log(ε/target); ε decreasing in σ
        calls.append(idx.size)
        with jax.enable_x64(True):
            eps = np.asarray(_toy_gaussian_epsilon(jnp.asarray(x), jnp.asarray(steps[idx]),
                                                   jnp.asarray(delta[idx])))
        return np.log(eps / target[idx])

    start = exact * 10 ** rng.uniform(0.01, 1.0, n)  # 2% to 10× too much noise
    rtol = 1e-7
    out = _solver.refine_on_host(value, start, 1e-3, 1e6, feasible_above=True,
                                 first_slope=-1.0, rtol=rtol)
    assert np.all(out.converged)
    assert np.all(out.x >= exact * (1 - 1e-12)) and np.max(out.x / exact - 1) < 2 * rtol
    print(f"\nrefinement: {out.evaluations} batched evaluations")
    assert out.evaluations <= 12

    # q-like (feasible below, ε ∝ q²): the root of (x/r)² = 1, from below
    r = 10 ** rng.uniform(-6, -1, n)
    out = _solver.refine_on_host(lambda idx, x: 2.0 * np.log(x / r[idx]), r * 0.3, 1e-12, 1.0,
                                 feasible_above=False, first_slope=1.0, rtol=rtol)
    assert np.all(out.converged) and np.all(out.x <= r) and np.max(1 - out.x / r) < 2 * rtol

    # integers: largest m with m² ≤ c (feasible below), from m = 1
    c = np.array([2.0, 10.0, 99.0, 100.0, 12345.0, 5e8])
    out = _solver.refine_on_host(lambda idx, x: np.log(x * x / c[idx]), np.ones(6), 1.0, 2.0**52,
                                 feasible_above=False, integer=True, first_slope=0.5, rtol=0.0)
    np.testing.assert_array_equal(out.x, np.floor(np.sqrt(c + 1e-9)))
    assert np.all(out.converged)

    # no slack: the start is returned after its one evaluation
    calls.clear()
    out = _solver.refine_on_host(value, exact * (1 - 1e-13), 1e-3, 1e6, feasible_above=True,
                                 first_slope=-1.0, rtol=rtol)
    np.testing.assert_array_equal(out.x, exact * (1 - 1e-13))
    assert calls == [n] and out.evaluations == 1
