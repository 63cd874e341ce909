"""float32 version of the shared-order fast path of :mod:`jaxrdp._grid`.

The float64 path sums terms whose logarithms are moderate numbers made of parts of several
hundred nats (``k·log q`` against ``k(k−1)/2σ²``, ``−t²/2`` against ``(α − 1)·log(1 + x)``);
in plain float32 each part carries an absolute error of ``ε₃₂`` times its size, i.e. a
relative error of up to 1e-4 in ``A_α − 1``. Here the large parts are computed in
double-float32 (:mod:`jaxrdp._doublefloat`) and combined before the one rounding to float32,
so every term's log is exact to about one float32 ulp of *its distance to the shift*:

* **integer orders** (Mironov–Talwar–Zhang 2019, Sec. 3.3, as in :mod:`jaxrdp._grid`): the
  log-term ``log C(α,k) + log expm1(k(k−1)s²/2) + k·logit q + α·log(1 − q)`` has its
  order-free part ``w_k = log expm1(k(k−1)s²/2) + k·logit q`` computed once per cell and
  ``k`` in double-float, ``P = α·log(1 − q) − shift`` once per cell and order, the binomial
  logs as double-float constants; per term, one exact TwoSum of the two large heads and
  a handful of float32 additions, then one ``exp``. Orders from
  :data:`jaxrdp._grid.WINDOW_MIN_ORDER` on sum only their first and last 64 terms and add
  a bound on the rest (:func:`_windowed`); the few cells where that bound is not below
  e^-20 of the sum take every term.
* **fractional orders up to** :data:`jaxrdp._grid.SHARED_MAX_ORDER` on the nodes of
  :func:`jaxrdp._grid.shared_points` (tiers of its own): per node, the order-free
  ``EL = log w + log φ(t) + Λ(t)``, ``Λ = log(1 + x)``, is computed in double-float; the
  order-dependent ``(α − 1)·Λ`` is formed exactly enough by splitting ``α − 1`` (a
  constant) and the head of ``Λ`` into 12-bit parts, whose product is exact. With
  ``b = (α − 1)Λ`` and ``y = x/(1 + x)`` the term is ``e^{EL}·(expm1(b) − (α − 1)y)`` for
  ``b ≤ 1`` and ``e^{EL + b}·(1 − e^{−b}(1 + (α − 1)y))`` beyond (no cancellation there).
  Nodes with ``|x| ≤`` :data:`SERIES_RADIUS` use the binomial series through order-free
  moments, as :func:`jaxrdp._grid._scaled_log_a_minus_one` does.

Cells beyond the last tier (``1/σ > 3.4``) and orders outside both kinds use the float32
elementwise quadrature (:mod:`jaxrdp._tilted32`). Derivatives (``jax.grad``, ``jax.jvp``)
are those of the elementwise float32 quadrature, attached by :func:`jax.custom_jvp`: the
double-float arithmetic here is not differentiable (it splits significands bitwise).
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxrdp import _doublefloat as dd
from jaxrdp import _grid, _logmath, _quadrature

#: ``|x|`` up to which a node's ``g`` is summed as a series (the same for every shared
#: order: ``0.5/SHARED_MAX_ORDER``). Beyond it ``expm1(b) − (α − 1)y`` loses at most a
#: factor ``2/(α·|x|) ≤ 48`` to cancellation, i.e. a few 1e-6 on those nodes' terms.
SERIES_RADIUS = 0.5 / _grid.SHARED_MAX_ORDER
#: ``(largest 1/σ, panels, nodes per panel)`` of the float32 shared quadrature, as in
#: :data:`jaxrdp._grid.SHARED_TIERS` (panels ``HERMITE``: one centred Gauss–Hermite rule),
#: fewer nodes than float64's. Checked against the float64 elementwise quadrature over each
#: tier's σ range, ``q`` from 1e-30 to 1 − 1e-7 and orders 1.01 … 11.99
#: (``tests/test_kernels.py``): at most 3.6e-6 relative in ``log A`` where ``A − 1 > e^−30``
#: and 1e-5 below (the float32 spacing of ``log(A − 1)`` near −80 is 7.6e-6), its float32
#: rounding included. Fewer nodes leave that floor (512 random cells per tier: 16, 36 and
#: 64 nodes gave 9.4e-6, 2.4e-5 and 3.5e-5 where 24, 40 and 80 give 2.2e-6 to 2.9e-6);
#: 20 nodes reach it too but cost more than 24 (rows of a multiple of 8 floats vectorise
#: whole). A Hermite rule now also serves 1/σ ≤ 2 (the 6 × 14 panels were 84 nodes).
SHARED_TIERS = ((0.6, _grid.HERMITE, 24), (1.3, _grid.HERMITE, 40), (2.0, _grid.HERMITE, 80), (3.4, 12, 12))
#: (order, node) pairs per cell in one step of the float32 scan over fractional orders:
#: 8 orders per step on the first tier's 24 nodes, 4 on 40, 2 on 80. With one order per
#: step, the step's fixed cost was a fifth of the first tier's time. dp_accounting's
#: orders, the whole float32 grid, interleaved in one process (best of 30): linear grid
#: 14.1 → 12.9 µs per cell, geometric 16.8 → 15.6; 96 or 384 pairs: the same within noise.
_PAIRS_PER_STEP = 192
#: Cells per chunk of the integer orders, which run apart from the fractional ones (no
#: tiers to share): a chunk's program runs several hundred small steps, so 1 024 cells
#: instead of 256 took 3–11% off the whole float32 grid (four interleaved A/B runs). float64 keeps
#: 256: its order-free table of 1 024 cells (8 MB) made it 20–40% slower.
INTEGER_CHUNK = 1024
_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
#: Integer orders whose ``k(k−1)s²/2`` at ``k = α`` exceeds this give ``+inf`` (sound: the
#: true ``log A`` is then above ``1e36 − 88α``, which no accounting can use).
_HUGE_EXPONENT = 1e36


class _Cell(NamedTuple):
    """Double-float quantities of a chunk of cells, each field of shape ``(C,)``."""

    s: dd.DoubleFloat  # 1/σ
    s2: dd.DoubleFloat  # 1/σ²
    log_s: dd.DoubleFloat
    log_q: dd.DoubleFloat
    log1m_q: dd.DoubleFloat
    logit_q: dd.DoubleFloat


def _split_constant(values) -> tuple[np.ndarray, np.ndarray]:
    """float64 constants as ``(hi, lo)`` float32 NumPy arrays, ``hi + lo`` to ~2⁻⁴⁸."""
    v = np.asarray(values, np.float64)
    hi = v.astype(np.float32)
    return hi, (v - hi.astype(np.float64)).astype(np.float32)


def _opaque(*arrays):
    """float32 constants hidden from XLA's constant folding (see :func:`dd.full_like`)."""
    return jax.lax.optimization_barrier(tuple(jnp.asarray(a, jnp.float32) for a in arrays))


