"""Calibrating σ for many (ε, δ) targets: jaxrdp.sweep.noise_multiplier vs dp_accounting.

Run from the repository root::

    python benchmarks/bench_calibration.py                 # CPU: 10⁴ targets, 20 for dp_accounting
    python benchmarks/bench_calibration.py --gpu           # accelerator: 10⁶ targets
    python benchmarks/bench_calibration.py --default-orders  # also jaxrdp's 166 default orders

jaxrdp solves every target in one batched call; dp_accounting calibrates one target at a
time (``calibrate_dp_mechanism``: brentq around an ``RdpAccountant``), so it runs on a
random sample. Both use the same integer orders (dp_accounting's defaults without the
fractional ones, where its RDP is exact). Correctness comes first: σ* must agree with
dp_accounting on the sample to 1e-5 relative, and the exact ε at σ* must be within the
target for every one of the targets. Timings: compilation apart, ``block_until_ready``,
best of repeats. "Where the time goes" reports how many RDP-curve evaluations each target
needed and what one batched evaluation costs.
"""

from __future__ import annotations

import argparse
import logging
import math
import platform
import time

import jax
import numpy as np

from _common import INT_ORDERS, best_of
from jaxrdp import conversions, kernels, sweep



def _targets(n, seed=0):
    """Realistic DP-SGD budgets: ε ∈ [0.3, 10], δ ∈ [1e-8, 1e-4], q ∈ [1e-4, 0.2], T ∈ [10, 1e5]."""
    rng = np.random.default_rng(seed)
    eps = 10 ** rng.uniform(math.log10(0.3), 1.0, n)
    delta = 10 ** rng.uniform(-8, -4, n)
    q = 10 ** rng.uniform(-4, math.log10(0.2), n)
    steps = np.round(10 ** rng.uniform(1, 5, n))
    return eps, delta, q, steps


def _dp_accounting_sigma(eps, delta, q, steps, orders, sigma_hint):
    import dp_accounting as dpa
    from dp_accounting import mechanism_calibration

    return mechanism_calibration.calibrate_dp_mechanism(
        lambda: dpa.rdp.RdpAccountant([float(a) for a in orders]),
        lambda s: dpa.SelfComposedDpEvent(
            dpa.PoissonSampledDpEvent(float(q), dpa.GaussianDpEvent(s)), int(steps)
        ),
        float(eps),
        float(delta),
        tol=1e-9 * max(1.0, sigma_hint),
    )


def _where_the_time_goes(eps, delta, q, steps, orders, t_total):
    """Mean curve evaluations per target, and the cost of one batched evaluation."""
    cfg = sweep._config(orders, "improved", 1e-6, "rdp")
    with jax.enable_x64(True):
        args = [jax.numpy.asarray(a) for a in (eps, delta, q, steps)]
        _, _, evaluations = jax.jit(lambda *a: sweep._noise_core(cfg, *a))(*args)
        sigma = sweep.noise_multiplier(eps, delta, q, steps, orders=orders).value
        one = jax.jit(lambda q, s, t, d: sweep._model(cfg).epsilon(q, s, t, d)[0])
        jax.block_until_ready(one(args[2], sigma, args[3], args[1]))
        t_eval = best_of(lambda: one(args[2], sigma, args[3], args[1]), 3)
    ev = np.asarray(evaluations)
    counts = np.bincount(ev)
    hist = ", ".join(f"{k}: {c}" for k, c in enumerate(counts) if c)
    n = eps.size
    print(f"  curve evaluations per target: mean {ev.mean():.2f}, max {ev.max()}  ({hist})")
    print(f"  one batched RDP-curve + ε evaluation: {t_eval / n * 1e6:.1f} us/target; the "
          f"solve costs {t_total / t_eval:.1f} of them (the rest: the per-order model "
          f"proposals, bookkeeping, and the last stragglers)")


