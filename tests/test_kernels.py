"""Tests of the core kernels ``jaxrdp.log_a`` and ``jaxrdp.rdp``.

References are independent of jaxrdp's formulation: mpmath's exact binomial sum (integer α)
and tanh–sinh quadrature of the definition (fractional α), frozen in
``tests/data/log_a_reference.csv`` by ``tests/make_reference.py``; dp_accounting where it is
exact (integer orders, values not too small).
"""

from __future__ import annotations

import csv
import io
import logging
import math
import os
import subprocess
import sys
import textwrap

import chex
import jax
import jax.numpy as jnp
import mpmath as mp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import jaxrdp
import mp_reference
from jaxrdp import kernels
from stored import stored

DP_ACCOUNTING_ORDERS = np.array(
    [1 + x / 10.0 for x in range(1, 100)] + list(range(11, 64)) + [128, 256, 512, 1024],
    dtype=np.float64,
)


@stored(depends=(mp_reference.log_a_integer,))
def _stored_log_a_integer(q, sigma, alpha, dps):
    """:func:`mp_reference.log_a_integer`, kept in tests/data/stored.json (binomial sums of
    thousands of terms at 60 digits: seconds each)."""
    return mp_reference.log_a_integer(q, sigma, alpha, dps)


def _load_reference(data_dir):
    with open(os.path.join(data_dir, "log_a_reference.csv")) as fh:
        rows = list(csv.DictReader(fh))
    q = np.array([float(r["q"]) for r in rows])
    sigma = np.array([float(r["sigma"]) for r in rows])
    alpha = np.array([float(r["alpha"]) for r in rows])
    ref = np.array([float(mp.mpf(r["log_a"])) for r in rows])
    return q, sigma, alpha, ref


@pytest.fixture(scope="module")
def reference(data_dir):
    return _load_reference(data_dir)


def _relative(values, ref):
    return (np.asarray(values, np.float64) - ref) / ref


# --------------------------------------------------------------------------- accuracy


def test_reference_covers_the_domain(reference):
    q, sigma, alpha, ref = reference
    assert len(ref) >= 1000
    assert q.min() <= 1e-7 and q.max() >= 0.999
    assert sigma.min() <= 0.2 and sigma.max() >= 1e4
    assert alpha.max() >= 4096 and alpha.min() <= 1.01
    assert np.all(ref > 0) and ref.min() < 1e-20  # tiny values are in


def test_elementwise_matches_mpmath_reference(reference):
    q, sigma, alpha, ref = reference
    got = np.asarray(jaxrdp.log_a(q, sigma, alpha))
    rel = _relative(got, ref)
    worst = int(np.argmax(np.abs(rel)))
    assert np.all(np.isfinite(got)), "NaN or inf inside the domain"
    # measured 6.2e-13 (float64, both paths): the bound is that times 1.6
    assert np.abs(rel).max() <= 1e-12, (q[worst], sigma[worst], alpha[worst], rel[worst])
    assert rel.min() >= 0.0, "below the reference: optimistic"


def test_grid_path_matches_mpmath_reference(reference):
    q, sigma, alpha, ref = reference
    orders = np.unique(alpha)
    cells = sorted(set(zip(q, sigma)))
    cq = np.array([c[0] for c in cells])[:, None]
    cs = np.array([c[1] for c in cells])[:, None]
    got = np.asarray(jaxrdp.log_a(cq, cs, orders))  # one call: cells × orders
    index = {c: i for i, c in enumerate(cells)}
    col = {a: j for j, a in enumerate(orders)}
    picked = np.array([got[index[(a, b)], col[c]] for a, b, c in zip(q, sigma, alpha)])
    rel = _relative(picked, ref)
    worst = int(np.argmax(np.abs(rel)))
    # measured 6.2e-13 (float64, both paths; with the Gauss–Hermite tiers too): the bound is
    # that times 1.6
    assert np.abs(rel).max() <= 1e-12, (q[worst], sigma[worst], alpha[worst], rel[worst])
    assert rel.min() >= 0.0, "below the reference: optimistic"


def test_grid_path_on_small_sigma_falls_back_exactly():
    # σ < 1/3.4 sends the shared fractional nodes to the elementwise quadrature (σ = 0.25
    # here; σ = 0.3 takes the last panel tier).
    orders = np.array([1.5, 2.5, 3.0, 3.5, 4.0, 5.5, 6.0, 7.25])
    q, sigma = np.array([[0.01], [0.3]]), np.array([[0.3], [0.25]])
    got = np.asarray(jaxrdp.log_a(q, sigma, orders))
    for i in range(2):
        for j, a in enumerate(orders):
            if float(a).is_integer():
                ref = mp_reference.log_a_integer(q[i, 0], sigma[i, 0], int(a), dps=40)
            else:
                ref = mp_reference.log_a_fractional(q[i, 0], sigma[i, 0], a, dps=40)
            assert abs(got[i, j] / float(ref) - 1) < 1e-12


def test_tiny_values_keep_full_relative_precision():
    # q = 1e-7 gives RDP ~ 1e-14: no zero, no noise.
    for alpha in (2, 8, 3.5):
        got = float(jaxrdp.rdp(1e-7, 1.0, alpha))
        if float(alpha).is_integer():
            ref = mp_reference.log_a_integer(1e-7, 1.0, int(alpha), dps=50)
        else:
            ref = mp_reference.log_a_fractional(1e-7, 1.0, alpha, dps=50)
        ref = float(ref) / (alpha - 1)
        assert 1e-16 < ref < 1e-12
        assert abs(got / ref - 1) < 1e-12


def test_integer_orders_agree_with_dp_accounting():
    rdp_lib = pytest.importorskip("dp_accounting.rdp.rdp_privacy_accountant")
    rng = np.random.default_rng(7)
    q = rng.uniform(0.01, 0.5, 40)
    sigma = rng.uniform(0.5, 20.0, 40)
    orders = np.array([2, 3, 5, 8, 16, 32, 63, 128, 256])
    got = np.asarray(jaxrdp.rdp(q[:, None], sigma[:, None], orders))
    worst = 0.0
    compared = 0
    for i in range(len(q)):
        theirs = rdp_lib._compute_rdp_poisson_subsampled_gaussian(q[i], sigma[i], orders)
        for j in range(len(orders)):
            # dp_accounting sums ~1 + tiny in float64; only its larger values are exact.
            if theirs[j] * (orders[j] - 1) > 1e-3:
                worst = max(worst, abs(got[i, j] / theirs[j] - 1))
                compared += 1
    assert compared > 200
    assert worst <= 1e-10


# --------------------------------------------------------- where others are known to fail


def test_fractional_orders_where_dp_accounting_gives_up():
    rdp_lib = pytest.importorskip("dp_accounting.rdp.rdp_privacy_accountant")
    q, sigma = 0.1, 0.8
    orders = [1.1, 1.2, 1.3, 1.4, 1.5]
    theirs = rdp_lib._compute_rdp_poisson_subsampled_gaussian(q, sigma, orders)
    assert np.all(np.isinf(theirs))  # it excludes every one of these orders
    for alpha in orders:
        ref = float(mp_reference.log_a_fractional(q, sigma, alpha)) / (alpha - 1)
        got = float(jaxrdp.rdp(q, sigma, alpha))
        assert abs(got / ref - 1) < 1e-12


def test_fractional_orders_where_dp_accounting_is_loose():
    rdp_lib = pytest.importorskip("dp_accounting.rdp.rdp_privacy_accountant")
    q, sigma, alpha = 0.5, 20.0, 1.1
    theirs = rdp_lib._compute_rdp_poisson_subsampled_gaussian(q, sigma, [alpha])[0]
    ref = float(mp_reference.log_a_fractional(q, sigma, alpha)) / (alpha - 1)
    got = float(jaxrdp.rdp(q, sigma, alpha))
    assert abs(got / ref - 1) < 1e-12
    assert theirs > 10 * got  # their |binomial| sum is an order of magnitude off


