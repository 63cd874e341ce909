"""A batched, safeguarded root finder for monotone feasibility problems.

Every lane ``i`` of a batch holds a problem "find the boundary ``x*`` of the feasible set
``{x : value_i(x) ≤ 0}`` in ``[lower_i, upper_i]``", where feasibility is monotone in ``x``
(feasible above the boundary or below it, :class:`Domain`). :func:`find_root` evaluates
the whole batch at once per iteration, keeps a bracket ``[infeasible, feasible]`` per lane,
and stops each lane separately (a per-lane convergence mask) once its bracket is narrower
than ``tol`` in the search coordinate (``log x`` on a log scale), or, for integer
domains, once no integer is left strictly inside it. The feasible end of the bracket is
always a point that was evaluated and found feasible, so callers may return it as a
conservative answer.

The next point of a lane comes from a *proposer*: by default a secant step on the signed
value (bisection while fewer than two values are known, or when the callable returns a
bare feasibility mask); a caller with a cheap model of its function can pass its own
(:class:`Proposer`). Proposals are safeguarded as in Chandrupatla (1997): kept inside the
bracket, replaced by bisection when they leave it or the bracket fails to halve in two
iterations, and nudged across the root by a small overshoot that grows while the same
side repeats, so that the last two evaluations straddle it. Lanes still pending once few
are left are gathered into smaller batches, so that stragglers do not cost a full-batch
evaluation each.

The solver knows nothing about what is evaluated: per-lane data (``args``) is any pytree
of arrays with a leading batch axis; it is gathered along with the lanes.

References:
  Chandrupatla (1997), "A new hybrid quadratic/bisection algorithm for finding the zero
  of a nonlinear function without using derivatives", Adv. Eng. Softw. 28(3).
"""

from __future__ import annotations

import enum
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

MAX_ITERATIONS = 64  # bisection alone needs < 40 in double precision
_MAX_STEP = 3.0  # largest move of one model step while the root is unbracketed
_FAR = 16.0  # a proposal further than this many tol beyond a known end is distrusted
_COMPACTION = 8  # stragglers are gathered into batches 8× smaller ...
_MIN_COMPACTED = 64  # ... of at least this many lanes


class Domain(NamedTuple):
    """Where a batch of roots is searched.

    Attributes:
      lower: ``(n,)`` lower ends (``> 0`` on a log scale); evaluated exactly when reached.
      upper: ``(n,)`` upper ends.
      feasible_above: static; ``True`` if feasibility holds for ``x ≥ x*`` (e.g. noise),
        ``False`` if for ``x ≤ x*`` (e.g. a sampling rate or a step count).
      log_scale: static; search in ``log x`` (``tol`` is then relative).
      integer: static; evaluate integers only (proposals rounded toward the feasible
        side, strictly inside the bracket) and stop once the two ends are adjacent
        integers. The ends of the domain should be integers.
    """

    lower: jax.Array
    upper: jax.Array
    feasible_above: bool = True
    log_scale: bool = True
    integer: bool = False


class Probe(NamedTuple):
    """What a proposer sees after an evaluation (leading axis: the current lanes).

    Attributes:
      v: ``(n,)`` the point just evaluated, in the search coordinate (feasible side up).
      x: ``(n,)`` the same point in the caller's variable.
      value: ``(n,)`` what the callable returned (signed value or feasibility mask).
      feasible: ``(n,)`` bool.
      aux: the callable's auxiliary output (pytree) or ``None``.
      to_x: maps search coordinates of shape ``(n,)`` or ``(n, m)`` to ``x``.
      iteration: scalar int, the loop iteration.
      full_batch: Python bool, ``False`` inside a gathered batch of stragglers.
    """

    v: jax.Array
    x: jax.Array
    value: jax.Array
    feasible: jax.Array
    aux: Any
    to_x: Callable
    iteration: jax.Array
    full_batch: bool


class Proposer(NamedTuple):
    """A rule for the next point to evaluate.

    Attributes:
      init: ``(v0, args, to_x) -> (v0, memory)``: the first point (a model may move the
        caller's start; NaN keeps it) and the per-lane memory (pytree, leading axis ``n``).
        ``to_x`` maps search coordinates to ``x``.
      propose: ``(probe, memory, args) -> (v_next, memory)``; ``v_next`` ``(n,)`` in the
        search coordinate, NaN for "no proposal" (the solver then bisects).
    """

    init: Callable
    propose: Callable


