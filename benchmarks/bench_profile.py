"""ε(δ) and σ calibration by the privacy profile for many DP-SGD runs vs dp_accounting's PLD.

    PYTHONPATH=. python benchmarks/bench_profile.py --n 10000 --pld-sample 20 --calibrate 1000

Runs: q log-uniform in [1e-3, 0.1], σ in [0.6, 5], T log-uniform in [100, 1e5], δ = 1e-5.
Prints the batched time per run (after a warm-up on the same shapes, so compilation is
apart), PLD's time per run on a sample (pessimistic, value_discretization_interval 1e-4),
their ratio, and the agreement. With ``--calibrate N``: σ for N targets ε ∈ [1, 8]
(``sweep.noise_multiplier(accountant="profile")``) against
``mechanism_calibration.calibrate_dp_mechanism`` with the PLD accountant on a sample, with
a check that ε_profile(σ*) ≤ target for every target. With ``--by-step``: the timed call's
escalation step by step (the tier, the line's scale, how many runs it took, how many of
those its own result put within ``profile.TOLERANCE``, and its time per run of all runs and
per run of its own).
"""

import argparse
import time

import jax
import numpy as np

from jaxrdp import profile


def pld_epsilon(q, sigma, steps, delta, interval=1e-4):
    """dp_accounting's PLD ε (pessimistic) at ``value_discretization_interval`` ``interval``."""
    from dp_accounting import dp_event
    from dp_accounting.pld import pld_privacy_accountant as pld

    acc = pld.PLDAccountant(value_discretization_interval=interval)
    acc.compose(dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(sigma)), int(steps))
    return acc.get_epsilon(delta)


def _timed_steps(record):
    """Wraps ``profile._chunked`` (each escalation step's batched call) to append (step,
    runs, runs within the tolerance, seconds) to ``record``; returns the original."""
    original = profile._chunked

    def chunked(fn, args, step):
        t0 = time.perf_counter()
        out = original(fn, args, step)  # NumPy results: the step has finished
        record.append((step, args[0].shape[0], int(np.sum(out[-1] <= profile.TOLERANCE)),
                       time.perf_counter() - t0))
        return out

    profile._chunked = chunked
    return original


def _print_steps(record, n):
    print("step (x-nodes, line nodes, Re z / c, few-sampled Re z / c): runs, settled by it, "
          "ms per run of all (of its own)")
    for step, runs, settled, seconds in record:
        print(f"  ({step.nx}, {step.nu}, {step.c_scale:g}, {step.few_line_scale:g}): "
              f"{runs}, {settled}, {seconds / n * 1e3:.3f} ({seconds / runs * 1e3:.2f})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=10000)
    ap.add_argument("--pld-sample", type=int, default=10)
    ap.add_argument("--delta", type=float, default=1e-5)
    ap.add_argument("--calibrate", type=int, default=0, help="also calibrate σ for N targets")
    ap.add_argument("--by-step", action="store_true",
                    help="also time the escalation's steps (in the timed call)")
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    q = 10 ** rng.uniform(-3, -1, a.n)
    s = rng.uniform(0.6, 5.0, a.n)
    t = np.round(10 ** rng.uniform(2, 5, a.n))
    profile.epsilon(q, s, t, a.delta).epsilon.block_until_ready()  # compile every tier used
    record = []
    original = _timed_steps(record) if a.by_step else None
    t0 = time.perf_counter()
    res = profile.epsilon(q, s, t, a.delta)
    eps = np.asarray(res.epsilon)
    per_run = (time.perf_counter() - t0) / a.n
    if original is not None:
        profile._chunked = original
        _print_steps(record, a.n)
    st = np.asarray(res.status)
    print(f"profile: {a.n} runs, {per_run * 1e3:.3f} ms/run; status ok/bounded/rdp = "
          f"{np.mean(st == 0):.3f}/{np.mean(st == 1):.3f}/{np.mean(st == 2):.3f}; "
          f"median ε/ε_RDP = {np.median(eps / np.asarray(res.epsilon_rdp)):.4f}")
    idx = rng.choice(a.n, a.pld_sample, replace=False)
    t0 = time.perf_counter()
    pld = np.array([pld_epsilon(q[i], s[i], t[i], a.delta) for i in idx])
    pld_per_run = (time.perf_counter() - t0) / a.pld_sample
    rel = eps[idx] / pld - 1
    print(f"PLD: {pld_per_run * 1e3:.1f} ms/run; ratio {pld_per_run / per_run:.0f}x per run")
    print(f"ε_profile/ε_PLD − 1 on the sample: min {rel.min():.2e}, median {np.median(rel):.2e}, "
          f"max {rel.max():.2e}")
    for i, r in zip(idx, rel):
        print(f"  q={q[i]:.4g} σ={s[i]:.3g} T={t[i]:.0f} status={st[i]} rel={r:+.2e}")
    if a.calibrate:
        calibrate(a.calibrate, a.pld_sample, a.delta, rng)


def pld_sigma(eps, q, steps, delta):
    from dp_accounting import dp_event, mechanism_calibration
    from dp_accounting.pld import pld_privacy_accountant as pld

    return mechanism_calibration.calibrate_dp_mechanism(
        lambda: pld.PLDAccountant(value_discretization_interval=1e-4),
        lambda s: dp_event.SelfComposedDpEvent(
            dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(s)), int(steps)),
        eps, delta, mechanism_calibration.LowerEndpointAndGuess(0.3, 1.0), tol=1e-4)


