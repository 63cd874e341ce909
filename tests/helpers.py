"""Helpers shared by the test files: the frozen reference tables and dp_accounting's PLD."""

import csv
import os

import pytest

DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")


def reference_rows(name):
    """The rows of ``tests/data/<name>`` as dicts of strings (its ``#`` comment lines skipped)."""
    with open(os.path.join(DATA_DIR, name)) as f:
        return list(csv.DictReader(line for line in f if not line.startswith("#")))


def pld_distribution(q, sigma, steps, pessimistic, interval=1e-4):
    """dp_accounting's privacy loss distribution of ``steps`` sampled Gaussian steps.

    Pessimistic (connect-the-dots) or optimistic (privacy buckets, rounded down), at the
    value discretisation ``interval``; skips the test where dp_accounting is missing.
    """
    pld_mod = pytest.importorskip("dp_accounting.pld.privacy_loss_distribution")
    return pld_mod.from_gaussian_mechanism(
        standard_deviation=sigma, sensitivity=1.0, sampling_prob=q,
        pessimistic_estimate=pessimistic, value_discretization_interval=interval,
        use_connect_dots=pessimistic,
    ).self_compose(int(steps))
