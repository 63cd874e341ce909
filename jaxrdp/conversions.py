"""From Rényi-DP curves to (ε, δ)-DP guarantees, and the SGM composed over many steps.

A mechanism that is ``(α, r_α)``-RDP for every order ``α`` in a grid is ``(ε, δ)``-DP for
the best order of the grid. Two conversions are implemented, both sound for every real
order ``α > 1``:

* ``"classic"``: ``ε = r_α + log(1/δ) / (α − 1)``
  (Mironov 2017, Proposition 3; Claim 21.3 of the blog post in ``shared/papers``).
* ``"improved"``: ``ε = r_α + log1p(−1/α) − log(δ α) / (α − 1)``
  (Canonne, Kamath, Steinke 2020, Proposition 12; Balle et al. 2020, Theorem 21),
  equivalently ``δ = exp((α − 1)(r_α − ε)) · (1 − 1/α)^(α−1) / α``. Never worse than
  ``"classic"``, because ``(1 − 1/α)^(α−1) / α < 1``.

Both are combined with the **KL shortcut**: Rényi divergences grow with the order, so
``KL ≤ r_α`` for every ``α > 1``, and by the Bretagnolle–Huber inequality the total
variation distance, which is the ``δ`` of ``(0, δ)``-DP, is at most ``sqrt(1 − e^{−KL})``.
Hence ``δ ≥ sqrt(1 − exp(−r_α))`` for some order already gives ``ε = 0``, and
``δ ≤ sqrt(1 − exp(−r_α))`` holds for every ``ε ≥ 0``.

Numerics. Every per-order value is rounded *outwards* by ``8·eps(dtype)`` times the sum of
the magnitudes of its terms, so rounding never makes ε or δ smaller than the exact value
of the formula (a relative change of about 2e-15 in float64 and 1e-6 in float32). Inputs
given as Python or NumPy values are computed in float64 inside a local
``jax.enable_x64`` scope and returned as float64 JAX arrays, like :func:`jaxrdp.rdp`; JAX
arrays and tracers are computed in their own floating dtype (float32 at least).

NaN conventions. With concrete inputs, invalid arguments raise ``ValueError`` naming the
argument and the offending value or shape. Under a JAX transformation no exception can be
raised, and an invalid argument (negative or NaN RDP, ``δ ∉ [0, 1]``, ``ε < 0``,
``α ≤ 1``, negative or NaN steps) turns the affected results into NaN, which means
"undefined input", never a valid-looking 0.
"""

from __future__ import annotations

import functools
import warnings
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxrdp import _precision, _program_cache, _validate, kernels

__all__ = [
    "METHODS",
    "DeltaResult",
    "EpsilonResult",
    "OrderAtEdgeWarning",
    "compose_rdp",
    "delta",
    "delta_from_rdp",
    "epsilon",
    "epsilon_from_rdp",
]

#: The RDP → (ε, δ) conversions this module implements.
METHODS = ("classic", "improved")

#: Outward rounding of every per-order value, in units of the dtype's machine epsilon
#: times the summed magnitudes of the terms.
_ROUNDING_ULPS = 8.0

#: Golden-section iterations of the order refinement (bracket shrinks by 0.618**k).
_REFINE_ITERATIONS = 40


class EpsilonResult(NamedTuple):
    """ε of an RDP curve, with the order that attains it.

    Attributes:
      epsilon: the ε of the ``(ε, δ)`` guarantee, shape of the leading (non-order) axes.
      order: the Rényi order at which it is attained (a grid order, or the refined
        continuous order when ``refine=True`` improved on the grid).
      at_edge: True where the best grid order is the smallest or the largest order of the
        grid (and ε is finite and positive), i.e. a wider grid might give a smaller ε.
    """

    epsilon: jax.Array
    order: jax.Array
    at_edge: jax.Array


class DeltaResult(NamedTuple):
    """δ of an RDP curve, with the order that attains it.

    Attributes:
      delta: the δ of the ``(ε, δ)`` guarantee, in ``[0, 1]``.
      order: the Rényi order at which it is attained.
      at_edge: True where the best grid order is the smallest or the largest of the grid
        (and ``0 < δ < 1``).
    """

    delta: jax.Array
    order: jax.Array
    at_edge: jax.Array


class OrderAtEdgeWarning(UserWarning):
    """The optimal Rényi order is the smallest or largest order of the grid."""


# --------------------------------------------------------------------------- helpers


def check_method(method: str) -> None:
    """The one check of a conversion method name (``ValueError`` naming it)."""
    _validate.check_choice("method", method, METHODS)


def check_steps(steps) -> None:
    """Steps must be non-negative integers (concrete values only)."""
    _validate.check_integer("steps", steps, low=0.0)


def check_orders(orders) -> None:
    """Orders: at least one axis, not empty, every element ``> 1`` (concrete values only)."""
    if np.ndim(orders) < 1:
        raise ValueError(
            f"orders must have at least one axis (the orders axis); got shape {np.shape(orders)}"
        )
    if np.shape(orders)[-1] == 0:
        raise ValueError("orders must not be empty; got shape (0,)")
    _validate.check_range("orders", orders, low=1.0, low_inclusive=False)


