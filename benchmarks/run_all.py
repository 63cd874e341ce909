"""All workloads, jaxrdp vs dp_accounting, in one process: one table of times, ratios, agreement.

Run from the repository root::

    python benchmarks/run_all.py                 # CPU
    python benchmarks/run_all.py --device gpu    # on an accelerator (bigger batches)

Each jaxrdp workload is one call, timed after a warm-up call that compiles it (compile
time reported apart), best of ``--repeats``. dp_accounting runs one configuration at a
time; on large workloads it runs on a random sample and its per-item time is scaled up.
Agreement is checked on the very items both computed: ε and σ* relative differences with
the same orders (dp_accounting's defaults; for calibration its integer orders, where its
RDP is exact).
"""

from __future__ import annotations

import argparse
import logging
import platform
import time

import jax
import numpy as np

import jaxrdp
from _common import DP_ORDERS, INT_ORDERS, best_of
from jaxrdp import sweep



def _timed(fn, repeats):
    """``(result, best time of repeats, time of the first call incl. compilation)``."""
    start = time.perf_counter()
    out = jax.block_until_ready(fn())
    first = time.perf_counter() - start
    return out, best_of(fn, repeats), first


def _dp_epsilon(q, sigma, steps, delta, orders):
    import dp_accounting

    acc = dp_accounting.rdp.RdpAccountant(list(orders))
    event = dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma))
    acc.compose(event, int(steps))
    return acc.get_epsilon(delta)


def _dp_calibrate(eps, delta, q, steps, orders):
    import dp_accounting
    from dp_accounting import mechanism_calibration as mc

    def make_event(sigma):
        return dp_accounting.SelfComposedDpEvent(
            dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), int(steps)
        )

    return mc.calibrate_dp_mechanism(
        lambda: dp_accounting.rdp.RdpAccountant(list(orders)),
        make_event,
        eps,
        delta,
        mc.LowerEndpointAndGuess(1e-2, 1.0),
        tol=1e-7,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "gpu"], default="cpu")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sample", type=int, default=20, help="dp_accounting items per workload")
    args = parser.parse_args()
    logging.getLogger("absl").setLevel(logging.ERROR)
    from dp_accounting.rdp import rdp_privacy_accountant as dp_rdp

    big = args.device == "gpu"
    rng = np.random.default_rng(0)
    rows = []

    def add(name, items, t_ours, t_first, t_theirs, agreement):
        rows.append((name, items, t_ours, t_first, t_theirs, agreement))

    # 1. RDP over a (q, σ) grid at dp_accounting's default orders.
    n = 1024 if big else 24
    q = np.geomspace(1e-4, 0.1, n)
    s = np.linspace(0.8, 10.0, n)
    qq, ss = (a.ravel() for a in np.meshgrid(q, s, indexing="ij"))
    ours, t_ours, t_first = _timed(lambda: jaxrdp.rdp(qq[:, None], ss[:, None], DP_ORDERS), args.repeats)
    pick = rng.choice(qq.size, args.sample, replace=False)
    start = time.perf_counter()
    theirs = np.array([dp_rdp._compute_rdp_poisson_subsampled_gaussian(qq[i], ss[i], DP_ORDERS) for i in pick])
    t_theirs = (time.perf_counter() - start) / len(pick)
    mine = np.asarray(ours)[pick]
    is_int = DP_ORDERS == np.round(DP_ORDERS)
    exact = is_int & (theirs * (DP_ORDERS - 1) > 1e-3)
    add("RDP grid (cells × 156 orders)", qq.size, t_ours / qq.size, t_first, t_theirs,
        f"int orders {np.max(np.abs(mine[exact] / theirs[exact] - 1)):.1e}")

    # 2. ε of one DP-SGD run.
    run = (256 / 60000, 1.1, 3516, 1e-5)
    (eps, _), t_ours, t_first = _timed(lambda: jaxrdp.epsilon(*run, orders=DP_ORDERS), args.repeats)
    start = time.perf_counter()
    eps_dp = _dp_epsilon(*run, DP_ORDERS)
    t_theirs = time.perf_counter() - start
    add("ε of one DP-SGD run", 1, t_ours, t_first, t_theirs, f"{float(eps) / eps_dp - 1:+.1e}")

    # 3. ε over many runs.
    m = 10**6 if big else 10**4
    rq = 10 ** rng.uniform(-4, -1, m)
    rs = rng.uniform(0.6, 5.0, m)
    rt = np.round(10 ** rng.uniform(2, 5, m))
    rd = 10 ** rng.uniform(-9, -5, m)
    (eps, _), t_ours, t_first = _timed(lambda: jaxrdp.epsilon(rq, rs, rt, rd, orders=DP_ORDERS), args.repeats)
    pick = rng.choice(m, args.sample, replace=False)
    start = time.perf_counter()
    eps_dp = np.array([_dp_epsilon(rq[i], rs[i], rt[i], rd[i], DP_ORDERS) for i in pick])
    t_theirs = (time.perf_counter() - start) / len(pick)
    ratio = np.asarray(eps)[pick] / eps_dp
    add(f"ε over {m} runs", m, t_ours / m, t_first, t_theirs,
        f"ours/theirs in [{ratio.min():.4f}, {ratio.max():.4f}]")

    # 4. σ calibration, one target and many, with integer orders (dp_accounting exact).
    for k in (1, 10**6 if big else 10**4):
        te = rng.uniform(0.5, 8.0, k)
        td = 10 ** rng.uniform(-8, -5, k)
        tq = 10 ** rng.uniform(-3, -1, k)
        tt = np.round(10 ** rng.uniform(2, 4.5, k))
        call = lambda: sweep.noise_multiplier(te, td, tq, tt, orders=INT_ORDERS).value  # noqa: E731
        sig, t_ours, t_first = _timed(call, args.repeats)
        sub = rng.choice(k, min(k, max(1, args.sample // 4)), replace=False)
        start = time.perf_counter()
        sig_dp = np.array([_dp_calibrate(te[i], td[i], tq[i], tt[i], INT_ORDERS) for i in sub])
        t_theirs = (time.perf_counter() - start) / len(sub)
        diff = np.max(np.abs(np.asarray(sig)[sub] / sig_dp - 1))
        add(f"σ calibration, {k} target(s)", k, t_ours / k, t_first, t_theirs, f"σ* {diff:.1e}")

    print(f"jax {jax.__version__}, device {jax.devices()[0]}, {platform.machine()}, "
          f"dp_accounting sample {args.sample}")
    print(f"{'workload':34s}{'items':>9s}{'jaxrdp/item':>14s}{'dp_acc/item':>14s}{'ratio':>9s}"
          f"{'compile':>9s}  agreement")
    for name, items, t_ours, t_first, t_theirs, agreement in rows:
        print(f"{name:34s}{items:9d}{t_ours * 1e6:12.2f}us{t_theirs * 1e3:12.2f}ms"
              f"{t_theirs / t_ours:8.0f}x{t_first:8.1f}s  {agreement}")


if __name__ == "__main__":
    main()
