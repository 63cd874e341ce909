"""Vectorised calibration of DP-SGD hyper-parameters under an ``(ε, δ)`` budget.

Given a privacy budget ``(target_epsilon, target_delta)``, the functions of this module
find, for every element of NumPy-broadcast inputs at once,

* :func:`noise_multiplier`: the smallest noise multiplier ``σ``,
* :func:`max_steps`: the largest number of steps ``T``,
* :func:`sampling_rate`: the largest sampling rate ``q``,
* :func:`batch_size`: the largest batch size ``B`` of ``epochs`` passes over a data set
  of ``N`` records (``q = B/N``, ``T = ⌈epochs·N/B⌉``),

such that the Sampled Gaussian Mechanism composed over the steps satisfies the target,
with ε computed exactly as :func:`jaxrdp.conversions.epsilon` computes it (the RDP curve
of :func:`jaxrdp.rdp` over the orders, converted by
:func:`jaxrdp.conversions.epsilon_from_rdp`). :func:`epsilon_grid` evaluates ε over a
Cartesian product of ``(q, σ, steps, δ)`` for heat maps, in chunks.

How the solvers work. ε is a minimum over orders ``α`` of per-order bounds that are
smooth and monotone in every parameter, so the calibrated value is the extreme over
``α`` of per-order roots: order α meets the target iff its total RDP ``T·r_α ≤ R_α``
with ``R_α = max(ε − c_α(δ), −log(1 − δ²))`` (``c_α`` the conversion's δ-term, the second
argument the KL shortcut of the conversions). Every iteration evaluates the exact RDP
curves of all targets with *one* fast-path kernel call
``rdp(q[:, None], σ[:, None], orders)`` and decides feasibility with the exact ε of the
whole curve. The next point comes from per-order models: ``log(A_α − 1)`` is modelled by
the low (``k = 2, 3, 4``) and the top (``k = α``) terms of its binomial expansion (which
set its shape in every regime: small ``q``, large σ, small σ), corrected by the
difference to the exact curve measured at the last two points (value and secant
slope); each order's root of the corrected model is found by a few Newton steps on the
cheap model alone, and the smallest root (one order meeting its budget is enough) is
proposed. A bracket ``[infeasible, feasible]`` is kept: bisection takes over when a
proposal leaves it or it stops halving, so convergence is guaranteed, and a small
deliberate overshoot makes the last two iterations straddle the root. The loop
(``lax.while_loop``) runs until every element's bracket is narrower than ``rtol``; each
element carries its own convergence mask, and the last stragglers are gathered into
smaller batches so that they do not cost a full-batch kernel call each. Typically 3–5
curve evaluations per target are needed. The returned value is always a point whose
exact ε was found within the target (σ rounded up, ``q``, ``T``, ``B`` rounded down); the
other end of the final bracket violates it.

:func:`max_steps` needs no search: RDP composes linearly, so
``T* = ⌊max_α R_α / r_α⌋``, followed by an exact check of ``T*`` and ``T* + 1`` that
corrects floating-point rounding at the floor.

Guarantees (``status == Status.OK``):

* conservative: the exact ε at the returned value is ``≤ target_epsilon·(1 − 1e-12)``
  (float64; the margin absorbs last-bit differences between compiled programs);
* tight: ``σ·(1 − rtol)``, ``q·(1 + rtol)``, ``T + 1`` and ``B + 1`` give an ε above
  ``target_epsilon·(1 − 1e-12)``.

Per-element status codes (:class:`Status`) report what cannot be met; the value is then
``+inf`` (σ) or ``0`` (``T``, ``q``, ``B``), or NaN for invalid input.
:meth:`Calibration.unwrap` is the eager wrapper that raises :class:`CalibrationError`.

Precision and devices. Python/NumPy inputs are computed in float64 inside a local
``jax.enable_x64`` scope (the kernels' fast path is float64-only); JAX arrays and tracers
are computed in their own dtype. Concrete inputs are flattened, padded to a multiple of
the number of devices and sharded over a 1-D :class:`jax.sharding.Mesh` of all
``jax.devices()`` with :func:`jax.shard_map`, so a multi-GPU host or a multi-host JAX
cluster runs the same call (on several hosts every process must pass the same inputs).
Under a JAX transformation the batch is computed as given (the caller controls
sharding), and :func:`noise_multiplier` is differentiable by the implicit function
theorem.

References:
  Mironov, Talwar, Zhang (2019), "Rényi Differential Privacy of the Sampled Gaussian
  Mechanism", Sec. 3 (the RDP curve); Mironov (2017), "Rényi Differential Privacy",
  Proposition 1 (linear composition); Canonne, Kamath, Steinke (2020), Proposition 12
  (the "improved" conversion); Chandrupatla (1997), "A new hybrid quadratic/bisection
  algorithm for finding the zero of a nonlinear function without using derivatives"
  (the safeguarding idea: interpolation steps kept a tolerance inside the bracket).
"""

from __future__ import annotations

import enum
import functools
import math
import sys
import time
import warnings
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from jaxrdp import _logmath, _precision, _validate, conversions, kernels

__all__ = [
    "Q_MIN",
    "SIGMA_RANGE",
    "Calibration",
    "CalibrationError",
    "Status",
    "batch_size",
    "epsilon_grid",
    "max_steps",
    "noise_multiplier",
    "sampling_rate",
]

#: Search domain of :func:`noise_multiplier`: σ below the lower end is reported as
#: :attr:`Status.AT_LIMIT` (value = the lower end, conservative), a target that needs σ
#: above the upper end as :attr:`Status.INFEASIBLE` (value ``+inf``).
SIGMA_RANGE = (1e-3, 1e8)

#: Smallest sampling rate :func:`sampling_rate` searches; a target that needs a smaller
#: ``q`` is reported as :attr:`Status.INFEASIBLE` (value 0).
Q_MIN = 1e-12

_MAX_ITERATIONS = 64  # root-finding iterations; bisection alone needs < 40
_MAX_RUNS = 32  # batch_size: rounds (a cut and one run of equal step count each)
_MAX_STEP = 3.0  # largest move of one iteration in log x while the root is unbracketed
_MODEL_LOW_TERMS = (2, 3, 4)  # binomial terms k of the cheap model, besides k = α
_MAX_GAP_SLOPE = 1e3  # bound on the secant slope of the model correction
#: Newton steps on the cheap model: for all orders, then for the few with the smallest roots.
_NEWTON_START = dict(full=4, keep=8, more=12)  # the first, uncorrected solve
_NEWTON_STEP = dict(full=1, keep=4, more=4)  # each corrected solve
_RESELECT = 2  # iterations that re-select the orders to solve for among all
_COMPACTION = 8  # stragglers are gathered into batches 4× smaller ...
_MIN_COMPACTED = 64  # ... of at least this many lanes
_ADJUST = 4  # max_steps: ±1 corrections of the closed-form floor
_MARGIN = {8: 1e-12, 4: 1e-5}  # relative target margin per dtype size (bytes)
_MAX_EXACT_INTEGER = 2.0**52
_GRID_ELEMENTS = 2**22  # epsilon_grid: elements of one (cells, steps, orders) block


class Status(enum.IntEnum):
    """Per-element outcome of a calibration.

    Attributes:
      OK: the value meets the target and is tight (see the module docstring).
      INFEASIBLE: the target cannot be met: σ would have to exceed ``SIGMA_RANGE[1]`` or
        ``δ = 0`` (value ``+inf``); not even one step, no batch of one record, or no
        ``q ≥ Q_MIN`` meets it, or ``σ = 0`` (value 0).
      INVALID: an argument is NaN or out of its domain (value NaN).
      AT_LIMIT: σ = ``SIGMA_RANGE[0]`` already meets the target; the value is
        conservative but the smallest σ may be smaller.
      NOT_CONVERGED: the iteration limit was reached (not expected); the value, if
        finite, still meets the target but may not be tight.
    """

    OK = 0
    INFEASIBLE = 1
    INVALID = 2
    AT_LIMIT = 3
    NOT_CONVERGED = 4


_STATUS_TEXT = {
    Status.INFEASIBLE: "the target cannot be met within the search domain",
    Status.INVALID: "an argument is NaN or out of its domain",
    Status.AT_LIMIT: "the value is at the edge of the search domain (conservative, not tight)",
    Status.NOT_CONVERGED: "the solver did not converge",
}


class CalibrationError(ValueError):
    """A calibration target cannot be met (raised by :meth:`Calibration.unwrap`)."""