def test_no_negative_rdp_where_the_signed_series_stops_early():
    # Opacus' signed series returns RDP −0.70 here; the truth is +0.00057.
    q, sigma, alpha = 0.5, 100.0, 45.5
    ref = float(mp_reference.log_a_fractional(q, sigma, alpha)) / (alpha - 1)
    got = float(jaxrdp.rdp(q, sigma, alpha))
    assert 5e-4 < ref < 6e-4
    assert abs(got / ref - 1) < 1e-12


def test_float32_keeps_the_sign_of_tiny_values():
    # Summing terms near 1 in float32 gives −1.4e-8 here; the truth is +4.8e-9.
    ref = float(mp_reference.log_a_integer(1e-5, 1.0, 8, dps=50))
    got = float(jax.jit(jaxrdp.log_a)(jnp.float32(1e-5), jnp.float32(1.0), jnp.float32(8.0)))
    q32 = float(np.float32(1e-5))
    ref32 = float(mp_reference.log_a_integer(q32, 1.0, 8, dps=50))
    assert 4.7e-9 < ref < 4.9e-9
    assert ref32 <= got <= ref32 * (1 + 1e-4)


# ----------------------------------------------------------------------- special cases


def test_special_values():
    alpha = np.array([1.5, 2.0, 64.0])
    np.testing.assert_array_equal(np.asarray(jaxrdp.rdp(0.0, 1.3, alpha)), 0.0)
    np.testing.assert_allclose(
        np.asarray(jaxrdp.rdp(1.0, 1.3, alpha)), alpha / (2 * 1.3**2), rtol=1e-15
    )
    np.testing.assert_allclose(
        np.asarray(jaxrdp.log_a(1.0, 1.3, alpha)), alpha * (alpha - 1) / (2 * 1.3**2), rtol=1e-15
    )
    assert np.all(np.asarray(jaxrdp.rdp(0.1, 0.0, alpha)) == np.inf)
    assert float(jaxrdp.rdp(0.1, 1.0, np.inf)) == np.inf
    assert float(jaxrdp.rdp(0.0, 1.0, np.inf)) == 0.0
    assert float(jaxrdp.rdp(0.1, np.inf, 3.0)) == 0.0
    assert float(jaxrdp.log_a(0.1, 1.0, 1.0)) == 0.0
    # q = 1 is the plain Gaussian mechanism: the grid path agrees.
    np.testing.assert_allclose(
        np.asarray(jaxrdp.rdp(np.array([[1.0]]), np.array([[2.0]]), DP_ACCOUNTING_ORDERS))[0],
        DP_ACCOUNTING_ORDERS / 8.0,
        rtol=1e-15,
    )


def test_broadcasting_shapes():
    q = np.full((3, 1, 1), 0.01)
    sigma = np.full((1, 4, 1), 1.1)
    alpha = np.array([2.0, 3.5])
    assert jaxrdp.rdp(q, sigma, alpha).shape == (3, 4, 2)
    assert jaxrdp.rdp(0.01, 1.1, alpha).shape == (2,)
    assert jaxrdp.rdp(np.full(5, 0.01), np.full(5, 1.1), np.linspace(2, 3, 5)).shape == (5,)
    assert jaxrdp.rdp(0.01, 1.1, 2.0).shape == ()


def test_host_call_returns_float64_without_touching_global_config():
    code = textwrap.dedent(
        """
        import jax, jax.numpy as jnp, jaxrdp
        out = jaxrdp.rdp(0.01, 1.1, [2.0, 3.5])
        assert out.dtype == jnp.float64, out.dtype
        assert not jax.config.jax_enable_x64
        assert jnp.ones(1).dtype == jnp.float32
        print("ok")
        """
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "ok"


# ------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "kwargs, name",
    [
        (dict(q=1.5, sigma=1.0, alpha=2.0), "q"),
        (dict(q=-0.1, sigma=1.0, alpha=2.0), "q"),
        (dict(q=0.1, sigma=-1.0, alpha=2.0), "sigma"),
        (dict(q=0.1, sigma=1.0, alpha=0.5), "alpha"),
        (dict(q=float("nan"), sigma=1.0, alpha=2.0), "q"),
        (dict(q=0.1, sigma=float("nan"), alpha=2.0), "sigma"),
        (dict(q=0.1, sigma=1.0, alpha=[2.0, float("nan")]), "alpha"),
    ],
)
def test_bad_input_raises_naming_argument(kwargs, name):
    with pytest.raises(ValueError, match=name):
        jaxrdp.rdp(**kwargs)


def test_rdp_rejects_order_one_eagerly():
    with pytest.raises(ValueError, match="alpha"):
        jaxrdp.rdp(0.1, 1.0, 1.0)


def test_traced_bad_input_is_nan_not_zero():
    f = jax.jit(jaxrdp.rdp)
    with jax.enable_x64(True):
        out = np.asarray(
            f(jnp.array([1.5, 0.1, 0.1, 0.1]), jnp.array([1.0, -1.0, 1.0, 1.0]),
              jnp.array([2.0, 2.0, 0.5, 1.0]))
        )
    assert np.all(np.isnan(out))


# --------------------------------------------------------------------------- JAX idioms


def test_one_compile_per_shape():
    """New values of one shape reuse the compiled programs (counted from JAX's public
    compile log, ``jax.log_compiles``)."""
    orders = np.array([1.5, 2.0, 2.5, 3.0, 10.0, 12.5, 64.0, 100.0])
    log = io.StringIO()
    handler = logging.StreamHandler(log)
    handler.setLevel(logging.DEBUG)
    logging.getLogger("jax").addHandler(handler)
    try:
        with jax.log_compiles(True):
            for q, sigma in [(0.01, 1.0), (0.2, 3.0), (1e-5, 50.0)]:
                jaxrdp.rdp(np.full((3, 1), q), np.full((3, 1), sigma), orders)
                jaxrdp.rdp(np.full(3, q), np.full(3, sigma), np.array([2.0, 3.5, 9.0]) + q)
    finally:
        logging.getLogger("jax").removeHandler(handler)
    text = log.getvalue()
    assert text.count("Compiling jit(_rdp_orders_jit)") == 1, text
    assert text.count("Compiling jit(_rdp_jit)") == 1, text


def test_user_jit_does_not_retrace_on_new_values():
    @jax.jit
    @chex.assert_max_traces(n=1)
    def step(q, sigma, alpha):
        return jaxrdp.rdp(q, sigma, alpha)

    chex.clear_trace_counter()
    for q, sigma, alpha in [(0.01, 1.0, 2.0), (0.3, 5.0, 7.5), (1e-4, 0.9, 64.0)]:
        out = step(jnp.float32(q), jnp.float32(sigma), jnp.float32(alpha))
        assert np.isfinite(float(out)) and float(out) > 0


def test_vmap_matches_broadcast():
    q = np.array([0.01, 0.1, 0.5])
    sigma = np.array([0.9, 2.0, 7.0])
    alpha = np.array([1.5, 8.0, 40.5])
    with jax.enable_x64(True):
        vm = jax.vmap(kernels._rdp_jit)(jnp.asarray(q), jnp.asarray(sigma), jnp.asarray(alpha))
    np.testing.assert_allclose(np.asarray(vm), np.asarray(jaxrdp.rdp(q, sigma, alpha)), rtol=1e-14)


@pytest.mark.parametrize(
    "q, sigma, alpha", [(0.01, 1.1, 8.0), (0.2, 0.7, 2.5), (1e-4, 3.0, 32.0), (0.5, 5.0, 1.3)]
)
def test_gradients_match_finite_differences(q, sigma, alpha):
    with jax.enable_x64(True):
        f = lambda a, b: kernels._rdp_jit(a, b, jnp.float64(alpha))  # noqa: E731
        gq, gs = jax.grad(f, argnums=(0, 1))(jnp.float64(q), jnp.float64(sigma))
        hq, hs = 1e-6 * q, 1e-6 * sigma
        fdq = (f(q + hq, sigma) - f(q - hq, sigma)) / (2 * hq)
        fds = (f(q, sigma + hs) - f(q, sigma - hs)) / (2 * hs)
    assert np.isfinite(float(gq)) and np.isfinite(float(gs))
    assert float(gq) > 0 > float(gs)
    np.testing.assert_allclose(float(gq), float(fdq), rtol=1e-6)
    np.testing.assert_allclose(float(gs), float(fds), rtol=1e-6)


