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
from jaxrdp import wor as _wor

__all__ = [
    "RdpAccountant",
    "RdpState",
    "compose",
    "compose_gaussian",
    "compose_rdp_curve",
    "compose_wor",
    "compose_zcdp",
    "get_delta",
    "get_epsilon",
    "init",
    "steps_remaining",
    "steps_remaining_rdp",
]


class RdpState(NamedTuple):
    """Accumulated Rényi-DP curve (a JAX pytree whose orders are static).

    The orders are static data of the pytree, not leaves: a state passed into ``jax.jit``
    or carried through ``lax.scan`` keeps them as concrete float64 NumPy values, so the
    kernels take their fast path (shared work across orders) inside the user's graph, and
    a state with other orders compiles its own program. Only ``rdp`` and ``residual`` are
    leaves. (A state built by hand with traced orders keeps them as a leaf instead.)

    Attributes:
      orders: Rényi orders ``α > 1``, shape ``(K,)`` (float64 NumPy in states made by
        :func:`init`).
      rdp: accumulated RDP at each order, shape ``(K,)``.
      residual: low-order part of the sum, shape ``(K,)``; the accumulated RDP is
        ``rdp + residual`` with ``|residual| ≤ ulp(rdp) / 2`` (double-word summation). Build
        states with :func:`init`; a state built by hand may leave it ``None`` (zero), but
        then its pytree structure differs from a composed state (matters for ``scan``).
    """

    orders: jax.Array
    rdp: jax.Array
    residual: jax.Array | None = None


def _flatten_state(state: RdpState):
    orders = state.orders
    if isinstance(orders, jax.core.Tracer):
        return (orders, state.rdp, state.residual), None
    return (state.rdp, state.residual), tuple(np.asarray(orders, np.float64).tolist())


def _unflatten_state(static_orders, leaves) -> RdpState:
    if static_orders is None:
        return RdpState(*leaves)
    return RdpState(_frozen_orders(static_orders), *leaves)


def _frozen_orders(orders) -> np.ndarray:
    out = np.array(orders, dtype=np.float64)
    out.setflags(write=False)
    return out


jax.tree_util.register_pytree_node(RdpState, _flatten_state, _unflatten_state)