class Calibration(NamedTuple):
    """Result of a calibration: the value and a per-element :class:`Status` code.

    Attributes:
      value: the calibrated quantity (float array of the broadcast shape; counts are
        integer-valued floats so that ``+inf`` and NaN can be represented).
      status: ``int32`` array of the same shape holding :class:`Status` codes.
    """

    value: jax.Array
    status: jax.Array

    def unwrap(self):
        """The value as a Python float (0-d) or NumPy array, raising on failure.

        Eager only. Elements with :attr:`Status.AT_LIMIT` give a warning (their value is
        conservative); any other non-OK status raises.

        Returns:
          ``float`` for a 0-d result, else ``np.ndarray``.

        Raises:
          CalibrationError: naming the first failing element and its status.
          TypeError: when called on traced values.
        """
        if not _validate.is_concrete(self.value, self.status):
            raise TypeError("Calibration.unwrap() needs concrete values, not tracers")
        value = np.asarray(self.value)
        status = np.asarray(self.status)
        bad = (status != Status.OK) & (status != Status.AT_LIMIT)
        if np.any(bad):
            index = tuple(int(i) for i in np.argwhere(bad)[0])
            code = Status(int(status[index]))
            where = f" at index {index}" if index else ""
            raise CalibrationError(
                f"calibration failed{where} ({int(bad.sum())} of {bad.size} element(s)): "
                f"{code.name}: {_STATUS_TEXT[code]}"
            )
        if np.any(status == Status.AT_LIMIT):
            warnings.warn(
                f"{int(np.sum(status == Status.AT_LIMIT))} value(s) at the edge of the search "
                f"domain: {_STATUS_TEXT[Status.AT_LIMIT]}",
                UserWarning,
                stacklevel=2,
            )
        return value.item() if value.ndim == 0 else value


class _Config(NamedTuple):
    """Static (hashable) configuration of a compiled solver."""

    orders: tuple
    method: str
    rtol: float


# --------------------------------------------------------------------------- host helpers


def _orders_tuple(orders) -> tuple:
    if orders is None:
        orders = kernels.DEFAULT_ORDERS
    if not _validate.is_concrete(orders):
        raise ValueError("orders must be concrete (a NumPy array or list), not a tracer")
    arr = np.asarray(orders, dtype=np.float64)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"orders must be a non-empty 1-D array; got shape {arr.shape}")
    _validate.check_range("orders", arr, low=1.0, low_inclusive=False)
    return tuple(float(a) for a in np.sort(arr))


def _check_method(method: str) -> None:
    if method not in conversions.METHODS:
        raise ValueError(f"method must be one of {conversions.METHODS}; got method={method!r}")


def _check_rtol(rtol) -> float:
    rtol = float(rtol)
    if not 1e-12 <= rtol <= 0.1:
        raise ValueError(f"rtol must be in [1e-12, 0.1]; got rtol={rtol!r}")
    return rtol


def _check_integer(name: str, value, *, low: float) -> None:
    _validate.check_range(name, value, low=low, allow_inf=False)
    if _validate.is_concrete(value):
        arr = np.asarray(value, dtype=np.float64)
        bad = arr != np.floor(arr)
        if np.any(bad):
            got = arr[bad].flat[0] if arr.ndim else arr
            raise ValueError(f"{name} must be an integer ≥ {low:g}; got {name}={float(got)!r}")


def _broadcast_shape(names, values):
    try:
        return np.broadcast_shapes(*(np.shape(v) for v in values))
    except ValueError:
        shapes = ", ".join(f"{n} {np.shape(v)}" for n, v in zip(names, values))
        raise ValueError(f"arguments must broadcast together; got shapes {shapes}") from None


@functools.lru_cache(maxsize=None)
def _mesh(devices: tuple) -> Mesh:
    return Mesh(np.asarray(devices, dtype=object), ("batch",))


@functools.lru_cache(maxsize=64)
def _compiled(core, cfg, devices: tuple, in_specs=None):
    """``core(cfg, *batch_args)`` jitted, and sharded over ``devices`` when there are several."""
    fn = functools.partial(core, cfg)
    if len(devices) == 1:
        return jax.jit(fn)
    spec = P("batch")
    specs = dict(mesh=_mesh(devices), in_specs=spec if in_specs is None else in_specs,
                 out_specs=spec)
    if hasattr(jax, "shard_map"):
        sharded = jax.shard_map(fn, check_vma=False, **specs)
    else:  # jax < 0.6
        from jax.experimental.shard_map import shard_map

        sharded = shard_map(fn, check_rep=False, **specs)
    return jax.jit(sharded)


def _put(array: np.ndarray, devices: tuple, spec):
    """A global ``jax.Array`` laid out as ``spec`` over the mesh (works on several hosts)."""
    if len(devices) == 1:
        return jnp.asarray(array)
    sharding = NamedSharding(_mesh(devices), spec)
    return jax.make_array_from_callback(array.shape, sharding, lambda index: array[index])


def _fetch(tree):
    """Bring a (possibly multi-host) result back as fully addressable arrays."""
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        return multihost_utils.process_allgather(tree, tiled=True)
    return tree


