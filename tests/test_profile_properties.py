"""Properties of the public privacy-profile API (``jaxrdp.profile``), checked against references.

Four groups, all through the public functions ``profile.delta`` / ``profile.epsilon`` only:

1. hypothesis properties: monotonicity of δ(ε) and ε(δ) in every argument, δ ≤ RDP's δ,
   ε ≤ RDP's ε, no NaN, δ ∈ [0, 1], and δ never below the closed forms (q = 1, T = 1);
2. gradients in σ and q against mpmath derivatives of the closed forms;
3. dp_accounting's PLD as a bracket on typical DP-SGD runs;
4. the corners of the domain of issue 11 in batched calls.

The implementation compiles once per input shape, so every call here goes through
:func:`_batched`, which pads to blocks of ``_N`` cells (one shape for the whole file).
"""

from __future__ import annotations

import collections
import math

import jax
import jax.numpy as jnp
import mpmath as mp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import jaxrdp
from jaxrdp import profile

from helpers import pld_distribution
from stored import stored

import profile_reference as ref

_N = 16  # cells per call: every call of this file has this one shape
_DUMMY = (0.5, 1.0, 10, 1.0)  # a cheap, well-conditioned cell for padding


def _batched(fn, q, sigma, steps, x):
    """``fn(q, σ, T, x)`` on 1-d inputs, in blocks of ``_N`` cells; NumPy fields back."""
    q, sigma, steps, x = np.broadcast_arrays(*(np.asarray(v, np.float64) for v in (q, sigma, steps, x)))
    n = q.size
    m = -(-n // _N) * _N
    cols = [np.concatenate([v.ravel(), np.full(m - n, d)]) for v, d in zip((q, sigma, steps, x), _DUMMY)]
    parts = [fn(*(c[i:i + _N] for c in cols)) for i in range(0, m, _N)]
    return type(parts[0])(*(np.concatenate([np.asarray(p[k]) for p in parts])[:n]
                           for k in range(len(parts[0]))))


def _delta(q, sigma, steps, eps):
    return _batched(profile.delta, q, sigma, steps, eps)


def _epsilon(q, sigma, steps, dlt):
    return _batched(profile.epsilon, q, sigma, steps, dlt)


def _exact_delta(q, sigma, steps, eps, dps=40):
    """δ(ε) from a closed form (q = 1: Gaussian; T = 1: single step, max of directions)."""
    if q == 1.0:
        return ref.gaussian_delta(eps, sigma, int(steps), dps)
    if int(steps) == 1:
        return max(ref.single_step_delta(q, sigma, eps, d, dps) for d in ("remove", "add"))
    raise ValueError("no closed form")


# ----------------------------------------------------------------------------------------------
# 1. hypothesis properties
# ----------------------------------------------------------------------------------------------

_LADDER = 4  # values per ladder; 4 ladders (one per argument) fill one block of _N cells


def _ladders(base, factor, x_max=np.inf):
    """Four ladders of ``_LADDER`` cells, each increasing one argument from ``base``
    (q capped at 1, the last argument at ``x_max``).

    Returns columns (q, σ, T, x) of ``4·_LADDER`` cells; ladder ``j`` varies argument ``j``.
    """
    cols = [[], [], [], []]
    for j in range(4):
        for i in range(_LADDER):
            cell = list(base)
            v = base[j] * factor[j] ** i
            if j == 0:
                v = min(v, 1.0)
            if j == 3:
                v = min(v, x_max)
            if j == 2:
                v = float(round(base[2] * factor[2] ** i)) + i  # strictly increasing integers
            cell[j] = v
            for k in range(4):
                cols[k].append(cell[k])
    return [np.array(c) for c in cols]


def _pairs():
    """(lo, hi) indices of all pairs within each ladder, lo having the smaller argument."""
    for j in range(4):
        for a in range(_LADDER):
            for b in range(a + 1, _LADDER):
                yield j, j * _LADDER + a, j * _LADDER + b


_Q = st.floats(math.log(0.02), math.log(0.5)).map(math.exp)
_SIGMA = st.floats(0.7, 3.0)
_STEPS = st.integers(20, 1000)
_factors = st.tuples(st.floats(1.02, 1.6), st.floats(1.02, 1.4), st.floats(1.05, 2.0), st.floats(1.05, 2.0))


@pytest.mark.slow
def test_delta_monotone_and_bounded():
    """δ(ε) is non-increasing in ε and σ, non-decreasing in q and T (issue 11).

    The returned ``.delta`` is an *upper bound* D ≥ δ; D = est + err with |est − δ| ≤ err =
    r·est (r = ``rel_error``) where the profile value is returned, hence
    D ≤ δ·(1 + r)/(1 − r). So for two cells where the true δ must satisfy δ₂ ≤ δ₁:

    * always: D₂ ≤ RDP's δ₁ (D ≤ RDP δ, and the RDP δ is monotone too), up to rounding;
    * where cell 2 returns the profile value with r₂ < 1 (status not RDP_FALLBACK):
      D₂ ≤ δ₂(1 + r₂)/(1 − r₂) ≤ δ₁(1 + r₂)/(1 − r₂) ≤ D₁(1 + r₂)/(1 − r₂).

    Neither needs the cell with the larger true δ to be tight. Also: D ≤ RDP δ, D ∈ [0, 1],
    no NaN. The ranges are DP-SGD-like (q·√T ≳ 0.3) so that most pairs get the strong check;
    the test requires that at least half of the pairs did.
    """
    stats = collections.Counter()

    @settings(max_examples=12, deadline=None, derandomize=True)
    @given(base=st.tuples(_Q, _SIGMA, _STEPS, st.floats(0.3, 4.0)),
           factor=_factors)
    def run(base, factor):
        q, s, t, e = _ladders(base, factor)
        res = _delta(q, s, t, e)
        d, rdp, r, status = res.delta, res.delta_rdp, res.rel_error, res.status
        assert not np.any(np.isnan(d)) and np.all((d >= 0) & (d <= 1))
        assert np.all(d <= rdp * (1 + 1e-12))
        for j, a, b in _pairs():
            # ε (j = 3) and σ (j = 1): the larger argument b has the smaller δ; q, T: a has.
            lo, hi = (b, a) if j in (1, 3) else (a, b)
            if j == 0 and q[a] == q[b]:
                continue
            assert d[lo] <= rdp[hi] * (1 + 1e-12), (j, res, lo, hi)
            if status[lo] != profile.RDP_FALLBACK and r[lo] < 1:
                assert d[lo] <= d[hi] * (1 + r[lo]) / (1 - r[lo]) * (1 + 1e-12), (j, q, s, t, e, d, r)
                stats["strong"] += 1
            else:
                stats["weak"] += 1
        stats.update(f"status{k}" for k in status.tolist())

    run()
    print("delta monotone:", dict(stats))
    assert stats["strong"] >= stats["weak"]


def _log_slope(q, s, t, e, h=1e-3):
    """|d log δ/dε| at ε = e by a central difference of the profile δ (a tolerance scale)."""
    up = _delta(q, s, t, e * (1 + h)).delta
    dn = _delta(q, s, t, e * (1 - h)).delta
    with np.errstate(divide="ignore", invalid="ignore"):
        return (np.log(dn) - np.log(up)) / (2 * h * e)


def test_epsilon_monotone_and_bounded():
    """ε(δ) is non-increasing in δ and σ, non-decreasing in q and T.

    The returned ``.epsilon`` E is sound (E ≥ true ε) and, with status PROFILE_OK, the profile
    bound at E is within a relative r ≤ 1e-6 of the true δ, so the bisection stops at most
    2r/s above the true ε, s = |d log δ/dε| there (plus its width, ~1e-15·E). For two cells
    whose true ε satisfy ε₂ ≤ ε₁:

    * always: E₂ ≤ RDP's ε₁ (E ≤ RDP ε, monotone), up to rounding;
    * where cell 2 is PROFILE_OK: E₂ ≤ ε₂ + 2e-6/s₂ ≤ ε₁ + 2e-6/s₂ ≤ E₁ + 5e-6/s₂ + 1e-9·E₂,
      s₂ from a central difference (h = 1e-3) of the returned δ(ε) at E₂.

    Also E ≤ RDP ε, no NaN, E ≥ 0. At least half of the pairs must get the strong check.
    """
    stats = collections.Counter()

    @settings(max_examples=8, deadline=None, derandomize=True)
    @given(base=st.tuples(_Q, _SIGMA, _STEPS,
                          st.floats(math.log(1e-8), math.log(1e-2)).map(math.exp)),
           factor=st.tuples(st.floats(1.02, 1.6), st.floats(1.02, 1.4), st.floats(1.05, 2.0),
                            st.floats(1.5, 10.0)))
    def run(base, factor):
        q, s, t, dl = _ladders(base, factor, x_max=0.5)
        res = _epsilon(q, s, t, dl)
        e, rdp, status = res.epsilon, res.epsilon_rdp, res.status
        assert not np.any(np.isnan(e)) and np.all(e >= 0)
        assert np.all(e <= rdp * (1 + 1e-12))
        ok = (status == profile.PROFILE_OK) & (e > 0)
        slope = np.full(e.shape, np.nan)
        if ok.any():
            slope[ok] = _log_slope(q[ok], s[ok], t[ok], e[ok])
        for j, a, b in _pairs():
            # σ (j = 1) and δ (j = 3): the larger argument b has the smaller ε; q, T: a has.
            lo, hi = (b, a) if j in (1, 3) else (a, b)
            if (j == 0 and q[a] == q[b]) or (j == 3 and dl[a] == dl[b]):
                continue
            assert e[lo] <= rdp[hi] * (1 + 1e-12), (j, q, s, t, dl, e, rdp)
            if ok[lo] and slope[lo] > 0:
                tol = 5e-6 / slope[lo] + 1e-9 * e[lo]
                assert e[lo] <= e[hi] + tol, (j, lo, hi, q, s, t, dl, e, slope)
                stats["strong"] += 1
            else:
                stats["weak"] += 1
        stats.update(f"status{k}" for k in status.tolist())

    run()
    print("epsilon monotone:", dict(stats))
    assert stats["strong"] >= stats["weak"]


@settings(max_examples=6, deadline=None, derandomize=True)
@given(
    qs=st.lists(st.floats(math.log(1e-3), 0.0).map(math.exp), min_size=_N // 2, max_size=_N // 2),
    sig=st.lists(st.floats(0.5, 5.0), min_size=_N, max_size=_N),
    steps=st.lists(st.integers(1, 2000), min_size=_N // 2, max_size=_N // 2),
    eps=st.lists(st.floats(0.01, 8.0), min_size=_N, max_size=_N),
)
def test_delta_never_below_closed_forms(qs, sig, steps, eps):
    """Soundness on random points with a closed form: half q = 1 (any T), half T = 1 (any q).

    ``.delta`` ≥ exact δ (40-digit mpmath) up to float64 rounding of the result (1e-12
    relative); also ≤ RDP δ, in [0, 1], never 0 where the exact δ is ≥ 1e-300.
    """
    q = np.array([1.0] * (_N // 2) + qs)
    t = np.array(steps + [1] * (_N // 2), dtype=float)
    s, e = np.array(sig), np.array(eps)
    res = _delta(q, s, t, e)
    exact = np.array([float(_exact_delta(*c)) for c in zip(q, s, t, e)])
    d = res.delta
    assert not np.any(np.isnan(d)) and np.all((d >= 0) & (d <= 1))
    assert np.all(d >= exact * (1 - 1e-12)), np.c_[q, s, t, e, d, exact, res.status]
    assert np.all(d[exact >= 1e-300] > 0)
    assert np.all(d <= res.delta_rdp * (1 + 1e-12))


# ----------------------------------------------------------------------------------------------
# 2. gradients against mpmath derivatives of the closed forms
# ----------------------------------------------------------------------------------------------

# (q, σ, T, ε): q = 1 (exact Gaussian, any T) and T = 1 (single-step closed form, any q)
_GRAD_DELTA_CELLS = [
    (1.0, 1.0, 10, 1.0), (1.0, 2.0, 10, 1.0), (1.0, 5.0, 100, 0.5), (1.0, 2.0, 100, 3.0),
    (1.0, 1.5, 50, 2.0), (1.0, 0.8, 20, 4.0), (1.0, 4.0, 300, 2.0), (1.0, 5.0, 10, 3.0),
    (0.3, 1.0, 1, 1.0), (0.1, 1.0, 1, 0.5), (0.5, 2.0, 1, 0.2), (0.3, 0.5, 1, 2.0),
    (0.8, 1.0, 1, 1.0), (0.2, 3.0, 1, 0.05), (0.05, 1.5, 1, 0.3), (0.6, 0.7, 1, 1.5),
]
# (q, σ, T, δ)
_GRAD_EPS_CELLS = [
    (1.0, 3.0, 1000, 1e-5), (1.0, 2.0, 100, 1e-3), (1.0, 5.0, 300, 1e-5), (1.0, 4.0, 100, 1e-6),
    (1.0, 10.0, 1000, 1e-5), (1.0, 3.0, 200, 1e-2), (1.0, 6.0, 2000, 1e-8), (1.0, 2.5, 100, 1e-4),
    (0.3, 1.0, 1, 1e-3), (0.1, 1.0, 1, 1e-3), (0.5, 2.0, 1, 1e-2), (0.3, 0.5, 1, 1e-6),
    (0.8, 1.0, 1, 1e-5), (0.2, 1.0, 1, 1e-2), (0.05, 0.7, 1, 1e-4), (0.6, 0.7, 1, 1e-3),
]


def _columns(cells):
    return [np.array(c, dtype=np.float64) for c in zip(*cells)]


def _mp_log_delta(q, sigma, steps, eps):
    return mp.log(_exact_delta(q, sigma, steps, eps, dps=50))


@stored
def _mp_partials(q, sigma, steps, eps):
    """(∂σ, ∂q, ∂ε) of log δ at a point, by mpmath.diff at 30 digits (∂q only for T = 1)."""
    with mp.workdps(30):
        q, sigma, eps = mp.mpf(q), mp.mpf(sigma), mp.mpf(eps)
        ds = mp.diff(lambda x: _mp_log_delta(q, x, steps, eps), sigma)
        de = mp.diff(lambda x: _mp_log_delta(q, sigma, steps, x), eps)
        dq = mp.diff(lambda x: _mp_log_delta(x, sigma, steps, eps), q) if q < 1 else mp.nan
    return float(ds), float(dq), float(de)


@stored(hints=("start",))
def _mp_epsilon_and_slopes(q, sigma, steps, delta, *, start):
    """(dε/dσ, dε/dq, ε) at the exact ε(δ): ε by an mpmath root search from ``start`` (30
    digits), the slopes by the implicit function theorem from :func:`_mp_partials`."""
    with mp.workdps(30):
        root = mp.findroot(lambda x: _mp_log_delta(q, sigma, steps, x) - mp.log(delta),
                           mp.mpf(start))
        ds, dq, de = _mp_partials.uncached(q, sigma, steps, root)
    return -ds / de, -dq / de, float(root)


def _rel_err(got, want):
    return np.abs(got - want) / np.abs(want)


@pytest.mark.slow
def test_grad_delta_against_closed_forms():
    """∂ log δ/∂σ and ∂ log δ/∂q of ``.delta`` (one batched ``jax.grad``, float64) against
    ``mpmath.diff`` of the exact Gaussian (q = 1) and of the single-step closed form (T = 1).

    The returned value is an upper bound within its ``rel_error`` of the truth (nodes of
    the line whose computed value is less certain than the envelope bound are dropped and
    bounded instead), so on PROFILE_OK cells the derivative is compared with a tolerance of
    4× the rel_error of the tier the gradient's trace runs (tier 1) plus 1e-9 (measured
    ≤ 2.2e-7 on q = 1). The T = 1 cells take the closed form of a single step (measured
    2.5e-15). Loose cells, if any, carry the derivative of a looser bound: the right sign,
    within a factor 2.
    """
    q, s, t, e = _columns(_GRAD_DELTA_CELLS)
    with jax.enable_x64(True):
        def f(sig, qq):
            res = profile.delta(qq, sig, t, e)
            return jnp.sum(jnp.log(res.delta)), res

        # the status and error bound of what the gradient's trace runs (tier 1; concrete
        # calls would evaluate q = 1 in closed form)
        (gs, gq), res = jax.grad(f, argnums=(0, 1), has_aux=True)(jnp.asarray(s), jnp.asarray(q))
    gs, gq = np.asarray(gs), np.asarray(gq)
    status, rel = np.asarray(res.status), np.asarray(res.rel_error)
    want = np.array([_mp_partials(*c) for c in _GRAD_DELTA_CELLS])
    gauss, single = q == 1.0, t == 1
    assert np.all(np.isfinite(gs)) and np.all(np.isfinite(gq[single]))
    err_s, err_q = _rel_err(gs, want[:, 0]), _rel_err(gq, want[:, 1])
    print("grad δ: status", status.tolist())
    print("grad δ: per cell rel err dσ", err_s, "dq", err_q, "rel_error", rel, sep="\n")
    print("grad δ: rel err dσ (q=1)", err_s[gauss].max(), "dσ (T=1)", err_s[single].max(),
          "dq (T=1)", err_q[single].max(), "rel_error (T=1)", rel[single].max())
    ok = status == profile.PROFILE_OK
    assert (ok & gauss).sum() >= 6
    assert np.all(status != profile.RDP_FALLBACK)
    tol = 4 * rel + 1e-9
    assert np.all(err_s[ok] <= tol[ok]), (err_s, rel)
    assert np.all(err_q[ok & single] <= tol[ok & single]), (err_q, rel)
    # loose cells: the derivative of a looser bound (nodes of the line replaced by their
    # envelope carry no derivative): the right sign and within a factor 2 (measured ≤ 0.65)
    loose = ~ok
    assert np.all(err_s[loose] < 1.0) and np.all(err_q[loose & single] < 1.0), (err_s, err_q)


#: a cell where the traced tier 1 falls back to RDP (T = 1 would not: a single step takes the
#: closed form), differentiated in the same call as ``_GRAD_EPS_CELLS``
_GRAD_EPS_FALLBACK = (3.52e-6, 7.11, 2, 7.3e-9)


@pytest.fixture(scope="module")
def grad_epsilon():
    """``.epsilon`` and its gradients in σ and q on ``_GRAD_EPS_CELLS`` (one batched call).

    The gradients' call also covers ``_GRAD_EPS_FALLBACK`` (last) and returns the traced
    statuses; the values and statuses returned are those of a concrete call on the cells.
    """
    q, s, t, dl = _columns(_GRAD_EPS_CELLS + [_GRAD_EPS_FALLBACK])
    with jax.enable_x64(True):
        def f(sig, qq):
            res = profile.epsilon(qq, sig, t, dl)
            return jnp.sum(res.epsilon), res.status

        (gs, gq), traced = jax.grad(f, argnums=(0, 1), has_aux=True)(jnp.asarray(s), jnp.asarray(q))
        res = profile.epsilon(q[:-1], s[:-1], t[:-1], dl[:-1])
    fallback = (np.asarray(gs), np.asarray(gq), np.asarray(traced))  # every cell, fallback last
    return ((q[:-1], s[:-1], t[:-1], dl[:-1]), np.asarray(gs)[:-1], np.asarray(gq)[:-1],
            np.asarray(res.status), np.asarray(res.epsilon), fallback)


@pytest.mark.slow
def test_grad_epsilon_against_closed_forms(grad_epsilon):
    """∂ε/∂σ and ∂ε/∂q of ``.epsilon`` (``jax.grad``, float64) against the implicit-function
    derivative of the closed forms: dε/dθ = −(∂θ log δ)/(∂ε log δ) at the exact ε (mpmath root,
    30 digits; partials by ``mpmath.diff``). q = 1 cells with PROFILE_OK agree to 5e-5
    (measured ≤ 1.3e-5: the implementation's implicit gradient uses a finite-difference
    slope); T = 1 cells that are not RDP fallbacks (PROFILE_LOOSE): the derivative of a
    looser bound, relative error below 1 (measured ≤ 0.47).
    """
    (q, s, t, dl), gs, gq, status, eps, _ = grad_epsilon
    want = np.array([_mp_epsilon_and_slopes(*cell, start=float(e0))
                     for cell, e0 in zip(_GRAD_EPS_CELLS, eps)])
    gauss, single = q == 1.0, t == 1
    assert np.all(eps >= want[:, 2] * (1 - 1e-12))  # sound
    err_s, err_q = _rel_err(gs, want[:, 0]), _rel_err(gq, want[:, 1])
    print("grad ε: status", status.tolist())
    print("grad ε: per cell rel err dσ", err_s, "dq", err_q, "ε", _rel_err(eps, want[:, 2]), sep="\n")
    ok = gauss & (status == profile.PROFILE_OK)
    assert ok.sum() >= 6
    assert np.all(err_s[ok] <= 5e-5), err_s
    sg = single & (status != profile.RDP_FALLBACK)
    assert sg.sum() >= 2
    # derivative of a looser bound (see test_grad_delta_against_closed_forms): sign and
    # magnitude within a factor 2 (measured ≤ 0.47)
    assert np.all(err_s[sg] < 1.0) and np.all(err_q[sg] < 1.0), (err_s, err_q)


@pytest.mark.slow
def test_grad_epsilon_finite_at_rdp_fallback(grad_epsilon):
    """Where a cell falls back to RDP the derivative of ``.epsilon`` is RDP's (finite): no NaN
    leaks from the profile branch that was not selected. Under ``jax.grad`` the traceable
    tier 1 runs; at q = 3.52e-6, σ = 7.11, T = 2, δ = 7.3e-9 (``_GRAD_EPS_FALLBACK``) it falls
    back, in the same call as cells that do not. (q = 1e-4, σ = 0.5, δ = 1e-8 did until the
    x-rule's aliasing bound was refined for few sampled steps: now PROFILE_LOOSE, ε 2.95.)"""
    *_, (gs, gq, traced) = grad_epsilon
    q, s, t, d = _GRAD_EPS_FALLBACK
    with jax.enable_x64(True):
        rdp_s = jax.grad(lambda ss: jaxrdp.epsilon(q, ss, t, d)[0])(s)
    # the first cell (q = 1, σ = 3, T = 1 000, δ = 1e-5) is within the tolerance under the trace
    assert traced[-1] == profile.RDP_FALLBACK and traced[0] == profile.PROFILE_OK, traced
    assert np.all(np.isfinite(gs)) and np.all(np.isfinite(gq))
    assert abs(float(gs[-1]) / float(rdp_s) - 1) < 1e-9


# ----------------------------------------------------------------------------------------------
# 3. dp_accounting's PLD as a bracket
# ----------------------------------------------------------------------------------------------

# (q, σ, T, ε, δ) typical of DP-SGD (the first two are issue 11's examples)
_PLD_CASES = [
    (256 / 50000, 1.0, 2000, 1.24, 1e-5),
    (4096 / 50000, 3.0, 875, 3.6, 1e-5),
    (256 / 60000, 1.1, 3516, 1.0, 1e-5),
    (0.01, 0.8, 1000, 3.0, 1e-6),
]


@pytest.fixture(scope="module")
def pld_comparison():
    """Ours (δ at ε, ε at δ) and dp_accounting's PLD (pessimistic and optimistic) on
    ``_PLD_CASES``, with jaxrdp's RDP ε."""
    from jaxrdp import conversions

    q, s, t, e, dl = _columns(_PLD_CASES)
    rd = _delta(q, s, t, e)
    re = _epsilon(q, s, t, dl)
    eps_rdp = np.asarray(conversions.epsilon(q, s, t, dl)[0])
    pld = collections.defaultdict(list)
    for qq, ss, tt, ee, dd in _PLD_CASES:
        for pess in (True, False):
            acc = pld_distribution(qq, ss, tt, pess)
            pld["d", pess].append(acc.get_delta_for_epsilon(ee))
            pld["e", pess].append(acc.get_epsilon_for_delta(dd))
    pld = {k: np.array(v) for k, v in pld.items()}
    print("PLD δ: ours/pess − 1", rd.delta / pld["d", True] - 1, "status", rd.status, "rel", rd.rel_error)
    print("PLD ε: ours/pess − 1", re.epsilon / pld["e", True] - 1, "status", re.status)
    return rd, re, eps_rdp, pld


@pytest.mark.slow
def test_pld_brackets_delta_and_epsilon(pld_comparison):
    """dp_accounting's PLD (add-or-remove, discretisation 1e-4) brackets ours, on DP-SGD runs.

    δ(ε): optimistic ≤ ours (ours ≥ true δ ≥ optimistic PLD, no slack needed) and
    ours ≤ pessimistic·(1 + 1e-6)·(1 + r)/(1 − r): the pessimistic PLD is an upper bound
    only to ~1e-6 relative (issue 11 found it 5e-7 below the truth at small δ, moving further
    down under refinement), and ours is within (1 + r)/(1 − r) of the truth (r = rel_error).
    ε(δ): optimistic ≤ ours, always; where PROFILE_OK, ours ≤ pessimistic·(1 + 2e-6) (1e-6
    for PLD, ≤ 1e-6 for our own bound mapped through the slope, both ≪ the 1e-4 grid);
    elsewhere only ours < RDP ε (PROFILE_LOOSE states no error bound on ε).
    Tightness, where PROFILE_OK: ours is within 1e-3 of the pessimistic PLD (measured 2e-5
    for δ, 1.1e-6 for ε: PLD's discretisation error), so an error of a few percent fails.
    """
    rd, re, eps_rdp, pld = pld_comparison
    d, r, e = rd.delta, rd.rel_error, re.epsilon
    assert np.all(pld["d", False] <= d)
    assert np.all(r < 1)
    assert np.all(d <= pld["d", True] * (1 + 1e-6) * (1 + r) / (1 - r))
    assert np.all(pld["e", False] <= e)
    okd, oke = rd.status == profile.PROFILE_OK, re.status == profile.PROFILE_OK
    assert okd.any() and oke.any()
    assert np.all(e[oke] <= pld["e", True][oke] * (1 + 2e-6))
    assert np.all(d[okd] >= pld["d", True][okd] * (1 - 1e-3))
    assert np.all(e[oke] >= pld["e", True][oke] * (1 - 1e-3))
    assert np.all(d < rd.delta_rdp) and np.all(e < eps_rdp)
    assert np.allclose(re.epsilon_rdp, eps_rdp, rtol=1e-12)


@pytest.mark.slow
def test_pld_cases_reach_the_accuracy_target(pld_comparison):
    """Issue 11's 1e-6 on typical DP-SGD runs: all four are PROFILE_OK (bounded relative error
    ≤ 1e-6) and agree with the pessimistic PLD to its discretisation error (measured: δ
    2e-5..4.1e-4 below it, ε 1.1e-6..3.4e-5 below it)."""
    rd, re, _, pld = pld_comparison
    assert np.all(rd.status == profile.PROFILE_OK) and np.all(re.status == profile.PROFILE_OK)
    assert np.all(np.abs(rd.delta / pld["d", True] - 1) < 1e-3)
    assert np.all(np.abs(re.epsilon / pld["e", True] - 1) < 1e-4)


@pytest.mark.slow
def test_few_sampled_run_is_tight_on_a_line_closer_to_the_axis():
    """q·T = 0.24 (a quarter of a sampled step per run), σ = 4.71: at the saddle c ≈ 300 the
    line's step, set by the curvature of the far mode, left the line 100× too short, and the
    run fell back to RDP (ε 0.0210). The retry on Re z = c/2 (the integral does not depend on
    the line; every bound holds on any) gave a bounded value (0.0085664); with the x-rule
    trusted further along the line (the refined aliasing bound) it is PROFILE_OK: 0.00831754,
    inside PLD's bracket at discretisation 2e-6 (0.0080986 optimistic, 0.00831759 pessimistic)
    and 6.8e-6 below the pessimistic end. PLD's own discretisation error is about that: its
    pessimistic ε falls from 0.0084571 (1e-4) to 0.0083189 (1e-5) and 0.00831759 (2e-6), and
    extrapolated (error ∝ interval², from the last two) it gives 0.00831754 (within 2e-8)."""
    q, sigma, steps, delta = 0.0010790840445381387, 4.710858568334594, 219, 1e-5
    res = profile.epsilon(q, sigma, steps, delta)
    e = float(res.epsilon)
    pess = pld_distribution(q, sigma, steps, True, 2e-6).get_epsilon_for_delta(delta)
    opt = pld_distribution(q, sigma, steps, False, 2e-6).get_epsilon_for_delta(delta)
    assert int(res.status) == profile.PROFILE_OK
    assert opt <= e <= pess
    assert e >= pess * (1 - 2e-5)
    assert e < 0.5 * float(res.epsilon_rdp)


# ----------------------------------------------------------------------------------------------
# 4. the corners of the domain
# ----------------------------------------------------------------------------------------------

_T_RANGE, _Q_RANGE, _S_RANGE = (1, 10**7), (1e-8, 1.0), (0.3, 1e4)
_E_RANGE, _D_RANGE = (1e-4, 500.0), (1e-20, 0.5)
_MID = (1e-3, 1.0, 1000, None)  # (q, σ, T, ·): the middle from which single edges are reached


def _corner_cells(x_range, x_mid):
    """All 16 corners of (q, σ, T, x), then the 8 cells with one argument at an end of its
    range and the rest in the middle, and 8 cells on the q = 1 and T = 1 faces."""
    import itertools

    cells = [(qq, ss, tt, xx) for qq in _Q_RANGE for ss in _S_RANGE for tt in _T_RANGE for xx in x_range]
    mid = _MID[:3] + (x_mid,)
    for j, rng in enumerate((_Q_RANGE, _S_RANGE, _T_RANGE, x_range)):
        for v in rng:
            c = list(mid)
            c[j] = v
            cells.append(tuple(c))
    faces = itertools.product([(1.0, 10**4), (0.01, 1), (1.0, 1), (0.5, 1)], [(2.0, x_range[0]), (30.0, x_mid)])
    cells += [(qq, ss, tt, xx) for (qq, tt), (ss, xx) in faces]
    return cells


def _exact_epsilon(q, sigma, steps, dlt):
    """ε(δ) from the closed forms (printed diagnostics only; NaN where the reference fails)."""
    try:
        return float(ref.epsilon_for_delta(q, sigma, steps, dlt, dps=20, rel_tol=1e-10))
    except (ValueError, RuntimeError, ZeroDivisionError):
        return float("nan")


def _has_closed_form(q, t):
    return q == 1.0 or t == 1


def test_domain_corners_delta():
    """δ(ε) on the corners and edges of the domain (32 cells, two calls): no NaN, δ ∈ [0, 1],
    ≤ RDP δ, never below the closed form where one exists (q = 1, T = 1; 40-digit mpmath),
    never 0 where that reference is ≥ 1e-300. Status fractions are printed."""
    cells = _corner_cells(_E_RANGE, 1.0)
    q, s, t, e = _columns(cells)
    res = _delta(q, s, t, e)
    d = res.delta
    assert not np.any(np.isnan(d)) and np.all((d >= 0) & (d <= 1)), np.c_[q, s, t, e, d]
    assert np.all(d <= res.delta_rdp * (1 + 1e-12))
    checked, ratios = 0, []
    for i, c in enumerate(cells):
        if _has_closed_form(c[0], c[2]):
            exact = float(_exact_delta(*c))
            if exact > 0:
                ratios.append(d[i] / exact)
            assert d[i] >= exact * (1 - 1e-12), (c, d[i], exact, res.status[i])
            if exact >= 1e-300:
                assert d[i] > 0, (c, exact)
            checked += 1
    counts = collections.Counter(res.status.tolist())
    print(f"corners δ: {checked} cells against closed forms (ours/exact from {min(ratios):.6g} to "
          f"{max(ratios):.6g}); status fractions", {k: v / len(cells) for k, v in sorted(counts.items())})


def test_domain_corners_epsilon():
    """ε(δ) on the corners and edges of the domain: no NaN, ε ≥ 0, ≤ RDP ε, and sound where
    a closed form exists: the exact δ at the returned ε is ≤ the target (so ε ≥ true ε)."""
    cells = _corner_cells(_D_RANGE, 1e-5)
    q, s, t, dl = _columns(cells)
    res = _epsilon(q, s, t, dl)
    e = res.epsilon
    assert not np.any(np.isnan(e)) and np.all(e >= 0), np.c_[q, s, t, dl, e]
    assert np.all(e <= res.epsilon_rdp * (1 + 1e-12))
    checked, ratios = 0, []
    for i, c in enumerate(cells):
        if _has_closed_form(c[0], c[2]) and np.isfinite(e[i]):
            if 0 < e[i] < 400:
                x = _exact_epsilon(*c)
                ratios.append(e[i] / x if x > 0 else np.inf)
            exact = float(_exact_delta(c[0], c[1], c[2], e[i]))
            assert exact <= c[3] * (1 + 1e-12), (c, e[i], exact, res.status[i])
            checked += 1
    counts = collections.Counter(res.status.tolist())
    print(f"corners ε: {checked} cells against closed forms (ours/exact ε: {np.array(ratios)}); "
          "status fractions",
          {k: v / len(cells) for k, v in sorted(counts.items())})
