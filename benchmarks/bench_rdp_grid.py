"""RDP over a (q, σ) grid at dp_accounting's default orders: jaxrdp vs dp_accounting.

Run from the repository root::

    python benchmarks/bench_rdp_grid.py            # CPU, 24×24 grid, dp_accounting on 64 cells
    python benchmarks/bench_rdp_grid.py --gpu      # also a 1024×1024 grid in float64 on the GPU
    python benchmarks/bench_rdp_grid.py --float32  # also the grid in float32 under jit
    python benchmarks/bench_rdp_grid.py --geometric --n 32 --ab HEAD~3  # A/B against a revision

``--geometric`` uses the issue-10 grid (q and σ geometric in [1e-4, 0.1] × [0.5, 10]);
``--ab REV`` also times the shared-order core (``_grid.log_a_minus_one``) of git revision
``REV`` against the working tree's, interleaved in this process, and prints the ratio.

Correctness is checked first, on the same cells: integer orders must agree to 1e-9
relative (where dp_accounting's own float64 sum is exact, i.e. log A > 1e-3), and on
fractional orders jaxrdp must not exceed dp_accounting's value by more than 1e-9 relative
(its series sums |terms|, gives up with +inf, or stops early: it is then up to ~5e-10 *below*
the exact value, which the check tolerates and the report counts). Timings: compile apart, ``block_until_ready``, best of repeats.
"""

from __future__ import annotations

import argparse
import platform
import time

import jax
import numpy as np

import jaxrdp
from _common import DP_ORDERS, best_of

def _grid(n, geometric=False):
    q = np.geomspace(1e-4, 0.1, n)
    sigma = np.geomspace(0.5, 10.0, n) if geometric else np.linspace(0.8, 10.0, n)
    qq, ss = np.meshgrid(q, sigma, indexing="ij")
    return qq.ravel(), ss.ravel()


def _referee(mine, theirs, frac, q, sigma, limit=12):
    """Where jaxrdp's fractional RDP exceeds dp_accounting's by more than 1e-9 relative,
    dp_accounting's series is below the exact value (it stops early or drops terms): check
    the largest such cases against the mpmath reference of the definition and fail unless
    jaxrdp is within [0, 1e-12] relative of it. Returns how many were checked."""
    import os
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
    import mp_reference

    excess = np.where(frac & np.isfinite(theirs), mine / theirs - 1, -np.inf)
    worst = np.argsort(excess, axis=None)[::-1][:limit]
    checked = 0
    for flat in worst:
        i, j = np.unravel_index(flat, excess.shape)
        if excess[i, j] <= 1e-9:
            break
        alpha = DP_ORDERS[j]
        exact = float(mp_reference.log_a_fractional(q[i], sigma[i], alpha)) / (alpha - 1)
        rel = mine[i, j] / exact - 1
        assert 0 <= rel <= 1e-12, f"q={q[i]}, σ={sigma[i]}, α={alpha}: {rel:.1e} from mpmath"
        checked += 1
    return checked


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=24, help="grid side for jaxrdp (n×n cells)")
    parser.add_argument("--reference-cells", type=int, default=64, help="cells for dp_accounting")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--gpu", action="store_true", help="also time a 1024×1024 grid")
    parser.add_argument(
        "--float32", action="store_true", help="also the grid in float32 (in-graph kernel)"
    )
    parser.add_argument("--geometric", action="store_true", help="σ geometric in [0.5, 10]")
    parser.add_argument("--ab", metavar="REV", help="also time _grid of git revision REV")
    args = parser.parse_args()

    import logging

    logging.getLogger("absl").setLevel(logging.ERROR)  # its "failed to converge" warnings
    from dp_accounting.rdp import rdp_privacy_accountant as dp_rdp

    q, sigma = _grid(args.n, args.geometric)
    rng = np.random.default_rng(0)
    pick = rng.choice(q.size, size=min(args.reference_cells, q.size), replace=False)

    # dp_accounting: one Python call per cell.
    start = time.perf_counter()
    theirs = np.array(
        [dp_rdp._compute_rdp_poisson_subsampled_gaussian(q[i], sigma[i], DP_ORDERS) for i in pick]
    )
    t_dp = (time.perf_counter() - start) / len(pick)

    # jaxrdp: the whole grid in one call.
    run = lambda: jaxrdp.rdp(q[:, None], sigma[:, None], DP_ORDERS)  # noqa: E731
    start = time.perf_counter()
    ours = np.asarray(jax.block_until_ready(run()))
    t_first = time.perf_counter() - start
    t_ours = best_of(run, args.repeats) / q.size

    # Correctness on the shared cells.
    mine = ours[pick]
    is_int = DP_ORDERS == np.round(DP_ORDERS)
    exact = is_int[None, :] & (theirs * (DP_ORDERS - 1) > 1e-3)
    int_err = np.max(np.abs(mine[exact] / theirs[exact] - 1))
    frac = ~is_int[None, :] & np.ones_like(exact)
    n_refereed = _referee(mine, theirs, frac, q[pick], sigma[pick])
    n_inf = int(np.isinf(theirs[frac]).sum())
    finite = frac & np.isfinite(theirs)
    n_below = int(np.sum(mine[finite] > theirs[finite]))
    worst_below = float(np.max(mine[finite] / theirs[finite] - 1))
    loosest = float(np.max(theirs[finite] / mine[finite] - 1))
    assert int_err <= 1e-9, f"integer orders disagree: {int_err:.2e}"

    print(f"jax {jax.__version__} on {jax.devices()[0].platform}: {platform.processor() or platform.machine()}")
    span = "geometric in [0.5, 10]" if args.geometric else "in [0.8, 10]"
    print(f"grid: q in [1e-4, 0.1] × σ {span}, {len(DP_ORDERS)} orders (dp_accounting defaults)")
    print(f"agreement on {len(pick)} shared cells: integer orders max rel diff {int_err:.1e}; "
          f"fractional orders: {n_inf} of dp_accounting's values are +inf, {n_below} are below "
          f"jaxrdp's exact value (by up to {worst_below:.1e} rel.), and they exceed it by up to "
          f"{loosest:.1e} rel.; {n_refereed} values where jaxrdp exceeds dp_accounting by more "
          "than 1e-9 rel. checked against mpmath (jaxrdp within 1e-12 above the exact value).")
    print(f"{'':24s}{'per cell':>12s}{'cells/s':>12s}")
    print(f"{'dp_accounting':24s}{t_dp * 1e3:10.2f}ms{1 / t_dp:12.1f}")
    print(f"{'jaxrdp (' + str(q.size) + ' cells)':24s}{t_ours * 1e6:10.1f}us{1 / t_ours:12.0f}")
    print(f"ratio (throughput): {t_dp / t_ours:.0f}x    [first call incl. compile: {t_first:.2f} s]")

    if args.ab:
        _ab(args.ab, q, sigma, args.repeats)

    if args.float32:
        import jax.numpy as jnp

        q32, s32 = (jnp.asarray(v, jnp.float32)[:, None] for v in (q, sigma))
        o32 = jnp.asarray(DP_ORDERS, jnp.float32)
        kernel = jax.jit(jaxrdp.rdp)
        start = time.perf_counter()
        got = np.asarray(jax.block_until_ready(kernel(q32, s32, o32)), np.float64)
        t_first = time.perf_counter() - start
        t32 = best_of(lambda: kernel(q32, s32, o32), args.repeats) / q.size
        # float64 at the same float32-rounded inputs is the reference.
        ref = np.asarray(jaxrdp.rdp(np.asarray(q32, np.float64), np.asarray(s32, np.float64),
                                    np.asarray(o32, np.float64)))
        rel = got / ref - 1
        assert rel.min() >= 0, "float32 below float64"
        print(f"{'jaxrdp float32 (jit)':24s}{t32 * 1e6:10.1f}us{1 / t32:12.0f}"
              f"   ratio {t_dp / t32:.0f}x; vs float64: +{rel.min():.1e} to +{rel.max():.1e} rel."
              f" [first call {t_first:.2f} s]")

    if args.gpu:
        n = 1024
        q, sigma = _grid(n)
        run = lambda: jaxrdp.rdp(q[:, None], sigma[:, None], DP_ORDERS)  # noqa: E731
        start = time.perf_counter()
        jax.block_until_ready(run())
        t_first = time.perf_counter() - start
        t = best_of(run, 3)
        print(f"{n}×{n} grid × {len(DP_ORDERS)} orders, float64 on {jax.devices()[0]}: "
              f"{t:.3f} s (first call {t_first:.2f} s)")