def _head(a):
    """``a`` with its significand cut to 12 bits, so that products of two heads are exact."""
    bits = jax.lax.bitcast_convert_type(a, jnp.uint32) & np.uint32(0xFFFFF000)
    return jax.lax.bitcast_convert_type(bits, jnp.float32)


def _twelve_bit(value: float) -> float:
    """``value`` rounded to 12 significant bits (a Python float, exact in float32)."""
    if value == 0.0:
        return 0.0
    exponent = math.frexp(value)[1]
    return math.ldexp(round(math.ldexp(value, 12 - exponent)), exponent - 12)


def _ex(a: dd.DoubleFloat) -> dd.DoubleFloat:
    return dd.DoubleFloat(a.hi[:, None], a.lo[:, None])


def _cell(q, sigma) -> _Cell:
    one = dd.full_like(q, 1.0)
    zero = jnp.zeros_like(q)
    one_minus_q = dd.two_sum(one.hi, -q)
    logs = dd.log(
        dd.DoubleFloat(
            jnp.stack([q, one_minus_q.hi, sigma], axis=-1),
            jnp.stack([zero, one_minus_q.lo, zero], axis=-1),
        )
    )
    log_q, log1m_q, log_sigma = (dd.DoubleFloat(logs.hi[:, i], logs.lo[:, i]) for i in range(3))
    s = dd.div(one, dd.from_float(sigma))
    return _Cell(
        s=s,
        s2=dd.mul(s, s),
        log_s=dd.neg(log_sigma),
        log_q=log_q,
        log1m_q=log1m_q,
        logit_q=dd.sub(log_q, log1m_q),
    )


# ---------------------------------------------------------------------------- integer orders