def _padded_size(n: int, n_devices: int) -> int:
    """Batch size actually compiled for ``n`` lanes: few distinct sizes, whole per device.

    Up to 1024 lanes per device the next power of two, above that the next multiple of
    256, so that calls of similar sizes share one compiled program.
    """
    per_device = -(-n // n_devices)
    if per_device <= 1024:
        per_device = 1 << max(per_device - 1, 0).bit_length()
    else:
        per_device = -(-per_device // 256) * 256
    return per_device * n_devices


def _run(core, cfg, names, args):
    """Broadcast, validate shapes, flatten, shard and run ``core``; returns a Calibration."""
    shape = _broadcast_shape(names, args)
    dtype, ctx = _precision.compute_context(*args)
    with ctx:
        if not _validate.is_concrete(*args):
            flat = [jnp.broadcast_to(jnp.asarray(a, dtype), shape).reshape(-1) for a in args]
            value, status = core(cfg, *flat)
            return Calibration(value.reshape(shape), status.reshape(shape))
        np_dtype = np.dtype(dtype)
        flat = [np.broadcast_to(np.asarray(a, dtype=np_dtype), shape).reshape(-1) for a in args]
        n = flat[0].size
        if n == 0:
            return Calibration(
                jnp.zeros(shape, dtype), jnp.zeros(shape, jnp.int32)
            )
        devices = tuple(jax.devices())
        pad = _padded_size(n, len(devices)) - n
        if pad:  # copies of the first lane: valid input, results dropped below
            flat = [np.concatenate([a, np.repeat(a[:1], pad)]) for a in flat]
        fn = _compiled(core, cfg, devices)
        value, status = _fetch(fn(*(_put(a, devices, P("batch")) for a in flat)))
        return Calibration(value[:n].reshape(shape), status[:n].reshape(shape))


# --------------------------------------------------------------------------- traced helpers


def _margin(dtype) -> float:
    return _MARGIN.get(jnp.dtype(dtype).itemsize, 1e-5)


def _orders_array(cfg) -> np.ndarray:
    return np.asarray(cfg.orders, dtype=np.float64)


def _curve(q, sigma, cfg):
    """Per-step RDP curves ``(n, K)`` by one fast-path kernel call."""
    return kernels.rdp(q[:, None], sigma[:, None], _orders_array(cfg))


def _epsilon(total, delta, cfg):
    """Exact ε of total RDP curves ``(n, K)``, as :func:`jaxrdp.conversions.epsilon`."""
    eps, _ = conversions.epsilon_from_rdp(total, _orders_array(cfg), delta, method=cfg.method)
    return eps


def _scaled(steps, curve):
    """``steps · curve`` with ``0 · inf = 0``; ``steps`` of shape ``(n,)``."""
    return jnp.where(steps[:, None] == 0, 0.0, steps[:, None] * curve)


def _budget(target, delta, cfg):
    """``R_α``: order α is within the target iff its total RDP is ``≤ R_α`` (``(n, K)``).

    ``R_α = max(ε − c_α(δ), −log(1 − δ²))``: the conversion's per-order bound or the KL
    shortcut of :mod:`jaxrdp.conversions`. Used to *propose* iterates only; feasibility
    is always decided by the exact ε.
    """
    alpha = _orders_array(cfg)
    finite = np.isfinite(alpha)
    a = np.where(finite, alpha, 2.0)
    log_delta = jnp.log(delta)[:, None]
    if cfg.method == "improved":
        c = np.log1p(-1.0 / a) - (log_delta + np.log(a)) / (a - 1.0)
    else:
        c = -log_delta / (a - 1.0)
    c = jnp.where(finite, c, 0.0)
    kl = -jnp.log1p(-delta * delta)
    return jnp.maximum(target[:, None] - c, kl[:, None])


def _log_excess_model(q, sigma, alpha):
    """Cheap model of ``log(A_α − 1)``: the low and the top terms of the binomial sum.

    ``A_α − 1 = Σ_{k≥2} C(α,k) q^k (1−q)^{α−k} expm1(k(k−1)/2σ²)`` (integer α). The low
    terms ``k = 2, 3, 4`` dominate for small ``q`` or large σ, the top term ``k = α`` for
    small σ; together they set the shape, and the remaining factor varies slowly (the
    solver measures it on the exact curve). ``alpha`` (finite, > 1) broadcasts with
    ``q`` and ``sigma``; fractional orders use the same expression, as a model only.
    """
    w = 1.0 / (sigma * sigma)
    log_q = jnp.log(q)
    log_w_terms = []
    log_binom = jnp.log(alpha)  # log C(α, 1), then log C(α, j) term by term
    for j in _MODEL_LOW_TERMS:
        log_binom = log_binom + jnp.log(jnp.maximum(alpha - (j - 1), 1e-300)) - np.log(j)
        term = log_binom + j * log_q + _logmath.log_expm1(0.5 * j * (j - 1) * w)
        log_w_terms.append(jnp.where(alpha >= j, term, -jnp.inf) if j > 2 else term)
    top = alpha * log_q + _logmath.log_expm1(0.5 * alpha * (alpha - 1.0) * w)
    log_w_terms.append(jnp.where(alpha > _MODEL_LOW_TERMS[-1], top, -jnp.inf))
    return functools.reduce(jnp.logaddexp, log_w_terms)


def _log_excess_target(budget, steps, alpha):
    """``log(A_α − 1)`` at which order α exactly uses its budget over ``steps`` steps."""
    return _logmath.log_expm1((alpha - 1.0) * budget / steps)


class _Solution(NamedTuple):
    x_f: jax.Array  # value at the feasible end of the bracket
    x_i: jax.Array  # value at the infeasible end
    f_known: jax.Array
    i_known: jax.Array
    at_min: jax.Array  # feasible at the low end of the domain
    at_max: jax.Array  # infeasible at the high end of the domain
    converged: jax.Array
    iterations: jax.Array  # loop iterations (batch-wide)
    evaluations: jax.Array  # (n,) curve evaluations each lane needed


class _Lanes(NamedTuple):
    """Per-lane constants of a search (leading axis n)."""

    delta: jax.Array
    target: jax.Array
    budget: jax.Array  # (n, K)
    v_min: jax.Array
    v_max: jax.Array
    x_at_min: jax.Array  # exact parameter values at the ends of the domain
    x_at_max: jax.Array
    extra: tuple  # arrays that ``params`` reads


class _LoopState(NamedTuple):
    it: jax.Array  # scalar
    v: jax.Array
    v_prev: jax.Array
    gap_prev: jax.Array  # (n, K)
    keep: jax.Array  # (n, m) orders the model is solved for
    has_prev: jax.Array
    v_f: jax.Array
    x_f: jax.Array
    f_known: jax.Array
    v_i: jax.Array
    x_i: jax.Array
    i_known: jax.Array
    streak: jax.Array
    last_feasible: jax.Array
    width1: jax.Array
    width2: jax.Array
    done: jax.Array
    evaluations: jax.Array


def _lane(x, a):
    """Per-lane constant ``a`` (n,) broadcast against ``x`` of shape (n,) or (n, m)."""
    return a[:, None] if x.ndim == 2 else a


def _x_at(v, lanes: _Lanes, sign: float):
    """The parameter ``x = exp(sign·v)``, exactly ``x_at_min``/``x_at_max`` at the ends."""
    v_min, v_max, x_min, x_max = (
        _lane(v, a) for a in (lanes.v_min, lanes.v_max, lanes.x_at_min, lanes.x_at_max)
    )
    x = jnp.clip(jnp.exp(sign * v), jnp.minimum(x_min, x_max), jnp.maximum(x_min, x_max))
    return jnp.where(v <= v_min, x_min, jnp.where(v >= v_max, x_max, x))


def _newton(residual, v, iterations: int):
    """Elementwise Newton on ``residual(v)``, decreasing in ``v``, steps capped at 1."""

    def body(_, v):
        f, df = jax.jvp(residual, (v,), (jnp.ones_like(v),))
        usable = jnp.isfinite(f) & jnp.isfinite(df) & (df < 0)
        step = jnp.where(usable, -f / jnp.where(usable, df, -1.0), jnp.where(f > 0, 1.0, -1.0))
        step = jnp.where(jnp.isnan(f), 0.0, step)
        return v + jnp.clip(step, -1.0, 1.0)

    return jax.lax.fori_loop(0, iterations, body, v)


def _model_root(params, sign, cfg, lanes: _Lanes, v_here, gap, gap_slope, *, full: int = 0,
                keep: int = 0, more: int, idx=None):
    """Smallest per-order root of the corrected model, i.e. where the first order fits.

    Per order, ``model(v) + gap + gap_slope·(v − v_here) = target(v)`` is solved by Newton
    steps on the cheap model from ``v_here``: either ``full`` steps for every order and
    then ``more`` steps for the ``keep`` orders whose roots are smallest so far, or
    ``more`` steps for the orders ``idx`` ``(n, m)`` given. Returns the smallest root
    ``(n,)`` and the orders solved for ``(n, m)``.
    """
    alpha = _orders_array(cfg)
    finite = np.isfinite(alpha)
    alpha = np.where(finite, alpha, 2.0)

    def residual(v, alpha, budget, gap, gap_slope, finite):
        q, sigma, steps = params(_x_at(v, lanes, sign), lanes.extra)
        value = (
            _log_excess_model(q, sigma, alpha)
            - _log_excess_target(budget, steps, alpha)
            + gap
            + gap_slope * (v - v_here[:, None])
        )
        return jnp.where(finite, value, jnp.inf)

    n, k = lanes.budget.shape
    if idx is None:
        start = jnp.broadcast_to(v_here[:, None], (n, k))
        roots = _newton(
            lambda v: residual(v, alpha, lanes.budget, gap, gap_slope, finite), start, full
        )
        roots = jnp.where(jnp.isnan(roots), jnp.inf, roots)
        _, idx = jax.lax.top_k(-roots, min(keep, k))
        start = jnp.take_along_axis(roots, idx, axis=1)
    else:
        start = jnp.broadcast_to(v_here[:, None], idx.shape)
    pick = functools.partial(jnp.take_along_axis, indices=idx, axis=1)
    roots = _newton(
        lambda v: residual(
            v,
            jnp.asarray(alpha, gap.dtype)[idx],
            pick(lanes.budget),
            pick(gap),
            pick(gap_slope),
            jnp.asarray(finite)[idx],
        ),
        start,
        more,
    )
    return jnp.min(jnp.where(jnp.isnan(roots), jnp.inf, roots), axis=-1), idx


def _solve(params, extra, cfg, delta, target, budget, v_start, domain, *, tol, active,
           integer=False, start_exactly=False):
    """Batched safeguarded search for the smallest feasible ``v`` in ``[v_min, v_max]``.

    Orientation: feasibility ``ε ≤ target`` is monotone in ``v``, infeasible below the
    root and feasible above; ``params(x, extra) -> (q, σ, steps)`` maps the parameter
    ``x = exp(sign·v)`` to the SGM.

    Every iteration evaluates the exact RDP curve once (one kernel call for the batch),
    decides feasibility with the exact ε, and proposes the next point from per-order
    models: the low- and top-term model of ``log(A_α − 1)`` (:func:`_log_excess_model`) plus a
    correction measured on the exact curve at the last two points (its value and its
    secant slope in ``v``), solved per order by Newton steps on the cheap model; the
    proposal is the smallest per-order root (one order within its budget suffices).
    Safeguards keep a bracket: bisection when a proposal leaves it or it fails to halve
    in two iterations, and a small overshoot that grows while the same side repeats, so
    that the last two iterations straddle the root. Once few lanes remain, they are
    gathered into a smaller batch, so that stragglers do not cost a full-batch kernel
    call per iteration.

    Args:
      params: ``(x, extra) -> (q, sigma, steps)``; ``x`` of shape ``(n,)`` or ``(n, m)``.
      extra: tuple of ``(n,)`` arrays ``params`` reads (gathered with the lanes).
      cfg: the static :class:`_Config`.
      delta, target: ``(n,)`` δ and ε target of each lane.
      budget: ``(n, K)`` per-order budgets ``R_α``.
      v_start: ``(n,)`` where the model's first solve starts.
      domain: ``(v_min, v_max, x_at_min, x_at_max, sign)``: ``(n,)`` arrays and a float.
      tol: bracket width in ``v`` at which to stop.
      active: ``(n,)`` lanes to solve; the others are left alone.
      integer: also stop once ``⌊x_f⌋ + 1 ≥ x_i`` (for ``x = exp(−v)``): no integer lies
        between the largest integer below the feasible end and the infeasible end.
      start_exactly: evaluate ``v_start`` first instead of the model's root.

    Returns:
      A :class:`_Solution`.
    """
    v_min, v_max, x_at_min, x_at_max, sign = domain
    lanes = _Lanes(delta, target, budget, v_min, v_max, x_at_min, x_at_max, tuple(extra))
    n, k = budget.shape
    dtype = v_start.dtype
    alpha = _orders_array(cfg)
    am1 = np.where(np.isfinite(alpha), alpha - 1.0, 1.0)
    alpha_model = np.where(np.isfinite(alpha), alpha, 2.0)

    def finished(s: _LoopState, lanes: _Lanes):
        both = s.f_known & s.i_known
        conv = both & (s.v_f - s.v_i <= tol)
        if integer:
            conv = conv | (both & (jnp.floor(s.x_f) + 1.0 >= s.x_i))
        at_min = s.f_known & (s.v_f <= lanes.v_min)
        at_max = s.i_known & (s.v_i >= lanes.v_max)
        return conv, at_min, at_max

    def step(s: _LoopState, lanes: _Lanes) -> _LoopState:
        x = _x_at(s.v, lanes, sign)
        q, sigma, steps = params(x, lanes.extra)
        per_step = _curve(q, sigma, cfg)
        feasible = _epsilon(_scaled(steps, per_step), lanes.delta, cfg) <= lanes.target
        upd = ~s.done

        take_f = upd & feasible & (~s.f_known | (s.v < s.v_f))
        take_i = upd & ~feasible & (~s.i_known | (s.v > s.v_i))
        s = s._replace(
            v_f=jnp.where(take_f, s.v, s.v_f),
            x_f=jnp.where(take_f, x, s.x_f),
            f_known=s.f_known | (upd & feasible),
            v_i=jnp.where(take_i, s.v, s.v_i),
            x_i=jnp.where(take_i, x, s.x_i),
            i_known=s.i_known | (upd & ~feasible),
        )
        conv, at_min, at_max = finished(s, lanes)
        done = s.done | conv | at_min | at_max

        # Correction of the model measured on the exact curve: its value here and its
        # secant slope through the previous point.
        exact = _logmath.log_expm1(am1 * per_step)
        gap = exact - _log_excess_model(q[:, None], sigma[:, None], alpha_model)
        gap = jnp.where(jnp.isfinite(gap), gap, 0.0)
        dv = (s.v - s.v_prev)[:, None]
        usable = s.has_prev[:, None] & (jnp.abs(dv) > 1e-12)
        gap_slope = jnp.where(usable, (gap - s.gap_prev) / jnp.where(usable, dv, 1.0), 0.0)
        gap_slope = jnp.clip(gap_slope, -_MAX_GAP_SLOPE, _MAX_GAP_SLOPE)
        # The orders worth solving for are re-selected among all in the first
        # iterations; later, near the root, the last selection is kept, except for the
        # few stragglers left in a compacted batch, for which re-selecting is cheap.
        def reselect():
            return _model_root(params, sign, cfg, lanes, s.v, gap, gap_slope, **_NEWTON_STEP)

        def reuse():
            return _model_root(
                params, sign, cfg, lanes, s.v, gap, gap_slope, more=_NEWTON_STEP["more"],
                idx=s.keep,
            )

        if s.v.shape[0] < n:
            proposal, keep = reselect()
        else:
            proposal, keep = jax.lax.cond(s.it < _RESELECT, reselect, reuse)
        proposal = jnp.clip(proposal, s.v - _MAX_STEP, s.v + _MAX_STEP)

        # Overshoot toward the side not seen last, growing while the same side repeats,
        # so that the final two iterations straddle the root.
        streak = jnp.where(feasible == s.last_feasible, s.streak + 1, 1)
        bias = 0.25 * tol * 8.0 ** jnp.minimum(streak - 1, 12).astype(dtype)
        proposal = proposal + jnp.where(feasible, -bias, bias)

        # Safeguards. Both ends known: bisect when the proposal leaves the bracket or the
        # bracket has not halved over two iterations. One end known: a proposal beyond it
        # (the model contradicts the data) is replaced by a fixed step away from it.
        both = s.f_known & s.i_known
        width = jnp.where(both, s.v_f - s.v_i, jnp.inf)
        lo = jnp.where(s.i_known, s.v_i + 0.25 * tol, lanes.v_min)
        hi = jnp.where(s.f_known, s.v_f - 0.25 * tol, lanes.v_max)
        outside = ~((proposal >= lo) & (proposal <= hi))
        bisect = both & (outside | (width > 0.5 * s.width2))
        far = ~((proposal >= lo - 16.0 * tol) & (proposal <= hi + 16.0 * tol))
        proposal = jnp.where(s.i_known & ~s.f_known & far, s.v_i + 0.5, proposal)
        proposal = jnp.where(s.f_known & ~s.i_known & far, s.v_f - 0.5, proposal)
        proposal = jnp.where(bisect, 0.5 * (s.v_f + s.v_i), proposal)
        lo = jnp.maximum(lo, lanes.v_min)
        proposal = jnp.clip(proposal, lo, jnp.maximum(jnp.minimum(hi, lanes.v_max), lo))

        return s._replace(
            it=s.it + 1,
            v=jnp.where(done, s.v, proposal),
            v_prev=jnp.where(upd, s.v, s.v_prev),
            gap_prev=jnp.where(upd[:, None], gap, s.gap_prev),
            keep=jnp.where(upd[:, None], keep, s.keep),
            has_prev=s.has_prev | upd,
            streak=jnp.where(upd, streak, s.streak),
            last_feasible=jnp.where(upd, feasible, s.last_feasible),
            width1=jnp.where(upd, width, s.width1),
            width2=jnp.where(upd, s.width1, s.width2),
            done=done,
            evaluations=s.evaluations + upd.astype(jnp.int32),
        )

    zeros = jnp.zeros((n, k), dtype)
    if start_exactly:
        v0 = v_start
    else:
        v0, _ = _model_root(params, sign, cfg, lanes, v_start, zeros, zeros, **_NEWTON_START)
        v0 = jnp.where(jnp.isfinite(v0), v0, v_start)
    v0 = jnp.clip(v0, v_min, v_max)

    # The kernel works in chunks of neighbouring lanes and uses its fast shared-node
    # quadrature for fractional orders only where every σ of a chunk is ≥ 1/1.3; sorting
    # the lanes by σ confines small σ to as few chunks as possible.
    perm = jnp.argsort(params(_x_at(v0, lanes, sign), lanes.extra)[1])
    lanes = jax.tree_util.tree_map(lambda a: a[perm], lanes)
    v0, active = v0[perm], active[perm]
    v_min, v_max, x_at_min, x_at_max = (
        lanes.v_min, lanes.v_max, lanes.x_at_min, lanes.x_at_max
    )
    false = jnp.zeros((n,), bool)
    inf = jnp.full((n,), jnp.inf, dtype)
    s = _LoopState(
        it=jnp.zeros((), jnp.int32),
        v=v0,
        v_prev=v0,
        gap_prev=zeros,
        keep=jnp.zeros((n, min(_NEWTON_STEP["keep"], k)), jnp.int32),
        has_prev=false,
        v_f=v_max,
        x_f=x_at_max,
        f_known=false,
        v_i=v_min,
        x_i=x_at_min,
        i_known=false,
        streak=jnp.zeros((n,), jnp.int32),
        last_feasible=false,
        width1=inf,
        width2=inf,
        done=~active,
        evaluations=jnp.zeros((n,), jnp.int32),
    )
    s = _iterate(step, s, lanes, _compaction_sizes(n))
    conv, at_min, at_max = finished(s, lanes)
    inverse = jnp.argsort(perm)
    return _Solution(
        *(a[inverse] for a in (s.x_f, s.x_i, s.f_known, s.i_known, at_min, at_max, conv)),
        s.it,
        s.evaluations[inverse],
    )


def _compaction_sizes(n: int) -> tuple:
    """Batch sizes the stragglers of an ``n``-lane search are gathered into."""
    sizes = []
    m = n
    while m // _COMPACTION >= _MIN_COMPACTED:
        m //= _COMPACTION
        sizes.append(m)
    return tuple(sizes)


def _iterate(step, s: _LoopState, lanes: _Lanes, sizes: tuple) -> _LoopState:
    """Run ``step`` until every lane is done, on ever smaller gathered batches.

    While more lanes than ``sizes[0]`` are pending, iterate on the whole batch; then
    gather the pending lanes (padded with finished ones) into a batch of ``sizes[0]``
    lanes, continue there (recursively with ``sizes[1:]``), and scatter the result back.
    """
    n = s.done.shape[0]

    def cond(s):
        return (s.it < _MAX_ITERATIONS) & jnp.any(~s.done)

    if not sizes:
        return jax.lax.while_loop(cond, lambda s: step(s, lanes), s)
    size, rest = sizes[0], sizes[1:]

    def compacted(s):
        idx = jnp.argsort(s.done.astype(jnp.int8), stable=True)[:size]
        take = lambda a: a[idx] if jnp.ndim(a) and a.shape[0] == n else a  # noqa: E731
        sub = _iterate(
            step,
            jax.tree_util.tree_map(take, s),
            jax.tree_util.tree_map(lambda a: a[idx], lanes),
            rest,
        )
        put = lambda a, b: a.at[idx].set(b) if jnp.ndim(a) and a.shape[0] == n else b  # noqa: E731
        return jax.tree_util.tree_map(put, s, sub)

    def body(s):
        few = jnp.sum(~s.done) <= size
        return jax.lax.cond(few, compacted, lambda s: step(s, lanes), s)

    return jax.lax.while_loop(cond, body, s)


def _status(ok, infeasible, invalid, at_limit=None):
    status = jnp.full(ok.shape, int(Status.NOT_CONVERGED), jnp.int32)
    status = jnp.where(ok, int(Status.OK), status)
    if at_limit is not None:
        status = jnp.where(at_limit, int(Status.AT_LIMIT), status)
    status = jnp.where(infeasible, int(Status.INFEASIBLE), status)
    return jnp.where(invalid, int(Status.INVALID), status)


def _isnan(*xs):
    return functools.reduce(jnp.logical_or, [jnp.isnan(x) for x in xs])


# --------------------------------------------------------------------------- noise multiplier


def _noise_core(cfg, target, delta, q, steps):
    """Solver for :func:`noise_multiplier` on flat arrays; also returns the evaluations."""
    dtype = target.dtype
    invalid = (
        _isnan(target, delta, q, steps)
        | (target < 0) | (delta < 0) | (delta > 1) | (q < 0) | (q > 1) | (steps < 0)
    )
    trivial = ~invalid & ((q == 0) | (steps == 0) | (delta >= 1) | jnp.isposinf(target))
    impossible = ~invalid & ~trivial & (delta == 0)
    solve = ~(invalid | trivial | impossible)
    t = jnp.where(solve, target, 1.0) * (1.0 - _margin(dtype))
    d = jnp.where(solve, delta, 1e-5)
    qq = jnp.where(solve, q, 0.01)
    tt = jnp.where(solve, steps, 100.0)
    budget = _budget(t, d, cfg)

    # Where the model's solve starts: σ from the q = 1 Gaussian, σ² = T·α / (2 R_α),
    # which is above every order's root.
    alpha = _orders_array(cfg)
    a = np.where(np.isfinite(alpha), alpha, np.inf)
    start = jnp.min(jnp.sqrt(a * tt[:, None] / (2.0 * budget)), axis=-1)
    lo_sigma, hi_sigma = (jnp.asarray(v, dtype) for v in SIGMA_RANGE)
    start = jnp.log(jnp.clip(jnp.where(jnp.isnan(start), 1.0, start), lo_sigma, hi_sigma))

    ones = jnp.ones_like(t)
    domain = (jnp.log(lo_sigma) * ones, jnp.log(hi_sigma) * ones, lo_sigma * ones,
              hi_sigma * ones, 1.0)
    sol = _solve(
        lambda x, e: (_lane(x, e[0]), x, _lane(x, e[1])),
        (qq, tt), cfg, d, t, budget, start, domain,
        tol=0.99 * math.log1p(cfg.rtol),
        active=solve,
    )

    value = jnp.where(sol.at_max | ~sol.f_known, jnp.inf, sol.x_f)
    value = jnp.where(trivial, 0.0, jnp.where(impossible, jnp.inf, value))
    value = jnp.where(invalid, jnp.nan, value)
    ok = trivial | (solve & sol.converged & ~sol.at_min)
    status = _status(ok, impossible | (solve & sol.at_max), invalid, solve & sol.at_min)
    return value.astype(dtype), status, sol.evaluations


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def _noise_solve(cfg, target, delta, q, steps):
    value, status, _ = _noise_core(cfg, target, delta, q, steps)
    return value, status


@_noise_solve.defjvp
def _noise_solve_jvp(cfg, primals, tangents):
    """Implicit function theorem: ``ε(σ*(θ); θ) = target`` ⇒
    ``dσ* = (d target − ∂ε/∂θ·dθ) / (∂ε/∂σ)`` at the order active at σ*."""
    target, delta, q, steps = primals
    d_target, d_delta, d_q, d_steps = tangents
    value, status = _noise_solve(cfg, *primals)
    ok = (status == Status.OK) & (value > 0) & jnp.isfinite(value)
    sigma = jnp.where(ok, value, 1.0)
    q_s = jnp.where(ok, q, 0.5)
    steps_s = jnp.where(ok, steps, 1.0)
    delta_s = jnp.where(ok, delta, 0.5)

    def eps(sigma_, q_, steps_, delta_):
        return _epsilon(_scaled(steps_, _curve(q_, sigma_, cfg)), delta_, cfg)

    _, d_other = jax.jvp(
        lambda q_, t_, d_: eps(sigma, q_, t_, d_), (q_s, steps_s, delta_s), (d_q, d_steps, d_delta)
    )
    _, d_sigma = jax.jvp(
        lambda s_: eps(s_, q_s, steps_s, delta_s), (sigma,), (jnp.ones_like(sigma),)
    )
    usable = ok & (d_sigma < 0)
    d_value = jnp.where(usable, (d_target - d_other) / jnp.where(usable, d_sigma, -1.0), 0.0)
    return (value, status), (d_value, np.zeros(status.shape, jax.dtypes.float0))


def noise_multiplier(
    target_epsilon,
    target_delta,
    q,
    steps,
    *,
    orders=None,
    rtol: float = 1e-6,
    method: str = "improved",
) -> Calibration:
    """The smallest noise multiplier σ meeting an ``(ε, δ)`` target, for many targets at once.

    Solves ``min {σ : ε(q, σ, steps, δ) ≤ target_epsilon}`` where ε is that of
    :func:`jaxrdp.conversions.epsilon` (same orders and conversion), by the batched
    safeguarded model-based search described in the module docstring: one fast-path
    RDP curve evaluation of the whole batch per iteration, typically 3–5 per target.

    Differentiable: under ``jax.grad``/``jax.jvp`` the derivative of σ* with respect to
    ``target_epsilon``, ``target_delta``, ``q`` and ``steps`` is given by the implicit
    function theorem at the order active at σ* (0 where the status is not OK or σ* is
    0 or infinite). Differentiate in float64 (inside ``jax.enable_x64(True)``): float32
    tracers use the kernels' slow elementwise path.

    Args:
      target_epsilon: ε budget ``≥ 0`` (``+inf`` gives σ = 0).
      target_delta: δ in ``[0, 1]``.
      q: sampling rate(s) in ``[0, 1]``.
      steps: number(s) of steps, non-negative integers. The four broadcast together to
        a shape ``S``.
      orders: 1-D concrete Rényi orders ``> 1``; default :data:`jaxrdp.DEFAULT_ORDERS`.
        Use few orders for speed (integer orders are ~7× cheaper than fractional ones).
      rtol: relative tightness: ``σ*(1 − rtol)`` violates the target.
      method: RDP → (ε, δ) conversion, ``"improved"`` (default) or ``"classic"``.

    Returns:
      :class:`Calibration` ``(value, status)`` of shape ``S``. ``value`` is σ*; it is 0
      where nothing needs noise (``q = 0``, ``steps = 0``, ``δ ≥ 1`` or an infinite
      budget); ``+inf`` with :attr:`Status.INFEASIBLE` for ``δ = 0`` or when σ* would
      exceed ``SIGMA_RANGE[1]``; ``SIGMA_RANGE[0]`` with :attr:`Status.AT_LIMIT` when that
      already meets the target; NaN with :attr:`Status.INVALID` for out-of-domain traced
      input.

    Raises:
      ValueError: with concrete inputs, naming the first invalid argument and value, or
        the shapes that do not broadcast.

    References:
      Mironov, Talwar, Zhang (2019), Sec. 3; Mironov (2017), Proposition 1; Canonne,
      Kamath, Steinke (2020), Proposition 12.
    """
    _check_method(method)
    _validate.check_range("target_epsilon", target_epsilon, low=0.0)
    _validate.check_range("target_delta", target_delta, low=0.0, high=1.0)
    _validate.check_range("q", q, low=0.0, high=1.0)
    _check_integer("steps", steps, low=0.0)
    cfg = _Config(_orders_tuple(orders), method, _check_rtol(rtol))
    return _run(
        _noise_solve,
        cfg,
        ("target_epsilon", "target_delta", "q", "steps"),
        (target_epsilon, target_delta, q, steps),
    )


# --------------------------------------------------------------------------- max steps


def _steps_core(cfg, target, delta, q, sigma):
    dtype = target.dtype
    invalid = (
        _isnan(target, delta, q, sigma)
        | (target < 0) | (delta < 0) | (delta > 1) | (q < 0) | (q > 1) | (sigma < 0)
    )
    unbounded = ~invalid & ((q == 0) | jnp.isposinf(sigma) | (delta >= 1) | jnp.isposinf(target))
    impossible = ~invalid & ~unbounded & ((delta == 0) | (sigma == 0))
    solve = ~(invalid | unbounded | impossible)
    t = jnp.where(solve, target, 1.0) * (1.0 - _margin(dtype))
    d = jnp.where(solve, delta, 1e-5)
    curve = _curve(jnp.where(solve, q, 0.01), jnp.where(solve, sigma, 1.0), cfg)

    # T·r_α ≤ R_α for some order  ⇔  T ≤ max_α R_α / r_α (up to rounding).
    budget = _budget(t, d, cfg)
    ratio = jnp.where(curve > 0, budget / jnp.where(curve > 0, curve, 1.0), jnp.inf)
    steps = jnp.floor(jnp.max(ratio, axis=-1))
    steps = jnp.where(jnp.isnan(steps), 0.0, jnp.maximum(steps, 0.0))

    def feasible(n_steps):
        return _epsilon(_scaled(n_steps, curve), d, cfg) <= t

    exact = jnp.isfinite(steps) & (steps < _MAX_EXACT_INTEGER)
    fix = solve & exact

    def down(_, s):
        return jnp.where(fix & (s > 0) & ~feasible(s), s - 1.0, s)

    def up(_, s):
        return jnp.where(fix & feasible(s + 1.0), s + 1.0, s)

    steps = jax.lax.fori_loop(0, _ADJUST, down, steps)
    steps = jax.lax.fori_loop(0, _ADJUST, up, steps)
    certified = ~exact | (feasible(steps) & ~feasible(steps + 1.0))

    value = jnp.where(unbounded, jnp.inf, jnp.where(impossible, 0.0, steps))
    value = jnp.where(invalid, jnp.nan, value)
    infeasible = impossible | (solve & (steps == 0) & certified)
    ok = unbounded | (solve & certified)
    return value.astype(dtype), _status(ok, infeasible, invalid)


def max_steps(
    target_epsilon,
    target_delta,
    q,
    noise_multiplier,
    *,
    orders=None,
    method: str = "improved",
) -> Calibration:
    """The largest number of steps ``T`` meeting an ``(ε, δ)`` target, in closed form.

    RDP composes linearly (``T·r_α``), so order α meets the target iff
    ``T ≤ R_α / r_α`` with ``R_α = max(ε − c_α(δ), −log(1 − δ²))``: ``T* = ⌊max_α R_α /
    r_α⌋``. One kernel call gives every ``r_α``; the floor is then corrected by ±1 with
    the exact ε (which rounds outwards) until ``T*`` meets the target and ``T* + 1`` does
    not. No search.

    Args:
      target_epsilon: ε budget ``≥ 0``.
      target_delta: δ in ``[0, 1]``.
      q: sampling rate(s) in ``[0, 1]``.
      noise_multiplier: σ ``≥ 0``. The four broadcast together to a shape ``S``.
      orders: 1-D concrete Rényi orders ``> 1``; default :data:`jaxrdp.DEFAULT_ORDERS`.
      method: ``"improved"`` (default) or ``"classic"``.

    Returns:
      :class:`Calibration` of shape ``S`` whose value is ``T*`` as an integer-valued float:
      ``+inf`` when any number of steps is within the target (``q = 0``, ``σ = ∞``,
      ``δ ≥ 1``, infinite budget, or an RDP curve that is 0 at some order); 0 with
      :attr:`Status.INFEASIBLE` when not even one step is (including ``δ = 0`` and
      ``σ = 0``). Above ``2**52`` the floor is not corrected (float spacing exceeds 1).

    Raises:
      ValueError: with concrete inputs, naming the first invalid argument and value.

    References:
      Mironov (2017), Proposition 1; Canonne, Kamath, Steinke (2020), Proposition 12.
    """
    _check_method(method)
    _validate.check_range("target_epsilon", target_epsilon, low=0.0)
    _validate.check_range("target_delta", target_delta, low=0.0, high=1.0)
    _validate.check_range("q", q, low=0.0, high=1.0)
    _validate.check_range("noise_multiplier", noise_multiplier, low=0.0)
    cfg = _Config(_orders_tuple(orders), method, 0.0)
    return _run(
        _steps_core,
        cfg,
        ("target_epsilon", "target_delta", "q", "noise_multiplier"),
        (target_epsilon, target_delta, q, noise_multiplier),
    )


# --------------------------------------------------------------------------- sampling rate


def _rate_core(cfg, target, delta, sigma, steps):
    dtype = target.dtype
    invalid = (
        _isnan(target, delta, sigma, steps)
        | (target < 0) | (delta < 0) | (delta > 1) | (sigma < 0) | (steps < 0)
    )
    everything = ~invalid & (
        (steps == 0) | jnp.isposinf(sigma) | (delta >= 1) | jnp.isposinf(target)
    )
    impossible = ~invalid & ~everything & ((delta == 0) | (sigma == 0))
    solve = ~(invalid | everything | impossible)
    t = jnp.where(solve, target, 1.0) * (1.0 - _margin(dtype))
    d = jnp.where(solve, delta, 1e-5)
    ss = jnp.where(solve, sigma, 1.0)
    tt = jnp.where(solve, steps, 100.0)
    budget = _budget(t, d, cfg)

    ones = jnp.ones_like(t)
    q_min = jnp.asarray(Q_MIN, dtype)
    domain = (0.0 * ones, -jnp.log(q_min) * ones, ones, q_min * ones, -1.0)
    sol = _solve(
        lambda x, e: (x, _lane(x, e[0]), _lane(x, e[1])),
        (ss, tt), cfg, d, t, budget, 0.0 * ones, domain,
        tol=0.99 * math.log1p(cfg.rtol),
        active=solve,
    )

    value = jnp.where(sol.at_max | ~sol.f_known, 0.0, sol.x_f)
    value = jnp.where(everything, 1.0, jnp.where(impossible, 0.0, value))
    value = jnp.where(invalid, jnp.nan, value)
    ok = everything | (solve & (sol.converged | sol.at_min))
    infeasible = impossible | (solve & sol.at_max)
    return value.astype(dtype), _status(ok, infeasible, invalid)


def sampling_rate(
    target_epsilon,
    target_delta,
    noise_multiplier,
    steps,
    *,
    orders=None,
    rtol: float = 1e-6,
    method: str = "improved",
) -> Calibration:
    """The largest sampling rate ``q`` meeting an ``(ε, δ)`` target.

    ε is increasing in ``q`` at every order (``A_α(q)`` is convex with zero slope at
    ``q = 0``), so the answer is a monotone root, found by the same batched safeguarded
    search as :func:`noise_multiplier`, in ``log q`` over ``[Q_MIN, 1]``.

    Args:
      target_epsilon: ε budget ``≥ 0``.
      target_delta: δ in ``[0, 1]``.
      noise_multiplier: σ ``≥ 0``.
      steps: non-negative integer step counts. The four broadcast to a shape ``S``.
      orders: 1-D concrete Rényi orders ``> 1``; default :data:`jaxrdp.DEFAULT_ORDERS`.
      rtol: relative tightness: ``q*(1 + rtol)`` violates the target (unless ``q* = 1``).
      method: ``"improved"`` (default) or ``"classic"``.

    Returns:
      :class:`Calibration` of shape ``S``: ``q*`` (1 when every rate is within the target,
      including ``steps = 0``, ``σ = ∞``, ``δ ≥ 1``); 0 with :attr:`Status.INFEASIBLE` when
      even ``Q_MIN`` violates it (including ``δ = 0`` and ``σ = 0``).

    Raises:
      ValueError: with concrete inputs, naming the first invalid argument and value.

    References:
      Mironov, Talwar, Zhang (2019), Sec. 3; Canonne, Kamath, Steinke (2020), Prop. 12.
    """
    _check_method(method)
    _validate.check_range("target_epsilon", target_epsilon, low=0.0)
    _validate.check_range("target_delta", target_delta, low=0.0, high=1.0)
    _validate.check_range("noise_multiplier", noise_multiplier, low=0.0)
    _check_integer("steps", steps, low=0.0)
    cfg = _Config(_orders_tuple(orders), method, _check_rtol(rtol))
    return _run(
        _rate_core,
        cfg,
        ("target_epsilon", "target_delta", "noise_multiplier", "steps"),
        (target_epsilon, target_delta, noise_multiplier, steps),
    )


# --------------------------------------------------------------------------- batch size


def _epoch_steps(epochs, n_data, batch):
    """Steps of ``epochs`` passes with batch ``batch``: ``⌈epochs·N / B⌉`` (as documented)."""
    return jnp.ceil(epochs * n_data / batch)


def _batch_core(cfg, target, delta, sigma, epochs, n_data):
    dtype = target.dtype
    invalid = (
        _isnan(target, delta, sigma, epochs, n_data)
        | (target < 0) | (delta < 0) | (delta > 1) | (sigma < 0)
        | ~(epochs > 0) | jnp.isinf(epochs) | (n_data < 1) | jnp.isinf(n_data)
        | (n_data != jnp.floor(n_data))
    )
    everything = ~invalid & ((delta >= 1) | jnp.isposinf(sigma) | jnp.isposinf(target))
    impossible = ~invalid & ~everything & ((delta == 0) | (sigma == 0))
    solve = ~(invalid | everything | impossible)
    t = jnp.where(solve, target, 1.0) * (1.0 - _margin(dtype))
    d = jnp.where(solve, delta, 1e-5)
    ss = jnp.where(solve, sigma, 1.0)
    ee = jnp.where(solve, epochs, 1.0)
    nn = jnp.where(solve, n_data, 1000.0)
    en = ee * nn
    budget = _budget(t, d, cfg)

    tol = 0.99 * math.log1p(cfg.rtol)
    ones = jnp.ones_like(t)

    class Rounds(NamedTuple):
        rounds: jax.Array
        top: jax.Array  # every batch size above it is known to violate the target
        best: jax.Array
        found: jax.Array
        done: jax.Array
        exhausted: jax.Array

    def round_body(r: Rounds) -> Rounds:
        active = ~r.done
        # 1. Cut. With steps E·N/B not rounded up, ε_relaxed(B) ≤ ε(B). If ε_relaxed(top)
        # exceeds the target, then (ε_relaxed rising, then falling in B: the assumption)
        # so does every B between the relaxed root on the rising side and ``top``: the
        # search moves down to that root. The first point evaluated is ``top`` itself.
        relaxed = _solve(
            lambda b, e: (b / _lane(b, e[0]), _lane(b, e[1]), _lane(b, e[2]) / b),
            (nn, ss, en), cfg, d, t, budget, -jnp.log(r.top),
            (-jnp.log(r.top), 0.0 * ones, r.top, ones, -1.0),
            tol=tol,
            active=active,
            integer=True,
            start_exactly=True,
        )
        nothing = active & relaxed.at_max  # even B = 1 violates the relaxed bound
        cut = active & ~relaxed.at_min & relaxed.i_known & ~nothing
        top = jnp.where(cut, jnp.clip(jnp.ceil(relaxed.x_i) - 1.0, 1.0, r.top), r.top)

        # 2. The run of batch sizes below ``top`` sharing its step count T: there ε grows
        # with B (monotone in q at fixed T), so its largest feasible B is a monotone root.
        steps = _epoch_steps(ee, nn, top)
        bottom = jnp.minimum(jnp.ceil(en / steps), top)
        bottom = jnp.where(_epoch_steps(ee, nn, bottom) > steps, bottom + 1.0, bottom)
        bottom = jnp.clip(bottom, 1.0, top)
        in_run = active & ~nothing
        sol = _solve(
            lambda b, e: (b / _lane(b, e[0]), _lane(b, e[1]), _lane(b, e[2])),
            (nn, ss, steps), cfg, d, t, budget, -jnp.log(top),
            (-jnp.log(top), -jnp.log(bottom), top, bottom, -1.0),
            tol=tol,
            active=in_run,
            integer=True,
            start_exactly=True,  # the top of the run is often the answer
        )
        hit = in_run & sol.f_known
        batch = jnp.where(sol.at_min, top, jnp.floor(sol.x_f))
        exhausted = nothing | (in_run & ~hit & sol.at_max & (bottom <= 1.0))
        return Rounds(
            rounds=r.rounds + 1,
            top=jnp.where(in_run & ~hit, bottom - 1.0, top),
            best=jnp.where(hit, batch, r.best),
            found=r.found | hit,
            done=r.done | hit | exhausted,
            exhausted=r.exhausted | exhausted,
        )

    def round_cond(r: Rounds):
        return (r.rounds < _MAX_RUNS) & jnp.any(~r.done)

    false = jnp.zeros(t.shape, bool)
    runs = jax.lax.while_loop(
        round_cond,
        round_body,
        Rounds(jnp.zeros((), jnp.int32), nn, 0.0 * ones, false, ~solve, false),
    )
    best = jnp.where(runs.found, runs.best, 0.0)

    # Final exact check of B* and B* + 1 in one kernel call.
    pair = jnp.concatenate([jnp.maximum(best, 1.0), best + 1.0])
    pair_steps = _epoch_steps(jnp.tile(ee, 2), jnp.tile(nn, 2), pair)
    pair_curve = _curve(pair / jnp.tile(nn, 2), jnp.tile(ss, 2), cfg)
    pair_ok = _epsilon(_scaled(pair_steps, pair_curve), jnp.tile(d, 2), cfg) <= jnp.tile(t, 2)
    n = t.shape[0]
    fits, next_fits = pair_ok[:n], pair_ok[n:] & (best + 1.0 <= nn)
    certified = runs.found & fits & ~next_fits

    found, exhausted = runs.found, runs.exhausted
    value = jnp.where(everything, n_data, jnp.where(impossible, 0.0, best))
    value = jnp.where(invalid, jnp.nan, value)
    infeasible = impossible | (solve & exhausted & ~found)
    ok = everything | (solve & certified)
    return value.astype(dtype), _status(ok, infeasible, invalid)


def batch_size(
    target_epsilon,
    target_delta,
    noise_multiplier,
    epochs,
    dataset_size,
    *,
    orders=None,
    method: str = "improved",
) -> Calibration:
    """The largest batch size ``B`` meeting an ``(ε, δ)`` target over ``epochs`` epochs.

    With Poisson sampling rate ``q = B/N`` and ``T = ⌈epochs·N/B⌉`` steps, ε is *not*
    monotone in ``B``: rounding the steps up makes it jump down where ``T`` decreases,
    and for few epochs and small σ the feasible batch sizes need not even form an
    interval. The search works from the largest batch size down, in rounds:

    1. *cut*: with the steps not rounded (``T = epochs·N/B``), the relaxed ε is a lower
       bound of ε for every ``B``. If it exceeds the target at the current upper end
       ``top``, the search jumps down to the relaxed root on its rising side, every
       batch size in between being infeasible;
    2. *run*: the batch sizes below ``top`` that share its step count form a run, in
       which ε increases with ``B`` (monotone in ``q`` at fixed ``T``); its largest
       feasible ``B`` is a monotone root. If the run has none, ``top`` moves below it.

    The first run holding a feasible ``B`` holds the answer; ``B*`` and ``B* + 1`` are
    finally re-checked with the exact ε (typically 1–2 rounds).

    Assumption (verified in ``tests/test_sweep.py`` on a grid of σ, epochs and δ, and by
    brute force over every ``B`` on random cases, many with gaps in the feasible set):
    the relaxed ε is unimodal in ``B`` — non-decreasing up to a peak, non-increasing
    after it (it falls only for large ``q`` with few epochs, where few large steps cost
    less than many small ones). Under it ``B*`` is the largest feasible batch size and
    ``B* + 1`` violates the target.

    Args:
      target_epsilon: ε budget ``≥ 0``.
      target_delta: δ in ``[0, 1]``.
      noise_multiplier: σ ``≥ 0``.
      epochs: number of passes over the data, ``> 0`` (may be fractional).
      dataset_size: number of records ``N``, a positive integer. All five broadcast to a
        shape ``S``.
      orders: 1-D concrete Rényi orders ``> 1``; default :data:`jaxrdp.DEFAULT_ORDERS`.
      method: ``"improved"`` (default) or ``"classic"``.

    Returns:
      :class:`Calibration` of shape ``S``: ``B*`` as an integer-valued float (``N`` when
      the whole data set per step is within the target); 0 with
      :attr:`Status.INFEASIBLE` when ``B = 1`` already violates it (including ``δ = 0``
      and ``σ = 0``).

    Raises:
      ValueError: with concrete inputs, naming the first invalid argument and value.

    References:
      Mironov, Talwar, Zhang (2019), Sec. 3; Mironov (2017), Proposition 1.
    """
    _check_method(method)
    _validate.check_range("target_epsilon", target_epsilon, low=0.0)
    _validate.check_range("target_delta", target_delta, low=0.0, high=1.0)
    _validate.check_range("noise_multiplier", noise_multiplier, low=0.0)
    _validate.check_range("epochs", epochs, low=0.0, low_inclusive=False, allow_inf=False)
    _check_integer("dataset_size", dataset_size, low=1.0)
    cfg = _Config(_orders_tuple(orders), method, 1e-6)
    return _run(
        _batch_core,
        cfg,
        ("target_epsilon", "target_delta", "noise_multiplier", "epochs", "dataset_size"),
        (target_epsilon, target_delta, noise_multiplier, epochs, dataset_size),
    )


# --------------------------------------------------------------------------- epsilon grid


def _grid_core(cfg, q, sigma, steps, delta):
    """ε for cells ``(C,)`` × steps ``(T,)`` × deltas ``(D,)`` → ``(C, T, D)``."""
    curve = _curve(q, sigma, cfg)  # (C, K)
    total = jnp.where(
        steps[None, :, None] == 0, 0.0, steps[None, :, None] * curve[:, None, :]
    )  # (C, T, K)

    def one_delta(d):
        eps, _ = conversions.epsilon_from_rdp(
            total, _orders_array(cfg), d, method=cfg.method
        )
        return eps  # (C, T)

    return jnp.moveaxis(jax.lax.map(one_delta, delta), 0, -1)


class _Progress:
    """A one-line progress bar on stderr, shown once a job has run a few seconds."""

    def __init__(self, total: int, enabled, label: str, delay: float = 2.0):
        self.total, self.enabled, self.label, self.delay = total, enabled, label, delay
        self.start = time.perf_counter()
        self.shown = False

    def update(self, done: int) -> None:
        elapsed = time.perf_counter() - self.start
        if self.enabled is False or (self.enabled is None and elapsed < self.delay):
            return
        frac = done / self.total
        eta = elapsed * (1.0 - frac) / frac if frac > 0 else float("nan")
        bar = "#" * int(30 * frac)
        sys.stderr.write(
            f"\r{self.label} [{bar:<30}] {done}/{self.total} chunks, "
            f"{elapsed:.1f}s elapsed, ~{eta:.1f}s left"
        )
        sys.stderr.flush()
        self.shown = True

    def close(self) -> None:
        if self.shown:
            sys.stderr.write("\n")
            sys.stderr.flush()


def epsilon_grid(
    q,
    noise_multiplier,
    steps,
    delta,
    *,
    orders=None,
    method: str = "improved",
    cells_per_chunk: int | None = None,
    progress: bool | None = None,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """ε over the Cartesian product of ``q × σ × steps × δ`` (for heat maps), in chunks.

    The RDP curve depends on ``(q, σ)`` only, so each chunk of ``(q, σ)`` cells costs one
    fast-path kernel call; steps and δ are applied to the curves. Chunks have a fixed
    shape (one compilation), are sharded over all devices, and are written to a host
    array as they finish, so the grid may be larger than device memory (pass a
    ``np.memmap`` as ``out`` for grids larger than host memory).

    Args:
      q: sampling rates in ``[0, 1]``, shape ``(Q,)`` (a scalar counts as ``(1,)``).
      noise_multiplier: σ values ``≥ 0``, shape ``(S,)``.
      steps: non-negative integer step counts, shape ``(T,)``.
      delta: δ values in ``[0, 1]``, shape ``(D,)``.
      orders: 1-D concrete Rényi orders ``> 1``; default :data:`jaxrdp.DEFAULT_ORDERS`.
      method: ``"improved"`` (default) or ``"classic"``.
      cells_per_chunk: ``(q, σ)`` cells per chunk; default so that one chunk's
        ``cells × T × K`` block has about 4M elements.
      progress: ``True``/``False`` to force the stderr progress bar on/off; ``None``
        (default) shows it once the job has run for 2 seconds.
      out: optional float64 array of shape ``(Q, S, T, D)`` to write into.

    Returns:
      float64 NumPy array ``(Q, S, T, D)``: ε as :func:`jaxrdp.conversions.epsilon` gives it.

    Raises:
      ValueError: naming the first invalid argument and value, a non-1-D axis, or an
        ``out`` of the wrong shape.

    References:
      Mironov, Talwar, Zhang (2019), Sec. 3; conversions as in
      :func:`jaxrdp.conversions.epsilon_from_rdp`.
    """
    _check_method(method)
    axes = {}
    for name, value in (("q", q), ("noise_multiplier", noise_multiplier), ("steps", steps),
                        ("delta", delta)):
        if not _validate.is_concrete(value):
            raise ValueError(f"epsilon_grid needs concrete inputs; got a tracer for {name}")
        arr = np.atleast_1d(np.asarray(value, dtype=np.float64))
        if arr.ndim != 1:
            raise ValueError(f"{name} must be 1-D; got {name} of shape {arr.shape}")
        axes[name] = arr
    _validate.check_range("q", axes["q"], low=0.0, high=1.0)
    _validate.check_range("noise_multiplier", axes["noise_multiplier"], low=0.0)
    _check_integer("steps", axes["steps"], low=0.0)
    _validate.check_range("delta", axes["delta"], low=0.0, high=1.0)
    cfg = _Config(_orders_tuple(orders), method, 0.0)
    shape = tuple(a.size for a in axes.values())
    if out is None:
        out = np.empty(shape, dtype=np.float64)
    elif out.shape != shape:
        raise ValueError(f"out must have shape {shape}; got out of shape {out.shape}")
    if out.size == 0:
        return out

    devices = tuple(jax.devices())
    nd = len(devices)
    n_cells = shape[0] * shape[1]
    per_cell = shape[2] * len(cfg.orders)
    chunk = cells_per_chunk or max(1, min(8192, _GRID_ELEMENTS // per_cell))
    chunk = min(chunk, n_cells)
    chunk = max(nd, -(-chunk // nd) * nd)
    n_chunks = -(-n_cells // chunk)
    qq, ss = (a.ravel() for a in np.meshgrid(axes["q"], axes["noise_multiplier"], indexing="ij"))
    pad = n_chunks * chunk - n_cells
    qq = np.concatenate([qq, np.zeros(pad)])
    ss = np.concatenate([ss, np.ones(pad)])
    flat_out = out.reshape(n_cells, shape[2], shape[3])

    bar = _Progress(n_chunks, progress, "epsilon_grid")
    with jax.enable_x64(True):
        fn = _compiled(_grid_core, cfg, devices, in_specs=(P("batch"), P("batch"), P(), P()))
        steps_d = _put(axes["steps"], devices, P())
        delta_d = _put(axes["delta"], devices, P())
        pending = None
        for i in range(n_chunks + 1):
            current = None
            if i < n_chunks:
                sl = slice(i * chunk, (i + 1) * chunk)
                current = fn(
                    _put(qq[sl], devices, P("batch")), _put(ss[sl], devices, P("batch")),
                    steps_d, delta_d,
                )  # dispatched asynchronously while the previous chunk is copied out
            if pending is not None:
                j, result = pending
                lo, hi = j * chunk, min((j + 1) * chunk, n_cells)
                flat_out[lo:hi] = np.asarray(_fetch(result))[: hi - lo]
                bar.update(j + 1)
            pending = (i, current) if current is not None else None
    bar.close()
    return out
