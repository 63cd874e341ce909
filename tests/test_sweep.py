"""Tests of jaxrdp.sweep: batched calibration of σ, T, q and B, and ε grids.

References independent of the solvers: dp_accounting's ``calibrate_dp_mechanism`` (one
brentq search per target around its RdpAccountant, exact for integer orders) for σ*,
brute force over every candidate for ``max_steps`` and ``batch_size``, the exact ε of
:func:`jaxrdp.conversions.epsilon` for conservativeness and tightness, mpmath (the exact
binomial sum) to decide where dp_accounting and jaxrdp disagree, and finite differences
for derivatives. Shapes are kept few and fixed (batches of 64 or 16 lanes), so that each
solver compiles a couple of times only.
"""

from __future__ import annotations

import logging
import math
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import mpmath as mp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import jaxrdp
from jaxrdp import conversions, sweep
from jaxrdp.sweep import Calibration, CalibrationError, Status

sys.path.insert(0, os.path.dirname(__file__))
from mp_reference import log_a_integer  # noqa: E402
from stored import stored  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::jaxrdp.conversions.OrderAtEdgeWarning")

#: dp_accounting's default orders without the fractional ones: where it is exact.
ORDERS = np.array(list(range(2, 64)) + [128, 256, 512, 1024], dtype=np.float64)
RTOL = 1e-6
MARGIN = 1e-12  # sweep's relative target margin in float64


def eps_of(q, sigma, steps, delta, orders=ORDERS):
    return np.asarray(conversions.epsilon(q, sigma, steps, delta, orders=orders)[0])


def random_targets(n, seed):
    """Realistic DP-SGD targets: ε ∈ [0.3, 10], δ ∈ [1e-8, 1e-4], q ∈ [1e-4, 0.2]."""
    rng = np.random.default_rng(seed)
    eps = 10 ** rng.uniform(math.log10(0.3), 1.0, n)
    delta = 10 ** rng.uniform(-8, -4, n)
    q = 10 ** rng.uniform(-4, math.log10(0.2), n)
    steps = np.round(10 ** rng.uniform(1, 5, n))
    return eps, delta, q, steps


@pytest.fixture(scope="module")
def calibrated():
    """σ* for 64 random targets (compiled once for the module)."""
    eps, delta, q, steps = random_targets(64, seed=0)
    result = sweep.noise_multiplier(eps, delta, q, steps, orders=ORDERS, rtol=RTOL)
    return (eps, delta, q, steps), result


# ----------------------------------------------------------------- noise multiplier


def test_noise_multiplier_conservative_and_tight(calibrated):
    (eps, delta, q, steps), result = calibrated
    assert np.all(np.asarray(result.status) == Status.OK)
    sigma = np.asarray(result.value)
    assert np.all(eps_of(q, sigma, steps, delta) <= eps)
    assert np.all(eps_of(q, sigma * (1 - RTOL), steps, delta) > eps * (1 - MARGIN))


def test_noise_multiplier_against_mpmath(calibrated):
    """The definition at high precision (mpmath binomial sums) on a few targets: ε(σ*)
    is within the target and ε(σ*·(1 − rtol)) is not."""
    (eps, delta, q, steps), result = calibrated
    sigma = np.asarray(result.value)
    orders = [int(a) for a in ORDERS]
    for i in range(3):
        at = _mp_epsilon(q[i], sigma[i], steps[i], delta[i], orders)
        below = _mp_epsilon(q[i], sigma[i] * (1 - RTOL), steps[i], delta[i], orders)
        assert at <= eps[i] < below, (i, at, eps[i], below)


def _mp_epsilon(q, sigma, steps, delta, orders):
    """Exact ε (improved conversion with the KL shortcut) from the mpmath binomial sum."""
    best = mp.inf
    with mp.workdps(40):
        for a in orders:
            a = int(a)
            r = steps * log_a_integer(q, sigma, a) / (a - 1)
            if delta**2 + float(mp.expm1(-r)) > 0:
                return 0.0
            e = r + mp.log1p(mp.mpf(-1) / a) - mp.log(mp.mpf(delta) * a) / (a - 1)
            best = min(best, e)
    return float(max(best, 0))