def _expm1_excess(y, log_y: dd.DoubleFloat):
    """``a = log expm1(y) − y`` as ``(hi, lo)``, for ``y = k(k−1)s²/2`` in float32.

    ``log(1 − e^{−y})`` for ``y ≥ 1`` (at most 0.46 in size: float32 suffices, ``lo = 0``);
    below, ``log y − y + log(expm1(y)/y)`` with ``log_y`` (``log y``, double-float, exact
    where float32 ``y`` is not) carrying the large part.
    """
    big = y >= 1.0
    y_small = jnp.clip(y, np.float32(np.finfo(np.float32).tiny), 1.0)
    small_part = jnp.log(jnp.expm1(y_small) / y_small) - y_small  # |y| < 1: exact enough
    below = dd.add(log_y, dd.from_float(small_part))
    above = jnp.log(-jnp.expm1(-jnp.maximum(y, 1.0)))
    return jnp.where(big, above, below.hi), jnp.where(big, 0.0, below.lo)


def _integer_shared(cell: _Cell, n_max: int) -> dd.DoubleFloat:
    """``w_k = log expm1(k(k−1)s²/2) + k·logit q`` for ``k = 2 … n_max`` → ``(C, n_max − 1)``.

    ``w_k = y_k + k·logit q + a_k`` with ``y_k = k(k−1)s²/2`` and ``a_k = log expm1(y) − y``:
    ``a_k = log(1 − e^{−y})`` for ``y ≥ 1`` (at most 0.46 in size, float32) and
    ``log y − y + log(expm1(y)/y)`` below, with ``log y = log(k(k−1)/2) + 2·log s`` in
    double-float. Up to ``n_max = 4 096`` the large part is ``k·((k−1)/2·s² + logit q)``,
    two products by numbers of at most 12 bits (:func:`dd.mul_short`), a third of the cost
    of two full double-float products; ``a_k`` is formed only up to the first column from
    which it is below 1e-16 in every cell (:func:`_grid.by_exact_head`).
    """
    k = np.arange(2, n_max + 1, dtype=np.float64)
    h = 0.5 * k * (k - 1.0)
    h32, lh_hi, lh_lo = _opaque(h, *_split_constant(np.log(h)))
    main = _large_part(_ex(cell.s2), _ex(cell.logit_q), k)
    y_f = h32[None, :] * cell.s2.hi[:, None]  # float32 y: for the branch and a_k
    log_2s = _ex(dd.scale(cell.log_s, 2.0))

    def adjustment(cols=slice(None)):  # a_k on the columns ``cols`` → (hi, lo)
        log_y = dd.add(dd.DoubleFloat(lh_hi[None, cols], lh_lo[None, cols]), log_2s)
        return _expm1_excess(y_f[:, cols], log_y)

    def with_head(head):
        # materialised: fused into the concatenation, it was evaluated on every column
        part = dd.materialise(*adjustment(slice(0, head - 2)))
        zeros = jnp.zeros_like(y_f[:, head - 2:])
        return tuple(jnp.concatenate([v, zeros], axis=1) for v in part)

    adj = _grid.by_exact_head(dd.to_float(cell.s), n_max + 1, with_head, adjustment)
    w = dd.add(main, dd.DoubleFloat(*adj))
    # computed once: every order's terms read it, and XLA would fuse the chain into each
    return dd.DoubleFloat(*dd.materialise(w.hi, w.lo))


def _large_part(s2: dd.DoubleFloat, logit_q: dd.DoubleFloat, k: np.ndarray) -> dd.DoubleFloat:
    """``k(k−1)/2·s² + k·logit q`` for static ``k`` (cells' values broadcast against ``k``).

    Up to ``k = 4 096`` as ``k·((k−1)/2·s² + logit q)``: ``k`` and ``(k − 1)/2`` have at most
    12 significant bits, so two :func:`dd.mul_short` products suffice; beyond, two full
    double-float products.
    """
    (k32,) = _opaque(k)
    if k.max() <= 4096:
        (half_m,) = _opaque(0.5 * (k - 1.0))
        return dd.mul_short(dd.add(dd.mul_short(s2, half_m), logit_q), k32)
    h_hi, h_lo = _opaque(*_split_constant(0.5 * k * (k - 1.0)))
    return dd.add(dd.mul(dd.DoubleFloat(h_hi, h_lo), s2), dd.mul(dd.from_float(k32), logit_q))


