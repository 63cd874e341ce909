"""RDP of the Gaussian mechanism on fixed-size batches drawn without replacement.

Under ``jit`` batch shapes are static, so JAX training loops usually draw a batch of
exactly ``B`` of the ``N`` records at each step (sampling *without replacement*, "WOR").
That is not the Sampled Gaussian Mechanism of :func:`jaxrdp.rdp` (Poisson sampling), and
its guarantee is a different statement:

* **Poisson sampling** (:func:`jaxrdp.rdp`, :func:`jaxrdp.accountant.compose`) is
  analysed for *add/remove-one* neighbours: data sets that differ by one record being
  present or absent. ``σ`` is the noise standard deviation divided by the add/remove
  sensitivity (the clipping norm ``C`` for a sum of clipped per-example gradients).
* **Fixed-size sampling without replacement** (this module) is analysed for
  *replace-one* neighbours: data sets of the same, public size ``N`` that differ in the
  value of one record. ``σ`` is the noise standard deviation divided by the replace-one
  sensitivity, which for a sum of per-example gradients clipped to norm ``C`` is ``2C``
  (one gradient is swapped for another): **pass** ``sigma = noise_std / (2 C)``.

An ε under replace-one and an ε under add/remove-one are not the same promise, so the two
numbers must not be compared as if one were tighter: replacing a record is removing one
and adding another, so an add/remove guarantee ``(ε, δ)`` implies a replace-one guarantee
``(2ε, (1 + e^ε) δ)``, while a replace-one guarantee says nothing about a data set of a
different size. Report which relation an ε refers to.

The bound (integer orders α ≥ 2) is Theorem 9 of Wang, Balle and Kasiviswanathan (2019)
with the Gaussian's RDP ``ε(j) = j/(2σ²)`` inside (so ``ε(∞) = ∞``) and, for
``α ≤ 256``, its strengthened form for the Gaussian (Theorem 27 of the arXiv version,
1808.00087), exactly as dp_accounting's ``_compute_rdp_sample_wor_gaussian`` evaluates
it, with ``γ = B/N``::

    A_α = 1 + γ² C(α,2) min(4(e^{ε(2)} − 1), 2 e^{ε(2)})
            + Σ_{j=3..α} γ^j C(α,j) · min(4 √(D_{2⌊j/2⌋} D_{2⌈j/2⌉}), 2 e^{(j−1)ε(j)})
    ε'(α) = log A_α / (α − 1)

where ``D_l = Δ^l f(−1)`` is the ``l``-th forward difference of ``f(x) = e^{x ε(x+1)}``
at ``−1`` (the min's first argument is dropped for ``α > 256``, as dp_accounting does).
``D_l = E[x^l]`` with ``x = expm1(Z/σ − 1/(2σ²))``, ``Z ∼ N(0, 1)``: a non-negative
quantity for even ``l`` that its alternating binomial sum computes with heavy
cancellation when ``σ`` is large. Here it is computed as an *upper bound* with a stated
error: for ``σ < 3`` by the alternating sum in log space plus a forward error bound; for
``σ ≥ 3`` by the positive series ``D_l = l! Σ_k c^k a_{k,l} / k!`` (``c = 1/(2σ²)``,
``a_{k,l} ≥ 0`` the coefficients of ``(y(y−1))^k`` in the falling-factorial basis,
obtained by a positive recursion) with a bound on its tail. Every term then enters the
sum rounded outwards (see :func:`log_moment`), so the result is never below the exact
value of the formula.

The result is also capped by the Gaussian's own RDP ``α/(2σ²)`` (subsampling never
hurts: Claim 24 of the RDP blog post at ``r = 1``, or post-processing), which only
matters for ``γ`` near 1, and equals it at ``γ = 1`` as in dp_accounting.

**Fractional orders** use the chord of ``K(α) = (α − 1) ε'(α)`` between the integer
neighbours ``⌊α⌋`` and ``⌈α⌉`` (with ``K(1) = 0``), i.e.
``ε'(α) = ((1 − t) K(⌊α⌋) + t K(⌈α⌉)) / (α − 1)``, ``t = α − ⌊α⌋`` (Corollary 10 of
Wang et al., the rule dp_accounting uses). It is an upper bound: for each pair of
neighbouring data sets ``K_{P,Q}(α) = log E_Q[(P/Q)^α]`` is convex in ``α`` (Hölder's
inequality: a log-moment-generating function), so it lies below its chord between any two
orders; each chord end is at most our integer-order bound; hence the chord of our bounds
is at least ``K_{P,Q}(α)`` for every pair, and so at least the supremum over pairs,
which is ``(α − 1)`` times the RDP.

Conventions: Python/NumPy inputs compute in float64 in a local ``jax.enable_x64`` scope;
JAX arrays and tracers in their own dtype (float32 is sound but looser: its outward
rounding margins make it up to ``~1e-2`` relative above the float64 value, measured
``2e-4`` to ``9e-3`` on the default orders). Concrete invalid inputs raise ``ValueError``
naming the argument; under ``jit`` invalid lanes give NaN.

References:
  Y.-X. Wang, B. Balle, S. Kasiviswanathan (2019), "Subsampled Rényi Differential
  Privacy and Analytical Moments Accountant", AISTATS, Theorem 9, Corollary 10 and
  (arXiv:1808.00087) Theorem 27. "Rényi differential privacy, part 2" (blog post),
  Claim 24 (:func:`jaxrdp.bounds.generic_subsampling_rdp`, a looser bound for the same
  relation).
"""

