"""Fast path for a grid of cells ``(q, σ)`` times a static vector of orders (float64).

The elementwise quadrature of :mod:`jaxrdp._quadrature` places its nodes per
``(q, σ, α)``. When the orders are a concrete vector shared by every cell, which is how
accounting uses them, most of the work can be shared across orders:

* **integer orders** use the exact binomial expansion (Mironov–Talwar–Zhang 2019,
  Sec. 3.3, Case I) written for ``A_α − 1`` so that every term is non-negative:
  ``A_α − 1 = Σ_{k=2}^{α} C(α,k) q^k (1−q)^{α−k} expm1(k(k−1)/2σ²)``. The binomial
  coefficients are exact constants built once per order vector; the order-free part
  ``log expm1(k(k−1)/2σ²) + k·log q`` is computed once per cell for every ``k`` and
  shared by all orders. Orders from :data:`WINDOW_MIN_ORDER` on (in chunks of at least
  16 cells) sum their first and last 64 terms exactly and add an upper bound on the
  middle (:func:`_windowed`); the cells where that bound is not negligible take every
  term.
* **fractional orders up to** :data:`SHARED_MAX_ORDER` share one set of nodes per cell.
  Up to ``1/σ = 2`` that is one Gauss–Hermite rule for the normal weight, centred between
  the orders' modes (:func:`_hermite_points`). Beyond, Gauss–Legendre panels over an
  interval that provably holds the mass of every order (see :func:`_shared_cover`),
  anchored so that the crossover point ``t₁`` is a panel end. The number of nodes grows
  with ``1/σ`` (the integrand's complex singularities at ``t₁ ± iπσ`` come closer to the
  real axis and its modes spread): each
  chunk of cells takes the tier of :data:`SHARED_TIERS` its largest ``1/σ`` needs, and
  chunks beyond the last tier use the elementwise quadrature. Cells are sorted by σ
  first, so few chunks are slow. Up to ``1/σ = 2`` (:func:`_scaled_log_a_minus_one`)
  series nodes are summed through order-free moments and the others with one scale per
  cell: orders on a regular grid (``α − 1 = m + j·d``, see :func:`_ladder`; all of
  dp_accounting's) through order-free rungs ``expm1(mL)``, ``expm1(jdL)`` and one
  small matrix product per cell, other orders with one ``expm1`` per (order, node);
  beyond ``1/σ = 2``, each order is shifted by its own largest term
  (:func:`_shared_log_a_minus_one`, one ``expm1`` and one ``exp``).
* **other fractional orders** use the elementwise quadrature.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxrdp import _logmath, _quadrature

SHARED_MAX_ORDER = 12.0
#: ``panels`` of a tier that uses one Gauss–Hermite rule instead of Gauss–Legendre panels.
HERMITE = 0
#: ``(largest 1/σ, panels, nodes per panel)`` of the shared quadrature, cheapest first;
#: each tier was checked against the elementwise quadrature to ~1.5e-13 in log(A − 1)
#: (tiers up to :data:`_SCALED_MAX_S` in ``tests/test_kernels.py``). The Hermite tiers
#: reach that floor with 32, 56 and 96 nodes; the Gauss–Legendre panels they replaced
#: needed 112, 112 and 144.
SHARED_TIERS = ((0.6, HERMITE, 36), (1.3, HERMITE, 64), (2.0, HERMITE, 112), (3.4, 12, 28))
_CELLS_PER_CHUNK = 256
#: Tiers up to this ``1/σ`` use :func:`_scaled_log_a_minus_one`.
_SCALED_MAX_S = 2.0
#: :func:`_scaled_log_a_minus_one`: ``b = βL`` up to which ``P·expm1(b)`` is computed
#: directly (a ``P`` that underflows then drops less than ``e^{−708+600}``), and the
#: largest ``b`` a tier may reach (``u = expm1(b/2)`` stays finite, and a ``√P`` that
#: underflows drops less than ``e^{−1416+1300}``).
_SPLIT_EXPONENT = 600.0
_SCALED_MAX_EXPONENT = 1300.0


class OrderPlan:
    """Static partition of an order vector into the three kinds above (hashable)."""

    def __init__(self, orders: tuple[float, ...]):
        arr = np.asarray(orders, dtype=np.float64)
        self.orders = orders
        is_int = (arr == np.round(arr)) & (arr >= 2) & (arr <= 2**14)
        shared = ~is_int & (arr > 1) & (arr <= SHARED_MAX_ORDER)
        self.int_idx = np.flatnonzero(is_int)
        self.shared_idx = np.flatnonzero(shared)
        self.other_idx = np.flatnonzero(~is_int & ~shared)
        self.int_groups = _integer_groups(arr[self.int_idx], self.int_idx)
        # Inverse permutation from [int groups..., shared, other] back to input order.
        concat = np.concatenate(
            [idx for _, idx in self.int_groups] + [self.shared_idx, self.other_idx]
        ).astype(np.int64)
        self.inverse = np.argsort(concat)

    def __hash__(self):
        return hash(self.orders)

    def __eq__(self, other):
        return isinstance(other, OrderPlan) and self.orders == other.orders


def _integer_groups(values: np.ndarray, idx: np.ndarray):
    """Group integer orders into size classes so padding stays below 2×."""
    groups = []
    bounds = [2**p for p in range(4, 15)]
    lo = 0
    for hi in bounds:
        sel = (values > lo) & (values <= hi)
        if np.any(sel):
            groups.append((values[sel].astype(np.int64), idx[sel]))
        lo = hi
    return groups


@functools.lru_cache(maxsize=64)
def _log_binomials(alphas: tuple[int, ...]) -> np.ndarray:
    """``log C(α, k)`` for each α and k = 0..max α (−inf for k > α), float64.

    Computed from exact integers so the only error is the final rounding.
    """
    n_terms = max(alphas) + 1
    table = np.full((len(alphas), n_terms), -np.inf)
    for row, a in enumerate(alphas):
        table[row, : a + 1] = [math.log(math.comb(a, k)) for k in range(a + 1)]
    return table


def _integer_log_a_minus_one(log_q, log1m_q, s, groups: tuple[tuple[int, ...], ...]):
    """log(A_α − 1) for integer orders by the exact non-negative binomial sum.

    The log-term of order α is ``u_k + log C(α, k) + (α − k)·log(1 − q)`` with the
    order-free ``u_k = log expm1(k(k−1)s²/2) + k·log q``, computed once per cell for every
    ``k`` up to the largest order and shared by all groups. (Writing the last part as
    ``k·log(q/(1 − q)) + α·log(1 − q)`` would save a multiply but cancel badly for ``q``
    near 1, where the dominant terms have ``k ≈ α``.)

    Args:
      log_q, log1m_q, s: arrays of shape ``(C,)``.
      groups: static integer orders in size classes (``G_i`` orders each).

    Returns:
      List of arrays ``(C, G_i)``, one per group.
    """
    windows = s.shape[0] >= _MIN_CELLS_FOR_SHORTCUTS
    big_groups = tuple(a for a in groups if windows and min(a) >= WINDOW_MIN_ORDER)
    every = [a for a in groups if a not in big_groups]
    n_all = max([max(a) for a in every] + [WINDOW_HEAD + 1] * bool(big_groups)) + 1
    u = _order_free_terms(log_q, s, n_all)
    out = iter([_integer_group(u, log1m_q, alphas) for alphas in every])
    if not big_groups:
        return list(out)

    big = _big_orders(u, log_q, log1m_q, s, big_groups)
    columns = iter(jnp.split(big, np.cumsum([len(g) for g in big_groups])[:-1], axis=1))
    return [next(columns) if alphas in big_groups else next(out) for alphas in groups]


def _every_term(log_q, log1m_q, s, groups):
    """The size classes ``groups`` by every term → ``(C, Σ G_i)``."""
    u_all = _order_free_terms(log_q, s, max(max(a) for a in groups) + 1)
    return jnp.concatenate([_integer_group(u_all, log1m_q, a) for a in groups], axis=1)


@functools.partial(jax.custom_jvp, nondiff_argnums=(4,))
def _big_orders(u, log_q, log1m_q, s, groups):
    """Size classes of orders from :data:`WINDOW_MIN_ORDER` on by their windows
    (:func:`_windowed`), the cells where that is not enough by every term → ``(C, Σ G_i)``.

    ``u``: :func:`_order_free_terms` of the cells, at least ``WINDOW_HEAD + 2`` columns.
    """
    windowed, bad = _windowed(u, log_q, log1m_q, s, sum(groups, ()))
    return patch_cells(bad, windowed,
                       lambda idx: _every_term(log_q[idx], log1m_q[idx], s[idx], groups))


@_big_orders.defjvp
def _big_orders_jvp(groups, primals, tangents):
    # Derivatives of the every-term sums, whose values the windows reproduce to 1e-15:
    # the patching loop has a dynamic trip count, which reverse mode cannot differentiate.
    # ``u`` is a function of log q and s: its tangent is not counted twice.
    _, tangent = jax.jvp(lambda a, b, c: _every_term(a, b, c, groups), primals[1:], tangents[1:])
    return _big_orders(*primals, groups), tangent


def _order_free_terms(log_q, s, n_all: int):
    """``u_k = log expm1(k(k−1)s²/2) + k·log q`` for ``k = 0 … n_all − 1`` → ``(C, n_all)``
    (``−inf`` for ``k < 2``, whose terms cancel)."""
    k = np.arange(n_all, dtype=np.float64)
    half_kk = 0.5 * k * (k - 1.0)  # (K,)
    safe = np.where(half_kk > 0, half_kk, 1.0)
    y = safe * (s * s)[:, None]
    log_e = by_exact_head(
        s, n_all,
        lambda head: jnp.concatenate([_logmath.log_expm1(y[:, :head]), y[:, head:]], axis=1),
        lambda: _logmath.log_expm1(y))
    log_e = jnp.where(half_kk > 0, log_e, -jnp.inf)
    return log_e + k * log_q[:, None]  # (C, K)


def _integer_group(u, log1m_q, alphas: tuple[int, ...]):
    """One size class of :func:`_integer_log_a_minus_one` → ``(C, G)``."""
    log_binom = _log_binomials(alphas)  # (G, K) constants
    n_terms = log_binom.shape[1]
    u = u[:, :n_terms]
    k = np.arange(n_terms, dtype=np.float64)
    # Shift by the largest of every 8th term and the last one instead of a max pass: the
    # log-terms are concave where they have interior maxima, with curvature at most
    # α/(k(α−k)) ≤ 1 there, so the true maximum is within 8 nats of the shift.
    stride = 8
    u_sample, k_sample = u[:, 2::stride], k[2::stride]
    log1m_q = log1m_q[:, None]

    def log_sum(u, u_sample, log1m_q, rows, alpha, top):
        # Broadcasting over one order (rows (K,)) or a whole class (rows (G, K)).
        sample = u_sample + rows[..., 2::stride] + (alpha - k_sample) * log1m_q
        shift = jnp.maximum(jnp.max(sample, axis=-1), top)
        shift = jnp.where(jnp.isfinite(shift), shift, 0.0)
        terms = u + rows + (alpha - k) * log1m_q
        return jnp.log(jnp.sum(jnp.exp(terms - shift[..., None]), axis=-1)) + shift

    if len(alphas) * n_terms <= INTEGER_BLOCK_TERMS:
        # Small classes in one fused pass over (C, G, K): a scan step costs more than its
        # work here.
        last = np.asarray(alphas)
        top = u[:, last] + log_binom[np.arange(len(alphas)), last]  # the k = α terms
        alpha = np.asarray(alphas, dtype=np.float64)[:, None]
        return log_sum(u[:, None], u_sample[:, None], log1m_q[:, None], log_binom, alpha, top)

    def body(_, order):
        alpha, row, last = order
        return None, log_sum(u, u_sample, log1m_q, row, alpha, u[:, last] + row[last])

    orders = (
        jnp.asarray(alphas, dtype=jnp.float64),
        jnp.asarray(log_binom),
        jnp.asarray(alphas, dtype=jnp.int32),
    )
    _, out = jax.lax.scan(body, None, orders)
    return out.T


#: Chunks of fewer cells skip the ladder and the exact-head switch: on one cell (one
#: ``epsilon`` call) their extra program steps cost more than they save (0.31 against
#: 0.27 ms per call).
_MIN_CELLS_FOR_SHORTCUTS = 16
#: Candidate first terms from which ``log expm1(y)`` drops its ``log(1 − e^{−y})`` part
#: (where it is below 1e-16 for every cell of a chunk; see :func:`by_exact_head`).
_LOG_EXPM1_HEADS = (65, 129, 257, 513)


def by_exact_head(s, n_all: int, with_head, full):
    """``with_head(head)`` for the first static head from which ``log expm1(k(k−1)s²/2)`` is
    ``k(k−1)s²/2`` to below 1e-16 for every cell (``y ≥ 37``), else ``full()``.

    ``log expm1(y) = y + log(1 − e^{−y})``: the terms past the head skip two transcendental
    functions (the full array of k ≤ 1 024 was a sixth of the fast path's time for
    dp_accounting's orders). One branch per chunk, chosen by its smallest ``s = 1/σ``.
    """
    heads = [h for h in _LOG_EXPM1_HEADS if h < n_all]
    if not heads or s.shape[0] < _MIN_CELLS_FOR_SHORTCUTS:
        return full()
    need = np.asarray([0.5 * h * (h - 1.0) for h in heads])
    branch = jnp.sum(jnp.min(s) ** 2 * need < 37.0)  # first exact head, or len(heads)
    return jax.lax.switch(branch, [functools.partial(with_head, h) for h in heads] + [full])


#: Size classes with at most this many (order, term) pairs are summed in one pass (float64
#: and float32).
INTEGER_BLOCK_TERMS = 4096


# ------------------------------------------------------------ big integer orders by windows

#: Integer orders from this one on are summed over two windows of terms, ``k = 2 …
#: WINDOW_HEAD + 1`` and the last :data:`WINDOW_TAIL` up to ``k = α``, with a bound on the
#: middle added (:func:`window_constants`); cells where that bound is not negligible
#: take every term (:func:`patch_cells`).
WINDOW_MIN_ORDER = 256
WINDOW_HEAD = 64
WINDOW_TAIL = 64
_MIDDLE_PIECE = 16  # terms per piece of the middle's bound
#: Cells taken at a time by the every-term sum after the windows' bound failed.
PATCH_CELLS = 32


class WindowConstants(NamedTuple):
    """Static pieces of the middle ``k = WINDOW_HEAD + 2 … α − WINDOW_TAIL`` of each order.

    Shapes ``(G, P + 1)`` for ``ends`` (piece ``j`` is ``[ends[j], ends[j + 1]]``, padded
    by repeating the last end) and ``(G, P)`` for the rest; padded pieces have
    ``log_count = −inf``.
    """

    tail: np.ndarray  # (G, WINDOW_TAIL) the tail's k
    ends: np.ndarray
    gap_left: np.ndarray
    gap_right: np.ndarray
    log_count: np.ndarray


@functools.lru_cache(maxsize=32)
def window_constants(alphas: tuple[int, ...]) -> WindowConstants:
    """Pieces of the middle of each order and the concavity gaps of their log-terms.

    A log-term ``log C(α,k) + log expm1(y_k) + k·log q + (α − k)·log(1 − q)``, ``y_k =
    k(k−1)s²/2``, is ``F(k) + G(k)`` with ``F = log C(α,k) + log(k(k−1))`` plus terms
    linear in ``k`` (concave: ``lgamma`` is convex) and ``G = log(expm1(y)/y)`` (convex in
    ``k``: ``log(expm1(y)/y) = log ∫₀¹ e^{yu} du`` is convex increasing in ``y``, and ``y``
    is convex in ``k``). On a piece ``[a, b]``, ``F`` lies below its tangent at either
    end, so the log-terms lie below a convex function whose largest value is at an end:
    ``max(L(a), L(b) + gap_left)`` with ``gap_left = F(a) − F(b) + F'(a)(b − a) ≥ 0``
    (tangent at ``a``), and likewise ``gap_right`` (at ``b``); the parts linear in ``k``
    cancel, so the gaps are constants of the order. ``F'`` at an integer ``k`` is
    ``H_{α−k} − H_k + 1/k + 1/(k − 1)`` (harmonic numbers).
    """
    first = WINDOW_HEAD + 2
    rows = []
    for alpha in alphas:
        last = alpha - WINDOW_TAIL
        ends = np.unique(np.append(np.arange(first, last, _MIDDLE_PIECE), last))
        k = np.arange(alpha + 1, dtype=np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            f = _log_binomials((alpha,))[0] + np.log(k) + np.log(k - 1.0)
            harmonic = np.concatenate([[0.0], np.cumsum(1.0 / k[1:])])
            slope = harmonic[alpha - k.astype(int)] - harmonic[k.astype(int)] + 1.0 / k + 1.0 / (k - 1.0)
        a, b = ends[:-1], ends[1:]
        slack = 1e-9 * (1.0 + np.abs(f[a]) + np.abs(f[b]))  # the constants' rounding, outward
        gap_left = f[a] - f[b] + slope[a] * (b - a) + slack
        gap_right = f[b] - f[a] + slope[b] * (a - b) + slack
        assert np.all(gap_left >= 0) and np.all(gap_right >= 0)
        rows.append((ends, gap_left, gap_right, np.log(b - a + 1.0)))
    n_pieces = max(r[1].size for r in rows)

    def padded(values, size, fill):
        return np.stack([np.concatenate([v, np.full(size - v.size, fill if fill is not None else v[-1])])
                         for v in values])

    tail = np.stack([np.arange(alpha - WINDOW_TAIL + 1, alpha + 1) for alpha in alphas])
    return WindowConstants(
        tail=tail,
        ends=padded([r[0] for r in rows], n_pieces + 1, None).astype(np.int64),
        gap_left=padded([r[1] for r in rows], n_pieces, 0.0),
        gap_right=padded([r[2] for r in rows], n_pieces, 0.0),
        log_count=padded([r[3] for r in rows], n_pieces, -np.inf),
    )


def middle_bound(log_ends, consts: WindowConstants):
    """log of an upper bound on the middle's sum from the log-terms at the piece ends.

    Args:
      log_ends: ``(C, G, P + 1)`` log-terms at ``consts.ends`` (each at least the true
        value minus nothing: pass an outward-rounded value where it is not exact).

    Returns:
      ``(C, G)``.
    """
    # the cached NumPy constants serve float32 and float64 programs: typed explicitly here
    gap_left, gap_right, log_count = (jnp.asarray(v, log_ends.dtype)
                                      for v in (consts.gap_left, consts.gap_right, consts.log_count))
    left, right = log_ends[..., :-1], log_ends[..., 1:]
    peak = jnp.minimum(jnp.maximum(left, right + gap_left), jnp.maximum(right, left + gap_right))
    return jax.nn.logsumexp(log_count + peak, axis=-1)


def patch_cells(bad, windowed, full_on):
    """``windowed`` with the rows of the ``bad`` cells replaced by ``full_on``'s.

    The bad cells are taken :data:`PATCH_CELLS` at a time in a loop that does not run where
    no cell is bad (one copy of the every-term program, for a few cells).

    Args:
      bad: ``(C,)`` cells whose windowed value is not exact enough.
      windowed: ``(C, G)``.
      full_on: cell indices ``(M,)`` → their every-term rows ``(M, G)``.

    Returns:
      ``(C, G)``.
    """
    n_cells = bad.shape[0]
    size = min(PATCH_CELLS, n_cells)
    n_bad = jnp.sum(bad)
    # bad cells first; the slots past them repeat the first bad cell (recomputed alike)
    first = jnp.argmax(bad)
    order = jnp.nonzero(bad, size=n_cells + size, fill_value=first)[0]

    def step(state):
        i, out = state
        idx = jax.lax.dynamic_slice(order, (i * size,), (size,))
        return i + 1, out.at[idx].set(full_on(idx))

    _, out = jax.lax.while_loop(lambda state: state[0] * size < n_bad, step, (0, windowed))
    return out


def _terms_at(log_q, log1m_q, s, alphas, k):
    """Log-terms ``u_k + log C(α, k) + (α − k)·log(1 − q)`` at static ``k`` ``(G, M)``,
    ``2 ≤ k ≤ α`` → ``(C, G, M)``, with a bound on their rounding ``(C, G, M)``."""
    k = np.asarray(k, np.float64)
    y = 0.5 * k * (k - 1.0) * (s * s)[:, None, None]
    k_log_q = k * log_q[:, None, None]
    log_binom = np.stack([_log_binomials((a,))[0][row] for a, row in zip(alphas, k.astype(np.int64))])
    rest = (np.asarray(alphas, np.float64)[:, None] - k) * log1m_q[:, None, None]
    # parts of up to a few hundred thousand nats that cancel: each carries a few roundings
    # of 2⁻⁵³ of its size, far below 1e-14 of the sum of their sizes
    rounding = 1e-14 * (y + jnp.abs(k_log_q) + np.abs(log_binom) + jnp.abs(rest) + 1.0)
    return _logmath.log_expm1(y) + k_log_q + log_binom + rest, rounding


def _windowed(u, log_q, log1m_q, s, alphas: tuple[int, ...]):
    """Orders ``≥ WINDOW_MIN_ORDER`` from their head and tail windows → ``((C, G), bad (C,))``.

    The windows' terms (``k = 2 … WINDOW_HEAD + 1`` from ``u``, the last
    :data:`WINDOW_TAIL` computed here) are summed exactly; the middle's bound
    (:func:`middle_bound`, from the log-terms at the piece ends raised by their rounding)
    is added, so the value is an upper bound. ``bad`` marks cells where that bound is not
    below ``e^{−36}`` of the windows' sum (2.3e-16: inside the kernel's 5e-13 margin) or
    the sum is not finite; they take every term.
    """
    consts = window_constants(alphas)
    head = np.broadcast_to(np.arange(2, WINDOW_HEAD + 2), (len(alphas), WINDOW_HEAD))
    tail, _ = _terms_at(log_q, log1m_q, s, alphas, consts.tail)
    head_binom = np.stack([_log_binomials((a,))[0][2:WINDOW_HEAD + 2] for a in alphas])
    head_rest = (np.asarray(alphas, np.float64)[:, None] - head) * log1m_q[:, None, None]
    terms = jnp.concatenate([u[:, None, 2:WINDOW_HEAD + 2] + head_binom + head_rest, tail], axis=-1)
    shift = jnp.max(terms, axis=-1)
    shift = jnp.where(jnp.isfinite(shift), shift, 0.0)
    log_sum = jnp.log(jnp.sum(jnp.exp(terms - shift[..., None]), axis=-1)) + shift
    log_ends, rounding = _terms_at(log_q, log1m_q, s, alphas, consts.ends)
    middle = middle_bound(log_ends + rounding, consts)
    ok = jnp.isfinite(log_sum) & ((middle == -jnp.inf) | (middle <= log_sum - _WINDOW_MARGIN))
    return jnp.logaddexp(log_sum, middle), ~jnp.all(ok, axis=-1)


#: The windows' sum (float64) is kept where the middle's bound is below e^-36 of it.
_WINDOW_MARGIN = 36.0


def _shared_cover(s, alpha_max: float, cfg):
    """Interval ``[L, R]`` in ``t`` holding the mass of ``A_α − 1`` for every order ≤ α_max.

    The integrand of ``A_α − 1`` is a mixture of unit-width Gaussian bumps centred at
    ``k·s`` for ``0 ≤ k ≤ α`` (the binomial terms ``k ≥ 2`` and the −1 − αx correction
    around ``t = 0``); each bump falls by ``depth`` nats within ``r = √(2·depth)`` of its
    centre, so ``[−r, α_max·s + r]`` loses at most ``e^{−depth}`` of the mass relative to
    the bumps themselves (unlike the elementwise windows, which are cut relative to the
    integrand of ``A_α`` and need the extra depth ``−log(A_α − 1)``).
    """
    reach = np.sqrt(2.0 * cfg.depth)
    return -reach * jnp.ones_like(s), alpha_max * s + reach


def shared_points(log_q, log1m_q, s, alpha_max: float, n_panels: int, n_nodes: int):
    """Gauss–Legendre nodes ``t`` and log weights over :func:`_shared_cover`, ``(C, N)`` each.

    ``n_panels`` equal panels, shifted so that the crossover ``t₁`` is a panel end (panels
    sticking out of the cover are clipped to it); any floating dtype, no derivatives.
    """
    if n_panels == HERMITE:
        return _hermite_points(s, alpha_max, n_nodes)
    cfg = _quadrature.FLOAT64_CONFIG
    lo, hi = _shared_cover(s, alpha_max, cfg)
    lo, hi = jax.lax.stop_gradient(lo), jax.lax.stop_gradient(hi)
    t1 = jax.lax.stop_gradient((log1m_q - log_q + 0.5 * s * s) / s)
    width = (hi - lo) / (n_panels - 1)
    anchor = jnp.clip(t1, lo, hi)
    j0 = jnp.ceil((anchor - lo) / width)
    j = np.arange(n_panels + 1, dtype=np.dtype(s.dtype))
    edges = jnp.clip(anchor[:, None] + (j - j0[:, None]) * width[:, None], lo[:, None], hi[:, None])
    left, right = edges[:, :-1], edges[:, 1:]  # (C, P)

    # Constants converted explicitly: JAX (0.10) reuses a cached NumPy constant's first
    # conversion, so the same array used in a float32 and then a float64 trace breaks.
    nodes, weights = _logmath.gauss_legendre(n_nodes)
    nodes, log_weights = (jnp.asarray(v, s.dtype) for v in (nodes, np.log(weights)))
    half = 0.5 * (right - left)
    t = (0.5 * (right + left))[..., None] + half[..., None] * nodes  # (C, P, n)
    log_w = _logmath.log_positive(half)[..., None] + log_weights
    t = t.reshape(t.shape[0], -1)
    return t, log_w.reshape(t.shape)


#: The Gauss–Hermite rule is centred at ``t = HERMITE_CENTRE·α_max·s`` (see :func:`_hermite_points`).
HERMITE_CENTRE = 0.5


def _hermite_centre(alpha_max: float, s):
    """Centre ``μ`` of the Gauss–Hermite rule for orders up to ``alpha_max`` at ``1/σ = s``."""
    return HERMITE_CENTRE * alpha_max * s


def _hermite_points(s, alpha_max: float, n_nodes: int):
    """Gauss–Hermite nodes ``t`` for the weight ``φ(t)`` and log weights, ``(C, N)`` each.

    With ``1/σ`` small, the integrand ``φ(t)·g(x(t))`` is ``φ`` times a function analytic
    in the strip ``|Im t| < πσ`` that grows at most like ``e^{α·s·t}``; its Hermite
    expansion converges fast, so one rule serves every cell (no cover, no panels). The
    rule is centred at ``μ = HERMITE_CENTRE·α_max·s``: ``∫φ(t)f(t)dt = ∫φ(z)·e^{−μz−μ²/2}
    f(z + μ)dz``, which turns the growth rates ``0 … α_max·s`` of the orders' integrands
    into ``−μ … +μ`` and halves the nodes a rule needs (measured: ``1/σ ≤ 1.3`` with 56
    nodes, where more than 80 uncentred nodes were not enough). The log weights carry
    ``+z²/2``, so that adding :func:`_logmath.log_normal_pdf` at ``t = z + μ`` gives
    ``log(w/√(2π)) − μz − μ²/2``.
    """
    nodes, weights = _logmath.gauss_hermite(n_nodes)
    dtype = np.dtype(s.dtype)
    t = jnp.asarray(nodes, dtype) + _hermite_centre(alpha_max, s)[:, None]
    log_w = jnp.asarray(np.log(weights) + 0.5 * nodes * nodes, dtype)
    return t, jnp.broadcast_to(log_w, t.shape)


def _shared_nodes(q, log_q, log1m_q, s, alpha_max: float, n_panels: int, n_nodes: int):
    """Nodes shared by every order ``≤ alpha_max`` of each cell (:func:`shared_points`).

    ``n_panels`` equal Gauss–Legendre panels over :func:`_shared_cover`, shifted so that
    the crossover ``t₁`` is a panel end (panels sticking out of the cover are clipped to
    it), or, with ``n_panels = HERMITE``, one centred Gauss–Hermite rule of ``n_nodes``.

    Returns:
      ``(t, base, parts, small)``, each ``(C, N)`` (``N = n_panels·n_nodes``, or ``n_nodes``
      for a Hermite rule): nodes,
      log weight plus log normal density, :class:`_logmath.NodeParts` of ``x`` and the
      mask of the nodes where ``g`` is summed as a series (``|x| ≤ series_radius``). In
      the shared bucket ``x_c = min(radius, 0.5/α) = radius`` for every order, so the
      split between the series and the expm1 form of ``g`` is the same for all orders.
    """
    cfg = _quadrature.FLOAT64_CONFIG
    t, log_w = shared_points(log_q, log1m_q, s, alpha_max, n_panels, n_nodes)
    s_ = s[:, None]
    parts = _logmath.node_parts(s_ * t - 0.5 * s_ * s_, q[:, None], log_q[:, None])
    base = log_w + _logmath.log_normal_pdf(t)
    assert cfg.series_radius <= 0.5 / SHARED_MAX_ORDER
    small = parts.log_abs_x <= np.log(cfg.series_radius)  # exact even where x is capped
    return t, base, parts, small


def _shared_log_a_minus_one(
    q, log_q, log1m_q, s, alphas: tuple[float, ...], n_panels: int, n_nodes: int
):
    """log(A_α − 1) for small fractional orders on nodes shared across orders.

    Args:
      q, log_q, log1m_q, s: arrays of shape ``(C,)``.
      alphas: static orders in ``(1, SHARED_MAX_ORDER]``.
      n_panels, n_nodes: static Gauss–Legendre panels over the cover and nodes per panel.

    Returns:
      Array ``(C, G)``.
    """
    assert n_panels != HERMITE, "the shift from panel ends needs panels"
    cfg = _quadrature.FLOAT64_CONFIG
    alpha = np.asarray(alphas, dtype=np.float64)
    t, base, parts, _ = _shared_nodes(q, log_q, log1m_q, s, float(alpha.max()), n_panels, n_nodes)
    coef = _logmath.series_coefficients(alphas, cfg.series_radius)  # (G, m) constants

    def log_terms(a, c, parts):  # g = exp(lead)·factor, for orders a
        return _logmath.excess_factors(
            parts, a, series_terms=0, series_radius=cfg.series_radius, coefficients=c
        )

    # One order at a time: each step works on a cache-sized (C, N) slab that XLA fuses
    # into a single pass (the whole (C, G, N) block would be materialised).
    ends = _logmath.panel_ends(t.shape[1], n_nodes)
    at_ends = _logmath.NodeParts(*(v[:, None, ends] for v in parts))  # (C, 1, E)
    lead, factor = log_terms(alpha[None, :, None], [col[None, :, None] for col in coef.T], at_ends)
    shift = _logmath.shift_from_ends(base[:, None, ends] + lead, factor)  # (C, G)

    def body(_, order):
        a, c, shift_a = order
        lead, factor = log_terms(a, [c[j] for j in range(c.shape[0])], parts)
        total = jnp.sum(jnp.exp(base + lead - shift_a[:, None]) * factor, axis=-1)
        return None, jnp.log(total) + shift_a

    _, out = jax.lax.scan(body, None, (jnp.asarray(alpha), jnp.asarray(coef), shift.T))
    return out.T


def _scaled_log_a_minus_one(
    q, log_q, log1m_q, s, alphas: tuple[float, ...], n_panels: int, n_nodes: int, s_max: float
):
    """log(A_α − 1) like :func:`_shared_log_a_minus_one`, for cells with ``1/σ ≤ s_max``.

    The sum is split by the node's branch of ``g`` and rearranged so that the work per
    (order, node) is one ``expm1`` and a few multiply-adds:

    * **series nodes** (``|x| ≤ r``): ``g = C(α,2)·x²·Σ_j c_j(α) x^{j−2}``, so their sum
      is ``C(α,2)·Σ_j c_j(α)·M_j`` with the order-free moments
      ``M_j = Σ_n w_n φ(t_n) x_n² · x_n^{j−2}`` (scaled by their largest term). The
      ``j = 2`` moment dominates the others, ``|c_j M_j| ≤ |c_j| r^{j−2} M_2``, so the
      combination loses nothing to cancellation.
    * **other nodes**: ``g = (1 + x)·[expm1(βL) − βy]``; the order-free weight
      ``P_n = w_n φ(t_n)(1 + x_n)`` is scaled once per cell by its largest value (so
      ``P_n ≤ 1``), and the order-dependent factor needs no shift of its own: for
      ``1/σ ≤ s_max`` and ``α ≤ SHARED_MAX_ORDER`` every node lies at
      ``t ≤ α_max·s_max + reach`` (a Hermite rule: its largest node plus its centre at
      ``s_max``), where ``b = βL ≤ β_max·(s_max·t + log 2)``, which the
      static check keeps below :data:`_SCALED_MAX_EXPONENT`. ``P·expm1(b)`` is formed
      directly up to ``b = 600`` and as ``(√P·u)·(√P·(u + 2))``, ``u = expm1(b/2)``,
      beyond, so no factor overflows. What underflows (``P`` below ``e^{−708}`` with
      ``b ≤ 600``, or ``√P`` below ``e^{−708}`` with ``b ≤ 1300``) is below ``e^{−100}``,
      while the sum is at least its largest-weight term, ``P = 1`` times
      ``g(x)/(1 + x) ≥ C(α,2)·r²/2`` at ``|x| > r``: nothing in float64.

    Args:
      q, log_q, log1m_q, s: arrays of shape ``(C,)``, ``s ≤ s_max``.
      alphas: static orders in ``(1, SHARED_MAX_ORDER]``.
      n_panels, n_nodes: static panels and nodes per panel.
      s_max: static largest ``1/σ`` of the tier.

    Returns:
      Array ``(C, G)``.
    """
    cfg = _quadrature.FLOAT64_CONFIG
    alpha = np.asarray(alphas, dtype=np.float64)
    alpha_max = float(alpha.max())
    t, base, parts, small = _shared_nodes(q, log_q, log1m_q, s, alpha_max, n_panels, n_nodes)
    if n_panels == HERMITE:
        t_max = float(_logmath.gauss_hermite(n_nodes)[0].max()) + _hermite_centre(alpha_max, s_max)
    else:
        t_max = alpha_max * s_max + math.sqrt(2.0 * cfg.depth)
    exponent_max = (alpha_max - 1.0) * (s_max * t_max + math.log(2.0))  # bounds βL
    assert exponent_max <= _SCALED_MAX_EXPONENT, "tier outside the float64 range"

    def scaled(log_terms):
        top = jnp.max(log_terms, axis=-1)
        top = jax.lax.stop_gradient(jnp.where(jnp.isfinite(top), top, 0.0))
        return jnp.exp(log_terms - top[:, None]), top

    # Series nodes: moments of x on the weights w·φ·x².
    coef = _logmath.series_coefficients(alphas, cfg.series_radius)  # (G, m)
    xs = jnp.where(small, parts.x, 0.0)
    e_s, top_s = scaled(jnp.where(small, base + 2.0 * parts.log_abs_x, -jnp.inf))
    moments = []
    power = e_s
    for _ in range(coef.shape[1]):
        moments.append(jnp.sum(power, axis=-1))
        power = power * xs
    series = jnp.stack(moments, axis=-1) @ jnp.asarray(coef.T)  # (C, G)
    log_series = (
        top_s[:, None] + np.log(0.5 * alpha * (alpha - 1.0)) + _logmath.log_positive(series)
    )

    # Other nodes: weights w·φ·(1 + x); L and y are 0 on series nodes, so g's factor is 0.
    log_p = jnp.where(small, -jnp.inf, base + parts.log1p_x)
    p_e, top_e = scaled(log_p)
    root_p = jnp.exp(0.5 * (log_p - top_e[:, None]))  # √P: representable where P is not
    lp = jnp.where(small, 0.0, parts.log1p_x)
    y_all = jnp.where(small, 0.0, parts.x_over_1px)
    p_y = p_e * y_all

    def sums(betas, split: bool):
        # P·expm1(b) with b = βL, or, where b > _SPLIT_EXPONENT is possible (``split``),
        # as (√P·u)·(√P·(u + 2)) with u = expm1(b/2) past it, so that no factor
        # overflows (the product, a term of the sum, is at most the integrand of A_α).
        def body(_, beta):
            b = beta * lp
            if split:
                big = b > _SPLIT_EXPONENT
                u = jnp.expm1(jnp.where(big, 0.5 * b, b))
                excess = jnp.where(big, (root_p * u) * (root_p * (u + 2.0)), p_e * u)
            else:
                excess = p_e * jnp.expm1(b)
            return None, jnp.sum(excess - beta * p_y, axis=-1)

        return jax.lax.scan(body, None, jnp.asarray(betas))[1].T

    def ladder_sums(betas, n_m, n_j, d, idx_m, idx_j):
        # Σ_n P_n·g_n/(1 + x_n) without a pass over the nodes per order. With h(z) =
        # expm1(z) − z ≥ 0, g/(1 + x) = expm1(βL) − βy = h(βL) + β·(L − y), both parts
        # ≥ 0 (log(1 + x) ≥ x/(1 + x)). For β = m + j·d (a rung of each ladder, see
        # _ladder), e^{βL} = (1 + a_m)(1 + b_j) with a_m = expm1(mL), b_j = expm1(jdL), so
        # h(βL) = h(mL) + h(jdL) + a_m·b_j: three non-negative parts, summed over the nodes
        # without cancellation (the last one as one small matrix product per cell).
        # Rungs by recurrence (a tier-1 chunk: 9.8 µs per cell, 19 µs with an expm1 per
        # rung and node).
        def rungs(z, count):
            # (expm1(rz), Σ_n P·h(rz)) for r = 0 … count − 1, by e_{r+1} = e_r + e_1(1 + e_r)
            # and h_{r+1} = h_r + h_1 + e_r·e_1 (terms of one sign, no cancellation).
            e1 = jnp.expm1(z)
            h1 = _expm1_minus_identity(z, e1)
            e, h = [jnp.zeros_like(z), e1], [jnp.zeros_like(z), h1]
            for _ in range(count - 2):
                h.append(h[-1] + h1 + e[-1] * e1)
                e.append(e[-1] + e1 * (1.0 + e[-1]))
            return e, jnp.stack([jnp.sum(p_e * v, axis=-1) for v in h], axis=-1)

        a, h_a = rungs(lp, n_m)
        b, h_b = rungs(d * lp, n_j)
        pa = jnp.stack([p_e * v for v in a], axis=1)  # (C, M, N)
        ab = jnp.einsum("cmn,cjn->cmj", pa, jnp.stack(b, axis=1))
        h_sum = h_a[:, idx_m] + h_b[:, idx_j] + ab[:, idx_m, idx_j]  # (C, G)
        gap = jnp.sum(p_e * _log1p_minus_ratio(lp, y_all), axis=-1)  # Σ P·(L − y)
        return h_sum + jnp.asarray(betas) * gap[:, None]

    # Orders whose b stays below the split point skip the test (static); those on a
    # ladder (see _ladder) share its rungs instead of an expm1 each.
    beta = alpha - 1.0
    direct = beta * (exponent_max / (alpha_max - 1.0)) <= _SPLIT_EXPONENT
    # (The ladder's extra program steps cost more than they save on a handful of cells.)
    worth = direct.sum() and q.shape[0] >= _MIN_CELLS_FOR_SHORTCUTS
    ladder = _ladder(tuple(beta[direct].tolist())) if worth else None
    on_ladder = np.zeros_like(direct)
    blocks, order = [], []
    if ladder is not None:
        n_m, n_j, d, idx_m, idx_j = ladder
        member = idx_m >= 0
        on_ladder[np.flatnonzero(direct)[member]] = True
        blocks.append(ladder_sums(beta[on_ladder], n_m, n_j, d, idx_m[member], idx_j[member]))
        order.append(np.flatnonzero(on_ladder))
    for group, split in ((direct & ~on_ladder, False), (~direct, True)):
        if group.any():
            blocks.append(sums(beta[group], split))
            order.append(np.flatnonzero(group))
    other = jnp.concatenate(blocks, axis=-1)[:, np.argsort(np.concatenate(order))]
    log_other = top_e[:, None] + _logmath.log_positive(other)
    return jnp.logaddexp(log_series, log_other)


#: Taylor coefficients 1/n!, n = 2 … 18, of ``expm1(z) − z``: on ``|z| ≤ 1`` the omitted tail
#: is below ``3e/19! < 7e-17`` of the value (which is at least ``z²/3`` there).
_EXPM1_MINUS_ID = tuple(1.0 / math.factorial(n) for n in range(2, 19))
#: Coefficients 1/k, k = 2 … 17, of ``−log(1 − w) − w = Σ_{k≥2} w^k/k``: on ``|w| ≤ 0.1`` the
#: omitted tail is below ``2·0.1^16/18·(1/0.9) < 2e-17`` of the value (at least ``w²/2·0.9``).
_LOG1P_MINUS_RATIO = tuple(1.0 / k for k in range(2, 18))


def _expm1_minus_identity(z, e):
    """``h(z) = expm1(z) − z ≥ 0`` to full relative precision, given ``e = expm1(z)``."""
    near = jnp.abs(z) <= 1.0
    series = z * z * _logmath.horner(jnp.where(near, z, 0.0), _EXPM1_MINUS_ID)
    return jnp.where(near, series, e - z)


def _log1p_minus_ratio(log1p_x, y):
    """``log(1 + x) − x/(1 + x) ≥ 0`` to full relative precision, from ``L`` and ``y = x/(1 + x)``.

    With ``w = y``, ``L = −log(1 − w)``, so the difference is ``Σ_{k≥2} w^k/k``.
    """
    near = jnp.abs(y) <= 0.1
    series = y * y * _logmath.horner(jnp.where(near, y, 0.0), _LOG1P_MINUS_RATIO)
    return jnp.where(near, series, log1p_x - y)


@functools.lru_cache(maxsize=64)
def _ladder(betas: tuple[float, ...]):
    """Write the orders' ``β = α − 1`` as ``m + j·d`` (integer ``m``, ``0 ≤ j ≤ J``), or None.

    ``d`` is the fractional part of one of the orders that makes the most of them such
    sums for the fewest rungs (dp_accounting's 90 fractional orders: ``d = 0.1``, ``m ≤ 9``,
    ``j ≤ 9``). An order belongs to the ladder when ``|β − m − j·d|`` is at most 32 ulps of
    ``β`` (the rounding of a regular grid: dp_accounting's orders are within 4.5e-15·β), so
    it is evaluated at an order within 7.2e-15·β of its own. For small q,
    d log(A − 1)/dα = (2α − 1)/(α(α − 1)), so A − 1 moves by at most 2·7.2e-15 relatively,
    well inside the 5e-13 margin. Returned only when the ladder has at least
    :data:`_LADDER_MIN_ORDERS` orders and at most half as many rungs as orders.

    Returns:
      ``(n_m, n_j, d, idx_m, idx_j)``: rung counts (``m < n_m``, ``j < n_j``; Python ints),
      ``d`` (float) and, per order, ``m`` and ``j`` (int arrays, −1 for non-members).
    """
    beta = np.asarray(betas, dtype=np.float64)
    whole = np.floor(beta)
    frac = beta - whole  # exact: Sterbenz for β ≥ 1, trivially for β < 1
    tol = 32.0 * np.spacing(beta)
    best, best_score = None, -np.inf
    for d in np.unique(frac[frac > 0]):
        j = np.round(frac / d)
        member = (np.abs(frac - j * d) <= tol) & (j <= _LADDER_MAX_STEPS)
        # an order off the ladder costs about what a rung costs (one pass over the nodes)
        score = member.sum() - (whole[member].max(initial=0) + j[member].max(initial=0) + 2)
        if score > best_score:
            best, best_score = (float(d), member, j), score
    if best is None:
        return None
    d, member, j = best
    idx_m = np.where(member, whole, -1).astype(np.int64)
    idx_j = np.where(member, j, -1).astype(np.int64)
    n_m, n_j = int(idx_m.max()) + 1, int(idx_j.max()) + 1
    if member.sum() < _LADDER_MIN_ORDERS or 2 * (n_m + n_j) > member.sum():
        return None
    return n_m, n_j, d, idx_m, idx_j


_LADDER_MIN_ORDERS = 8
_LADDER_MAX_STEPS = 32


def elementwise_log_a_minus_one(q, sigma, alphas: tuple[float, ...], cfg):
    """log(A_α − 1) by the elementwise quadrature for cells ``(C,)`` × static orders → ``(C, G)``."""
    alpha = jnp.asarray(alphas, dtype=q.dtype)
    return _quadrature.log_a_minus_one(q[:, None], sigma[:, None], alpha[None, :], cfg)


def _chunk_log_a_minus_one(q, sigma, plan: OrderPlan):
    """``(C,)`` regular cells → ``(C, K)`` log(A_α − 1), orders as in ``plan.orders``."""
    log_q = jnp.log(q)
    log1m_q = jnp.log1p(-q)
    s = 1.0 / sigma
    cfg = _quadrature.FLOAT64_CONFIG
    blocks = []
    if plan.int_groups:
        groups = tuple(tuple(int(a) for a in alphas) for alphas, _ in plan.int_groups)
        blocks += _integer_log_a_minus_one(log_q, log1m_q, s, groups)
    if plan.shared_idx.size:
        shared_alphas = tuple(float(plan.orders[i]) for i in plan.shared_idx)
        tiers = [
            functools.partial(
                _scaled_log_a_minus_one, q, log_q, log1m_q, s, shared_alphas, panels, nodes, limit
            )
            if limit <= _SCALED_MAX_S
            else functools.partial(
                _shared_log_a_minus_one, q, log_q, log1m_q, s, shared_alphas, panels, nodes
            )
            for limit, panels, nodes in SHARED_TIERS
        ]
        tiers.append(lambda: elementwise_log_a_minus_one(q, sigma, shared_alphas, cfg))
        limits = jnp.asarray([limit for limit, _, _ in SHARED_TIERS])
        tier = jnp.searchsorted(limits, jnp.max(s))  # first tier whose limit covers it
        # One branch per chunk (measured: as fast as running the cheapest tier outside
        # control flow now that it is cheap, and chunks that need more no longer pay twice).
        blocks.append(jax.lax.switch(tier, tiers))
    if plan.other_idx.size:
        other_alphas = tuple(float(plan.orders[i]) for i in plan.other_idx)
        blocks.append(elementwise_log_a_minus_one(q, sigma, other_alphas, cfg))
    return jnp.concatenate(blocks, axis=-1)[:, jnp.asarray(plan.inverse, jnp.int32)]


def _sub_plan(plan: OrderPlan, idx: np.ndarray) -> OrderPlan:
    return OrderPlan(tuple(plan.orders[i] for i in idx))


def _chunked(chunk, q, sigma, plan: OrderPlan, size: int):
    """``chunk`` over ``(n,)`` cells in chunks of at most ``size`` → ``(n, K)``."""
    n = q.shape[0]
    if n <= size:
        return chunk(q, sigma, plan)
    # Sort by σ so that the few cells that need the elementwise fallback (small σ) share
    # chunks instead of sending every chunk down the slow branch.
    perm = jnp.argsort(sigma)
    q, sigma = q[perm], sigma[perm]
    n_chunks = -(-n // size)
    size = -(-n // n_chunks)  # balanced chunks: padding below n_chunks cells
    pad = n_chunks * size - n
    qp = jnp.concatenate([q, jnp.full((pad,), 0.5, q.dtype)]).reshape(n_chunks, size)
    sp = jnp.concatenate([sigma, jnp.ones((pad,), sigma.dtype)]).reshape(n_chunks, size)
    out = jax.lax.map(lambda a: chunk(a[0], a[1], plan), (qp, sp))
    out = out.reshape(n_chunks * size, -1)[:n]
    return out[jnp.argsort(perm)]


def log_a_minus_one(q, sigma, plan: OrderPlan):
    """log(A_α − 1) for regular cells (0 < q < 1, 0 < σ < ∞) and the plan's orders.

    Args:
      q, sigma: arrays of one shape ``S``, float64 (this module) or float32
        (:mod:`jaxrdp._grid32`).
      plan: static :class:`OrderPlan`.

    Returns:
      Array ``S + (K,)``.
    """
    shape = q.shape
    q = q.reshape(-1)
    sigma = sigma.reshape(-1)
    n = q.shape[0]
    if n == 0:
        return jnp.zeros(shape + (len(plan.orders),), q.dtype)
    if q.dtype == jnp.float64:
        chunk, integer_chunk = _chunk_log_a_minus_one, _CELLS_PER_CHUNK
    else:
        from jaxrdp import _grid32  # float32 cells; imports this module

        chunk, integer_chunk = _grid32.chunk_log_a_minus_one, _grid32.INTEGER_CHUNK
    if integer_chunk > _CELLS_PER_CHUNK and plan.int_groups and len(plan.int_idx) < len(plan.orders) \
            and n > _CELLS_PER_CHUNK:
        # Integer orders need no tiers: in float32 they run in larger chunks (fewer steps).
        rest_idx = np.concatenate([plan.shared_idx, plan.other_idx])
        parts = [_chunked(chunk, q, sigma, _sub_plan(plan, plan.int_idx), integer_chunk),
                 _chunked(chunk, q, sigma, _sub_plan(plan, rest_idx), _CELLS_PER_CHUNK)]
        inverse = np.argsort(np.concatenate([plan.int_idx, rest_idx]))
        out = jnp.concatenate(parts, axis=-1)[:, inverse]
    else:
        out = _chunked(chunk, q, sigma, plan, _CELLS_PER_CHUNK)
    return out.reshape(shape + (len(plan.orders),))