def _integer_group(w: dd.DoubleFloat, cell: _Cell, alphas: tuple[int, ...]):
    """log(A_α − 1) of one size class of integer orders → ``(C, G)``."""
    n_max = max(alphas)
    n_terms = n_max - 1  # k = 2 … n_max
    w = dd.DoubleFloat(w.hi[:, :n_terms], w.lo[:, :n_terms])
    log_binom = _grid._log_binomials(alphas)[:, 2:]  # (G, n_terms), −inf for k > α
    valid = np.isfinite(log_binom)
    c_hi, c_lo = _split_constant(np.where(valid, log_binom, 0.0))
    c_hi, c_lo, a32 = _opaque(c_hi, c_lo, np.asarray(alphas, np.float64))
    last = np.asarray(alphas, np.int32) - 2
    # Shift by the largest of every 8th term and the last one (see _grid._integer_group:
    # the true maximum is within 8 nats of it, far inside float32's range).
    stride = 8
    h_alpha = 0.5 * np.asarray(alphas, np.float64) * (np.asarray(alphas, np.float64) - 1.0)
    huge = cell.s2.hi[:, None] * np.float32(h_alpha) > np.float32(_HUGE_EXPONENT)  # (C, G)

    log_terms = _log_terms
    # Per (cell, order), all orders at once: P = α·log(1 − q), the shift, and its correction.
    p = dd.mul(dd.from_float(jnp.broadcast_to(a32, cell.s.hi.shape + a32.shape)), _ex(cell.log1m_q))
    ok_s = jnp.asarray(valid[:, ::stride])
    sample = jnp.where(ok_s, w.hi[:, None, ::stride] + c_hi[:, ::stride] + p.hi[..., None], -jnp.inf)
    at_last = lambda v: v[:, last]  # noqa: E731  (C, G) at k = α
    top = at_last(w.hi) + c_hi[np.arange(len(alphas)), last] + p.hi
    best = jnp.max(sample, axis=-1)
    shift = jnp.maximum(best, top)
    shift = jnp.where(jnp.isfinite(shift), shift, 0.0)
    rel = dd.add(p, dd.from_float(-shift))  # α·log(1 − q) − shift, (C, G)
    # A float32 shift is as coarse as float32's spacing at it (256 at 3e9): correct it by
    # the exact log-term of the sampled maximum, so that the terms stay within e^±9.
    pick = jnp.where(best >= top, jnp.argmax(sample, axis=-1) * stride, last)  # (C, G)
    rows = np.arange(len(alphas))[None, :]
    fix = log_terms(
        jnp.take_along_axis(w.hi, pick, axis=1), jnp.take_along_axis(w.lo, pick, axis=1),
        c_hi[rows, pick], c_lo[rows, pick], rel.hi, rel.lo,
    )
    fix = jnp.where(jnp.isfinite(fix), fix, 0.0)
    rel = dd.add(rel, dd.from_float(-fix))

    def summed(w_hi, w_lo, row_hi, row_lo, ok, rel_hi, rel_lo):  # one order or a whole class
        terms = jnp.exp(log_terms(w_hi, w_lo, row_hi, row_lo, rel_hi[..., None], rel_lo[..., None]))
        return jnp.sum(jnp.where(ok, terms, 0.0), axis=-1)

    if len(alphas) * n_terms <= _grid.INTEGER_BLOCK_TERMS:  # the class in one fused pass
        total = summed(w.hi[:, None, :], w.lo[:, None, :], c_hi, c_lo, valid, rel.hi, rel.lo)
    else:
        def body(_, order):
            row_hi, row_lo, ok, rel_hi, rel_lo = order
            return None, summed(w.hi, w.lo, row_hi, row_lo, ok, rel_hi, rel_lo)

        _, total = jax.lax.scan(body, None, (c_hi, c_lo, jnp.asarray(valid), rel.hi.T, rel.lo.T))
        total = total.T
    out = jnp.log(total) + (shift + fix)
    return jnp.where(huge, jnp.inf, out)


def _integer_log_a_minus_one(cell: _Cell, groups: tuple[tuple[int, ...], ...]):
    """log(A_α − 1) of integer orders in size classes → one ``(C, G_i)`` per class.

    Classes of orders from :data:`_grid.WINDOW_MIN_ORDER` on take :func:`_windowed`
    (with every term where its bound is not negligible), the others every term.
    """
    big_groups = tuple(alphas for alphas in groups if min(alphas) >= _grid.WINDOW_MIN_ORDER)
    big = sum(big_groups, ())
    every = [alphas for alphas in groups if min(alphas) < _grid.WINDOW_MIN_ORDER]
    n_max = max([max(alphas) for alphas in every] + [_grid.WINDOW_HEAD + 1] * bool(big))
    w = _integer_shared(cell, n_max)
    out = iter([_integer_group(w, cell, alphas) for alphas in every])
    if big:
        full = lambda c: jnp.concatenate(_every_term(c, big_groups), axis=1)  # noqa: E731
        windowed, bad = _windowed(w, cell, big)
        big_out = _grid.patch_cells(
            bad, windowed, lambda idx: full(jax.tree_util.tree_map(lambda v: v[idx], cell)))
        columns = iter(jnp.split(big_out, np.cumsum([len(g) for g in big_groups])[:-1], axis=1))
        return [next(columns) if min(alphas) >= _grid.WINDOW_MIN_ORDER else next(out) for alphas in groups]
    return list(out)