from __future__ import annotations

import functools
import math
import numbers

import jax
import jax.numpy as jnp
import numpy as np

from jaxrdp import _precision, _validate

__all__ = [
    "FORWARD_DIFFERENCE_MAX_ORDER",
    "MAX_ORDER",
    "TRACED_MAX_ORDER",
    "log_moment",
    "rdp",
    "sampling_ratio",
]

#: Orders up to which the forward-difference (Theorem 27) term is used, as in dp_accounting.
FORWARD_DIFFERENCE_MAX_ORDER = 256
#: Largest order evaluated when the orders are traced (static term count); larger orders
#: give ``+inf`` (no guarantee from that order, which is sound). With concrete orders the
#: largest finite order sets the term count, up to :data:`MAX_ORDER`.
TRACED_MAX_ORDER = 1024
#: Largest order ever evaluated (the sum has α terms per order); larger orders give ``+inf``.
MAX_ORDER = 4096

# D_l is computed by the alternating sum below this σ and by the positive series above.
_SERIES_SIGMA = 3.0
# Most series iterations: for c ≤ 1/18 and l ≤ 256 the terms peak near k ≈ c·l² ≤ 3641;
# the loop stops once the (bounded) tail is below one ulp of every sum, and the tail bound
# is added to the result in any case.
_SERIES_TERMS = 8192
_SERIES_BLOCK = 128
# Generous multiples of the unit roundoff for the forward error bounds.
_LGAMMA_ULPS = 16.0
_TERM_ULPS = 8.0


def _falling_factorial_recursion_log(log_c, lm, a1, a2, lv, k):
    """One step ``v_{k+1}(m) = c/(k+1)·(v_k(m−2) + 2(m−1) v_k(m−1) + m(m−1) v_k(m))``."""
    ninf = jnp.full((1,), -jnp.inf, lv.dtype)
    sh1 = jnp.concatenate([ninf, lv[:-1]])
    sh2 = jnp.concatenate([ninf, ninf, lv[:-2]])
    stacked = jnp.stack([sh2, a1 + sh1, a2 + lv])
    return log_c - jnp.log(k + 1.0) + jax.nn.logsumexp(stacked, axis=0)


