"""Two sampled steps: the convexity bracket of :mod:`jaxrdp._two_steps` and the profile's use
of it, against the frozen nested-quadrature references (``tests/data/profile_reference.csv``,
mpmath-free double-precision quadrature of the one-step closed form, 10 digits) and the
double-precision nested quadrature of ``profile_reference`` at further points."""


import jax
import mpmath as mp
import numpy as np
import pytest

from jaxrdp import _two_steps, profile

import profile_reference as ref
from helpers import reference_rows



def _two_step_rows():
    rows = [r for r in reference_rows("profile_reference.csv") if r["steps"] == "2" and float(r["q"]) < 1.0]
    assert len(rows) == 3, rows
    return rows


ROWS = _two_step_rows()
Q = np.array([float(r["q"]) for r in ROWS])
SIGMA = np.array([float(r["sigma"]) for r in ROWS])
EPS = np.array([float(r["epsilon"]) for r in ROWS])
REMOVE = np.array([float(r["delta_remove"]) for r in ROWS])
ADD = np.array([float(r["delta_add"]) for r in ROWS])
DELTA = np.array([float(r["delta"]) for r in ROWS])
REF_REL = 1e-9  # the rows' 10 digits


def _reference_delta(q, sigma, eps):
    """max over the directions of the nested quadrature's two-step δ at one point."""
    return max(ref.nested_quad_delta(q, sigma, 2, eps, direction=d) for d in ("remove", "add"))


def _assert_epsilon_ok_and_within_the_tolerance(q, sigma, delta):
    """ε(δ) of two steps is PROFILE_OK, δ at it is within the target and δ at ε·(1 − 1e-6)
    above it (so the true ε lies within 1e-6 below), by the nested quadrature (about 1e-10
    relative)."""
    e = profile.epsilon(q, sigma, 2, delta)
    assert np.all(np.asarray(e.status) == profile.PROFILE_OK), e.status
    for qi, si, di, ei in zip(q, sigma, delta, np.asarray(e.epsilon)):
        at = lambda x: _reference_delta(qi, si, x)  # noqa: E731
        assert at(ei) <= di * (1 + 1e-9), at(ei) / di - 1
        assert at(ei * (1 - 1e-6)) > di * (1 + 1e-6), at(ei * (1 - 1e-6)) / di - 1


def _assert_delta_ok_and_within_its_bound(q, sigma, eps):
    """δ(ε) of two steps is PROFILE_OK, never below the nested quadrature and above it by at
    most twice its stated relative error (a bound about the bracket's midpoint)."""
    d = profile.delta(q, sigma, 2, eps)
    assert np.all(np.asarray(d.status) == profile.PROFILE_OK), d.rel_error
    rel = np.asarray(d.rel_error)
    assert np.all(rel <= profile.TOLERANCE), rel
    want = np.array([_reference_delta(*point) for point in zip(q, sigma, eps)])
    got = np.asarray(d.delta)
    assert np.all(got >= want * (1 - 1e-9)), got / want - 1
    assert np.all(got / want - 1 <= 2 * rel + 1e-9), (got / want - 1, rel)


@pytest.mark.slow
def test_bracket_holds_each_direction_of_the_references():
    # both sums bracket both directions (q = 0.0107, σ = 1.97, ε = 0.02: δ_add = 3.4e-17; the
    # other rows' add direction is exactly 0: ε ≥ −2 log(1 − q)); measured gaps (U − L)/U
    # 9.0e-7, 3.9e-7, 1.3e-6 (remove), 8.7e-6 (that add, 1e-13 of the remove direction)
    with jax.enable_x64(True):
        upper, lower = (np.asarray(v) for v in _two_steps.delta_bounds(Q, SIGMA, EPS))
    for k, want, gap in ((0, REMOVE, 3e-6), (1, ADD, 2e-5)):
        assert np.all(upper[k] >= want * (1 - REF_REL)), (k, upper[k] / want)
        assert np.all(lower[k] <= want * (1 + REF_REL)), (k, lower[k] / want)
        pos = want > 0
        assert np.all((upper[k] - lower[k])[pos] / upper[k][pos] < gap), (upper[k], lower[k])
    assert np.all(upper[1][ADD == 0] == 0.0)


