"""Regenerate ``tests/data/log_a_reference.csv``: high-precision log A_α at the domain's corners.

Usage (from the repository root; takes a few minutes on two cores)::

    python tests/make_reference.py

Integer orders use the exact binomial sum, fractional orders tanh–sinh quadrature of the
definition (see ``tests/mp_reference.py``), both at 40+ significant digits. The values are
written with 20 significant digits, far more than the 1e-13 relative accuracy the tests
ask of jaxrdp.
"""

from __future__ import annotations

import csv
import itertools
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor

import mpmath as mp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mp_reference  # noqa: E402

Q_VALUES = [1e-7, 1e-5, 1e-3, 0.01, 0.1, 0.3, 0.5, 0.9, 0.999]
SIGMA_VALUES = [0.2, 0.5, 0.8, 1.0, 2.0, 5.0, 10.0, 100.0, 1e3, 1e4]
INTEGER_ORDERS = [2, 3, 8, 32, 128, 1024, 4096]
FRACTIONAL_ORDERS = [1.01, 1.1, 1.5, 2.5, 7.3, 45.5, 200.5, 511.5]
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "log_a_reference.csv")


def _one(args):
    q, sigma, alpha = args
    if float(alpha).is_integer():
        value = mp_reference.log_a_integer(q, sigma, int(alpha), dps=40)
    else:
        value = mp_reference.log_a_fractional(q, sigma, alpha, dps=40)
    return q, sigma, alpha, mp.nstr(value, 20, min_fixed=-1, max_fixed=-1)


def main() -> None:
    grid = list(itertools.product(Q_VALUES, SIGMA_VALUES, INTEGER_ORDERS + FRACTIONAL_ORDERS))
    start = time.time()
    with ProcessPoolExecutor() as pool:
        rows = list(pool.map(_one, grid, chunksize=4))
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["q", "sigma", "alpha", "log_a"])
        writer.writerows(rows)
    print(f"wrote {len(rows)} rows to {OUT} in {time.time() - start:.0f} s")


if __name__ == "__main__":
    main()