def _log_d_series(c, max_l: int):
    """Upper bounds on ``log D_l``, ``l = 0..max_l``, by the positive series (``c ≤ 1/18``)."""
    dtype = c.dtype
    u = float(jnp.finfo(dtype).eps)
    m = jnp.arange(max_l + 1, dtype=dtype)
    a1 = jnp.where(m >= 2, jnp.log(jnp.maximum(2.0 * (m - 1.0), 1.0)), -jnp.inf)
    a1 = jnp.where(m == 1, -jnp.inf, a1)
    a2 = jnp.where(m >= 2, jnp.log(jnp.maximum(m * (m - 1.0), 1.0)), -jnp.inf)
    log_c = jnp.log(c)
    lv0 = jnp.where(m == 0, 0.0, -jnp.inf).astype(dtype)

    def tail(lv, k):
        # The recursion for entries m ≤ l reads only entries ≤ l, with coefficients summing
        # to ≤ (l+1)², so the prefix sums P_k(l) = Σ_{m≤l} v_k(m) obey P_{k+1}(l) ≤ r P_k(l),
        # r = c (l+1)² / (k+1); the tail after term k is ≤ P_k(l) r/(1 − r) where r < 1.
        r = c * (m + 1.0) ** 2 / (k + 1.0)
        log_prefix = jax.lax.cumlogsumexp(lv)
        safe_r = jnp.minimum(r, 0.5)
        return jnp.where(r < 0.5, log_prefix + jnp.log(safe_r) - jnp.log1p(-safe_r), jnp.inf)

    def cond(carry):
        k, lv, acc = carry
        converged = jnp.all(tail(lv, k) <= acc + np.log(u))
        return (k < _SERIES_TERMS) & ~converged

    def one(_, carry):
        k, lv, acc = carry
        lv = _falling_factorial_recursion_log(log_c, m, a1, a2, lv, k)
        return k + 1.0, lv, jnp.logaddexp(acc, lv)

    def body(carry):  # the convergence test runs once per block of terms
        return jax.lax.fori_loop(0, _SERIES_BLOCK, one, carry)

    k, lv, acc = jax.lax.while_loop(cond, body, (jnp.zeros((), dtype), lv0, lv0))
    log_tail = tail(lv, k)
    total = jnp.logaddexp(acc, log_tail)
    # Each step has relative error ≤ ~6u; k steps accumulate ≤ 6uk (plus lgamma below).
    total = total + 8.0 * u * k
    log_fact = jax.lax.lgamma(m + 1.0)
    return total + log_fact * (1.0 + _LGAMMA_ULPS * u)


def _log_d_alternating(c, max_l: int):
    """Upper bounds on ``log D_l`` by the alternating sum in log space plus its error bound."""
    dtype = c.dtype
    u = float(jnp.finfo(dtype).eps)
    ll = jnp.arange(max_l + 1, dtype=dtype)[:, None]
    ii = jnp.arange(max_l + 1, dtype=dtype)[None, :]
    valid = ii <= ll
    safe_i = jnp.where(valid, ii, 0.0)
    log_binom = (
        jax.lax.lgamma(ll + 1.0) - jax.lax.lgamma(safe_i + 1.0) - jax.lax.lgamma(ll - safe_i + 1.0)
    )
    expo = c * safe_i * (safe_i - 1.0)
    t = jnp.where(valid, log_binom + expo, -jnp.inf)
    top = jnp.max(t, axis=1, keepdims=True)
    w = jnp.exp(t - top)
    sign = jnp.where(jnp.mod(ll - ii, 2.0) == 0, 1.0, -1.0)
    signed = jnp.sum(jnp.where(valid, sign * w, 0.0), axis=1)
    absolute = jnp.sum(w, axis=1)
    # Each term has relative error ≤ u·(κ|t| + 4) (lgamma, the product, exp, the shift);
    # summing l + 1 terms adds ≤ (l + 1) u Σ|terms|.
    big_t = jnp.max(jnp.where(valid, jnp.abs(log_binom) + jnp.abs(expo), 0.0), axis=1)
    rel = u * (_LGAMMA_ULPS * big_t + ll[:, 0] + 8.0)
    upper = signed + rel * absolute
    upper = jnp.maximum(upper, rel * absolute)  # D_l > 0: never let the bound reach 0
    return top[:, 0] + jnp.log(upper)


