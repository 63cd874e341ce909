"""The exact privacy profile δ(ε) of the Sampled Gaussian Mechanism (tight accounting).

For the add-or-remove relation δ(ε) = max(δ_remove(ε), δ_add(ε)) with
δ_dir(ε) = E_P[(1 − e^{ε − L_T})₊], L_T the sum of the T per-step privacy losses. For any c > 0

    δ_dir(ε) = (1/2π) ∫ Re[ M(c+iu)^T e^{−(c+iu)ε} / ((c+iu)(c+iu+1)) ] du,

with M(z) = A_{1+z} (remove) or B_{1+z} (add) of Mironov–Talwar–Zhang (2019), Sec. 3, evaluated
at complex orders by :mod:`jaxrdp._complex_moments`. A schedule of segments multiplies:
M_total = Π M_i^{T_i} (integer T_i, so the branch of log M is irrelevant).

Contour: c is the saddle point of Σ T_i log M_i(c) − cε − log(c(c+1)) (bisection: its
derivative is increasing in c); the step h from the curvature φ'' of that function and from c;
u_k = k·h, k < N_u (static), so the line is cut at H = N_u·h ≥ 2·√90·φ''^{-1/2}.

Error bound (added upward, so δ returned ≥ the true δ up to the stated heuristics):

* discretisation (Trefethen–Weideman 2014, Thm 5.1, the integrand being analytic in the strip
  |Re z − c| < a, a < c, away from the poles 0 and −1):
  |I_h − I| ≤ 2·max_± J(c ± a)/(e^{2πa/h} − 1), J(c') = (1/2π)∫|F| ≤ M(c')^T e^{−c'ε}/(2c')
  (|z(z+1)| ≥ c'² + u², and the maximum over the strip is at its edges by log-convexity);
* truncation at |u| > H: |M(c+iu)| ≤ min(M(c), TV_j/|u|) for each segment j (one integration by
  parts, TV_j the total variation of φ r^a/ℓ'), and |z(z+1)| ≥ u², integrated in closed form;
* moments: each M_i carries a relative error η_i (nested-rule estimate); M_total^T is then off by
  at most (e^{Σ T_i η_i} − 1)·|M_total^T| at each node, summed with the trapezoid weights;
* rounding: 8·eps·(Σ T_i|log M_i| + |z|ε + 10)·Σ|F| for the exponent and the sum.

Where this bound exceeds the RDP δ (few sampled steps, far tail: slow decay of |M(c+iu)|) the
RDP bound of :mod:`jaxrdp.conversions` (sound) is returned instead; per-element ``status`` says
which. ε(δ) is found by bisection on ε, started from the (sound) RDP ε and moving only to
points where the bounded δ is verified ≤ δ target, reusing the moments on the line
(two passes: the second line is centred at the first pass's ε).

Not implemented: a deformed contour or an exact split for the compound-Poisson regime, where the
RDP fallback is used. ``steps`` may be traced (it only enters arithmetically), but it must be an
integer count.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxrdp import _complex_moments as cm
from jaxrdp import _precision, _validate, conversions, kernels

__all__ = [
    "PROFILE_LOOSE",
    "PROFILE_OK",
    "RDP_FALLBACK",
    "ProfileDelta",
    "ProfileEpsilon",
    "delta",
    "delta_schedule",
    "epsilon",
    "epsilon_schedule",
]

#: status: the profile bound, with relative error bound ≤ 1e-6.
PROFILE_OK = 0
#: status: the profile bound, tighter than RDP but with a relative error bound > 1e-6.
PROFILE_LOOSE = 1
#: status: the profile could not beat the RDP bound; the RDP value is returned.
RDP_FALLBACK = 2

_E = 45.0  # target exponent for discretisation (e^-45)
_NX = 513
_NU = 384
_BATCH = 16


class ProfileDelta(NamedTuple):
    """δ(ε) with diagnostics; all fields of the broadcast shape."""

    delta: jax.Array  #: returned δ (min of the profile bound and RDP's δ)
    delta_remove: jax.Array  #: profile upper bound, remove direction
    delta_add: jax.Array  #: profile upper bound, add direction
    rel_error: jax.Array  #: bounded relative error of the profile value (max of directions)
    delta_rdp: jax.Array  #: RDP's δ
    status: jax.Array  #: PROFILE_OK, PROFILE_LOOSE or RDP_FALLBACK


class ProfileEpsilon(NamedTuple):
    """ε(δ) with diagnostics; all fields of the broadcast shape."""

    epsilon: jax.Array  #: returned ε (verified: bounded profile δ(ε) ≤ δ, or RDP's ε)
    epsilon_rdp: jax.Array  #: RDP's ε
    status: jax.Array  #: PROFILE_OK, PROFILE_LOOSE or RDP_FALLBACK


def _saddle(q, s, t, eps, direction, nx):
    """Bisection in log c on Σ T κ'(c) − ε − 1/c − 1/(c+1) (increasing in c)."""
    sg = jax.lax.stop_gradient
    q, s, t, eps = sg(q), sg(s), sg(t), sg(eps)

    def fprime(c):
        cc = jnp.broadcast_to(c, q.shape)
        _, k1, _, _ = cm.real_stats(q, s, cc, direction, nx)
        return jnp.sum(t * k1) - eps - 1.0 / c - 1.0 / (c + 1.0)

    def body(_, lohi):
        lo, hi = lohi
        mid = 0.5 * (lo + hi)
        up = fprime(jnp.exp(mid)) > 0
        return jnp.where(up, lo, mid), jnp.where(up, mid, hi)

    lo, hi = jax.lax.fori_loop(0, 40, body, (jnp.log(1e-6), jnp.log(300.0)))
    return jnp.exp(0.5 * (lo + hi))