class SolverStatus(enum.IntEnum):
    """Per-lane outcome of :func:`find_root`."""

    CONVERGED = 0  # bracket narrower than tol (or no integer left inside)
    ALL_FEASIBLE = 1  # the infeasible-side end of the domain is feasible
    NONE_FEASIBLE = 2  # the feasible-side end of the domain is infeasible
    NOT_CONVERGED = 3  # iteration limit reached
    INACTIVE = 4  # lane not searched


class Root(NamedTuple):
    """Result of :func:`find_root`, per lane.

    Attributes:
      x: ``(n,)`` the feasible end of the final bracket (evaluated and feasible when
        ``found``; else the feasible-side end of the domain, not evaluated).
      x_other: ``(n,)`` the infeasible end (evaluated when ``bracketed``).
      found: ``(n,)`` a feasible point was evaluated.
      bracketed: ``(n,)`` an infeasible point was evaluated.
      converged: ``(n,)`` convergence mask (both ends known and close).
      all_feasible: ``(n,)`` the infeasible-side end of the domain was found feasible.
      none_feasible: ``(n,)`` the feasible-side end of the domain was found infeasible.
      status: ``(n,)`` int32 :class:`SolverStatus`.
      evaluations: ``(n,)`` int32 evaluations each lane needed.
      iterations: scalar int32, loop iterations of the batch.
    """

    x: jax.Array
    x_other: jax.Array
    found: jax.Array
    bracketed: jax.Array
    converged: jax.Array
    all_feasible: jax.Array
    none_feasible: jax.Array
    status: jax.Array
    evaluations: jax.Array
    iterations: jax.Array


class _Ends(NamedTuple):
    """Per-lane ends of the domain, in the search coordinate and exactly in ``x``."""

    v_min: jax.Array  # infeasible-side end
    v_max: jax.Array  # feasible-side end
    x_min: jax.Array
    x_max: jax.Array


class _State(NamedTuple):
    it: jax.Array  # scalar
    v: jax.Array  # the point to evaluate next
    v_f: jax.Array  # feasible end of the bracket
    x_f: jax.Array
    f_known: jax.Array
    v_i: jax.Array  # infeasible end
    x_i: jax.Array
    i_known: jax.Array
    streak: jax.Array  # evaluations in a row on the same side
    last_feasible: jax.Array
    width1: jax.Array  # bracket widths one and two iterations ago
    width2: jax.Array
    done: jax.Array
    evaluations: jax.Array
    memory: Any  # the proposer's


def _to_v(domain: Domain, x):
    u = jnp.log(x) if domain.log_scale else x
    return u if domain.feasible_above else -u


def _to_x(domain: Domain, ends: _Ends, v):
    """``x`` at search coordinates ``v`` ``(n,)`` or ``(n, m)``; exact at the domain's ends."""
    lane = (lambda a: a[:, None]) if jnp.ndim(v) == 2 else (lambda a: a)
    v_min, v_max, x_min, x_max = (lane(a) for a in ends)
    u = v if domain.feasible_above else -v
    x = jnp.exp(u) if domain.log_scale else u
    x = jnp.clip(x, jnp.minimum(x_min, x_max), jnp.maximum(x_min, x_max))
    return jnp.where(v <= v_min, x_min, jnp.where(v >= v_max, x_max, x))


def secant() -> Proposer:
    """The default proposer: a secant step through the last two signed values."""

    def init(v0, args, to_x):
        del args, to_x
        return v0, (v0, jnp.full_like(v0, jnp.nan))

    def propose(probe: Probe, memory, args):
        del args
        v_prev, g_prev = memory
        g = jnp.asarray(probe.value, probe.v.dtype)
        slope = (g - g_prev) / (probe.v - v_prev)
        usable = jnp.isfinite(slope) & (slope < 0)
        v_next = jnp.where(usable, probe.v - g / jnp.where(usable, slope, -1.0), jnp.nan)
        return v_next, (probe.v, g)

    return Proposer(init, propose)


def _bisection() -> Proposer:
    return Proposer(lambda v0, args, to_x: (v0, ()), lambda probe, memory, args: (
        jnp.full_like(probe.v, jnp.nan), memory))


