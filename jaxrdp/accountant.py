"""RDP accountant: a pytree state with pure ``init``/``compose``/``get_epsilon`` functions.

The state is a :class:`RdpState` ``NamedTuple`` (a JAX pytree), so the pure functions run
inside ``jax.jit``, ``lax.scan`` and ``vmap``; a DP-SGD loop can compose one step per
iteration and check its privacy budget in-graph, with no host round trip::

    state = accountant.init()                        # float32 unless x64 is on
    def train_step(carry, batch):
        state, ... = carry
        state = accountant.compose(state, q, sigma)  # one SGM step
        eps, _ = accountant.get_epsilon(state, 1e-5)
        ...

Precision. The state holds the accumulated RDP as an unevaluated sum ``rdp + residual``
(compensated summation with an exact TwoSum per update), so float32 accumulation over
millions of steps stays within about one ulp of the exact sum instead of drifting by
``steps · ulp``; the float32 kernel rounds each step's RDP upwards and the conversion
rounds outwards, so a float32 ε is never below the float64 value. Work on concrete
float64 states runs in a local ``jax.enable_x64`` scope; under ``jit`` a float64 state
needs x64 enabled by the caller.

:class:`RdpAccountant` is a thin host-side wrapper (float64) with dp_accounting-like names
that also accepts dp_accounting ``DpEvent`` objects when that package is installed.

References:
  Mironov (2017), "Rényi Differential Privacy", Proposition 1 (composition).
  Mironov, Talwar, Zhang (2019), "Rényi Differential Privacy of the Sampled Gaussian
  Mechanism" (per-step RDP). Bun, Steinke (2016), "Concentrated Differential Privacy",
  Definition 1.1 (``(ξ, ρ)``-zCDP is RDP ``ξ + ρα`` at every order).
"""

from __future__ import annotations

import contextlib
import math
import numbers
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxrdp import _doublefloat, _precision, _validate, conversions, kernels

__all__ = [
    "RdpAccountant",
    "RdpState",
    "compose",
    "compose_gaussian",
    "compose_zcdp",
    "get_delta",
    "get_epsilon",
    "init",
]


class RdpState(NamedTuple):
    """Accumulated Rényi-DP curve (a JAX pytree).

    Attributes:
      orders: Rényi orders ``α > 1``, shape ``(K,)``.
      rdp: accumulated RDP at each order, shape ``(K,)``.
      residual: low-order part of the sum, shape ``(K,)``; the accumulated RDP is
        ``rdp + residual`` with ``|residual| ≤ ulp(rdp) / 2`` (double-word summation). Build
        states with :func:`init`; a state built by hand may leave it ``None`` (zero), but
        then its pytree structure differs from a composed state (matters for ``scan``).
    """

    orders: jax.Array
    rdp: jax.Array
    residual: jax.Array | None = None


def _total(state: RdpState):
    if state.residual is None:
        return state.rdp
    return state.rdp + state.residual


def _state_dtype(state: RdpState):
    return jnp.dtype(state.rdp.dtype)


def _x64_scope(state: RdpState, *args):
    """Local x64 scope for concrete float64 work; nothing under a transformation."""
    _, ctx = _precision.compute_context(state.orders, state.rdp, *args)
    return ctx


def init(orders=None, dtype=None) -> RdpState:
    """A fresh accountant state: zero RDP at every order.

    Args:
      orders: Rényi orders ``> 1``, 1-D of shape ``(K,)``; default
        :data:`jaxrdp.DEFAULT_ORDERS`.
      dtype: floating dtype of the state; default JAX's default float (float32 unless
        x64 is enabled). ``jnp.float64`` works without enabling x64 globally for eager
        use; under ``jit`` it requires x64.

    Returns:
      An :class:`RdpState` with ``rdp = residual = 0`` of shape ``(K,)``.

    Raises:
      ValueError: if ``orders`` is not 1-D, is empty or has an order ``≤ 1``.
    """
    if orders is None:
        orders = kernels.DEFAULT_ORDERS
    if np.ndim(orders) != 1:
        raise ValueError(f"orders must be 1-D; got orders of shape {np.shape(orders)}")
    conversions._check_orders(orders)
    dtype = jnp.dtype(jnp.result_type(float) if dtype is None else dtype)
    if not jnp.issubdtype(dtype, jnp.floating):
        raise ValueError(f"dtype must be a floating dtype; got dtype={dtype}")
    ctx = jax.enable_x64(True) if dtype == jnp.float64 else contextlib.nullcontext()
    with ctx:
        o = jnp.asarray(orders, dtype)
        return RdpState(o, jnp.zeros_like(o), jnp.zeros_like(o))