def _dp_accounting_version():
    from importlib import metadata

    try:
        return metadata.version("dp-accounting")
    except metadata.PackageNotFoundError:  # not installed: the test that uses it skips
        return ""


@stored(tag=_dp_accounting_version())
def _dp_accounting_sigma(target, delta, q, steps, orders):
    """σ* of dp_accounting's ``calibrate_dp_mechanism`` with its RDP accountant on
    ``orders``, bisected to 1e-10 absolute (kept per dp_accounting version)."""
    import dp_accounting as dpa
    from dp_accounting import mechanism_calibration

    logging.getLogger("absl").setLevel(logging.ERROR)
    return mechanism_calibration.calibrate_dp_mechanism(
        lambda: dpa.rdp.RdpAccountant(list(orders)),
        lambda s: dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(s)),
                                          steps),
        target, delta, tol=1e-10)


def test_noise_multiplier_matches_dp_accounting(calibrated):
    """50 random targets: σ* equals dp_accounting's calibration with the same integer
    orders to within the solver's tolerance."""
    pytest.importorskip("dp_accounting")
    (eps, delta, q, steps), result = calibrated
    ours = np.asarray(result.value)
    orders = [int(a) for a in ORDERS]
    theirs = np.array([float(_dp_accounting_sigma(float(eps[i]), float(delta[i]), float(q[i]),
                                                  int(steps[i]), orders)) for i in range(50)])
    rel = np.abs(ours[:50] - theirs) / theirs
    print(f"\nmax relative difference of sigma* vs dp_accounting: {rel.max():.2e}")
    # Both sit within their tolerance above the same root: ours within rtol = 1e-6
    # (measured: 6.3e-7 at most), dp_accounting's within 1e-10 absolute.
    assert rel.max() < 2 * RTOL


def test_noise_multiplier_special_values():
    values = [
        # target, delta, q, steps -> value, status
        (1.0, 1e-5, 0.0, 100, 0.0, Status.OK),  # nothing sampled
        (1.0, 1e-5, 0.01, 0, 0.0, Status.OK),  # no step
        (1.0, 1.0, 0.01, 100, 0.0, Status.OK),  # δ = 1 holds for anything
        (np.inf, 1e-5, 0.01, 100, 0.0, Status.OK),
        (1.0, 0.0, 0.01, 100, np.inf, Status.INFEASIBLE),  # δ = 0: no σ < ∞ works
        (1e-6, 1e-10, 1.0, 1e6, np.inf, Status.INFEASIBLE),  # σ* beyond SIGMA_RANGE
        (1e7, 1e-5, 0.5, 1, sweep.SIGMA_RANGE[0], Status.AT_LIMIT),  # σ* below the range
    ]
    eps, delta, q, steps, value, status = (np.array(v) for v in zip(*values))
    result = sweep.noise_multiplier(eps, delta, q, steps, orders=ORDERS)
    np.testing.assert_array_equal(np.asarray(result.status), status)
    np.testing.assert_array_equal(np.asarray(result.value), value)


def test_noise_multiplier_zero_epsilon_uses_the_kl_shortcut():
    result = sweep.noise_multiplier(0.0, 1e-3, 0.01, 100, orders=ORDERS)
    sigma = float(result.value)
    assert int(result.status) == Status.OK and np.isfinite(sigma)
    assert eps_of(0.01, sigma, 100, 1e-3) == 0.0
    assert eps_of(0.01, sigma * (1 - RTOL), 100, 1e-3) > 0.0


def test_traced_invalid_input_gives_nan_and_status():
    with jax.enable_x64(True):
        fn = jax.jit(lambda e, d: sweep.noise_multiplier(e, d, 0.01, 100.0, orders=ORDERS))
        result = fn(jnp.array([1.0, -1.0, 1.0, jnp.nan]), jnp.array([1e-5, 1e-5, 2.0, 1e-5]))
    value, status = np.asarray(result.value), np.asarray(result.status)
    assert status[0] == Status.OK and np.isfinite(value[0])
    assert np.all(status[1:] == Status.INVALID) and np.all(np.isnan(value[1:]))