def find_root(
    fn: Callable,
    domain: Domain,
    start,
    *,
    tol: float,
    args=(),
    active=None,
    proposer: Proposer | None = None,
    max_iterations: int = MAX_ITERATIONS,
) -> Root:
    """Batched search for the boundary of a monotone feasible set, per lane.

    Args:
      fn: ``(x, args) -> value`` or ``-> (value, aux)`` for ``x`` of shape ``(n,)``:
        a signed value (feasible iff ``value ≤ 0``; NaN is infeasible) or a boolean
        feasibility mask. ``aux`` (any pytree) is handed to the proposer.
      domain: the :class:`Domain` (``(n,)`` finite ends, static flags).
      start: ``(n,)`` the first point evaluated in each lane (clipped to the domain).
      tol: bracket width at which a lane stops, in the search coordinate (``log x`` on
        a log scale, ``x`` otherwise). A Python float.
      args: per-lane data for ``fn`` and the proposer: a pytree of arrays with leading
        axis ``n``, gathered with the lanes.
      active: ``(n,)`` bool, lanes to search (default all); the others are left alone
        and reported :attr:`SolverStatus.INACTIVE`.
      proposer: next-point rule; default :func:`secant` (bisection for masks).
      max_iterations: loop limit (Python int).

    Returns:
      A :class:`Root`.
    """
    start = jnp.asarray(start)
    n = start.shape[0]
    dtype = start.dtype
    lower = jnp.broadcast_to(jnp.asarray(domain.lower, dtype), (n,))
    upper = jnp.broadcast_to(jnp.asarray(domain.upper, dtype), (n,))
    domain = domain._replace(lower=lower, upper=upper)
    if domain.feasible_above:
        ends = _Ends(_to_v(domain, lower), _to_v(domain, upper), lower, upper)
    else:
        ends = _Ends(_to_v(domain, upper), _to_v(domain, lower), upper, lower)
    active = jnp.ones((n,), bool) if active is None else active
    v0 = jnp.clip(_to_v(domain, start), ends.v_min, ends.v_max)
    v0 = jnp.where(jnp.isnan(v0), 0.5 * (ends.v_min + ends.v_max), v0)

    def evaluate(x, lane_args):
        out = fn(x, lane_args)
        value, aux = out if isinstance(out, tuple) else (out, None)
        value = jnp.asarray(value)
        return value, (value if value.dtype == jnp.bool_ else value <= 0), aux

    if proposer is None:
        probe_value = jax.eval_shape(lambda: evaluate(start, args)[0])
        rule = _bisection() if probe_value.dtype == jnp.bool_ else secant()
    else:
        rule = proposer

    def finished(s: _State, ends: _Ends):
        both = s.f_known & s.i_known
        conv = both & (s.v_f - s.v_i <= tol)
        if domain.integer:
            if domain.feasible_above:
                conv = conv | (both & (jnp.ceil(s.x_f) - 1.0 <= s.x_i))
            else:
                conv = conv | (both & (jnp.floor(s.x_f) + 1.0 >= s.x_i))
        all_feasible = s.f_known & (s.v_f <= ends.v_min)
        none_feasible = s.i_known & (s.v_i >= ends.v_max)
        return conv, all_feasible, none_feasible

    def step(s: _State, lanes, full_batch: bool) -> _State:
        ends, lane_args = lanes
        x = _to_x(domain, ends, s.v)
        if domain.integer:  # every point proposed is an integer: undo exp/log round-off
            x = jnp.round(x)
        value, feasible, aux = evaluate(x, lane_args)
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
        conv, all_feasible, none_feasible = finished(s, ends)
        done = s.done | conv | all_feasible | none_feasible

        probe = Probe(s.v, x, value, feasible, aux, lambda v: _to_x(domain, ends, v), s.it,
                      full_batch)
        proposal, memory = rule.propose(probe, s.memory, lane_args)
        if domain.log_scale:
            proposal = jnp.clip(proposal, s.v - _MAX_STEP, s.v + _MAX_STEP)

        # Overshoot toward the side not seen last, growing while the same side repeats,
        # so that the final two evaluations straddle the root.
        streak = jnp.where(feasible == s.last_feasible, s.streak + 1, 1)
        bias = 0.25 * tol * 8.0 ** jnp.minimum(streak - 1, 12).astype(dtype)
        proposal = proposal + jnp.where(feasible, -bias, bias)

        # Safeguards. Both ends known: bisect when the proposal leaves the bracket or the
        # bracket has not halved over two iterations. One end known: a proposal far
        # beyond it (the model contradicts the data) is replaced by a fixed step away
        # from it. No proposal: bisect the bracket, the domain's ends standing in for
        # the unknown ones.
        both = s.f_known & s.i_known
        width = jnp.where(both, s.v_f - s.v_i, jnp.inf)
        lo = jnp.where(s.i_known, s.v_i + 0.25 * tol, ends.v_min)
        hi = jnp.where(s.f_known, s.v_f - 0.25 * tol, ends.v_max)
        outside = ~((proposal >= lo) & (proposal <= hi))
        bisect = (both & (outside | (width > 0.5 * s.width2))) | jnp.isnan(proposal)
        far = ~((proposal >= lo - _FAR * tol) & (proposal <= hi + _FAR * tol))
        if domain.log_scale:
            proposal = jnp.where(s.i_known & ~s.f_known & far, s.v_i + 0.5, proposal)
            proposal = jnp.where(s.f_known & ~s.i_known & far, s.v_f - 0.5, proposal)
        else:
            bisect = bisect | (far & (s.f_known ^ s.i_known))
        proposal = jnp.where(bisect, 0.5 * (s.v_f + s.v_i), proposal)
        lo = jnp.maximum(lo, ends.v_min)
        proposal = jnp.clip(proposal, lo, jnp.maximum(jnp.minimum(hi, ends.v_max), lo))
        if domain.integer:
            proposal = _integer_inside(domain, ends, s, proposal)

        keep = lambda new, old: jnp.where(  # noqa: E731
            upd.reshape(upd.shape + (1,) * (jnp.ndim(new) - 1)), new, old
        )
        return s._replace(
            it=s.it + 1,
            v=jnp.where(done, s.v, proposal),
            streak=jnp.where(upd, streak, s.streak),
            last_feasible=jnp.where(upd, feasible, s.last_feasible),
            width1=jnp.where(upd, width, s.width1),
            width2=jnp.where(upd, s.width1, s.width2),
            done=done,
            evaluations=s.evaluations + upd.astype(jnp.int32),
            memory=jax.tree_util.tree_map(keep, memory, s.memory),
        )

    moved, memory = rule.init(v0, args, lambda v: _to_x(domain, ends, v))
    v0 = jnp.clip(jnp.where(jnp.isfinite(moved), moved, v0), ends.v_min, ends.v_max)
    if domain.integer:
        start_x = _to_x(domain, ends, v0)
        start_x = jnp.ceil(start_x) if domain.feasible_above else jnp.floor(start_x)
        v0 = _to_v(domain, jnp.clip(start_x, jnp.ceil(lower), jnp.floor(upper)))
    false = jnp.zeros((n,), bool)
    inf = jnp.full((n,), jnp.inf, dtype)
    s = _State(
        it=jnp.zeros((), jnp.int32),
        v=v0,
        v_f=ends.v_max,
        x_f=ends.x_max,
        f_known=false,
        v_i=ends.v_min,
        x_i=ends.x_min,
        i_known=false,
        streak=jnp.zeros((n,), jnp.int32),
        last_feasible=false,
        width1=inf,
        width2=inf,
        done=~active,
        evaluations=jnp.zeros((n,), jnp.int32),
        memory=memory,
    )
    s = _iterate(step, s, (ends, args), _compaction_sizes(n), max_iterations, True)
    conv, all_feasible, none_feasible = finished(s, ends)
    status = jnp.full((n,), int(SolverStatus.NOT_CONVERGED), jnp.int32)
    status = jnp.where(conv, int(SolverStatus.CONVERGED), status)
    status = jnp.where(none_feasible, int(SolverStatus.NONE_FEASIBLE), status)
    status = jnp.where(all_feasible, int(SolverStatus.ALL_FEASIBLE), status)
    status = jnp.where(active, status, int(SolverStatus.INACTIVE))
    return Root(s.x_f, s.x_i, s.f_known, s.i_known, conv, all_feasible, none_feasible, status,
                s.evaluations, s.it)