@pytest.mark.slow
def test_profile_of_two_steps_reaches_the_references():
    # δ(ε): measured 6.0e-7, 2.6e-7, 8.4e-7 above the references, all PROFILE_OK (the line
    # integral alone: 0.31, 9.5e-5, 5.4e-5 above, PROFILE_LOOSE); ε(δ) at the references' δ:
    # 2.0e-7, 1.1e-7, 2.5e-7 above the references' ε
    d = profile.delta(Q, SIGMA, 2, EPS)
    got = np.asarray(d.delta)
    assert np.all(got >= DELTA * (1 - REF_REL)), got / DELTA
    assert np.all(got <= DELTA * (1 + 2e-6)), got / DELTA - 1
    assert np.all(np.asarray(d.status) == profile.PROFILE_OK), d.status
    assert np.all(np.asarray(d.rel_error) <= profile.TOLERANCE)
    e = profile.epsilon(Q, SIGMA, 2, DELTA)
    got = np.asarray(e.epsilon)
    # ε at the reference δ: at least the reference ε (its δ is known to 10 digits, and
    # |d log δ/d log ε| ≤ 40 here), within 1e-6 above
    assert np.all(got >= EPS * (1 - 40 * REF_REL)), got / EPS
    assert np.all(got <= EPS * (1 + 1e-6)), got / EPS - 1
    assert np.all(np.asarray(e.status) == profile.PROFILE_OK), e.status
    # the same runs as schedules of two single-step segments take the same path (one tier of
    # the line suffices: the bracket is the tighter answer on every row)
    seg = lambda v: np.stack([v, v], -1)
    s = profile.delta_schedule(seg(Q), seg(SIGMA), np.ones((3, 2), int), EPS, tier=1)
    np.testing.assert_allclose(np.asarray(s.delta), np.asarray(d.delta), rtol=1e-12)


@pytest.mark.slow
def test_two_steps_against_the_nested_quadrature_at_random_points():
    # q log-uniform in [1e-6, 0.9], σ in [0.4, 20], ε in [0.01, 5]; references where δ is
    # in [1e-12, 0.5] (the quadrature's 6+ digits: compared to 1e-6). Never below the
    # reference; where PROFILE_OK, within its stated error.
    rng = np.random.default_rng(7)
    q = 10 ** rng.uniform(-6, np.log10(0.9), 12)
    s = 10 ** rng.uniform(np.log10(0.4), np.log10(20), 12)
    e = 10 ** rng.uniform(-2, np.log10(5), 12)
    want = np.array([_reference_delta(*point) for point in zip(q, s, e)])
    keep = (want >= 1e-12) & (want <= 0.5)
    assert keep.sum() >= 6, want
    d = profile.delta(q[keep], s[keep], 2, e[keep])
    got, want = np.asarray(d.delta), want[keep]
    assert np.all(got >= want * (1 - 1e-6)), got / want - 1
    ok = np.asarray(d.status) == profile.PROFILE_OK
    assert ok.mean() >= 0.5, d.status
    bound = 2 * np.asarray(d.rel_error)[ok] + 1e-6
    assert np.all(got[ok] / want[ok] - 1 <= bound), (got[ok] / want[ok] - 1, bound)


@pytest.mark.slow
def test_epsilon_lower_end_within_the_tolerance_where_the_bracket_allows():
    # Two runs of the domain whose ε(δ) came back PROFILE_LOOSE while the bracket was narrow
    # enough: the lower end (ε less the bracket's gap over the slope, verified by the lower
    # sum) was tried only at 1.5 times that step, 1.29e-6 and 1.34e-6 of ε; the lower sum at
    # ε·(1 − 1e-6) is above δ as well. Against the nested quadrature (about 1e-10 relative
    # at these δ): δ at the returned ε is 4.7e-6 and 5.9e-6 below the target (sound) and δ
    # at ε·(1 − 1e-6) is 4.4e-6 and 6.1e-6 above it, so the true ε lies within 1e-6 below.
    q, sigma = np.array([1.128e-4, 0.01463]), np.array([3.071, 365.1])
    delta = np.array([4.07e-9, 9.91e-9])
    _assert_epsilon_ok_and_within_the_tolerance(q, sigma, delta)


