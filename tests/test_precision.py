"""float32 work inside a global x64 switch (``jaxrdp._precision``).

A user who turns x64 on for their own work and passes float32 arrays (a float32 training
step, say) must get the float32 computation that the float32 tests verify against float64,
not a float64 promotion of half of it: NumPy float64 constants inside the float32 kernels
would otherwise promote the graph (both paths raised shape errors inside double-float
splits, or returned float64). The reference is the same call with x64 off.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrdp
from jaxrdp import accountant

# at least eight orders (the shared-order path), integer and fractional
ORDERS = np.array([1.5, 2.0, 2.5, 3.0, 4.0, 5.5, 8.0, 16.0])
Q = jnp.asarray([1e-4, 3e-3, 0.05, 0.3], jnp.float32)
SIGMA = jnp.asarray([0.6, 1.1, 2.5, 8.0], jnp.float32)

CALLS = {
    "rdp, two orders (elementwise)": lambda q, s: jaxrdp.rdp(
        q[:, None], s[:, None], jnp.asarray([2.0, 3.5], jnp.float32)),
    "gradient, shared orders": jax.grad(
        lambda q, s: jnp.sum(jaxrdp.rdp(q[:, None], s[:, None], ORDERS)), argnums=(0, 1)),
    "accountant": lambda q, s: accountant.get_epsilon(
        accountant.compose(accountant.init(ORDERS, dtype=jnp.float32), q[1], s[1], 500), 1e-5),
}
JITTED = ("accountant",)  # a float32 training step's accounting, jitted under x64


@pytest.mark.slow
def test_float32_inputs_under_global_x64_give_the_float32_results():
    for name, call in CALLS.items():
        reference = jax.tree_util.tree_leaves(call(Q, SIGMA))
        assert all(r.dtype == jnp.float32 for r in reference), name
        with jax.enable_x64(True):
            runs = [call] + ([jax.jit(call)] if name in JITTED else [])
            for got in (run(Q, SIGMA) for run in runs):
                got = jax.tree_util.tree_leaves(got)
                assert [g.dtype for g in got] == [jnp.float32] * len(reference), name
                for g, r in zip(got, reference):
                    # the same float32 computation: identical up to XLA's fusion choices
                    np.testing.assert_allclose(np.asarray(g), np.asarray(r), rtol=1e-6,
                                               err_msg=name)
        assert not jax.config.jax_enable_x64  # the scope did not leak