def scale_rdp(per_step, steps):
    """``steps · per_step`` with ``0 · inf = 0`` (zero steps cost nothing); NaN for bad steps."""
    steps = jnp.asarray(steps, per_step.dtype)
    bad = jnp.isnan(steps) | (steps < 0)
    scaled = jnp.where(steps == 0, jnp.zeros_like(per_step), steps * per_step)
    return jnp.where(bad, jnp.nan, scaled)


def _ulp(dtype) -> float:
    return _ROUNDING_ULPS * float(jnp.finfo(dtype).eps)


def _safe(x):
    """``x`` where finite, 0 elsewhere: for magnitude estimates that must stay finite."""
    return jnp.where(jnp.isfinite(x), x, 0.0)


def _conversion_terms(alpha, log_delta, method: str):
    """The two terms ``c_α(δ) = term1 + term2`` of ε(α) = r_α + c_α(δ); elementwise.

    Classic (Mironov 2017, Prop. 3): ``c = log(1/δ)/(α−1)``; improved (Canonne, Kamath,
    Steinke 2020, Prop. 12): ``c = log(1−1/α) − (log δ + log α)/(α−1)``. At α = ∞ both
    are 0 (pure DP).
    """
    finite_alpha = jnp.isfinite(alpha)
    a = jnp.where(finite_alpha, alpha, 2.0)
    am1 = a - 1.0
    if method == "improved":
        term1 = jnp.log1p(-1.0 / a)
        term2 = -(log_delta + jnp.log(a)) / am1
    else:
        term1 = jnp.zeros_like(a)
        term2 = -log_delta / am1
    return jnp.where(finite_alpha, term1, 0.0), jnp.where(finite_alpha, term2, 0.0)


def rdp_budget(epsilon, delta, orders, method: str):
    """Per-order RDP budgets: order α meets ``(ε, δ)`` iff its total RDP is ``≤ R_α``.

    ``R_α = max(ε − c_α(δ), −log(1 − δ²))``: the inverse of the per-order conversion
    (:func:`epsilon_from_rdp`, up to its rounding margin) or its KL shortcut. An internal
    core (no checks): ``epsilon``, ``delta`` of shape ``(n,)``, ``orders`` ``(K,)``;
    returns ``(n, K)``. Used by calibrators to *model* feasibility; decisions are made
    with the exact ε.
    """
    log_delta = jnp.log(delta)[:, None]
    term1, term2 = _conversion_terms(jnp.asarray(orders, epsilon.dtype), log_delta, method)
    kl = -jnp.log1p(-delta * delta)
    return jnp.maximum(epsilon[:, None] - term1 - term2, kl[:, None])


def _epsilon_per_order(rdp, alpha, log_delta, method: str):
    """ε(α) of one order, with the KL shortcut; elementwise, all arrays of one dtype.

    ``rdp ≥ 0`` (may be ``+inf``), ``α > 1`` (may be ``+inf``), ``log δ ∈ [−inf, 0]``.
    """
    u = _ulp(rdp.dtype)
    term1, term2 = _conversion_terms(alpha, log_delta, method)
    eps = rdp + term1 + term2
    eps = eps + u * (jnp.abs(_safe(rdp)) + jnp.abs(term1) + jnp.abs(_safe(term2)))

    # KL shortcut: δ > sqrt(1 − e^{−r}) ⇔ 2 log δ > log(−expm1(−r)) gives ε = 0.
    log_tv = jnp.log(-jnp.expm1(-rdp))
    two_log_delta = 2.0 * log_delta
    kl_margin = u * (jnp.abs(_safe(log_tv)) + jnp.abs(_safe(two_log_delta)))
    kl = (rdp == 0) | (two_log_delta > log_tv + kl_margin)
    return jnp.where(kl, jnp.zeros_like(eps), eps)


def _log_delta_per_order(rdp, alpha, epsilon, method: str):
    """log δ(α) of one order, the minimum of the RDP bound and the KL bound; elementwise."""
    u = _ulp(rdp.dtype)
    finite_alpha = jnp.isfinite(alpha)
    a = jnp.where(finite_alpha, alpha, 2.0)
    am1 = a - 1.0
    r = _safe(rdp)
    e = _safe(epsilon)
    if method == "improved":
        l1 = am1 * jnp.log1p(-1.0 / a)
        la = jnp.log(a)
    else:
        l1 = jnp.zeros_like(a)
        la = jnp.zeros_like(a)
    log_d = am1 * (r - e) + l1 - la
    log_d = log_d + u * (jnp.abs(am1 * r) + jnp.abs(am1 * e) + jnp.abs(l1) + jnp.abs(la))
    # ε = ∞ with finite r: P ≪ Q, so δ = 0.  r = ∞: no bound from this order (δ = 1).
    log_d = jnp.where(jnp.isposinf(epsilon), -jnp.inf, log_d)
    log_d = jnp.where(jnp.isposinf(rdp), 0.0, log_d)
    # α = ∞ (pure DP ε ≥ r_∞ gives δ = 0).
    pure = (rdp <= epsilon) if method == "improved" else (rdp < epsilon)
    log_d_inf = jnp.where(pure & ~jnp.isposinf(rdp), -jnp.inf, 0.0)
    log_d = jnp.where(finite_alpha, log_d, log_d_inf)

    log_tv = jnp.log(-jnp.expm1(-rdp))  # −inf at r = 0, 0 at r = ∞
    log_kl = 0.5 * log_tv
    log_kl = log_kl + u * jnp.abs(_safe(log_kl))
    return jnp.minimum(log_d, log_kl)