def _line(q, s, t, eps_centre, direction, nx, nu):
    """Moments on the line centred for ε = eps_centre: everything the δ(ε) bound needs."""
    sg = jax.lax.stop_gradient
    c = _saddle(q, s, t, eps_centre, direction, nx)
    cs = jnp.broadcast_to(c, q.shape)
    kap, _, k2, log_tv = cm.real_stats(sg(q), sg(s), cs, direction, nx)
    phi2 = jnp.sum(t * k2) + 1.0 / c**2 + 1.0 / (c + 1.0) ** 2
    w = 1.0 / jnp.sqrt(phi2)
    h0 = jnp.minimum(jnp.pi * w * jnp.sqrt(2.0 / _E), 2.0 * jnp.pi * 0.9 * c / _E)
    h = sg(jnp.maximum(h0, 2.0 * w * jnp.sqrt(2.0 * _E) / nu))
    # strip half-width a: the best of a few candidates for the discretisation bound
    cands = []
    for frac in (0.9, 0.6, 0.4, 0.25, 0.15, 0.08, 0.04, 0.02):
        ac = frac * c
        km, _, _, _ = cm.real_stats(sg(q), sg(s), cs - ac, direction, nx)
        kp, _, _, _ = cm.real_stats(sg(q), sg(s), cs + ac, direction, nx)
        km, kp = jnp.sum(t * km), jnp.sum(t * kp)
        score = (jnp.maximum(km - (c - ac) * eps_centre, kp - (c + ac) * eps_centre)
                 - 2.0 * jnp.pi * ac / h)
        cands.append((score, ac, km, kp))
    best = cands[0]
    for cand in cands[1:]:
        better = cand[0] < best[0]
        best = tuple(jnp.where(better, x, y) for x, y in zip(cand, best))
    _, a, kap_m, kap_p = best
    u = h * jnp.arange(nu, dtype=c.dtype)
    uu = jnp.broadcast_to(u, q.shape + (nu,))
    log_m, eta = cm.log_moment_line(q, s, cs, uu, direction, nx)
    log_mt = jnp.sum(t[:, None] * log_m, axis=0)
    eta_t = jnp.sum(t[:, None] * jnp.log1p(eta), axis=0)  # log of (1+η)^T
    abs_logm = jnp.sum(t[:, None] * jnp.abs(log_m), axis=0)
    return dict(c=c, h=h, a=a, u=u, log_mt=log_mt, eta_t=eta_t, abs_logm=abs_logm,
                kap=jnp.sum(t * kap), kap_m=kap_m, kap_p=kap_p,
                log_u=sg(log_tv - kap), t=t)


