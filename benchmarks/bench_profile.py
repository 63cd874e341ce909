"""ε(δ) by the privacy profile for many DP-SGD runs vs dp_accounting's PLD accountant.

    PYTHONPATH=. python benchmarks/bench_profile.py --n 10000 --pld-sample 20

Runs: q log-uniform in [1e-3, 0.1], σ in [0.6, 5], T log-uniform in [100, 1e5], δ = 1e-5.
Prints the batched time per run (after one warm-up compile), PLD's time per run on a sample
(pessimistic, value_discretization_interval 1e-4), their ratio, and the agreement.
"""

import argparse
import time

import numpy as np

from jaxrdp import profile


def pld_epsilon(q, sigma, steps, delta, pessimistic=True):
    from dp_accounting import dp_event
    from dp_accounting.pld import pld_privacy_accountant as pld

    acc = pld.PLDAccountant(value_discretization_interval=1e-4)
    acc.compose(dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(sigma)), int(steps))
    return acc.get_epsilon(delta)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=10000)
    ap.add_argument("--pld-sample", type=int, default=10)
    ap.add_argument("--delta", type=float, default=1e-5)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    q = 10 ** rng.uniform(-3, -1, a.n)
    s = rng.uniform(0.6, 5.0, a.n)
    t = np.round(10 ** rng.uniform(2, 5, a.n))
    profile.epsilon(q[:16], s[:16], t[:16], a.delta).epsilon.block_until_ready()  # compile
    t0 = time.perf_counter()
    res = profile.epsilon(q, s, t, a.delta)
    eps = np.asarray(res.epsilon)
    per_run = (time.perf_counter() - t0) / a.n
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


if __name__ == "__main__":
    main()