def _edge_flag(index, orders_b):
    """True where ``index`` picks the smallest or the largest order along the last axis."""
    chosen = jnp.take_along_axis(orders_b, index[..., None], axis=-1)[..., 0]
    return (chosen == jnp.min(orders_b, axis=-1)) | (chosen == jnp.max(orders_b, axis=-1))


def _broadcast_curve(rdp, orders, target):
    """Broadcast an RDP curve, its orders and a per-curve target; sanitise bad curves.

    Returns ``(orders_b, target_b, safe_rdp, safe_orders, bad_curve)``: curves with a NaN
    or negative RDP value or an order ``≤ 1`` are flagged in ``bad_curve`` and fed
    harmless values, so neither results nor gradients of the other lanes see NaN.
    """
    shape = jnp.broadcast_shapes(rdp.shape, orders.shape)
    lead = jnp.broadcast_shapes(shape[:-1], target.shape)
    rdp_b = jnp.broadcast_to(rdp, lead + shape[-1:])
    orders_b = jnp.broadcast_to(orders, lead + shape[-1:])
    bad_rdp = jnp.isnan(rdp_b) | (rdp_b < 0)
    bad_order = jnp.isnan(orders_b) | (orders_b <= 1)
    bad_curve = jnp.any(bad_rdp | bad_order, axis=-1)
    safe_rdp = jnp.where(bad_rdp, 0.0, rdp_b)
    safe_orders = jnp.where(bad_order, 2.0, orders_b)
    return orders_b, jnp.broadcast_to(target, lead), safe_rdp, safe_orders, bad_curve


@functools.partial(jax.jit, static_argnames=("method",))
def epsilon_core(rdp, orders, delta, method):
    orders_b, delta_b, safe_rdp, safe_orders, bad_curve = _broadcast_curve(rdp, orders, delta)
    invalid = bad_curve | jnp.isnan(delta_b) | (delta_b < 0) | (delta_b > 1)
    safe_delta = jnp.where(invalid, 0.5, delta_b)
    log_delta = jnp.log(safe_delta)[..., None]
    per_order = _epsilon_per_order(safe_rdp, safe_orders, log_delta, method)

    index = jnp.argmin(per_order, axis=-1)
    eps = jnp.take_along_axis(per_order, index[..., None], axis=-1)[..., 0]
    order = jnp.take_along_axis(orders_b, index[..., None], axis=-1)[..., 0]
    eps = jnp.maximum(eps, 0.0)
    eps = jnp.where(safe_delta >= 1, 0.0, eps)  # everything is (0, 1)-DP
    at_edge = _edge_flag(index, orders_b) & (eps > 0) & jnp.isfinite(eps)
    eps = jnp.where(invalid, jnp.nan, eps)
    order = jnp.where(invalid, jnp.nan, order)
    return EpsilonResult(eps, order, at_edge & ~invalid), index


def _delta_from_log(log_d):
    """δ = min(1, e^{log δ}) as an upper bound: exactly 0 only where ``log δ = −inf`` (ε = ∞,
    pure DP, or a zero RDP order), otherwise at least the dtype's smallest normal number, so
    that a bound too small to represent is never reported as the (wrong) exact 0. The
    exponential's own rounding is covered by raising ``log δ`` by one more ``8·eps`` (near
    δ = 1 the outward rounding of the terms is far below one ulp of δ)."""
    tiny = jnp.finfo(log_d.dtype).tiny
    up = jnp.exp(log_d + _ulp(log_d.dtype))
    return jnp.where(jnp.isneginf(log_d), 0.0, jnp.clip(up, tiny, 1.0))


@functools.partial(jax.jit, static_argnames=("method",))
def delta_core(rdp, orders, epsilon, method):
    orders_b, eps_b, safe_rdp, safe_orders, bad_curve = _broadcast_curve(rdp, orders, epsilon)
    invalid = bad_curve | jnp.isnan(eps_b) | (eps_b < 0)
    safe_eps = jnp.where(invalid, 1.0, eps_b)[..., None]
    per_order = _log_delta_per_order(safe_rdp, safe_orders, safe_eps, method)

    index = jnp.argmin(per_order, axis=-1)
    log_d = jnp.take_along_axis(per_order, index[..., None], axis=-1)[..., 0]
    order = jnp.take_along_axis(orders_b, index[..., None], axis=-1)[..., 0]
    dlt = _delta_from_log(log_d)
    at_edge = _edge_flag(index, orders_b) & (dlt > jnp.finfo(dlt.dtype).tiny) & (dlt < 1)
    dlt = jnp.where(invalid, jnp.nan, dlt)
    order = jnp.where(invalid, jnp.nan, order)
    return DeltaResult(dlt, order, at_edge & ~invalid), index