@pytest.mark.slow
def test_delta_on_finer_cells_where_the_first_bracket_misses_the_tolerance():
    # Four domain runs whose δ(ε) came back PROFILE_LOOSE on 2 048 cells: the runs still
    # above the tolerance are bracketed again on 4 096 cells (the gap falls about fourfold;
    # δ came down by 1.0e-6 to 1.6e-6 on these). Measured against the nested quadrature
    # (about 1e-10 relative at these δ): 4.0e-7, 3.4e-7, 5.8e-7 and 5.2e-7 above, each
    # within its stated error bound (2.6e-7 to 4.9e-7 about the bracket's midpoint).
    q = np.array([0.006737274067388433, 0.1685091220608952, 0.020607682327391807,
                  0.03842054714228558])
    sigma = np.array([1.9866073027844766, 1.6533267293464142, 21.258681414501417,
                      0.6593191343812133])
    eps = np.array([0.10670739130551442, 0.6140667976902143, 0.0035483285664493643,
                    4.736137768430761])
    _assert_delta_ok_and_within_its_bound(q, sigma, eps)


def test_cell_local_ratio_against_mpmath():
    # R = N(1, σ²)(C)/N(0, σ²)(C) on narrow cells far out in either tail, against 50-digit
    # mpmath quadrature: measured within 4.7e-15 (the differences of tails: up to 5.3e-12, with
    # bounds of 2.4e-11 to 1.2e-9); the local bound holds and is at least 100 times closer.
    cells = ((3.53, 40.0, 1e-3), (3.53, -30.0, 1e-2), (3398.7, -30000.0, 40.0),
             (3398.7, 12000.0, 5.0), (0.35, 4.0, 1e-4), (0.35, -3.0, 1e-3), (39.19, 300.0, 0.05))
    for sigma, a, w in cells:
        edges = np.array([[-np.inf, a, a + w, np.inf]])
        with jax.enable_x64(True):
            log_r, rho = (np.asarray(v)[0] for v in _two_steps._log_local_ratio(
                np.array([sigma]), edges))
            tails_rho = sum(np.asarray(_two_steps._log_gauss_cells(
                np.array([mean]), np.array([sigma]), edges)[1])[0, 1] for mean in (0.0, 1.0))
        assert np.all(np.isinf(rho[[0, 2]]))  # the end cells take the tails
        with mp.workdps(50):
            s, lo, hi = mp.mpf(sigma), mp.mpf(a), mp.mpf(a) + mp.mpf(w)
            mass = lambda mean: mp.quad(lambda x: mp.exp(-(x - mean) ** 2 / (2 * s * s)), [lo, hi])
            err = float(abs(mp.expm1(mp.mpf(float(log_r[1])) - mp.log(mass(1) / mass(0)))))
        assert err <= rho[1] and err < 1e-14, (sigma, a, w, err, rho[1])
        assert rho[1] < 2e-13 and rho[1] * 100 < tails_rho, (rho[1], tails_rho)


@pytest.mark.slow
def test_epsilon_and_delta_settle_with_the_cell_local_ratio_and_finer_cells():
    # Domain runs whose bracket came back PROFILE_LOOSE. At ε near 1e-4 the differences of
    # Gaussian tails bounded Q_i/P_i to 1e-9 or so on narrow cells, which the one-step
    # profile's slope carried into a gap of 3e-5 of δ (ε(δ): relative bounds 1.6e-6 to
    # 2.3e-6); with the cell-local ratio they are PROFILE_OK. Against the nested quadrature:
    # δ at the returned ε is 1.2e-5 and 4.9e-6 below the target and δ at ε·(1 − 1e-6) 9.5e-6
    # and 2.4e-5 above it, so the true ε lies within 1e-6 below; δ(ε) is 8.5e-7, 4.7e-7
    # and 4.9e-7 above the reference (bounds 6.4e-7, 3.5e-7 and 3.7e-7 about the bracket's
    # midpoint).
    q = np.array([3.202501407379977e-05, 0.08625488655932854])
    sigma = np.array([3.5302752337999963, 3398.6977573811323])
    delta = np.array([2.1463185709508498e-16, 6.904546395156022e-13])
    _assert_epsilon_ok_and_within_the_tolerance(q, sigma, delta)
    # the third δ(ε) is bracketed to 5.9e-6 on 2 048 cells and 1.5e-6 on 4 096: it settles
    # on 8 192 (3.7e-7)
    q = np.array([5.5794970828464204e-05, 0.1383333878241417, 0.04802480803113916])
    sigma = np.array([2.427169738585979, 3243.6818755890836, 7.594604045000276])
    eps = np.array([0.00032791369754378645, 0.00017778275898598978, 0.05984589791761712])
    _assert_delta_ok_and_within_its_bound(q, sigma, eps)