def _accumulate(state: RdpState, increment) -> RdpState:
    """``state + increment`` in double-word arithmetic.

    TwoSum (Knuth) gives the exact rounding error of ``rdp + increment``; it is added to
    ``residual`` and the pair is renormalised by a second TwoSum, so ``rdp`` stays the
    correctly rounded total and ``|residual| ≤ ulp(rdp)/2``. Non-finite totals carry no
    residual. The operands pass an optimization barrier: a state or increment that is a
    compile-time constant would otherwise let XLA reassociate ``(x + c) − c`` into ``x``
    and drop the error term.
    """
    a = state.rdp
    b = jnp.broadcast_to(jnp.asarray(increment, a.dtype), a.shape)
    residual = jnp.zeros_like(a) if state.residual is None else state.residual
    a, b, residual = jax.lax.optimization_barrier((a, b, residual))
    total = _doublefloat.two_sum(a, b)
    out = _doublefloat.two_sum(total.hi, residual + total.lo)
    finite = jnp.isfinite(out.hi) & jnp.isfinite(out.lo)
    high = jnp.where(finite, out.hi, total.hi)
    low = jnp.where(finite, out.lo, jnp.zeros_like(out.lo))
    return RdpState(state.orders, high, low)


def compose(state: RdpState, q, sigma, steps=1) -> RdpState:
    """Compose ``steps`` steps of the Sampled Gaussian Mechanism into ``state``.

    Args:
      state: the current :class:`RdpState`.
      q: sampling rate in ``[0, 1]``, a scalar (Python, NumPy or traced).
      sigma: noise multiplier ``σ ≥ 0`` (``0`` makes the RDP infinite).
      steps: non-negative integer number of steps (may be traced).

    Returns:
      The new state, ``rdp += steps · rdp_SGM(q, σ, α)`` at every order, in the state's
      dtype. Under a transformation, invalid ``q``, ``σ`` or ``steps`` make the RDP NaN,
      which later turns ε into NaN.

    Raises:
      ValueError: with concrete arguments, naming an invalid ``q``, ``sigma`` or ``steps``.

    References:
      Mironov, Talwar, Zhang (2019), Sec. 3; Mironov (2017), Proposition 1.
    """
    _validate.check_range("q", q, low=0.0, high=1.0)
    _validate.check_range("sigma", sigma, low=0.0)
    conversions._check_steps(steps)
    for name, value in (("q", q), ("sigma", sigma), ("steps", steps)):
        if np.ndim(value) != 0:
            raise ValueError(f"{name} must be a scalar; got {name} of shape {np.shape(value)}")
    dtype = _state_dtype(state)
    with _x64_scope(state, q, sigma, steps):
        per_step = kernels.rdp(jnp.asarray(q, dtype), jnp.asarray(sigma, dtype), state.orders)
        increment = conversions._scale_rdp(per_step, jnp.asarray(steps, dtype))
        return _accumulate(state, increment)


def compose_gaussian(state: RdpState, sigma, steps=1) -> RdpState:
    """Compose ``steps`` Gaussian mechanisms (``q = 1``): RDP ``α / (2σ²)`` each.

    Args:
      state: the current :class:`RdpState`.
      sigma: noise multiplier ``σ ≥ 0``.
      steps: non-negative integer number of repetitions.

    Returns:
      The new state.

    Raises:
      ValueError: with concrete arguments, naming an invalid argument.

    References:
      Mironov (2017), Proposition 7 (RDP of the Gaussian mechanism).
    """
    return compose(state, 1.0, sigma, steps)


def compose_zcdp(state: RdpState, rho, xi=0.0) -> RdpState:
    """Compose a ``(ξ, ρ)``-zCDP mechanism: RDP ``ξ + ρα`` at every order ``α``.

    Args:
      state: the current :class:`RdpState`.
      rho: ``ρ ≥ 0``.
      xi: ``ξ ≥ 0`` (default 0).

    Returns:
      The new state. Under a transformation, negative or NaN ``ρ``/``ξ`` give NaN.

    Raises:
      ValueError: with concrete arguments, naming an invalid ``rho`` or ``xi``.

    References:
      Bun, Steinke (2016), Definition 1.1 and Proposition 1.6.
    """
    _validate.check_range("rho", rho, low=0.0)
    _validate.check_range("xi", xi, low=0.0)
    dtype = _state_dtype(state)
    with _x64_scope(state, rho, xi):
        rho_ = jnp.asarray(rho, dtype)
        xi_ = jnp.asarray(xi, dtype)
        orders = state.orders
        linear = jnp.where(rho_ == 0, jnp.zeros_like(orders), rho_ * orders)
        increment = xi_ + linear
        # Outward rounding: the float sum may be below ξ + ρα by ~1.5 ulp.
        increment = increment * (1.0 + 4.0 * jnp.finfo(dtype).eps)
        bad = jnp.isnan(rho_) | jnp.isnan(xi_) | (rho_ < 0) | (xi_ < 0)
        increment = jnp.where(bad, jnp.nan, increment)
        return _accumulate(state, increment)


