"""The kept mpmath references (``tests/stored.py``, ``tests/data/stored.json``) are what
their functions compute: the cheapest kept values of every function are recomputed."""

import mpmath as mp

import stored


def _close(kept, new):
    if isinstance(kept, tuple):
        return len(kept) == len(new) and all(_close(a, b) for a, b in zip(kept, new))
    if isinstance(kept, bool):
        return kept == new
    with mp.workdps(stored.DIGITS):
        kept, new = mp.mpmathify(kept), mp.mpmathify(new)
        if mp.isnan(kept):
            return bool(mp.isnan(new))
        return abs(kept - new) <= mp.mpf(10) ** (5 - stored.DIGITS) * max(abs(kept), mp.mpf(10) ** -300)


def test_kept_values_are_recomputed_exactly():
    functions = stored.kept_functions()
    # every module that keeps values (their functions' sources unchanged since)
    assert {p.split(".")[0] for p in functions} >= {"test_kernels", "test_profile",
                                                   "test_profile_properties", "test_sweep",
                                                   "test_wor"}, functions
    for prefix in functions:
        sample = stored.recompute_sample(prefix, 2)
        assert sample, prefix
        for key, kept, new in sample:
            assert _close(kept, new), (key, kept, new)


def test_a_changed_value_is_caught():
    """The comparison above sees a change in the 30th digit."""
    with mp.workdps(40):
        kept = mp.mpf("1.234567890123456789012345678901234")
        changed = kept * (1 + mp.mpf(10) ** -30)
    assert _close(kept, kept) and not _close(kept, changed)