def calibrate(n, sample, delta, rng):
    from jaxrdp import sweep

    eps = rng.uniform(1.0, 8.0, n)
    q = 10 ** rng.uniform(-3, -1.5, n)
    t = np.round(10 ** rng.uniform(2.5, 4, n))
    # compile, and wait for it: JAX dispatches asynchronously, and an unfinished warm-up
    # call would be timed with the next one (it was, before: twice the time per target)
    jax.block_until_ready(sweep.noise_multiplier(eps, delta, q, t, accountant="profile").value)
    t0 = time.perf_counter()
    res = sweep.noise_multiplier(eps, delta, q, t, accountant="profile")
    sigma = np.asarray(jax.block_until_ready(res.value))
    per_target = (time.perf_counter() - t0) / n
    check = np.asarray(profile.epsilon(q, sigma, t, delta).epsilon)
    print(f"calibration: {n} targets, {per_target * 1e3:.2f} ms/target; "
          f"ε_profile(σ*) ≤ target for {np.mean(check <= eps):.4f} of them; "
          f"σ*_profile/σ*_RDP median "
          f"{np.median(sigma / np.asarray(sweep.noise_multiplier(eps, delta, q, t).value)):.4f}")
    idx = rng.choice(n, sample, replace=False)
    t0 = time.perf_counter()
    ref = np.array([pld_sigma(eps[i], q[i], t[i], delta) for i in idx])
    pld_per = (time.perf_counter() - t0) / sample
    rel = sigma[idx] / ref - 1
    print(f"PLD calibration: {pld_per * 1e3:.0f} ms/target; ratio {pld_per / per_target:.0f}x; "
          f"σ*_profile/σ*_PLD − 1: min {rel.min():.2e}, median {np.median(rel):.2e}, "
          f"max {rel.max():.2e}")
    # refined against the escalated ε (refine=True; the default only for ≤ 16 targets), on
    # the same PLD sample, after a warm-up call that compiles the escalation's programs
    sub = (eps[idx], delta, q[idx], t[idx])
    jax.block_until_ready(sweep.noise_multiplier(*sub, accountant="profile", refine=True).value)
    t0 = time.perf_counter()
    fine = np.asarray(jax.block_until_ready(
        sweep.noise_multiplier(*sub, accountant="profile", refine=True).value))
    fine_per = (time.perf_counter() - t0) / sample
    rel = fine / ref - 1
    print(f"refined calibration (refine=True) of those {sample}: {fine_per * 1e3:.1f} ms/target; "
          f"ratio {pld_per / fine_per:.0f}x; σ*/σ*_PLD − 1: min {rel.min():.2e}, median "
          f"{np.median(rel):.2e}, max {rel.max():.2e}; "
          f"ε_profile(σ*) ≤ target for all: "
          f"{bool(np.all(np.asarray(profile.epsilon(q[idx], fine, t[idx], delta).epsilon) <= eps[idx]))}")


if __name__ == "__main__":
    main()
