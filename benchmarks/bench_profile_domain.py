"""Status of the privacy profile over the whole domain of issue 11, per step count T.

    PYTHONPATH=. python benchmarks/bench_profile_domain.py --n 256

For each T in ``--steps`` (default 1, 2, 3, 10, 100, 10³, 10⁴, 10⁵, 10⁶, 10⁷), ``--n`` random
runs: q log-uniform in [1e-8, 1], σ log-uniform in [0.3, 10⁴], and for ε(δ) a δ log-uniform
in [1e-20, 0.5], for δ(ε) an ε log-uniform in [1e-4, 500] (seed T). Prints, per T and in all:

- the fraction of each status (``PROFILE_OK``, ``PROFILE_LOOSE``, ``RDP_FALLBACK``), over all
  runs and over the runs whose *answer* also lies in the domain (ε ∈ [1e-4, 500] for ε(δ),
  δ ∈ [1e-20, 0.5] for δ(ε)). A random (q, σ, T) often has an answer far outside it: ε of
  1e-9 at q = 1e-8, or δ(ε = 300) below 1e-300, which then comes back as a bound at the
  smallest normal double, ``PROFILE_LOOSE``;
- the checks on every value: no NaN, no ε (δ) above RDP's, and where ε(δ) and δ at that ε
  are both ``PROFILE_OK``, that δ at most δ·(1 + 2e-6): each is within 1e-6 of the truth, so
  more would mean one of them is not (this check found a run where ε(δ) was not);
- the time per run of each batched call (after a warm-up call on the same runs);
- with ``--pld K``: how far the ε(δ) that are *not* ``PROFILE_OK`` (answer in the domain)
  lie above dp_accounting's PLD ε (pessimistic, ``value_discretization_interval`` 1e-5), on
  the first K of them per T: the median and largest ratio ε/ε_PLD, how many are more than
  twice PLD's, and how many have a PLD ε below the domain (1e-4). PLD is itself discretised
  (a bracket to about 1e-6 where it resolves the loss, coarser at ε near its interval; at
  tiny δ it returns ∞, and those runs are left out), so this says how loose "loose" is, not
  the error;
- with ``--pld-floor K``: on the first K runs per T that dp_accounting can resolve (T ≤ 10⁴,
  RDP ε ≤ 30, the target δ ≥ 1e-10), every status, that ε(δ) and δ(ε) are never below PLD's
  *optimistic* estimate (``value_discretization_interval`` 1e-4), a lower bound on the
  truth up to float rounding: δ values are compared where PLD's is at least 1e-10 (below,
  its FFT's rounding, about 1e-16 of the mass, is no longer small against δ).
"""

import argparse
import time
import warnings

import numpy as np

from bench_profile import pld_epsilon
from jaxrdp import profile

_STATUS = ("ok", "loose", "rdp")


def _fractions(status, mask):
    counts = np.bincount(status[mask], minlength=3)
    return "/".join(f"{c / max(mask.sum(), 1):.3f}" for c in counts), counts


def _timed(fn):
    fn()  # compile every escalation step these runs take
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def _against_pld(q, s, steps, target_delta, eps, idx):
    """Prints how far the given (non-OK) ε lie above dp_accounting's PLD ε."""
    pld = np.array([pld_epsilon(q[i], s[i], steps, target_delta[i], interval=1e-5) for i in idx])
    finite = np.isfinite(pld) & (pld > 0)
    ratio = eps[idx][finite] / pld[finite]
    if not ratio.size:
        print(f"           vs PLD: no finite PLD ε among {idx.size}")
        return
    print(f"           vs PLD (1e-5), {finite.sum()} of {idx.size} non-OK ε(δ) in domain: "
          f"ε/ε_PLD median {np.median(ratio):.3g}, max {ratio.max():.3g}, "
          f"> 2 in {(ratio > 2).sum()}, below 1 in {(ratio < 1).sum()}; "
          f"PLD's ε below 1e-4 (outside the domain) in {(pld[finite] < 1e-4).sum()}")