def _rdp_values(values, dtype):
    """RDP values as ``dtype``, rounded *upwards* where the input is more precise.

    A float64 per-step RDP computed on the host and fed to a float32 state would otherwise
    be rounded to nearest, i.e. possibly down by half an ulp (optimistic).
    """
    out = jnp.asarray(values, dtype)
    source = values.dtype if hasattr(values, "dtype") else np.result_type(values)
    if not jnp.issubdtype(source, jnp.floating) or jnp.finfo(source).bits <= jnp.finfo(dtype).bits:
        return out
    if isinstance(values, jax.core.Tracer):  # only under x64: compare in the wide dtype
        below = out.astype(source) < values
    else:
        below = np.asarray(out, np.float64) < np.asarray(values, np.float64)
    return jnp.where(below, jnp.nextafter(out, jnp.asarray(jnp.inf, dtype)), out)


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
    conversions.check_orders(orders)
    dtype = jnp.dtype(jnp.result_type(float) if dtype is None else dtype)
    if not jnp.issubdtype(dtype, jnp.floating):
        raise ValueError(f"dtype must be a floating dtype; got dtype={dtype}")
    ctx = jax.enable_x64(True) if dtype == jnp.float64 else contextlib.nullcontext()
    with ctx:
        o = _frozen_orders(np.asarray(orders, dtype=np.float64))
        zeros = jnp.zeros(o.shape, dtype)
        return RdpState(o, zeros, jnp.zeros_like(zeros))


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
    conversions.check_steps(steps)
    for name, value in (("q", q), ("sigma", sigma), ("steps", steps)):
        if np.ndim(value) != 0:
            raise ValueError(f"{name} must be a scalar; got {name} of shape {np.shape(value)}")
    dtype = _state_dtype(state)
    with _x64_scope(state, q, sigma, steps):
        q_, sigma_ = jnp.asarray(q, dtype), jnp.asarray(sigma, dtype)
        per_step = kernels.rdp_core(q_, sigma_, state.orders)
        increment = conversions.scale_rdp(per_step, jnp.asarray(steps, dtype))
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
        orders = jnp.asarray(state.orders, dtype)
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
        self.wor: list[tuple[int, int, float, int]] = []  # (batch, dataset, sigma, count)


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
    if isinstance(event, dp_event.SampledWithoutReplacementDpEvent):
        _flatten_wor(event, count, dp_event, out)
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
    the accountant unchanged. ``SampledWithoutReplacementDpEvent`` (fixed-size batches,
    replace-one neighbours; see :meth:`compose_wor`) is accepted too, never mixed with
    Poisson steps; :meth:`to_dp_event` exports what was composed.

    Args:
      orders: Rényi orders ``> 1``; default :data:`jaxrdp.DEFAULT_ORDERS`.
    """

    def __init__(self, orders=None):
        self._state = init(orders, dtype=jnp.float64)
        self._ledger = _Ledger()

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
        self._ledger.check_relation(_POISSON if float(q) < 1 else None)
        self._state = compose(self._state, float(q), float(sigma), steps)
        self._ledger.record_sgm(float(q), float(sigma), steps)
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
        self._ledger.check_flattened(flat)

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
            for batch, dataset, s_wor, n in flat.wor:
                if n:
                    per_step = _wor.rdp(
                        s_wor, np.asarray(state.orders), batch_size=batch, dataset_size=dataset
                    )
                    state = _accumulate(state, _times(per_step, float(n)))
            if flat.non_private:
                state = _accumulate(state, jnp.full_like(state.rdp, jnp.inf))
        self._state = state
        self._ledger.record_event(event_or_q, count, flat)
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

    # ---------------------------------------------- fixed-size sampling and export

    @property
    def neighboring_relation(self) -> str | None:
        """``"add_or_remove_one"`` (Poisson SGM composed), ``"replace_one"`` (fixed-size
        batches composed) or ``None`` (only relation-free mechanisms so far). The two are
        never mixed in one accountant: the resulting ε would be no statement at all."""
        return self._ledger.relation

    def compose_wor(
        self, sigma, *, batch_size=None, dataset_size=None, q=None, steps=1
    ) -> "RdpAccountant":
        """Compose ``steps`` Gaussian steps on fixed-size batches drawn without replacement.

        Replace-one neighbours; ``sigma`` is relative to the replace-one sensitivity
        (``2C`` for clipped gradients): see :mod:`jaxrdp.wor`.

        Args:
          sigma: noise multiplier ``σ ≥ 0`` (over the replace-one sensitivity).
          batch_size: ``B``, a positive integer.
          dataset_size: ``N ≥ B``, a positive integer.
          q: instead of the sizes, ``B/N`` (then :meth:`to_dp_event` cannot export it).
          steps: non-negative integer number of steps.

        Returns:
          ``self`` (for chaining).

        Raises:
          ValueError: naming an invalid argument, or when this accountant already holds
            Poisson (add/remove-one) steps.
        """
        self._ledger.check_relation(_REPLACE)
        gamma = _wor.sampling_ratio(batch_size, dataset_size, q)
        self._state = compose_wor(
            self._state, float(sigma), batch_size=batch_size, dataset_size=dataset_size,
            q=q, steps=steps,
        )
        self._ledger.record_wor(batch_size, dataset_size, float(gamma), float(sigma), steps)
        return self

    def to_dp_event(self):
        """What this accountant composed, as one dp_accounting ``DpEvent``.

        Feed it to any dp_accounting accountant to cross-check (use
        ``NeighborRel.REPLACE_ONE`` in its ``RdpAccountant`` when
        :attr:`neighboring_relation` is ``"replace_one"``). SGM steps become
        ``SelfComposedDpEvent(PoissonSampledDpEvent(q, GaussianDpEvent(σ)), steps)``
        (``q = 1``: a Gaussian), fixed-size steps
        ``SampledWithoutReplacementDpEvent(N, B, GaussianDpEvent(σ))``, composed events are
        returned as given.

        Returns:
          A ``dp_accounting.dp_event.ComposedDpEvent`` (``NoOpDpEvent`` if nothing was
          composed).

        Raises:
          ValueError: if fixed-size steps were composed from ``q`` alone (no sizes to
            export).
          ImportError: without dp_accounting.
        """
        return self._ledger.to_dp_event()

    # ---------------------------------------------- tight accounting (privacy profile)

    def _profile_segments(self):
        """The composed SGM segments ``(q, σ, steps)`` as float64 arrays, for the profile.

        Raises:
          ValueError: if nothing, or anything other than SGM steps, was composed (the
            profile of :mod:`jaxrdp.profile` covers the Sampled Gaussian Mechanism only).
        """
        segments = self._ledger.sgm_segments()
        if not segments:
            raise ValueError(
                "profile accounting needs SGM steps only (compose_sgm, compose(q, sigma) or "
                "Poisson-sampled Gaussian events); this accountant holds none or other kinds"
            )
        return tuple(np.array(v, dtype=np.float64) for v in zip(*segments))

    def get_epsilon_profile(self, delta) -> float:
        """Tight ε at ``delta`` by the privacy profile of the composed SGM steps.

        See :func:`jaxrdp.profile.epsilon_schedule`: never below the true ε; the RDP ε
        where the profile bound is not tighter.

        Raises:
          ValueError: for an invalid ``delta`` or steps the profile does not cover.
        """
        from jaxrdp import profile

        return float(profile.epsilon_schedule(*self._profile_segments(), delta).epsilon)

    def get_delta_profile(self, epsilon) -> float:
        """Tight δ at ``epsilon`` by the privacy profile; see :func:`jaxrdp.profile.delta_schedule`.

        Raises:
          ValueError: for an invalid ``epsilon`` or steps the profile does not cover.
        """
        from jaxrdp import profile

        return float(profile.delta_schedule(*self._profile_segments(), epsilon).delta)

    def __repr__(self) -> str:  # pragma: no cover - cosmetic
        return f"RdpAccountant(orders=<{self._state.orders.shape[0]} orders>)"


# --------------------------------------------------------------------------- fixed-size
# sampling without replacement, budget, and export (see jaxrdp.wor)

_POISSON = "add_or_remove_one"
_REPLACE = "replace_one"


_times = conversions.scale_rdp  # steps · per_step, 0 · inf = 0, NaN for bad steps


def _check_scalar_steps(steps) -> None:
    conversions.check_steps(steps)
    if np.ndim(steps) != 0:
        raise ValueError(f"steps must be a scalar; got steps of shape {np.shape(steps)}")


def compose_rdp_curve(state: RdpState, per_step_rdp, steps=1) -> RdpState:
    """Compose ``steps`` repetitions of a mechanism given by its RDP curve at ``state.orders``.

    The pure building block for any per-step curve computed elsewhere (e.g. once, outside
    the training step, by :func:`jaxrdp.wor.rdp` or :func:`jaxrdp.rdp`).

    Args:
      state: the current :class:`RdpState`.
      per_step_rdp: RDP ``≥ 0`` at ``state.orders``, shape ``(K,)``.
      steps: non-negative integer (may be traced).

    Returns:
      The new state. Under a transformation, NaN in ``per_step_rdp`` or a bad ``steps``
      makes the RDP NaN (and later ε NaN).

    Raises:
      ValueError: with concrete arguments, naming a negative/NaN curve or bad ``steps``.
    """
    _validate.check_range("per_step_rdp", per_step_rdp, low=0.0)
    _check_scalar_steps(steps)
    if np.shape(per_step_rdp) != tuple(state.orders.shape):
        raise ValueError(
            f"per_step_rdp must have the orders' shape {tuple(state.orders.shape)}; "
            f"got {np.shape(per_step_rdp)}"
        )
    dtype = _state_dtype(state)
    with _x64_scope(state, per_step_rdp, steps):
        curve = _rdp_values(per_step_rdp, dtype)
        curve = jnp.where(curve < 0, jnp.nan, curve)
        return _accumulate(state, _times(curve, steps))


def compose_wor(
    state: RdpState, sigma, *, batch_size=None, dataset_size=None, q=None, steps=1
) -> RdpState:
    """Compose ``steps`` Gaussian steps on fixed-size batches drawn without replacement.

    The pure, jittable counterpart of :func:`compose` for fixed-size batches: per-step
    RDP by :func:`jaxrdp.wor.rdp` (Wang–Balle–Kasiviswanathan 2019, Theorem 9), for
    **replace-one** neighbours — a different statement from the add/remove-one guarantee
    of :func:`compose`; do not compose both into one state. ``sigma`` is the noise
    standard deviation over the replace-one sensitivity (``2C`` for a sum of gradients
    clipped to norm ``C``).

    Args:
      state: the current :class:`RdpState`. Its orders are static (concrete even under
        ``jit``), so orders up to :data:`jaxrdp.wor.MAX_ORDER` are evaluated; a state
        built by hand with traced orders gets ``+inf`` above
        :data:`jaxrdp.wor.TRACED_MAX_ORDER` (sound; the default orders stop at 1024).
      sigma: noise multiplier ``σ ≥ 0`` (scalar, may be traced).
      batch_size: ``B`` (positive integer, may be traced).
      dataset_size: ``N ≥ B`` (positive integer, may be traced).
      q: instead of the sizes, ``B/N`` (see :func:`jaxrdp.wor.sampling_ratio`).
      steps: non-negative integer number of steps (may be traced).

    Returns:
      The new state. Under a transformation, invalid arguments (``B > N``, non-integer
      sizes, ``σ < 0``, NaN) make the RDP NaN, which turns ε into NaN: NaN means "invalid
      input", never "private".

    Raises:
      ValueError: with concrete arguments, naming the invalid one.
    """
    _check_scalar_steps(steps)
    for name, value in (("sigma", sigma), ("batch_size", batch_size),
                        ("dataset_size", dataset_size), ("q", q)):
        if value is not None and np.ndim(value) != 0:
            raise ValueError(f"{name} must be a scalar; got {name} of shape {np.shape(value)}")
    dtype = _state_dtype(state)
    with _x64_scope(state, sigma, batch_size, dataset_size, q, steps):
        per_step = _wor.rdp(
            jnp.asarray(sigma, dtype) if not _validate.is_concrete(sigma) else sigma,
            state.orders, batch_size=batch_size, dataset_size=dataset_size, q=q,
        ).astype(dtype)
        return _accumulate(state, _times(per_step, steps))


def _steps_guess(total, per_step, orders, delta, target, method):
    """``max_α ⌊(budget_α − R_α) / r_α⌋``: the closed form before the ±1 correction.

    Order α meets ``(ε, δ)`` iff ``R_α + T r_α ≤ budget_α`` (:func:`conversions.rdp_budget`,
    the conversion's offset and its KL shortcut).
    """
    budget = conversions.rdp_budget(target[None], delta[None], orders, method)[0]
    room = budget - total
    safe_r = jnp.where(per_step > 0, per_step, 1.0)
    unlimited = jnp.where(room >= 0, jnp.inf, -1.0)
    per_order = jnp.where(per_step > 0, jnp.floor(room / safe_r), unlimited)
    per_order = jnp.where(jnp.isfinite(total) & (room >= 0), per_order, -1.0)
    return jnp.max(per_order)


def steps_remaining_rdp(
    state: RdpState, target_epsilon, target_delta, per_step_rdp, *, method: str = "improved"
):
    """How many more steps of a mechanism with RDP ``per_step_rdp`` keep ε within budget.

    RDP composes linearly, so after ``T`` more steps the curve is ``R + T r``; order α meets
    the target iff ``T ≤ (budget_α − R_α)/r_α``. The closed form is then checked with
    :func:`get_epsilon` itself and corrected by ±1 (twice), so the answer is exact for the
    accountant: ``get_epsilon(compose T) ≤ ε`` and ``get_epsilon(compose T+1) > ε``.
    Pure and jittable.

    Args:
      state: the current :class:`RdpState`.
      target_epsilon: ε budget ``≥ 0`` (scalar).
      target_delta: δ in ``(0, 1]`` (scalar).
      per_step_rdp: the next steps' RDP at ``state.orders``, shape ``(K,)``.
      method: ``"improved"`` (default) or ``"classic"``, as in :func:`get_epsilon`.

    Returns:
      ``T`` as an integer-valued float in the state's dtype: ``0`` when not even one more
      step fits (including a state already over budget); ``+inf`` when any number fits
      (a zero RDP curve at some order). Under ``jit``, NaN for invalid inputs. Exact up to
      ``2**24`` steps in float32 and ``2**52`` in float64 (float spacing).

    Raises:
      ValueError: with concrete inputs, naming an invalid argument.
    """
    conversions.check_method(method)
    _validate.check_range("target_epsilon", target_epsilon, low=0.0)
    _validate.check_range("target_delta", target_delta, low=0.0, high=1.0, low_inclusive=False)
    _validate.check_range("per_step_rdp", per_step_rdp, low=0.0)
    dtype = _state_dtype(state)
    with _x64_scope(state, target_epsilon, target_delta, per_step_rdp):
        eps_t = jnp.asarray(target_epsilon, dtype)
        dlt = jnp.asarray(target_delta, dtype)
        r = _rdp_values(per_step_rdp, dtype)
        total = _total(state)
        invalid = (
            jnp.isnan(eps_t) | jnp.isnan(dlt) | (eps_t < 0) | ~(dlt > 0) | (dlt > 1)
            | jnp.any(jnp.isnan(r) | (r < 0)) | jnp.any(jnp.isnan(total))
        )
        safe_r = jnp.where(jnp.isnan(r) | (r < 0), 1.0, r)
        safe_d = jnp.where(invalid, 0.5, dlt)
        orders = jnp.asarray(state.orders, dtype)
        guess = _steps_guess(total, safe_r, orders, safe_d, eps_t, method)

        def fits(t):
            t = jnp.maximum(t, 0.0)
            curve = total + jnp.where(t == 0, 0.0, t * safe_r)
            result, _ = conversions.epsilon_core(curve, orders, safe_d, method)
            return result.epsilon <= eps_t

        t = jnp.where(jnp.isfinite(guess), jnp.maximum(guess, -1.0), guess)
        for _ in range(2):  # static: the closed form is off by at most one ulp-step
            finite = jnp.isfinite(t)
            safe_t = jnp.where(finite, t, 0.0)
            down = finite & (safe_t >= 0) & ~fits(safe_t)
            up = finite & fits(safe_t + 1.0)
            t = jnp.where(down, safe_t - 1.0, jnp.where(up, safe_t + 1.0, t))
        t = jnp.where(jnp.isfinite(t), jnp.maximum(t, 0.0), t)  # −1: over budget already
        return jnp.where(invalid, jnp.nan, t)


def steps_remaining(
    state: RdpState, target_epsilon, target_delta, q, sigma, *, method: str = "improved"
):
    """How many more SGM steps ``(q, σ)`` keep ε within ``(target_epsilon, target_delta)``.

    :func:`steps_remaining_rdp` with the per-step curve of :func:`jaxrdp.rdp`; for
    fixed-size batches pass ``jaxrdp.wor.rdp(...)`` to :func:`steps_remaining_rdp`. A loop
    stops exactly on the budget: take a step while this is ``≥ 1``.

    Args:
      state: the current :class:`RdpState`.
      target_epsilon: ε budget ``≥ 0``.
      target_delta: δ in ``(0, 1]``.
      q: sampling rate of the next steps, in ``[0, 1]``.
      sigma: their noise multiplier ``σ ≥ 0``.
      method: ``"improved"`` (default) or ``"classic"``.

    Returns:
      Integer-valued float (``0``: stop now; ``+inf``: unlimited; NaN: invalid input under
      ``jit``).

    Raises:
      ValueError: with concrete inputs, naming an invalid argument.

    References:
      Mironov (2017), Proposition 1 (linear composition).
    """
    _validate.check_range("q", q, low=0.0, high=1.0)
    _validate.check_range("sigma", sigma, low=0.0)
    dtype = _state_dtype(state)
    with _x64_scope(state, q, sigma):
        per_step = kernels.rdp(jnp.asarray(q, dtype), jnp.asarray(sigma, dtype), state.orders)
    return steps_remaining_rdp(state, target_epsilon, target_delta, per_step, method=method)


def _flatten_wor(event, count: int, dp_event, out: _Flattened) -> None:
    sigma = _gaussian_sigma(event.event, dp_event)
    if sigma is None:
        raise TypeError(
            "SampledWithoutReplacementDpEvent is supported only around a GaussianDpEvent "
            f"(or a composition of them); got inner event {type(event.event).__name__}"
        )
    batch, dataset = event.sample_size, event.source_dataset_size
    _wor.sampling_ratio(batch_size=batch, dataset_size=dataset)  # ValueError naming the size
    out.wor.append((int(batch), int(dataset), sigma, count))


class _Ledger:
    """What a host accountant composed, for the neighbouring relation and for export."""

    def __init__(self):
        self.relation: str | None = None
        self.items: list = []  # ("sgm", q, σ, n) | ("wor", B, N, γ, σ, n) | ("event", e, n, SGM segments or None)

    def check_relation(self, relation: str | None) -> None:
        if relation is not None and self.relation not in (None, relation):
            raise ValueError(
                f"cannot compose {relation} steps into an accountant holding {self.relation} "
                "steps: the two guarantees use different neighbouring relations"
            )

    def check_flattened(self, flat: _Flattened) -> None:
        if any(q < 1 for q, _, n in flat.segments if n):
            self.check_relation(_POISSON)
        if any(n for *_, n in flat.wor):
            self.check_relation(_REPLACE)
        if any(q < 1 for q, _, n in flat.segments if n) and any(n for *_, n in flat.wor):
            raise ValueError(
                "an event mixing Poisson and fixed-size sampling has no single relation"
            )

    def _set(self, relation):
        if relation is not None:
            self.relation = relation

    def record_sgm(self, q, sigma, steps):
        self._set(_POISSON if q < 1 else None)
        self.items.append(("sgm", q, sigma, int(steps)))

    def record_wor(self, batch, dataset, gamma, sigma, steps):
        self._set(_REPLACE)
        self.items.append(("wor", batch, dataset, gamma, sigma, int(steps)))

    def sgm_segments(self):
        """``[(q, σ, steps)]`` of everything composed, or None if anything is not SGM."""
        out = []
        for item in self.items:
            if item[0] == "sgm":
                out.append(item[1:])
            elif item[0] == "event" and item[3] is not None:
                out.extend((q, s, n * item[2]) for q, s, n in item[3])
            else:
                return None
        return out

    def record_event(self, event, count, flat: _Flattened):
        if any(q < 1 for q, _, n in flat.segments if n):
            self._set(_POISSON)
        if any(n for *_, n in flat.wor):
            self._set(_REPLACE)
        pure_sgm = not (flat.zcdp or flat.wor or flat.non_private)
        self.items.append(("event", event, int(count), flat.segments if pure_sgm else None))

    def to_dp_event(self):
        from dp_accounting import dp_event

        events = []
        for item in self.items:
            if item[0] == "sgm":
                _, q, sigma, n = item
                inner = dp_event.GaussianDpEvent(sigma)
                e = inner if q >= 1 else dp_event.PoissonSampledDpEvent(q, inner)
            elif item[0] == "wor":
                _, batch, dataset, _, sigma, n = item
                if batch is None or dataset is None:
                    raise ValueError(
                        "fixed-size steps composed from q alone cannot be exported; "
                        "compose them with batch_size and dataset_size"
                    )
                e = dp_event.SampledWithoutReplacementDpEvent(
                    int(dataset), int(batch), dp_event.GaussianDpEvent(sigma)
                )
            else:
                _, e, n, _ = item
            if n:
                events.append(e if n == 1 else dp_event.SelfComposedDpEvent(e, n))
        return dp_event.ComposedDpEvent(events) if events else dp_event.NoOpDpEvent()