def _log_d(sigma, max_l: int):
    """Upper bounds on ``log D_l = log E[expm1(Z/σ − 1/2σ²)^l]`` for ``l = 0..max_l``."""
    c = 0.5 / (sigma * sigma)
    return jax.lax.cond(
        sigma < _SERIES_SIGMA,
        lambda cc: _log_d_alternating(cc, max_l),
        lambda cc: _log_d_series(jnp.minimum(cc, 0.5 / _SERIES_SIGMA**2), max_l),
        c,
    )


def _log1p_exp(x):
    """``log(1 + e^x)`` accurate for very negative ``x``."""
    small = jnp.log1p(jnp.exp(jnp.minimum(x, 0.0)))
    return jnp.where(x < 0, small, x + jnp.log1p(jnp.exp(-jnp.abs(x))))


def _log_a_integer(log_gamma, sigma, alpha, log_d, max_order: int):
    """Upper bounds on ``log A_α`` for integer ``α ∈ [1, max_order]`` (shape of ``alpha``).

    ``log_gamma = log(B/N) < 0``, ``0 < σ < ∞``; ``log_d`` from :func:`_log_d`.
    """
    dtype = alpha.dtype
    u = float(jnp.finfo(dtype).eps)
    c = 0.5 / (sigma * sigma)
    j = jnp.arange(2, max_order + 1, dtype=dtype)  # (J,)
    a = alpha[:, None]
    inside = j[None, :] <= a
    # log k! for the integers k = 0..J, gathered: log C(α, j) for integer α and j.
    log_fact = jax.lax.lgamma(jnp.arange(max_order + 1, dtype=dtype) + 1.0)
    ai = jnp.clip(alpha, 0, max_order).astype(jnp.int32)[:, None]
    ji = jnp.arange(2, max_order + 1, dtype=jnp.int32)[None, :]
    log_binom = log_fact[ai] - log_fact[ji] - log_fact[jnp.clip(ai - ji, 0, max_order)]
    cgf = c * j * (j - 1.0)  # (j − 1) ε(j)
    plain = np.log(2.0) + cgf  # log(2 e^{(j−1)ε(j)})
    eps2 = 2.0 * c
    log_em1 = eps2 + jnp.log(-jnp.expm1(-eps2))  # log(e^{ε(2)} − 1)
    second = jnp.minimum(np.log(4.0) + log_em1, eps2 + np.log(2.0))
    max_l = log_d.shape[0] - 1
    lo = jnp.clip(2.0 * jnp.floor(j / 2.0), 0, max_l).astype(jnp.int32)
    hi = jnp.clip(2.0 * jnp.ceil(j / 2.0), 0, max_l).astype(jnp.int32)
    diff = np.log(4.0) + 0.5 * (log_d[lo] + log_d[hi])
    strengthened = jnp.minimum(diff, plain)
    use_diff = a <= FORWARD_DIFFERENCE_MAX_ORDER
    factor = jnp.where(use_diff, strengthened[None, :], plain[None, :])
    factor = jnp.where(j[None, :] == 2, second, factor)
    log_terms = j[None, :] * log_gamma + log_binom + factor
    log_terms = jnp.where(inside, log_terms, -jnp.inf)
    # Forward error of each log-term (lgamma, products, the Theorem-27 factor) and of the
    # log-sum-exp of ≤ J terms: an absolute bound on the error of log S.
    # (The three lgamma values are each ≤ lgamma(α + 1) in magnitude, a few ulps each.)
    magnitude = jnp.where(
        inside,
        jnp.abs(j[None, :] * log_gamma) + 3.0 * jnp.abs(log_fact[ai])
        + jnp.abs(factor),
        0.0,
    )
    margin = u * (_TERM_ULPS * jnp.max(magnitude, axis=1) + max_order + 8.0)
    log_s = jax.nn.logsumexp(log_terms, axis=1) + margin
    out = _log1p_exp(log_s)
    return jnp.where(alpha <= 1.0, 0.0, out)