def _log_delta_on_line(line, eps):
    """(log δ_up, relative error bound) on a precomputed line, at ε."""
    c, h, a, u = line["c"], line["h"], line["a"], line["u"]
    z = c + 1j * u
    log_f = line["log_mt"] - z * eps - jnp.log(z) - jnp.log(z + 1.0)
    p = jnp.real(log_f[0])
    f = jnp.exp(log_f - p)
    wts = jnp.where(jnp.arange(u.shape[0]) == 0, 1.0, 2.0) * h / (2.0 * jnp.pi)
    est = jnp.sum(wts * jnp.real(f))
    absf = jnp.abs(f)
    mom = jnp.sum(wts * jnp.exp(jnp.minimum(jnp.log(absf + 1e-300)
                                         + jnp.log(jnp.expm1(line["eta_t"]) + 1e-300), 700.0)))
    rnd = 8.0 * cm._EPS * jnp.sum(wts * absf * (line["abs_logm"] + jnp.abs(z) * eps + 10.0))
    # discretisation
    log_j = lambda cp, kp: kp - cp * eps - jnp.log(2.0 * cp)
    log_disc = (jnp.log(2.0) + jnp.maximum(log_j(c - a, line["kap_m"]), log_j(c + a, line["kap_p"]))
                - jnp.log(jnp.expm1(jnp.minimum(2.0 * jnp.pi * a / h, 700.0))))
    # truncation at H
    big_h = h * u.shape[0]
    t = line["t"]
    log_uu = line["log_u"]
    uu = jnp.exp(jnp.minimum(log_uu, 700.0))
    beyond = t * (log_uu - jnp.log(big_h)) - jnp.log(big_h) - jnp.log(t + 1.0)
    inside = jnp.log(jnp.maximum(1.0 / big_h - 1.0 / uu + 1.0 / ((t + 1.0) * uu), 1e-300))
    log_jt = jnp.min(jnp.where(big_h >= uu, beyond, inside))
    log_trunc = line["kap"] - c * eps - jnp.log(jnp.pi) + log_jt
    err = mom + rnd + jnp.exp(jnp.minimum(log_disc - p, 700.0)) + jnp.exp(
        jnp.minimum(log_trunc - p, 700.0))
    up = est + err
    log_up = p + jnp.log(jnp.maximum(up, 1e-300))
    rel = err / jnp.maximum(est, 1e-300)
    return log_up, jnp.where(est > 0, rel, jnp.inf)


def _delta_cell(q, s, t, eps, nx, nu):
    out = []
    for direction in ("remove", "add"):
        line = _line(q, s, t, eps, direction, nx, nu)
        out.append(_log_delta_on_line(line, eps))
    (lr, rr), (la, ra) = out
    # add direction: L ≤ −Σ T log(1−q) surely, so δ_add = 0 beyond it (exact).
    lmax = -jnp.sum(t * jnp.log1p(-jnp.minimum(q, 1.0 - 1e-300)))
    zero_add = eps >= jnp.where(jnp.all(q < 1.0), lmax, jnp.inf)
    la = jnp.where(zero_add, -jnp.inf, la)
    ra = jnp.where(zero_add, 0.0, ra)
    return lr, la, jnp.maximum(rr, ra)


def _eps_cell(q, s, t, log_delta, eps_rdp, nx, nu):
    sg = jax.lax.stop_gradient
    hi = sg(eps_rdp)
    centre = 0.88 * hi
    for _ in range(2):
        lines = [_line(q, s, t, centre, d, nx, nu) for d in ("remove", "add")]

        def ok(e):
            lr = _log_delta_on_line(lines[0], e)[0]
            la = _log_delta_on_line(lines[1], e)[0]
            return jnp.maximum(lr, la) <= log_delta

        def body(_, lohi):
            lo, hi_ = lohi
            mid = 0.5 * (lo + hi_)
            good = ok(mid)
            return jnp.where(good, lo, mid), jnp.where(good, mid, hi_)

        _, hi = jax.lax.fori_loop(0, 50, body, (jnp.zeros_like(hi), hi))
        hi = sg(hi)
        centre = hi
    rel = jnp.maximum(_log_delta_on_line(lines[0], hi)[1], _log_delta_on_line(lines[1], hi)[1])
    # implicit-function gradient: value unchanged, d/dθ = −∂logδ/∂θ / ∂logδ/∂ε
    ld = lambda e: jnp.maximum(_log_delta_on_line(lines[0], e)[0], _log_delta_on_line(lines[1], e)[0])
    d0 = ld(hi)
    slope = sg((ld(hi * (1 + 1e-6) + 1e-9) - d0) / (hi * 1e-6 + 1e-9))
    corr = (d0 - sg(d0)) / jnp.where(slope < 0, slope, -1.0)
    return hi - corr, rel


def _prepare(q, sigma, steps, target):
    """Eager checks of the segments (tracers are skipped) and the precision rule."""
    _validate.check_range("q", q, low=0.0, high=1.0)
    _validate.check_range("sigma", sigma, low=0.0, low_inclusive=False)
    _validate.check_integer("steps", steps, low=0)
    return _precision.compute_context(q, sigma, steps, target)


