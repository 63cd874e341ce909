"""Every call shape of the RDP kernel, side by side, against dp_accounting (one run).

Run from the repository root::

    python benchmarks/bench_paths.py              # CPU: both grids, every row, whole-process rows
    python benchmarks/bench_paths.py --no-process # skip the whole-process (command-line) rows

Rows (dp_accounting's 156 default orders, per (q, σ) cell):

* ``rdp(q[:, None], s[:, None], orders)``, orders 1-D concrete float64;
* the same with orders shaped ``(1, K)`` (ordinary NumPy broadcasting);
* ``jit`` under ``jax.enable_x64`` with the orders *traced* (a jitted function that takes
  them as an argument) and with the orders *static* (closed over, as the accountant's
  ``RdpState`` carries them);
* ``jit`` in float32 (a training step without x64), orders static;
* traced orders are compared, as the program runs, with the standard vectors
  (dp_accounting's among them) and take the shared path when equal; the row ``traced,
  reversed`` passes the same orders in reverse, which no standard vector matches, and
  shows the elementwise path that any other traced vector takes;
* one ``jaxrdp.epsilon`` call for one run (latency, after compilation);
* the README's main command as a whole process (first call with an empty compilation
  cache, then a second call), against the same ε computed by dp_accounting in a fresh
  Python process.

Two grids: the geometric one of issue 10 (q ∈ [1e-4, 0.1] × σ ∈ [0.5, 10], log-spaced,
where dp_accounting's fractional series is slow) and the linear one of
``bench_rdp_grid.py`` (σ ∈ [0.8, 10] linear). Correctness first, on the timed outputs:
every row's values must agree with the 1-D float64 row (float64 rows to 1e-12 relative,
float32 never below and within 1e-4), and the 1-D row with dp_accounting on its integer
orders to 1e-9 where dp_accounting's float64 sum is exact.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np

import jaxrdp
from _common import DP_ORDERS, best_of

# RDP alone, like the dp_accounting process it is compared with (bench_cli.py also times
# the default form, which adds the tight ε of the exact privacy profile)
CLI_ARGS = ["epsilon", "--dataset-size", "60000", "--batch-size", "256", "--epochs", "15",
            "--noise-multiplier", "1.1", "--rdp-only"]
DP_ACCOUNTING_SCRIPT = """
import dp_accounting
from dp_accounting.rdp import rdp_privacy_accountant as r
acc = r.RdpAccountant()
q, steps = 256 / 60000, -(-15 * 60000 // 256)
acc.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(1.1)), steps)
print(acc.get_epsilon(1 / 60000**2))
"""


def _grids(n):
    geo = np.meshgrid(np.geomspace(1e-4, 0.1, n), np.geomspace(0.5, 10.0, n), indexing="ij")
    lin = np.meshgrid(np.geomspace(1e-4, 0.1, n), np.linspace(0.8, 10.0, n), indexing="ij")
    return {
        "geometric q∈[1e-4,0.1] × σ∈[0.5,10]": [v.ravel() for v in geo],
        "linear σ∈[0.8,10] (bench_rdp_grid)": [v.ravel() for v in lin],
    }


def _dp_accounting_per_cell(q, sigma, cells):
    from dp_accounting.rdp import rdp_privacy_accountant as dp_rdp

    pick = np.random.default_rng(0).choice(q.size, size=min(cells, q.size), replace=False)
    start = time.perf_counter()
    theirs = np.array(
        [dp_rdp._compute_rdp_poisson_subsampled_gaussian(q[i], sigma[i], DP_ORDERS) for i in pick]
    )
    return (time.perf_counter() - start) / len(pick), pick, theirs


def _timed(run, repeats):
    start = time.perf_counter()
    out = jax.block_until_ready(run())
    first = time.perf_counter() - start
    return np.asarray(out, np.float64), best_of(run, repeats), first


def _grid_rows(q, sigma, repeats):
    """``[(label, values, seconds for the grid, first-call seconds)]`` for every call shape."""
    rows = []
    qc, sc = q[:, None], sigma[:, None]
    rows.append(("rdp, orders (K,)", *_timed(lambda: jaxrdp.rdp(qc, sc, DP_ORDERS), repeats)))
    o_row = DP_ORDERS[None, :]
    rows.append(("rdp, orders (1, K)", *_timed(lambda: jaxrdp.rdp(qc, sc, o_row), repeats)))
    with jax.enable_x64(True):
        qj, sj = jnp.asarray(qc), jnp.asarray(sc)
        traced = jax.jit(jaxrdp.rdp)
        oj = jnp.asarray(DP_ORDERS)
        rows.append(("jit x64, orders traced", *_timed(lambda: traced(qj, sj, oj), repeats)))
        # the same orders reversed: not a standard vector, so the elementwise path runs
        rev = jnp.asarray(DP_ORDERS[::-1])
        rows.append(("jit x64, traced, reversed", *_timed(lambda: traced(qj, sj, rev)[:, ::-1], repeats)))
        static = jax.jit(lambda a, b: jaxrdp.rdp(a, b, DP_ORDERS))
        rows.append(("jit x64, orders static", *_timed(lambda: static(qj, sj), repeats)))
    q32, s32 = jnp.asarray(qc, jnp.float32), jnp.asarray(sc, jnp.float32)
    static32 = jax.jit(lambda a, b: jaxrdp.rdp(a, b, DP_ORDERS))
    rows.append(("jit float32, orders static", *_timed(lambda: static32(q32, s32), repeats)))
    return rows


def _check(rows, q, sigma, pick, theirs):
    reference = rows[0][1]
    is_int = DP_ORDERS == np.round(DP_ORDERS)
    exact = is_int[None, :] & (theirs * (DP_ORDERS - 1) > 1e-3)
    int_err = float(np.max(np.abs(reference[pick][exact] / theirs[exact] - 1)))
    assert int_err <= 1e-9, f"integer orders disagree with dp_accounting: {int_err:.2e}"
    for label, values, _, _ in rows[1:]:
        values = values.reshape(reference.shape)
        if "float32" in label:
            # float64 at the float32-rounded inputs is the reference of the float32 kernel.
            ref32 = np.asarray(jaxrdp.rdp(
                np.float32(q).astype(np.float64)[:, None],
                np.float32(sigma).astype(np.float64)[:, None],
                np.float32(DP_ORDERS).astype(np.float64),
            ))
            rel = values / ref32 - 1
            assert rel.min() >= 0 and rel.max() <= 1e-4, f"{label}: {rel.min():.1e}..{rel.max():.1e}"
        else:
            np.testing.assert_allclose(values, reference, rtol=1e-12, err_msg=label)
    return int_err


def _process_seconds(argv, env):
    start = time.perf_counter()
    subprocess.run(argv, env=env, check=True, capture_output=True, text=True)
    return time.perf_counter() - start


def _process_rows(repeats):
    cache = tempfile.mkdtemp(prefix="jaxrdp-bench-cache-")
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_COMPILATION")}
    env.pop("JAXRDP_NO_COMPILATION_CACHE", None)
    env["XDG_CACHE_HOME"] = cache
    cli = [sys.executable, "-m", "jaxrdp", *CLI_ARGS]
    try:
        first = _process_seconds(cli, env)
        later = min(_process_seconds(cli, env) for _ in range(repeats))
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    theirs = min(
        _process_seconds([sys.executable, "-c", DP_ACCOUNTING_SCRIPT], env) for _ in range(repeats)
    )
    return first, later, theirs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=32, help="grid side (n×n cells)")
    parser.add_argument("--reference-cells", type=int, default=24, help="cells for dp_accounting")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-process", action="store_true", help="skip whole-process rows")
    args = parser.parse_args()

    import logging

    logging.getLogger("absl").setLevel(logging.ERROR)  # dp_accounting's convergence warnings

    print(f"jax {jax.__version__} on {jax.devices()[0].platform}: "
          f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs; "
          f"{len(DP_ORDERS)} orders (dp_accounting's defaults)")
    for name, (q, sigma) in _grids(args.n).items():
        t_dp, pick, theirs = _dp_accounting_per_cell(q, sigma, args.reference_cells)
        rows = _grid_rows(q, sigma, args.repeats)
        int_err = _check(rows, q, sigma, pick, theirs)
        print(f"\n{name}, {q.size} cells; dp_accounting {t_dp * 1e3:.2f} ms per cell "
              f"({len(pick)} cells); integer orders agree to {int_err:.1e}")
        print(f"  {'call':30s}{'per cell':>12s}{'ratio':>10s}{'first call':>12s}")
        for label, _, seconds, first in rows:
            per_cell = seconds / q.size
            print(f"  {label:30s}{per_cell * 1e6:10.1f}us{t_dp / per_cell:9.0f}x{first:11.2f}s")

    eps_args = (256 / 60000, 1.1, 3516, 1e-5)
    expected = float(jaxrdp.epsilon(*eps_args)[0])
    latency = best_of(lambda: jaxrdp.epsilon(*eps_args)[0], 50)
    assert float(jaxrdp.epsilon(*eps_args)[0]) == expected
    print(f"\none jaxrdp.epsilon call (q = 256/60000, σ = 1.1, 3516 steps): {latency * 1e3:.2f} ms")

    if not args.no_process:
        first, later, theirs = _process_rows(3)
        print(f"`jaxrdp {' '.join(CLI_ARGS)}` as a whole process: first call {first:.2f} s "
              f"(empty compilation cache), later calls {later:.2f} s; dp_accounting in a fresh "
              f"Python process: {theirs:.2f} s")


if __name__ == "__main__":
    main()