def test_gradients_through_grid_path_and_special_lanes_are_finite():
    orders = np.array([1.5, 2.0, 3.0, 4.5, 7.0, 11.5, 33.0, 64.0])
    with jax.enable_x64(True):
        def total(q, sigma):
            plan = kernels._grid.OrderPlan(tuple(orders))
            return jnp.sum(kernels._rdp_orders_jit(q[:, None], sigma[:, None], plan, q.shape))
        g = jax.grad(total, argnums=(0, 1))(jnp.array([0.0, 0.05, 1.0]), jnp.array([1.0, 2.0, 3.0]))
    assert all(np.all(np.isfinite(np.asarray(x))) for x in g)


# ---------------------------------------------------------------------------- float32


def _sigma_where_log_a_is(q, alpha, target):
    """σ with float64 ``log A_α(q, σ) = target`` per cell, by 30 bisections of log σ on
    [0.2, 1e4] (log A decreases in σ)."""
    lo, hi = np.full(q.shape, np.log(0.2)), np.full(q.shape, np.log(1e4))
    for _ in range(30):
        mid = 0.5 * (lo + hi)
        above = np.asarray(jaxrdp.log_a(q, np.exp(mid), alpha)) > target
        lo, hi = np.where(above, mid, lo), np.where(above, hi, mid)
    return np.exp(0.5 * (lo + hi))