def _run(n, sample, repeats, orders):
    eps, delta, q, steps = _targets(n)

    def call():
        return sweep.noise_multiplier(eps, delta, q, steps, orders=orders)

    start = time.perf_counter()
    result = jax.block_until_ready(call())
    t_first = time.perf_counter() - start
    t_ours = best_of(call, repeats)
    sigma = np.asarray(result.value)
    status = np.asarray(result.status)
    assert np.all(status == sweep.Status.OK), np.bincount(status)
    eps_at = np.asarray(conversions.epsilon(q, sigma, steps, delta, orders=orders)[0])
    assert np.all(eps_at <= eps), "a calibrated σ exceeds its target"

    rng = np.random.default_rng(1)
    pick = rng.choice(n, size=min(sample, n), replace=False)
    start = time.perf_counter()
    theirs = np.array(
        [_dp_accounting_sigma(eps[i], delta[i], q[i], steps[i], orders, sigma[i]) for i in pick]
    )
    t_dp = (time.perf_counter() - start) / len(pick)
    rel = np.abs(sigma[pick] / theirs - 1)
    return t_first, t_ours, t_dp, rel


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--n", type=int, default=None, help="targets for jaxrdp (10⁴; 10⁶ with --gpu)"
    )
    parser.add_argument("--reference", type=int, default=20, help="targets for dp_accounting")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--gpu", action="store_true", help="10⁶ targets on the accelerator")
    parser.add_argument(
        "--default-orders", action="store_true",
        help="also time jaxrdp's 166 default orders (fractional ones included) on 2000 targets",
    )
    args = parser.parse_args()
    n = args.n or (10**6 if args.gpu else 10**4)
    logging.getLogger("absl").setLevel(logging.ERROR)

    print(f"jax {jax.__version__}, devices: {jax.devices()} "
          f"({platform.processor() or platform.machine()})")
    print(f"targets: ε ∈ [0.3, 10], δ ∈ [1e-8, 1e-4], q ∈ [1e-4, 0.2], T ∈ [10, 1e5]; "
          f"orders: {len(INT_ORDERS)} integer (2..63, 128..1024) for both")
    t_first, t_ours, t_dp, rel = _run(n, args.reference, args.repeats, INT_ORDERS)
    assert np.max(rel) < 1e-5, f"disagreement with dp_accounting: {np.max(rel):.2e}"
    print(f"agreement with dp_accounting on {rel.size} targets: max rel. diff of σ* "
          f"{np.max(rel):.1e}; exact ε(σ*) ≤ target for all {n} targets")
    print(f"{'':34s}{'per target':>14s}{'targets/s':>12s}")
    print(f"{'dp_accounting (one at a time)':34s}{t_dp * 1e3:11.1f} ms{1 / t_dp:12.2f}")
    print(f"{'jaxrdp (' + format(n, ',') + ' in one call)':34s}{t_ours / n * 1e6:11.1f} us"
          f"{n / t_ours:12.0f}")
    print(f"ratio (per target): {t_dp / (t_ours / n):,.0f}x   "
          f"[first call incl. compilation: {t_first:.1f} s]")
    print("where the time goes (jaxrdp):")
    eps, delta, q, steps = _targets(n)
    _where_the_time_goes(eps, delta, q, steps, INT_ORDERS, t_ours)

    if args.default_orders:
        _default_orders(args.repeats)


def _default_orders(repeats, m=2000, sample=5):
    """jaxrdp with its 166 default orders vs dp_accounting with its own default orders.

    Not like for like: dp_accounting's fractional orders are upper bounds (or +inf), so
    jaxrdp's σ* may only be smaller; jaxrdp's fractional orders cost quadrature.
    """
    from dp_accounting.rdp.rdp_privacy_accountant import DEFAULT_RDP_ORDERS

    eps, delta, q, steps = _targets(m, seed=2)

    def call():
        return sweep.noise_multiplier(eps, delta, q, steps)

    start = time.perf_counter()
    sigma = np.asarray(jax.block_until_ready(call()).value)
    t_first = time.perf_counter() - start
    t_ours = best_of(call, max(1, repeats - 1)) / m
    pick = np.random.default_rng(3).choice(m, size=sample, replace=False)
    start = time.perf_counter()
    theirs = np.array([
        _dp_accounting_sigma(eps[i], delta[i], q[i], steps[i], DEFAULT_RDP_ORDERS, sigma[i])
        for i in pick
    ])
    t_dp = (time.perf_counter() - start) / sample
    print(f"\ndefault orders (jaxrdp: {len(kernels.DEFAULT_ORDERS)}, fractional ones by "
          f"quadrature; dp_accounting: its {len(DEFAULT_RDP_ORDERS)}), {m} targets:")
    print(f"  jaxrdp {t_ours * 1e3:.2f} ms/target [first call {t_first:.1f} s], dp_accounting "
          f"{t_dp * 1e3:.0f} ms/target: ratio {t_dp / t_ours:,.0f}x; jaxrdp's σ* is "
          f"{np.min(theirs / sigma[pick]) - 1:+.1e} to {np.max(theirs / sigma[pick]) - 1:+.1e} "
          f"below dp_accounting's (relative)")
    assert np.all(sigma[pick] <= theirs * (1 + 1e-5))


if __name__ == "__main__":
    main()