def test_eager_errors_name_the_argument():
    with pytest.raises(ValueError, match="target_epsilon"):
        sweep.noise_multiplier(-1.0, 1e-5, 0.01, 100)
    with pytest.raises(ValueError, match="target_delta"):
        sweep.noise_multiplier(1.0, 1.5, 0.01, 100)
    with pytest.raises(ValueError, match="steps=100.5"):
        sweep.noise_multiplier(1.0, 1e-5, 0.01, 100.5)
    with pytest.raises(ValueError, match="noise_multiplier"):
        sweep.max_steps(1.0, 1e-5, 0.01, -2.0)
    with pytest.raises(ValueError, match="dataset_size"):
        sweep.batch_size(1.0, 1e-5, 1.0, 1.0, 10.5)
    with pytest.raises(ValueError, match="epochs"):
        sweep.batch_size(1.0, 1e-5, 1.0, 0.0, 100)
    with pytest.raises(ValueError, match="rtol"):
        sweep.noise_multiplier(1.0, 1e-5, 0.01, 100, rtol=0.0)
    with pytest.raises(ValueError, match="method"):
        sweep.noise_multiplier(1.0, 1e-5, 0.01, 100, method="tight")
    with pytest.raises(ValueError, match="broadcast"):
        sweep.noise_multiplier([1.0, 2.0], 1e-5, [0.1, 0.2, 0.3], 100)


def test_unwrap_raises_and_returns_python_values():
    assert isinstance(sweep.noise_multiplier(1.0, 1e-5, 0.01, 100, orders=ORDERS).unwrap(), float)
    with pytest.raises(CalibrationError, match="INFEASIBLE"):
        sweep.noise_multiplier(1.0, 0.0, 0.01, 100, orders=ORDERS).unwrap()
    with pytest.raises(CalibrationError, match=r"index \(1,\)"):
        Calibration(np.array([1.0, np.nan]), np.array([0, 2], np.int32)).unwrap()
    with pytest.warns(UserWarning, match="edge of the search"):
        value = Calibration(np.array(1e-3), np.array(Status.AT_LIMIT, np.int32)).unwrap()
    assert value == 1e-3


# ----------------------------------------------------------------- derivatives


def test_grad_of_epsilon_matches_finite_differences():
    """jax.grad through conversions.epsilon and the fast-path kernel, w.r.t. σ and q."""
    with jax.enable_x64(True):

        def eps(sigma, q):
            return conversions.epsilon(q, sigma, 1000.0, 1e-5, orders=ORDERS)[0]

        sigma, q = jnp.array(1.3), jnp.array(0.01)
        g_sigma, g_q = jax.grad(eps, argnums=(0, 1))(sigma, q)
        h = 1e-6
        fd_sigma = (eps(sigma * (1 + h), q) - eps(sigma * (1 - h), q)) / (2 * h * sigma)
        fd_q = (eps(sigma, q * (1 + h)) - eps(sigma, q * (1 - h))) / (2 * h * q)
    np.testing.assert_allclose(g_sigma, fd_sigma, rtol=1e-6)
    np.testing.assert_allclose(g_q, fd_q, rtol=1e-6)
    assert float(g_sigma) < 0 < float(g_q)


@pytest.mark.slow
def test_implicit_derivative_of_sigma_star():
    """dσ*/d(ε, δ, q) by the implicit function theorem, against central differences of
    tightly solved σ*, also under jit and vmap."""
    with jax.enable_x64(True):

        def sigma_star(e, d, q):
            return sweep.noise_multiplier(e, d, q, 1000.0, orders=ORDERS, rtol=1e-11).value

        args = (jnp.array(1.0), jnp.array(1e-5), jnp.array(0.01))
        grads = jax.jit(jax.grad(sigma_star, argnums=(0, 1, 2)))(*args)
        h = 1e-5
        for i in range(3):
            up = list(args)
            down = list(args)
            up[i], down[i] = args[i] * (1 + h), args[i] * (1 - h)
            fd = (sigma_star(*up) - sigma_star(*down)) / (2 * h * args[i])
            np.testing.assert_allclose(grads[i], fd, rtol=1e-4)
        per_target = jax.vmap(jax.grad(lambda e: sigma_star(e, 1e-5, 0.01)))(
            jnp.array([0.5, 1.0, 2.0, 4.0])
        )
    assert np.all(np.asarray(per_target) < 0)
    np.testing.assert_allclose(per_target[1], grads[0], rtol=1e-9)