def _check_shapes(rdp_shape, orders_shape, other_name, other_shape):
    if len(rdp_shape) < 1:
        raise ValueError(
            f"rdp must have an orders axis (last axis); got rdp of shape {tuple(rdp_shape)}"
        )
    try:
        full = np.broadcast_shapes(tuple(rdp_shape), tuple(orders_shape))
    except ValueError:
        full = None
    if full is None or full[-1] != rdp_shape[-1]:
        raise ValueError(
            "rdp and orders must agree on the last (orders) axis and broadcast; got "
            f"rdp of shape {tuple(rdp_shape)} and orders of shape {tuple(orders_shape)}"
        )
    try:
        np.broadcast_shapes(full[:-1], tuple(other_shape))
    except ValueError:
        raise ValueError(
            f"{other_name} must broadcast against the leading shape {full[:-1]} of rdp; "
            f"got {other_name} of shape {tuple(other_shape)}"
        ) from None


def _warn_if_at_edge(at_edge, orders, what: str) -> None:
    if not _validate.is_concrete(at_edge):
        return
    flags = np.asarray(at_edge)
    if np.any(flags):
        o = np.asarray(orders)
        warnings.warn(
            f"The optimal Rényi order for {what} is at the edge of the order grid "
            f"[{np.min(o):g}, {np.max(o):g}] for {int(flags.sum())} of {flags.size} "
            "input(s); a grid that extends further may give a tighter bound.",
            OrderAtEdgeWarning,
            stacklevel=3,
        )


# --------------------------------------------------------------------------- public: curves


def _convert_curve(rdp, orders, target, target_name, method, kind):
    """An RDP curve converted to ``kind`` ("epsilon" or "delta") at ``target`` (the other
    of the two, named ``target_name``): checks, precision rule, core and edge warning."""
    check_method(method)
    _check_shapes(np.shape(rdp), np.shape(orders), target_name, np.shape(target))
    _validate.check_range("rdp", rdp, low=0.0)
    check_orders(orders)
    _validate.check_range(target_name, target, low=0.0, high=1.0 if target_name == "delta" else None)
    core = epsilon_core if kind == "epsilon" else delta_core
    dtype, ctx = _precision.compute_context(rdp, orders, target)
    with ctx:
        result, _ = core(
            jnp.asarray(rdp, dtype), jnp.asarray(orders, dtype), jnp.asarray(target, dtype), method
        )
    _warn_if_at_edge(result.at_edge, orders, kind)
    return result


def epsilon_from_rdp(rdp, orders, delta, *, method: str = "improved", return_info: bool = False):
    """Convert an RDP curve to the smallest ε over the orders at a given δ.

    ``ε = max(0, min_α ε_α)`` where ``ε_α`` is the chosen conversion at order ``α``, set to
    0 at orders where the KL shortcut ``δ > sqrt(1 − exp(−r_α))`` applies (``r_α = 0``
    counts as applying). Clipping at 0 is sound: ``ε_α < 0`` means that δ exceeds the
    order's δ-bound at ε = 0.

    Args:
      rdp: RDP values, shape ``(..., K)``, orders on the last axis, all ``≥ 0``
        (``+inf`` allowed: no guarantee at that order).
      orders: the Rényi orders ``α > 1``, shape ``(K,)`` or broadcastable to ``rdp``'s
        shape with the same last axis; ``+inf`` allowed (pure DP, ε = r_∞).
      delta: target δ in ``[0, 1]``, broadcastable to the leading shape ``(...)``.
        ``δ = 0`` gives ``+inf`` unless the whole curve is 0 (then 0); ``δ = 1`` gives 0.
      method: ``"improved"`` (default) or ``"classic"``; see the module docstring.
      return_info: if True, return an :class:`EpsilonResult` with the ``at_edge`` flag.

    Returns:
      ``(epsilon, order)``, arrays of the broadcast leading shape: ε ≥ 0 (``+inf`` when no
      order gives a finite bound) and the order attaining it. With ``return_info=True`` an
      :class:`EpsilonResult` ``(epsilon, order, at_edge)``. With concrete inputs an
      :class:`OrderAtEdgeWarning` is emitted when any ``at_edge`` is True. Under a
      transformation, invalid inputs give ``epsilon = order = NaN``.

    Raises:
      ValueError: with concrete inputs, for negative or NaN RDP values, ``δ ∉ [0, 1]``,
        orders ``≤ 1``, an unknown ``method``, or shapes that do not broadcast (shape
        errors are raised under ``jit`` too, since shapes are static).

    References:
      Mironov (2017), "Rényi Differential Privacy", Proposition 3 (``"classic"``).
      Canonne, Kamath, Steinke (2020), "The Discrete Gaussian for Differential Privacy",
      Proposition 12; Balle, Barthe, Gaboardi, Hsu, Sato (2020), "Hypothesis Testing
      Interpretations and Rényi Differential Privacy", Theorem 21 (``"improved"``).
    """
    result = _convert_curve(rdp, orders, delta, "delta", method, "epsilon")
    return result if return_info else (result.epsilon, result.order)