def _integer_inside(domain: Domain, ends: _Ends, s: _State, v):
    """``v`` moved to an integer ``x`` strictly inside the bracket, rounded toward the
    feasible side (so that a feasible evaluation is itself the integer answer)."""
    x = _to_x(domain, ends, v)
    if domain.feasible_above:  # bracket x_i < x < x_f
        x = jnp.ceil(x)
        lo = jnp.where(s.i_known, jnp.floor(s.x_i) + 1.0, jnp.ceil(ends.x_min))
        hi = jnp.where(s.f_known, jnp.ceil(s.x_f) - 1.0, jnp.floor(ends.x_max))
    else:  # bracket x_f < x < x_i
        x = jnp.floor(x)
        lo = jnp.where(s.f_known, jnp.floor(s.x_f) + 1.0, jnp.ceil(ends.x_max))
        hi = jnp.where(s.i_known, jnp.ceil(s.x_i) - 1.0, jnp.floor(ends.x_min))
    x = jnp.clip(x, lo, jnp.maximum(hi, lo))
    return _to_v(domain, x)


def bisect(holds, inside, outside, iterations: int):
    """Elementwise bisection with a static step count, for a monotone predicate.

    ``holds(inside)`` is true and ``holds(outside)`` false (either may be the larger
    end); each step keeps the half whose ends still disagree.

    Args:
      holds: elementwise predicate ``x -> bool``.
      inside, outside: arrays of one shape, the two ends of the bracket.
      iterations: Python int.

    Returns:
      ``(inside, outside)`` after ``iterations`` halvings: the predicate was found true
      at ``inside`` and false at ``outside`` (or they are the initial ends).
    """

    def body(_, bracket):
        inside, outside = bracket
        mid = 0.5 * (inside + outside)
        ok = holds(mid)
        return jnp.where(ok, mid, inside), jnp.where(ok, outside, mid)

    return jax.lax.fori_loop(0, iterations, body, (inside, outside))


