"""ε models: what the calibrators of :mod:`jaxrdp.sweep` search over.

An :class:`EpsilonModel` is a batched ``ε(q, σ, steps, δ)`` plus optional hints that
make the search cheaper. Only ``epsilon`` is required: with it alone the calibrators use
:func:`jaxrdp._solver.find_root`'s default secant proposer and a generic start. The RDP
model (:func:`rdp_model`) adds per-order budgets, a per-order cheap model of
``log(A_α − 1)`` that proposes each next σ or ``q``, a start for σ, and the closed form
of the largest step count (RDP composes linearly).

References:
  Mironov, Talwar, Zhang (2019), "Rényi Differential Privacy of the Sampled Gaussian
  Mechanism", Sec. 3 (the binomial expansion of ``A_α``); Mironov (2017), Prop. 1.
"""

from __future__ import annotations

import functools
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxrdp import _logmath, _solver, conversions, kernels

_MODEL_LOW_TERMS = (2, 3, 4)  # binomial terms k of the cheap model, besides k = α
_MAX_GAP_SLOPE = 1e3  # bound on the secant slope of the model correction
#: Newton steps on the cheap model: for all orders, then for the few with the smallest roots.
_NEWTON_START = dict(full=4, keep=8, more=12)  # the first, uncorrected solve
_NEWTON_STEP = dict(full=1, keep=4, more=4)  # each corrected solve
_RESELECT = 2  # iterations that re-select the orders to solve for among all


class EpsilonModel(NamedTuple):
    """A batched ε function and the optional hints a calibrator may use.

    Attributes:
      epsilon: ``(q, sigma, steps, delta) -> (eps, aux)``, flat ``(n,)`` arrays of one
        float dtype (``steps`` may be fractional in :func:`jaxrdp.sweep.batch_size`'s
        relaxed bound); ``eps`` never below the truth; ``aux`` any pytree (or ``None``)
        handed to the proposer.
      hints: ``(target, delta) -> pytree`` of per-lane data (leading axis ``n``), or None.
      proposer: ``(params, refine_start) -> _solver.Proposer``, or None for the solver's
        default. ``params(x, extra) -> (q, sigma, steps)`` maps the searched variable
        (shape ``(n,)`` or ``(n, m)``) to the mechanism; the proposer reads
        ``args.extra`` and ``args.hints`` of the search's :class:`SearchArgs`.
      sigma_start: ``(hints, q, steps) -> σ`` ``(n,)`` where the σ search starts, or None.
      max_steps: ``(hints, q, sigma, delta, target) -> (T, feasible)``: a closed-form
        estimate of the largest step count and ``feasible(T) -> bool (n,)``, a cheap
        exact check at other step counts; or None (then a search over ``T``).
    """

    epsilon: Callable
    hints: Callable | None = None
    proposer: Callable | None = None
    sigma_start: Callable | None = None
    max_steps: Callable | None = None


class SearchArgs(NamedTuple):
    """Per-lane data of one calibration search (gathered with the lanes)."""

    extra: tuple  # arrays ``params`` reads
    target: jax.Array
    delta: jax.Array
    hints: object


def lane(x, a):
    """Per-lane constant ``a`` ``(n,)`` broadcast against ``x`` of shape ``(n,)`` or ``(n, m)``."""
    return a[:, None] if jnp.ndim(x) == 2 else a


# ------------------------------------------------------------------------ a generic proposer


def log_secant(first_slope: float = -1.0) -> _solver.Proposer:
    """Secant steps on log ε (not ε) against the search coordinate.

    ε of the SGM is close to a power law in σ, T and q (ε ∝ σ^−p, √T, q with p ≈ 1–2 on
    DP-SGD runs), so log ε is close to linear in the (logarithmic) search coordinate and a
    secant through two points lands near the root; the first step, from one point, assumes
    ``first_slope``. The value the search sees is ε − target, so
    log(ε/target) = log1p(value/target). Non-negative ε and a finite slope of the right sign
    are required; otherwise the solver's safeguards (bisection) take over.
    """

    def init(v0, args, to_x):
        del args, to_x
        return v0, (v0, jnp.full_like(v0, jnp.nan))

    def propose(probe: _solver.Probe, memory, args: SearchArgs):
        v_prev, g_prev = memory
        value = jnp.asarray(probe.value, probe.v.dtype)
        g = jnp.log1p(value / args.target)
        slope = jnp.where(jnp.isnan(g_prev), first_slope, (g - g_prev) / (probe.v - v_prev))
        usable = jnp.isfinite(slope) & (slope < 0) & jnp.isfinite(g)
        v_next = jnp.where(usable, probe.v - g / jnp.where(usable, slope, -1.0), jnp.nan)
        return v_next, (probe.v, g)

    return _solver.Proposer(init, propose)