def get_epsilon(state: RdpState, delta, *, method: str = "improved", return_info: bool = False):
    """ε of the accumulated RDP at target ``delta`` (in-graph capable).

    Args:
      state: an :class:`RdpState`.
      delta: target δ in ``[0, 1]`` (a scalar or an array; orders are not batched).
      method: ``"improved"`` (default) or ``"classic"``; see :mod:`jaxrdp.conversions`.
      return_info: return a :class:`jaxrdp.conversions.EpsilonResult` with ``at_edge``.

    Returns:
      ``(epsilon, order)`` in the state's dtype (see
      :func:`jaxrdp.conversions.epsilon_from_rdp`).

    Raises:
      ValueError: with concrete inputs, for ``δ ∉ [0, 1]`` or a NaN/negative state.
    """
    with _x64_scope(state, delta):
        return conversions.epsilon_from_rdp(
            _total(state), state.orders, delta, method=method, return_info=return_info
        )


def get_delta(state: RdpState, epsilon, *, method: str = "improved", return_info: bool = False):
    """δ of the accumulated RDP at target ``epsilon`` (in-graph capable).

    Args:
      state: an :class:`RdpState`.
      epsilon: target ε ``≥ 0``.
      method: ``"improved"`` (default) or ``"classic"``.
      return_info: return a :class:`jaxrdp.conversions.DeltaResult` with ``at_edge``.

    Returns:
      ``(delta, order)`` in the state's dtype.

    Raises:
      ValueError: with concrete inputs, for ``ε < 0`` or a NaN/negative state.
    """
    with _x64_scope(state, epsilon):
        return conversions.delta_from_rdp(
            _total(state), state.orders, epsilon, method=method, return_info=return_info
        )


# --------------------------------------------------------------------------- host class


def _is_number(x) -> bool:
    return isinstance(x, (numbers.Real, np.ndarray, np.generic, jax.Array))


def _check_count(count) -> int:
    integral = isinstance(count, (numbers.Integral, np.integer)) or (
        isinstance(count, numbers.Real) and math.isfinite(count) and float(count).is_integer()
    )
    if isinstance(count, bool) or not integral:
        raise ValueError(f"count must be a non-negative integer; got count={count!r}")
    count = int(count)
    if count < 0:
        raise ValueError(f"count must be a non-negative integer; got count={count!r}")
    return count


class _Flattened:
    """An event reduced to SGM segments, zCDP terms and a non-private flag."""

    def __init__(self):
        self.segments: list[tuple[float, float, int]] = []  # (q, sigma, count)
        self.zcdp: list[tuple[float, float, int]] = []  # (rho, xi, count)
        self.non_private = False


def _gaussian_sigma(event, dp_event):
    """Noise multiplier of a Gaussian-only event (composition of Gaussians), or None.

    ``k`` Gaussians with multipliers ``σ_i`` on the same query are one Gaussian with
    ``σ = (Σ σ_i^{-2})^{-1/2}``, so a Poisson-sampled composition of them is one SGM.
    """
    if isinstance(event, dp_event.GaussianDpEvent):
        return float(event.noise_multiplier)
    if isinstance(event, dp_event.SelfComposedDpEvent):
        inner = _gaussian_sigma(event.event, dp_event)
        if inner is None:
            return None
        count = _check_count(event.count)
        return math.inf if count == 0 else inner / math.sqrt(count)
    if isinstance(event, dp_event.ComposedDpEvent):
        inv_var = 0.0
        for e in event.events:
            s = _gaussian_sigma(e, dp_event)
            if s is None:
                return None
            inv_var += 0.0 if s == math.inf else (math.inf if s == 0 else s**-2)
        return math.inf if inv_var == 0 else inv_var**-0.5
    return None


