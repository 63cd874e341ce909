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

How the calibrators work. Each is three things: the ε function (an
:class:`jaxrdp._models.EpsilonModel` chosen by the ``accountant`` argument), the
domain of the searched variable (:class:`jaxrdp._solver.Domain`: σ in
``SIGMA_RANGE`` on a log scale, ``q`` in ``[Q_MIN, 1]``, ``B`` an integer), and the
rounding rule (σ up, ``q``, ``T``, ``B`` down). The search is
:func:`jaxrdp._solver.find_root`: batched, one ε evaluation of the whole batch per
iteration, a bracket ``[infeasible, feasible]`` per lane with bisection safeguards, and
per-lane convergence masks; stragglers are gathered into smaller batches. For the RDP
accountant ε is a minimum over orders ``α`` of per-order bounds that are smooth and
monotone in every parameter, and every ε evaluation is *one* fast-path kernel call
``rdp(q[:, None], σ[:, None], orders)``; the next point comes from per-order models of
``log(A_α − 1)`` corrected on the exact curve (:mod:`jaxrdp._models`), typically 3–5
curve evaluations per target. The returned value is always a point whose exact ε was
found within the target; the other end of the final bracket violates it. Lanes are
sorted by σ before the search, so that the kernel's chunks of neighbouring lanes hold
similar σ.

:func:`max_steps` needs no search with the RDP accountant: RDP composes linearly, so
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
import warnings
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxrdp import (_devices, _models, _precision, _solver, _validate, conversions, kernels,
                    profile)