# ----------------------------------------------------------------- max steps


def test_max_steps_agrees_with_brute_force():
    """T* equals the largest T in 1..4000 whose exact ε is within the target."""
    rng = np.random.default_rng(1)
    n = 64
    eps = 10 ** rng.uniform(-0.5, 1.0, n)
    delta = 10 ** rng.uniform(-8, -4, n)
    q = 10 ** rng.uniform(-2, math.log10(0.3), n)
    sigma = rng.uniform(0.5, 3.0, n)
    result = sweep.max_steps(eps, delta, q, sigma, orders=ORDERS)
    t_star = np.asarray(result.value)

    per_step = np.asarray(jaxrdp.rdp(q[:, None], sigma[:, None], ORDERS))
    all_steps = np.arange(1, 4001, dtype=np.float64)
    total = per_step[:, None, :] * all_steps[None, :, None]
    eps_all = np.asarray(conversions.epsilon_from_rdp(total, ORDERS, delta[:, None])[0])
    fits = eps_all <= eps[:, None] * (1 - MARGIN)
    brute = np.where(fits.any(axis=1), all_steps.size - np.argmax(fits[:, ::-1], axis=1), 0)
    inside = t_star < all_steps[-1]
    assert inside.sum() > n // 2  # most cases are decided within the scanned range
    np.testing.assert_array_equal(t_star[inside], brute[inside])
    assert np.all(brute[~inside] == all_steps[-1])
    status = np.asarray(result.status)
    np.testing.assert_array_equal(status, np.where(t_star == 0, Status.INFEASIBLE, Status.OK))


def test_max_steps_special_values():
    result = sweep.max_steps(
        [1.0, 1.0, 1.0, 1.0, 1e-3], [1e-5, 1e-5, 0.0, 1e-5, 1e-5], [0.0, 0.01, 0.01, 0.01, 1.0],
        [1.0, np.inf, 1.0, 0.0, 0.5], orders=ORDERS,
    )
    np.testing.assert_array_equal(np.asarray(result.value), [np.inf, np.inf, 0.0, 0.0, 0.0])
    np.testing.assert_array_equal(np.asarray(result.status), [0, 0, 1, 1, 1])


# ----------------------------------------------------------------- sampling rate


def test_sampling_rate_conservative_and_tight():
    eps, delta, _, steps = random_targets(64, seed=2)
    sigma = np.random.default_rng(2).uniform(0.5, 5.0, 64)
    result = sweep.sampling_rate(eps, delta, sigma, steps, orders=ORDERS, rtol=RTOL)
    q = np.asarray(result.value)
    assert np.all(np.asarray(result.status) == Status.OK)
    assert np.all(eps_of(q, sigma, steps, delta) <= eps)
    above = np.minimum(q * (1 + RTOL), 1.0)
    assert np.all((eps_of(above, sigma, steps, delta) > eps * (1 - MARGIN)) | (q == 1.0))
    assert np.any(q == 1.0) and np.any(q < 0.01)


# ----------------------------------------------------------------- batch size


def _brute_force_batch(eps, delta, sigma, epochs, n_data):
    """Largest B in 1..N with exact ε within the target; also whether ε(B) was monotone."""
    batch = np.arange(1, n_data + 1, dtype=np.float64)
    steps = np.ceil(epochs * n_data / batch)
    e = eps_of(batch / n_data, sigma, steps, delta)
    fits = np.flatnonzero(e <= eps * (1 - MARGIN))
    return (batch[fits[-1]] if fits.size else 0.0), bool(np.all(np.diff(e) >= 0))


