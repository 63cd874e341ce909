"""Shared pieces of the benchmark scripts (imported as ``_common``: each script is run as
``python benchmarks/<script>.py``, which puts this folder on ``sys.path``)."""

from __future__ import annotations

import time

import jax
import numpy as np

#: dp_accounting's default Rényi orders.
DP_ORDERS = np.array(
    [1 + x / 10.0 for x in range(1, 100)] + list(range(11, 64)) + [128, 256, 512, 1024],
    dtype=np.float64,
)
#: Integer orders only (where dp_accounting's sum is exact): 2–63, 128, 256, 512, 1024.
INT_ORDERS = np.array(list(range(2, 64)) + [128, 256, 512, 1024], dtype=np.float64)


def best_of(fn, repeats):
    """Smallest wall time of ``repeats`` calls of ``fn`` (waiting for JAX results)."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - start)
    return min(times)