# --------------------------------------------------------------------------- the RDP model


@functools.lru_cache(maxsize=None)
def rdp_model(orders: tuple, method: str) -> EpsilonModel:
    """The RDP accountant's ε (as :func:`jaxrdp.conversions.epsilon`) with its hints."""
    alpha = np.asarray(orders, dtype=np.float64)

    def per_step(q, sigma):
        return kernels.rdp_core(q[:, None], sigma[:, None], alpha)  # one fast-path call

    def compose(curve, steps, delta):
        total = conversions.scale_rdp(curve, steps[:, None])
        return conversions.epsilon_core(total, jnp.asarray(alpha, curve.dtype), delta,
                                        method)[0].epsilon

    def epsilon(q, sigma, steps, delta):
        curve = per_step(q, sigma)
        return compose(curve, steps, delta), curve

    def hints(target, delta):
        return conversions.rdp_budget(target, delta, alpha, method)

    def sigma_start(budget, q, steps):
        # σ of the q = 1 Gaussian, σ² = T·α / (2 R_α): above every order's root.
        a = np.where(np.isfinite(alpha), alpha, np.inf)
        return jnp.min(jnp.sqrt(a * steps[:, None] / (2.0 * budget)), axis=-1)

    def max_steps(budget, q, sigma, delta, target):
        curve = per_step(q, sigma)
        # T·r_α ≤ R_α for some order  ⇔  T ≤ max_α R_α / r_α (up to rounding).
        ratio = jnp.where(curve > 0, budget / jnp.where(curve > 0, curve, 1.0), jnp.inf)
        steps = jnp.floor(jnp.max(ratio, axis=-1))
        return steps, lambda t: compose(curve, t, delta) <= target

    def proposer(params, refine_start):
        return _rdp_proposer(alpha, params, refine_start)

    return EpsilonModel(epsilon, hints, proposer, sigma_start, max_steps)


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


def _newton(residual, v, iterations: int):
    """Elementwise Newton on ``residual(v)``, decreasing in ``v``, steps capped at 1."""

    def body(_, v):
        f, df = jax.jvp(residual, (v,), (jnp.ones_like(v),))
        usable = jnp.isfinite(f) & jnp.isfinite(df) & (df < 0)
        step = jnp.where(usable, -f / jnp.where(usable, df, -1.0), jnp.where(f > 0, 1.0, -1.0))
        step = jnp.where(jnp.isnan(f), 0.0, step)
        return v + jnp.clip(step, -1.0, 1.0)

    return jax.lax.fori_loop(0, iterations, body, v)