def _flatten(event, count: int, dp_event, out: _Flattened) -> None:
    name = type(event).__name__
    if isinstance(event, dp_event.NoOpDpEvent):
        return
    if isinstance(event, dp_event.NonPrivateDpEvent):
        if count > 0:
            out.non_private = True
        return
    if isinstance(event, dp_event.SelfComposedDpEvent):
        _flatten(event.event, count * _check_count(event.count), dp_event, out)
        return
    if isinstance(event, dp_event.ComposedDpEvent):
        for e in event.events:
            _flatten(e, count, dp_event, out)
        return
    if isinstance(event, dp_event.GaussianDpEvent):
        out.segments.append((1.0, float(event.noise_multiplier), count))
        return
    if isinstance(event, dp_event.ZCDpEvent):
        out.zcdp.append((float(event.rho), float(event.xi), count))
        return
    if isinstance(event, dp_event.PoissonSampledDpEvent):
        sigma = _gaussian_sigma(event.event, dp_event)
        if sigma is None:
            raise TypeError(
                "PoissonSampledDpEvent is supported only around a GaussianDpEvent (or a "
                "composition of GaussianDpEvents); got inner event "
                f"{type(event.event).__name__}: {event.event!r}"
            )
        out.segments.append((float(event.sampling_probability), sigma, count))
        return
    raise TypeError(
        f"Unsupported DpEvent type {name}: RdpAccountant supports GaussianDpEvent, "
        "PoissonSampledDpEvent(GaussianDpEvent), SelfComposedDpEvent, ComposedDpEvent, "
        f"ZCDpEvent, NoOpDpEvent and NonPrivateDpEvent; got {event!r}"
    )


