"""Double-float32 primitives against mpmath, compiled with ``jax.jit`` as the kernel uses them."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import mpmath as mp
import numpy as np
import pytest

from jaxrdp import _doublefloat as dd



@pytest.fixture(autouse=True)
def _mp_precision():
    """50 digits for this module's references, restored afterwards (no global state)."""
    with mp.workdps(50):
        yield


def _mp(x: dd.DoubleFloat):
    return [mp.mpf(float(h)) + mp.mpf(float(lo)) for h, lo in zip(np.asarray(x.hi), np.asarray(x.lo))]


def _inputs(rng, lo, hi, n=400):
    """float32 hi parts in [lo, hi] with lo parts of a double-float's size."""
    h = rng.uniform(lo, hi, n).astype(np.float32)
    return h, (h * rng.uniform(-2.9e-8, 2.9e-8, n)).astype(np.float32)


def test_two_sum_and_two_prod_are_exact_under_jit():
    rng = np.random.default_rng(0)
    a = (rng.standard_normal(500) * 10 ** rng.uniform(-5, 5, 500)).astype(np.float32)
    b = (rng.standard_normal(500) * 10 ** rng.uniform(-5, 5, 500)).astype(np.float32)
    s = jax.jit(dd.two_sum)(a, b)
    p = jax.jit(dd.two_prod)(a, b)
    for x, y, got_s, got_p in zip(a, b, _mp(s), _mp(p)):
        x, y = mp.mpf(float(x)), mp.mpf(float(y))
        assert got_s == x + y
        assert abs(got_p - x * y) <= abs(x * y) * 2.0**-46


def test_mul_short_is_double_float_accurate_for_twelve_bit_factors():
    # c: integers up to 4 096 and halves of integers below it (the float32 integer-order
    # terms multiply by k and (k − 1)/2), against the exact product of the double-float a and c.
    rng = np.random.default_rng(4)
    h = (rng.standard_normal(400) * 10 ** rng.uniform(-6, 6, 400)).astype(np.float32)
    lo = (h * rng.uniform(-2.9e-8, 2.9e-8, 400)).astype(np.float32)
    c = np.float32(np.concatenate([rng.integers(1, 4097, 300), rng.integers(1, 4096, 100) / 2]))
    got = _mp(jax.jit(lambda h, lo, c: dd.mul_short(dd.DoubleFloat(h, lo), c))(h, lo, c))
    worst = max(abs(v / ((mp.mpf(float(x)) + mp.mpf(float(y))) * mp.mpf(float(z))) - 1)
                for v, x, y, z in zip(got, h, lo, c))
    assert worst < 2.0**-47  # measured 2.7e-15 (0.19·2⁻⁴⁶): roundings of a.lo·c and of a low part


def test_constants_survive_xla_simplification():
    # XLA rewrites (x + 1) − 1 into x; TwoSum's error term must not vanish with it.
    q = jnp.asarray(np.float32([0.015986888, 0.1, 1e-3]))
    out = jax.jit(lambda q: dd.two_sum(dd.full_like(q, 1.0).hi, -q))(q)
    for got, x in zip(_mp(out), np.asarray(q)):
        assert got == 1 - mp.mpf(float(x))
    assert float(out.lo[0]) != 0.0


def test_exp_is_double_float_accurate():
    h, lo = _inputs(np.random.default_rng(1), -60.0, 80.0)
    got = _mp(jax.jit(lambda h, lo: dd.exp(dd.DoubleFloat(h, lo)))(h, lo))
    for x, y, v in zip(h, lo, got):
        exact = mp.exp(mp.mpf(float(x)) + mp.mpf(float(y)))
        # A double-float argument is known to about |x|·2⁻⁴⁸, which bounds e^x's precision.
        assert abs(v / exact - 1) < 1e-14 * max(1.0, abs(float(x)))


def test_exp_flushes_to_zero_below_range():
    out = jax.jit(lambda h: dd.exp(dd.from_float(h)))(jnp.float32([-90.0, -1e4]))
    assert np.all(np.asarray(out.hi) == 0) and np.all(np.asarray(out.lo) == 0)


@pytest.mark.parametrize("lo, hi", [(1e-25, 1e-20), (1e-3, 10.0), (0.5, 2.0), (1e10, 1e37)])
def test_log_is_double_float_accurate(lo, hi):
    h, low = _inputs(np.random.default_rng(2), lo, hi)
    got = _mp(jax.jit(lambda h, low: dd.log(dd.DoubleFloat(h, low)))(h, low))
    for x, y, v in zip(h, low, got):
        exact = mp.log(mp.mpf(float(x)) + mp.mpf(float(y)))
        assert abs(v - exact) < 1e-13 * max(1.0, abs(exact))


def test_log_near_one_keeps_absolute_precision():
    q = (10 ** np.random.default_rng(3).uniform(-7, -0.3, 300)).astype(np.float32)
    got = _mp(jax.jit(lambda q: dd.log(dd.two_sum(dd.full_like(q, 1.0).hi, -q)))(q))
    for x, v in zip(q, got):
        assert abs(v - mp.log(1 - mp.mpf(float(x)))) < 3e-14


def test_div_is_double_float_accurate():
    rng = np.random.default_rng(4)
    a = rng.uniform(-1e4, 1e4, 300).astype(np.float32)
    b = rng.uniform(0.2, 1e4, 300).astype(np.float32)
    got = _mp(jax.jit(lambda a, b: dd.div(dd.from_float(a), dd.from_float(b)))(a, b))
    for x, y, v in zip(a, b, got):
        exact = mp.mpf(float(x)) / mp.mpf(float(y))
        assert abs(v / exact - 1) < 1e-13
