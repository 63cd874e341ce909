"""The split Chernoff bound of the profile (jaxrdp._split_chernoff) and its use where few
steps are sampled.

References: the frozen 40-digit mpmath CSVs (tests/make_profile_reference.py: closed forms
for T = 1, nested quadrature for T = 2, 3, the line integral for larger T) and
dp_accounting's PLD (pessimistic and optimistic, as a bracket; frozen by
tests/make_pld_reference.py) on runs where the line integral alone was tens of times above it.
At the end, the one-exit bracket (jaxrdp._one_exit), taken on the same few-sampled runs.
"""

import jax
import numpy as np
import pytest

from jaxrdp import _one_exit, _split_chernoff, conversions, profile

import make_pld_reference as pld_reference
import profile_reference
from helpers import reference_rows


def _rows(name):
    return [r for r in reference_rows(name) if float(r["q"]) < 1.0]  # the bound is for q < 1


def _columns(rows, *keys):
    return [np.array([float(r[k]) for r in rows]) for k in keys]


def test_bound_is_never_below_the_mpmath_references():
    rows = _rows("profile_reference.csv")
    assert len(rows) >= 25
    q, s, t, e = _columns(rows, "q", "sigma", "steps", "epsilon")
    rem, add = _columns(rows, "delta_remove", "delta_add")
    with jax.enable_x64(True):
        lr, la = (np.asarray(v) for v in _split_chernoff.log_delta(q, s, t, e))
    # sound in both directions (add is exactly 0 beyond its largest loss, where the
    # reference is 0 too)
    assert np.all(np.exp(lr) >= rem), np.exp(lr) / rem
    assert np.all(np.exp(la) >= add), (np.exp(la), add)
    # and a Chernoff bound's looseness, not more: on the rows of T ≥ 2 (where the profile
    # uses it) measured 1.14–8.38 times the reference, median 2.59, and 10.96 on the row far
    # out at T = 10⁴, ε = 756.8 (before the union term: 1.79–10.5, median 4.0; the far tail
    # of q = 0.0185, T = 226, ε = 1, δ = 3.6e-45, is looser: 2.5e7)
    used = (t >= 2) & (rem > 1e-30)
    assert used.sum() >= 15
    ratio = np.exp(lr[used]) / rem[used]
    far = e[used] > 500  # the row far out, beyond the domain
    assert far.sum() == 1
    assert np.median(ratio) < 3.2 and np.max(ratio[~far]) < 10.0 and ratio[far] < 12.0, ratio


def test_epsilon_is_never_below_the_mpmath_references():
    rows = _rows("profile_epsilon_reference.csv")
    assert rows
    q, s, t, d, ref = _columns(rows, "q", "sigma", "steps", "delta", "epsilon")
    with jax.enable_x64(True):
        eps = np.asarray(_split_chernoff.epsilon(q, s, t, np.log(d)))
    # measured 1.005–1.097 times the reference (before the union term: 1.03–1.21)
    assert np.all(eps >= ref) and np.all(eps <= 1.12 * ref), eps / ref


def test_epsilon_and_delta_agree_up_to_their_choice_of_c():
    q = np.array([1.2e-4, 2.3e-3, 0.05, 0.3])
    s = np.array([1.15, 0.94, 2.0, 5.0])
    t = np.array([100.0, 100.0, 10.0, 1000.0])
    log_d = np.log(np.array([2e-8, 3.6e-14, 1e-5, 1e-10]))
    with jax.enable_x64(True):
        eps = np.asarray(_split_chernoff.epsilon(q, s, t, log_d))
        lr, la = (np.asarray(v) for v in _split_chernoff.log_delta(q, s, t, eps))
        lower = [np.asarray(v) for v in _split_chernoff.log_delta(q, s, t, 0.9 * eps)]
    assert np.all(np.isfinite(eps)) and np.all(eps > 0)
    # each searches its own c about its first pass's best (measured: δ(ε(δ)) within 0.9%
    # of δ on the few-sampled runs of the last test); 10% below ε the bound exceeds δ
    assert np.all(np.maximum(lr, la) <= log_d + 0.02), np.maximum(lr, la) - log_d
    assert np.all(np.maximum(*lower) > log_d)