class RdpAccountant:
    """Host-side RDP accountant with dp_accounting-like names (float64 throughout).

    Example::

        acc = RdpAccountant()
        acc.compose_sgm(q=0.01, sigma=1.1, steps=10_000)
        acc.get_epsilon(1e-5)

    With dp_accounting installed, ``acc.compose(event, count)`` also accepts its events
    (``GaussianDpEvent``, ``PoissonSampledDpEvent`` around Gaussians,
    ``SelfComposedDpEvent``, ``ComposedDpEvent``, ``ZCDpEvent``, ``NoOpDpEvent``,
    ``NonPrivateDpEvent``). Other events raise ``TypeError`` naming their type and leave
    the accountant unchanged.

    Args:
      orders: Rényi orders ``> 1``; default :data:`jaxrdp.DEFAULT_ORDERS`.
    """

    def __init__(self, orders=None):
        self._state = init(orders, dtype=jnp.float64)

    @property
    def state(self) -> RdpState:
        """The current :class:`RdpState` (float64)."""
        return self._state

    @property
    def orders(self) -> np.ndarray:
        """The Rényi orders, a NumPy copy."""
        return np.array(self._state.orders)

    @property
    def rdp(self) -> np.ndarray:
        """The accumulated RDP at each order, a NumPy copy."""
        with jax.enable_x64(True):
            return np.array(_total(self._state))

    def supports(self, event) -> bool:
        """Whether :meth:`compose` accepts the dp_accounting ``event``."""
        try:
            from dp_accounting import dp_event
        except ImportError:  # pragma: no cover - dp_accounting is a test dependency
            return False
        try:
            _flatten(event, 1, dp_event, _Flattened())
        except (TypeError, ValueError):
            return False
        return True

    def compose_sgm(self, q, sigma, steps=1) -> "RdpAccountant":
        """Compose ``steps`` steps of the SGM with sampling rate ``q`` and noise ``sigma``.

        Returns:
          ``self`` (for chaining).

        Raises:
          ValueError: naming an invalid argument.
        """
        self._state = compose(self._state, float(q), float(sigma), steps)
        self._segments = getattr(self, "_segments", []) + [(float(q), float(sigma), int(steps))]
        return self

    def compose(self, event_or_q, sigma=None, steps=1, *, count=None) -> "RdpAccountant":
        """Compose an SGM (``q, sigma, steps``) or a dp_accounting ``DpEvent``.

        Two call forms:

        * ``compose(q, sigma, steps=1)``: ``steps`` SGM steps, like :meth:`compose_sgm`.
        * ``compose(event, count=1)``: a dp_accounting event repeated ``count`` times; as in
          dp_accounting, the count may also be the second positional argument.

        Returns:
          ``self`` (for chaining).

        Raises:
          TypeError: for an unsupported event type (named), or when dp_accounting is not
            installed and a non-numeric event is given.
          ValueError: naming an invalid parameter or count.
        """
        if _is_number(event_or_q):
            if count is not None:
                raise TypeError("count applies to DpEvents; use steps for an SGM")
            if sigma is None:
                raise TypeError("compose(q, sigma, steps): sigma is required with a numeric q")
            return self.compose_sgm(event_or_q, sigma, steps)
        try:
            from dp_accounting import dp_event
        except ImportError:
            raise TypeError(
                "compose() got a non-numeric event of type "
                f"{type(event_or_q).__name__}; DpEvents need the optional dp_accounting package"
            ) from None
        if not isinstance(event_or_q, dp_event.DpEvent):
            raise TypeError(
                f"compose() expects a number q or a dp_accounting DpEvent; got "
                f"{type(event_or_q).__name__}"
            )
        if count is not None and sigma is not None:
            raise TypeError("give the count once (second positional argument or count=)")
        if count is None:
            count = sigma if sigma is not None else steps
        count = _check_count(count)
        flat = _Flattened()
        _flatten(event_or_q, count, dp_event, flat)  # raises before any state change

        state = self._state
        for q, s, n in flat.segments:
            _validate.check_range("sampling_probability", q, low=0.0, high=1.0)
            _validate.check_range("noise_multiplier", s, low=0.0)
        for rho, xi, _ in flat.zcdp:
            _validate.check_range("rho", rho, low=0.0)
            _validate.check_range("xi", xi, low=0.0)
        with jax.enable_x64(True):
            if flat.segments:
                qs, sigmas, ns = (np.array(v, dtype=np.float64) for v in zip(*flat.segments))
                increment = conversions.compose_rdp(qs, sigmas, ns, orders=np.asarray(state.orders))
                state = _accumulate(state, increment)
            for rho, xi, n in flat.zcdp:
                if n:
                    state = compose_zcdp(state, n * rho, n * xi)
            if flat.non_private:
                state = _accumulate(state, jnp.full_like(state.rdp, jnp.inf))
        self._state = state
        return self

    def get_epsilon_and_optimal_order(self, delta, *, method: str = "improved"):
        """``(epsilon, order)`` as Python floats; see :func:`get_epsilon`."""
        eps, order = get_epsilon(self._state, delta, method=method)
        return float(eps), float(order)

    def get_epsilon(self, delta, *, method: str = "improved") -> float:
        """ε at target ``delta`` (a Python float)."""
        return self.get_epsilon_and_optimal_order(delta, method=method)[0]

    def get_delta_and_optimal_order(self, epsilon, *, method: str = "improved"):
        """``(delta, order)`` as Python floats; see :func:`get_delta`."""
        dlt, order = get_delta(self._state, epsilon, method=method)
        return float(dlt), float(order)

    def get_delta(self, epsilon, *, method: str = "improved") -> float:
        """δ at target ``epsilon`` (a Python float)."""
        return self.get_delta_and_optimal_order(epsilon, method=method)[0]

    def _profile_segments(self):
        """Recorded SGM segments as arrays; raises if other events were composed too."""
        segs = getattr(self, "_segments", [])
        if not segs:
            raise ValueError("profile accounting needs at least one SGM segment")
        q, sigma, steps = (np.array(v, dtype=np.float64) for v in zip(*segs))
        from jaxrdp import conversions

        with jax.enable_x64(True):
            curve = np.array(conversions.compose_rdp(q, sigma, steps, self._state.orders))
        if not np.allclose(curve, self.rdp, rtol=1e-9, atol=0.0):
            raise ValueError("profile accounting covers SGM segments only (other events composed)")
        return q, sigma, steps

    def get_epsilon_profile(self, delta) -> float:
        """Tight ε at ``delta`` by the privacy profile of the recorded SGM segments.

        See :func:`jaxrdp.profile.epsilon_schedule` (never below the true ε; falls back to the
        RDP ε where the profile bound is not tighter).
        """
        from jaxrdp import profile

        return float(profile.epsilon_schedule(*self._profile_segments(), delta).epsilon)

    def get_delta_profile(self, epsilon) -> float:
        """Tight δ at ``epsilon`` by the privacy profile; see :func:`jaxrdp.profile.delta_schedule`."""
        from jaxrdp import profile

        return float(profile.delta_schedule(*self._profile_segments(), epsilon).delta)

    def __repr__(self) -> str:  # pragma: no cover - cosmetic
        return f"RdpAccountant(orders=<{self._state.orders.shape[0]} orders>)"
