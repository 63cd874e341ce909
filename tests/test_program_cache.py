"""The command line's store of traced programs: same values, stored once, read back, robust."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrdp import _program_cache, conversions


@pytest.fixture
def store(tmp_path):
    _program_cache.enable(tmp_path / "programs")
    yield tmp_path / "programs"
    _program_cache.disable()


def _counting():
    traces = []

    def fn(x, y, power):
        traces.append(power)  # runs when the function is traced, not when it is executed
        return {"value": jnp.sum(x**power) * y, "shape": x}

    return fn, traces


def test_off_by_default_calls_the_function_as_it_is():
    fn, traces = _counting()
    out = _program_cache.call("f", fn, [np.arange(3.0), 2.0], (2,))
    assert traces == [2] and float(out["value"]) == 10.0


def test_stored_once_and_read_back_without_tracing(store):
    fn, traces = _counting()
    x = np.arange(4.0, dtype=np.float32)
    first = _program_cache.call("f", fn, [x, np.float32(3.0)], (3,))
    assert float(first["value"]) == 3.0 * (0 + 1 + 8 + 27)
    assert len(list(store.glob("*.pkl"))) == 1 and traces == [3]
    _program_cache._programs.clear()  # as a new process: only the file remains
    again = _program_cache.call("f", fn, [x, np.float32(3.0)], (3,))
    assert traces == [3]  # not traced again
    assert float(again["value"]) == float(first["value"])
    np.testing.assert_array_equal(again["shape"], x)
    # another static argument or another shape is another program
    _program_cache.call("f", fn, [x, np.float32(3.0)], (2,))
    _program_cache.call("f", fn, [x[:3], np.float32(3.0)], (3,))
    assert len(list(store.glob("*.pkl"))) == 3 and traces == [3, 2, 3]


def test_a_damaged_store_is_traced_anew_and_rewritten(store):
    fn, traces = _counting()
    args = [np.arange(3.0, dtype=np.float32), np.float32(1.0)]
    _program_cache.call("f", fn, args, (1,))
    (path,) = store.glob("*.pkl")
    path.write_bytes(b"not a program")
    _program_cache._programs.clear()
    assert float(_program_cache.call("f", fn, args, (1,))["value"]) == 3.0
    assert traces == [1, 1] and path.read_bytes() != b"not a program"


def test_one_shot_epsilon_is_the_same_through_the_store(store):
    run = (256 / 60000, 1.1, 3516, 1e-5)
    _program_cache.disable()
    direct = [float(v) for v in conversions.epsilon_once(*run)]
    _program_cache.enable(store)
    stored = [float(v) for v in conversions.epsilon_once(*run)]
    _program_cache._programs.clear()
    read_back = [float(v) for v in conversions.epsilon_once(*run)]
    # the same program compiled with the same options: the same bits
    assert stored == direct and read_back == direct
    # and jaxrdp.epsilon (the shared-order program) within the kernels' accuracy
    assert direct[0] == pytest.approx(float(conversions.epsilon(*run)[0]), rel=1e-12)
    assert jax.config.jax_enable_x64 is False  # no global switch left behind