def _flatten(q, sigma, steps, target, dtype):
    q, sigma, steps = (jnp.asarray(v, dtype) for v in (q, sigma, steps))
    target = jnp.asarray(target, dtype)
    seg = jnp.broadcast_shapes(q.shape, sigma.shape, steps.shape)
    if len(seg) == 0:
        seg = (1,)
    shape = jnp.broadcast_shapes(seg[:-1], target.shape)
    full = shape + seg[-1:]
    flat = [jnp.broadcast_to(v if v.ndim else v[None], full).reshape(-1, seg[-1])
            for v in (q, sigma, steps)]
    return flat, jnp.broadcast_to(target, shape).reshape(-1), shape, seg


@functools.partial(jax.jit, static_argnames=("nx", "nu"))
def _delta_core(q, s, t, eps, nx, nu):
    active = (jnp.sum(t * (q > 0), axis=-1) > 0) & (eps < jnp.inf)
    qs = jnp.where(q > 0, q, 0.5)
    ts = jnp.where(q > 0, t, 0.0)
    ts = jnp.where(active[:, None], ts, 1.0)
    qs = jnp.where(active[:, None], qs, 0.5)
    es = jnp.where(active, eps, 1.0)
    cell = lambda args: _delta_cell(*args, nx, nu)
    lr, la, rel = jax.lax.map(cell, (qs, s, ts, es), batch_size=_BATCH)
    curve = conversions.compose_rdp(q, s, t)
    d_rdp, _ = conversions.delta_from_rdp(curve, jnp.asarray(kernels.DEFAULT_ORDERS, q.dtype), eps)
    lp = jnp.maximum(lr, la)
    d_prof = jnp.exp(lp)
    use_rdp = ~(d_prof < d_rdp)
    d = jnp.where(use_rdp, d_rdp, jnp.maximum(d_prof, jnp.finfo(q.dtype).tiny))
    status = jnp.where(use_rdp, RDP_FALLBACK, jnp.where(rel <= 1e-6, PROFILE_OK, PROFILE_LOOSE))
    d = jnp.where(active, d, 0.0)
    status = jnp.where(active, status, PROFILE_OK)
    return ProfileDelta(d, jnp.exp(lr), jnp.exp(la), rel, d_rdp, status)


@functools.partial(jax.jit, static_argnames=("nx", "nu"))
def _epsilon_core(q, s, t, dlt, nx, nu):
    active = (jnp.sum(t * (q > 0), axis=-1) > 0) & (dlt < 1.0)
    curve = conversions.compose_rdp(q, s, t)
    e_rdp, _ = conversions.epsilon_from_rdp(curve, jnp.asarray(kernels.DEFAULT_ORDERS, q.dtype),
                                            jnp.where(dlt > 0, dlt, 1e-300))
    qs = jnp.where(q > 0, q, 0.5)
    ts = jnp.where(q > 0, t, 0.0)
    ts = jnp.where(active[:, None], ts, 1.0)
    qs = jnp.where(active[:, None], qs, 0.5)
    finite = jnp.isfinite(e_rdp) & (e_rdp > 0)
    er = jnp.where(finite, e_rdp, 1.0)
    ld = jnp.log(jnp.where(dlt > 0, dlt, 1e-300))
    cell = lambda args: _eps_cell(*args, nx, nu)
    e, rel = jax.lax.map(cell, (qs, s, ts, ld, er), batch_size=_BATCH)
    use_rdp = ~(e < er) | ~finite
    out = jnp.where(use_rdp, e_rdp, e)
    status = jnp.where(use_rdp, RDP_FALLBACK, jnp.where(rel <= 1e-6, PROFILE_OK, PROFILE_LOOSE))
    out = jnp.where(active, out, 0.0)
    status = jnp.where(active, status, PROFILE_OK)
    return ProfileEpsilon(out, e_rdp, status)


def epsilon_core(q, sigma, steps, delta):
    """ε(δ) of single-segment runs for internal callers (no checks), flat ``(n,)`` arrays.

    The calibrators of :mod:`jaxrdp.sweep` search over it (``accountant="profile"``).
    """
    return _epsilon_core(q[:, None], sigma[:, None], steps[:, None], delta, _NX, _NU).epsilon