__all__ = [
    "Q_MIN",
    "REFINE_AUTO_TARGETS",
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

#: Calibrations against the profile (``accountant="profile"``) of at most this many
#: targets are refined against the escalated :func:`jaxrdp.profile.epsilon` by default
#: (``refine=None``): ~8 escalated evaluations per target, which a handful of targets
#: afford and a large batch may not (about 4× the search's own time on random targets).
REFINE_AUTO_TARGETS = 16

_MAX_RUNS = 32  # batch_size: rounds (a cut and one run of equal step count each)
_ADJUST = 4  # max_steps: ±1 corrections of the closed-form floor
_MARGIN = {8: 1e-12, 4: 1e-5}  # relative target margin per dtype size (bytes)
_MAX_EXACT_INTEGER = 2.0**52
_GRID_ELEMENTS = 2**22  # epsilon_grid: elements of one (cells, steps, orders) block



#: The domain of each calibrator's arguments (eager errors and traced masks).
_V = _validate
_NOISE_ARGS = _V.Spec(target_epsilon=_V.NONNEGATIVE, target_delta=_V.UNIT, q=_V.UNIT,
                      steps=_V.COUNT)
_STEPS_ARGS = _V.Spec(target_epsilon=_V.NONNEGATIVE, target_delta=_V.UNIT, q=_V.UNIT,
                      noise_multiplier=_V.NONNEGATIVE)
_RATE_ARGS = _V.Spec(target_epsilon=_V.NONNEGATIVE, target_delta=_V.UNIT,
                     noise_multiplier=_V.NONNEGATIVE, steps=_V.COUNT)
_BATCH_ARGS = _V.Spec(
    target_epsilon=_V.NONNEGATIVE, target_delta=_V.UNIT, noise_multiplier=_V.NONNEGATIVE,
    epochs=_V.Range(low=0.0, low_inclusive=False, allow_inf=False),
    dataset_size=_V.Range(low=1.0, allow_inf=False, integer=True),
)


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
    """Static (hashable) configuration of a compiled calibration."""

    orders: tuple
    method: str
    rtol: float
    accountant: str = "rdp"


#: The ε functions the calibrators can search over: name -> ``_Config -> EpsilonModel``.
#: A new accountant is plugged in by one entry here: a batched, jittable
#: ``epsilon(q, σ, steps, δ) -> (ε, aux)`` wrapped as ``_models.EpsilonModel(epsilon=...)``
#: is enough; model hints (a proposer, a σ start, a closed form for T) only save
#: evaluations (see :mod:`jaxrdp._models`).
_ACCOUNTANTS = {
    "rdp": lambda cfg: _models.rdp_model(cfg.orders, cfg.method),
    "profile": lambda cfg: _models.EpsilonModel(
        epsilon=lambda q, s, t, d: (profile.epsilon_core(q, s, t, d), None),
        hints=lambda target, delta: (target, delta),
        proposer=lambda params, refine_start: _models.log_secant(),
        sigma_start=functools.partial(_profile_sigma_start, cfg),
    ),
}

#: The profile's σ* is a few percent below RDP's (5–8% on DP-SGD runs): its search starts there.
_PROFILE_BELOW_RDP = 0.95


def _profile_sigma_start(cfg, hints, q, steps):
    """σ where the profile's σ search starts: a little below RDP's σ* (a cheap solve)."""
    target, delta = hints
    sigma_rdp, _, _ = _noise_core(cfg._replace(accountant="rdp"), target, delta, q, steps)
    return jnp.where(jnp.isfinite(sigma_rdp) & (sigma_rdp > 0),
                     _PROFILE_BELOW_RDP * sigma_rdp, 1.0)


def _model(cfg: _Config) -> _models.EpsilonModel:
    return _ACCOUNTANTS[cfg.accountant](cfg)


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


def _config(orders, method, rtol, accountant) -> _Config:
    """Checks the static arguments once and builds the configuration."""
    conversions.check_method(method)
    if accountant not in _ACCOUNTANTS:
        raise ValueError(
            f"accountant must be one of {tuple(_ACCOUNTANTS)}; got accountant={accountant!r}"
        )
    rtol = float(rtol)
    if not 1e-12 <= rtol <= 0.1:
        raise ValueError(f"rtol must be in [1e-12, 0.1]; got rtol={rtol!r}")
    return _Config(_orders_tuple(orders), method, rtol, accountant)


def _run(core, spec: _validate.Spec, cfg: _Config, *args, refine=False,
         coordinate=None) -> Calibration:
    """Check ``args`` against ``spec`` once, then run the flat ``core`` over them
    broadcast, padded and sharded (:func:`jaxrdp._devices.run_batched`); where
    ``refine`` asks for it (:func:`_refine_wanted`), move the result along ``coordinate``
    to the escalated profile's boundary (:func:`_refined`)."""
    refining = coordinate is not None and _refine_wanted(refine, cfg, args)
    spec.check(*args)
    value, status = _devices.run_batched(core, cfg, tuple(spec.ranges), args, (None, jnp.int32))
    result = Calibration(value, status)
    return _refined(result, cfg, coordinate, args) if refining else result


class _Coordinate(NamedTuple):
    """The searched variable of a calibrator, for :func:`_refined`."""

    params: object  # (x, [flat arguments after δ, at the lanes]) -> (q, σ, steps)
    lower: float
    upper: float
    feasible_above: bool
    integer: bool
    first_slope: float  # d log ε / d log x assumed for the first step


def _refine_wanted(refine, cfg: _Config, args) -> bool:
    """Whether to refine (``refine``: True, False or None for the default), checked."""
    if refine is not None and not isinstance(refine, (bool, np.bool_)):
        raise ValueError(f"refine must be True, False or None; got refine={refine!r}")
    if cfg.accountant != "profile":
        if refine:
            raise ValueError("refine applies to accountant='profile' only (the RDP search is "
                             "already tight against the exact RDP ε)")
        return False
    host = _validate.is_concrete(*args) and _precision.compute_context(*args)[0] == np.float64
    if not host:
        if refine:
            raise ValueError("refine=True needs concrete float64 inputs (Python or NumPy "
                             "values): it runs on the host")
        return False
    if refine is None:
        return math.prod(np.broadcast_shapes(*(np.shape(a) for a in args))) <= REFINE_AUTO_TARGETS
    return bool(refine)


def _refined(result: Calibration, cfg: _Config, coordinate: _Coordinate, args) -> Calibration:
    """``result`` moved to the boundary of the *escalated* profile ε (host, concrete).

    The calibrators search the traceable profile ε (one tier, :data:`jaxrdp.profile.TIERS`
    ``[1]``), a sound upper bound that is loose where few steps are sampled: there the
    value found is feasible but conservative (by up to 8% in σ on random DP-SGD targets;
    the escalated ε of :func:`jaxrdp.profile.epsilon` is tighter). From that feasible
    point, :func:`jaxrdp._solver.refine_on_host` searches the escalated ε, lanes with
    status OK only: every value it returns was checked feasible with the escalated ε (a
    sound bound), so the guarantees of the status stay; the value is never larger (σ) or
    smaller (``q``, ``T``) than the traceable search's. ~8 escalated evaluations per
    refined lane, tens of milliseconds each where the profile needs its larger tiers.
    """
    value, status = np.asarray(result.value, np.float64), np.asarray(result.status)
    shape = value.shape
    flat = [np.broadcast_to(np.asarray(a, np.float64), shape).reshape(-1) for a in args]
    target = flat[0] * (1.0 - _margin(np.float64))
    delta = flat[1]
    v = value.reshape(-1).copy()
    lanes = np.nonzero((status.reshape(-1) == Status.OK) & np.isfinite(v) & (v > 0))[0]
    if lanes.size:

        def log_ratio(sub, x):
            at = lanes[sub]
            q, sigma, steps = coordinate.params(x, [a[at] for a in flat[2:]])
            eps = np.asarray(profile.epsilon(q, sigma, steps, delta[at]).epsilon)
            with np.errstate(divide="ignore"):
                return np.log(eps / target[at])

        found = _solver.refine_on_host(
            log_ratio, v[lanes], coordinate.lower, coordinate.upper,
            feasible_above=coordinate.feasible_above, integer=coordinate.integer,
            first_slope=coordinate.first_slope, rtol=cfg.rtol)
        v[lanes] = found.x
    with jax.enable_x64(True):
        return Calibration(jnp.asarray(v.reshape(shape)), result.status)


# --------------------------------------------------------------------------- traced helpers


def _margin(dtype) -> float:
    return _MARGIN.get(jnp.dtype(dtype).itemsize, 1e-5)


def _permute(perm, tree):
    """Per-lane arrays of ``tree`` reordered by ``perm`` (scalars kept)."""
    return jax.tree_util.tree_map(lambda a: a[perm] if jnp.ndim(a) else a, tree)


def _search(model, params, extra, target, delta, hints, domain, start, *, tol, active,
            refine_start=True):
    """Where ``ε(params(x)) ≤ target`` starts to hold: one batched :func:`find_root` call.

    Args:
      model: the :class:`jaxrdp._models.EpsilonModel`.
      params: ``(x, extra) -> (q, sigma, steps)``, ``x`` of shape ``(n,)`` or ``(n, m)``.
      extra: tuple of ``(n,)`` arrays ``params`` reads.
      target, delta: ``(n,)``; hints: the model's per-lane hints (or None).
      domain: the :class:`jaxrdp._solver.Domain` of ``x``; start: ``(n,)``.
      tol: bracket width in the search coordinate; active: ``(n,)`` lanes to search.
      refine_start: let the model's proposer move the start first.

    Returns:
      The :class:`jaxrdp._solver.Root`; its feasible end was checked with the exact ε.
    """

    def gap(x, args: _models.SearchArgs):
        eps, aux = model.epsilon(*params(x, args.extra), args.delta)
        return eps - args.target, aux

    proposer = model.proposer(params, refine_start) if model.proposer else None
    args = _models.SearchArgs(tuple(extra), target, delta, hints)
    return _solver.find_root(gap, domain, start, tol=tol, args=args, active=active,
                             proposer=proposer)


class _Cases(NamedTuple):
    """How each lane of a calibration is settled (all ``(n,)``)."""

    invalid: jax.Array  # an argument out of its domain: NaN
    settled: jax.Array  # answered without a search (e.g. nothing to protect)
    impossible: jax.Array  # no value can meet the target (e.g. δ = 0)
    solve: jax.Array  # the lanes searched
    target: jax.Array  # ε targets with the margin applied (harmless where not solved)
    delta: jax.Array
    model: _models.EpsilonModel
    hints: object  # the model's per-lane hints (or None)


def _cases(cfg, invalid, settled, impossible, target, delta) -> _Cases:
    """Split lanes into invalid / settled / impossible / searched; safe targets; the
    ε model of ``cfg`` and its hints."""
    settled = ~invalid & settled
    impossible = ~invalid & ~settled & impossible
    solve = ~(invalid | settled | impossible)
    t = jnp.where(solve, target, 1.0) * (1.0 - _margin(target.dtype))
    d = jnp.where(solve, delta, 1e-5)
    model = _model(cfg)
    hints = model.hints(t, d) if model.hints else None
    return _Cases(invalid, settled, impossible, solve, t, d, model, hints)


def _finish(c: _Cases, value, settled_value, impossible_value, *, ok, infeasible,
            at_limit=None):
    """The value and :class:`Status` of every lane from the searched lanes' outcome."""
    value = jnp.where(c.settled, settled_value, jnp.where(c.impossible, impossible_value, value))
    value = jnp.where(c.invalid, jnp.nan, value)
    status = _status(c.settled | (c.solve & ok), c.impossible | (c.solve & infeasible), c.invalid,
                     None if at_limit is None else c.solve & at_limit)
    return value.astype(c.target.dtype), status


def _status(ok, infeasible, invalid, at_limit=None):
    status = jnp.full(ok.shape, int(Status.NOT_CONVERGED), jnp.int32)
    status = jnp.where(ok, int(Status.OK), status)
    if at_limit is not None:
        status = jnp.where(at_limit, int(Status.AT_LIMIT), status)
    status = jnp.where(infeasible, int(Status.INFEASIBLE), status)
    return jnp.where(invalid, int(Status.INVALID), status)




# --------------------------------------------------------------------------- noise multiplier


def _noise_core(cfg, target, delta, q, steps):
    """Solver for :func:`noise_multiplier` on flat arrays; also returns the evaluations."""
    dtype = target.dtype
    c = _cases(
        cfg,
        _NOISE_ARGS.invalid(target, delta, q, steps),
        (q == 0) | (steps == 0) | (delta >= 1) | jnp.isposinf(target),  # σ = 0 will do
        delta == 0,
        target, delta,
    )
    solve, t, d, model, hints = c.solve, c.target, c.delta, c.model, c.hints
    qq = jnp.where(solve, q, 0.01)
    tt = jnp.where(solve, steps, 100.0)

    # Where the search starts (the model's hint, else σ = 1); lanes are sorted by it, so
    # that neighbouring lanes (the kernel's chunks) hold similar σ.
    lo_sigma, hi_sigma = (jnp.asarray(v, dtype) for v in SIGMA_RANGE)
    start = model.sigma_start(hints, qq, tt) if model.sigma_start else jnp.ones_like(t)
    start = jnp.clip(jnp.where(jnp.isnan(start), 1.0, start), lo_sigma, hi_sigma)
    perm = jnp.argsort(start)
    t, d, qq, tt, hints, start, active = _permute(perm, (t, d, qq, tt, hints, start, solve))
    root = _search(
        model,
        lambda x, e: (_models.lane(x, e[0]), x, _models.lane(x, e[1])),
        (qq, tt), t, d, hints,
        _solver.Domain(lo_sigma, hi_sigma, feasible_above=True),
        start,
        tol=0.99 * math.log1p(cfg.rtol),
        active=active,
    )
    sol = _permute(jnp.argsort(perm), root)

    value, status = _finish(
        c, jnp.where(sol.none_feasible | ~sol.found, jnp.inf, sol.x), 0.0, jnp.inf,
        ok=sol.converged & ~sol.all_feasible, infeasible=sol.none_feasible,
        at_limit=sol.all_feasible,
    )
    return value, status, sol.evaluations


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
        return _model(cfg).epsilon(q_, sigma_, steps_, delta_)[0]

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
    target_epsilon, target_delta, q, steps,
    *, orders=None, rtol: float = 1e-6, method: str = "improved", accountant: str = "rdp",
    refine: bool | None = None,
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
      accountant: the ε function calibrated against: ``"rdp"`` (default, the RDP
        accountant of :func:`jaxrdp.conversions.epsilon`) or ``"profile"`` (the tight
        privacy profile of :func:`jaxrdp.profile.epsilon`; slower, and equal to the RDP
        ε where the profile falls back to it).
      refine: with ``accountant="profile"`` and concrete float64 inputs, move each result
        from the boundary of the traceable profile ε the search uses (one tier) to that
        of the escalated :func:`jaxrdp.profile.epsilon`, on the host: tighter where few
        steps are sampled (σ* up to 8% smaller on random DP-SGD targets), at ~8 escalated
        ε evaluations per target. ``None`` (default): only in calls of at most
        :data:`REFINE_AUTO_TARGETS` targets; ``True`` with the RDP accountant or traced
        inputs raises ``ValueError``.

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
    cfg = _config(orders, method, rtol, accountant)
    args = (target_epsilon, target_delta, q, steps)
    return _run(_noise_solve, _NOISE_ARGS, cfg, *args, refine=refine, coordinate=_NOISE_COORDINATE)


#: σ: feasible above; ε ∝ 1/σ roughly.
_NOISE_COORDINATE = _Coordinate(lambda x, e: (e[0], x, e[1]), SIGMA_RANGE[0], SIGMA_RANGE[1],
                                feasible_above=True, integer=False, first_slope=-1.0)


# --------------------------------------------------------------------------- max steps


def _steps_core(cfg, target, delta, q, sigma):
    c = _cases(
        cfg,
        _STEPS_ARGS.invalid(target, delta, q, sigma),
        (q == 0) | jnp.isposinf(sigma) | (delta >= 1) | jnp.isposinf(target),  # unbounded
        (delta == 0) | (sigma == 0),
        target, delta,
    )
    solve, t, d, model, hints = c.solve, c.target, c.delta, c.model, c.hints
    qq = jnp.where(solve, q, 0.01)
    ss = jnp.where(solve, sigma, 1.0)
    if model.max_steps:  # a closed form, corrected by ±1 with the exact ε
        steps, feasible = model.max_steps(hints, qq, ss, d, t)
        steps = jnp.where(jnp.isnan(steps), 0.0, jnp.maximum(steps, 0.0))
        exact = jnp.isfinite(steps) & (steps < _MAX_EXACT_INTEGER)
        fix = solve & exact

        def down(_, s):
            return jnp.where(fix & (s > 0) & ~feasible(s), s - 1.0, s)

        def up(_, s):
            return jnp.where(fix & feasible(s + 1.0), s + 1.0, s)

        steps = jax.lax.fori_loop(0, _ADJUST, down, steps)
        steps = jax.lax.fori_loop(0, _ADJUST, up, steps)
        certified = ~exact | (feasible(steps) & ~feasible(steps + 1.0))
    else:  # a search over T
        ones = jnp.ones_like(t)
        root = _search(
            model,
            lambda x, e: (_models.lane(x, e[0]), _models.lane(x, e[1]), x),
            (qq, ss), t, d, hints,
            _solver.Domain(ones, _MAX_EXACT_INTEGER * ones, feasible_above=False, integer=True),
            ones,
            tol=0.0,
            active=solve,
        )
        steps = jnp.where(root.all_feasible, jnp.inf,
                          jnp.where(root.found, jnp.floor(root.x), 0.0))
        # the search's own evaluations certify T*: converged on integers, it evaluated ε at
        # T* (within the target) and at T* + 1 (beyond it); none feasible: T = 1 is beyond
        # it. (A second check here would be one more copy of the ε program in the compiled
        # search: 12 s of compilation for the profile's.)
        certified = root.all_feasible | root.none_feasible | root.converged

    return _finish(c, steps, jnp.inf, 0.0, ok=certified, infeasible=(steps == 0) & certified)


def max_steps(
    target_epsilon, target_delta, q, noise_multiplier,
    *, orders=None, method: str = "improved", accountant: str = "rdp",
    refine: bool | None = None,
) -> Calibration:
    """The largest number of steps ``T`` meeting an ``(ε, δ)`` target, in closed form.

    RDP composes linearly (``T·r_α``), so order α meets the target iff
    ``T ≤ R_α / r_α`` with ``R_α = max(ε − c_α(δ), −log(1 − δ²))``: ``T* = ⌊max_α R_α /
    r_α⌋``. One kernel call gives every ``r_α``; the floor is then corrected by ±1 with
    the exact ε (which rounds outwards) until ``T*`` meets the target and ``T* + 1`` does
    not. No search. (With ``accountant="profile"``, which has no closed form: a search over
    integer ``T`` whose own last evaluations, at ``T*`` and ``T* + 1``, certify it.)

    Args:
      target_epsilon: ε budget ``≥ 0``.
      target_delta: δ in ``[0, 1]``.
      q: sampling rate(s) in ``[0, 1]``.
      noise_multiplier: σ ``≥ 0``. The four broadcast together to a shape ``S``.
      orders: 1-D concrete Rényi orders ``> 1``; default :data:`jaxrdp.DEFAULT_ORDERS`.
      method: ``"improved"`` (default) or ``"classic"``.
      accountant: the ε function calibrated against: ``"rdp"`` (default, the RDP
        accountant of :func:`jaxrdp.conversions.epsilon`) or ``"profile"`` (the tight
        privacy profile of :func:`jaxrdp.profile.epsilon`; slower, and equal to the RDP
        ε where the profile falls back to it).
      refine: with ``accountant="profile"`` and concrete float64 inputs, move each result
        from the boundary of the traceable profile ε the search uses (one tier) to that
        of the escalated :func:`jaxrdp.profile.epsilon`, on the host: tighter where few
        steps are sampled (σ* up to 8% smaller on random DP-SGD targets), at ~8 escalated
        ε evaluations per target. ``None`` (default): only in calls of at most
        :data:`REFINE_AUTO_TARGETS` targets; ``True`` with the RDP accountant or traced
        inputs raises ``ValueError``.

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
    cfg = _config(orders, method, 1e-6, accountant)
    args = (target_epsilon, target_delta, q, noise_multiplier)
    return _run(_steps_core, _STEPS_ARGS, cfg, *args, refine=refine, coordinate=_STEPS_COORDINATE)


#: T: feasible below, integers; ε ∝ √T roughly.
_STEPS_COORDINATE = _Coordinate(lambda x, e: (e[0], e[1], x), 1.0, _MAX_EXACT_INTEGER,
                                feasible_above=False, integer=True, first_slope=0.5)


# --------------------------------------------------------------------------- sampling rate


def _rate_core(cfg, target, delta, sigma, steps):
    dtype = target.dtype
    c = _cases(
        cfg,
        _RATE_ARGS.invalid(target, delta, sigma, steps),
        (steps == 0) | jnp.isposinf(sigma) | (delta >= 1) | jnp.isposinf(target),  # q = 1
        (delta == 0) | (sigma == 0),
        target, delta,
    )
    solve, t, d, model, hints = c.solve, c.target, c.delta, c.model, c.hints
    ss = jnp.where(solve, sigma, 1.0)
    tt = jnp.where(solve, steps, 100.0)
    ones = jnp.ones_like(t)
    perm = jnp.argsort(ss)  # neighbouring lanes (the kernel's chunks) hold similar σ
    t, d, ss, tt, hints, active = _permute(perm, (t, d, ss, tt, hints, solve))
    root = _search(
        model,
        lambda x, e: (x, _models.lane(x, e[0]), _models.lane(x, e[1])),
        (ss, tt), t, d, hints,
        _solver.Domain(jnp.asarray(Q_MIN, dtype) * ones, ones, feasible_above=False),
        ones,
        tol=0.99 * math.log1p(cfg.rtol),
        active=active,
    )
    sol = _permute(jnp.argsort(perm), root)

    return _finish(
        c, jnp.where(sol.none_feasible | ~sol.found, 0.0, sol.x), 1.0, 0.0,
        ok=sol.converged | sol.all_feasible, infeasible=sol.none_feasible,
    )


def sampling_rate(
    target_epsilon, target_delta, noise_multiplier, steps,
    *, orders=None, rtol: float = 1e-6, method: str = "improved", accountant: str = "rdp",
    refine: bool | None = None,
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
      accountant: the ε function calibrated against: ``"rdp"`` (default, the RDP
        accountant of :func:`jaxrdp.conversions.epsilon`) or ``"profile"`` (the tight
        privacy profile of :func:`jaxrdp.profile.epsilon`; slower, and equal to the RDP
        ε where the profile falls back to it).
      refine: with ``accountant="profile"`` and concrete float64 inputs, move each result
        from the boundary of the traceable profile ε the search uses (one tier) to that
        of the escalated :func:`jaxrdp.profile.epsilon`, on the host: tighter where few
        steps are sampled (σ* up to 8% smaller on random DP-SGD targets), at ~8 escalated
        ε evaluations per target. ``None`` (default): only in calls of at most
        :data:`REFINE_AUTO_TARGETS` targets; ``True`` with the RDP accountant or traced
        inputs raises ``ValueError``.

    Returns:
      :class:`Calibration` of shape ``S``: ``q*`` (1 when every rate is within the target,
      including ``steps = 0``, ``σ = ∞``, ``δ ≥ 1``); 0 with :attr:`Status.INFEASIBLE` when
      even ``Q_MIN`` violates it (including ``δ = 0`` and ``σ = 0``).

    Raises:
      ValueError: with concrete inputs, naming the first invalid argument and value.

    References:
      Mironov, Talwar, Zhang (2019), Sec. 3; Canonne, Kamath, Steinke (2020), Prop. 12.
    """
    cfg = _config(orders, method, rtol, accountant)
    args = (target_epsilon, target_delta, noise_multiplier, steps)
    return _run(_rate_core, _RATE_ARGS, cfg, *args, refine=refine, coordinate=_RATE_COORDINATE)


#: q: feasible below, at most 1; ε ∝ q roughly.
_RATE_COORDINATE = _Coordinate(lambda x, e: (x, e[0], e[1]), Q_MIN, 1.0,
                               feasible_above=False, integer=False, first_slope=1.0)


# --------------------------------------------------------------------------- batch size


def _epoch_steps(epochs, n_data, batch):
    """Steps of ``epochs`` passes with batch ``batch``: ``⌈epochs·N / B⌉`` (as documented)."""
    return jnp.ceil(epochs * n_data / batch)


def _batch_core(cfg, target, delta, sigma, epochs, n_data):
    perm = jnp.argsort(sigma)  # neighbouring lanes (the kernel's chunks) hold similar σ
    out = _batch_sorted(cfg, *_permute(perm, (target, delta, sigma, epochs, n_data)))
    return _permute(jnp.argsort(perm), out)


#: the phases of a batch_size lane (:func:`_batch_sorted`), one search each
_CUT, _RUN, _CHECK, _DONE = 0, 1, 2, 3


def _batch_sorted(cfg, target, delta, sigma, epochs, n_data):
    c = _cases(
        cfg,
        _BATCH_ARGS.invalid(target, delta, sigma, epochs, n_data),
        (delta >= 1) | jnp.isposinf(sigma) | jnp.isposinf(target),  # the whole data set
        (delta == 0) | (sigma == 0),
        target, delta,
    )
    solve, t, d, model, hints = c.solve, c.target, c.delta, c.model, c.hints
    ss = jnp.where(solve, sigma, 1.0)
    ee = jnp.where(solve, epochs, 1.0)
    nn = jnp.where(solve, n_data, 1000.0)
    en = ee * nn
    ones = jnp.ones_like(t)

    def params(b, e):
        """(q, σ, T) at batch sizes ``b`` in each lane's phase: the relaxed T = E·N/B of a
        cut, the run's own T, or the exact ⌈E·N/B⌉ of the final check."""
        n, s, total, run_steps, phase = (_models.lane(b, v) for v in e)
        steps = jnp.where(phase == _CUT, total / b,
                          jnp.where(phase == _RUN, run_steps, jnp.ceil(total / b)))
        return b / n, s, steps

    class Rounds(NamedTuple):
        it: jax.Array  # searches so far (a cut and a run make one round)
        phase: jax.Array
        top: jax.Array  # every batch size above it is known to violate the target
        bottom: jax.Array  # the run's lowest batch size
        steps: jax.Array  # the run's step count
        best: jax.Array
        found: jax.Array
        exhausted: jax.Array
        certified: jax.Array

    def searching(r: Rounds):
        """The lanes that search in this iteration: every phase for _MAX_RUNS rounds, then
        only the checks (a check is never started later, so the loop ends)."""
        return (r.phase != _DONE) & ((r.it < 2 * _MAX_RUNS) | (r.phase == _CHECK))

    def body(r: Rounds) -> Rounds:
        """One search per lane, by phase (one search call, so the compiled program holds
        one copy of the ε function; the phases' values are those of separate searches):

        1. *cut*, in ``[1, top]``, ``top`` evaluated first. With steps E·N/B not rounded up,
           ε_relaxed(B) ≤ ε(B). If ε_relaxed(top) exceeds the target, then (ε_relaxed
           rising, then falling in B: the assumption) so does every B between the relaxed
           root on the rising side and ``top``: the search moves down to that root.
        2. *run*: the batch sizes below ``top`` sharing its step count T, where ε grows
           with B (monotone in q at fixed T): its largest feasible B is a monotone root.
           The top of the run, evaluated first, is often the answer; if the run has none,
           the next cut starts below it.
        3. *check*: B* and B* + 1 with the exact step counts, B* + 1 first.
        """
        active = searching(r)
        cut, run, check = (active & (r.phase == p) for p in (_CUT, _RUN, _CHECK))
        best1 = jnp.maximum(r.best, 1.0)
        lower = jnp.where(cut, ones, jnp.where(run, r.bottom, best1))
        upper = jnp.where(check, jnp.minimum(best1 + 1.0, nn), r.top)
        root = _search(
            model, params, (nn, ss, en, r.steps, r.phase), t, d, hints,
            _solver.Domain(lower, upper, feasible_above=False, integer=True),
            upper,
            tol=0.99 * math.log1p(cfg.rtol),
            active=active,
            refine_start=False,
        )
        # 1. the cut: a new top, and the run below it
        nothing = cut & root.none_feasible  # even B = 1 violates the relaxed bound
        moved = cut & ~root.all_feasible & root.bracketed & ~nothing
        top = jnp.where(moved, jnp.clip(jnp.ceil(root.x_other) - 1.0, 1.0, r.top), r.top)
        steps = jnp.where(cut, _epoch_steps(ee, nn, top), r.steps)
        bottom = jnp.minimum(jnp.ceil(en / steps), top)
        bottom = jnp.where(_epoch_steps(ee, nn, bottom) > steps, bottom + 1.0, bottom)
        bottom = jnp.where(cut, jnp.clip(bottom, 1.0, top), r.bottom)
        # 2. the run: a hit, or the next cut below it
        hit = run & root.found
        best = jnp.where(hit, jnp.where(root.all_feasible, r.top, jnp.floor(root.x)), r.best)
        emptied = run & ~root.found & root.none_feasible & (r.bottom <= 1.0)
        top = jnp.where(run & ~hit, r.bottom - 1.0, top)
        # 3. the check: B* feasible, and B* + 1 evaluated and not (or beyond N)
        certified = check & root.found & (root.x == best1) & (
            (best1 + 1.0 > nn) | (root.bracketed & (root.x_other == best1 + 1.0)))
        exhausted = r.exhausted | nothing | emptied
        phase = jnp.where(cut, _RUN, r.phase)
        phase = jnp.where(run, jnp.where(hit, _CHECK, _CUT), phase)
        phase = jnp.where(check | nothing | emptied, _DONE, phase)
        return Rounds(r.it + 1, phase, top, bottom, steps, best, r.found | hit, exhausted,
                      r.certified | certified)

    false = jnp.zeros(t.shape, bool)
    start = jnp.where(solve, _CUT, _DONE).astype(jnp.int32)
    runs = jax.lax.while_loop(
        lambda r: jnp.any(searching(r)), body,
        Rounds(jnp.zeros((), jnp.int32), start, nn, nn, ones, 0.0 * ones, false, false, false))
    best = jnp.where(runs.found, runs.best, 0.0)
    found, exhausted = runs.found, runs.exhausted
    return _finish(c, best, n_data, 0.0, ok=runs.certified, infeasible=exhausted & ~found)


def batch_size(
    target_epsilon, target_delta, noise_multiplier, epochs, dataset_size,
    *, orders=None, method: str = "improved", accountant: str = "rdp",
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
      accountant: the ε function calibrated against: ``"rdp"`` (default, the RDP
        accountant of :func:`jaxrdp.conversions.epsilon`) or ``"profile"`` (the tight
        privacy profile of :func:`jaxrdp.profile.epsilon`). For the profile the relaxed
        bound of step 1 evaluates ``M(z)^T = e^{T log M(z)}`` at the fractional
        ``T = epochs·N/B``, which lies between the integer step counts around it; the
        certificate at ``B*`` and ``B* + 1`` uses integer ``T`` only, so the returned
        batch size meets the target whatever the relaxation does (the assumption above,
        for the profile, is checked by brute force in ``tests/test_profile_calibration.py``).

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
    cfg = _config(orders, method, 1e-6, accountant)
    return _run(
        _batch_core, _BATCH_ARGS, cfg,
        target_epsilon, target_delta, noise_multiplier, epochs, dataset_size,
    )


# --------------------------------------------------------------------------- epsilon grid


def _grid_core(cfg, q, sigma, steps, delta):
    """ε for cells ``(C,)`` × steps ``(T,)`` × deltas ``(D,)`` → ``(C, T, D)``."""
    orders = np.asarray(cfg.orders)  # concrete: the kernel's fast path
    curve = kernels.rdp_core(q[:, None], sigma[:, None], orders)  # (C, K)
    total = conversions.scale_rdp(curve[:, None, :], steps[None, :, None])  # (C, T, K)

    def one_delta(d):
        eps = conversions.epsilon_core(total, jnp.asarray(orders, q.dtype), d, cfg.method)
        return eps[0].epsilon  # (C, T)

    return jnp.moveaxis(jax.lax.map(one_delta, delta), 0, -1)


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
    axes = {}
    conversions.check_method(method)
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
    _validate.check_integer("steps", axes["steps"], low=0.0)
    _validate.check_range("delta", axes["delta"], low=0.0, high=1.0)
    cfg = _Config(_orders_tuple(orders), method, 0.0)
    shape = tuple(a.size for a in axes.values())
    if out is None:
        out = np.empty(shape, dtype=np.float64)
    elif out.shape != shape:
        raise ValueError(f"out must have shape {shape}; got out of shape {out.shape}")
    if out.size == 0:
        return out

    per_cell = shape[2] * len(cfg.orders)
    chunk = cells_per_chunk or max(1, min(8192, _GRID_ELEMENTS // per_cell))
    qq, ss = (a.ravel() for a in np.meshgrid(axes["q"], axes["noise_multiplier"], indexing="ij"))
    with jax.enable_x64(True):
        _devices.run_chunks(
            _grid_core, cfg, ((0.0, 1.0), (qq, ss)), (axes["steps"], axes["delta"]),
            out.reshape(shape[0] * shape[1], shape[2], shape[3]), chunk,
            progress=progress, label="epsilon_grid",
        )
    return out