def _every_term(cell: _Cell, groups):
    w = _integer_shared(cell, max(max(alphas) for alphas in groups))
    return [_integer_group(w, cell, alphas) for alphas in groups]


#: ``y = k(k−1)s²/2`` from which :func:`_w_at` takes ``log expm1(y)`` as ``y``: the
#: dropped ``log(1 − e^{−y})`` is negative and above −2.1e-9 (far below float32's
#: resolution), so the log-terms can only rise.
_EXPM1_AS_IDENTITY_Y = 20.0


def _w_at(cell: _Cell, k: np.ndarray) -> dd.DoubleFloat:
    """``w_k`` of :func:`_integer_shared` at static ``k`` (any shape, ``k ≥ 2``) →
    ``(C,) + k.shape``.

    Where ``y = k(k−1)s²/2 ≥`` :data:`_EXPM1_AS_IDENTITY_Y` for every ``k`` and cell (one
    branch per chunk), ``log expm1(y)`` is taken as ``y``, which skips four transcendental
    functions per entry (for the big orders' tails and piece ends, ~280 ``k`` per cell with
    dp_accounting's orders: 16% of the float32 integer orders' time); else every part.
    """
    k = np.asarray(k, np.float64)
    h = 0.5 * k * (k - 1.0)
    h32, lh_hi, lh_lo = _opaque(h, *_split_constant(np.log(h)))
    ex = lambda a: dd.DoubleFloat(a.hi.reshape(a.hi.shape + (1,) * k.ndim),  # noqa: E731
                                  a.lo.reshape(a.lo.shape + (1,) * k.ndim))
    main = _large_part(ex(cell.s2), ex(cell.logit_q), k)

    def every_part():
        log_y = dd.add(dd.DoubleFloat(lh_hi, lh_lo), ex(dd.scale(cell.log_s, 2.0)))
        return dd.add(main, dd.DoubleFloat(*_expm1_excess(h32 * ex(cell.s2).hi, log_y)))

    if cell.s.hi.shape[0] < _grid._MIN_CELLS_FOR_SHORTCUTS:
        return every_part()
    # (rounding moves the float32 y by a few 1e-7 relative: the dropped part stays ≥ −2.1e-9)
    large = jnp.min(cell.s2.hi) * np.float32(h.min()) >= np.float32(_EXPM1_AS_IDENTITY_Y)
    return jax.lax.cond(large, lambda: main, every_part)