def test_batch_size_agrees_with_brute_force():
    """B* equals a scan of every batch size, including cases where ε(B) is not monotone
    (few steps: rounding T = ⌈epochs·N/B⌉ up makes ε jump down as B grows). This also
    verifies the assumption of :func:`sweep.batch_size` on these cases."""
    rng = np.random.default_rng(3)
    n = 16
    eps = 10 ** rng.uniform(-0.5, 1.0, n)
    delta = 10 ** rng.uniform(-7, -4, n)
    sigma = rng.uniform(0.6, 4.0, n)
    epochs = np.concatenate([rng.uniform(0.5, 3.0, n // 2), rng.uniform(3.0, 50.0, n // 2)])
    n_data = np.where(np.arange(n) % 2 == 0, 1000.0, 1500.0)
    result = sweep.batch_size(eps, delta, sigma, epochs, n_data, orders=ORDERS)
    ours = np.asarray(result.value)
    monotone = []
    for i in range(n):
        brute, mono = _brute_force_batch(eps[i], delta[i], sigma[i], epochs[i], int(n_data[i]))
        monotone.append(mono)
        assert ours[i] == brute, (i, ours[i], brute)
    assert not all(monotone)  # the non-monotone case was exercised
    status = np.asarray(result.status)
    np.testing.assert_array_equal(status, np.where(ours == 0, Status.INFEASIBLE, Status.OK))


def test_batch_size_with_gaps_in_the_feasible_set():
    """Few epochs, small σ and budgets near ε at B = N: the feasible batch sizes often do
    not form an interval (large batches, few large steps, can be cheaper); B* is still
    the largest feasible one."""
    rng = np.random.default_rng(11)
    n = 16
    sigma = rng.uniform(0.5, 1.5, n)
    epochs = np.round(rng.uniform(0.3, 3.0, n), 2)
    delta = 10 ** rng.uniform(-7, -4, n)
    eps = eps_of(1.0, sigma, np.ceil(epochs), delta) * rng.uniform(0.7, 1.3, n)
    result = sweep.batch_size(eps, delta, sigma, epochs, 500, orders=ORDERS)
    ours = np.asarray(result.value)
    gaps = 0
    for i in range(n):
        batch = np.arange(1.0, 501.0)
        fits = eps_of(batch / 500, sigma[i], np.ceil(epochs[i] * 500 / batch), delta[i]) <= (
            eps[i] * (1 - MARGIN)
        )
        brute = batch[fits][-1] if fits.any() else 0.0
        gaps += bool(fits.any() and not fits[: int(brute)].all())
        assert ours[i] == brute, (i, ours[i], brute)
    assert gaps >= n // 4


def test_batch_size_certifies_only_what_its_final_check_confirms(monkeypatch):
    """The certificate of :func:`sweep.batch_size` (B* meets the target and B* + 1 does not,
    both at the exact ⌈E·N/B⌉ steps) on a toy ε = 10·q, whose largest feasible batch size is
    ⌊target·N/10⌋ by brute force. As it is, every answer is that B, OK. Raised by
    10·(⌈T⌉ − T), the ε at the cut's fractional T = E·N/B is no longer a lower bound of the
    exact one: the cuts skip feasible batch sizes, the final check finds B* + 1 feasible in
    every lane, and each B* is reported NOT_CONVERGED, still meeting the target."""
    from jaxrdp import _models

    def toy(raised):
        def epsilon(q, sigma, steps, delta):
            return 10.0 * q + (10.0 * (jnp.ceil(steps) - steps) if raised else 0.0), None
        return lambda cfg: _models.EpsilonModel(epsilon=epsilon)

    monkeypatch.setitem(sweep._ACCOUNTANTS, "toy", toy(False))
    monkeypatch.setitem(sweep._ACCOUNTANTS, "toy_raised", toy(True))
    rng = np.random.default_rng(0)
    n, n_data = 16, 1000
    epochs = rng.choice([1.0, 2.0, 3.0, 7.0], n)
    target = rng.uniform(0.5, 9.5, n)
    batch = np.arange(1.0, n_data + 1.0)
    brute = np.array([batch[10.0 * (batch / n_data) <= t * (1 - MARGIN)].max() for t in target])
    exact = sweep.batch_size(target, 1e-5, 1.0, epochs, n_data, accountant="toy")
    np.testing.assert_array_equal(np.asarray(exact.value), brute)
    np.testing.assert_array_equal(np.asarray(exact.status), Status.OK)
    raised = sweep.batch_size(target, 1e-5, 1.0, epochs, n_data, accountant="toy_raised")
    value = np.asarray(raised.value)
    np.testing.assert_array_equal(np.asarray(raised.status), Status.NOT_CONVERGED)
    assert np.all((value >= 1.0) & (value < brute)), (value, brute)


def test_relaxed_epsilon_is_unimodal_in_batch_size():
    """The assumption behind batch_size: with steps E·N/B not rounded, ε rises with B up
    to a peak and falls after it (the fall only for large q and few epochs)."""
    batch = np.arange(1.0, 2001.0)
    falls = 0
    for sigma in (0.5, 0.7, 1.0, 2.0, 4.0):
        per_step = np.asarray(jaxrdp.rdp(batch[:, None] / 2000.0, sigma, ORDERS))
        for epochs in (0.3, 1.0, 3.0, 30.0):
            relaxed = per_step * (epochs * 2000.0 / batch)[:, None]
            for delta in (1e-4, 1e-7):
                eps = np.asarray(conversions.epsilon_from_rdp(relaxed, ORDERS, delta)[0])
                step = np.diff(eps)
                tiny = 1e-12 * eps[1:]
                peak = np.argmax(eps)
                assert np.all(step[:peak] >= -tiny[:peak]), (sigma, epochs, delta)
                assert np.all(step[peak:] <= tiny[peak:]), (sigma, epochs, delta)
                falls += peak < batch.size - 1
    assert falls > 0


# ----------------------------------------------------------------- monotonicity (properties)


@settings(max_examples=20, deadline=None)
@given(
    eps=st.floats(0.3, 8.0),
    log_delta=st.floats(-9.0, -4.0),
    log_q=st.floats(-3.5, -0.7),
    log_steps=st.floats(1.0, 4.5),
)
def test_sigma_star_monotone(eps, log_delta, log_q, log_steps):
    """σ* is non-increasing in ε and δ and non-decreasing in q and steps (one batch of
    16 lanes per example: four increasing values of each parameter)."""
    grow = np.array([1.0, 1.3, 1.7, 2.2])
    base = np.array([eps, 10**log_delta, 10**log_q, round(10**log_steps)])
    lanes = np.tile(base, (4, 4, 1))  # (parameter, value, argument)
    for p in range(4):
        lanes[p, :, p] = base[p] * grow
    lanes[2, :, 2] = np.minimum(lanes[2, :, 2], 1.0)
    lanes[3, :, 3] = np.round(lanes[3, :, 3])
    result = sweep.noise_multiplier(*np.moveaxis(lanes, -1, 0), orders=ORDERS, rtol=RTOL)
    sigma = np.asarray(result.value)
    assert np.all(np.asarray(result.status) == Status.OK)
    slack = 1 + 2 * RTOL
    assert np.all(sigma[0, 1:] <= sigma[0, :-1] * slack)  # more ε, less noise
    assert np.all(sigma[1, 1:] <= sigma[1, :-1] * slack)  # more δ, less noise
    assert np.all(sigma[2, 1:] * slack >= sigma[2, :-1])  # more q, more noise
    assert np.all(sigma[3, 1:] * slack >= sigma[3, :-1])  # more steps, more noise


# ----------------------------------------------------------------- epsilon grid


def test_epsilon_grid_matches_epsilon_and_chunks(capsys):
    q = np.geomspace(1e-3, 0.2, 7)
    sigma = np.linspace(0.6, 4.0, 5)
    steps = np.array([1.0, 100.0, 5000.0])
    delta = np.array([1e-5, 1e-7])
    grid = sweep.epsilon_grid(q, sigma, steps, delta, orders=ORDERS)
    ref = eps_of(
        q[:, None, None, None], sigma[None, :, None, None], steps[None, None, :, None],
        delta[None, None, None, :],
    )
    assert grid.shape == (7, 5, 3, 2)
    np.testing.assert_allclose(grid, ref, rtol=1e-14, atol=0)  # last-bit vectorisation noise
    chunked = sweep.epsilon_grid(
        q, sigma, steps, delta, orders=ORDERS, cells_per_chunk=8, progress=True
    )
    np.testing.assert_allclose(chunked, grid, rtol=1e-14, atol=0)
    err = capsys.readouterr().err
    assert "epsilon_grid" in err and "5/5 chunks" in err


# ----------------------------------------------------------------- several devices

_MULTI_DEVICE_SCRIPT = textwrap.dedent(
    """
    import sys
    import numpy as np
    import jax
    from jaxrdp import sweep

    assert len(jax.devices()) == 4, jax.devices()
    orders = np.array(list(range(2, 64)) + [128, 256, 512, 1024], dtype=np.float64)
    rng = np.random.default_rng(7)
    eps, delta = 10 ** rng.uniform(-0.3, 1, 13), 10 ** rng.uniform(-7, -4, 13)
    q, steps = 10 ** rng.uniform(-3, -1, 13), np.round(10 ** rng.uniform(2, 4, 13))
    sigma = rng.uniform(0.6, 4, 13)
    out = {}
    for name, result in [
        ("noise", sweep.noise_multiplier(eps, delta, q, steps, orders=orders)),
        ("steps", sweep.max_steps(eps, delta, q, sigma, orders=orders)),
        ("rate", sweep.sampling_rate(eps, delta, sigma, steps, orders=orders)),
        ("batch", sweep.batch_size(eps, delta, sigma, 2.0, 1000, orders=orders)),
    ]:
        out[name + "_value"] = np.asarray(result.value)
        out[name + "_status"] = np.asarray(result.status)
    out["grid"] = sweep.epsilon_grid(q[:5], sigma[:3], [10, 1000], [1e-5], orders=orders)
    np.savez(sys.argv[1], **out)
    """
)


@pytest.mark.slow
def test_several_devices_give_the_single_device_results(tmp_path):
    """The same calls on 4 (forced host) devices, sharded with jax.sharding, return
    exactly the single-device results."""
    path = tmp_path / "multi.npz"
    env = dict(os.environ)
    flag = "--xla_force_host_platform_device_count=4"
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " " + flag).strip()
    env["JAX_PLATFORMS"] = "cpu"
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = os.pathsep.join([root, env.get("PYTHONPATH", "")])
    subprocess.run(
        [sys.executable, "-c", _MULTI_DEVICE_SCRIPT, str(path)], env=env, check=True, timeout=600
    )
    multi = np.load(path)

    orders = ORDERS
    rng = np.random.default_rng(7)
    eps, delta = 10 ** rng.uniform(-0.3, 1, 13), 10 ** rng.uniform(-7, -4, 13)
    q, steps = 10 ** rng.uniform(-3, -1, 13), np.round(10 ** rng.uniform(2, 4, 13))
    sigma = rng.uniform(0.6, 4, 13)
    single = {}
    for name, result in [
        ("noise", sweep.noise_multiplier(eps, delta, q, steps, orders=orders)),
        ("steps", sweep.max_steps(eps, delta, q, sigma, orders=orders)),
        ("rate", sweep.sampling_rate(eps, delta, sigma, steps, orders=orders)),
        ("batch", sweep.batch_size(eps, delta, sigma, 2.0, 1000, orders=orders)),
    ]:
        single[name + "_value"] = np.asarray(result.value)
        single[name + "_status"] = np.asarray(result.status)
    single["grid"] = sweep.epsilon_grid(q[:5], sigma[:3], [10, 1000], [1e-5], orders=orders)
    for key, value in single.items():
        if key.endswith("status"):
            np.testing.assert_array_equal(multi[key], value, err_msg=key)
        else:  # bit-identical in practice; allow last-bit differences of vectorised code
            np.testing.assert_allclose(multi[key], value, rtol=1e-13, atol=0, err_msg=key)
