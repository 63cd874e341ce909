"""Tests of fixed-size sampling without replacement (jaxrdp.wor) and its accountant API.

References: an mpmath evaluation (exact integer arithmetic for the forward differences,
high working precision) of the Wang–Balle–Kasiviswanathan bound as dp_accounting states
it; dp_accounting's ``_compute_rdp_sample_wor_gaussian`` and its RdpAccountant (integer
orders, where its float64 sum is exact, i.e. agrees with the mpmath value); the
accountant's own ``get_epsilon`` for the steps-remaining closed form (T fits, T + 1 not).
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import mpmath as mp
import numpy as np
import pytest

from jaxrdp import accountant, kernels, wor
from stored import stored

dpa = pytest.importorskip("dp_accounting")
from dp_accounting import dp_event  # noqa: E402
from dp_accounting.rdp import rdp_privacy_accountant as dp_rdp  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::jaxrdp.conversions.OrderAtEdgeWarning")

INT_ORDERS = np.array(
    [2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 48, 64, 128, 256, 257, 320, 512, 1024.0]
)


# --------------------------------------------------------------------------- mpmath reference


@functools.lru_cache(maxsize=None)
def _mp_forward_differences(sigma: float, max_l: int, dps: int):
    """``D_l = Σ_i (−1)^{l−i} C(l,i) e^{c i(i−1)}`` exactly enough at ``dps`` digits."""
    with mp.workdps(dps):
        c = 1 / (2 * mp.mpf(sigma) ** 2)
        f = [mp.e ** (c * i * (i - 1)) for i in range(max_l + 1)]
        return [
            sum((-1) ** (l - i) * mp.binomial(l, i) * f[i] for i in range(l + 1))
            for l in range(max_l + 1)
        ]


@stored(depends=(_mp_forward_differences,))
def mp_log_moment(q: float, sigma: float, alpha: int, dps: int = 400):
    """log A_α of WBK Theorem 9 (+ Theorem 27 for α ≤ 256), as dp_accounting states it."""
    with mp.workdps(dps):
        q, s = mp.mpf(q), mp.mpf(sigma)
        c = 1 / (2 * s**2)
        total = q**2 * mp.binomial(alpha, 2) * min(4 * mp.expm1(2 * c), 2 * mp.e ** (2 * c))
        d = _mp_forward_differences(float(sigma), 257, dps) if alpha <= 256 else None
        for j in range(3, alpha + 1):
            plain = 2 * mp.e ** (c * j * (j - 1))
            if alpha <= 256:
                lo, hi = d[2 * (j // 2)], d[2 * ((j + 1) // 2)]
                plain = min(4 * mp.sqrt(lo * hi), plain)
            total += q**j * mp.binomial(alpha, j) * plain
        return mp.log1p(total)


def test_mp_reference_is_independent_of_the_series():
    # D_2 = e^{2c} − 1 and D_4 = e^{12c} − 4e^{6c} + 6e^{2c} − 3 in closed form.
    d = _mp_forward_differences(1.7, 4, 50)
    with mp.workdps(50):
        c = mp.mpf(1) / (2 * mp.mpf(1.7) ** 2)
        assert abs(d[2] - mp.expm1(2 * c)) < mp.mpf(10) ** -40
        d4 = mp.e ** (12 * c) - 4 * mp.e ** (6 * c) + 6 * mp.e ** (2 * c) - 3
        assert abs(d[4] - d4) < mp.mpf(10) ** -40


# --------------------------------------------------------------------------- the kernel


CELLS = [(1e-3, 0.8), (0.01, 1.0), (0.02, 1.5), (0.05, 2.0), (0.1, 0.7), (0.2, 4.0), (0.004, 5.0),
         (0.5, 3.0), (0.3, 1.1)]


@pytest.mark.parametrize("q, sigma", CELLS)
def test_integer_orders_match_dp_accounting(q, sigma):
    mine = np.asarray(wor.rdp(sigma, INT_ORDERS, q=q))
    ref = dp_rdp._compute_rdp_sample_wor_gaussian(q, sigma, INT_ORDERS)
    gaussian = INT_ORDERS / (2 * sigma**2)
    capped = ref > gaussian
    # Where the Gaussian's own RDP is smaller, it is reported (sound, and below dp_accounting).
    np.testing.assert_allclose(mine[capped], gaussian[capped], rtol=1e-14)
    exact = []
    for a, r in zip(INT_ORDERS[~capped], ref[~capped]):
        truth = float(mp_log_moment(q, sigma, int(a), dps=60 if a > 256 else 120)) / (a - 1)
        exact.append(abs(r / truth - 1) < 1e-12)  # dp_accounting's float64 sum is exact here
    exact = np.array(exact)
    assert exact.mean() > 0.8
    err = np.abs(mine[~capped][exact] / ref[~capped][exact] - 1)
    assert err.max() < 1e-9, err.max()


@pytest.mark.parametrize("q, sigma", [(0.05, 6.0), (0.3, 10.0), (0.2, 2.9), (0.2, 3.1), (0.9, 0.5)])
def test_never_below_mpmath_and_close_to_it(q, sigma):
    orders = np.array([2, 3, 4, 7, 12, 33, 64, 100, 256.0])
    mine = np.asarray(wor.log_moment(sigma, orders, q=q))
    truth = np.array([float(mp_log_moment(q, sigma, int(a))) for a in orders])
    truth = np.minimum(truth, (orders - 1) * orders / (2 * sigma**2))
    assert np.all(mine >= truth)
    assert np.max(mine / truth - 1) < 1e-9


def test_fractional_orders_chord_never_below_dp_accounting():
    orders = np.array([1.01, 1.5, 2.5, 3.3, 7.75, 10.5, 63.9, 200.5, 300.5])
    for q, sigma in CELLS:
        mine = np.asarray(wor.rdp(sigma, orders, q=q))
        ref = dp_rdp._compute_rdp_sample_wor_gaussian(q, sigma, orders)
        gaussian = orders / (2 * sigma**2)
        bound = np.minimum(ref, gaussian * (1 + 1e-15))
        assert np.all(mine >= bound * (1 - 1e-12))
        assert np.all(mine <= bound * (1 + 1e-9))


def test_sizes_and_special_values():
    orders = np.array([2.0, 8.0, 32.0, np.inf])
    by_sizes = np.asarray(wor.rdp(1.3, orders, batch_size=50, dataset_size=1000))
    by_q = np.asarray(wor.rdp(1.3, orders, q=0.05))
    np.testing.assert_array_equal(by_sizes, by_q)
    assert by_sizes[-1] == np.inf
    np.testing.assert_allclose(
        np.asarray(wor.rdp(1.3, orders[:3], batch_size=7, dataset_size=7)),
        orders[:3] / (2 * 1.3**2), rtol=1e-14)
    assert np.all(np.asarray(wor.rdp(np.inf, orders, q=0.1)) == 0)
    assert np.all(np.asarray(wor.rdp(1.0, orders, q=0.0)) == 0)
    assert np.all(np.asarray(wor.rdp(0.0, orders, q=0.1)) == np.inf)
    # Batched σ and sizes: shape S + (K,).
    grid = np.asarray(wor.rdp(np.array([1.0, 2.0]), orders[:3], batch_size=np.array([10, 20]),
                              dataset_size=100))
    assert grid.shape == (2, 3)
    np.testing.assert_allclose(grid[1], np.asarray(wor.rdp(2.0, orders[:3], q=0.2)), rtol=1e-15)


def test_traced_orders_and_float32():
    orders = np.asarray(kernels.DEFAULT_ORDERS, dtype=np.float64)
    eager = np.asarray(wor.rdp(1.1, orders, batch_size=64, dataset_size=5000))
    with jax.enable_x64(True):
        traced = jax.jit(lambda o: wor.rdp(1.1, o, batch_size=64, dataset_size=5000))(
            jnp.asarray(orders))
    np.testing.assert_allclose(np.asarray(traced), eager, rtol=1e-13)
    f32 = np.asarray(jax.jit(lambda o: wor.rdp(1.1, o, batch_size=64, dataset_size=5000))(
        jnp.asarray(orders, jnp.float32)))
    assert f32.dtype == np.float32
    assert np.all(f32.astype(np.float64) >= eager)  # float32 is sound ...
    assert np.max(f32 / eager - 1) < 2e-2  # ... and looser by its outward margin
    big = jax.jit(lambda o: wor.rdp(1.1, o, q=0.01))(jnp.array([2.0, 2048.0]))
    assert np.isfinite(big[0]) and big[1] == np.inf  # above TRACED_MAX_ORDER: no guarantee


@pytest.mark.parametrize(
    "kwargs, name",
    [
        (dict(batch_size=11, dataset_size=10), "batch_size"),
        (dict(batch_size=0, dataset_size=10), "batch_size"),
        (dict(batch_size=2.5, dataset_size=10), "batch_size"),
        (dict(batch_size=2, dataset_size=-3), "dataset_size"),
        (dict(batch_size=2, dataset_size=7.5), "dataset_size"),
        (dict(batch_size=True, dataset_size=7), "batch_size"),
        (dict(q=0.3, dataset_size=1001), "q"),  # 300.3 records: ambiguous
        (dict(q=0.3, batch_size=7), "q"),  # N = 23.33: ambiguous
        (dict(q=0.3, batch_size=30, dataset_size=200), "q"),  # inconsistent
        (dict(q=1.5), "q"),
        (dict(batch_size=5), "dataset_size"),
    ],
)
def test_bad_input_names_the_argument(kwargs, name):
    with pytest.raises(ValueError, match=name):
        wor.rdp(1.0, [2.0, 3.0], **kwargs)


def test_bad_input_under_jit_is_nan():
    f = jax.jit(lambda b, n, s: wor.rdp(s, jnp.array([2.0, 4.0]), batch_size=b, dataset_size=n))
    assert np.all(np.isnan(f(11, 10, 1.0)))
    assert np.all(np.isnan(f(0, 10, 1.0)))
    assert np.all(np.isnan(f(2.5, 10.0, 1.0)))
    assert np.all(np.isnan(f(2, 10, -1.0)))
    assert np.all(np.isfinite(f(2, 10, 1.0)))


# --------------------------------------------------------------------------- accountant


def test_compose_wor_in_graph_matches_host_and_dp_accounting():
    b, n, sigma, steps = 64, 2000, 0.9, 300
    host = accountant.RdpAccountant().compose_wor(sigma, batch_size=b, dataset_size=n, steps=steps)
    ref = dp_rdp.RdpAccountant(neighboring_relation=dp_rdp.NeighborRel.REPLACE_ONE)
    ref.compose(dp_event.SampledWithoutReplacementDpEvent(n, b, dp_event.GaussianDpEvent(sigma)),
                steps)
    assert abs(host.get_epsilon(1e-5) / ref.get_epsilon(1e-5) - 1) < 1e-9

    with jax.enable_x64(True):
        def body(state, _):
            return accountant.compose_wor(state, sigma, batch_size=b, dataset_size=n), None

        state, _ = jax.jit(lambda s: jax.lax.scan(body, s, None, length=steps))(
            accountant.init(dtype=jnp.float64))
    np.testing.assert_allclose(np.asarray(accountant._total(state)), host.rdp, rtol=1e-12)

    via_event = accountant.RdpAccountant().compose(
        dp_event.SampledWithoutReplacementDpEvent(n, b, dp_event.GaussianDpEvent(sigma)), steps)
    np.testing.assert_allclose(via_event.rdp, host.rdp, rtol=1e-14)


@pytest.mark.parametrize("relation", ["poisson", "wor"])
def test_export_round_trip_through_dp_accounting(relation):
    acc = accountant.RdpAccountant(orders=np.arange(2, 65, dtype=np.float64))
    if relation == "poisson":
        acc.compose_sgm(0.01, 1.1, 1000).compose(0.02, 2.0, 50)
        acc.compose(dp_event.GaussianDpEvent(20.0), 2)
        rel = dp_rdp.NeighborRel.ADD_OR_REMOVE_ONE
    else:
        acc.compose_wor(1.2, batch_size=100, dataset_size=6000, steps=700)
        acc.compose(dp_event.SampledWithoutReplacementDpEvent(
            6000, 50, dp_event.GaussianDpEvent(2.0)), 10)
        rel = dp_rdp.NeighborRel.REPLACE_ONE
    ref = dp_rdp.RdpAccountant(orders=list(range(2, 65)), neighboring_relation=rel)
    ref.compose(acc.to_dp_event())
    assert abs(acc.get_epsilon(1e-6) / ref.get_epsilon(1e-6) - 1) < 1e-9


def test_relations_are_not_mixed():
    acc = accountant.RdpAccountant().compose_sgm(0.01, 1.0, 10)
    with pytest.raises(ValueError, match="neighbouring"):
        acc.compose_wor(1.0, batch_size=10, dataset_size=1000)
    acc = accountant.RdpAccountant().compose_wor(1.0, batch_size=10, dataset_size=1000)
    with pytest.raises(ValueError, match="neighbouring"):
        acc.compose(dp_event.PoissonSampledDpEvent(0.01, dp_event.GaussianDpEvent(1.0)), 3)
    acc.compose_sgm(1.0, 5.0)  # a plain Gaussian is fine under either relation
    assert acc.neighboring_relation == "replace_one"


# --------------------------------------------------------------------------- steps remaining


def _eps(state, curve, t, delta):
    return float(accountant.get_epsilon(accountant.compose_rdp_curve(state, curve, t), delta)[0])


@pytest.mark.parametrize("dtype", [jnp.float64, jnp.float32])
@pytest.mark.parametrize(
    "q, sigma, budget, delta, already",
    [(0.01, 1.1, 3.0, 1e-5, 0), (0.004, 0.9, 1.0, 1e-6, 100), (0.1, 4.0, 8.0, 1e-5, 10),
     (0.05, 0.7, 0.5, 1e-5, 0)],
)
def test_steps_remaining_is_exact(dtype, q, sigma, budget, delta, already):
    with jax.enable_x64(dtype == jnp.float64):
        state = accountant.compose(accountant.init(dtype=dtype), q, sigma, already)
        t = jax.jit(accountant.steps_remaining)(state, budget, delta, q, sigma)
        curve = kernels.rdp(jnp.asarray(q, dtype), jnp.asarray(sigma, dtype), state.orders)
        t = float(t)
        assert t == math.floor(t) and t >= 0
        if t > 0:
            assert _eps(state, curve, t, delta) <= budget
        assert _eps(state, curve, t + 1, delta) > budget


def test_steps_remaining_wor_and_edge_cases():
    state = accountant.compose_wor(accountant.init(dtype=jnp.float64), 1.5, batch_size=32,
                                   dataset_size=1000, steps=40)
    curve = wor.rdp(1.5, np.asarray(state.orders), batch_size=32, dataset_size=1000)
    t = float(accountant.steps_remaining_rdp(state, 4.0, 1e-5, curve))
    assert t > 0 and _eps(state, curve, t, 1e-5) <= 4.0 < _eps(state, curve, t + 1, 1e-5)
    assert float(accountant.steps_remaining_rdp(state, 0.1, 1e-5, curve)) == 0  # over budget
    assert float(accountant.steps_remaining(state, 4.0, 1e-5, 0.0, 1.0)) == np.inf
    with pytest.raises(ValueError, match="target_delta"):
        accountant.steps_remaining(state, 1.0, 0.0, 0.01, 1.0)
    nan = jax.jit(accountant.steps_remaining)(accountant.init(), 1.0, -1e-5, 0.01, 1.0)
    assert np.isnan(nan)


@pytest.mark.parametrize("name", wor.__all__)
def test_public_names_documented(name):
    import inspect

    obj = getattr(wor, name)
    if callable(obj):
        doc = inspect.getdoc(obj)
        assert doc and "Args:" in doc and "Returns:" in doc, name
    else:
        source = inspect.getsource(wor).splitlines()
        line = next(i for i, text in enumerate(source) if text.startswith(f"{name} = "))
        assert source[line - 1].startswith("#:"), name


def test_orders_above_max_order_are_infinite():
    out = np.asarray(wor.rdp(1.0, [2.0, 4096.0, 5000.0], q=0.01))
    ref = dp_rdp._compute_rdp_sample_wor_gaussian(0.01, 1.0, [2.0, 4096.0])
    np.testing.assert_allclose(out[:2], ref, rtol=1e-9)
    assert out[2] == np.inf