def _pld_floor(q, s, steps, target_delta, eps, target_eps, dl, idx):
    """Counts the ε(δ) and δ(ε) below dp_accounting's optimistic PLD on the runs ``idx``;
    returns the number of failures and prints the closest approaches."""
    from dp_accounting.pld import privacy_loss_distribution as pld_mod

    fails, eps_margin, delta_margin, compared = 0, np.inf, np.inf, [0, 0]
    for i in idx:
        opt = pld_mod.from_gaussian_mechanism(
            standard_deviation=s[i], sensitivity=1.0, sampling_prob=q[i],
            pessimistic_estimate=False, value_discretization_interval=1e-4,
            use_connect_dots=False).self_compose(int(steps))
        eps_opt = opt.get_epsilon_for_delta(target_delta[i])
        delta_opt = opt.get_delta_for_epsilon(target_eps[i])
        if eps_opt > 0:
            compared[0] += 1
            eps_margin = min(eps_margin, eps[i] / eps_opt - 1)
            fails += eps[i] < eps_opt * (1 - 1e-12)
        if delta_opt >= 1e-10:
            compared[1] += 1
            delta_margin = min(delta_margin, dl[i] / delta_opt - 1)
            fails += dl[i] < delta_opt * (1 - 1e-12)
    print(f"           vs PLD optimistic (1e-4), {compared[0]} ε(δ) and {compared[1]} δ(ε): "
          f"below it {fails}; smallest ε/ε_opt − 1 {eps_margin:.3g}, "
          f"δ/δ_opt − 1 {delta_margin:.3g}")
    return fails


def main():
    warnings.filterwarnings("ignore", message="The optimal Rényi order")  # RDP's, at the edges
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=256)
    ap.add_argument("--pld", type=int, default=0,
                    help="compare this many non-OK ε(δ) in the domain per T with PLD")
    ap.add_argument("--pld-floor", type=int, default=0,
                    help="check this many runs per T against PLD's optimistic estimate")
    ap.add_argument("--steps", type=float, nargs="+",
                    default=[1, 2, 3, 10, 100, 1e3, 1e4, 1e5, 1e6, 1e7])
    a = ap.parse_args()
    totals = {k: np.zeros(3, int) for k in ("eps_all", "eps_in", "delta_all", "delta_in")}
    bad = floor_bad = 0
    print(f"{a.n} runs per T; status fractions {'/'.join(_STATUS)}")
    for steps in a.steps:
        rng = np.random.default_rng(int(steps))
        q = 10 ** rng.uniform(-8, 0, a.n)
        s = 10 ** rng.uniform(np.log10(0.3), 4, a.n)
        target_delta = 10 ** rng.uniform(-20, np.log10(0.5), a.n)
        target_eps = 10 ** rng.uniform(-4, np.log10(500), a.n)

        res, t_eps = _timed(lambda: profile.epsilon(q, s, steps, target_delta))
        eps, est = np.asarray(res.epsilon), np.asarray(res.status)
        eps_in = (eps >= 1e-4) & (eps <= 500)
        ok = est == 0
        back = profile.delta(q[ok], s[ok], steps, eps[ok])
        both = np.asarray(back.status) == 0
        eps_bad = (np.isnan(eps).sum() + (eps > np.asarray(res.epsilon_rdp)).sum()
                   + (np.asarray(back.delta)[both] > target_delta[ok][both] * (1 + 2e-6)).sum())

        dres, t_delta = _timed(lambda: profile.delta(q, s, steps, target_eps))
        dl, dst = np.asarray(dres.delta), np.asarray(dres.status)
        delta_in = (dl >= 1e-20) & (dl <= 0.5)
        delta_bad = np.isnan(dl).sum() + (dl > np.asarray(dres.delta_rdp)).sum()
        bad += eps_bad + delta_bad

        all_runs = np.ones(a.n, bool)
        parts = []
        for key, st, mask in (("eps_all", est, all_runs), ("eps_in", est, eps_in),
                              ("delta_all", dst, all_runs), ("delta_in", dst, delta_in)):
            text, counts = _fractions(st, mask)
            totals[key] += counts
            parts.append(f"{text} ({mask.sum()})")
        print(f"T={steps:<8.0f} ε(δ): all {parts[0]}, answer in domain {parts[1]}, "
              f"{t_eps / a.n * 1e3:.2f} ms/run; δ(ε): all {parts[2]}, answer in domain "
              f"{parts[3]}, {t_delta / a.n * 1e3:.2f} ms/run; failed checks {eps_bad + delta_bad}")
        if a.pld:
            _against_pld(q, s, steps, target_delta, eps, np.nonzero(eps_in & ~ok)[0][:a.pld])
        if a.pld_floor and steps <= 1e4:
            feasible = (np.asarray(res.epsilon_rdp) <= 30) & (target_delta >= 1e-10)
            floor_bad += _pld_floor(q, s, steps, target_delta, eps, target_eps, dl,
                                    np.nonzero(feasible)[0][:a.pld_floor])
    for key, counts in totals.items():
        print(f"{key:10s} " + "  ".join(f"{name} {c / counts.sum():.3f}"
                                        for name, c in zip(_STATUS, counts))
              + f"  ({counts.sum()} runs)")
    print(f"failed checks (NaN, above RDP, δ(ε) > δ where both are ok): {bad}")
    if a.pld_floor:
        print(f"below PLD's optimistic estimate: {floor_bad}")


if __name__ == "__main__":
    main()