# The runs where the profile meets dp_accounting's PLD, and the PLD's frozen values
# (discretisation 1e-5, pessimistic and optimistic; tests/make_pld_reference.py). Before
# the split bound the line integral alone returned 65.7, 3.27, 18.7, 4.05 and 2.22 times
# PLD's ε on _FEW_SAMPLED.
_FEW_SAMPLED, _ONE_STEP_CARRIES = pld_reference.FEW_SAMPLED, pld_reference.ONE_STEP_CARRIES


@pytest.mark.slow
def test_few_sampled_epsilon_is_within_a_small_factor_of_pld():
    q, s, t, d = (np.array(c) for c in zip(*_FEW_SAMPLED))
    res = profile.epsilon(q, s, t, d)
    eps = np.asarray(res.epsilon)
    rdp = np.asarray(conversions.epsilon(q, s, t, d)[0])
    pess, opt = pld_reference.values("epsilon", _FEW_SAMPLED)
    assert np.all(opt <= eps), (eps, opt)
    # measured 1.04–1.21 times PLD's pessimistic ε (the Chernoff split alone: 1.27–1.94;
    # the line alone: 2.2–65.7)
    assert np.all(eps <= 1.3 * pess), eps / pess
    assert np.all(eps < rdp)
    assert np.all(np.asarray(res.status) == profile.PROFILE_LOOSE)  # no lower end: loose


@pytest.mark.slow
def test_few_sampled_delta_is_sound_and_tighter():
    q, s, t, eps = pld_reference.FEW_SAMPLED_DELTA
    res = profile.delta(q, s, t, eps)
    bracket = pld_reference.values("delta", [pld_reference.FEW_SAMPLED_DELTA])[:, 0]
    d = float(res.delta)
    # measured 7.76e-11, 1.90 times PLD's pessimistic 4.08e-11 (the Chernoff split alone:
    # 1.50e-9; the line alone: 3.4e-4)
    assert bracket[1] <= d <= 2.4 * bracket[0], (d, bracket)
    assert d < 1e-3 * float(res.delta_rdp)


@pytest.mark.slow
def test_union_term_where_one_sampled_step_carries_the_loss():
    # at these δ one rare sampled step carries the loss: the Chernoff split alone returned
    # 3.87, 2.32 and 16.6 times PLD's ε
    q, s, t, d = (np.array(c) for c in zip(*_ONE_STEP_CARRIES))
    eps = np.asarray(profile.epsilon(q, s, t, d).epsilon)
    pess, opt = pld_reference.values("epsilon", _ONE_STEP_CARRIES)
    # PLD's optimistic ε of the last run is 0 (its discretisation rounds the rare loss away)
    opt = opt[:2]
    assert np.all(opt <= eps[:2]), (eps, opt)
    # measured 1.12, 1.10 and 1.36 times PLD's pessimistic ε (1.19 for the first before the
    # one-exit bracket, which bounds it from 0.0175 to 0.0165 there, 11% above its lower end)
    assert np.all(eps <= 1.45 * pess), eps / pess


# ---------------------------------------------------------------- the one-exit bracket
# (jaxrdp._one_exit) where a rare far step carries the loss. References: δ_rem by
# tests/profile_reference.nested_quad_delta(q, σ, T, ε, loss_breaks=True) (adaptive
# double-precision quadrature split at the far outputs; 1 s at T = 2, 1 to 6 minutes at
# T = 3 on a 2 vCPU CPU, so frozen here); δ_add is exactly 0 at these ε (ε ≥ −T log(1 − q)).
# Before the bracket the two T = 3 runs were PROFILE_LOOSE both ways (δ 14% and 13% above
# the references, ε 2.5% and 2.3% above); the T = 2 run was settled by the two-step bracket.
#: (q, σ, T, ε, δ_rem(ε))
_ONE_EXIT_RUNS = [
    (5.14e-07, 0.494, 3, 1.08, 1.746956352407628e-17),
    (2.92e-06, 0.483, 3, 1.36, 2.0008938307958202e-14),
    (1e-06, 0.5, 2, 1.0, 1.533021473230026e-16),
]
#: the bracket's measured relative width (err/est) on these runs; its upper end was
#: 1.3e-8, 5.5e-7 and 6.0e-9 above the references, its lower end 5.1e-10, 1.2e-8 and
#: 9.0e-10 below (the Jensen gap, about sup g''·Var(Y)/2 with g'' at μ)
_ONE_EXIT_REL = np.array([6.6e-9, 2.8e-7, 3.5e-9])