def delta_from_rdp(rdp, orders, epsilon, *, method: str = "improved", return_info: bool = False):
    """Convert an RDP curve to the smallest δ over the orders at a given ε.

    Per order, ``δ_α = min(δ_RDP(α), sqrt(1 − exp(−r_α)))`` with
    ``δ_RDP = exp((α − 1)(r_α − ε) + (α − 1) log1p(−1/α) − log α)`` (``"improved"``, the
    improved ε formula solved for δ) or ``exp((α − 1)(r_α − ε))`` (``"classic"``, blog
    Claim 21.1); the result is ``min(1, min_α δ_α)``.

    Args:
      rdp: RDP values, shape ``(..., K)``, orders on the last axis, all ``≥ 0``.
      orders: Rényi orders ``α > 1``, shape ``(K,)`` or broadcastable to ``rdp``.
      epsilon: target ε ``≥ 0`` (``+inf`` allowed), broadcastable to the leading shape.
      method: ``"improved"`` (default) or ``"classic"``.
      return_info: if True, return a :class:`DeltaResult` with the ``at_edge`` flag.

    Returns:
      ``(delta, order)`` of the broadcast leading shape, ``δ ∈ [0, 1]``: exactly 0 only
      where that holds (ε = ∞, an infinite order's pure DP, an order with zero RDP); a
      bound below the smallest normal float is returned as that number; with
      ``return_info=True`` a :class:`DeltaResult`. Invalid inputs under a transformation
      give NaN.

    Raises:
      ValueError: with concrete inputs, for negative or NaN RDP, ``ε < 0`` or NaN, orders
        ``≤ 1``, an unknown ``method``, or shapes that do not broadcast.

    References:
      Mironov (2017), Proposition 3; Canonne, Kamath, Steinke (2020), Proposition 12.
    """
    result = _convert_curve(rdp, orders, epsilon, "epsilon", method, "delta")
    return result if return_info else (result.delta, result.order)


# --------------------------------------------------------------------------- public: SGM


def _golden_section(objective, lo, hi, iterations: int):
    """Minimise ``objective`` elementwise over ``[lo, hi]``; return ``(x, f(x))`` of the best
    point evaluated. Every evaluated point is a valid order, so any returned value is a
    valid bound whether or not the objective is unimodal."""
    inv_phi = (np.sqrt(5.0) - 1.0) / 2.0
    c = hi - inv_phi * (hi - lo)
    d = lo + inv_phi * (hi - lo)
    fc = objective(c)
    fd = objective(d)
    best_x = jnp.where(fd < fc, d, c)
    best_f = jnp.minimum(fc, fd)

    def body(_, carry):
        lo, hi, c, d, fc, fd, best_x, best_f = carry
        left = fc < fd  # minimum in [lo, d]
        new_lo = jnp.where(left, lo, c)
        new_hi = jnp.where(left, d, hi)
        width = new_hi - new_lo
        x = jnp.where(left, new_hi - inv_phi * width, new_lo + inv_phi * width)
        fx = objective(x)
        new_c = jnp.where(left, x, d)
        new_fc = jnp.where(left, fx, fd)
        new_d = jnp.where(left, c, x)
        new_fd = jnp.where(left, fc, fx)
        improved = fx < best_f
        best_x = jnp.where(improved, x, best_x)
        best_f = jnp.where(improved, fx, best_f)
        return new_lo, new_hi, new_c, new_d, new_fc, new_fd, best_x, best_f

    carry = jax.lax.fori_loop(0, iterations, body, (lo, hi, c, d, fc, fd, best_x, best_f))
    return carry[-2], carry[-1]


def _bracket(orders, index):
    """The interval ``[orders[i−1], orders[i+1]]`` (clamped; infinite ends pulled in)."""
    k = orders.shape[-1]
    lo = orders[jnp.maximum(index - 1, 0)]
    mid = orders[index]
    hi = orders[jnp.minimum(index + 1, k - 1)]
    hi = jnp.where(jnp.isinf(hi), jnp.where(jnp.isinf(mid), lo, mid), hi)
    return lo, hi