def _compaction_sizes(n: int) -> tuple:
    """Batch sizes the stragglers of an ``n``-lane search are gathered into."""
    sizes = []
    m = n
    while m // _COMPACTION >= _MIN_COMPACTED:
        m //= _COMPACTION
        sizes.append(m)
    return tuple(sizes)


def _iterate(step, s: _State, lanes, sizes: tuple, max_iterations: int, full: bool) -> _State:
    """Run ``step`` until every lane is done, on ever smaller gathered batches.

    While more lanes than ``sizes[0]`` are pending, iterate on the whole batch; then
    gather the pending lanes (padded with finished ones) into a batch of ``sizes[0]``
    lanes, continue there (recursively with ``sizes[1:]``), and scatter the result back.
    """
    n = s.done.shape[0]

    def cond(s):
        return (s.it < max_iterations) & jnp.any(~s.done)

    if not sizes:
        return jax.lax.while_loop(cond, lambda s: step(s, lanes, full), s)
    size, rest = sizes[0], sizes[1:]

    def per_lane(a):
        return jnp.ndim(a) > 0 and a.shape[0] == n

    def compacted(s):
        idx = jnp.argsort(s.done.astype(jnp.int8), stable=True)[:size]
        take = lambda a: a[idx] if per_lane(a) else a  # noqa: E731
        sub = _iterate(step, jax.tree_util.tree_map(take, s),
                       jax.tree_util.tree_map(lambda a: a[idx], lanes), rest, max_iterations,
                       False)
        put = lambda a, b: a.at[idx].set(b) if per_lane(a) else b  # noqa: E731
        return jax.tree_util.tree_map(put, s, sub)

    def body(s):
        few = jnp.sum(~s.done) <= size
        return jax.lax.cond(few, compacted, lambda s: step(s, lanes, full), s)

    return jax.lax.while_loop(cond, body, s)


# --------------------------------------------------------------------- refinement on host


class Refined(NamedTuple):
    """Result of :func:`refine_on_host`, per lane (NumPy).

    Attributes:
      x: ``(n,)`` the feasible end: the starting point, or a point evaluated and found
        feasible nearer the boundary.
      converged: ``(n,)`` the bracket closed (``rtol``, or adjacent integers), or the
        starting point had no slack to give.
      evaluations: scalar, batched evaluations made.
    """

    x: Any
    converged: Any
    evaluations: int