def _rdp_one(gamma, sigma, orders, max_order: int):
    """RDP at ``orders`` (1-D) for one scalar ``γ = B/N`` and ``σ``."""
    dtype = orders.dtype
    u = float(jnp.finfo(dtype).eps)
    invalid = (
        jnp.isnan(gamma) | jnp.isnan(sigma) | (gamma < 0) | (gamma > 1) | (sigma < 0)
    )
    bad_order = jnp.isnan(orders) | ~(orders > 1)
    zero = (gamma == 0) | jnp.isposinf(sigma)
    infinite = ~zero & (sigma == 0)
    regular = ~(invalid | zero | infinite)
    safe_g = jnp.where(regular & (gamma < 1), gamma, 0.5)
    safe_s = jnp.where(regular, sigma, 1.0)

    finite = jnp.isfinite(orders) & (orders <= max_order) & ~bad_order
    safe_a = jnp.where(finite, orders, 2.0)
    lo = jnp.floor(safe_a)
    hi = jnp.ceil(safe_a)
    log_d = _log_d(safe_s, FORWARD_DIFFERENCE_MAX_ORDER)
    both = jnp.concatenate([lo, hi])
    log_a = _log_a_integer(jnp.log(safe_g), safe_s, both, log_d, max_order)
    k = orders.shape[0]
    k_lo, k_hi = log_a[:k], log_a[k:]
    t = safe_a - lo
    chord = ((1.0 - t) * k_lo + t * k_hi) * (1.0 + 4.0 * u)
    value = chord / (safe_a - 1.0)
    # Cap by the Gaussian's own RDP (exact at γ = 1), rounded outwards.
    gaussian = safe_a / (2.0 * safe_s * safe_s) * (1.0 + 4.0 * u)
    value = jnp.where(gamma >= 1, gaussian, jnp.minimum(value, gaussian))
    value = jnp.where(finite, value, jnp.inf)
    value = jnp.where(zero, 0.0, jnp.where(infinite, jnp.inf, value))
    return jnp.where(invalid | bad_order, jnp.nan, value)


def _per_cell(one, gamma, sigma, orders, max_order: int):
    """``one(γ, σ, orders, max_order)`` for every cell of the broadcast ``γ, σ``."""
    gamma, sigma = jnp.broadcast_arrays(gamma, sigma)
    # lax.map, not vmap: a vmapped lax.cond would run both D_l branches for every cell.
    flat = jax.lax.map(lambda gs: one(gs[0], gs[1], orders, max_order),
                       (gamma.reshape(-1), sigma.reshape(-1)))
    return flat.reshape(gamma.shape + orders.shape)


@functools.partial(jax.jit, static_argnames=("max_order",))
def _rdp_jit(gamma, sigma, orders, max_order: int):
    return _per_cell(_rdp_one, gamma, sigma, orders, max_order)


def _log_moment_one(gamma, sigma, orders, max_order: int):
    dtype = orders.dtype
    value = _rdp_one(gamma, sigma, orders, max_order)
    at_infinity = jnp.where(value == 0, 0.0, jnp.inf)
    return jnp.where(jnp.isfinite(orders), (orders - 1.0) * value, at_infinity).astype(dtype)


@functools.partial(jax.jit, static_argnames=("max_order",))
def _log_moment_jit(gamma, sigma, orders, max_order: int):
    return _per_cell(_log_moment_one, gamma, sigma, orders, max_order)


# --------------------------------------------------------------------------- arguments


def _is_integral(x) -> bool:
    if isinstance(x, bool):
        return False
    if isinstance(x, (numbers.Integral, np.integer)):
        return True
    arr = np.asarray(x, dtype=np.float64)
    return bool(np.all(np.isfinite(arr) & (arr == np.floor(arr))))


def _check_count(name: str, value) -> None:
    """A concrete positive integer (scalar or array), else ValueError naming ``name``."""
    if not _validate.is_concrete(value):
        return
    if isinstance(value, bool) or not _is_integral(value):
        raise ValueError(f"{name} must be a positive integer; got {name}={value!r}")
    if np.any(np.asarray(value, dtype=np.float64) < 1):
        raise ValueError(f"{name} must be a positive integer; got {name}={value!r}")