def _model_root(alpha, params, to_x, args: SearchArgs, v_here, gap, gap_slope, *,
                full: int = 0, keep: int = 0, more: int, idx=None):
    """Smallest per-order root of the corrected model, i.e. where the first order fits.

    Per order, ``model(v) + gap + gap_slope·(v − v_here) = target(v)`` is solved by Newton
    steps on the cheap model from ``v_here``: either ``full`` steps for every order and
    then ``more`` steps for the ``keep`` orders whose roots are smallest so far, or
    ``more`` steps for the orders ``idx`` ``(n, m)`` given. Returns the smallest root
    ``(n,)`` and the orders solved for ``(n, m)``.
    """
    finite = np.isfinite(alpha)
    alpha = np.where(finite, alpha, 2.0)
    budget = args.hints

    def residual(v, alpha, budget, gap, gap_slope, finite):
        q, sigma, steps = params(to_x(v), args.extra)
        target = _logmath.log_expm1((alpha - 1.0) * budget / steps)
        value = (_log_excess_model(q, sigma, alpha) - target + gap
                 + gap_slope * (v - v_here[:, None]))
        return jnp.where(finite, value, jnp.inf)

    n, k = budget.shape
    if idx is None:
        start = jnp.broadcast_to(v_here[:, None], (n, k))
        roots = _newton(lambda v: residual(v, alpha, budget, gap, gap_slope, finite), start, full)
        roots = jnp.where(jnp.isnan(roots), jnp.inf, roots)
        _, idx = jax.lax.top_k(-roots, min(keep, k))
        start = jnp.take_along_axis(roots, idx, axis=1)
    else:
        start = jnp.broadcast_to(v_here[:, None], idx.shape)
    pick = functools.partial(jnp.take_along_axis, indices=idx, axis=1)
    roots = _newton(
        lambda v: residual(v, jnp.asarray(alpha, gap.dtype)[idx], pick(budget), pick(gap),
                           pick(gap_slope), jnp.asarray(finite)[idx]),
        start,
        more,
    )
    return jnp.min(jnp.where(jnp.isnan(roots), jnp.inf, roots), axis=-1), idx


class _Memory(NamedTuple):
    v_prev: jax.Array
    gap_prev: jax.Array  # (n, K) model correction at the previous point
    keep: jax.Array  # (n, m) orders the model is solved for
    has_prev: jax.Array


def _rdp_proposer(alpha, params, refine_start: bool) -> _solver.Proposer:
    """Next points from per-order models corrected on the exact curve.

    The low- and top-term model of ``log(A_α − 1)`` (:func:`_log_excess_model`) plus a
    correction measured on the exact curve at the last two points (its value and its
    secant slope in the search coordinate), solved per order by Newton steps on the cheap
    model; the proposal is the smallest per-order root (one order within its budget
    suffices). Typically 3–5 curve evaluations per target.
    """
    am1 = np.where(np.isfinite(alpha), alpha - 1.0, 1.0)
    alpha_model = np.where(np.isfinite(alpha), alpha, 2.0)

    def init(v0, args: SearchArgs, to_x):
        n, k = args.hints.shape
        zeros = jnp.zeros((n, k), v0.dtype)
        memory = _Memory(v0, zeros, jnp.zeros((n, min(_NEWTON_STEP["keep"], k)), jnp.int32),
                         jnp.zeros((n,), bool))
        if not refine_start:
            return v0, memory
        v, _ = _model_root(alpha, params, to_x, args, v0, zeros, zeros, **_NEWTON_START)
        return v, memory

    def propose(probe: _solver.Probe, memory: _Memory, args: SearchArgs):
        q, sigma, _ = params(probe.x, args.extra)
        gap = _logmath.log_expm1(am1 * probe.aux) - _log_excess_model(
            q[:, None], sigma[:, None], alpha_model)
        gap = jnp.where(jnp.isfinite(gap), gap, 0.0)
        dv = (probe.v - memory.v_prev)[:, None]
        usable = memory.has_prev[:, None] & (jnp.abs(dv) > 1e-12)
        slope = jnp.where(usable, (gap - memory.gap_prev) / jnp.where(usable, dv, 1.0), 0.0)
        slope = jnp.clip(slope, -_MAX_GAP_SLOPE, _MAX_GAP_SLOPE)
        solve = functools.partial(_model_root, alpha, params, probe.to_x, args, probe.v, gap,
                                  slope)

        # The orders worth solving for are re-selected among all in the first
        # iterations; later, near the root, the last selection is kept, except for the
        # few stragglers left in a gathered batch, for which re-selecting is cheap.
        def reselect():
            return solve(**_NEWTON_STEP)

        def reuse():
            return solve(more=_NEWTON_STEP["more"], idx=memory.keep)

        if probe.full_batch:
            proposal, keep = jax.lax.cond(probe.iteration < _RESELECT, reselect, reuse)
        else:
            proposal, keep = reselect()
        return proposal, _Memory(probe.v, gap, keep, jnp.ones_like(memory.has_prev))

    return _solver.Proposer(init, propose)