def _refine(q, sigma, steps, target, lo, hi, method, kind):
    """Golden-section search of the order in ``[lo, hi]``, elementwise.

    ``kind == "epsilon"``: minimise ε(α) at ``target = δ``; ``kind == "delta"``: minimise
    log δ(α) at ``target = ε``. Returns ``(best order, best value)`` (value: ε or δ).
    Traced inside :func:`_sgm_program` (the brackets are inputs, not the order grid).
    """
    if kind == "epsilon":
        log_delta = jnp.log(jnp.where((target > 0) & (target <= 1), target, 0.5))

        def objective(alpha):
            total = scale_rdp(kernels.rdp_core(q, sigma, alpha), steps)
            return _epsilon_per_order(total, alpha, log_delta, method)

        alpha, value = _golden_section(objective, lo, hi, _REFINE_ITERATIONS)
        value = jnp.maximum(value, 0.0)
        # δ = 0 or 1 are settled exactly by the grid; NaN lanes stay NaN there.
        value = jnp.where((target > 0) & (target < 1), value, jnp.inf)
        return alpha, value
    safe_eps = jnp.where(target >= 0, target, 1.0)

    def objective(alpha):
        total = scale_rdp(kernels.rdp_core(q, sigma, alpha), steps)
        return _log_delta_per_order(total, alpha, safe_eps, method)

    alpha, log_value = _golden_section(objective, lo, hi, _REFINE_ITERATIONS)
    return alpha, _delta_from_log(log_value)


def _refined(result, value, alpha):
    """Keep the refined value only where it beats the grid (NaN grid lanes stay NaN)."""
    grid_value = result[0]
    better = value < grid_value
    return type(result)(
        jnp.where(better, value, grid_value), jnp.where(better, alpha, result.order), result.at_edge
    )


class _StaticOrders:
    """Concrete, sorted float64 orders carried as static data of :func:`_sgm_program`.

    Hashed once (a 166-order tuple costs microseconds to hash, which every call would
    otherwise pay), compared by value, so equal order vectors share one compiled program.
    """

    __slots__ = ("array", "_key", "_hash")

    def __init__(self, array: np.ndarray):
        self.array = array
        self._key = tuple(array.tolist())
        self._hash = hash(self._key)

    def __hash__(self):
        return self._hash

    def __eq__(self, other):
        return self is other or (isinstance(other, _StaticOrders) and self._key == other._key)


def _frozen(array: np.ndarray) -> np.ndarray:
    array = np.array(array, dtype=np.float64)
    array.setflags(write=False)
    return array


#: The default orders as static data (sorted and > 1 by construction: no check, no sort).
_DEFAULT_STATIC = _StaticOrders(kernels.DEFAULT_ORDERS)


@functools.lru_cache(maxsize=32)
def _static_orders(key: tuple) -> _StaticOrders:
    return _StaticOrders(_frozen(key))


def _sgm_body(q, sigma, steps, target, orders, grid, method, kind, refine, shared=True):
    """Kernel, composition, conversion and (optionally) refinement: one compiled program.

    ``q, sigma, steps, target`` are arrays of one floating dtype, broadcastable together;
    ``orders`` the 1-D orders in that dtype. ``grid`` (a :class:`_StaticOrders`) holds the
    same orders when they are concrete, so that the kernel can plan its shared-order path
    on them; otherwise ``grid`` is None and the traced ``orders`` are sorted here.
    ``shared=False`` keeps the kernel on its elementwise path (see :func:`_convert_sgm`). One
    program per (shapes, dtype, orders, method, kind, refine, shared): a single-run call costs one
    dispatch instead of a dozen eager operations and separately compiled steps.

    Wherever the static orders are not needed, the traced ``orders`` are used (the
    conversion, the kernel's elementwise path): a compile-time constant would let the
    compiler fold their logarithms with its own, differently rounded, arithmetic, and
    the results would no longer be bit for bit those of the kernel and conversion run
    as separate programs.
    """
    if grid is not None:
        q_cells, s_cells = q[..., None], sigma[..., None]
        shared = kernels._route(q_cells, s_cells, grid.array, q.dtype)[0] == "orders"
        kernel_orders = grid.array if shared else orders
    else:
        orders = jnp.sort(orders)
        kernel_orders = orders
    per_step = kernels.rdp_core(q[..., None], sigma[..., None], kernel_orders, shared=shared)
    total = scale_rdp(per_step, steps[..., None])
    core = epsilon_core if kind == "epsilon" else delta_core
    result, index = core(total, orders, target, method)
    if refine:
        shape = result[0].shape
        args = [jnp.broadcast_to(v, shape) for v in (q, sigma, steps, target)]
        lo, hi = _bracket(orders, index)
        alpha, value = _refine(*args, lo, hi, method, kind)
        result = _refined(result, value, alpha)
    return result


_SGM_STATIC = ("grid", "method", "kind", "refine", "shared")
_sgm_program = jax.jit(_sgm_body, static_argnames=_SGM_STATIC)



def _orders_for_kernel(orders, dtype):
    """Concrete NumPy orders stay NumPy (the kernel's fast path); JAX orders are sorted."""
    if isinstance(orders, np.ndarray):
        return orders
    return jnp.sort(jnp.asarray(orders, dtype))


_SGM_ARGS = _validate.Spec(q=_validate.UNIT, sigma=_validate.NONNEGATIVE, steps=_validate.COUNT)


def _check_sgm_args(q, sigma, steps, orders):
    """Validate q, σ, steps and orders; concrete orders come back as float64 NumPy."""
    _SGM_ARGS.check(q, sigma, steps)
    if orders is None:
        return kernels.DEFAULT_ORDERS
    if np.ndim(orders) != 1:
        raise ValueError(f"orders must be 1-D; got orders of shape {np.shape(orders)}")
    check_orders(orders)
    if _validate.is_concrete(orders) and not isinstance(orders, jax.Array):
        orders = np.asarray(orders, dtype=np.float64)
    return orders


