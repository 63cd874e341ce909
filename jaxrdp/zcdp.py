"""Zero-concentrated differential privacy (zCDP) of Bun and Steinke (2016).

A mechanism is *(ξ, ρ)-zCDP* if its Rényi divergence between neighbouring inputs obeys
``D_α ≤ ξ + ρα`` for every order ``α ∈ (1, ∞)`` (Definition 1.1); *ρ-zCDP* means
``(0, ρ)``-zCDP. A zCDP guarantee is therefore an RDP curve that is affine in ``α``
(:func:`rdp_curve`), which is how zCDP events compose with Sampled Gaussian steps in an
RDP accountant.

This module provides the closed forms of the paper: the Gaussian mechanism
(:func:`gaussian_rho`), pure DP ⇒ zCDP (:func:`rho_from_pure_dp`), composition
(:func:`compose`), group privacy (:func:`group_privacy`), the conversions to
``(ε, δ)``-DP (:func:`epsilon_from_zcdp`, :func:`delta_from_zcdp`), the partial converse
(:func:`zcdp_from_dp_curve`) and approximate zCDP (Section 8:
:func:`compose_approximate`, :func:`delta_from_approximate_zcdp`,
:func:`epsilon_from_approximate_zcdp`).

Conventions shared by every function here:

* Arguments broadcast NumPy-style (exceptions are documented: :func:`compose` reduces an
  axis, :func:`rdp_curve` appends the order axis).
* Called with Python or NumPy inputs (or float64 JAX arrays, e.g. earlier results),
  computations run in float64 inside a local ``jax.enable_x64`` scope and return float64
  JAX arrays; called with other JAX arrays (or inside ``jit``/``vmap``/``grad``) they run
  in the arrays' floating dtype. The (ε, δ) conversions raise their float32 results by
  the relative margin :data:`jaxrdp.kernels.FLOAT32_SAFETY_MARGIN`, like the kernels.
* Concrete out-of-domain inputs raise ``ValueError`` naming the argument and its value.
  Under a transformation the checks cannot run; out-of-domain lanes then return NaN
  ("undefined"), never a valid-looking number.

References:
  Bun, Steinke (2016), "Concentrated Differential Privacy: Simplifications, Extensions,
  and Lower Bounds", TCC 2016 (arXiv:1605.02065).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxrdp import _precision, _solver, _validate
from jaxrdp.kernels import FLOAT32_SAFETY_MARGIN

__all__ = [
    "CONVERSION_METHODS",
    "ApproxZcdp",
    "Zcdp",
    "compose",
    "compose_approximate",
    "delta_from_approximate_zcdp",
    "delta_from_zcdp",
    "epsilon_from_approximate_zcdp",
    "epsilon_from_zcdp",
    "gaussian_rho",
    "group_privacy",
    "rdp_curve",
    "rho_from_pure_dp",
    "zcdp_from_dp_curve",
]

CONVERSION_METHODS: tuple[str, ...] = (
    "prop1.3",
    "lemma3.5",
    "lemma3.6",
    "lemma3.6-closed-form",
)
"""Names accepted by the ``method`` argument of the zCDP → ``(ε, δ)`` conversions.

* ``"prop1.3"``: Proposition 1.3, ``ε = ρ + 2√(ρ log(1/δ))`` (plus ``ξ``). It is the
  same expression as Lemma 3.5 (``√(4ρ log(1/δ)) = 2√(ρ log(1/δ))``); both names are
  accepted so that results can be labelled after the statement a reader knows.
* ``"lemma3.5"``: Lemma 3.5, ``ε = ξ + ρ + √(4ρ log(1/δ))``, equivalently
  ``δ = exp(−(ε−ξ−ρ)²/4ρ)``. This is also exactly what the classic RDP conversion
  ``min_α [ξ + ρα + log(1/δ)/(α−1)]`` gives for the curve ``ξ + ρα``.
* ``"lemma3.6"`` (default, the tightest): Lemma 3.6 / Lemma B.2,
  ``δ = exp(−(ε−ξ−ρ)²/4ρ) · min{1, √(πρ), 1/(1+u), 2/(1+u+√((1+u)² + 4/(πρ)))}`` with
  ``u = (ε−ξ−ρ)/2ρ``; the ε-form inverts this δ-form numerically (bisection with a
  static step count, rounded up), so it is never larger than either closed form.
* ``"lemma3.6-closed-form"``: the simpler closed form printed in Lemma 3.6,
  ``ε = ξ + ρ + √(4ρ log(√(πρ)/δ))``, i.e. ``δ = √(πρ) · exp(−(ε−ξ−ρ)²/4ρ)``. It is
  looser than Lemma 3.5 when ``πρ > 1``.