def _float32_sample(rng, n):
    """(q, σ, α) over the whole domain, plus cells where log A is moderate (0.01 to 5)
    while α|log q| is large: there log A is a small sum of parts of size up to α|log q| and
    α²/2σ² (1e5), the hard case for float32. σ for those is found by bisection on the
    float64 kernel, which is checked against mpmath elsewhere in this file."""
    q = 10 ** rng.uniform(-7, 0, n)
    q[: n // 10] = 1 - 10 ** rng.uniform(-7, -0.3, n // 10)
    sigma = 10 ** rng.uniform(np.log10(0.2), 4, n)
    alpha = np.where(
        rng.uniform(size=n) < 0.5,
        np.round(10 ** rng.uniform(np.log10(2), np.log10(4096), n)),
        1 + 10 ** rng.uniform(-2, np.log10(511), n),
    )
    m = n // 3
    qa = 10 ** rng.uniform(-7, -0.3, m)
    aa = np.where(
        rng.uniform(size=m) < 0.5,
        np.round(10 ** rng.uniform(1.5, np.log10(4096), m)),
        1 + 10 ** rng.uniform(1.5, np.log10(511), m),
    )
    target = 10 ** rng.uniform(-2, np.log10(5), m)
    sa = _sigma_where_log_a_is(qa, aa, target)
    q, sigma, alpha = (np.concatenate(v) for v in ((q, qa), (sigma, sa), (alpha, aa)))
    return (v.astype(np.float32) for v in (q, sigma, alpha))


def test_float32_is_sound_and_accurate():
    q, sigma, alpha = _float32_sample(np.random.default_rng(11), 3000)
    f32 = np.asarray(jax.jit(jaxrdp.log_a)(jnp.asarray(q), jnp.asarray(sigma), jnp.asarray(alpha)))
    assert f32.dtype == np.float32
    # Reference: float64 at the same (float32-representable) inputs.
    f64 = np.asarray(jaxrdp.log_a(q.astype(np.float64), sigma.astype(np.float64), alpha.astype(np.float64)))
    assert np.all(np.isfinite(f32)) and np.all(f32 >= 0)
    above_tiny = f64 > np.finfo(np.float32).tiny
    assert above_tiny.sum() > 3000
    parts = np.minimum(-alpha * np.log(q.astype(np.float64)), alpha * (alpha - 1.0) / (2.0 * sigma.astype(np.float64) ** 2))
    assert np.sum(above_tiny & (parts > 2000) & (f64 < 10)) > 300  # the hard cells are there
    rel = f32[above_tiny].astype(np.float64) / f64[above_tiny] - 1
    assert rel.min() >= 0.0, "float32 below float64: optimistic"
    assert rel.max() <= 1e-4
    # Before the documented margin the error is a few 1e-6 in both directions.
    raw = (1 + rel) / (1 + kernels.FLOAT32_SAFETY_MARGIN) - 1
    assert np.abs(raw).max() < 2e-5


def test_float32_hard_cell_against_mpmath():
    # log A ≈ 0.62 is the sum of parts of size α|log q| ≈ 7100; evaluated directly in
    # float32 (jaxrdp ≤ 0.1) it was off by 2e-4.
    q, sigma, alpha = np.float32(3.8442515e-05), np.float32(5.8549695), np.float32(698.0)
    ref = float(mp_reference.log_a_integer(float(q), float(sigma), int(alpha), dps=60))
    got = float(jax.jit(jaxrdp.log_a)(q, sigma, alpha))
    assert 0.1 < ref < 10
    assert ref <= got <= ref * (1 + 1e-4)


def test_float32_extreme_inputs_stay_sound():
    # A subnormal q would be flushed to 0 by the CPU (RDP 0, optimistic); σ = 1e30 would
    # underflow 1/σ² (NaN); q·e^{v} beyond float32's range once fooled the series test.
    q = np.float32([1e-40, 1e-40, 0.5, 1e-5, 1e-30, 1e-30])
    sigma = np.float32([0.2, 1.0, 1e30, 1e19, 0.2, 0.5])
    alpha = np.float32([4096.0, 2.0, 64.0, 8.0, 4096.0, 1.5])
    f32 = np.asarray(jax.jit(jaxrdp.log_a)(jnp.asarray(q), jnp.asarray(sigma), jnp.asarray(alpha)))
    f64 = np.asarray(jaxrdp.log_a(q.astype(np.float64), sigma.astype(np.float64), alpha.astype(np.float64)))
    assert np.all(np.isfinite(f32)) and np.all(f32 >= 0)
    assert f64[0] > 1e8 and f32[0] >= f64[0]
    above_tiny = f64 > np.finfo(np.float32).tiny
    assert np.all(f32[above_tiny] >= f64[above_tiny])
    normal = above_tiny & (q >= np.finfo(np.float32).tiny)
    assert normal.sum() == 1 and np.all(f32[normal] <= f64[normal] * (1 + 1e-4))


def test_float32_gradients_match_float64():
    grad32 = jax.jit(jax.grad(jaxrdp.rdp, argnums=(0, 1)))
    for q, sigma, alpha in [(0.01, 1.1, 32.0), (1e-3, 8.6, 1024.0), (0.3, 0.5, 2.5), (0.9, 3.0, 100.0), (6.4e-7, 11.1, 3153.0)]:
        g32 = grad32(jnp.float32(q), jnp.float32(sigma), jnp.float32(alpha))
        with jax.enable_x64(True):
            args = (jnp.float64(np.float32(v)) for v in (q, sigma, alpha))
            g64 = jax.grad(jaxrdp.rdp, argnums=(0, 1))(*args)
        for a, b in zip(g32, g64):
            assert a.dtype == jnp.float32
            assert abs(float(a) / float(b) - 1) < 1e-4


# ------------------------------------------------- float32 on the shared-order path

#: Orders of the float32 grid tests: the defaults (integer and fractional ≤ 12, shared
#: path), large integer orders, and fractional orders above 12 (elementwise fallback).
_F32_GRID_ORDERS = np.concatenate([kernels.DEFAULT_ORDERS, [2048.0, 4096.0, 20.5, 300.5]])


def _float32_grid_cells(rng, n):
    """Cells (q, σ) over the whole domain, plus cells where, for one of the grid's large
    orders, log A is moderate (0.01 to 5) while α|log q| is large (the hard case)."""
    q = 10 ** rng.uniform(-7, 0, n)
    q[: n // 10] = 1 - 10 ** rng.uniform(-7, -0.3, n // 10)
    sigma = 10 ** rng.uniform(np.log10(0.2), 4, n)
    m = n // 2
    qa = 10 ** rng.uniform(-7, -0.3, m)
    aa = rng.choice([11.5, 40.0, 63.0, 256.0, 1024.0, 4096.0], m)
    target = 10 ** rng.uniform(-2, np.log10(5), m)
    q = np.concatenate([q, qa, [1e-3, 0.3, 0.999999, 1e-7]])
    sigma = np.concatenate([sigma, _sigma_where_log_a_is(qa, aa, target), [0.2, 0.2, 0.2, 1e4]])
    return q.astype(np.float32), sigma.astype(np.float32)


def _float64_at_float32_inputs(fn, q, sigma, orders):
    return np.asarray(fn(q.astype(np.float64)[:, None], sigma.astype(np.float64)[:, None],
                         np.float32(orders).astype(np.float64)))


@pytest.mark.slow
def test_float32_shared_orders_path_is_sound_and_accurate():
    q, sigma = _float32_grid_cells(np.random.default_rng(12), 600)
    assert kernels._route(q[:, None], sigma[:, None], _F32_GRID_ORDERS, jnp.float32)[0] == "orders"
    # log A and RDP in one program each (they share the quadrature: one compilation)
    both = lambda a, b: (jaxrdp.log_a(a, b, _F32_GRID_ORDERS), jaxrdp.rdp(a, b, _F32_GRID_ORDERS))  # noqa: E731
    f32s = jax.jit(both)(q[:, None], sigma[:, None])
    orders64 = np.float32(_F32_GRID_ORDERS).astype(np.float64)
    with jax.enable_x64(True):
        f64s = jax.jit(lambda a, b: (jaxrdp.log_a(a, b, orders64), jaxrdp.rdp(a, b, orders64)))(
            q.astype(np.float64)[:, None], sigma.astype(np.float64)[:, None])
    alpha = np.broadcast_to(_F32_GRID_ORDERS, f64s[0].shape)
    q64 = np.broadcast_to(q.astype(np.float64)[:, None], alpha.shape)
    for name, f32, f64 in zip(("log_a", "rdp"), f32s, f64s):
        f32, f64 = np.asarray(f32), np.asarray(f64)
        assert f32.dtype == np.float32 and f64.dtype == np.float64
        assert np.all(np.isfinite(f32)) and np.all(f32 >= 0), name
        above_tiny = f64 > np.finfo(np.float32).tiny
        log_a64 = f64 * (alpha - 1) if name == "rdp" else f64
        hard = above_tiny & (-alpha * np.log(q64) > 2000) & (log_a64 < 10)
        assert hard.sum() > 100 and hard[:, _F32_GRID_ORDERS == 4096].any()  # the hard cells are there
        rel = f32[above_tiny].astype(np.float64) / f64[above_tiny] - 1
        assert rel.min() >= 0.0, f"{name}: float32 below float64: optimistic"
        assert rel.max() <= 1e-4, name
        # Before the documented margin: measured up to 4.3e-6 in either direction.
        raw = (1 + rel) / (1 + kernels.FLOAT32_SAFETY_MARGIN) - 1
        assert np.abs(raw).max() < 1e-5, name


@pytest.mark.slow
def test_float32_integer_terms_on_both_sides_of_the_short_product_limit():
    # The order-free integer terms take two 12-bit products up to a largest order of 4 096
    # and full double-float products beyond: the same cells with orders up to 4 096 and
    # with 8 192 added, against float64 (measured: 2.8e-6 either way, before the margin).
    rng = np.random.default_rng(30)
    q = np.concatenate([10 ** rng.uniform(-8, -0.3, 24), 1 - 10 ** rng.uniform(-7, -0.3, 24)])
    sigma = 10 ** rng.uniform(np.log10(0.3), 4, 48)
    q32, s32 = q.astype(np.float32)[:, None], sigma.astype(np.float32)[:, None]
    short = np.array([2.0, 3, 7, 16, 40, 63, 128, 512, 1024, 2048, 4096])
    for orders in (short, np.append(short, 8192.0)):
        f32 = np.asarray(jax.jit(lambda a, b: jaxrdp.log_a(a, b, orders))(q32, s32), np.float64)
        with jax.enable_x64(True):
            f64 = np.asarray(jaxrdp.log_a(q32.astype(np.float64), s32.astype(np.float64), orders))
        above_tiny = f64 > np.finfo(np.float32).tiny
        assert np.all(np.isfinite(f32[above_tiny]))
        rel = f32[above_tiny] / f64[above_tiny] - 1
        assert rel.min() >= 0.0, "float32 below float64: optimistic"
        raw = (1 + rel) / (1 + kernels.FLOAT32_SAFETY_MARGIN) - 1
        assert np.abs(raw).max() < 1e-5


def _exact_log_terms(q, sigma, alpha):
    """log of every term k = 0 … α of the non-negative binomial sum, float64 NumPy ``(C, α + 1)``."""
    k = np.arange(alpha + 1.0)
    log_binom = np.array([math.lgamma(alpha + 1) - math.lgamma(j + 1) - math.lgamma(alpha - j + 1) for j in range(alpha + 1)])
    y = 0.5 * k * (k - 1) / sigma[:, None] ** 2
    with np.errstate(divide="ignore", invalid="ignore"):
        log_expm1 = np.where(k >= 2, y + np.log(-np.expm1(-y)), -np.inf)
        return log_binom + log_expm1 + k * np.log(q)[:, None] + (alpha - k) * np.log1p(-q)[:, None]


def test_window_bound_of_the_middle_terms_is_an_upper_bound_and_tight():
    # The bound on the terms between the two windows (concave + convex log-terms, tangents at
    # the piece ends) against the exact sum of those terms, over cells where they matter and
    # where they do not. Measured: 0.3 to 3.45 nats above (α = 2 000's last piece is the
    # loosest), never below.
    from jaxrdp import _grid

    rng = np.random.default_rng(40)
    q = np.concatenate([10 ** rng.uniform(-6, -0.05, 400), 1 - 10 ** rng.uniform(-6, -0.3, 40)])
    sigma = 10 ** rng.uniform(np.log10(0.3), 2.5, q.size)
    for alpha in (256, 300, 1024, 2000):
        terms = _exact_log_terms(q, sigma, alpha)
        consts = _grid.window_constants((alpha,))
        first, last = _grid.WINDOW_HEAD + 2, alpha - _grid.WINDOW_TAIL
        middle = np.logaddexp.reduce(terms[:, first:last + 1], axis=1)
        bound = np.asarray(_grid.middle_bound(jnp.asarray(terms[:, consts.ends[0]])[:, None, :], consts))[:, 0]
        finite = np.isfinite(middle)
        assert finite.sum() > 0.9 * q.size
        assert np.all(bound[finite] >= middle[finite] - 1e-9), alpha
        assert np.max(bound[finite] - middle[finite]) < 3.5, alpha
        assert np.all(bound[~finite] == -np.inf)


_WINDOW_ORDERS = (2.0, 40.0, 256.0, 300.0, 1024.0)


def _window_branch_cells(seed, n, branches):
    """``(name, q, σ)`` per branch: ``n`` cells, the last ``branches[name]`` of them where the
    middle of the big orders matters, the others where the windows suffice."""
    rng = np.random.default_rng(seed)
    plain = (10 ** rng.uniform(-5, -2, n), 10 ** rng.uniform(0, 1.5, n))  # windows suffice
    spread = (10 ** rng.uniform(-1.5, -0.9, n), rng.uniform(6, 9, n))  # the middle matters
    for name, n_spread in branches.items():
        yield name, *(np.concatenate([p[: n - n_spread], m[:n_spread]]) for p, m in zip(plain, spread))


def _bad_cells_as_named(name, n_bad):
    """Whether a branch's count of cells that take every term is what its name says."""
    from jaxrdp import _grid

    if name.startswith("windows"):
        return n_bad == 0
    return 0 < n_bad <= _grid.PATCH_CELLS if name == "patched" else n_bad > _grid.PATCH_CELLS


def test_float32_big_integer_orders_by_windows_every_branch():
    # Orders from 256 on are summed over their head and tail windows; cells where the middle
    # matters take every term, PATCH_CELLS at a time. Chunks with no such cell, a few, and
    # more than one batch of them, against the float64 path (its windows are checked
    # against mpmath below), before the float32 path's outward margin: measured 1.8e-6,
    # 1.8e-6, 1.8e-6 and 6.8e-7.
    from jaxrdp import _grid, _grid32

    plan = _grid.OrderPlan(_WINDOW_ORDERS)
    # "σ ≤ 10": every y = k(k−1)/2σ² at the windows' tails and piece ends is ≥ 20, where
    # log expm1(y) is taken as y (:func:`_grid32._w_at`); σ up to 31.6 in the others.
    branches = {"windows": 0, "windows, σ ≤ 10": 0, "patched": 6, "several batches": 128}
    log_a_minus_one = jax.jit(lambda a, b: _grid.log_a_minus_one(a, b, plan))

    @jax.jit  # one program (eagerly, each of the windows' operations compiled on its own)
    def windowed_bad(q, sigma):
        cell = _grid32._cell(q, sigma)
        w = _grid32._integer_shared(cell, _grid.WINDOW_HEAD + 1)
        return _grid32._windowed(w, cell, (256, 300, 1024))[1]

    for name, q, sigma in _window_branch_cells(41, 128, branches):
        q, sigma = q.astype(np.float32), sigma.astype(np.float32)
        if "σ ≤ 10" in name:
            sigma = np.minimum(sigma, np.float32(10.0))
        y_end = float(np.min(1.0 / sigma.astype(np.float64) ** 2)) * (_grid.WINDOW_HEAD + 2) * (
            _grid.WINDOW_HEAD + 1) / 2
        if name.startswith("windows"):  # (the spread cells' σ ≤ 9 take the shortcut too)
            assert (y_end >= _grid32._EXPM1_AS_IDENTITY_Y) == ("σ ≤ 10" in name)
        bad = windowed_bad(jnp.asarray(q), jnp.asarray(sigma))
        assert _bad_cells_as_named(name, int(np.sum(bad))), (name, int(np.sum(bad)))
        got = np.asarray(log_a_minus_one(q, sigma), np.float64)
        with jax.enable_x64(True):
            ref = np.asarray(log_a_minus_one(jnp.asarray(q, jnp.float64), jnp.asarray(sigma, jnp.float64)))
        ok = ref > -80
        rel = np.logaddexp(0, got) / np.logaddexp(0, ref) - 1
        assert ok.sum() > 0.8 * ok.size
        assert np.abs(rel[ok]).max() < 6e-6, name


def test_float64_big_integer_orders_by_windows_every_branch():
    # Orders from 256 on (chunks of at least 16 cells) are summed over their head and tail
    # windows plus a bound on the middle; cells where the bound is not below e^-36 of the
    # windows' sum take every term, PATCH_CELLS at a time. Chunks with no such cell, a few,
    # and more than one batch of them, against mpmath's exact binomial sums on 6 cells each
    # (windowed and patched ones): measured 4.4e-15 relative in log A, before the kernel's
    # outward margin.
    from jaxrdp import _grid

    plan = _grid.OrderPlan(_WINDOW_ORDERS)
    worst = 0.0
    for name, q, sigma in _window_branch_cells(43, 64, {"windows": 0, "patched": 6, "several batches": 64}):
        with jax.enable_x64(True):
            log_q, log1m_q, s = (jnp.asarray(v) for v in (np.log(q), np.log1p(-q), 1 / sigma))
            u = _grid._order_free_terms(log_q, s, _grid.WINDOW_HEAD + 2)
            bad = np.asarray(_grid._windowed(u, log_q, log1m_q, s, (256, 300, 1024))[1])
            got = np.asarray(jax.jit(lambda a, b: _grid.log_a_minus_one(a, b, plan))(q, sigma))
        assert _bad_cells_as_named(name, int(bad.sum())), (name, int(bad.sum()))
        picks = np.concatenate([np.flatnonzero(bad)[:3], np.flatnonzero(~bad)[:6]])[:6]
        for i in picks:
            for j in (2, 3, 4):
                exact = float(mp_reference.log_a_integer(q[i], sigma[i], int(_WINDOW_ORDERS[j]), dps=30))
                worst = max(worst, abs(np.logaddexp(0.0, got[i, j]) / exact - 1))
    assert worst < 2e-14, worst


@pytest.mark.slow
def test_float64_windows_have_the_every_term_derivatives():
    # 48 cells (windows apply from 16 on) with big orders, some of them patched: reverse
    # and forward mode through the shared path against the elementwise path's derivatives
    # (measured 6.7e-15 relative; reverse mode cannot pass the patching loop itself).
    rng = np.random.default_rng(44)
    q = np.concatenate([10 ** rng.uniform(-5, -2, 40), 10 ** rng.uniform(-1.5, -0.9, 8)])
    sigma = np.concatenate([10 ** rng.uniform(0, 1.5, 40), rng.uniform(6, 9, 8)])
    orders = np.array([2.0, 40.0, 256.0, 300.0, 512.0, 1024.0, 1.5, 3.7])
    with jax.enable_x64(True):
        qj, sj = jnp.asarray(q), jnp.asarray(sigma)
        shared = lambda a, b: jnp.sum(jaxrdp.rdp(a[:, None], b[:, None], orders))  # noqa: E731
        elementwise = lambda a, b: jnp.sum(kernels._rdp_jit(a[:, None], b[:, None], jnp.asarray(orders)))  # noqa: E731
        got = jax.jit(jax.grad(shared, argnums=(0, 1)))(qj, sj)
        ref = jax.grad(elementwise, argnums=(0, 1))(qj, sj)
        _, forward = jax.jvp(shared, (qj, sj), (jnp.ones_like(qj), jnp.zeros_like(sj)))
    for g, r in zip(got, ref):
        np.testing.assert_allclose(np.asarray(g), np.asarray(r), rtol=5e-14)
    np.testing.assert_allclose(float(forward), np.sum(np.asarray(ref[0])), rtol=5e-14)


@pytest.mark.parametrize("tier", [0, 1, 2, 3])
def test_float32_shared_tiers_match_float64(tier):
    # The float32 shared quadrature of each tier against the float64 elementwise quadrature
    # (checked against mpmath above) over the tier's σ range, q from 1e-30 to 1 − 1e-7 and
    # orders from 1.01 to just below SHARED_MAX_ORDER.
    from jaxrdp import _grid, _grid32, _quadrature

    limit, panels, nodes = _grid32.SHARED_TIERS[tier]
    low = _grid32.SHARED_TIERS[tier - 1][0] if tier else 0.05
    frac = DP_ACCOUNTING_ORDERS[DP_ACCOUNTING_ORDERS != np.round(DP_ACCOUNTING_ORDERS)]
    alphas = tuple(float(np.float32(a)) for a in np.concatenate([[1.01, 1.02, 1.05], frac, [11.5, 11.99]]))
    rng = np.random.default_rng(20 + tier)
    n = 256
    q = np.concatenate([10 ** rng.uniform(-30, -0.3, n // 2), 1 - 10 ** rng.uniform(-7, -0.3, n // 2)])
    s = np.concatenate([rng.uniform(low, limit, n - 8), np.full(8, limit)])
    q, sigma = q.astype(np.float32), (1 / s).astype(np.float32)
    got = np.asarray(jax.jit(
        lambda a, b: _grid32._shared_log_a_minus_one(a, _grid32._cell(a, b), alphas, panels, nodes)
    )(q, sigma))
    with jax.enable_x64(True):
        ref = np.asarray(jax.jit(lambda a, b: _grid.elementwise_log_a_minus_one(a, b, alphas, _quadrature.FLOAT64_CONFIG))(
            jnp.asarray(q, jnp.float64), jnp.asarray(sigma, jnp.float64)))
    assert np.all(np.isfinite(got))
    # Relative error of log A = log1p(e^{log(A − 1)}); cells where A − 1 is a float32
    # subnormal are out of float32's range. Measured: at most 3.5e-6 where A − 1 > e^-30,
    # 9.9e-6 below (the float32 spacing of log(A − 1) near −80 is 7.6e-6).
    ok = ref > -87
    rel = np.logaddexp(0, got.astype(np.float64)) / np.logaddexp(0, ref) - 1
    assert ok.sum() > 0.6 * ok.size
    assert np.abs(rel[ok & (ref > -30)]).max() < 6e-6
    assert np.abs(rel[ok]).max() < 1.5e-5


@pytest.mark.slow
def test_float32_shared_path_layouts_and_gradients():
    orders = kernels.DEFAULT_ORDERS
    q = np.geomspace(1e-4, 0.5, 6).astype(np.float32)[:, None]
    sigma = np.geomspace(0.3, 20, 6).astype(np.float32)[:, None]
    expected = np.asarray(jax.jit(lambda a, b: jaxrdp.rdp(a, b, orders))(q, sigma))
    got = np.asarray(jax.jit(lambda a, b: jaxrdp.rdp(a, b, orders[None, :]))(q, sigma))
    np.testing.assert_array_equal(got, expected)
    # Derivatives are the float32 elementwise quadrature's: close to float64's.
    loss = lambda a, b, o: jnp.sum(jaxrdp.rdp(a, b, o) * jnp.arange(1.0, 1.0 + o.size))  # noqa: E731
    g32 = jax.jit(jax.grad(lambda a, b: loss(a, b, orders), argnums=(0, 1)))(q, sigma)
    with jax.enable_x64(True):
        g64 = jax.grad(lambda a, b: loss(a, b, np.float32(orders).astype(np.float64)), argnums=(0, 1))(
            jnp.asarray(q, jnp.float64), jnp.asarray(sigma, jnp.float64))
    for a, b in zip(g32, g64):
        assert a.dtype == jnp.float32
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4)


@pytest.mark.slow
def test_float32_shared_path_extreme_cells_stay_sound():
    # Exponents of 1e9 and more (σ = 1e-3) once underflowed every term (a float32 shift is
    # as coarse as 256 there); σ = 1e-10 overflows k(k−1)/2σ²; q = 1 is the closed form;
    # q = 1e-30 with σ = 0.2 (elementwise fractional orders) once gave NaN, from nodes with
    # s·t − s²/2 beyond float32's exp range taken for x ≫ 1.
    orders = _F32_GRID_ORDERS
    q = np.float32([0.3, 0.999999, 1e-3, 1.0, 1e-40, 0.5, 1e-30])
    sigma = np.float32([1e-3, 0.2, 1e-10, 2.0, 1.0, 1e30, 0.2])
    f32 = np.asarray(jax.jit(lambda a, b: jaxrdp.log_a(a, b, orders))(q[:, None], sigma[:, None]))
    f64 = _float64_at_float32_inputs(jaxrdp.log_a, q, sigma, orders)
    assert not np.any(np.isnan(f32)) and np.all(f32 >= 0)
    tiny = np.finfo(np.float32).tiny
    finite = (f64 > tiny) & np.isfinite(f64)
    assert np.all(f32[finite] >= f64[finite])
    close = finite & np.isfinite(f32) & (q[:, None] >= tiny)
    assert close[:2].all() and close[3].all()
    # σ = 1e-3 sends fractional orders to the elementwise float32 quadrature, which is sound
    # but looser there (outside the float32 tests' σ ≥ 0.2); integer orders stay exact.
    # The same for σ = 1e-10, where the fractional orders' float32 values are finite and
    # above the true ~α(α−1)/2σ² (float64 overflows to +inf for most).
    close[[0, 2]] &= orders == np.round(orders)
    assert np.all(f32[close] <= f64[close] * (1 + 1e-4))


# ------------------------------------------------------------------ property tests


_q = st.floats(1e-6, 0.99)
_sigma = st.floats(0.3, 200.0)
_alpha = st.floats(1.05, 300.0)


@given(_q, _q, _sigma, _alpha)
def test_monotone_in_q(q1, q2, sigma, alpha):
    lo, hi = sorted((q1, q2))
    r = np.asarray(jaxrdp.rdp(np.array([lo, hi]), sigma, alpha))
    assert r[1] >= r[0] * (1 - 1e-12)


@given(_q, _sigma, _sigma, _alpha)
def test_monotone_in_sigma(q, s1, s2, alpha):
    lo, hi = sorted((s1, s2))
    r = np.asarray(jaxrdp.rdp(q, np.array([lo, hi]), alpha))
    assert r[1] <= r[0] * (1 + 1e-12)


@given(_q, _sigma, _alpha, _alpha)
def test_monotone_in_alpha(q, sigma, a1, a2):
    lo, hi = sorted((a1, a2))
    r = np.asarray(jaxrdp.rdp(q, sigma, np.array([lo, hi])))
    assert r[1] >= r[0] * (1 - 1e-12)
    assert np.all(r > 0) and np.all(np.isfinite(r))


def _log_b_alpha(q, sigma, alpha):
    """log B_α = log E_{z∼μ}[(μ₀/μ)^α] = log E_{t∼N(0,1)}[(1 − q + q e^{t/σ − 1/2σ²})^{1−α}]."""
    with mp.workdps(40):
        q, sigma, alpha = mp.mpf(q), mp.mpf(sigma), mp.mpf(alpha)
        s = 1 / sigma

        def f(t):
            return mp.exp(-t * t / 2) * (1 - q + q * mp.exp(s * t - s * s / 2)) ** (1 - alpha)

        val = mp.quad(f, [-mp.inf, -10, -3, 0, 3, 10, mp.inf]) / mp.sqrt(2 * mp.pi)
        return float(mp.log(val))


@pytest.mark.parametrize(
    "q, sigma, alpha",
    [(0.01, 1.0, 2.0), (0.1, 2.0, 5.5), (0.3, 0.8, 1.5), (0.05, 4.0, 20.0), (0.5, 10.0, 3.0)],
)
def test_a_alpha_dominates_b_alpha(q, sigma, alpha):
    # Mironov–Talwar–Zhang 2019, Theorem 5 / Corollary 7: A_α ≥ B_α.
    log_b = _log_b_alpha(q, sigma, alpha)
    log_a = float(jaxrdp.log_a(q, sigma, alpha))
    assert log_b > 0
    assert log_a >= log_b


def test_default_orders_are_documented_superset_of_dp_accounting():
    orders = jaxrdp.DEFAULT_ORDERS
    assert orders.dtype == np.float64 and np.all(np.diff(orders) > 0) and orders.min() > 1
    assert set(np.round(DP_ACCOUNTING_ORDERS, 10)) <= set(np.round(orders, 10))
    assert not orders.flags.writeable
    assert math.isclose(orders[0], 1.01)


@pytest.mark.parametrize(
    "layout",
    [
        lambda o: o,
        lambda o: o[None, :],
        lambda o: o[None, None, :],
        lambda o: list(o),
    ],
    ids=["(K,)", "(1,K)", "(1,1,K)", "list"],
)
def test_every_shared_order_layout_takes_the_fast_path(layout):
    # The fast path and the elementwise path differ by ~1e-13 relative, so bitwise
    # equality with the 1-D call shows that the layout reached the same (fast) path.
    orders = np.asarray(kernels.DEFAULT_ORDERS)
    q = np.geomspace(1e-4, 0.1, 5)[:, None]
    sigma = np.geomspace(0.5, 10, 5)[:, None]
    expected = np.asarray(jaxrdp.rdp(q, sigma, orders))
    alpha = layout(orders)
    assert kernels._route(q, sigma, alpha, jnp.float64)[0] == "orders"
    got = np.asarray(jaxrdp.rdp(q, sigma, alpha))
    assert got.shape == np.broadcast_shapes(q.shape, np.shape(alpha))
    np.testing.assert_array_equal(got.reshape(expected.shape), expected)
    elementwise = np.asarray(jaxrdp.rdp(q[..., None], sigma[..., None], orders[:, None]))[..., 0]
    np.testing.assert_allclose(expected, elementwise, rtol=1e-12)


def test_orders_differing_per_cell_keep_the_elementwise_path():
    orders = np.stack([kernels.DEFAULT_ORDERS, kernels.DEFAULT_ORDERS + 0.5])
    q = np.array([[1e-3], [1e-2]])
    assert kernels._route(q, 1.1, orders, jnp.float64)[0] == "elementwise"
    got = np.asarray(jaxrdp.rdp(q, 1.1, orders))
    ref0 = np.asarray(jaxrdp.rdp(1e-3, 1.1, kernels.DEFAULT_ORDERS))
    ref1 = np.asarray(jaxrdp.rdp(1e-2, 1.1, kernels.DEFAULT_ORDERS + 0.5))
    np.testing.assert_allclose(got, np.stack([ref0, ref1]), rtol=1e-12)


def _traced_and_elementwise(q, sigma, orders, dtype):
    """(values of ``jit(rdp)`` with the orders traced, values of the elementwise path)."""
    q, sigma, orders = (jnp.asarray(v, dtype) for v in (q, sigma, orders))
    traced = jax.jit(jaxrdp.rdp)(q, sigma, orders)
    elementwise = kernels._rdp_jit(q[..., None], sigma[..., None], orders[:, None])[..., 0]
    return np.asarray(traced, np.float64), np.asarray(elementwise, np.float64)


@pytest.mark.parametrize("which", [0, 1, 2], ids=["jaxrdp", "dp_accounting", "opacus"])
def test_traced_standard_orders_run_the_shared_path(which):
    # The shared path and the elementwise one differ by up to ~1e-13 relative; traced
    # standard orders must give the concrete (shared-path) call's values to 1e-15, and the
    # elementwise values must be farther than that, so that the test tells them apart.
    orders = kernels._STANDARD_ORDERS[which]
    assert kernels._route(np.ones((5, 1)), np.ones((5, 1)), jnp.asarray(orders), jnp.float64)[0] \
        == "orders"  # concrete JAX array
    q = np.geomspace(1e-4, 0.1, 5)[:, None]
    sigma = np.geomspace(0.5, 10, 5)[:, None]
    concrete = np.asarray(jaxrdp.rdp(q, sigma, orders))
    with jax.enable_x64(True):
        traced, elementwise = _traced_and_elementwise(q, sigma, orders, jnp.float64)
    np.testing.assert_allclose(traced, concrete, rtol=1e-15, atol=0)
    np.testing.assert_allclose(elementwise, concrete, rtol=1e-12)
    assert np.max(np.abs(elementwise / concrete - 1)) > 1e-15


@pytest.mark.slow
def test_traced_orders_of_a_standard_length_but_other_values_are_exact():
    # Reversed, shifted by 0.05 and 1e-9 (below float32 resolution, not float64's): the
    # comparison fails as the program runs and the elementwise path answers; had the
    # shared path answered, the values would be those of the standard orders. Under vmap
    # over the orders, each row gets its own vector's values.
    orders = kernels._STANDARD_ORDERS[1]
    q = np.geomspace(1e-4, 0.1, 4)[:, None]
    sigma = np.geomspace(0.5, 10, 4)[:, None]
    with jax.enable_x64(True):
        standard, _ = _traced_and_elementwise(q, sigma, orders, jnp.float64)
        for other in (orders[::-1], orders + 0.05, orders + 1e-9):
            traced, elementwise = _traced_and_elementwise(q, sigma, other, jnp.float64)
            np.testing.assert_array_equal(traced, elementwise)
            assert not np.allclose(traced, standard, rtol=1e-12, atol=0)
        # vmap over the orders batches the comparison (both branches run, each row its own)
        batched = jax.jit(jax.vmap(jaxrdp.rdp, in_axes=(None, None, 0)))(
            jnp.asarray(q), jnp.asarray(sigma), jnp.stack([jnp.asarray(orders), jnp.asarray(orders[::-1])]))
        np.testing.assert_allclose(np.asarray(batched[0]), standard, rtol=1e-12, atol=0)
        np.testing.assert_allclose(np.asarray(batched[1]), standard[:, ::-1], rtol=1e-12, atol=0)


@pytest.mark.slow
def test_traced_standard_orders_in_float32_and_their_derivatives():
    orders = kernels._STANDARD_ORDERS[1]
    q = np.geomspace(1e-4, 0.1, 4)[:, None]
    sigma = np.geomspace(0.5, 10, 4)[:, None]
    q32, s32 = jnp.asarray(q, jnp.float32), jnp.asarray(sigma, jnp.float32)
    traced = jax.jit(jaxrdp.rdp)(q32, s32, jnp.asarray(orders, jnp.float32))
    static = jax.jit(lambda a, b: jaxrdp.rdp(a, b, orders))(q32, s32)
    np.testing.assert_array_equal(np.asarray(traced), np.asarray(static))
    # Derivatives, orders included, are the elementwise path's: against central
    # differences of the float64 values (measured 8e-8 in the orders; the shared path
    # alone would give 0 there).
    with jax.enable_x64(True):
        total = lambda a, b, o: jnp.sum(jaxrdp.rdp(a, b, o))  # noqa: E731
        args = (jnp.asarray(q), jnp.asarray(sigma), jnp.asarray(orders))
        grads = jax.jit(jax.grad(total, argnums=(0, 1, 2)))(*args)
        h = 1e-6
        values = lambda a, b, o: np.asarray(_traced_and_elementwise(a, b, o, jnp.float64)[1])  # noqa: E731
        fd_orders = (values(q, sigma, orders + h) - values(q, sigma, orders - h)).sum(axis=0) / (2 * h)
        fd_sigma = (values(q, sigma * (1 + h), orders) - values(q, sigma * (1 - h), orders)
                    ).sum(axis=1, keepdims=True) / (2 * h * sigma)
    np.testing.assert_allclose(np.asarray(grads[2]), fd_orders, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(grads[1]), fd_sigma, rtol=1e-6)


def test_empty_grids_give_empty_results():
    orders = kernels.DEFAULT_ORDERS
    assert jaxrdp.rdp(np.zeros((0, 1)), 1.0, orders).shape == (0, orders.size)
    assert jaxrdp.log_a(np.zeros((0,)), 1.0, 3.0).shape == (0,)
    eps, order = jaxrdp.epsilon(np.zeros((0,)), 1.0, 10, 1e-5)
    assert eps.shape == order.shape == (0,)


# --------------------------------------------------------------------------- grid path internals


def test_shared_series_truncation_is_below_its_bound():
    # The shared series of g/(C(α,2)x²) stops where the first omitted term is < 2⁻⁶⁰ of
    # the leading one at |x| = 0.01; against mpmath's exact g at the radius and inside.
    from jaxrdp import _logmath

    orders = np.array([1.0001, 1.1, 1.5, 2.5, 5.3, 9.9, 11.99])
    coef = _logmath.series_coefficients(tuple(orders.tolist()), 0.01)
    mp.mp.dps = 40
    worst = 0.0
    for i, a in enumerate(orders):
        for x in (-0.01, -0.004, 0.003, 0.01):
            exact = ((1 + mp.mpf(x)) ** a - 1 - a * mp.mpf(x)) / (mp.mpf(a) * (a - 1) / 2 * mp.mpf(x) ** 2)
            approx = sum(mp.mpf(c) * mp.mpf(x) ** j for j, c in enumerate(coef[i]))
            worst = max(worst, float(abs(approx / exact - 1)))
    assert worst < 1e-17  # measured 1.5e-18: the 9e-19 tail bound plus coefficient rounding


@pytest.mark.parametrize("tier", [0, 1, 2])
def test_scaled_tiers_match_the_elementwise_quadrature(tier):
    # The shift-free shared sums against the elementwise quadrature (itself checked
    # against mpmath above) over random cells of the tier's σ range, with q from 1e-300
    # to 1 − 1e-15 and orders up to just below SHARED_MAX_ORDER (where βL is largest and
    # the split product is used).
    from jaxrdp import _grid, _quadrature

    limit, panels, nodes = _grid.SHARED_TIERS[tier]
    assert limit <= _grid._SCALED_MAX_S
    low = _grid.SHARED_TIERS[tier - 1][0] if tier else 0.0
    frac = DP_ACCOUNTING_ORDERS[DP_ACCOUNTING_ORDERS != np.round(DP_ACCOUNTING_ORDERS)]
    alphas = tuple(float(a) for a in np.concatenate([[1.0001, 1.01], frac, [11.5, 11.99]]))
    rng = np.random.default_rng(tier)
    n = 192
    q = np.concatenate([10 ** rng.uniform(-300, -1, n // 2), 1 - 10 ** rng.uniform(-15, -0.3, n // 2)])
    s = np.concatenate([rng.uniform(low, limit, n - 8), np.full(8, limit)])
    with jax.enable_x64(True):
        q, sigma = jnp.asarray(q), jnp.asarray(1 / s)
        ref = np.asarray(jax.jit(lambda a, b: _grid.elementwise_log_a_minus_one(a, b, alphas, _quadrature.FLOAT64_CONFIG))(q, sigma))
        got = np.asarray(
            jax.jit(
                lambda a, b: _grid._scaled_log_a_minus_one(
                    a, jnp.log(a), jnp.log1p(-a), 1 / b, alphas, panels, nodes, limit
                )
            )(q, sigma)
        )
    assert np.all(np.isfinite(got))
    # log(A − 1) differences are relative errors of A − 1; below e^-200 the ulp of
    # log(A − 1) itself dominates, so those cells are compared relative to log(A − 1).
    # Measured (tiers 0, 1, 2): up to 7.4e-14, 8.5e-14 and 1.4e-13 (one ulp of
    # log(A − 1) ≈ 264 is 5.7e-14), and 2.2e-16.
    sizable = ref > -200
    # (log(A − 1) reaches about 14·(α s)²/2 with α s ≤ 12·limit: the large-exponent regime)
    assert sizable.sum() > 0.3 * ref.size and ref.max() > 60 * limit**2
    assert np.abs(got - ref)[sizable].max() < 3e-13
    assert np.max(np.abs(got / ref - 1)[~sizable]) < 1e-15


def test_grid_integer_orders_keep_precision_near_q_one():
    # With q near 1 the dominant binomial terms have k ≈ α; a formulation through
    # k·log(q/(1−q)) + α·log(1−q) cancels there (it was 1.3e-12 *below* the truth at
    # q = 1 − 1e-6, α = 4096, beyond the safety margin). Measured now: |error| ≤ 7e-14.
    orders = np.array([2.0, 3, 8, 17, 40, 63, 128, 256, 1024, 4096])
    for q in (0.9, 0.999, 0.999999):
        for sigma in (1e4, 50.0, 3.0):
            got = np.asarray(jaxrdp.log_a(np.array([[q]]), np.array([[sigma]]), orders))[0]
            ref = np.array([float(_stored_log_a_integer(q, sigma, int(a), 60)) for a in orders])
            raw = (got / ref) / (1 + kernels.FLOAT64_SAFETY_MARGIN) - 1
            assert np.abs(raw).max() < 2e-13, (q, sigma, raw)


def test_ladder_splits_regular_orders_and_leaves_the_rest():
    # dp_accounting's 90 fractional orders are β = m + j·0.1 (m, j ≤ 9) up to rounding;
    # 1.01 and 11.99 are not on that ladder and keep their own expm1.
    from jaxrdp import _grid

    frac = DP_ACCOUNTING_ORDERS[DP_ACCOUNTING_ORDERS != np.round(DP_ACCOUNTING_ORDERS)]
    beta = np.concatenate([[0.01], frac - 1.0, [10.99]])
    n_m, n_j, d, idx_m, idx_j = _grid._ladder(tuple(beta.tolist()))
    assert abs(d - 0.1) < 1e-15 and (n_m, n_j) == (10, 10)
    assert idx_m[0] == idx_m[-1] == -1 and np.all(idx_m[1:-1] >= 0)
    np.testing.assert_allclose(idx_m[1:-1] + idx_j[1:-1] * d, beta[1:-1], rtol=7.2e-15)
    # Irregular orders: no ladder worth its rungs.
    rng = np.random.default_rng(0)
    assert _grid._ladder(tuple(rng.uniform(0.05, 11, 40).tolist())) is None


def test_ladder_helpers_keep_full_relative_precision():
    # h(z) = expm1(z) − z and log(1 + x) − x/(1 + x) against 50-digit mpmath on both
    # sides of the switch between series and direct form (|z| = 1, |y| = 0.1).
    from jaxrdp import _grid

    mp.mp.dps = 50
    z = np.concatenate([np.geomspace(1e-9, 30, 40), -np.geomspace(1e-9, 30, 40), [1.0, -1.0]])
    x = np.concatenate([np.geomspace(1e-9, 1e6, 40), -np.geomspace(1e-9, 0.99, 40), [1 / 9, -1 / 11]])
    with jax.enable_x64(True):
        zj = jnp.asarray(z)
        h = np.asarray(_grid._expm1_minus_identity(zj, jnp.expm1(zj)))
        xj = jnp.asarray(x)
        gap = np.asarray(_grid._log1p_minus_ratio(jnp.log1p(xj), xj / (1 + xj)))
    h_ref = np.array([float(mp.expm1(mp.mpf(v)) - mp.mpf(v)) for v in z])
    gap_ref = np.array([float(mp.log1p(mp.mpf(v)) - mp.mpf(v) / (1 + mp.mpf(v))) for v in x])
    assert np.max(np.abs(h / h_ref - 1)) < 1e-15  # measured 2.2e-16
    # The direct form log1p(x) − y loses up to ~20 ulps just past |y| = 0.1.
    assert np.max(np.abs(gap / gap_ref - 1)) < 6e-15


def test_small_and_large_chunks_agree():
    # Chunks of fewer than 16 cells sum each fractional order over the nodes directly and
    # keep log expm1's full form; larger chunks use the ladder and, where every cell allows,
    # an exact head (σ ≤ 10: from k = 129 on; with σ = 100 in the chunk: nowhere). Same
    # cells either way, 1/σ up to 1.8 (the ladder's tiers).
    from jaxrdp import _grid

    rng = np.random.default_rng(3)
    n = 48
    q = 10 ** rng.uniform(-8, -0.01, n)
    sigma = 10 ** rng.uniform(np.log10(0.55), 1, n)
    plan = _grid.OrderPlan(tuple(DP_ACCOUNTING_ORDERS.tolist()))
    worst = 0.0
    for sig in (sigma, np.concatenate([[100.0, 60.0], sigma[2:]])):
        with jax.enable_x64(True):
            run = jax.jit(lambda a, b: _grid.log_a_minus_one(a, b, plan))
            big = np.asarray(run(jnp.asarray(q), jnp.asarray(sig)))
            small = np.concatenate([np.asarray(run(jnp.asarray(q[i:i + 8]), jnp.asarray(sig[i:i + 8])))
                                    for i in range(0, n, 8)])
        la_big, la_small = np.logaddexp(0, big), np.logaddexp(0, small)
        assert np.all(np.isfinite(la_big))
        worst = max(worst, float(np.max(np.abs(la_big / la_small - 1))))
    assert worst < 1e-13  # measured 1.3e-14