def _as_dtype(value, dtype):
    """``value`` as an array of ``dtype``: NumPy for host values (converted by the compiled
    program's own argument handling), JAX for JAX arrays and tracers."""
    if isinstance(value, (jax.Array, jax.core.Tracer)):
        return jnp.asarray(value, dtype)
    return np.asarray(value, dtype)


def _convert_sgm(
    q, sigma, steps, target, target_name, orders, method, refine, kind, *, shared=True
):
    """The SGM's RDP curve after ``steps`` steps, converted to ``kind`` ("epsilon"/"delta").

    ``shared=False`` keeps the orders traced, so the kernel takes its elementwise path:
    a program about half as large to trace and compile, which on CPU is also compiled
    without the backend's optimisations; for processes that evaluate one run once (see
    :func:`epsilon_once`).
    """
    default = orders is None
    orders = _check_sgm_args(q, sigma, steps, orders)
    shapes = [np.shape(v) for v in (q, sigma, steps, target)]
    try:
        if any(shapes):
            np.broadcast_shapes(*shapes)
    except ValueError:
        raise ValueError(
            "q, sigma, steps and "
            f"{target_name} must broadcast together; got shapes {shapes[0]}, "
            f"{shapes[1]}, {shapes[2]} and {shapes[3]}"
        ) from None
    dtype, ctx = _precision.compute_context(q, sigma, steps, target, orders)
    if not shared:
        grid = None
    elif default:
        grid = _DEFAULT_STATIC
    elif _validate.is_concrete(orders):
        grid = _static_orders(tuple(np.sort(np.asarray(orders, np.float64)).tolist()))
    else:
        grid = None
    arrays = [_as_dtype(v, dtype) for v in (q, sigma, steps, target)]
    arrays.append(_as_dtype(orders if grid is None else grid.array, dtype))
    static = (grid, method, kind, bool(refine), shared)
    with ctx:
        if shared:
            result = _sgm_program(*arrays, *static)
        else:  # one run once (the command line)
            result = _program_cache.call("sgm_once", _sgm_program, arrays, static,
                                         _program_cache.one_shot_options())
    _warn_if_at_edge(result.at_edge, orders, kind)
    return result


def epsilon(
    q, sigma, steps, delta,
    *, orders=None, method: str = "improved", refine: bool = False, return_info: bool = False,
):
    """ε of ``steps``-fold composition of the Sampled Gaussian Mechanism.

    The RDP curve is computed by one kernel call ``rdp(q[..., None], sigma[..., None],
    orders)``, multiplied by ``steps`` (RDP composes additively, blog Claim 22) and
    converted by :func:`epsilon_from_rdp`.

    With ``refine=True`` the best grid order ``orders[i]`` is refined continuously by
    golden-section search (40 iterations, one kernel evaluation each) over
    ``[orders[i−1], orders[i+1]]`` (clamped at the ends of the grid). Every order tried is
    a valid order, so the refined result is the minimum of the grid value and the best
    refined value: never larger than without refinement.

    Args:
      q: sampling rate(s) in ``[0, 1]``.
      sigma: noise multiplier(s) ``σ ≥ 0``.
      steps: number(s) of SGM steps, non-negative integers (``0`` gives ε = 0).
      delta: target δ in ``[0, 1]`` (``0`` gives ``+inf`` for a non-trivial mechanism).
        ``q``, ``sigma``, ``steps`` and ``delta`` broadcast together to a shape ``S``.
      orders: 1-D Rényi orders ``> 1``; default :data:`jaxrdp.DEFAULT_ORDERS`. Concrete
        orders are sorted first.
      method: ``"improved"`` (default) or ``"classic"``.
      refine: refine the best order continuously (see above).
      return_info: return an :class:`EpsilonResult` with the ``at_edge`` flag.

    Returns:
      ``(epsilon, order)`` of shape ``S`` (or an :class:`EpsilonResult`). Python/NumPy
      inputs compute in float64 and return float64 JAX arrays. Under a transformation,
      invalid inputs give NaN.

    Raises:
      ValueError: with concrete inputs, naming the first invalid argument (``q ∉ [0, 1]``,
        ``σ < 0``, non-integer or negative ``steps``, ``δ ∉ [0, 1]``, orders ``≤ 1``) or the
        shapes that do not broadcast.

    References:
      Mironov, Talwar, Zhang (2019), "Rényi Differential Privacy of the Sampled Gaussian
      Mechanism", Sec. 3; conversions as in :func:`epsilon_from_rdp`.
    """
    check_method(method)
    _validate.check_range("delta", delta, low=0.0, high=1.0)
    result = _convert_sgm(q, sigma, steps, delta, "delta", orders, method, refine, "epsilon")
    return result if return_info else (result.epsilon, result.order)