def _ab(rev, q, sigma, repeats):
    """Shared-order core of revision ``rev`` vs the working tree, interleaved best-of."""
    import functools
    import importlib.util
    import os
    import subprocess
    import tempfile

    from jaxrdp import _grid

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    source = subprocess.run(
        ["git", "show", f"{rev}:jaxrdp/_grid.py"], cwd=root, check=True, capture_output=True, text=True
    ).stdout
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as fh:
        fh.write(source)
    spec = importlib.util.spec_from_file_location("_grid_" + rev.replace("~", "_"), fh.name)
    old = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(old)
    os.unlink(fh.name)
    frac = DP_ORDERS != np.round(DP_ORDERS)
    print(f"A/B of the shared-order core (log(A-1) only), {rev} vs working tree:")
    with jax.enable_x64(True):
        qj, sj = jax.numpy.asarray(q), jax.numpy.asarray(sigma)
        for name, orders in (("all", DP_ORDERS), ("integer", DP_ORDERS[~frac]), ("fractional", DP_ORDERS[frac])):
            fns = [
                jax.jit(functools.partial(mod.log_a_minus_one, plan=mod.OrderPlan(tuple(orders.tolist()))))
                for mod in (old, _grid)
            ]
            outs = [np.asarray(f(qj, sj)) for f in fns]
            diff = np.max(np.abs(outs[1] - outs[0]) / np.maximum(1.0, np.abs(outs[0])))
            times = [[], []]
            for _ in range(repeats):
                for i, f in enumerate(fns):
                    times[i].append(best_of(lambda: f(qj, sj), 3) / q.size)
            t_old, t_new = (min(t) for t in times)
            print(f"  {name:11s}{len(orders):4d} orders: {t_old * 1e6:8.1f}us -> {t_new * 1e6:8.1f}us per cell"
                  f"  ({t_old / t_new:.2f}x; max rel. diff of log(A-1) {diff:.1e})")


if __name__ == "__main__":
    main()