def sampling_ratio(batch_size=None, dataset_size=None, q=None):
    """The ratio ``γ = B/N`` of fixed-size sampling, from ``(B, N)``, ``(q, N)``, ``(q, B)``, ``q``.

    Args:
      batch_size: ``B``, a positive integer (or an integer array / traced value).
      dataset_size: ``N ≥ B``, a positive integer.
      q: the ratio itself, in ``[0, 1]``. Given with ``dataset_size`` (or
        ``batch_size``) it must make ``B = qN`` (or ``N = B/q``) an integer, up to a
        relative ``1e-9``; otherwise the batch size it means is ambiguous.

    Returns:
      ``γ`` (a float, or an array for array/traced inputs). Under ``jit``, NaN where ``B`` or
      ``N`` is not a positive integer or ``B > N`` (NaN then propagates to the RDP).

    Raises:
      ValueError: naming the argument: ``B`` or ``N`` not a positive integer,
        ``batch_size > dataset_size``, ``q ∉ [0, 1]``, ``q`` inconsistent with or
        ambiguous given ``B``/``N``, or neither ``q`` nor both sizes given.
    """
    if q is None:
        if batch_size is None or dataset_size is None:
            raise ValueError(
                "fixed-size sampling needs batch_size and dataset_size (or q); got "
                f"batch_size={batch_size!r}, dataset_size={dataset_size!r}"
            )
        _check_count("batch_size", batch_size)
        _check_count("dataset_size", dataset_size)
        if _validate.is_concrete(batch_size, dataset_size):
            b = np.asarray(batch_size, dtype=np.float64)
            n = np.asarray(dataset_size, dtype=np.float64)
            if np.any(b > n):
                raise ValueError(
                    "batch_size must not exceed dataset_size; got "
                    f"batch_size={batch_size!r}, dataset_size={dataset_size!r}"
                )
            return b / n if (b.ndim or n.ndim) else float(b / n)
        b = jnp.asarray(batch_size)
        n = jnp.asarray(dataset_size)
        dtype = jnp.result_type(b.dtype, n.dtype, float)
        b, n = b.astype(dtype), n.astype(dtype)
        bad = (b < 1) | (n < 1) | (b > n) | (b != jnp.floor(b)) | (n != jnp.floor(n))
        return jnp.where(bad, jnp.nan, b / jnp.where(bad, 1.0, n))

    _validate.check_range("q", q, low=0.0, high=1.0)
    if not _validate.is_concrete(q):
        if batch_size is not None or dataset_size is not None:
            raise ValueError("give q alone, or batch_size and dataset_size, when tracing")
        return q
    qf = np.asarray(q, dtype=np.float64)
    if dataset_size is not None:
        _check_count("dataset_size", dataset_size)
        implied = qf * np.asarray(dataset_size, dtype=np.float64)
        if np.any(np.abs(implied - np.round(implied)) > 1e-9 * np.maximum(implied, 1.0)):
            raise ValueError(
                "q is ambiguous for fixed-size sampling: q * dataset_size must be an integer "
                f"batch size; got q={q!r}, dataset_size={dataset_size!r} (q * N = {implied!r}); "
                "pass batch_size and dataset_size instead"
            )
        if batch_size is not None and np.any(np.round(implied) != np.asarray(batch_size)):
            raise ValueError(
                f"q must equal batch_size / dataset_size; got q={q!r}, "
                f"batch_size={batch_size!r}, dataset_size={dataset_size!r}"
            )
        ratio = np.round(implied) / np.asarray(dataset_size, dtype=np.float64)
        return ratio if ratio.ndim else float(ratio)
    if batch_size is not None:
        _check_count("batch_size", batch_size)
        with np.errstate(divide="ignore"):
            implied = np.asarray(batch_size, dtype=np.float64) / qf
        if np.any(~np.isfinite(implied)) or np.any(
            np.abs(implied - np.round(implied)) > 1e-9 * implied
        ):
            raise ValueError(
                "q is ambiguous for fixed-size sampling: batch_size / q must be an integer "
                f"dataset size; got q={q!r}, batch_size={batch_size!r}; pass batch_size and "
                "dataset_size instead"
            )
    return q