def epsilon_once(q, sigma, steps, delta, *, method: str = "improved"):
    """:func:`epsilon` at the default orders, by the program that compiles fastest.

    For a process that computes one ε and exits (the ``jaxrdp epsilon`` command), where
    tracing and compiling cost far more than the evaluation: the kernel's elementwise
    quadrature instead of its shared-order path, a program about half as large, compiled
    on CPU without the backend's optimisations (half the compile time; it still runs in
    milliseconds). Its values are those of :func:`epsilon` to the kernels' stated
    accuracy (a few 1e-13 relative), raised by the same safety margin, so never below the
    exact value either.
    Not public: library callers use :func:`epsilon`.

    Args:
      q: sampling rate in ``[0, 1]``.
      sigma: noise multiplier ``σ ≥ 0``.
      steps: non-negative integer number of steps.
      delta: target δ in ``[0, 1]``.
      method: ``"improved"`` (default) or ``"classic"``.

    Returns:
      ``(epsilon, order)`` as :func:`epsilon`.
    """
    check_method(method)
    _validate.check_range("delta", delta, low=0.0, high=1.0)
    result = _convert_sgm(
        q, sigma, steps, delta, "delta", None, method, False, "epsilon", shared=False
    )
    return result.epsilon, result.order


def delta(
    q, sigma, steps, epsilon,
    *, orders=None, method: str = "improved", refine: bool = False, return_info: bool = False,
):
    """δ of ``steps``-fold composition of the Sampled Gaussian Mechanism at a given ε.

    The δ counterpart of :func:`epsilon` (same RDP curve, converted by
    :func:`delta_from_rdp`; ``refine`` searches the order continuously, never worsening
    the grid value).

    Args:
      q: sampling rate(s) in ``[0, 1]``.
      sigma: noise multiplier(s) ``σ ≥ 0``.
      steps: non-negative integer step count(s).
      epsilon: target ε ``≥ 0``. All four broadcast together to a shape ``S``.
      orders: 1-D Rényi orders ``> 1``; default :data:`jaxrdp.DEFAULT_ORDERS`.
      method: ``"improved"`` (default) or ``"classic"``.
      refine: refine the best order continuously.
      return_info: return a :class:`DeltaResult` with the ``at_edge`` flag.

    Returns:
      ``(delta, order)`` of shape ``S`` (or a :class:`DeltaResult`), ``δ ∈ [0, 1]``; a
      bound below the smallest normal float is returned as that number, never as 0
      (as in :func:`delta_from_rdp`).

    Raises:
      ValueError: with concrete inputs, naming the first invalid argument or the shapes.

    References:
      Mironov, Talwar, Zhang (2019), Sec. 3; conversions as in :func:`delta_from_rdp`.
    """
    check_method(method)
    _validate.check_range("epsilon", epsilon, low=0.0)
    result = _convert_sgm(q, sigma, steps, epsilon, "epsilon", orders, method, refine, "delta")
    return result if return_info else (result.delta, result.order)


def compose_rdp(q, sigma, steps, orders=None):
    """Total RDP curve of a heterogeneous sequence of SGM segments, in one kernel call.

    Segment ``s`` runs ``steps[s]`` steps with sampling rate ``q[s]`` and noise multiplier
    ``sigma[s]`` (a noise or batch-size schedule); by additive composition (blog Claim 22)
    the total is ``Σ_s steps[s] · rdp(q[s], σ[s], α)``.

    Args:
      q: per-segment sampling rates in ``[0, 1]``, shape ``(..., S)``.
      sigma: per-segment noise multipliers ``≥ 0``, shape broadcastable with ``q``.
      steps: per-segment non-negative integer step counts, broadcastable likewise.
        The last axis of the broadcast shape is the segment axis.
      orders: 1-D Rényi orders ``> 1``, shape ``(K,)``; default
        :data:`jaxrdp.DEFAULT_ORDERS`.

    Returns:
      The summed RDP curve, shape ``(..., K)`` (``(K,)`` for 1-D segment arrays).

    Raises:
      ValueError: with concrete inputs, naming an invalid argument or mismatched shapes.

    References:
      Mironov (2017), Proposition 1 (adaptive sequential composition of RDP).
    """
    orders = _check_sgm_args(q, sigma, steps, orders)
    try:
        seg_shape = np.broadcast_shapes(np.shape(q), np.shape(sigma), np.shape(steps))
    except ValueError:
        raise ValueError(
            "q, sigma and steps must broadcast together; got shapes "
            f"{np.shape(q)}, {np.shape(sigma)} and {np.shape(steps)}"
        ) from None
    if len(seg_shape) < 1:
        seg_shape = (1,)
    dtype, ctx = _precision.compute_context(q, sigma, steps, orders)
    with ctx:
        q_, sigma_, steps_ = (
            jnp.broadcast_to(jnp.asarray(v, dtype), seg_shape) for v in (q, sigma, steps)
        )
        orders_ = _orders_for_kernel(orders, dtype)
        per_step = kernels.rdp_core(q_[..., None], sigma_[..., None], orders_)
        return jnp.sum(scale_rdp(per_step, steps_[..., None]), axis=-2)