def delta_schedule(q, sigma, steps, epsilon, *, nx: int = _NX, nu: int = _NU) -> ProfileDelta:
    """δ(ε) of a schedule of SGM segments composed (add-or-remove, tight).

    Args:
      q: per-segment sampling rates in ``[0, 1]``, shape ``(..., S)`` (last axis: segments).
      sigma: per-segment noise multipliers ``> 0``, broadcastable with ``q``.
      steps: per-segment integer step counts ``≥ 0``, broadcastable with ``q``.
      epsilon: ε ≥ 0, shape broadcastable with ``(...)``.
      nx: static number of x-quadrature nodes of the complex moments.
      nu: static number of nodes on the half-line of the inverse Laplace integral.

    Returns:
      :class:`ProfileDelta` of the broadcast batch shape.

    Raises:
      ValueError: with concrete inputs, naming an invalid argument.
    """
    dtype, ctx = _prepare(q, sigma, steps, epsilon)
    with ctx:
        (qf, sf, tf), ef, shape, _ = _flatten(q, sigma, steps, epsilon, dtype)
        res = _delta_core(qf, sf, tf, ef, nx, nu)
        return ProfileDelta(*(v.reshape(shape) for v in res))


def epsilon_schedule(q, sigma, steps, delta, *, nx: int = _NX, nu: int = _NU) -> ProfileEpsilon:
    """ε(δ) of a schedule of SGM segments composed (add-or-remove, tight).

    Args:
      q: per-segment sampling rates in ``[0, 1]``, shape ``(..., S)`` (last axis: segments).
      sigma: per-segment noise multipliers ``> 0``, broadcastable with ``q``.
      steps: per-segment integer step counts ``≥ 0``, broadcastable with ``q``.
      delta: target δ in ``[0, 1]``, shape broadcastable with ``(...)``.
      nx: static number of x-quadrature nodes of the complex moments.
      nu: static number of nodes on the half-line of the inverse Laplace integral.

    Returns:
      :class:`ProfileEpsilon` of the broadcast batch shape (``.epsilon`` verified: the
      bounded profile δ there is at most ``delta``, or the RDP ε).

    Raises:
      ValueError: with concrete inputs, naming an invalid argument.
    """
    dtype, ctx = _prepare(q, sigma, steps, delta)
    if _validate.is_concrete(delta):
        _validate.check_range("delta", delta, low=0.0, high=1.0)
    with ctx:
        (qf, sf, tf), df, shape, _ = _flatten(q, sigma, steps, delta, dtype)
        res = _epsilon_core(qf, sf, tf, df, nx, nu)
        return ProfileEpsilon(*(v.reshape(shape) for v in res))


def delta(q, sigma, steps, epsilon, **kw) -> ProfileDelta:
    """Tight δ(ε) of ``steps`` SGM steps; all four arguments broadcast (NumPy rules).

    Args:
      q: sampling rate in ``[0, 1]``.
      sigma: noise multiplier ``> 0``.
      steps: integer number of steps ``≥ 0``.
      epsilon: ε ≥ 0.
      **kw: ``nx``, ``nu`` as in :func:`delta_schedule`.

    Returns:
      :class:`ProfileDelta` (``.delta`` is never below the true δ; see the module docstring).

    Raises:
      ValueError: with concrete inputs, naming an invalid argument.
    """
    q, sigma, steps = (np.asarray(v) if not isinstance(v, (jax.Array, jax.core.Tracer)) else v
                       for v in (q, sigma, steps))
    return delta_schedule(q[..., None], sigma[..., None], steps[..., None], epsilon, **kw)


def epsilon(q, sigma, steps, delta, **kw) -> ProfileEpsilon:
    """Tight ε(δ) of ``steps`` SGM steps; all four arguments broadcast (NumPy rules).

    Args:
      q: sampling rate in ``[0, 1]``.
      sigma: noise multiplier ``> 0``.
      steps: integer number of steps ``≥ 0``.
      delta: target δ in ``[0, 1]``.
      **kw: ``nx``, ``nu`` as in :func:`delta_schedule`.

    Returns:
      :class:`ProfileEpsilon` (``.epsilon`` is never below the true ε).

    Raises:
      ValueError: with concrete inputs, naming an invalid argument.
    """
    q, sigma, steps = (np.asarray(v) if not isinstance(v, (jax.Array, jax.core.Tracer)) else v
                       for v in (q, sigma, steps))
    return epsilon_schedule(q[..., None], sigma[..., None], steps[..., None], delta, **kw)
