"""Rényi-DP kernels of the Sampled Gaussian Mechanism: ``log_a`` and ``rdp``.

The Sampled Gaussian Mechanism (SGM) with sampling rate ``q`` and noise multiplier ``σ``
has Rényi divergence of order ``α`` at most ``log A_α / (α − 1)`` where

    A_α = E_{z∼N(0,σ²)}[((1 − q) + q·e^{(2z−1)/2σ²})^α]

(Mironov, Talwar and Zhang 2019, Sec. 2–3). Both public kernels broadcast NumPy-style over
their arguments, run under ``jax.jit``, ``jax.vmap`` and ``jax.grad``, and compile once per
input shape. Integer and fractional orders go through the same exact computation; no
series is truncated and nothing is bounded by dropping signs.

Routes (decided by :func:`_route`, the one place that chooses; every path computes
``log(A_α − 1)`` on regular cells and shares :func:`_assemble` for the special values and
the safety margin):

============  ===========================================  ================================
dtype         orders                                        path
============  ===========================================  ================================
float64       concrete, ≥ 8, the same for every cell         shared-order path
              (``(K,)``, ``(1, K)``, ``(1, …, 1, K)``,      (:mod:`jaxrdp._grid`, once per
              a list, a concrete JAX array)                  shape and order vector)
float32       the same                                       shared-order path in float32
                                                             with double-float parts
                                                             (:mod:`jaxrdp._grid32`)
either        traced, laid out as above, as many as a        compared as the program runs
              standard vector (:data:`_STANDARD_ORDERS`:     (:func:`_guarded`): if equal,
              jaxrdp's, dp_accounting's or Opacus's          that vector's shared-order
              defaults)                                      path, else elementwise
float64       other traced, fewer than 8, differing per      elementwise quadrature
              cell, or ``rdp_core(..., shared=False)``       (:mod:`jaxrdp._quadrature`)
float32       the same                                       elementwise quadrature, centred
                                                             (:mod:`jaxrdp._tilted32`)
============  ===========================================  ================================

Inside the shared-order path (:class:`jaxrdp._grid.OrderPlan`, then per chunk of cells
sorted by σ): integer orders ``2 ≤ α ≤ 2¹⁴`` take exact binomial sums (from ``α = 256``
on, over their first and last 64 terms plus a bound on the rest, where that bound is
negligible; :func:`jaxrdp._grid.window_constants`); fractional orders
``1 < α ≤ 12`` take nodes shared across orders (one Gauss–Hermite rule up to
``1/σ = 2``, Gauss–Legendre panels beyond), in the tier of
:data:`jaxrdp._grid.SHARED_TIERS` (float32: :data:`jaxrdp._grid32.SHARED_TIERS`, fewer
nodes) that the chunk's largest ``1/σ`` needs; beyond the last tier
(``σ < 1/3.4``) and for other orders, the elementwise quadrature of the same dtype. In
float32 the shared sums' large parts (``k·log q`` against ``k(k−1)/2σ²``, ``−t²/2``
against ``(α − 1)·log(1 + x)``, several hundred nats) are computed in double-float32 and
cancel exactly before the one rounding to float32, and derivatives are those of the
elementwise float32 quadrature (:func:`jax.custom_jvp`).

Traced orders have no values to plan with. The plan is static structure: which orders
are integers, the integer sums' term counts (a static ``max α + 1`` per size class) and
binomial tables, the fractional orders' series coefficients and node cover
(``α_max·s + reach``). A generic plan for any traced vector (the integer/fractional choice
made per order with ``jnp.where``) would have to size the integer sums for the largest
order allowed (``2¹⁴ + 1`` terms per order and cell, against ~30 for a typical order),
and the shared nodes cover only ``α ≤ 12``, so every other order would still need the
elementwise quadrature, which ``jnp.where`` evaluates for every lane: it is never faster
than the elementwise path at the same 5e-13. What traced orders usually are, though, is
one of a few standard vectors; a traced vector of such a length is compared with that
vector when the program runs, and :func:`jax.lax.cond` runs the shared-order path's
program when they are equal (bit for bit its values) and the elementwise one otherwise.
Both are compiled. Callers that know their orders can also pass them concretely: the
accountant's ``RdpState`` carries its orders as static data.

Precision: called with Python or NumPy inputs (host level), the kernels compute in
float64 inside a local ``jax.enable_x64`` scope, leaving the global JAX configuration
alone, and return float64 JAX arrays. Called with JAX arrays or inside a transformation,
they compute in the inputs' dtype. In float32 the log-integrand is expanded around each
quadrature window's centre, whose value and slope are computed in double-float32 (so large
cancelling parts such as α·log q and α²/2σ² cost no accuracy); the result, accurate to a few
1e-6 relative, is raised by the safety margin :data:`FLOAT32_SAFETY_MARGIN` so that it never
falls below the float64 value and stays within 1e-4 of it (the shared-order path in float32
is accurate to the same few 1e-6, and the closed form of ``q = 1`` gets the same margin).
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from jaxrdp import _grid, _precision, _quadrature, _validate

__all__ = ["DEFAULT_ORDERS", "FLOAT32_SAFETY_MARGIN", "FLOAT64_SAFETY_MARGIN", "log_a", "rdp"]

#: Relative amount added to float32 results so that they stay above the exact value; the
#: float32 evaluation itself is accurate to a few 1e-6 (tested), ten times less.
FLOAT32_SAFETY_MARGIN = 5e-5

#: Relative amount added to float64 results: the quadrature and the exact integer sums are
#: accurate to a few 1e-13, in either direction; this makes the result err upwards.
FLOAT64_SAFETY_MARGIN = 5e-13

DEFAULT_ORDERS: np.ndarray = np.concatenate(
    [
        np.array([1.01, 1.02, 1.05]),
        np.round(np.arange(1.1, 11.0, 0.1), 1),
        np.arange(11.0, 64.0),
        np.array([80.0, 96.0, 128.0, 160.0, 192.0, 256.0, 320.0, 384.0, 512.0, 768.0, 1024.0]),
    ]
)
"""Default Rényi orders (float64, sorted, 166 values).

