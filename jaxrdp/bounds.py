"""Closed-form bounds on the Rényi DP of subsampled mechanisms, from the papers.

These are the formulas the exact kernel :func:`jaxrdp.rdp` is compared against:

* :func:`theorem11_rdp` and :func:`theorem11_max_order`: Mironov, Talwar and Zhang
  (2019), Theorem 11, ``ε(α) ≤ 2q²α/σ²`` under conditions (4) and (5) on ``α`` — a
  guarantee, for Poisson sampling and add/remove-one neighbours (like :func:`jaxrdp.rdp`).
* :func:`abadi_asymptotic_rdp` and :func:`abadi_conditions`: the leading term
  ``q²α/((1−q)σ²)`` of Abadi et al. (2016) as summarised in Table 1 of Mironov et al. —
  an *asymptotic* expression for ``q → 0`` that drops an ``O(q³α³/σ³)`` term, **not** a
  guarantee.
* :func:`generic_subsampling_rdp`: the generic RDP subsampling bound of Claim 24 in the
  "Rényi DP" blog post (part 2), for fixed-size sampling without replacement and
  replace-one neighbours — a different neighbouring relation from the SGM kernel's.

Conventions: NumPy broadcasting over all arguments; Python/NumPy (and float64 JAX)
inputs compute in float64 inside a local ``jax.enable_x64`` scope and return float64 JAX
arrays, other JAX arrays compute in their own dtype; concrete out-of-domain inputs raise
``ValueError`` naming the argument; under ``jit`` out-of-domain lanes give NaN.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxrdp import _precision, _solver, _validate

__all__ = [
    "THEOREM11_MAX_Q",
    "THEOREM11_MIN_SIGMA",
    "Theorem11Bound",
    "Theorem11MaxOrder",
    "abadi_asymptotic_rdp",
    "abadi_conditions",
    "generic_subsampling_rdp",
    "theorem11_max_order",
    "theorem11_rdp",
]

#: Largest sampling rate allowed by Theorem 11 (``q ≤ 1/5``).
THEOREM11_MAX_Q = 0.2
#: Smallest noise multiplier allowed by Theorem 11 (``σ ≥ 4``).
THEOREM11_MIN_SIGMA = 4.0

# Bisection over log(α − 1) in theorem11_max_order: bracket start and static step counts.
_MIN_ORDER_OFFSET = 1e-6
_FLOAT64_BISECTION_STEPS = 64
_FLOAT32_BISECTION_STEPS = 40
_BOUNDARY_BACKOFF = 1e-12


class Theorem11Bound(NamedTuple):
    """Result of :func:`theorem11_rdp` (a pytree; unpacks as ``bound, valid``)."""

    bound: jax.Array
    """``2q²α/σ²``, computed everywhere; a guarantee only where ``valid``."""
    valid: jax.Array
    """Boolean mask: the hypotheses of Theorem 11 hold (q ≤ 1/5, σ ≥ 4, (4), (5))."""


class Theorem11MaxOrder(NamedTuple):
    """Result of :func:`theorem11_max_order` (a pytree)."""

    alpha_max: jax.Array
    """Largest α covered by Theorem 11: it applies exactly for ``1 < α ≤ alpha_max``.
    ``1`` (an empty range) where ``q > 1/5`` or ``σ < 4``."""
    alpha_max_cond4: jax.Array
    """Largest α satisfying condition (4) alone (NaN where ``σ < 4``)."""
    alpha_max_cond5: jax.Array
    """Largest α satisfying condition (5) alone (NaN where ``σ < 4``)."""


_call = _precision.call
_V = _validate
_ORDER = _V.Range(low=1.0, low_inclusive=False)
#: The domain of each public function's arguments (eager errors and traced masks).
_SGM_ARGS = _V.Spec(q=_V.UNIT, sigma=_V.NONNEGATIVE, alpha=_ORDER)
_MAX_ORDER_ARGS = _V.Spec(q=_V.Range(low=0.0, high=1.0, low_inclusive=False),
                          sigma=_V.NONNEGATIVE)
_GENERIC_ARGS = _V.Spec(base_rdp=_V.NONNEGATIVE, orders=_ORDER, r=_V.UNIT)


# --------------------------------------------------------------------------- Theorem 11


def _log_l(q, d):
    """``L = ln(1 + 1/(q(α−1)))`` with ``d = α − 1``, without overflow or cancellation."""
    qd = q * d
    big = qd >= 1.0
    return jnp.where(
        big,
        jnp.log1p(1.0 / jnp.where(big, qd, 1.0)),
        jnp.log1p(qd) - jnp.log(jnp.where(big, 1.0, qd)),
    )


def _conditions(q, sigma, d):
    """Conditions (4) and (5) of Theorem 11 at ``α = 1 + d``; ``q, d > 0``, ``σ > 0``."""
    alpha = 1.0 + d
    big_l = _log_l(q, d)
    half_s2 = 0.5 * sigma * sigma
    two_log_sigma = 2.0 * jnp.log(sigma)
    cond4 = alpha <= half_s2 * big_l - two_log_sigma
    # L + ln(qα) = ln(qα + α/(α−1)) > 0: the denominator of (5) is positive.
    denominator = jnp.log(q * alpha + alpha / d) + 1.0 / (2.0 * sigma * sigma)
    cond5 = alpha <= (half_s2 * big_l * big_l - np.log(5.0) - two_log_sigma) / denominator
    return cond4, cond5


@jax.jit
def _theorem11_jit(q, sigma, alpha):
    q, sigma, alpha = jnp.broadcast_arrays(q, sigma, alpha)
    invalid = _SGM_ARGS.invalid(q, sigma, alpha)
    zero = (q == 0) | jnp.isposinf(sigma)
    safe_sigma = jnp.where(zero | (sigma == 0), 1.0, sigma)
    ratio = q / safe_sigma
    bound = 2.0 * ratio * ratio * alpha
    bound = jnp.where(sigma == 0, jnp.inf, bound)
    bound = jnp.where(zero, 0.0, bound)
    bound = jnp.where(invalid, jnp.nan, bound)

    hypotheses = (
        (q > 0)
        & (q <= THEOREM11_MAX_Q)
        & (sigma >= THEOREM11_MIN_SIGMA)
        & jnp.isfinite(sigma)
        & jnp.isfinite(alpha)
        & ~invalid
    )
    safe_q = jnp.where(hypotheses, q, 0.1)
    safe_s = jnp.where(hypotheses, sigma, 5.0)
    safe_d = jnp.where(hypotheses, alpha - 1.0, 1.0)
    cond4, cond5 = _conditions(safe_q, safe_s, safe_d)
    return Theorem11Bound(bound, hypotheses & cond4 & cond5)


def theorem11_rdp(q, sigma, alpha):
    """Closed-form RDP bound ``2q²α/σ²`` of the SGM and where it is a guarantee.

    Theorem 11: if ``q ≤ 1/5``, ``σ ≥ 4`` and ``α`` satisfies

    * (4) ``1 < α ≤ ½σ²L − 2 ln σ`` and
    * (5) ``α ≤ (½σ²L² − ln 5 − 2 ln σ) / (L + ln(qα) + 1/(2σ²))``,

    with ``L = ln(1 + 1/(q(α−1)))``, then the Sampled Gaussian Mechanism (Poisson
    sampling at rate ``q``, noise multiplier ``σ``, add/remove-one neighbours) is
    ``(α, 2q²α/σ²)``-RDP.

    Args:
      q: sampling rate(s) in ``[0, 1]``; broadcastable with the others.
      sigma: noise multiplier(s) ``σ ≥ 0``.
      alpha: Rényi order(s) ``α > 1`` (``+inf`` allowed).

    Returns:
      A :class:`Theorem11Bound` ``(bound, valid)`` of the broadcast shape. ``bound`` is
      ``2q²α/σ²`` everywhere (``0`` for ``q = 0`` or ``σ = inf``, ``inf`` for ``σ = 0 < q``);
      ``valid`` is True exactly where the theorem's hypotheses hold. It is False at
      ``q = 0`` (``L`` is undefined; the bound ``0`` is trivially exact there), at infinite
      ``α`` or ``σ``, and in invalid lanes, whose ``bound`` is NaN under ``jit``.

    Raises:
      ValueError: with concrete out-of-domain inputs, naming the argument.

    References:
      Mironov, Talwar, Zhang (2019), "Rényi Differential Privacy of the Sampled Gaussian
      Mechanism", Sec. 3.2, Theorem 11 (conditions (4) and (5), from Lemma 10) and
      Table 1.
    """
    _SGM_ARGS.check(q, sigma, alpha)
    return _call(_theorem11_jit, q, sigma, alpha)


def _max_order(q, sigma, condition: int, steps: int):
    """Largest ``α`` satisfying ``condition`` (4 or 5), by bisection on ``log(α − 1)``.

    ``q ∈ (0, 1]`` and finite ``σ ≥ 4``. Each condition holds on an interval
    ``(1, α*]`` (see :func:`theorem11_max_order`); the bracket ``[1e-6, d_hi]`` has the
    condition true at its left end and false at its right end.
    """
    log_5 = np.log(5.0)
    d_hi = 2.0 * jnp.maximum(
        sigma / jnp.sqrt(2.0 * q),
        sigma / (q * jnp.sqrt(2.0 * log_5 + 4.0 * jnp.log(sigma))),
    ) + 1.0

    def holds(d):
        cond4, cond5 = _conditions(q, sigma, d)
        return cond4 if condition == 4 else cond5

    lo0 = jnp.full_like(q, np.log(_MIN_ORDER_OFFSET))
    hi0 = jnp.log(d_hi)

    def holds_at(log_d):
        # Test α exactly as theorem11_rdp will see it: d = (1 + e^{log d}) − 1.
        alpha = 1.0 + jnp.exp(log_d)
        return holds(alpha - 1.0), alpha

    lo, _ = _solver.bisect(lambda log_d: holds_at(log_d)[0], lo0, hi0, steps)
    # Back off by a relative _BOUNDARY_BACKOFF so that the boundary order stays valid
    # when the conditions are re-evaluated in a differently compiled program (rounding
    # there may differ by a few ulps).
    ok, alpha = holds_at(lo + np.log1p(-_BOUNDARY_BACKOFF))
    # The guard is never used for σ ≥ 4 (both conditions hold at α − 1 = 1e-6).
    return jnp.where(ok, alpha, 1.0)


@jax.jit
def _max_order_jit(q, sigma):
    q, sigma = jnp.broadcast_arrays(q, sigma)
    steps = _FLOAT64_BISECTION_STEPS if q.dtype == jnp.float64 else _FLOAT32_BISECTION_STEPS
    invalid = _MAX_ORDER_ARGS.invalid(q, sigma)
    defined = ~invalid & (sigma >= THEOREM11_MIN_SIGMA)
    finite = defined & jnp.isfinite(sigma)
    safe_q = jnp.where(finite, q, 0.1)
    safe_s = jnp.where(finite, sigma, 5.0)
    a4 = _max_order(safe_q, safe_s, 4, steps)
    a5 = _max_order(safe_q, safe_s, 5, steps)
    a4 = jnp.where(finite, a4, jnp.where(defined, jnp.inf, jnp.nan))
    a5 = jnp.where(finite, a5, jnp.where(defined, jnp.inf, jnp.nan))
    applies = defined & (q <= THEOREM11_MAX_Q)
    a_max = jnp.where(applies, jnp.minimum(a4, a5), 1.0)
    a_max = jnp.where(invalid, jnp.nan, a_max)
    return Theorem11MaxOrder(a_max, a4, a5)


def theorem11_max_order(q, sigma):
    """Largest Rényi order covered by Theorem 11, overall and per condition.

    Both conditions hold on an interval ``1 < α ≤ α*``: the right-hand side of (4)
    decreases in ``α`` (``L`` does), and (5), written as ``g(α) = α(L + ln(qα) + 1/2σ²)
    − (½σ²L² − ln 5 − 2 ln σ) ≤ 0``, has ``g → −∞`` as ``α → 1`` and ``g' > 0`` wherever
    the numerator ``½σ²L² − ln 5 − 2 ln σ`` is positive (which (5) requires) when
    ``σ ≥ 4``. So each maximum is found by bisection on ``ln(α − 1)`` with a static step
    count (64 in float64, 40 otherwise), returning the last point that satisfies the
    condition, with ``α − 1`` lowered by a relative ``1e-12`` so that
    ``theorem11_rdp(q, sigma, alpha_max).valid`` is True despite rounding. These are the
    curves of Figure 1 (left) of the paper.

    Args:
      q: sampling rate(s) in ``(0, 1]``; broadcastable with ``sigma``.
      sigma: noise multiplier(s) ``σ ≥ 0``.

    Returns:
      A :class:`Theorem11MaxOrder` ``(alpha_max, alpha_max_cond4, alpha_max_cond5)``.
      ``alpha_max = min`` of the two where ``q ≤ 1/5`` and ``σ ≥ 4``, and ``1`` (no order
      covered) elsewhere. The per-condition maxima are given for any ``q ∈ (0, 1]`` with
      ``σ ≥ 4`` and are NaN for ``σ < 4``, where the interval property is not
      established. ``σ = +inf`` gives ``+inf``. Invalid lanes give NaN under ``jit``.

    Raises:
      ValueError: with concrete out-of-domain inputs (including ``q = 0``).

    References:
      Mironov, Talwar, Zhang (2019), Theorem 11 and Figure 1 (left).
    """
    _MAX_ORDER_ARGS.check(q, sigma)
    return _call(_max_order_jit, q, sigma)


# --------------------------------------------------------------------------- Abadi et al.


@jax.jit
def _abadi_jit(q, sigma, alpha):
    q, sigma, alpha = jnp.broadcast_arrays(q, sigma, alpha)
    invalid = _SGM_ARGS.invalid(q, sigma, alpha)
    zero = (q == 0) | jnp.isposinf(sigma)
    infinite = ~zero & ((sigma == 0) | (q == 1) | jnp.isposinf(alpha))
    regular = ~(zero | infinite | invalid)
    safe_q = jnp.where(regular, q, 0.5)
    safe_s = jnp.where(regular, sigma, 1.0)
    safe_a = jnp.where(regular, alpha, 2.0)
    ratio = safe_q / safe_s
    value = ratio * ratio * safe_a / (1.0 - safe_q)
    value = jnp.where(zero, 0.0, jnp.where(infinite, jnp.inf, value))
    return jnp.where(invalid, jnp.nan, value)


def abadi_asymptotic_rdp(q, sigma, alpha):
    """Asymptotic RDP ``q²α / ((1−q)σ²)`` of Abadi et al. — **not a guarantee**.

    This is the leading term of the moments-accountant bound of Abadi et al. (2016) as
    listed in Table 1 of Mironov et al. (2019): the SGM is
    ``(α, q²α/((1−q)σ²) + O(q³α³/σ³))``-RDP *as q → 0*, under ``q < 1/(16σ)`` and
    ``α ≤ 1 + σ² ln(1/(qσ))`` (:func:`abadi_conditions`). The dropped ``O(q³α³/σ³)`` term
    is positive, so this expression can be *smaller than the true RDP* — for large
    ``α`` or large ``q`` (see ``tests/test_bounds.py`` for measured cases). Use it for
    comparisons and plots only; :func:`jaxrdp.rdp` is the exact value.

    Args:
      q: sampling rate(s) in ``[0, 1]``; broadcastable with the others.
      sigma: noise multiplier(s) ``σ ≥ 0``.
      alpha: Rényi order(s) ``α > 1`` (``+inf`` allowed).

    Returns:
      Array of the broadcast shape: ``q²α/((1−q)σ²)``; ``0`` for ``q = 0`` or
      ``σ = inf``; ``inf`` for ``q = 1``, ``σ = 0`` or ``α = inf`` (with ``q > 0``). NaN for
      invalid inputs under ``jit``.

    Raises:
      ValueError: with concrete out-of-domain inputs, naming the argument.

    References:
      Abadi, Chu, Goodfellow, McMahan, Mironov, Talwar, Zhang (2016), "Deep Learning
      with Differential Privacy", Lemma 3 / Appendix B; as summarised in Mironov,
      Talwar, Zhang (2019), Table 1.
    """
    _SGM_ARGS.check(q, sigma, alpha)
    return _call(_abadi_jit, q, sigma, alpha)


@jax.jit
def _abadi_conditions_jit(q, sigma, alpha):
    q, sigma, alpha = jnp.broadcast_arrays(q, sigma, alpha)
    ok = (q > 0) & (sigma > 0) & jnp.isfinite(sigma) & (alpha > 1) & jnp.isfinite(alpha)
    safe_q = jnp.where(ok, q, 0.01)
    safe_s = jnp.where(ok, sigma, 1.0)
    cond_q = safe_q < 1.0 / (16.0 * safe_s)
    cond_alpha = alpha <= 1.0 + safe_s * safe_s * -jnp.log(safe_q * safe_s)
    return ok & cond_q & cond_alpha


def abadi_conditions(q, sigma, alpha):
    """Mask of the regime of Abadi et al.'s asymptotic bound (Table 1 of Mironov et al.).

    Args:
      q: sampling rate(s) in ``[0, 1]``; broadcastable with the others.
      sigma: noise multiplier(s) ``σ ≥ 0``.
      alpha: Rényi order(s) ``α > 1``.

    Returns:
      Boolean array of the broadcast shape: ``q < 1/(16σ)`` and
      ``α ≤ 1 + σ² ln(1/(qσ))`` (False for ``q = 0``, ``σ ∈ {0, inf}``, ``α = inf``).
      Even inside this regime :func:`abadi_asymptotic_rdp` is not an upper bound.

    Raises:
      ValueError: with concrete out-of-domain inputs, naming the argument.

    References:
      Mironov, Talwar, Zhang (2019), Table 1; Abadi et al. (2016), Theorem 1.
    """
    _SGM_ARGS.check(q, sigma, alpha)
    return _call(_abadi_conditions_jit, q, sigma, alpha)


# --------------------------------------------------------------------------- Claim 24


@jax.jit
def _generic_jit(base_rdp, orders, r):
    base_rdp, orders, r = jnp.broadcast_arrays(base_rdp, orders, r)
    invalid = _GENERIC_ARGS.invalid(base_rdp, orders, r)
    zero = (r == 0) | (base_rdp == 0)
    limit = ~zero & (jnp.isposinf(orders) | jnp.isposinf(base_rdp))
    regular = ~(invalid | zero | limit)
    safe_eps = jnp.where(regular, base_rdp, 1.0)
    safe_lm1 = jnp.where(regular, orders - 1.0, 1.0)
    safe_r = jnp.where(regular, r, 0.5)
    t = safe_lm1 * safe_eps  # (λ − 1) ε(λ) > 0
    small = t <= 1.0
    # log(1 + r(e^t − 1)): log1p form for small t (keeps tiny values exact), and
    # log((1 − r) + r e^t) as a log-sum-exp of non-negative terms for large t.
    small_value = jnp.log1p(safe_r * jnp.expm1(jnp.where(small, t, 1.0)))
    large_value = jnp.logaddexp(jnp.log1p(-safe_r), jnp.log(safe_r) + jnp.where(small, 2.0, t))
    value = jnp.where(small, small_value, large_value) / safe_lm1
    # Limits: λ → ∞ or ε = ∞ with r > 0 give ε(λ) itself (the log is dominated by t).
    value = jnp.where(limit, base_rdp, value)
    value = jnp.where(zero, 0.0, value)
    return jnp.where(invalid, jnp.nan, value)


def generic_subsampling_rdp(base_rdp, orders, r):
    """Generic RDP bound for subsampling without replacement (fixed sample size).

    Claim 24: let ``N`` be ``(λ, ε(λ))``-RDP on datasets of size ``m``, and let ``M`` run
    ``N`` on a uniformly random size-``m`` subset of its size-``n`` input, ``r = m/n``.
    Then ``M`` is ``(λ, log(1 + r(e^{(λ−1)ε(λ)} − 1)) / (λ − 1))``-RDP.

    Neighbouring relation: datasets of the *same* size ``n`` differing in the value of one
    entry (replace-one / substitution), and ``ε(λ)`` must be the base mechanism's RDP
    for that relation on size-``m`` inputs (for a Gaussian sum of per-example vectors of
    norm ≤ C, replacing one changes the sum by up to 2C). This is *not* the relation of
    :func:`jaxrdp.rdp` (Poisson sampling, add/remove-one), so the two are not comparable
    as bounds. The result is linear in ``r`` for small ``r`` (``≈ r(e^{(λ−1)ε} − 1)/(λ−1)``),
    never exceeds ``ε(λ)``, and equals it at ``r = 1``.

    Args:
      base_rdp: the base mechanism's RDP ``ε(λ) ≥ 0`` at ``orders`` (``+inf`` allowed), or
        a callable mapping ``orders`` to it (e.g. ``lambda a: a / (2 * sigma**2)``).
      orders: Rényi orders ``λ > 1`` (``+inf`` allowed); broadcastable with the others.
      r: sampling ratio(s) ``m/n ∈ [0, 1]``.

    Returns:
      Array of the broadcast shape: the subsampled RDP bound. ``0`` where ``r = 0`` or
      ``ε(λ) = 0``; ``ε(λ)`` where ``λ = inf`` or ``ε(λ) = inf`` (with ``r > 0``). NaN for
      invalid inputs under ``jit``.

    Raises:
      ValueError: with concrete out-of-domain inputs, naming the argument.

    References:
      "Rényi differential privacy, part 2" (blog post, 2019), Claim 24 (with Claim 25
      for the proof); cf. Wang, Balle, Kasiviswanathan (2019) for tighter subsampling
      bounds under the same relation.
    """
    if callable(base_rdp):
        _validate.check_range("orders", orders, **_ORDER._asdict())
        base_rdp = base_rdp(orders)
    _GENERIC_ARGS.check(base_rdp, orders, r)
    return _call(_generic_jit, base_rdp, orders, r)