def _windowed(w_head: dd.DoubleFloat, cell: _Cell, alphas: tuple[int, ...]):
    """Orders ``≥ WINDOW_MIN_ORDER`` from their head and tail windows → ``((C, G), bad (C,))``.

    The windows are summed like :func:`_integer_group` (double-float log-terms shifted by
    their exact largest one). The middle's bound (:func:`_grid.middle_bound`, from float32
    log-terms at the piece ends raised by their rounding) is added; ``bad`` marks cells where
    it exceeds ``e^{−20}`` (:data:`_WINDOW_MARGIN`) of the windows' sum, which then need
    every term.
    """
    consts = _grid.window_constants(alphas)
    head = _grid.WINDOW_HEAD
    ks = np.concatenate([np.broadcast_to(np.arange(2, head + 2), (len(alphas), head)), consts.tail], axis=1)
    tail_w = _w_at(cell, consts.tail)  # (C, G, T)
    wh = w_head.hi[:, None, :head], w_head.lo[:, None, :head]
    w_hi = jnp.concatenate([jnp.broadcast_to(wh[0], tail_w.hi.shape[:2] + (head,)), tail_w.hi], axis=-1)
    w_lo = jnp.concatenate([jnp.broadcast_to(wh[1], tail_w.hi.shape[:2] + (head,)), tail_w.lo], axis=-1)
    log_binom = np.stack([_grid._log_binomials((a,))[0][row] for a, row in zip(alphas, ks)])
    c_hi, c_lo = _split_constant(log_binom)
    a32 = np.asarray(alphas, np.float64)
    p = dd.mul(dd.from_float(jnp.broadcast_to(jnp.asarray(a32, jnp.float32), cell.s.hi.shape + a32.shape)),
               _ex(cell.log1m_q))  # α·log(1 − q), (C, G)
    c_hi, c_lo = _opaque(c_hi, c_lo)
    coarse = w_hi + c_hi + p.hi[..., None]
    best = jnp.max(coarse, axis=-1)
    shift = jnp.where(jnp.isfinite(best), best, 0.0)
    rel = dd.add(p, dd.from_float(-shift))
    pick = jnp.argmax(coarse, axis=-1)[..., None]
    take = lambda v: jnp.take_along_axis(v, pick, axis=-1)[..., 0]  # noqa: E731
    c_b = lambda v: jnp.broadcast_to(v, coarse.shape)  # noqa: E731
    fix = _log_terms(take(w_hi), take(w_lo), take(c_b(c_hi)), take(c_b(c_lo)), rel.hi, rel.lo)
    fix = jnp.where(jnp.isfinite(fix), fix, 0.0)
    rel = dd.add(rel, dd.from_float(-fix))
    terms = jnp.exp(_log_terms(w_hi, w_lo, c_hi, c_lo, rel.hi[..., None], rel.lo[..., None]))
    log_sum = _logmath.log_positive(jnp.sum(terms, axis=-1)) + (shift + fix)
    # the middle: float32 log-terms at the piece ends, raised by their rounding
    end_w = _w_at(cell, consts.ends)
    end_binom = np.stack([_grid._log_binomials((a,))[0][row] for a, row in zip(alphas, consts.ends)])
    (end_c,) = _opaque(end_binom)
    log_ends = (end_w.hi + end_c) + p.hi[..., None]
    log_ends = log_ends + (_END_SLACK + 4e-7 * (jnp.abs(end_w.hi) + np.abs(end_binom) + jnp.abs(p.hi[..., None])))
    middle = _grid.middle_bound(log_ends, consts)
    huge = cell.s2.hi[:, None] * np.float32(0.5 * a32 * (a32 - 1.0)) > np.float32(_HUGE_EXPONENT)
    ok = (middle == -jnp.inf) | (middle <= log_sum - _WINDOW_MARGIN) | huge
    value = jnp.where(huge, jnp.inf, jnp.logaddexp(log_sum, middle))
    return value, ~jnp.all(ok, axis=-1)


#: The windows' sum is kept where the middle's bound is below e^-20 of it (2e-9, far inside
#: the float32 path's outward margin, and added anyway).
_WINDOW_MARGIN = 20.0
_END_SLACK = 1e-3


def _log_terms(w_hi, w_lo, c_hi, c_lo, rel_hi, rel_lo):
    """``w + c + rel`` of double-floats whose large parts ``w`` and ``rel`` cancel: one
    exact TwoSum of the heads, then float32 additions."""
    head = dd.two_sum(w_hi, rel_hi)
    return (head.hi + c_hi) + (head.lo + (w_lo + (rel_lo + c_lo)))


# ------------------------------------------------------------------------- fractional orders

#: Taylor coefficients 1/n! of expm1, n = 1 … 11: on |b| ≤ 1 the omitted tail is below
#: 1/12!·(1 + 1/13 + …) < 2.3e-9 relative.
_EXPM1_TAYLOR = tuple(1.0 / math.factorial(n) for n in range(1, 12))


def _expm1_near_zero(b):
    """``expm1(b)`` for ``|b| ≤ 1`` (other lanes: clipped), by a polynomial that XLA
    vectorises (its ``expm1`` on CPU is several times slower than ``exp``)."""
    b = jnp.clip(b, -1.0, 1.0)
    return _logmath.horner(b, _EXPM1_TAYLOR) * b