dp_accounting's defaults (1.1–10.9 in steps of 0.1, 11–63, 128, 256, 512, 1024) are a
subset, so an ε optimised over these orders is never larger than dp_accounting's; added
are 1.01, 1.02 and 1.05, which win for large ε (few steps, small σ) and which jaxrdp can
evaluate exactly where series-based accountants fail, and 80, 96, 160, 192, 320, 384, 768,
which halve the gaps of the sparse high end used by small-ε, large-σ runs.
"""
DEFAULT_ORDERS.setflags(write=False)

#: Order vectors that traced orders are compared with when the program runs (see
#: :func:`_guarded`): jaxrdp's defaults, dp_accounting's (1.1–10.9 by 0.1, 11–63, 128,
#: 256, 512, 1024) and Opacus's and TensorFlow Privacy's (1.1–10.9 by 0.1, 12–63), built
#: the way those libraries build them. Their lengths (166, 156, 151) differ, so a traced
#: vector has at most one candidate.
_STANDARD_ORDERS: tuple[np.ndarray, ...] = (
    DEFAULT_ORDERS,
    np.array([1 + x / 10.0 for x in range(1, 100)] + list(range(11, 64)) + [128, 256, 512, 1024],
             dtype=np.float64),
    np.array([1 + x / 10.0 for x in range(1, 100)] + list(range(12, 64)), dtype=np.float64),
)


def _domain_masks(q, sigma, alpha):
    """Masks of the special cases; arrays broadcast against each other."""
    invalid = (
        jnp.isnan(q)
        | jnp.isnan(sigma)
        | jnp.isnan(alpha)
        | (q < 0)
        | (q > 1)
        | (sigma < 0)
        | (alpha < 1)
    )
    trivial = (q == 0) | (alpha == 1) | jnp.isposinf(sigma)
    infinite = ~trivial & ((sigma == 0) | jnp.isposinf(alpha))
    full = ~trivial & ~infinite & (q == 1)
    regular = ~(invalid | trivial | infinite | full)
    return invalid, infinite, full, regular


def _assemble(log_am1, q, sigma, alpha):
    """log A from log(A − 1) on regular lanes plus the closed-form special cases."""
    invalid, infinite, full, regular = _domain_masks(q, sigma, alpha)
    value = jnp.logaddexp(jnp.zeros_like(log_am1), log_am1)
    if value.dtype == jnp.float64:
        value = value * (1.0 + FLOAT64_SAFETY_MARGIN)
    else:
        value = value * (1.0 + FLOAT32_SAFETY_MARGIN)
    sigma_f = jnp.where(full, sigma, 1.0)
    alpha_f = jnp.where(full, alpha, 2.0)
    value_full = alpha_f * (alpha_f - 1.0) / (2.0 * sigma_f * sigma_f)
    if value_full.dtype == jnp.float32:  # three float32 roundings, each of either sign
        value_full = value_full * (1.0 + FLOAT32_SAFETY_MARGIN)
    out = jnp.where(regular, value, jnp.where(full, value_full, 0.0))
    out = jnp.where(infinite, jnp.inf, out)
    return jnp.where(invalid, jnp.nan, out)


def _log_a_elementwise(q, sigma, alpha):
    """log A_α for broadcast arrays of one dtype; NaN outside the domain."""
    cfg = _quadrature.config_for(q.dtype)
    regular = _domain_masks(q, sigma, alpha)[3]
    q_r = jnp.where(regular, q, 0.5)
    sigma_r = jnp.where(regular, sigma, 1.0)
    alpha_r = jnp.where(regular, alpha, 2.0)
    log_am1 = _quadrature.log_a_minus_one(q_r, sigma_r, alpha_r, cfg)
    return _assemble(log_am1, q, sigma, alpha)


def _log_a_orders(q, sigma, plan: _grid.OrderPlan):
    """log A_α for cells ``q, σ`` (one shape ``S``) times static orders → ``S + (K,)``."""
    alpha = jnp.asarray(plan.orders, q.dtype)
    regular_cell = (q > 0) & (q < 1) & (sigma > 0) & (sigma < jnp.inf)
    q_r = jnp.where(regular_cell, q, 0.5)
    sigma_r = jnp.where(regular_cell, sigma, 1.0)
    log_am1 = _grid.log_a_minus_one(q_r, sigma_r, plan)
    return _assemble(log_am1, q[..., None], sigma[..., None], alpha)


def _representable_inputs(q, sigma):
    """``q`` and ``σ`` moved, in the sound direction, to where the dtype can compute them.

    A positive subnormal ``q`` would be flushed to 0 by the CPU (giving RDP 0); it is
    raised to the smallest normal number, and RDP only grows with ``q``. A finite ``σ``
    beyond ``0.1/√tiny`` would underflow ``1/σ²``; it is lowered to that cap, and RDP only
    grows as ``σ`` falls (the value there is already below the dtype's tiny).
    """
    info = jnp.finfo(q.dtype)
    int_type = jnp.int32 if q.dtype == jnp.float32 else jnp.int64
    bits = jax.lax.bitcast_convert_type(q, int_type)
    smallest_normal = jax.lax.bitcast_convert_type(jnp.asarray(info.tiny, q.dtype), int_type)
    q = jnp.where((bits > 0) & (bits < smallest_normal), jnp.asarray(info.tiny, q.dtype), q)
    cap = 0.1 / math.sqrt(float(info.tiny))  # a Python float: weakly typed, keeps float32
    sigma = jnp.where(jnp.isfinite(sigma), jnp.minimum(sigma, cap), sigma)
    return q, sigma


def _rdp_from_log_a(value, q, sigma, alpha):
    above_one = alpha > 1
    safe_denominator = jnp.where(above_one & jnp.isfinite(alpha), alpha - 1.0, 1.0)
    out = value / safe_denominator
    out = jnp.where(jnp.isposinf(alpha) & (q > 0) & (sigma < jnp.inf), jnp.inf, out)
    out = jnp.where(jnp.isposinf(alpha) & ((q == 0) | jnp.isposinf(sigma)), 0.0, out)
    return jnp.where(above_one | jnp.isnan(value), out, jnp.nan)


@jax.jit
def _log_a_jit(q, sigma, alpha):
    q, sigma, alpha = jnp.broadcast_arrays(q, sigma, alpha)
    q, sigma = _representable_inputs(q, sigma)
    return _log_a_elementwise(q, sigma, alpha)


@jax.jit
def _rdp_jit(q, sigma, alpha):
    q, sigma, alpha = jnp.broadcast_arrays(q, sigma, alpha)
    q, sigma = _representable_inputs(q, sigma)
    return _rdp_from_log_a(_log_a_elementwise(q, sigma, alpha), q, sigma, alpha)


def _cells(q, sigma, cells: tuple, dtype: str):
    """``q, σ`` (in ``dtype``) broadcast to ``cells + (1,)`` with that orders' axis dropped."""
    q, sigma = (jnp.broadcast_to(jnp.asarray(v, dtype), cells + (1,))[..., 0]
                for v in (q, sigma))
    return _representable_inputs(q, sigma)


@functools.partial(jax.jit, static_argnames=("plan", "cells", "dtype"))
def _log_a_orders_jit(q, sigma, plan, cells, dtype="float64"):
    q, sigma = _cells(q, sigma, cells, dtype)
    return _log_a_orders(q, sigma, plan)


@functools.partial(jax.jit, static_argnames=("plan", "cells", "dtype"))
def _rdp_orders_jit(q, sigma, plan, cells, dtype="float64"):
    q, sigma = _cells(q, sigma, cells, dtype)
    alpha = jnp.asarray(plan.orders, q.dtype)
    value = _log_a_orders(q, sigma, plan)
    return _rdp_from_log_a(value, q[..., None], sigma[..., None], alpha)


# The fast path compiles once per (shape, order vector); short vectors, which callers
# tend to vary, go through the elementwise path, which compiles once per shape.
_MIN_ORDERS_FOR_FAST_PATH = 8


def _route(q, sigma, alpha, dtype, shared: bool = True):
    """The path of a call, as in the module's table.

    Returns ``("orders", plan)`` for concrete orders the same for every cell,
    ``("guarded", plan)`` for traced orders laid out that way whose length is that of one
    of :data:`_STANDARD_ORDERS` (the plan is that vector's), and ``("elementwise", None)``
    otherwise, or always where ``shared`` is False (see :func:`rdp_core`).
    """
    if not shared or dtype not in (jnp.float64, jnp.float32):
        return ("elementwise", None)
    shape = np.shape(alpha)
    if not _shared_layout(np.shape(q), np.shape(sigma), shape):
        return ("elementwise", None)
    if isinstance(alpha, jax.core.Tracer):
        for orders in _STANDARD_ORDERS:
            if orders.size == shape[-1]:
                return ("guarded", _plan(tuple(orders.tolist())))
        return ("elementwise", None)
    alpha_np = np.asarray(alpha, dtype=np.float64)
    return ("orders", _plan(tuple(alpha_np.reshape(-1).tolist())))


def _shared_layout(q_shape, sigma_shape, alpha_shape) -> bool:
    """Whether the orders are the same for every cell: at least
    ``_MIN_ORDERS_FOR_FAST_PATH`` of them on the last axis, all other axes of size 1
    (``(K,)``, ``(1, K)``, ``(1, …, 1, K)``), and the last axis of ``q`` and ``sigma`` (if
    any) of size 1."""
    if len(alpha_shape) == 0 or alpha_shape[-1] < _MIN_ORDERS_FOR_FAST_PATH:
        return False
    if any(d != 1 for d in alpha_shape[:-1]):
        return False
    cell_shape = np.broadcast_shapes(q_shape, sigma_shape)
    return not cell_shape or cell_shape[-1] == 1


@functools.lru_cache(maxsize=32)
def _plan(orders: tuple) -> _grid.OrderPlan:
    return _grid.OrderPlan(orders)


def _dispatch(elementwise, orders_kernel, q, sigma, alpha, *, alpha_low_inclusive: bool):
    _validate.check_range("q", q, low=0.0, high=1.0)
    _validate.check_range("sigma", sigma, low=0.0)
    _validate.check_range("alpha", alpha, low=1.0, low_inclusive=alpha_low_inclusive)
    dtype, context = _precision.compute_context(q, sigma, alpha)
    with context:
        return _run(elementwise, orders_kernel, q, sigma, alpha, dtype)


def _run(elementwise, orders_kernel, q, sigma, alpha, dtype, shared=True):
    """Evaluate on the path that :func:`_route` chooses (inputs already validated)."""
    path, plan = _route(q, sigma, alpha, dtype, shared)
    # Cells: the broadcast shape without the orders' axis, along which q and σ have size 1
    # (or which they lack). Broadcasting happens inside the compiled program.
    cells = np.broadcast_shapes(np.shape(q), np.shape(sigma), np.shape(alpha))[:-1]
    if path == "orders":
        return orders_kernel(q, sigma, plan, cells, jnp.dtype(dtype).name)
    q, sigma, alpha = (jnp.asarray(v, dtype) for v in (q, sigma, alpha))
    if path == "guarded":
        return _guarded(elementwise, orders_kernel, plan, cells)(q, sigma, alpha)
    return elementwise(q, sigma, alpha)


@functools.lru_cache(maxsize=32)
def _guarded(elementwise, orders_kernel, plan: _grid.OrderPlan, cells: tuple):
    """Traced orders that may be a standard vector: the shared-order path when, as the
    program runs, they equal ``plan.orders`` (in their dtype), else the elementwise path.

    :func:`jax.lax.cond` runs one branch. Outside ``vmap`` over the orders the test is a
    scalar; batched, both branches run (values unchanged). Derivatives are the elementwise
    path's, in every argument: the shared path treats its orders as constants.
    """

    @jax.custom_jvp
    def run(q, sigma, alpha):
        known = alpha.reshape(-1) == jnp.asarray(plan.orders, alpha.dtype)
        return jax.lax.cond(
            jnp.all(known),
            lambda q, sigma, _: orders_kernel(q, sigma, plan, cells, q.dtype.name),
            elementwise,
            q, sigma, alpha,
        )

    @run.defjvp
    def _run_jvp(primals, tangents):
        return run(*primals), jax.jvp(elementwise, primals, tangents)[1]

    return run


def rdp_core(q, sigma, alpha, *, shared: bool = True):
    """:func:`rdp` for internal callers that validated their arguments already.

    No argument checks and no precision choice: ``q`` and ``sigma`` are computed in
    their (common floating) dtype, inside the caller's precision scope; ``alpha`` takes
    the path that :func:`rdp` would. ``shared=False`` asks for the elementwise path
    whatever the orders: a program about half as large to compile, for processes that
    evaluate once (the command line's one-shot ε).
    """
    dtype = jnp.result_type(q, sigma)
    if not jnp.issubdtype(dtype, jnp.floating):
        dtype = jnp.result_type(float)
    return _run(_rdp_jit, _rdp_orders_jit, q, sigma, alpha, dtype, shared)


def log_a(q, sigma, alpha):
    """log A_α of the Sampled Gaussian Mechanism, elementwise with broadcasting.

    ``A_α = E_{z∼N(0,σ²)}[((1 − q) + q·e^{(2z−1)/2σ²})^α]`` is computed as
    ``log1p(E[g(x)])`` with ``g(x) = (1+x)^α − 1 − αx ≥ 0`` and
    ``x = q·expm1((2z−1)/2σ²)``, integrated by adaptive-window Gauss–Legendre quadrature
    in log space: exact to about 1e-13 relative for integer and fractional α alike, never
    negative, and with full relative precision for tiny values.

    Args:
      q: sampling rate(s) in ``[0, 1]``; any shape broadcastable with the others.
      sigma: noise multiplier(s) ``σ ≥ 0`` (noise std divided by the L2 sensitivity).
      alpha: Rényi order(s) ``α ≥ 1``; ``+inf`` allowed.

    Returns:
      Array of the broadcast shape. Special values: ``0`` for ``q = 0``, ``α = 1`` or
      ``σ = +inf``; ``α(α−1)/2σ²`` for ``q = 1``; ``+inf`` for ``σ = 0`` or ``α = +inf``
      (with ``q > 0``). Under ``jit``, out-of-domain inputs (``q ∉ [0, 1]``, ``σ < 0``,
      ``α < 1``, NaN) give NaN, meaning "undefined", never a valid-looking number.

    Raises:
      ValueError: with concrete inputs, naming the first out-of-domain argument and value.

    References:
      Mironov, Talwar, Zhang (2019), "Rényi Differential Privacy of the Sampled Gaussian
      Mechanism", Sec. 3 (definition of A_α, Sec. 3.3 for the exact computation).
    """
    return _dispatch(_log_a_jit, _log_a_orders_jit, q, sigma, alpha, alpha_low_inclusive=True)


def rdp(q, sigma, alpha):
    """Per-step Rényi DP ``log A_α / (α − 1)`` of the Sampled Gaussian Mechanism.

    Args:
      q: sampling rate(s) in ``[0, 1]``; broadcastable with the others.
      sigma: noise multiplier(s) ``σ ≥ 0``.
      alpha: Rényi order(s) ``α > 1``; ``+inf`` allowed.

    Returns:
      Array of the broadcast shape: RDP ε(α) of one step. ``0`` for ``q = 0``,
      ``α / 2σ²`` for ``q = 1``, ``+inf`` for ``σ = 0`` or ``α = +inf`` (with ``q > 0``).
      Under ``jit``, out-of-domain inputs (including ``α ≤ 1``) give NaN.

    Raises:
      ValueError: with concrete inputs, naming the first out-of-domain argument and value.

    References:
      Mironov, Talwar, Zhang (2019), Sec. 3, Eq. (3); Mironov (2017), "Rényi Differential
      Privacy", Definition 4.
    """
    return _dispatch(_rdp_jit, _rdp_orders_jit, q, sigma, alpha, alpha_low_inclusive=False)