def refine_on_host(value, x, lower, upper, *, feasible_above: bool, integer: bool = False,
                   first_slope: float, rtol: float, iterations: int = 24) -> Refined:
    """Move feasible points ``x`` toward the boundary of ``{value ≤ 0}``, on the host.

    For a value function that cannot be traced (e.g. one that picks its own programs per
    lane, as the escalated privacy profile does), starting from points already known to
    be feasible (found with a sound but looser bound of the same quantity). The search is
    on ``log x`` with ``value = log(ε/target)``: first a step on the assumed slope
    ``first_slope``, 10% long so that it likely straddles the root; once bracketed,
    regula falsi with the Illinois weights; every point at least half the tolerance inside
    the bracket (a root found at an end is closed in by the next evaluation), and
    bisection where the step is unusable or has not halved the bracket in two steps (the
    value may be a bumpy bound, the smallest of several sound ones). Integer domains
    evaluate integers only, rounded toward the feasible side. Every returned point was
    evaluated feasible (or is the start).

    Args:
      value: ``(idx, x) -> log(ε/target)`` ``(m,)`` for the lanes ``idx`` (int array) at
        points ``x`` ``(m,)``; NaN counts as infeasible.
      x: ``(n,)`` feasible starting points (positive, finite).
      lower, upper: ``(n,)`` the domain (positive).
      feasible_above: feasibility holds for larger ``x`` (σ) or for smaller (``q``, ``T``).
      integer: search integers only (the ends of the domain should be integers).
      first_slope: assumed d log ε / d log x for the first step (e.g. −1 for σ).
      rtol: relative bracket width at which a lane stops (continuous domains).
      iterations: most batched evaluations after the one at ``x``.

    Returns:
      :class:`Refined`.
    """
    x = np.array(x, np.float64)
    lower, upper = (np.broadcast_to(np.asarray(a, np.float64), x.shape) for a in (lower, upper))
    sign = 1.0 if feasible_above else -1.0  # v = sign·log x grows toward the feasible side
    edge = sign * np.log(lower if feasible_above else upper)  # the infeasible end of the domain
    g_f = np.array(value(np.arange(x.size), x), np.float64)
    v_f = sign * np.log(x)
    v_i = np.full(x.shape, edge)  # infeasible end of the bracket (the domain's, unevaluated)
    g_i = np.full(x.shape, np.nan)
    tol = np.log1p(rtol)

    def closed(vf, vi):
        if integer:  # no integer strictly inside
            return np.abs(np.round(np.exp(sign * vf)) - np.round(np.exp(sign * vi))) <= 1.0
        return vf - vi <= tol

    done = ~(g_f < 0) | closed(v_f, v_i)  # no slack, or nothing left to gain
    widths = np.full((2,) + x.shape, np.inf)  # bracket widths one and two steps ago
    last_ok = np.full(x.shape, True)  # side of the last evaluation (Illinois weights)
    evaluations = 1
    for _ in range(iterations):
        act = np.nonzero(~done)[0]
        if not act.size:
            break
        vf, gf, vi, gi = v_f[act], g_f[act], v_i[act], g_i[act]
        known = np.isfinite(gi)
        # bracketed: regula falsi (Illinois: the end kept twice in a row counts half);
        # else one step on the assumed slope, 10% long, to straddle the root
        slope = np.where(known, (gf - gi) / (vf - vi), sign * first_slope)  # dg/dv < 0
        step = np.where(np.isfinite(slope) & (slope < 0), -gf / slope, np.nan)  # ≤ 0
        v = np.where(known, vf + step, vf + 1.1 * step)
        # a step that counts: at least tol/2 inside the bracket (a root found at either end
        # is then closed in by the next evaluation)
        v = np.clip(v, vi + 0.5 * tol, vf - 0.5 * tol)
        stalled = known & (vf - vi > 0.5 * widths[1, act])
        v = np.where(np.isfinite(v) & ~stalled, v, 0.5 * (vf + vi))
        widths[1, act], widths[0, act] = widths[0, act], vf - vi
        xn = np.exp(sign * v)
        if integer:  # strictly inside the bracket, rounded toward the feasible side
            xf, xi = np.round(np.exp(sign * vf)), np.round(np.exp(sign * vi))
            if feasible_above:
                xn = np.clip(np.ceil(xn), xi + 1.0, xf - 1.0)
            else:
                xn = np.clip(np.floor(xn), xf + 1.0, xi - 1.0)
        xn = np.clip(xn, lower[act], upper[act])
        g = np.array(value(act, xn), np.float64)
        evaluations += 1
        ok = g <= 0
        vn = sign * np.log(xn)
        x[act] = np.where(ok, xn, x[act])
        v_f[act], v_i[act] = np.where(ok, vn, vf), np.where(ok, vi, vn)
        g_f[act] = np.where(ok, g, np.where(last_ok[act], gf, 0.5 * gf))
        g_i[act] = np.where(ok, np.where(last_ok[act], 0.5 * gi, gi), g)
        last_ok[act] = ok
        done[act] = closed(v_f[act], v_i[act])
    return Refined(x, done, evaluations)