def _shared_log_a_minus_one(q, cell: _Cell, alphas: tuple[float, ...], n_panels: int, n_nodes: int):
    """log(A_α − 1) for fractional orders ``≤ SHARED_MAX_ORDER`` on shared nodes → ``(C, G)``."""
    alpha = np.asarray(alphas, np.float64)  # float32 values, exactly
    log_q_f, log1m_q_f = dd.to_float(cell.log_q), dd.to_float(cell.log1m_q)
    t, log_w = _grid.shared_points(log_q_f, log1m_q_f, dd.to_float(cell.s), float(alpha.max()),
                                   n_panels, n_nodes)
    t, log_w = jax.lax.stop_gradient(t), jax.lax.stop_gradient(log_w)
    in_use = jnp.isfinite(log_w)  # panels clipped to zero width have weight 0
    log_w = jnp.where(in_use, log_w, 0.0)

    # Order-free, per node: v = s·t − s²/2, z = v + logit q, Λ = log(1 − q) + softplus(z).
    v = dd.add(dd.mul(_ex(cell.s), dd.from_float(t)), _ex(dd.scale(cell.s2, -0.5)))
    z = dd.add(v, _ex(cell.logit_q))
    positive = z.hi > 0
    lam = dd.add(_ex(cell.log1m_q), dd.where(positive, z, dd.from_float(jnp.zeros_like(t))))
    lam = dd.add(lam, dd.from_float(jnp.log1p(jnp.exp(-jnp.abs(z.hi)))))
    base = dd.add(dd.scale(dd.two_prod(t, t), -0.5), dd.from_float(log_w - np.float32(_HALF_LOG_2PI)))
    el = dd.add(base, lam)  # log(w·φ(t)·(1 + x))
    lam_f = dd.to_float(lam)
    y = -jnp.expm1(-lam_f)  # x/(1 + x), without forming 1 + x

    # log|x| = log q + log|expm1(v)|: v in double-float where it is large.
    v_f = dd.to_float(v)
    abs_v = jnp.abs(v_f)
    v_big = jnp.maximum(v_f, 1.0)
    v_mid = jnp.where(abs_v < 1.0, v_f, 0.5)
    correction = jnp.where(
        v_f >= 1.0,
        jnp.log(-jnp.expm1(-v_big)),
        jnp.where(
            v_f <= -1.0,
            jnp.log(-jnp.expm1(jnp.minimum(v_f, -1.0))),
            jnp.log(jnp.abs(v_mid)) + jnp.log(jnp.expm1(v_mid) / v_mid),
        ),
    )
    nonzero = in_use & (v_f != 0.0)
    correction = jnp.where(nonzero, correction, 0.0)
    log_abs_x = dd.add(
        dd.add(_ex(cell.log_q), dd.where(v_f >= 1.0, v, dd.from_float(jnp.zeros_like(t)))),
        dd.from_float(correction),
    )
    small = nonzero & (dd.to_float(log_abs_x) <= np.float32(math.log(SERIES_RADIUS)))
    other = ~small & nonzero

    # Series nodes: g = C(α,2)·x²·Σ_j c_j x^j through the moments Σ w φ x² · x^j.
    coef = _logmath.series_coefficients(tuple(alphas), SERIES_RADIUS)  # (G, m)
    w_s = dd.add(base, dd.scale(log_abs_x, 2.0))
    top_s = jnp.max(jnp.where(small, w_s.hi, -jnp.inf), axis=-1)
    top_s = jnp.where(jnp.isfinite(top_s), top_s, 0.0)
    e_s = jnp.where(small, jnp.exp(dd.to_float(dd.add(w_s, dd.from_float(-top_s[:, None])))), 0.0)
    x_s = jnp.where(small, jnp.expm1(jnp.where(small, lam_f, 0.0)), 0.0)
    moments, power = [], e_s
    for _ in range(coef.shape[1]):
        moments.append(jnp.sum(power, axis=-1))
        power = power * x_s
    series = jnp.stack(moments, axis=-1) @ jnp.asarray(coef.T, jnp.float32)  # (C, G)
    log_series = (
        top_s[:, None]
        + np.float32(np.log(0.5 * alpha * (alpha - 1.0)))
        + _logmath.log_positive(series)
    )

    # Other nodes, one order at a time; (α − 1)·Λ = β_hi·head(Λ) (exact) + small parts.
    beta = alpha - 1.0
    beta_hi = np.array([_twelve_bit(b) for b in beta])
    beta_lo = beta - beta_hi
    lam_head = _head(lam.hi)
    lam_tail = lam.hi - lam_head
    b32, bh32, bl32 = _opaque(beta, beta_hi, beta_lo)

    # Shift of each order from the panel ends, as in _grid: every node with |x| > r shares
    # its panel with an end where |x| > r (x is monotone in t), and within a panel the log
    # of the terms is at most width²/8 ≤ 7 nats above the line through its ends; factors
    # below 1 (at least ~1e-5 next to the series radius) lower the terms by ≤ 12 nats.
    # A Hermite rule has no panels: its shift is the largest approximation over all nodes.
    n_total = t.shape[1]
    ends = np.arange(n_total) if n_panels == _grid.HERMITE else _logmath.panel_ends(n_total, n_nodes)
    b_ends = b32[None, :, None] * lam_f[:, None, ends]  # (C, G, E)
    approx = el.hi[:, None, ends] + jnp.maximum(b_ends, 0.0)
    shift = jnp.max(jnp.where(other[:, None, ends], approx, -jnp.inf), axis=-1)
    shift = jnp.where(jnp.isfinite(shift), shift, 0.0)  # (C, G)

    # Orders in blocks of `block` per scan step, each step on (C, block, N): the last block
    # is filled up with repeats of the last order, whose results are dropped.
    n_orders = len(alphas)
    block = max(1, min(n_orders, _PAIRS_PER_STEP // n_total))
    n_steps = -(-n_orders // block)
    fill = np.minimum(np.arange(n_steps * block), n_orders - 1)
    node = lambda a: a[:, None, :]  # noqa: E731  (C, N) → (C, 1, N)
    el_hi, el_lo, lam_hi, lam_lo = node(el.hi), node(el.lo), node(lam.hi), node(lam.lo)
    lam_f, lam_head, lam_tail, y, other = map(node, (lam_f, lam_head, lam_tail, y, other))

    def body(_, order):
        b_, bh, bl, shift = order  # (B,) each and (C, B)
        b_, bh, bl, shift = b_[:, None], bh[:, None], bl[:, None], shift[..., None]
        b = b_ * lam_f
        big = b > 1.0
        head = dd.two_sum(el_hi, bh * lam_head)  # exact
        rest = (bh * lam_tail + bl * lam_hi) + b_ * lam_lo
        log_big = (head.hi - shift) + (head.lo + (el_lo + rest))
        log_small = (el_hi - shift) + el_lo
        e = jnp.exp(jnp.where(big, -b, b))
        by = b_ * y
        factor = jnp.where(big, 1.0 - e * (1.0 + by), jnp.where(b >= -1.0, _expm1_near_zero(b), e - 1.0) - by)
        terms = jnp.exp(jnp.where(big, log_big, log_small)) * factor
        total = jnp.sum(jnp.where(other, terms, 0.0), axis=-1)
        return None, _logmath.log_positive(total) + shift[..., 0]

    steps = tuple(v[fill].reshape(n_steps, block) for v in (b32, bh32, bl32))
    shift_steps = shift[:, fill].reshape(-1, n_steps, block).transpose(1, 0, 2)
    _, log_other = jax.lax.scan(body, None, (*steps, shift_steps))  # (steps, C, B)
    log_other = log_other.transpose(1, 0, 2).reshape(-1, n_steps * block)[:, :n_orders]
    return jnp.logaddexp(log_series, log_other)


# ------------------------------------------------------------------------------ a chunk


def _elementwise(q, sigma, alphas: tuple[float, ...]):
    return _grid.elementwise_log_a_minus_one(q, sigma, alphas, _quadrature.FLOAT32_CONFIG)


@functools.partial(jax.custom_jvp, nondiff_argnums=(2,))
def chunk_log_a_minus_one(q, sigma, plan: _grid.OrderPlan):
    """``(C,)`` regular float32 cells → ``(C, K)`` log(A_α − 1), orders as in ``plan.orders``."""
    q, sigma = jax.lax.stop_gradient(q), jax.lax.stop_gradient(sigma)
    cell = _cell(q, sigma)
    orders32 = np.asarray(plan.orders, np.float64).astype(np.float32).astype(np.float64)
    blocks = []
    if plan.int_groups:
        groups = tuple(tuple(int(a) for a in alphas) for alphas, _ in plan.int_groups)
        blocks += _integer_log_a_minus_one(cell, groups)
    if plan.shared_idx.size:
        shared = tuple(float(orders32[i]) for i in plan.shared_idx)
        tiers = [
            functools.partial(_shared_log_a_minus_one, q, cell, shared, panels, nodes)
            for _, panels, nodes in SHARED_TIERS
        ]
        tiers.append(lambda: _elementwise(q, sigma, shared))
        limits = jnp.asarray([limit for limit, _, _ in SHARED_TIERS], jnp.float32)
        tier = jnp.searchsorted(limits, jnp.max(dd.to_float(cell.s)))
        blocks.append(jax.lax.switch(tier, tiers))
    if plan.other_idx.size:
        blocks.append(_elementwise(q, sigma, tuple(float(orders32[i]) for i in plan.other_idx)))
    return jnp.concatenate(blocks, axis=-1)[:, jnp.asarray(plan.inverse, jnp.int32)]


@chunk_log_a_minus_one.defjvp
def _chunk_jvp(plan, primals, tangents):
    out = chunk_log_a_minus_one(*primals, plan)
    orders = tuple(float(a) for a in plan.orders)
    _, tangent = jax.jvp(lambda a, b: _elementwise(a, b, orders), primals, tangents)
    return out, tangent