def _max_order_for(orders) -> int:
    if not _validate.is_concrete(orders):
        return TRACED_MAX_ORDER
    arr = np.asarray(orders, dtype=np.float64)
    finite = arr[np.isfinite(arr)]
    return min(MAX_ORDER, max(2, int(math.ceil(float(finite.max()))))) if finite.size else 2


def _prepare(sigma, orders, batch_size, dataset_size, q):
    if np.ndim(orders) != 1:
        raise ValueError(f"orders must be 1-D; got orders of shape {np.shape(orders)}")
    if np.shape(orders)[0] == 0:
        raise ValueError("orders must not be empty; got shape (0,)")
    _validate.check_range("orders", orders, low=1.0, low_inclusive=False)
    _validate.check_range("sigma", sigma, low=0.0)
    gamma = sampling_ratio(batch_size, dataset_size, q)
    return gamma, _max_order_for(orders)


def rdp(sigma, orders, *, batch_size=None, dataset_size=None, q=None):
    """Per-step RDP of the Gaussian mechanism on a fixed-size batch drawn without replacement.

    Replace-one neighbours (data sets of the same public size ``N`` differing in one
    record's value); see the module docstring for the bound, why it is an upper bound at
    fractional orders, and why this ε is not comparable with a Poisson/add-remove ε.

    Args:
      sigma: noise multiplier ``σ ≥ 0``: the noise standard deviation divided by the
        *replace-one* sensitivity (``2C`` for a sum of gradients clipped to norm ``C``).
        Scalar or array of batch shape ``S`` (broadcast with the ratio).
      orders: Rényi orders ``α > 1``, shape ``(K,)`` (``+inf`` allowed: ``+inf`` RDP).
        Concrete orders set the static term count to their largest finite order (at most
        :data:`MAX_ORDER`); traced orders use :data:`TRACED_MAX_ORDER`; larger orders give
        ``+inf``.
      batch_size: ``B``, a positive integer (scalar or array of shape ``S``).
      dataset_size: ``N ≥ B``, a positive integer.
      q: instead of ``B`` and ``N``: the ratio ``B/N`` (see :func:`sampling_ratio` for
        when ``q`` with a size is ambiguous).

    Returns:
      Array of shape ``S + (K,)``: ``ε'(α) ≥ 0``. ``0`` where ``B/N = 0`` or ``σ = ∞``;
      ``+inf`` where ``σ = 0`` or at orders above the term count. Under ``jit``, NaN in
      lanes with invalid arguments (``B > N``, non-integer or non-positive sizes,
      ``σ < 0``, ``α ≤ 1``, NaN).

    Raises:
      ValueError: with concrete arguments, naming the invalid one.

    References:
      Wang, Balle, Kasiviswanathan (2019), Theorem 9 and Corollary 10; arXiv:1808.00087,
      Theorem 27 (for ``α ≤ 256``). dp_accounting, ``_compute_rdp_sample_wor_gaussian``.
    """
    gamma, max_order = _prepare(sigma, orders, batch_size, dataset_size, q)
    return _precision.call(_rdp_jit, gamma, sigma, orders, max_order=max_order)


def log_moment(sigma, orders, *, batch_size=None, dataset_size=None, q=None):
    """``(α − 1) ε'(α)``, the bound on the log-moment ``log A_α`` that :func:`rdp` divides.

    At integer orders this is dp_accounting's ``_compute_rdp_sample_wor_gaussian_int``;
    fractional orders are its chord (see the module docstring).

    Args:
      sigma: noise multiplier over the replace-one sensitivity, as in :func:`rdp`.
      orders: Rényi orders ``α > 1``, shape ``(K,)``.
      batch_size: ``B``, a positive integer.
      dataset_size: ``N ≥ B``, a positive integer.
      q: instead of the sizes, ``B/N``.

    Returns:
      Array of shape ``S + (K,)``, ``≥ 0``; ``+inf`` at ``α = ∞`` unless the RDP is 0;
      NaN for invalid lanes under ``jit``.

    Raises:
      ValueError: with concrete arguments, naming the invalid one.
    """
    gamma, max_order = _prepare(sigma, orders, batch_size, dataset_size, q)
    return _precision.call(_log_moment_jit, gamma, sigma, orders, max_order=max_order)