"""

_FLOAT64_BISECTION_STEPS = 64
_FLOAT32_BISECTION_STEPS = 36


class Zcdp(NamedTuple):
    """A ``(ξ, ρ)``-zCDP guarantee (a pytree; fields are arrays of a common shape)."""

    rho: jax.Array
    """ρ, the coefficient of α in the Rényi bound ``ξ + ρα``."""
    xi: jax.Array
    """ξ, the constant term of the Rényi bound ``ξ + ρα``."""


class ApproxZcdp(NamedTuple):
    """A δ-approximate ``(ξ, ρ)``-zCDP guarantee (Definition 8.1), as a pytree."""

    rho: jax.Array
    xi: jax.Array
    delta: jax.Array
    """Probability mass that may be excluded by the events of Definition 8.1."""


# --------------------------------------------------------------------------- helpers


_V = _validate
_NN = _V.NONNEGATIVE
#: The domain of each public function's arguments (eager errors and traced masks).
_GAUSSIAN_ARGS = _V.Spec(sigma=_NN, sensitivity=_NN)
_PURE_ARGS = _V.Spec(epsilon=_NN)
_COMPOSE_ARGS = _V.Spec(rhos=_NN, xis=_NN, deltas=_V.UNIT)
_GROUP_ARGS = _V.Spec(rho=_NN, k=_V.Range(low=1.0, allow_inf=False, integer=True), xi=_NN)
_CURVE_ARGS = _V.Spec(rho=_NN, orders=_V.Range(low=1.0, low_inclusive=False), xi=_NN)
_DELTA_ARGS = _V.Spec(rho=_NN, epsilon=_NN, xi=_NN)
_EPSILON_ARGS = _V.Spec(rho=_NN, delta=_V.UNIT, xi=_NN)
_FROM_CURVE_ARGS = _V.Spec(xi_hat=_V.UNIT, rho_hat=_V.UNIT)
_DELTA_APPROX_ARGS = _V.Spec(rho=_NN, epsilon=_NN, approx_delta=_V.UNIT, xi=_NN)
_EPSILON_APPROX_ARGS = _V.Spec(rho=_NN, delta=_V.UNIT, approx_delta=_V.UNIT, xi=_NN)


_call = _precision.call


def _convert(kernel, spec: _validate.Spec, method: str, *args):
    """Check ``method`` and ``args`` (named by ``spec``) once, then run ``kernel``."""
    _validate.check_choice("method", method, CONVERSION_METHODS)
    spec.check(*args)
    return _call(kernel, *args, method=method)


def _bisection_steps(dtype) -> int:
    return _FLOAT64_BISECTION_STEPS if jnp.dtype(dtype) == jnp.float64 else _FLOAT32_BISECTION_STEPS


# --------------------------------------------------------------------------- basics


@jax.jit
def _gaussian_rho_jit(sigma, sensitivity):
    sigma, sensitivity = jnp.broadcast_arrays(sigma, sensitivity)
    invalid = _GAUSSIAN_ARGS.invalid(sigma, sensitivity)
    zero = (sensitivity == 0) | jnp.isposinf(sigma)
    safe_sigma = jnp.where(zero | invalid | (sigma == 0), 1.0, sigma)
    ratio = sensitivity / safe_sigma
    value = 0.5 * ratio * ratio
    value = jnp.where(sigma == 0, jnp.inf, value)
    value = jnp.where(zero, 0.0, value)
    return jnp.where(invalid, jnp.nan, value)


def gaussian_rho(sigma, sensitivity=1.0):
    """ρ of the Gaussian mechanism: ``ρ = Δ² / (2σ²)``.

    Releasing ``f(x) + N(0, σ² I)`` for ``f`` of L2-sensitivity ``Δ`` is ``ρ``-zCDP with
    this ``ρ`` and the bound is tight at every order (``D_α = αΔ²/2σ²``).

    Args:
      sigma: noise standard deviation(s) ``σ ≥ 0``; any shape broadcastable with
        ``sensitivity``. (With ``sensitivity = 1`` this is the noise multiplier.)
      sensitivity: L2 sensitivity ``Δ ≥ 0`` of the released function.

    Returns:
      Array of the broadcast shape: ``ρ``. ``0`` where ``Δ = 0`` or ``σ = +inf``;
      ``+inf`` where ``σ = 0 < Δ``. Under ``jit``, negative or NaN inputs give NaN.

    Raises:
      ValueError: with concrete inputs, naming the first out-of-domain argument.

    References:
      Bun, Steinke (2016), Proposition 1.6 (and Lemma 2.4 for the Rényi divergence of
      two Gaussians).
    """
    _GAUSSIAN_ARGS.check(sigma, sensitivity)
    return _call(_gaussian_rho_jit, sigma, sensitivity)


@jax.jit
def _rho_from_pure_dp_jit(epsilon):
    value = 0.5 * epsilon * epsilon
    return jnp.where(_PURE_ARGS.invalid(epsilon), jnp.nan, value)


def rho_from_pure_dp(epsilon):
    """ρ implied by pure ε-DP: ``ε``-DP ⇒ ``½ε²``-zCDP.

    (ε-DP is also ``(ε, 0)``-zCDP by Lemma 3.2, hence ``ε``-zCDP since ``ε ≤ εα``;
    that is smaller for ``ε > 2``, cf. Lemma 8.3. This function returns the
    Proposition 1.4 value ``½ε²`` regardless.)

    Args:
      epsilon: pure-DP parameter(s) ``ε ≥ 0``, any shape.

    Returns:
      Array of the same shape: ``ρ = ε²/2``. NaN for negative or NaN ``ε`` under ``jit``.

    Raises:
      ValueError: with a concrete negative or NaN ``epsilon``.

    References:
      Bun, Steinke (2016), Proposition 1.4 (proved as Proposition 3.3).
    """
    _PURE_ARGS.check(epsilon)
    return _call(_rho_from_pure_dp_jit, epsilon)


@functools.partial(jax.jit, static_argnames=("axis",))
def _sum_nonneg_jit(values, *, axis):
    bad = jnp.any(_V.outside(values, _NN), axis=axis)
    return jnp.where(bad, jnp.nan, jnp.sum(values, axis=axis))


def compose(rhos, xis=None, *, axis: int = -1):
    """Composition of zCDP mechanisms: parameters add up.

    Adaptive composition of ``(ξᵢ, ρᵢ)``-zCDP mechanisms is ``(Σξᵢ, Σρᵢ)``-zCDP.

    Args:
      rhos: array of ``ρᵢ ≥ 0``; the mechanisms composed run along ``axis``.
      xis: optional array of ``ξᵢ ≥ 0`` broadcastable with ``rhos``. If omitted, all
        mechanisms are plain ``ρᵢ``-zCDP.
      axis: the axis of ``rhos`` (and ``xis``) to sum over (static Python int).

    Returns:
      If ``xis`` is None, the array ``Σρᵢ`` (``rhos``' shape without ``axis``).
      Otherwise a :class:`Zcdp` ``(rho=Σρᵢ, xi=Σξᵢ)``. Under ``jit``, a slice containing a
      negative or NaN entry sums to NaN.

    Raises:
      ValueError: with a concrete negative or NaN entry, naming ``rhos`` or ``xis``.

    References:
      Bun, Steinke (2016), Lemma 1.7 and Lemma 2.3 (applied inductively).
    """
    if xis is None:
        _COMPOSE_ARGS.check(rhos)
        return _call(functools.partial(_sum_nonneg_jit, axis=axis), rhos)
    _COMPOSE_ARGS.check(rhos, xis)

    def kernel(r, x):
        r, x = jnp.broadcast_arrays(r, x)
        return Zcdp(_sum_nonneg_jit(r, axis=axis), _sum_nonneg_jit(x, axis=axis))

    return _call(kernel, rhos, xis)


@jax.jit
def _group_rho_jit(rho, k):
    rho, k = jnp.broadcast_arrays(rho, k)
    invalid = _GROUP_ARGS.invalid(rho, k)
    return jnp.where(invalid, jnp.nan, k * k * rho)


@jax.jit
def _group_jit(rho, k, xi):
    rho, k, xi = jnp.broadcast_arrays(rho, k, xi)
    rho_k = _group_rho_jit(rho, k)
    safe_k = jnp.where((k >= 1) & jnp.isfinite(k), k, 1.0)
    harmonic = jax.scipy.special.digamma(safe_k + 1.0) + np.euler_gamma
    xi_k = jnp.where(rho == 0, safe_k * xi, safe_k * harmonic * xi)
    xi_k = jnp.where(_GROUP_ARGS.invalid(rho, k, xi), jnp.nan, xi_k)
    return Zcdp(rho_k, xi_k)


def group_privacy(rho, k, xi=None):
    """zCDP for groups of ``k`` individuals: ``ρ ↦ k²ρ`` (and ``ξ ↦ ξ·k·H_k``).

    Args:
      rho: ``ρ ≥ 0``; any shape broadcastable with ``k`` (and ``xi``).
      k: group size(s), positive integers.
      xi: optional ``ξ ≥ 0`` of a ``(ξ, ρ)``-zCDP mechanism.

    Returns:
      If ``xi`` is None, the array ``k²ρ`` (Proposition 1.9: ρ-zCDP gives ``k²ρ``-zCDP
      for groups of size ``k``, tight for the Gaussian mechanism). Otherwise a
      :class:`Zcdp` ``(rho=k²ρ, xi=ξ·k·H_k)`` with ``H_k = Σ_{i≤k} 1/i``
      (Proposition 5.3); where ``ρ = 0`` the pure-DP group bound ``ξ·k`` is used
      instead (Lemma 3.2: ``(ξ, 0)``-zCDP is ``ξ``-DP). Under ``jit``, invalid inputs
      (negative, NaN, non-integer ``k``) give NaN.

    Raises:
      ValueError: with concrete invalid inputs, naming the argument.

    References:
      Bun, Steinke (2016), Proposition 1.9 and Proposition 5.3; Lemma 3.2.
    """
    if xi is None:
        _GROUP_ARGS.check(rho, k)
        return _call(_group_rho_jit, rho, k)
    _GROUP_ARGS.check(rho, k, xi)
    return _call(_group_jit, rho, k, xi)


@jax.jit
def _rdp_curve_jit(rho, orders, xi):
    rho = rho[..., None]
    xi = xi[..., None]
    rho, orders, xi = jnp.broadcast_arrays(rho, orders, xi)
    invalid = _CURVE_ARGS.invalid(rho, orders, xi)
    # 0·∞ would be NaN: with ρ = 0 the curve is the constant ξ at every order.
    value = jnp.where(rho == 0, xi, xi + rho * jnp.where(rho == 0, 1.0, orders))
    return jnp.where(invalid, jnp.nan, value)


def rdp_curve(rho, orders, xi=0.0):
    """The RDP curve ``ε(α) = ξ + ρα`` of a ``(ξ, ρ)``-zCDP mechanism.

    Adding this curve to a per-order RDP total composes a zCDP mechanism (e.g. a
    Gaussian release measured with :func:`gaussian_rho`) with Sampled Gaussian steps.

    Args:
      rho: ``ρ ≥ 0``, leading ("batch") shape ``B``.
      orders: Rényi orders ``α > 1`` (``+inf`` allowed), shape ``(..., K)``: the order
        axis is last.
      xi: ``ξ ≥ 0``, broadcastable with ``rho``.

    Returns:
      Array of shape ``broadcast(B + (1,), orders.shape)``, i.e. ``B + (K,)`` for 1-D
      ``orders``: ``ξ + ρα``. ``+inf`` at ``α = +inf`` when ``ρ > 0``; ``ξ`` at every order
      when ``ρ = 0``. Under ``jit``, invalid lanes (``α ≤ 1``, negative, NaN) give NaN.

    Raises:
      ValueError: with concrete invalid inputs, naming the argument.

    References:
      Bun, Steinke (2016), Definition 1.1 (and Eq. (2)); Mironov (2017), "Rényi
      Differential Privacy", Definition 4.
    """
    _CURVE_ARGS.check(rho, orders, xi)
    return _call(_rdp_curve_jit, rho, orders, xi)


# --------------------------------------------------------------------------- zCDP → DP


def _log_delta_factor(t, rho, method: str):
    """log of the factor multiplying ``exp(−t²/4ρ)`` in the δ-form; ``t ≥ 0``, ``ρ > 0``."""
    if method in ("prop1.3", "lemma3.5"):
        return jnp.zeros_like(t)
    half_log_pi_rho = 0.5 * jnp.log(np.pi * rho)
    if method == "lemma3.6-closed-form":
        return half_log_pi_rho
    u = t / (2.0 * rho)
    option2 = -jnp.log1p(u)
    # 2 / (1 + u + √((1+u)² + 4/(πρ))), with hypot against overflow for tiny ρ.
    option3 = np.log(2.0) - jnp.log(1.0 + u + jnp.hypot(1.0 + u, 2.0 / jnp.sqrt(np.pi * rho)))
    return jnp.minimum(jnp.minimum(0.0, half_log_pi_rho), jnp.minimum(option2, option3))


def _log_delta_of_t(t, rho, method: str):
    """log δ for ``t = ε − ξ − ρ ≥ 0`` and ``ρ > 0``."""
    return -(t * t) / (4.0 * rho) + _log_delta_factor(t, rho, method)


@functools.partial(jax.jit, static_argnames=("method",))
def _delta_jit(rho, epsilon, xi, *, method):
    rho, epsilon, xi = jnp.broadcast_arrays(rho, epsilon, xi)
    invalid = _DELTA_ARGS.invalid(rho, epsilon, xi)
    pure = rho == 0
    t = epsilon - xi - rho
    regular = ~invalid & ~pure & jnp.isfinite(rho)
    above = t >= 0
    safe_rho = jnp.where(regular, rho, 1.0)
    safe_t = jnp.where(regular & above, t, 0.0)
    log_value = _log_delta_of_t(safe_t, safe_rho, method)
    # Below ξ + ρ: split the integral δ = ∫_ε^∞ e^{ε−z} P[Z > z] dz of Lemma B.2's proof
    # at ξ + ρ, bounding P ≤ 1 before it: δ ≤ 1 − e^{−s}(1 − δ(ξ+ρ)), s = ξ + ρ − ε > 0.
    below = jnp.minimum(log_value, 0.0)  # here log_value is log δ(ξ+ρ)
    has_room = below < 0
    # log(1 − δ(ξ+ρ)); −inf when δ(ξ+ρ) = 1 (double where keeps gradients finite).
    log_complement = jnp.where(
        has_room, jnp.log(-jnp.expm1(jnp.where(has_room, below, -1.0))), -jnp.inf
    )
    value_below = -jnp.expm1(jnp.where(above, 0.0, t) + log_complement)
    # above: never below the smallest normal number (a bound that underflows is not 0)
    value = jnp.where(above, jnp.maximum(jnp.exp(log_value), jnp.finfo(log_value.dtype).tiny),
                      value_below)
    value = jnp.where(regular, value, 1.0)  # ρ = ∞: only the trivial δ = 1.
    value = jnp.where(regular & jnp.isposinf(epsilon), 0.0, value)
    if value.dtype != jnp.float64:
        value = jnp.minimum(value * (1.0 + FLOAT32_SAFETY_MARGIN), 1.0)
    # ρ = 0: (ξ, 0)-zCDP is exactly ξ-DP (Lemma 3.2).
    value = jnp.where(pure, jnp.where(epsilon >= xi, 0.0, 1.0), value)
    return jnp.where(invalid, jnp.nan, value)


def delta_from_zcdp(rho, epsilon, xi=0.0, method: str = "lemma3.6"):
    """δ such that a ``(ξ, ρ)``-zCDP mechanism is ``(ε, δ)``-DP.

    Args:
      rho: ``ρ ≥ 0`` (``+inf`` allowed); broadcastable with the others.
      epsilon: target ``ε ≥ 0`` (``+inf`` allowed).
      xi: ``ξ ≥ 0``; the Propositions of Section 1 are stated for ``ξ = 0`` and the
        Lemmas of Section 3 for general ``ξ``.
      method: one of :data:`CONVERSION_METHODS` (static). Default ``"lemma3.6"``, the
        tightest.

    Returns:
      Array of the broadcast shape, values in ``[0, 1]``. For ``ε ≥ ξ + ρ`` the lemma's
      δ (``"lemma3.6"``: ``exp(−(ε−ξ−ρ)²/4ρ)·min{1, √(πρ), 1/(1+u),
      2/(1+u+√((1+u)²+4/(πρ)))}``, ``u = (ε−ξ−ρ)/2ρ``). The lemmas are stated for
      ``ε ≥ ξ + ρ`` only; below, ``δ = 1 − e^{ε−ξ−ρ}(1 − min(1, δ(ξ+ρ)))``, which follows
      from the proof of Lemma B.2 (split its integral ``∫_ε^∞ e^{ε−z} P[Z>z] dz`` at
      ``ξ + ρ`` and use ``P ≤ 1`` before it). It keeps δ continuous in ε and equals the
      trivial ``1`` for ``"prop1.3"``/``"lemma3.5"``. ``ρ = 0`` gives ``0`` for ``ε ≥ ξ``
      and ``1`` otherwise (Lemma 3.2); ``ρ = +inf`` gives ``1``. Values below the dtype's
      smallest subnormal underflow to ``0``. In float32 the result is raised by the
      relative margin :data:`jaxrdp.kernels.FLOAT32_SAFETY_MARGIN`. Under ``jit``,
      invalid inputs give NaN.

    Raises:
      ValueError: with concrete invalid inputs or an unknown ``method``.

    References:
      Bun, Steinke (2016), Proposition 1.3, Lemma 3.5, Lemma 3.6 (proved as Lemma B.2),
      Lemma 3.2 for ``ρ = 0``.
    """
    return _convert(_delta_jit, _DELTA_ARGS, method, rho, epsilon, xi)


def _t_closed_forms(rho, log_inv_delta):
    """Lemma 3.5 and Lemma 3.6-closed-form values of ``t = ε − ξ − ρ`` (``ρ > 0``)."""
    room = log_inv_delta > 0
    t35 = jnp.where(room, 2.0 * jnp.sqrt(rho * jnp.where(room, log_inv_delta, 1.0)), 0.0)
    arg = 0.5 * jnp.log(np.pi * rho) + log_inv_delta
    positive = arg > 0
    t36 = jnp.where(positive, 2.0 * jnp.sqrt(rho * jnp.where(positive, arg, 1.0)), 0.0)
    return t35, t36


def _t_lemma36(rho, log_delta):
    """Smallest ``t ≥ 0`` with ``log δ_{3.6}(t) ≤ log_delta``; finite ``ρ > 0`` and
    ``log_delta ∈ (−∞, 0]``. Bisection (static steps), rounded up; implicit gradient."""
    steps = _bisection_steps(rho.dtype)
    t35, t36 = _t_closed_forms(rho, -log_delta)
    hi0 = jnp.minimum(t35, t36)  # both satisfy δ_{3.6}(t) ≤ δ, the lemma's δ being smaller.
    lo0 = jnp.zeros_like(hi0)

    hi, _ = _solver.bisect(
        lambda t: _log_delta_of_t(t, rho, "lemma3.6") <= log_delta, hi0, lo0, steps
    )
    at_zero = _log_delta_of_t(jnp.zeros_like(rho), rho, "lemma3.6") <= log_delta
    t_root = jax.lax.stop_gradient(jnp.where(at_zero, 0.0, hi))

    # Implicit-function gradient: value unchanged, d t = −(∂F/∂θ)/(∂F/∂t) at the root.
    def residual(t):
        return _log_delta_of_t(t, rho, "lemma3.6") - log_delta

    f_val, f_t = jax.jvp(residual, (t_root,), (jnp.ones_like(t_root),))
    f_t = jax.lax.stop_gradient(f_t)
    interior = ~at_zero & (f_t < 0)
    safe_f_t = jnp.where(interior, f_t, -1.0)
    correction = (jax.lax.stop_gradient(f_val) - f_val) / safe_f_t
    return t_root + jnp.where(interior, correction, 0.0)


@functools.partial(jax.jit, static_argnames=("method",))
def _epsilon_jit(rho, delta, xi, *, method):
    rho, delta, xi = jnp.broadcast_arrays(rho, delta, xi)
    invalid = _EPSILON_ARGS.invalid(rho, delta, xi)
    pure = rho == 0
    regular = ~invalid & ~pure & (delta > 0) & jnp.isfinite(rho)
    safe_rho = jnp.where(regular, rho, 1.0)
    safe_delta = jnp.where(regular, delta, 0.5)
    log_delta = jnp.log(safe_delta)
    t35, t36 = _t_closed_forms(safe_rho, -log_delta)
    if method in ("prop1.3", "lemma3.5"):
        t = t35
    elif method == "lemma3.6-closed-form":
        t = t36
    else:
        t = _t_lemma36(safe_rho, log_delta)
    value = xi + rho + t
    if value.dtype != jnp.float64:
        value = value * (1.0 + FLOAT32_SAFETY_MARGIN)
    value = jnp.where(regular, value, jnp.inf)  # δ = 0 or ρ = ∞ (with ρ > 0).
    value = jnp.where(pure, xi, value)  # Lemma 3.2: (ξ, 0)-zCDP is ξ-DP.
    return jnp.where(invalid, jnp.nan, value)


def epsilon_from_zcdp(rho, delta, xi=0.0, method: str = "lemma3.6"):
    """ε such that a ``(ξ, ρ)``-zCDP mechanism is ``(ε, δ)``-DP.

    Args:
      rho: ``ρ ≥ 0`` (``+inf`` allowed); broadcastable with the others.
      delta: target ``δ ∈ [0, 1]``.
      xi: ``ξ ≥ 0``.
      method: one of :data:`CONVERSION_METHODS` (static). Default ``"lemma3.6"``: the
        smallest ``ε ≥ ξ + ρ`` at which the Lemma 3.6 δ-form (the minimum of its options)
        is ``≤ δ``, found by bisection with a static number of steps and rounded up, so
        that ``delta_from_zcdp(rho, result, xi) ≤ delta``. Closed forms:
        ``"prop1.3"``/``"lemma3.5"``: ``ξ + ρ + 2√(ρ log(1/δ))``;
        ``"lemma3.6-closed-form"``: ``ξ + ρ + 2√(ρ · max(0, log(√(πρ)/δ)))``.

    Returns:
      Array of the broadcast shape: ε. ``ξ`` where ``ρ = 0`` (Lemma 3.2); ``+inf`` where
      ``δ = 0`` or ``ρ = +inf`` (with ``ρ > 0``). In float32 the result is raised by the
      relative margin :data:`jaxrdp.kernels.FLOAT32_SAFETY_MARGIN`, so that it does not
      fall below the float64 value. Differentiable: the ``"lemma3.6"``
      result carries the implicit-function gradient of its root. Under ``jit``, invalid
      inputs (including ``δ ∉ [0, 1]``) give NaN.

    Raises:
      ValueError: with concrete invalid inputs or an unknown ``method``.

    References:
      Bun, Steinke (2016): the inverse of :func:`delta_from_zcdp`'s bounds, Proposition
      1.3, Lemma 3.5, Lemma 3.6 (proved as Lemma B.2), Lemma 3.2 for ``ρ = 0``.
    """
    return _convert(_epsilon_jit, _EPSILON_ARGS, method, rho, delta, xi)


# --------------------------------------------------------------------------- DP → zCDP


@jax.jit
def _from_dp_curve_jit(xi_hat, rho_hat):
    xi_hat, rho_hat = jnp.broadcast_arrays(xi_hat, rho_hat)
    invalid = _FROM_CURVE_ARGS.invalid(xi_hat, rho_hat)
    rho = 0.25 * rho_hat
    xi = xi_hat - 0.25 * rho_hat + 5.0 * jnp.sqrt(jnp.sqrt(rho_hat))
    return Zcdp(jnp.where(invalid, jnp.nan, rho), jnp.where(invalid, jnp.nan, xi))


def zcdp_from_dp_curve(xi_hat, rho_hat):
    """Partial converse: a family of DP guarantees ⇒ zCDP.

    If a mechanism is ``(ε, δ)``-DP for every ``δ > 0`` with
    ``ε = ξ̂ + √(ρ̂ log(1/δ))`` and ``ξ̂, ρ̂ ∈ [0, 1]``, then it is
    ``(ξ̂ − ρ̂/4 + 5ρ̂^{1/4}, ρ̂/4)``-zCDP.

    Args:
      xi_hat: ``ξ̂ ∈ [0, 1]``, broadcastable with ``rho_hat``.
      rho_hat: ``ρ̂ ∈ [0, 1]``.

    Returns:
      A :class:`Zcdp` ``(rho=ρ̂/4, xi=ξ̂ − ρ̂/4 + 5ρ̂^{1/4})``. Under ``jit``, inputs
      outside ``[0, 1]`` give NaN in both fields.

    Raises:
      ValueError: with concrete inputs outside ``[0, 1]``.

    References:
      Bun, Steinke (2016), Lemma 3.7 (proved as Lemma B.3).
    """
    _FROM_CURVE_ARGS.check(xi_hat, rho_hat)
    return _call(_from_dp_curve_jit, xi_hat, rho_hat)


# --------------------------------------------------------------------------- approximate zCDP


@functools.partial(jax.jit, static_argnames=("axis",))
def _compose_approx_jit(rhos, xis, deltas, *, axis):
    rhos, xis, deltas = jnp.broadcast_arrays(rhos, xis, deltas)
    bad_delta = jnp.any(_V.outside(deltas, _V.UNIT), axis=axis)
    safe = jnp.where((deltas >= 0) & (deltas <= 1), deltas, 0.0)
    # 1 − Π(1 − δᵢ), accurate for tiny δᵢ.
    delta = -jnp.expm1(jnp.sum(jnp.log1p(-safe), axis=axis))
    delta = jnp.where(bad_delta, jnp.nan, delta)
    return ApproxZcdp(
        _sum_nonneg_jit(rhos, axis=axis), _sum_nonneg_jit(xis, axis=axis), delta
    )


def compose_approximate(rhos, xis, deltas, *, axis: int = -1):
    """Composition of approximate zCDP mechanisms.

    Composing a δ-approximate ``(ξ, ρ)``-zCDP mechanism with a δ'-approximate
    ``(ξ', ρ')``-zCDP one gives ``(δ + δ' − δδ')``-approximate ``(ξ+ξ', ρ+ρ')``-zCDP;
    applied inductively, ``δ_total = 1 − Π(1 − δᵢ)``.

    Args:
      rhos: ``ρᵢ ≥ 0``; mechanisms run along ``axis``.
      xis: ``ξᵢ ≥ 0``, broadcastable with ``rhos``.
      deltas: ``δᵢ ∈ [0, 1]``, broadcastable with ``rhos``.
      axis: the axis to compose over (static Python int).

    Returns:
      An :class:`ApproxZcdp` ``(rho=Σρᵢ, xi=Σξᵢ, delta=1 − Π(1 − δᵢ))``. Under ``jit``,
      a slice with an invalid entry gives NaN in the affected field.

    Raises:
      ValueError: with concrete invalid inputs, naming the argument.

    References:
      Bun, Steinke (2016), Definition 8.1 and Lemma 8.2.
    """
    _COMPOSE_ARGS.check(rhos, xis, deltas)
    return _call(functools.partial(_compose_approx_jit, axis=axis), rhos, xis, deltas)


@functools.partial(jax.jit, static_argnames=("method",))
def _delta_approx_jit(rho, epsilon, approx_delta, xi, *, method):
    rho, epsilon, approx_delta, xi = jnp.broadcast_arrays(rho, epsilon, approx_delta, xi)
    inner = _delta_jit(rho, epsilon, xi, method=method)
    invalid = _DELTA_APPROX_ARGS.invalid(rho, epsilon, approx_delta, xi)
    value = approx_delta + (1.0 - approx_delta) * inner
    return jnp.where(invalid, jnp.nan, value)


def delta_from_approximate_zcdp(rho, epsilon, approx_delta, xi=0.0, method: str = "lemma3.6"):
    """δ such that a δ₀-approximate ``(ξ, ρ)``-zCDP mechanism is ``(ε, δ)``-DP.

    ``δ = δ₀ + (1 − δ₀)·δ'`` where ``δ'`` is :func:`delta_from_zcdp` of ``(ξ, ρ)`` at
    ``ε``; for ``ρ = 0`` and ``ε ≥ ξ`` this is ``δ₀`` (the first half of Lemma 8.8).

    Args:
      rho: ``ρ ≥ 0``; broadcastable with the others.
      epsilon: ``ε ≥ 0``.
      approx_delta: ``δ₀ ∈ [0, 1]``, the δ of Definition 8.1.
      xi: ``ξ ≥ 0``.
      method: one of :data:`CONVERSION_METHODS` (static), used for ``δ'``.

    Returns:
      Array of the broadcast shape: δ in ``[δ₀, 1]``. NaN for invalid inputs under ``jit``.

    Raises:
      ValueError: with concrete invalid inputs or an unknown ``method``.

    References:
      Bun, Steinke (2016), Definition 8.1 and Lemma 8.8.
    """
    return _convert(
        _delta_approx_jit, _DELTA_APPROX_ARGS, method, rho, epsilon, approx_delta, xi
    )


@functools.partial(jax.jit, static_argnames=("method",))
def _epsilon_approx_jit(rho, delta, approx_delta, xi, *, method):
    rho, delta, approx_delta, xi = jnp.broadcast_arrays(rho, delta, approx_delta, xi)
    invalid = _EPSILON_APPROX_ARGS.invalid(rho, delta, approx_delta, xi)
    feasible = delta >= approx_delta
    usable = feasible & (approx_delta < 1)
    inner_delta = jnp.where(
        usable, (delta - approx_delta) / jnp.where(usable, 1.0 - approx_delta, 1.0), 0.5
    )
    inner_delta = jnp.clip(inner_delta, 0.0, 1.0)
    value = _epsilon_jit(rho, inner_delta, xi, method=method)
    # δ₀ = 1 = δ: every ε works; report the smallest meaningful one, 0.
    value = jnp.where(feasible & (approx_delta == 1), 0.0, value)
    value = jnp.where(feasible, value, jnp.inf)
    return jnp.where(invalid | jnp.isnan(value), jnp.nan, value)


def epsilon_from_approximate_zcdp(rho, delta, approx_delta, xi=0.0, method: str = "lemma3.6"):
    """ε such that a δ₀-approximate ``(ξ, ρ)``-zCDP mechanism is ``(ε, δ)``-DP.

    Inverts Lemma 8.8: ``ε`` is :func:`epsilon_from_zcdp` at ``δ' = (δ − δ₀)/(1 − δ₀)``.

    Args:
      rho: ``ρ ≥ 0``; broadcastable with the others.
      delta: target total ``δ ∈ [0, 1]``.
      approx_delta: ``δ₀ ∈ [0, 1]``, the δ of Definition 8.1.
      xi: ``ξ ≥ 0``.
      method: one of :data:`CONVERSION_METHODS` (static).

    Returns:
      Array of the broadcast shape: ε. ``+inf`` where ``δ < δ₀`` (no ε achieves it) or
      where ``δ = δ₀`` and ``ρ > 0``. NaN for invalid inputs under ``jit``.

    Raises:
      ValueError: with concrete invalid inputs or an unknown ``method``.

    References:
      Bun, Steinke (2016), Definition 8.1 and Lemma 8.8.
    """
    return _convert(
        _epsilon_approx_jit, _EPSILON_APPROX_ARGS, method, rho, delta, approx_delta, xi
    )