def _one_exit_columns():
    q, s, t, e, ref = (np.array(c, float) for c in zip(*_ONE_EXIT_RUNS))
    return q, s, t, e, ref


def test_one_exit_bracket_holds_the_nested_quadrature():
    q, s, t, e, ref = _one_exit_columns()
    with jax.enable_x64(True):
        up, add, rel = (np.asarray(v) for v in _one_exit.log_delta(q, s, t, e))
    low = np.exp(up) * (1.0 - rel) / (1.0 + rel)
    assert np.all(add == -np.inf)  # the add direction's δ is 0 here
    assert np.all(np.exp(up) >= ref)  # never below the truth
    assert np.all(low <= ref * (1.0 + 1e-9))  # the lower end (the reference: ~1e-10)
    assert np.all(rel <= 3.0 * _ONE_EXIT_REL), rel


def test_one_exit_bracket_holds_the_nested_quadrature_at_random_two_step_points():
    # T = 2 (the reference is one quadrature, a fraction of a second): q log-uniform in
    # [1e-8, 1e-2], σ in [0.3, 2], ε in [0.03, 10]. On 184 such points (three seeds) the
    # reference was never outside; the bracket's width ranged from 2e-11 to 1 (no lower end).
    rng = np.random.default_rng(4)
    q = 10 ** rng.uniform(-8, -2, 12)
    s = 10 ** rng.uniform(np.log10(0.3), 0.3, 12)
    e = 10 ** rng.uniform(-1.5, 1.0, 12)
    with jax.enable_x64(True):
        up, add, rel = (np.asarray(v) for v in _one_exit.log_delta(q, s, np.full(12, 2.0), e))
    ref = np.array([profile_reference.nested_quad_delta(*a, "remove", loss_breaks=True)
                    for a in zip(q, s, np.full(12, 2), e)])
    assert np.all(add == -np.inf)
    assert np.all(np.exp(up) >= ref), np.exp(up) / ref - 1
    low = np.exp(up) * (1.0 - rel) / (1.0 + rel)
    assert np.all(low <= ref * (1.0 + 1e-9)), low / ref - 1
    assert np.sum(rel < 1e-6) >= 3  # the regime is there: 3 of these 12 within 1e-6


def test_one_exit_gives_no_upper_bound_where_the_add_direction_is_not_zero():
    # ε = 0.1 < −3·log(1 − 0.5): the add direction's δ is positive; the bracket bounds only
    # the remove direction, so it gives no upper bound of δ (its lower end still holds)
    with jax.enable_x64(True):
        up, add, rel = (np.asarray(v)[0] for v in _one_exit.log_delta(
            np.array([0.5]), np.array([1.0]), np.array([3.0]), np.array([0.1])))
    assert up == np.inf and add == np.inf and rel == np.inf


def test_profile_settles_the_one_exit_runs_both_ways():
    # the T = 3 runs (the T = 2 one is the two-step bracket's, with programs of its own)
    q, s, t, e, ref = (c[:2] for c in _one_exit_columns())
    d = profile.delta(q, s, t, e)
    assert np.all(np.asarray(d.status) == profile.PROFILE_OK)
    got = np.asarray(d.delta)
    assert np.all(got >= ref), got / ref - 1
    assert np.all(got <= ref * (1.0 + 2.0 * _ONE_EXIT_REL[:2])), got / ref - 1
    # ε at δ = the reference's δ(ε) is ε itself
    r = profile.epsilon(q, s, t, ref)
    assert np.all(np.asarray(r.status) == profile.PROFILE_OK)
    eps = np.asarray(r.epsilon)
    assert np.all(eps >= e * (1.0 - 1e-9)) and np.all(eps <= e * (1.0 + 1e-6)), eps / e - 1
