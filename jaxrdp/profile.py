"""The exact privacy profile δ(ε) of the Sampled Gaussian Mechanism (tight accounting).

For the add-or-remove relation δ(ε) = max(δ_remove(ε), δ_add(ε)) with
δ_dir(ε) = E_P[(1 − e^{ε − L_T})₊], L_T the sum of the T per-step privacy losses. For any c > 0

    δ_dir(ε) = (1/2π) ∫ Re[ M(c+iu)^T e^{−(c+iu)ε} / ((c+iu)(c+iu+1)) ] du,

with M(z) = A_{1+z} (remove) or B_{1+z} (add) of Mironov–Talwar–Zhang (2019), Sec. 3, evaluated
at complex orders by :mod:`jaxrdp._complex_moments`. A schedule of segments multiplies:
M_total = Π M_i^{T_i} (integer T_i, so the branch of log M is irrelevant). Both directions, all
runs and all segments are one batch: every step below is vectorised over them.

Contour (per run and direction): for δ(ε), c is the saddle point of
φ(c) = Σ T_i log M_i(c) − cε − log(c(c+1)) (safeguarded Newton in log c, steps capped: φ' is
increasing);
for ε(δ), c and the line's centre ε_c solve the Laplace approximation
φ(c) − ½ log(2π φ''(c)) = log δ with ε_c = Σ T_i κ_i'(c) − 1/c − 1/(c+1) (the saddle condition),
so one line serves the whole ε search (the first escalation step searches from the order where
the run's RDP bound would be a Gaussian mechanism's, :func:`_gaussian_order`). The step h comes
from the curvature φ'' and from c;
u_k = k·h, k < N_u (static), so the line is cut at H = N_u·h.

Error bound (added upward: the δ returned is the quadrature's value plus this bound):

* discretisation (Trefethen–Weideman 2014, Thm 5.1, the integrand being analytic in the strip
  |Re z − c| < a, a < c, away from the poles 0 and −1):
  |I_h − I| ≤ 2·max_± J(c ± a)/(e^{2πa/h} − 1), J(c') = (1/2π)∫|F| ≤ M(c')^T e^{−c'ε}/(2c')
  (|z(z+1)| ≥ c'² + u², and the maximum over the strip is at its edges by log-convexity);
  a is the best of a few fractions of c;
* truncation at |u| > H: |F| ≤ M(c)^T e^{−cε} b(u)/u² with b a bound on |M(c+iu)|^T/M(c)^T
  built per segment from (i) √(1 − 2αu² + (2γ + α²)u⁴) (symmetrised fourth-order bound of the
  tilted loss's characteristic function, α = κ''/2, γ = μ₄/24, valid for every u), (ii)
  w_k·Q_k(u) + min(1 − w_k, v_k/u) for split points x_k (the same bound Q_k for the part left
  of x_k, of mass w_k, plus one integration by parts right of it), (iii) |M|
  computed at check points beyond H (with its own error) plus a Lipschitz term and (iv)
  ∫|f(x + iθ)| dx, the moment's integrand on the x-contour moved off the real axis by θ,
  which bounds |M(c+iu')| for every u' ≥ u and needs no phase resolved
  (:func:`jaxrdp._complex_moments.log_shifted_bound`, at every ``_SHIFT_EVERY``-th end of
  the pieces from H; on every escalation step but the first); integrated piecewise on a
  geometric grid and in closed form beyond it (:func:`_log_tail`). The same bound but (iv)
  replaces a node of the line whose computed value is less certain than it;
* moments: each M_i carries a bound η_i on its relative error (the x-rule's aliasing by
  the strip bound of :mod:`jaxrdp._complex_moments`, plus what its x-window leaves out and the
  rounding of its log terms, differences of parts up to 10⁵ at large c); M_total^T is then
  off by at most (e^{Σ T_i η_i} − 1)·|M_total^T| at each node, summed with the trapezoid
  weights;
* rounding: 8·eps·(Σ T_i|log M_i| + |z|ε + 10 + N_u/16)·Σ|F| for the exponent and the sum
  (N_u/16 for the sum over the N_u nodes, in any order);
* the real moments M_i(c) and M_i(c ± a) that scale the discretisation, truncation and
  envelope bounds: each carries a bound η_i on its x-rule's relative error (the strip argument
  of Trefethen–Weideman at u = 0, the mass beyond the window, bounded by the integrand's
  log-slope there, and the rounding of the log terms;
  :func:`jaxrdp._complex_moments.real_stats`), and these bounds use M_i(1 + η_i)/(1 − η_i)
  as needed. A line with some η_i above ``_MAX_ETA`` (the
  rule's window, which spans both modes of the tilted loss, hundreds of σ wide) bounds
  nothing: its δ is +∞. (Before, such a line could bound δ by e^{−472 433} for a true
  4.1e-17, and ε(δ) came back verified below the truth: q = 1.43e-4, σ = 5 740, T = 10⁶.)
  The searches for c treat such c as too large.

Two parts of this bound are read off the x-grid rather than proved: the total variations in
v_k, raised by 5%; and the envelope's moments (κ'', μ₄, and the mass, variance and μ₄ left of
each split point), node sums of the same grid (``tests/test_profile.py`` checks the envelope
against a 400 001-node rule); the strip bounds also take the ratio of two integrals (with and
without the add factor) by the same rule. All are conservative where the grid resolves the
integrand. (The moments' η was until 2026-11 a nested-rule estimate, η = ∞ where the grid
could not resolve the oscillation e^{iuℓ(x)}, h_x·(|u|/σ² + 10/σ) > 2π: there the estimate
was meaningless, measured at T = 1, q = 0.5, σ = 1, u = 120 a value 4e5 times too large with
η = 1.6%.) For remove, a finer bound on the aliasing
(``_complex_moments._aliasing_limit``: the strip argument per shell of x, with the slope
ℓ' = ρ/σ² of the shell instead of 1/σ²) trusts the rule much further where few steps are
sampled (measured: q = 1.08e-3, σ = 4.71, c = 151, 129 nodes: |u| ≤ 528 against 19; the
moments there match 30-digit mpmath to 4.5e-16). On ``benchmarks/bench_profile.py``'s runs
(2 048) the runs that reach the biggest tier went from 260 to 97 and the time per run from
0.93 to 0.60 ms; ``PROFILE_LOOSE`` from 101 to 51 (ε rose in 86 runs, by at most 2.3e-7).

Accuracy tiers (:data:`TIERS`, (x-nodes, line nodes)): called with concrete inputs, every run
starts on the cheapest tier (calls of at most 8 runs on the third step: fewer programs to
trace) and only runs whose bounded relative error exceeds :data:`TOLERANCE` are recomputed on
the next step (all steps are sound, so the smallest value is kept). The bigger tiers spend
their nodes on a finer x-grid (the oscillation e^{iuℓ(x)} resolved further along the line)
and a longer line. The runs the two cheaper tiers leave above the tolerance go on to the
bigger tiers on lines closer to the imaginary axis, Re z = c/2 and c/4, and last on Re z = c
(``_ESCALATION`` gives the order; runs the first tier leaves with a bound above 0.1 take the
second only at the end; the biggest tier's discretisation bound also tries strips narrower
than 0.04·c): the integral does not depend on the line and every bound
above holds on any, so the smallest verified value is kept. Where few
steps are sampled the saddle c is large (hundreds) and the tilted loss bimodal; its
curvature, set by the far mode, then makes the step so small that the line ends while
|M(c+iu)/M(c)|^T still sits near (the near-zero mode's mass)^T (measured: q = 0.00108,
σ = 4.71, T = 219: H = 4.7 with the integrand at 0.99 of its peak). At c/2 less weight sits
on the far mode: on 512 random runs the retries took the runs within 1e-6 from 86% to 96%
and the RDP fallbacks from 10% to none. So the first two steps already put the runs of
small q·√T on c/2 (:func:`_line_scale`). Under a transformation (``jit``, ``grad``, ``vmap``)
one tier runs for all, ``tier=1`` unless given. Where even the last retry's bound exceeds
the RDP δ (few sampled steps in the far tail: the loss is then nearly compound-Poisson and
|M(c+iu)|^T decays slowly along the line) the RDP bound of :mod:`jaxrdp.conversions` (sound)
is returned instead; per-element ``status`` says which.

The runs the whole escalation leaves above the tolerance but with a bound of at most 1e-3
take one more step, on :data:`TIERS` ``[4]`` (twice the x-nodes and the line nodes of the
biggest tier, on Re z = c; ``_LONG_LINE``). Near the tolerance what holds them back is, in
about equal parts, the x-rule's error far along the line (nodes whose moment is less certain
than the envelope are dropped: measured q = 0.000591, σ = 7.62, T = 100: the moments' term
2.4e-3 of δ with 1 025 x-nodes, 1.4e-10 with 2 049) and the truncation bound at H (q = 5.09e-4,
σ = 0.39, T = 10⁴: 1.6e-4 at H = 50, 2.9e-9 at H = 92; the integrand there is below 1e-15 of its
peak, but the bound beyond H, from the split points and the check points, is far looser).
Both halves are needed: on the 29 runs of ``benchmarks/bench_profile.py``'s first 1 024 that
the escalation left loose, (2 049, 2 048) settled 9, (1 025, 4 096) and (2 049, 1 024) none,
(2 049, 8 192) 10 at 3.4 times the cost (34 against 117 ms per run on a 2 vCPU CPU); runs
with a bound above 1e-3 were settled in 1 of 15, hence the gate. Runs whose bound is above
it (the few-sampled far tail, where |M(c+iu)|^T truly stays near its peak for thousands of
units of u) are left as they were. That step's truncation is also bounded from 512 dense
check points on [H, 3·H] (:func:`_log_dense_tail`): there the split bound sat at its floor,
(near mass)^T, long after the integrand had fallen (q = 0.009123, σ = 0.6106, T = 242: bound
−14.4 in log, truth −114.3, now −74.6); on 2 048 runs of ``benchmarks/bench_profile.py``
``PROFILE_OK`` went from 2 014 to 2 023. The points are equispaced multiples k·H/256 of one
step, so their moments come by blocks, as the line's (one matrix product instead of a complex
exponential per point and x-node): the long line's step costs 42 ms per run against 82, and
where the fine rule stops resolving M a piece keeps the envelope's bound.

Runs of a single sampled step (T = 1 in all, any q and σ; float64) take the closed form of
:mod:`jaxrdp._one_step` instead: no composition smooths their loss, and the line integral
never reached :data:`TOLERANCE` on them (measured: none of 291 non-trivial random runs across
q ∈ [1e-8, 1], σ ∈ [0.3, 10⁴], δ ∈ [1e-20, 0.5]); the closed form is exact to its stated
bound (≤ 3e-9, measured 7.5e-12 against 60-digit mpmath). So do full-batch runs (every
sampled step at q = 1, concrete inputs): T Gaussian steps compose exactly to one Gaussian
mechanism with σ = (Σ T_i/σ_i²)^{−1/2} (the line integral fell back to RDP on 4% of random
q = 1 runs, e.g. δ 0.889 against the exact 0.510 at σ = 0.3, T = 2, ε = 10).

Runs of exactly two sampled steps at one q < 1 and σ (concrete float64 calls) are also
bracketed by :mod:`jaxrdp._two_steps`: the one-step closed form averaged over the first
step's output, bounded above by chords and below by Jensen's inequality on 2 048 cells (h is
convex in t = e^{ε − ℓ}), so the bracket holds for any cells and its width is the stated
error. The bracket comes first: the runs it settles within :data:`TOLERANCE` skip the
line's escalation (compiling its tiers took 100 s of the 165 s of the three
nested-quadrature references' test on a 2 vCPU CPU; 46 s since); on the others the smaller
of the two sound answers is kept, with the error bound of the better lower end. The line
integral cancels most there (T = 2 was 16% ``PROFILE_OK`` across the domain);
on three nested-quadrature references δ went from 0.31, 9.5e-5 and 5.4e-5 above the truth
(``PROFILE_LOOSE``) to 6.0e-7, 2.6e-7 and 8.4e-7 (``PROFILE_OK``); on 256 random T = 2 runs
across the domain, ε(δ) within 1e-6 went from 39% to 63% and RDP fallbacks from 3.9% to none.
It costs about 35 ms per run for δ(ε) and 70 ms for ε(δ) on a 2 vCPU CPU (a coarse search,
then four Illinois steps on cells placed once), and one compilation of each program. δ(ε)
runs whose bracket is wider than :data:`TOLERANCE`, but less than 8 times, are bracketed
again on 4 096 cells, and so again on 8 192 (the gap falls about fourfold each time; one
more program each, compiled only where a call has such a run): on 256 random T = 2 runs,
δ(ε) within 1e-6 went from 29 to 33 of the 39 in the domain with the first retry. ε(δ)
keeps 2 048 cells. Each cell's Q_i/P_i is computed on the cell itself where that bounds it
closer than differences of Gaussian tails (``_two_steps._log_local_ratio``): at ε near 1e-4
the tails' rounding, carried into t̄ and amplified by the one-step profile's slope, was what
bounded the bracket (and it grew as the cells narrowed); on the same 256 runs ε(δ) within
1e-6 went from 88 to all 95 in the domain and δ(ε) from 33 to 38 of 39, and to all 39 with
the second retry (``benchmarks/README.md``).

Where the answer has no lower end after all of the above (its error bound at least its
estimate: few sampled steps, the line cancelling), single-segment runs at q < 1 (concrete
float64 calls) also take :mod:`jaxrdp._split_chernoff`: a Chernoff bound of δ with the rare
large losses split off (the event that some step's output leaves a set K counted in full,
E_P[e^{cℓ}; K]^T bounded by chords on cells; where one rare sampled step carries the loss,
the event counted by a union over the steps instead), minimised over c and K; the smaller
sound answer is kept, still ``PROFILE_LOOSE`` (it has no lower end either). The line's ε
there was measured at 5–47 times dp_accounting's PLD ε in the median across the domain (up
to 1.2e4 times); see ``benchmarks/README.md`` for the same runs with the split bound.

Single-segment runs of T ≥ 2 steps at q < 1 still above :data:`TOLERANCE` (concrete float64
calls) are also bracketed by :mod:`jaxrdp._one_exit`: split by how many steps' losses exceed
k ≤ ε/T, none contributes 0, two or more at most C(T, 2)·P(ℓ > k)², and exactly one is
T·P(K)^{T−1}·δ₁(ε + log μ) by Jensen's inequality from below and that plus a curvature
term from above (the other steps' factor Y = e^{−L'} has mean μ and a variance bounded in
closed form). Where a rare far step carries the loss (q·√T below about 1e-5, σ below about
0.7, tiny δ) the bracket closes to 1e-8–1e-6 of δ: 7 of the 66 loose T = 3 ε(δ) of the domain
sample became ``PROFILE_OK``, each of them 1.2–10% below the earlier answer; elsewhere it
rarely helps. Its cost: 30 one-step evaluations per run for δ(ε), and for ε(δ) as many to
check the sound ε, then about 4 000 where the bracket meets δ there.

ε(δ): Newton on log δ_up(ε) along the line (only e^{−zε} changes with ε), then the smallest of
a few points just above the root at which the bounded δ of both directions is verified ≤ δ.
Where the estimate is not positive (its error bound dominates, as where the line is only
partly resolved) Newton takes the slope of the bounded δ itself, bisection halves log ε, and
the search's upper end (a point found ≤ δ) is one of the points checked (16 steps; before, 10
with arithmetic bisection left ε at a floor of (1.5·ε_RDP + 1)/2^10 ≈ 1e-3 where bisection
took every step). With the finer aliasing bound above, on 1 280 random runs across the domain
(T ∈ {2, 3, 10, 100, 10⁴}) ε fell in 542 runs (median −2.4%) and rose in 43 (21 by more than
1e-3, at most 7.9%, PROFILE_LOOSE; one of them now RDP); PROFILE_OK 549 → 603, RDP 37 → 22.
Derivatives in q and σ flow through the moments on the line (the contour is held fixed: the
integral does not depend on it); for ε by the implicit-function rule.
"""

from __future__ import annotations

import collections
import functools
import warnings
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxrdp import _complex_moments as cm
from jaxrdp import (_one_exit, _one_step, _precision, _program_cache, _split_chernoff,
                    _two_steps, _validate, conversions, kernels)

__all__ = [
    "PROFILE_LOOSE",
    "PROFILE_OK",
    "RDP_FALLBACK",
    "TIERS",
    "TOLERANCE",
    "ProfileDelta",
    "ProfileEpsilon",
    "delta",
    "delta_schedule",
    "epsilon",
    "epsilon_schedule",
]

#: status: the profile bound, with relative error bound ≤ :data:`TOLERANCE`.
PROFILE_OK = 0
#: status: the profile bound, tighter than RDP but with a relative error bound > TOLERANCE.
PROFILE_LOOSE = 1
#: status: the profile could not beat the RDP bound; the RDP value is returned.
RDP_FALLBACK = 2

#: relative error bound below which a value is :data:`PROFILE_OK` (and escalation stops).
TOLERANCE = 1e-6
#: (x-nodes of the complex moments, nodes on the half-line of the inverse Laplace integral).
TIERS = ((129, 48), (257, 128), (513, 256), (1025, 1024), (2049, 2048))


class _Step(NamedTuple):
    """One step of the escalation: a tier (x-nodes, line nodes) on the line Re z = c_scale·c.

    ``defer_above``: runs whose relative error bound exceeds it take the step after the last
    one instead (if still unsettled); ``narrow``: the line's strip candidates include
    :data:`_NARROW_STRIP`; ``skip_above``: runs whose bound exceeds it (or is NaN) skip the
    step; ``shifted``: the truncated line is also bounded on the shifted x-contour
    (:attr:`_Line.shifted`); ``warm``: ε(δ)'s search for the line's c starts at the RDP
    bound's Gaussian order (:func:`_gaussian_order`) and takes ``_WARM_SEARCH_ITERATIONS``
    steps instead of ``_SEARCH_ITERATIONS`` from c = 1 (δ(ε)'s saddle search ignores it);
    ``few_scale``: the runs that sample few steps (:func:`_line_scale`) take the line
    Re z = few_scale·c instead.
    """

    nx: int
    nu: int
    c_scale: float = 1.0
    defer_above: float | None = None
    narrow: bool = False
    skip_above: float | None = None
    shifted: bool = True
    warm: bool = False
    few_scale: float | None = None

    @property
    def few_line_scale(self) -> float:
        """The few-sampled runs' Re z over c: ``few_scale``, or ``c_scale`` where unset."""
        return self.c_scale if self.few_scale is None else self.few_scale


#: The order of escalation (:class:`_Step`, a tier on the line Re z = c_scale·c): the
#: two cheaper tiers, then the bigger ones on lines closer to the imaginary axis, the last
#: tier's line Re z = c at the end (see the module docstring). The runs the first two tiers
#: leave are the few-sampled ones, where the c/2 line does best: on 512 random runs TIERS[2]
#: on Re z = c/2 settles 59 of the 123 left, on Re z = c only 32 (and two more after c/2).
#: This order, without TIERS[2] on Re z = c, gives every run the same status as the tiers in
#: order with the c/2 retries after TIERS[2] (ε within 2.3e-7), 15% faster (1.88 against
#: 2.22 ms per run; on 1 024 runs of another sample, 2.08 against 2.38, statuses equal).
#: ``defer_above`` defers the step, for the runs whose relative error bound is still above
#: it, to after the last step (then only for the runs left unsettled): of 4 096 random runs
#: (``benchmarks/bench_profile.py``'s distribution, seed 0) TIERS[1] settled none of the 771
#: whose first tier left a bound above 0.1 (and 499 of the others); deferred, every status and
#: every ε is the same, and the 590 runs the later steps settle skip it (5% of the time).
#: The steps of TIERS[3] (``narrow``) also try the strips of :data:`_NARROW_STRIP`
#: (all three, so they keep sharing one compiled program; on the last step alone the values
#: below were the same, at one more program to compile). On
#: 1 280 random runs across the domain (q ∈ [1e-8, 1], σ ∈ [0.3, 10⁴], δ ∈ [1e-20, 0.5],
#: T ∈ {2, 3, 10, 100, 10⁴}) the RDP fallbacks of ε(δ) went from 80 to 37 and ε fell in 71 runs
#: (median −16%); it rose in 4 (at most 6.1%; one run from PROFILE_LOOSE to RDP). Of 1 280
#: δ(ε), fallbacks 178 → 144, none higher. On 2 048 runs of ``benchmarks/bench_profile.py``'s
#: distribution, δ at ε = 1 (far in the tail for most: δ down to 1e-70) fell back to RDP on
#: 423 runs, now on 27 (1 430 within 1e-6, from 1 370); their ε(1e-5) never has a
#: strip-limited step there and is bitwise the same, at the same time per run.
#: The first step leaves out the shifted-contour bound (``shifted``): it cost 15% of that
#: step's program, on every run, and settled 24 of the 2 048 runs of
#: ``benchmarks/bench_profile.py`` that the next steps settle anyway (every status the same,
#: ε within −1.1e-7 and +4.3e-7). Its ε(δ) search for c starts warm (``warm``): its program
#: took 0.355 against 0.451 ms per run, and the 2 048 runs' statuses stayed the same (ε within
#: −4.2e-7 and +6.7e-8). The later steps search from c = 1: warm there, eight statuses changed
#: (the few-sampled runs' centre is ill-determined where the far mode turns on).
#: The first two steps put the few-sampled runs (q·√T below :data:`_FEW_SAMPLED_SPREAD`) on
#: Re z = c/2 (``few_scale``), the line that settles them in the later steps; the others
#: stay on c, and the deferred TIERS[1] runs on c for all. On the 2 048 runs above the first
#: step settles 1 658 instead of 1 521 and TIERS[2] gets 195 runs instead of 418; every
#: status is the same and ε within ±3.9e-7 (verified values both); the whole call took 0.70
#: against 0.88 ms per run on 10⁴ runs. Across the domain (64 runs per T ∈ {3, 10, 100,
#: 10³, 10⁴}, ε(δ) and δ(ε)) every status is the same; one loose δ (7e-224, outside the
#: domain) rose 2%. (With the deferred step on c/2 too, four loose answers outside the
#: domain rose by up to 65%: the c line of the cheap tiers was their best bound.)
_ESCALATION = (_Step(*TIERS[0], shifted=False, warm=True, few_scale=0.5),
               _Step(*TIERS[1], defer_above=0.1, few_scale=0.5),
               _Step(*TIERS[2], 0.5), _Step(*TIERS[3], 0.5, narrow=True),
               _Step(*TIERS[3], 0.25, narrow=True), _Step(*TIERS[3], 1.0, narrow=True))
#: after the escalation, for the runs it leaves within 1e-3 (``skip_above``; see the module
#: docstring): the long line of TIERS[4]
_LONG_LINE = (_Step(*TIERS[4], narrow=True, skip_above=1e-3),)
#: Runs whose sampling spread (Σ_i q_i² T_i)^{1/2} is below this take their first two steps
#: on Re z = c/2 (``few_scale``; :func:`_line_scale`): the few-sampled runs, whose saddle c
#: puts weight on a far mode and which the c/2 line settles sooner (see ``_ESCALATION``).
_FEW_SAMPLED_SPREAD = 0.3
_FEW_RUNS, _FEW_RUNS_STEP = 8, 2  # escalation of calls with ≤ 8 runs starts at its third step
# (TIERS[2] on Re z = c/2: alone on the 512 runs above, 448 settled there against 421 on c)
_E = 60.0  # target exponent for the discretisation error (e^-60)
_DISC = 1e-9  # the step keeps the discretisation bound below this fraction of δ (Laplace)
_TAIL_RATIO, _TAIL_PIECES = 1.12, 48  # pieces of the truncation bound: H to 230·H
#: the first pieces (H to 2.5·H) also use |M| computed at their ends. 8, not 30 (to 30·H)
#: or 16 (to 6.1·H): on 512 and 1 024 random runs every status is the same with 8 as with
#: 16 and ε moves in 4 runs of 1 536, by at most 2.9e-8 (up), for 7% less time per run (the
#: check points are not equispaced, so each costs a complex exponential per x-node).
_CHECK_PIECES = 8
#: the pieces of the truncation bound from H also use the shifted-contour bound
#: (:func:`jaxrdp._complex_moments.log_shifted_bound`), computed at every _SHIFT_EVERY-th end
#: and used on the pieces up to the next (it holds for every u beyond its point)
_SHIFT_EVERY = 4
#: Steps of at least this many x-nodes (:data:`TIERS` ``[4]``, the long line) also bound the
#: truncated line by :data:`_DENSE_CHECKS` equispaced check points u_k = k·H/F from H on
#: (F = :data:`_DENSE_CHECK_FIRST`: to 3·H), computed by a 4 times finer x-rule
#: (:func:`_log_dense_tail`)
_DENSE_CHECK_NX = TIERS[4][0]
_DENSE_CHECKS, _DENSE_CHECK_FIRST, _DENSE_CHECK_REFINE = 512, 256, 4
#: largest bound η on the x-rule's relative error in M(c) at which a line is used (see
#: :func:`_stats`); resolved rules are near 1e-13
_MAX_ETA = 1e-6
_SEARCH_MAX_ETA = 1e-2  # the same for the statistics that only steer the contour
_COVER = 1.3  # the line covers at least ±1.3·w·√(2E) (a Gaussian bump of width w: e^{-1.7E})
_NX_SEARCH = 65  # x-nodes of the real statistics that only steer the contour
_SEARCH_ITERATIONS = 16  # safeguarded Newton steps for c (log scale)
_WARM_SEARCH_ITERATIONS = 6  # the same from a warm start (:attr:`_Step.warm`)
_MAX_LOG_STEP = 1.5  # largest Newton step in log c
_NEWTON_ITERATIONS = 16  # Newton steps for ε on the line
_STRIP = (0.9, 0.6, 0.35, 0.2, 0.1, 0.04)  # candidate strip half-widths a/c
#: further candidates of a step with ``narrow`` set (see ``_ESCALATION``): where a far mode of
#: the tilted loss makes M(c ± a)^T exceed M(c)^T by thousands of nats at a ≥ 0.04·c (few
#: sampled steps), a strip of a ~ 1 still allows a step h ~ 0.25 against 0.0056
#: (q = 0.002198, σ = 4.26, T = 224)
_NARROW_STRIP = (0.015, 0.006, 0.0025, 0.001)
_NUDGE = (0.0, 1e-12, 1e-9, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2)  # ε(1+k) candidates
_LOG_C = (np.log(1e-8), np.log(1e7))  # search range of c
#: runs·segments·(line nodes + x-nodes)·128 per compiled chunk: a chunk's largest arrays are
#: the moments' phase blocks (~130 per x-node) and the envelope's split bounds (32 per line
#: node); measured best at 8 runs on the last tier (3.1 ms per run; 4.4 at one run per chunk).
_CHUNK = 1 << 21
_RDP_PIECE = 4096  # runs per call of the RDP companion (:func:`_rdp_companion`), at most
#: calls of fewer runs are padded to this many (within :data:`_CHUNK`): each tier's program,
#: and the RDP companion's, is then one per segment count for calls of every small size
#: (before, calls of at most ``_FEW_RUNS`` runs had programs of their own, seven per
#: direction instead of four, and a process that saw both sizes compiled both)
_MIN_PADDED_RUNS = 64
_DIRS = np.array([cm.REMOVE, cm.ADD])


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


class _Line(NamedTuple):
    """Everything the bounded δ(ε) needs on one line, per direction and run: ``(2, n[, N_u])``."""

    c: jax.Array
    h: jax.Array
    a: jax.Array  # strip half-width of the discretisation bound
    log_mt: jax.Array  # Σ T_i log M_i(c + i u_k), complex (2, n, N_u)
    eta_t: jax.Array  # Σ T_i log(1 + η_i)
    abs_logm: jax.Array  # Σ T_i |log M_i|
    kap: jax.Array  # Σ T_i κ_i(c), raised by the x-rule's error bound (an upper bound)
    kap_m: jax.Array  # Σ T_i κ_i(c − a), the same
    kap_p: jax.Array  # Σ T_i κ_i(c + a), the same
    alpha: jax.Array  # per segment κ_i''(c)/2, (2, n, S)
    gamma: jax.Array  # per segment μ₄,i(c)/24, (2, n, S)
    w: jax.Array  # per segment and split point, tilted mass left of it, (2, n, S, K)
    log_v: jax.Array  # per segment and split point, log of its TV term, (2, n, S, K)
    alpha_l: jax.Array  # per segment and split point, left part's variance/2, (2, n, S, K)
    gamma_l: jax.Array  # per segment and split point, left part's μ₄/24, (2, n, S, K)
    t: jax.Array  # (1, n, S)
    u: jax.Array  # the nodes u_k = k·h, (2, n, N_u)
    check: jax.Array = None  # per segment bound on |M_i(c+iu)|/M_i(c) at _check_points, (2, n, S, P+1)
    log_env: jax.Array = None  # log of the bound on |M|^T/M(c)^T at the nodes, (2, n, N_u)
    log_tail: jax.Array = None  # log ∫_H^∞ (that bound) du/u², (2, n)
    #: per segment log of the bound of :func:`jaxrdp._complex_moments.log_shifted_bound` on
    #: |M_i(c+iu)|/M_i(c) for u ≥ H·_TAIL_RATIO^j, j = 0, _SHIFT_EVERY, …, _TAIL_PIECES, (2, n, S, Q)
    shifted: jax.Array = None
    #: the x-rule resolves M at c and at c ± a (:func:`_stats`); elsewhere no bound, (2, n)
    trusted: jax.Array = None


# ------------------------------------------------------------------------ real statistics


def _by_segment(v, extra: int):
    """Runs' segments ``(n, S)`` as ``(1, n) + (1,)·extra + (S,)``: beside c ``(2, n, …)``."""
    return v.reshape((1, v.shape[0]) + (1,) * extra + (v.shape[1],))


def _stats(q, s, t, c, nx, per_segment: bool = False, max_eta: float | None = None,
           rigorous: bool = True):
    """Σ_i T_i κ_i, Σ T_i κ_i', Σ T_i κ_i'' at real c, per segment the envelope data, and
    the bound on Σ T_i κ_i's error.

    ``q, s, t``: ``(n, S)``; ``c``: ``(2, n)`` or ``(2, n, m)`` (directions first). The
    envelope data (see :func:`_log_envelope`) are per segment: α = κ''/2 and γ = μ₄/24
    ``(..., S)``, and the split bounds' w and log v ``(..., S, K)``. The error: Σ T_i κ_i
    plus it bounds the true Σ T_i log M_i(c) from above, Σ T_i·(−log(1 − η_i)) for the x-rule's
    relative error η_i (:func:`jaxrdp._complex_moments.real_stats`); +∞ where some η_i >
    ``max_eta`` (default ``_MAX_ETA``: the rule does not resolve M_i(c), nor the statistics
    beside it). ``rigorous=False``: η without the add direction's factor nor the exponents'
    rounding (cheaper; not a bound: to steer the contour, or to choose among candidates
    checked afterwards).
    ``per_segment``: also κ_i and log η_i ``(..., S)``.
    """
    seg = functools.partial(_by_segment, extra=c.ndim - 2)
    qq, ss, tt = seg(q), seg(s), seg(t)
    d = _DIRS.reshape((2,) + (1,) * (c.ndim))
    # rigorous: the add direction's bound on the rule's error needs its factor F (the
    # remove direction's is 1: computed for both, one copy of the statistics in the program)
    stats = cm.real_stats(qq, ss, c[..., None], d, nx, add_factor=rigorous, rounding=rigorous)
    kap, k1, k2, k4, w, log_v, lvar, lm4, log_eta = stats
    envelope = (*_quartic_coefficients(k2, k4), w, log_v, *_quartic_coefficients(lvar, lm4))
    max_eta = _MAX_ETA if max_eta is None else max_eta
    eta = jnp.exp(log_eta)
    err = jnp.where(eta <= max_eta, -jnp.log1p(-jnp.minimum(eta, max_eta)), jnp.inf)
    err = jnp.where(tt > 0, tt * err, 0.0).sum(-1)
    out = (tt * kap).sum(-1), (tt * k1).sum(-1), (tt * k2).sum(-1), envelope, err
    return out + (kap, log_eta) if per_segment else out


def _quartic_coefficients(var, m4):
    """α = var/2 and γ = μ₄/24 of :func:`_quartic`'s bound, from a variance and a fourth
    central moment."""
    return 0.5 * var, m4 / 24.0


def _steering_nodes(nx: int) -> int:
    """x-nodes of the statistics that steer a line of an ``nx``-node rule (step and strip,
    :func:`_line`): half its intervals. Only the choice of h and a depends on them (every
    bound takes the rule's own statistics): on the 2 048 runs of
    ``benchmarks/bench_profile.py`` every status was the same as with ``nx`` and ε moved by
    −8.3e-8 to +1e-10, for 14% less time in the first tier's program."""
    return (nx - 1) // 2 + 1


def _curvature(k2, c):
    return k2 + 1.0 / c**2 + 1.0 / (c + 1.0) ** 2


def _log_c_search(residual, shape, dtype, c0=None, iterations=_SEARCH_ITERATIONS):
    """Safeguarded Newton on an increasing ``residual(c) -> (f, df/dlog c, resolved)``, in log c,
    from ``c0`` (broadcast to ``shape``; default 1), ``iterations`` steps.

    Where the statistics are not ``resolved`` (the x-rule's bound η above
    ``_SEARCH_MAX_ETA``), c counts as too large: the rule's window grows with c, so the
    resolved c form an interval from 0 (without this the search could end at a c whose
    statistics were noise: 17 times the saddle, for q = 1.4e-4, σ = 5 740, T = 10⁶).
    """
    lo = jnp.full(shape, _LOG_C[0], dtype)
    hi = jnp.full(shape, _LOG_C[1], dtype)

    def body(_, carry):
        y, lo, hi = carry
        f, fp, resolved = residual(jnp.exp(y))
        f, fp = jnp.where(resolved, f, 1.0), jnp.where(resolved, fp, 1.0)
        lo = jnp.where(f < 0, y, lo)
        hi = jnp.where(f < 0, hi, y)
        # a step of at most _MAX_LOG_STEP: a full Newton step from far away can land where
        # the search's coarse statistics no longer resolve the integrand
        step = jnp.clip(f / jnp.where(fp > 0, fp, 1.0), -_MAX_LOG_STEP, _MAX_LOG_STEP)
        y_new = y - step
        inside = (y_new > lo) & (y_new < hi) & (fp > 0)
        return jnp.where(inside, y_new, 0.5 * (lo + hi)), lo, hi

    y0 = jnp.zeros(shape, dtype) if c0 is None else jnp.broadcast_to(
        jnp.clip(jnp.log(c0), _LOG_C[0] + 1.0, _LOG_C[1] - 1.0), shape)
    y, _, _ = jax.lax.fori_loop(0, iterations, body, (y0, lo, hi))
    return jnp.exp(y)


def _search_stats(q, s, t, c):
    """Σ T_i κ_i, κ_i', κ_i'' at c for the searches that only steer the contour (a coarse
    x-rule, the cheap η), and whether the rule resolves them (η ≤ ``_SEARCH_MAX_ETA``).

    A c whose remove window is cut short of the far mode (:func:`jaxrdp._complex_moments.
    far_part`) while the far mode at c·(1 + _STRIP[0]) weighs more than e^{_FAR_MAX}
    (:func:`jaxrdp._complex_moments.log_far_mode`) counts as unresolved, unless the uncut
    window resolves it as well: the far mode turns on between them, and a line there
    (its strips reach c + a) is left with a tiny step (q = 7.03e-4, σ = 32.87, T = 10,
    δ = 1.07e-8: ε within 1e-6 on Re z = 7 779, none on 15 558, where the search went without
    this rule; where the uncut window resolves c, the search is the one before the cut).
    """
    kap, k1, k2, _, err = _stats(q, s, t, c, _NX_SEARCH, max_eta=_SEARCH_MAX_ETA, rigorous=False)
    seg = functools.partial(_by_segment, extra=c.ndim - 2)
    qq, ss, cc, d = seg(q), seg(s), c[..., None], _DIRS.reshape((2,) + (1,) * c.ndim)
    far_later = cm.log_far_mode(qq, ss, (1.0 + _STRIP[0]) * cc, d) > cm._FAR_MAX
    uncut = cm.uncut_log_aliasing(qq, ss, cc, d, _NX_SEARCH) <= np.log(_SEARCH_MAX_ETA)
    turning = cm.far_part(qq, ss, cc, d).on & far_later & ~uncut & (seg(t) > 0)
    return kap, k1, k2, jnp.isfinite(err) & ~jnp.any(turning, axis=-1)


def _gaussian_order(eps, log_delta):
    """c where a Gaussian mechanism's RDP bound on ε at δ is smallest, from that bound ε
    ``(n,)``: with RDP ρα over the run, ε(c) = ρ(c + 1) + L/c (c = α − 1, L = log 1/δ) is
    smallest at c = √(L/ρ), where ε = (√ρ + √L)² − L, so c = 1/(√(1 + ε/L) − 1). The Laplace
    centre's warm start, with the run's RDP ε as ε (on the runs of
    ``benchmarks/bench_profile.py``, 1.1 to 4.1 times the centre of the remove direction)."""
    ratio = jnp.maximum(eps, 1e-300) / jnp.maximum(-log_delta, 1e-300)  # ε/L
    return 1.0 / jnp.where(ratio > 1e-8, jnp.sqrt(1.0 + ratio) - 1.0, 0.5 * ratio)


def _saddle(q, s, t, eps):
    """c of the saddle point of φ at ε ``(n,)``, per direction ``(2, n)``."""

    def residual(c):
        _, k1, k2, resolved = _search_stats(q, s, t, c)
        return k1 - eps - 1.0 / c - 1.0 / (c + 1.0), c * _curvature(k2, c), resolved

    return _log_c_search(residual, (2,) + eps.shape, q.dtype)


def _laplace_centre(q, s, t, log_delta, c0=None, iterations=_SEARCH_ITERATIONS):
    """c where the Laplace approximation of δ equals δ, and the ε it is the saddle of; the
    search from ``c0`` ``(n,)`` (default 1), ``iterations`` steps."""

    def centre(c):
        kap, k1, k2, resolved = _search_stats(q, s, t, c)
        eps = k1 - 1.0 / c - 1.0 / (c + 1.0)
        phi2 = _curvature(k2, c)
        log_d = kap - c * eps - jnp.log(c * (c + 1.0)) - 0.5 * jnp.log(2.0 * jnp.pi * phi2)
        return log_d, eps, phi2, resolved

    def residual(c):
        log_d, _, phi2, resolved = centre(c)
        return log_delta - log_d, c**2 * phi2, resolved  # log δ_L decreases with c

    c = _log_c_search(residual, (2,) + log_delta.shape, q.dtype, c0, iterations)
    return c, jnp.maximum(centre(c)[1], 0.0)


# ------------------------------------------------------------------------------ the line


def _line(q, s, t, c, eps, nx, nu, narrow=False, shifted=True):
    """The moments on the line Re z = c ``(2, n)`` and the bounds' ingredients, centred at ε.

    ``narrow``: the strip half-widths a/c of the discretisation bound include
    :data:`_NARROW_STRIP`; ``shifted``: the truncation bound also takes the shifted-contour
    bound (:attr:`_Line.shifted`; ``None`` without it).
    """
    sg = jax.lax.stop_gradient
    qs, ss, ts = sg(q), sg(s), sg(t)
    strips = _STRIP + (_NARROW_STRIP if narrow else ())
    ns = len(strips)
    ac = c[..., None] * jnp.asarray(strips, c.dtype)
    # steering, by the cheap η (the add direction's without its factor, a twelfth of the
    # cost) on a rule of half the intervals: the step and the strip half-width a from M at c
    # and at c ± a for every candidate a, in one call. The bounds take M at c and c ± a (the
    # picked a) from one rigorous call on the full rule below, and the envelope's split
    # points at c alone: one copy of each statistic in the program (two rigorous calls
    # before: ε(δ)'s program 8.5% longer)
    kaps, _, k2s, _, kaps_err = _stats(
        qs, ss, ts, jnp.concatenate([c[..., None], c[..., None] - ac, c[..., None] + ac], -1),
        _steering_nodes(nx), rigorous=False)
    k2 = k2s[..., 0]
    w = 1.0 / jnp.sqrt(_curvature(k2, c))
    # the bigger tiers spend part of their nodes on a finer step (a smaller discretisation
    # bound near the pole) and part on a longer line
    refine = (TIERS[0][1] / nu) ** 0.125
    h0 = refine * jnp.minimum(jnp.pi * w * np.sqrt(2.0 / _E), 2.0 * jnp.pi * 0.9 * c / _E)
    h = jnp.maximum(h0, _COVER * w * np.sqrt(2.0 * _E) / nu)
    kap_steer = kaps[..., 0] + jnp.where(jnp.isfinite(kaps_err[..., 0]), kaps_err[..., 0], 0.0)
    kaps = kaps + kaps_err  # +∞ where unresolved: that strip is never picked
    km, kp = kaps[..., 1: 1 + ns], kaps[..., 1 + ns:]
    strip_ok = jnp.isfinite(km) & jnp.isfinite(kp)
    steer_ok = jnp.isfinite(kaps_err[..., 0]) & jnp.any(strip_ok, axis=-1)
    e = eps[..., None]
    # no longer a step than keeps the discretisation bound below _DISC·δ (δ by Laplace)
    cm_, cp_ = c[..., None] - ac, c[..., None] + ac
    log_2j = jnp.maximum(km - cm_ * e - jnp.log(cm_), kp - cp_ * e - jnp.log(cp_))
    log_laplace = (kap_steer - c * eps - jnp.log(c * (c + 1.0))
                   - 0.5 * jnp.log(2.0 * jnp.pi * _curvature(k2, c)))
    excess = jnp.logaddexp(0.0, log_2j - log_laplace[..., None] - np.log(_DISC))
    h = jnp.where(steer_ok, jnp.minimum(h, jnp.max(2.0 * jnp.pi * ac / excess, axis=-1)), h)
    score = jnp.maximum(km - cm_ * e, kp - cp_ * e)
    score = score - 2.0 * jnp.pi * ac / h[..., None]
    best = jnp.argmin(score, axis=-1)[..., None]
    a_pick = jnp.take_along_axis(ac, best, axis=-1)[..., 0]
    kap3, _, _, (alpha, gamma, *_), err3, kap_seg, log_eta = _stats(
        qs, ss, ts, jnp.stack([c, c - a_pick, c + a_pick], -1), nx, per_segment=True)
    alpha, gamma, kap_seg, log_eta = (v[:, :, 0] for v in (alpha, gamma, kap_seg, log_eta))
    d = _DIRS.reshape(2, 1, 1)
    # the x-rule's terms at c, shared by the split points, the aliasing limit, the line and
    # its check points (without derivatives but on the line itself)
    terms = cm.line_terms(q[None], s[None], c[..., None], d, nx)
    sterms = jax.tree_util.tree_map(sg, terms)
    w_split, log_v, lvar, lm4 = cm.split_stats(qs[None], ss[None], c[..., None], d, nx, sterms)
    alpha_l, gamma_l = _quartic_coefficients(lvar, lm4)
    trusted = jnp.all(jnp.isfinite(err3), axis=-1) & jnp.any(strip_ok, axis=-1)
    # every bound below needs M(c) from above (M(c ± a) too); the estimate, the line's own
    # nodes, carries its error apart
    kap3 = kap3 + jnp.where(jnp.isfinite(err3), err3, 0.0)
    kap = kap3[..., 0]
    u = h[..., None] * jnp.arange(nu, dtype=c.dtype)
    # the aliasing limit of the x-rule, shared by the line's nodes and its check points
    limit = cm.aliasing_limit(qs[None], ss[None], c[..., None], d, nx, sterms)
    log_m, eta = cm.log_moment_uniform_line(q[None], s[None], c[..., None], d, h[..., None], nu, nx,
                                            limit, terms)
    tt = t[None, :, :, None]
    line = _Line(
        c=c, h=h, a=a_pick, log_mt=jnp.sum(tt * log_m, axis=2),
        eta_t=jnp.sum(tt * jnp.log1p(eta), axis=2), abs_logm=jnp.sum(tt * jnp.abs(log_m), axis=2),
        kap=kap, kap_m=kap3[..., 1], kap_p=kap3[..., 2],
        alpha=alpha, gamma=gamma, w=w_split,
        # v ≥ e^−700: a larger v only loosens both bounds it enters. At u = 0 the split term
        # v/u is then +∞ (the bound: the mass 1 − w), and the tail's closed form stays finite
        # where w = 0 (v/0 was NaN where v underflowed to 0, and so was the tail at w = v = 0)
        log_v=jnp.maximum(log_v, -700.0),
        alpha_l=alpha_l, gamma_l=gamma_l, t=t[None], u=u, trusted=trusted,
    )
    # bounds on |M_i(c+iu)|/M_i(c) at check points beyond H: computed value·(1 + η)
    uc = (h * nu)[..., None] * jnp.asarray(_TAIL_RATIO ** np.arange(_CHECK_PIECES + 1), h.dtype)
    log_mc, eta_c = cm.log_moment_line(qs[None], ss[None], c[..., None], d, uc[:, :, None, :], nx,
                                       limit, sterms)
    # over M_i(c) from below: M_i(c) ≥ computed/(1 + η_i)
    kap_low = kap_seg - jnp.log1p(jnp.exp(log_eta))
    check = _check_bound(log_mc, eta_c, kap_low)
    line = line._replace(check=sg(jnp.minimum(check, 1.0)))
    if shifted:
        # the shifted-contour bound on |M_i(c+iu)|/M_i(c) beyond H (M_i(c) from above for the
        # rule's error, from below for the ratio). η is capped at 0.5 only to keep the log
        # finite: a line with some η above _MAX_ETA is untrusted (its δ is +∞) anyway
        ushift = (h * nu)[..., None] * jnp.asarray(
            _TAIL_RATIO ** np.arange(0, _TAIL_PIECES + 1, _SHIFT_EVERY), h.dtype)
        kap_up = kap_seg - jnp.log1p(-jnp.minimum(jnp.exp(log_eta), 0.5))
        log_shift = cm.log_shifted_bound(qs[None], ss[None], c[..., None], d,
                                         ushift[:, :, None, :], kap_up) - kap_low[..., None]
        # NaN (an untrusted line's M(c), ∞ − ∞) bounds nothing: 0, the ratio's bound 1
        log_shift = jnp.minimum(jnp.where(jnp.isnan(log_shift), 0.0, log_shift), 0.0)
        line = line._replace(shifted=sg(log_shift))
    sgl = jax.tree_util.tree_map(sg, line)
    log_tail = _log_tail(sgl)
    if nx >= _DENSE_CHECK_NX:
        log_tail = jnp.minimum(log_tail, _log_dense_tail(sgl, qs, ss, c, kap_low, nx))
    return line._replace(log_env=_log_envelope(sgl, sgl.u), log_tail=log_tail)


def _check_bound(log_m, eta, kap_low):
    """Bound on |M_i(c+iu)|/M_i(c) from a computed log M_i ``(..., P)`` with relative error
    bound η: |computed|·(1 + η) over M_i(c) ≥ e^{kap_low}; 1 where η ≥ 1 (nothing known)."""
    return jnp.where(eta < 1.0, jnp.exp(jnp.real(log_m) - kap_low[..., None]) * (1.0 + eta), 1.0)


def _log_dense_tail(line: _Line, q, s, c, kap_low, nx: int):
    """log of ∫_H^∞ (bound of |M|^T/M(c)^T)(u) du/u² from dense check points, ``(2, n)``.

    With Δ = H/F (F = :data:`_DENSE_CHECK_FIRST`), the bound on [H, u_last] is |M_i| computed
    at the :data:`_DENSE_CHECKS` points u_k = k·Δ, F ≤ k < F + K, by an x-rule of
    :data:`_DENSE_CHECK_REFINE` times ``nx`` intervals (which resolves e^{iuℓ} that much further
    along the line; by blocks, :func:`jaxrdp._complex_moments.log_moment_uniform_line`), times
    (1 + η_k), over M_i(c) from below; between two points each u is within half the spacing
    of one, and |φ(u) − φ(u')| ≤ |u − u'|·√(2α_i) (as in :func:`_log_pieces`). Beyond u_last,
    :func:`_log_pieces`. Where few steps are sampled the geometric check points of
    :func:`_line` are too far apart for that Lipschitz term (a piece at H is 0.12·H wide) and
    the coarse rule stops resolving M just beyond H, so the bound there is the split bound's
    floor, (near mass)^T, while the integrand has fallen far below it (measured in
    ``benchmarks/README.md``).
    """
    d = _DIRS.reshape(2, 1, 1)
    nxf = _DENSE_CHECK_REFINE * (nx - 1) + 1
    terms = cm.line_terms(q[None], s[None], c[..., None], d, nxf)
    limit = cm.aliasing_limit(q[None], s[None], c[..., None], d, nxf, terms)
    big_h = line.h * line.u.shape[-1]
    step = big_h / _DENSE_CHECK_FIRST
    log_mc, eta = cm.log_moment_uniform_line(q[None], s[None], c[..., None], d, step[..., None],
                                             _DENSE_CHECKS, nxf, limit, terms,
                                             first=_DENSE_CHECK_FIRST)
    check = _check_bound(log_mc, eta, kap_low)  # (2, n, S, K)
    uc = step[..., None] * (_DENSE_CHECK_FIRST + jnp.arange(_DENSE_CHECKS, dtype=step.dtype))
    # each u of [u_k, u_k+1] is within half their distance of a point (1e-9: the rounding of
    # the u_k); the first piece starts at H, which may lie a rounding below u_F
    half = 0.5 * (uc[..., 1:] - uc[..., :-1]) * (1.0 + 1e-9)
    near = (jnp.maximum(check[..., :-1], check[..., 1:])
            + jnp.sqrt(2.0 * line.alpha)[..., None] * half[:, :, None, :])
    lo = uc[..., :-1].at[..., 0].set(jnp.minimum(uc[..., 0], big_h))
    # where the fine rule no longer resolves M (η ≥ 1, beyond its aliasing limit) a point
    # bounds nothing: there the envelope's bound on the piece, as in _log_pieces
    near = jnp.minimum(near, _piece_envelope(line, lo, uc[..., 1:]).swapaxes(-1, -2))
    log_b = jnp.log(jnp.clip(near, 1e-300, 1.0))  # (2, n, S, K − 1)
    log_pieces = jnp.sum(line.t[..., None] * log_b, axis=2) + jnp.log(1.0 / lo - 1.0 / uc[..., 1:])
    rest = _log_pieces(line, uc[..., -1])
    return jnp.logaddexp(jax.scipy.special.logsumexp(log_pieces, axis=-1), rest)


def _quartic(a, g, u):
    """√(1 − 2αu² + (2γ + α²)u⁴), at most 1: bounds |E e^{iuL̃}| for every u.

    With L̃' an independent copy, |E e^{iuL̃}|² = E cos(uY) for the symmetric Y = L̃ − L̃',
    E Y² = 2κ'' = 4α, E Y⁴ = 2μ₄ + 6κ''² = 48γ + 24α², and cos y ≤ 1 − y²/2 + y⁴/24 for every
    real y. (The unsquared 1 − αu² + γu⁴ is not a bound: the odd terms of an asymmetric loss
    can exceed it, by 0.12 for some three-point laws.) Convex in u², so its maximum on an
    interval is at an end.
    """
    return jnp.sqrt(jnp.clip(1.0 - 2.0 * a * u**2 + (2.0 * g + a**2) * u**4, 0.0, 1.0))


def _split_bound(line: _Line, u, u_hi=None):
    """min over split points k of w_k·Q_k + min(1 − w_k, v_k/u), per segment.

    Q_k is the left part's quartic bound (:func:`jaxrdp._complex_moments.real_stats`) at u, or
    its maximum over [u, u_hi] (at an end: it is convex in u²). ``u``, ``u_hi``:
    ``(2, n, m, 1)``; the result ``(2, n, m, S)``.
    """
    v = jnp.exp(jnp.minimum(line.log_v[:, :, None], 700.0))
    a, g, w = line.alpha_l[:, :, None], line.gamma_l[:, :, None], line.w[:, :, None]
    lo = u[..., None]
    quartic = _quartic(a, g, lo)
    if u_hi is not None:
        quartic = jnp.maximum(quartic, _quartic(a, g, u_hi[..., None]))
    return jnp.min(w * quartic + jnp.minimum(1.0 - w, v / lo), axis=-1)


def _log_envelope(line: _Line, u):
    """log of a bound on |M(c+iu)|^T / M(c)^T at u ``(2, n, m)``.

    Per segment |M_i(c+iu)|/M_i(c) = |E e^{iuL̃}| for the tilted, centred loss L̃, which is at
    most 1; at most :func:`_split_bound` for every split point k (the part left of x_k and
    one integration by parts right of it, :func:`jaxrdp._complex_moments.real_stats`); and at
    most :func:`_quartic` (α = κ''/2, γ = μ₄/24).
    """
    uu = u[..., None]
    a, g, t = (v[:, :, None, :] for v in (line.alpha, line.gamma, line.t))
    log_b = jnp.log(jnp.maximum(jnp.minimum(_quartic(a, g, uu), _split_bound(line, uu)), 1e-300))
    return jnp.sum(t * jnp.minimum(log_b, 0.0), axis=-1)


def _log_split_tail(line: _Line, start):
    """log of min over segments j and split points k of ∫_start^∞ (w + v/u)^{T_j} du/u².

    With s = 1/u the integral is [(w + v/start)^{T+1} − w^{T+1}] / ((T+1) v). ``start``:
    ``(2, n)``; the result ``(2, n)``.
    """
    t = line.t[..., None]
    w, log_v = line.w, line.log_v
    log_x = jnp.log(start)[..., None, None]
    log_top = jnp.logaddexp(jnp.log(w), log_v - log_x)  # log(w + v/x)
    log_w = jnp.where(w > 0, jnp.log(jnp.where(w > 0, w, 1.0)), -jnp.inf)
    diff = -jnp.expm1((t + 1.0) * (log_w - log_top))
    log_int = ((t + 1.0) * log_top + jnp.log(jnp.maximum(diff, 1e-300)) - jnp.log(t + 1.0)
               - log_v)
    log_int = jnp.where(line.t[..., None] > 0, log_int, -log_x)  # unsampled: ∫ du/u²
    return jnp.minimum(jnp.min(log_int, axis=(-2, -1)), -log_x[..., 0, 0])


def _piece_envelope(line: _Line, lo, hi):
    """Bound on |M_i(c+iu)|/M_i(c) over each piece [lo, hi] ``(2, n, m)`` → ``(2, n, m, S)``:
    the envelope of :func:`_log_envelope` at the pieces' ends (its split terms w + v/u fall in
    u; the quartic bound is convex in u², so at most its larger end value), at most 1."""
    lo, hi = lo[..., None], hi[..., None]
    a, g = line.alpha[:, :, None, :], line.gamma[:, :, None, :]
    q_max = jnp.maximum(_quartic(a, g, lo), _quartic(a, g, hi))
    return jnp.minimum(jnp.minimum(q_max, _split_bound(line, lo, hi)), 1.0)


def _log_pieces(line: _Line, start, check=None, shifted=None):
    """log of ∫_start^∞ (bound of |M|^T/M(c)^T)(u) du/u² ``(2, n)``, piece by piece.

    On a geometric grid start = u_0 < … < u_P the bound of :func:`_log_envelope` is bounded on
    each piece [u_i, u_{i+1}] by :func:`_piece_envelope`, so the piece contributes at most
    that bound times 1/u_i − 1/u_{i+1}; beyond u_P the
    closed form of :func:`_log_split_tail`. With ``check`` (the computed bounds at
    start·ratio^i, see :class:`_Line`), the first pieces also use those and a Lipschitz bound;
    with ``shifted`` (:attr:`_Line.shifted`, for start = H) every piece also uses the
    shifted-contour bound of the last point at or below its left end, and so does the rest.
    """
    grid = start[..., None] * jnp.asarray(_TAIL_RATIO ** np.arange(_TAIL_PIECES + 1), start.dtype)
    lo, hi = grid[..., :-1, None], grid[..., 1:, None]
    a, t = line.alpha[:, :, None, :], line.t[:, :, None, :]
    bound = _piece_envelope(line, grid[..., :-1], grid[..., 1:])
    if check is not None:
        # |φ(u) − φ(u')| ≤ |u − u'|·E|L̃| ≤ |u − u'|·√(2α): each point of a piece is within
        # half its width of an end
        p = _CHECK_PIECES
        near = (jnp.maximum(check[..., :p], check[..., 1:]).swapaxes(-1, -2)
                + jnp.sqrt(2.0 * a) * 0.5 * (hi[..., :p, :] - lo[..., :p, :]))
        bound = bound.at[..., :p, :].set(jnp.minimum(bound[..., :p, :], near))
    log_b = jnp.log(jnp.maximum(bound, 1e-300))
    rest = _log_split_tail(line, grid[..., -1])
    if shifted is not None:
        which = np.arange(_TAIL_PIECES) // _SHIFT_EVERY
        log_b = jnp.minimum(log_b, shifted[..., which].swapaxes(-1, -2))
        rest = jnp.minimum(rest, jnp.sum(line.t * shifted[..., -1], axis=-1)
                           - jnp.log(grid[..., -1]))
    log_pieces = jnp.sum(t * log_b, axis=-1) + jnp.log(1.0 / grid[..., :-1] - 1.0 / grid[..., 1:])
    return jax.scipy.special.logsumexp(jnp.concatenate([log_pieces, rest[..., None]], -1), -1)


def _log_tail(line: _Line):
    """log of ∫_H^∞ (bound of |M|^T/M(c)^T)(u) du/u², H = N_u·h: the truncated line. ``(2, n)``.

    The smaller of two bounds: :func:`_log_pieces` from H; and, on [H, u₁] where every
    segment's quartic bound is ≤ e^{−α_i u²/2}, e^{−AH²/2}/(A H³) (A = Σ T_i α_i) plus
    :func:`_log_pieces` from max(H, u₁). (With B = 2γ + α², 1 − 2αs + Bs² ≤ 1 − αs ≤ e^{−αs}
    for s = u² ≤ α/B, so u₁ = min_i √(α_i/B_i).)
    """
    t, a, g = line.t, line.alpha, line.gamma
    big_h = line.h * line.u.shape[-1]
    safe_a = jnp.where(a > 0, a, 1.0)
    v = jnp.where(a > 0, jnp.sqrt(safe_a / (2.0 * g + safe_a**2)), 0.0)
    u1 = jnp.min(jnp.where(t > 0, v, jnp.inf), axis=-1)
    u1 = jnp.where(jnp.isfinite(u1), u1, 0.0)
    big_a = jnp.sum(t * a, axis=-1)
    log_first = jnp.where(
        big_h < u1,
        -0.5 * big_a * big_h**2 - jnp.log(jnp.maximum(big_a, 1e-300)) - 3.0 * jnp.log(big_h),
        -jnp.inf)
    composite = jnp.logaddexp(log_first, _log_pieces(line, jnp.maximum(big_h, u1)))
    return jnp.minimum(composite, _log_pieces(line, big_h, line.check, line.shifted))


#: the fields of :class:`_Line` that :func:`_nodes` and :func:`_log_delta` read
_LOG_DELTA_FIELDS = ("c", "h", "a", "log_mt", "eta_t", "abs_logm", "kap", "kap_m", "kap_p", "u",
                     "log_env", "log_tail", "trusted")


class _Nodes(NamedTuple):
    """The parts of the line's integrand that do not depend on ε, per direction and run.

    With L_k = Σ T_i log M_i(z_k) − log z_k − log(z_k + 1) the integrand is
    F_k(ε) = e^{L_k − z_k ε} = e^{p(ε)}·G_k·e^{−i u_k ε}, p(ε) = Re L_0 − cε and
    G_k = e^{L_k − Re L_0} (|G_k| ≤ 1: |M(c+iu)| ≤ M(c) and |z(z+1)| ≥ c(c+1)). Relative to
    e^{p}, every error term below is then free of ε except the rounding's |z|·ε part.
    """

    p0: jax.Array  # Re L_0, (2, n)
    g: jax.Array  # G_k, zero where the node is dropped, complex (2, n, N_u)
    zg: jax.Array  # z_k·G_k of the kept nodes (for the slope), complex (2, n, N_u)
    mom: jax.Array  # Σ w_k min(kept, dropped): the moments' error, relative to e^p, (2, n)
    rnd0: jax.Array  # rounding bound's ε-free part, relative to e^p, (2, n)
    rnd1: jax.Array  # its factor of ε, (2, n)


def _trapezoid_weights(line: _Line):
    n_u = line.u.shape[-1]
    return jnp.where(jnp.arange(n_u) == 0, 1.0, 2.0) * line.h[..., None] / (2.0 * jnp.pi)


def _nodes(line: _Line) -> _Nodes:
    """:class:`_Nodes` of a line (once per line: the ε search only rotates the phases)."""
    z = line.c[..., None] + 1j * line.u
    log_g = line.log_mt - jnp.log(z) - jnp.log(z + 1.0)
    p0 = jnp.real(log_g[..., 0])
    g = jnp.exp(log_g - p0[..., None])
    wts = _trapezoid_weights(line)
    absg = jnp.abs(jax.lax.stop_gradient(g))  # the error terms carry no derivative
    # per node: the moments' error |F|·((1+η)^T − 1), or drop the node and bound the true
    # value by the envelope; whichever is smaller (both sound)
    kept = absg * jnp.expm1(jnp.minimum(line.eta_t, 700.0))
    log_env = (line.kap[..., None] + line.log_env - jnp.log(jnp.abs(z)) - jnp.log(jnp.abs(z + 1.0))
               - p0[..., None])
    dropped = jnp.exp(jnp.minimum(log_env, 700.0))
    drop = dropped < kept
    g = jnp.where(drop, 0.0, g)
    rnd = 8.0 * cm._EPS * wts * absg
    # N_u/16: the sum over the nodes, whose order XLA chooses, (N_u − 1)·eps/2 per term (a
    # tree of additions, ⌈log₂ N_u⌉ per term, made ε(δ) 1.3× slower)
    n_u = line.u.shape[-1]
    return _Nodes(p0=p0, g=g, zg=z * g, mom=jnp.sum(wts * jnp.minimum(kept, dropped), axis=-1),
                  rnd0=jnp.sum(rnd * (line.abs_logm + 10.0 + n_u / 16), axis=-1),
                  rnd1=jnp.sum(rnd * jnp.abs(z), axis=-1))


def _finite_line(line: _Line, live) -> _Line:
    """``line`` on the lanes ``live`` ``(2, n)``; elsewhere a finite stand-in (c = h = 1,
    a = 1/2, log M^T = −10³⁰, zeros).

    For the lanes whose :func:`_log_delta` is discarded: its value and its derivatives stay
    finite there, so that their zero cotangent meets no 0·∞ on the way back. Such a lane's
    line can be anything: the add direction's, beyond its largest loss, at a saddle c in the
    thousands, was finite or not depending on how XLA fused the program (NaN in ε on an
    H200 for 0.5% of the benchmark's runs, and on CPU at a batch of 2 runs, not of 8).
    """
    stand_in = {"c": 1.0, "h": 1.0, "a": 0.5, "log_mt": -1e30, "trusted": True}

    def fix(name):
        value = getattr(line, name)
        keep = live.reshape(live.shape + (1,) * (value.ndim - 2))
        return jnp.where(keep, value, jnp.asarray(stand_in.get(name, 0.0), value.dtype))

    return line._replace(**{name: fix(name) for name in _LOG_DELTA_FIELDS})


def _log_delta(line: _Line, eps, nodes: _Nodes | None = None, with_search_slope: bool = False):
    """Bounded log δ_up, its relative error bound and d log(estimate)/dε at ε ``(2, n, m)``.

    ``nodes``: :func:`_nodes` of ``line`` (computed here if not given). Per ε the nodes' phases
    e^{−i u_k ε} (u_k = k·h) come by blocks (:func:`jaxrdp._complex_moments.equispaced_phases`,
    their rounding within the eps·|z|ε of the rounding term). ``with_search_slope``: also
    d log δ_up/dε with the error bound held fixed (defined where the estimate is not positive).
    """
    nodes = _nodes(line) if nodes is None else nodes
    n_u = line.u.shape[-1]
    phase = jnp.conj(cm.equispaced_phases(line.h[..., None] * eps, n_u))  # (2, n, m, N_u)
    wts = _trapezoid_weights(line)[:, :, None, :]
    p = nodes.p0[..., None] - line.c[..., None] * eps
    est = jnp.sum(wts * jnp.real(nodes.g[:, :, None, :] * phase), axis=-1)
    dest = -jnp.sum(wts * jnp.real(nodes.zg[:, :, None, :] * phase), axis=-1)  # d(e^p est)/dε/e^p
    slope = dest / est
    rnd = nodes.rnd0[..., None] + nodes.rnd1[..., None] * eps
    # discretisation
    cc, a = line.c[..., None], line.a[..., None]
    log_j = lambda cp, kp: kp - cp * eps - jnp.log(2.0 * cp)
    log_disc = (jnp.log(2.0) + jnp.maximum(log_j(cc - a, line.kap_m[..., None]),
                                           log_j(cc + a, line.kap_p[..., None]))
                - jnp.log(jnp.expm1(jnp.minimum(2.0 * jnp.pi * a / line.h[..., None], 700.0))))
    # truncation at H (both half-lines, 1/2π)
    log_trunc = line.kap[..., None] - cc * eps - jnp.log(jnp.pi) + line.log_tail[..., None]
    err = (nodes.mom[..., None] + rnd + jnp.exp(jnp.minimum(log_disc - p, 700.0))
           + jnp.exp(jnp.minimum(log_trunc - p, 700.0)))
    # the error bound is a constant for derivatives (absolute, not relative to e^p)
    err_abs = jax.lax.stop_gradient(p + jnp.log(jnp.maximum(err, 1e-300)))
    log_up = p + jnp.log(jnp.maximum(est + jnp.exp(jnp.minimum(err_abs - p, 700.0)), 1e-300))
    rel = jnp.where(est > 0, err / jnp.maximum(est, 1e-300), jnp.inf)
    # a line whose x-rule does not resolve M(c) bounds nothing: every term above is relative
    # to the computed M(c)^T (under-resolved, it was e^{−472 433} for a true e^{7 574})
    trusted = line.trusted[..., None]
    log_up, rel = jnp.where(trusted, log_up, jnp.inf), jnp.where(trusted, rel, jnp.inf)
    if with_search_slope:  # d log_up/dε with the error held fixed: defined even where est ≤ 0
        return log_up, rel, slope, dest / jnp.maximum(est + err, 1e-300)
    return log_up, rel, slope


def _rel_of_max(log_up, rel):
    """Relative error bound of max over directions (axis 0) of the bounded δ.

    |max(a + e_a, b + e_b) − max(a, b)| ≤ max(e_a, e_b), and err = up·rel/(1 + rel).
    """
    finite = rel < jnp.inf
    log_err = log_up + jnp.log(jnp.where(finite, rel / (1.0 + rel), 1.0))  # err ≤ up always
    log_est = jnp.where(finite, log_up - jnp.log1p(jnp.where(finite, rel, 0.0)), -jnp.inf)
    out = jnp.exp(jnp.max(log_err, axis=0) - jnp.max(log_est, axis=0))
    return jnp.where(jnp.max(log_up, axis=0) == -jnp.inf, 0.0, out)


def _add_loss_max(q, t):
    """add direction: L ≤ −Σ T log(1−q) surely ``(n,)``, so δ_add(ε) = 0 beyond it (exact)."""
    lmax = -jnp.sum(t * jnp.log1p(-jnp.minimum(q, 1.0 - 1e-16)), axis=-1)
    return jnp.where(jnp.all(q < 1.0, axis=-1), lmax, jnp.inf)


def _add_zero_beyond(log_up, rel, beyond):
    """The bounded (log δ, rel) of both directions (axis 0) with δ_add exactly 0 where
    ``beyond`` (ε at or past :func:`_add_loss_max`): bound −∞, rel 0."""
    return (log_up.at[1].set(jnp.where(beyond, -jnp.inf, log_up[1])),
            rel.at[1].set(jnp.where(beyond, 0.0, rel[1])))


def _dummies(q, s, t):
    """Segments without sampling contribute M = 1: give them safe inputs and no weight."""
    sampled = (q > 0) & (t > 0)
    return jnp.where(sampled, q, 0.5), jnp.where(sampled, s, 1.0), jnp.where(sampled, t, 0.0)


# ---------------------------------------------------------------------------- the cores


def _line_scale(q, t, c_scale, few_scale):
    """The line's Re z over the searched c per run ``(n,)``: ``few_scale`` where the run
    samples few steps, its spread ρ = (Σ_i q_i² T_i)^{1/2} below :data:`_FEW_SAMPLED_SPREAD`
    (q·√T for one segment), else ``c_scale``; ``c_scale`` for all where ``few_scale`` is
    None (traced calls)."""
    if few_scale is None:
        return c_scale
    spread = jnp.sqrt(jnp.sum(q * q * t, axis=-1))
    return jnp.where(spread < _FEW_SAMPLED_SPREAD, few_scale, c_scale)


@functools.partial(jax.jit, static_argnames=("nx", "nu", "narrow", "shifted", "warm"))
def _delta_chunk(q, s, t, eps, nx, nu, c_scale=1.0, narrow=False, shifted=True, warm=False,
                 few_scale=None):
    """Bounded (log δ_remove, log δ_add, relative error) of runs ``(n, S)`` at ε ``(n,)``.

    ``warm`` is not used: the saddle's search always starts at c = 1. From a Gaussian
    mechanism's saddle (RDP ρα with ρ = log A_2/2, 6 steps) the first 2 048 runs of
    ``benchmarks/bench_profile.py`` took 15.6 against 13.8 ms per run at ε = 4 (12.5 against
    13.8 at ε = 1): more of them left the first step for the costly ones.
    """
    q, s, t = _dummies(q, s, t)
    active = (jnp.sum(t, axis=-1) > 0) & (eps < jnp.inf)
    t = jnp.where(active[:, None], t, 1.0)
    q = jnp.where(active[:, None], q, 0.5)
    e = jnp.where(active, eps, 1.0)
    c = _line_scale(q, t, c_scale, few_scale) * _saddle(*(jax.lax.stop_gradient(v)
                                                          for v in (q, s, t, e)))
    line = _line(q, s, t, c, jnp.broadcast_to(e, c.shape), nx, nu, narrow, shifted)
    impossible = e >= _add_loss_max(q, t)
    live = active[None] & ((_DIRS[:, None] > 0) | ~impossible[None])
    log_up, rel, _ = _log_delta(_finite_line(line, live),
                                jnp.broadcast_to(e[:, None], (2,) + e.shape + (1,)))
    log_up, rel = _add_zero_beyond(log_up[..., 0], rel[..., 0], impossible)
    rel = _rel_of_max(log_up, rel)
    lr = jnp.where(active, log_up[0], -jnp.inf)
    la = jnp.where(active, log_up[1], -jnp.inf)
    return lr, la, jnp.where(active, rel, 0.0)


@functools.partial(jax.jit, static_argnames=("nx", "nu", "narrow", "shifted", "warm", "gradient"))
def _epsilon_chunk(q, s, t, log_delta, eps_rdp, nx, nu, c_scale=1.0, narrow=False, shifted=True,
                   warm=False, few_scale=None, gradient=True):
    """Verified profile ε and its relative error bound for runs ``(n, S)`` at δ ``(n,)``;
    ``gradient=False`` leaves out the implicit-function derivative (the same values)."""
    sg = jax.lax.stop_gradient
    eps_rdp, log_delta = sg(eps_rdp), sg(log_delta)  # ε's derivative: implicit, below
    q, s, t = _dummies(q, s, t)
    active = (jnp.sum(t, axis=-1) > 0) & jnp.isfinite(eps_rdp) & (eps_rdp > 0)
    t = jnp.where(active[:, None], t, 1.0)
    q = jnp.where(active[:, None], q, 0.5)
    hi0 = jnp.where(active, eps_rdp, 1.0)
    start = (_gaussian_order(hi0, log_delta), _WARM_SEARCH_ITERATIONS) if warm else ()
    c, centre = _laplace_centre(*(sg(v) for v in (q, s, t, log_delta)), *start)
    c = _line_scale(q, t, c_scale, few_scale) * c  # the centre ε stays the saddle's
    centre = jnp.minimum(centre, hi0[None])
    line = _line(q, s, t, c, centre, nx, nu, narrow, shifted)
    lmax = _add_loss_max(sg(q), sg(t))

    def excess(e):  # (2, n) → bounded log δ − log δ target and its slope, per direction
        log_up, _, slope, slope_up = _log_delta(sg_line, e[..., None], sg_nodes,
                                                with_search_slope=True)
        # where the estimate's own slope is unusable (est ≤ 0: the error bound dominates)
        slope = jnp.where(slope < 0, slope, slope_up)
        return log_up[..., 0] - log_delta, slope[..., 0]

    sg_line = jax.tree_util.tree_map(sg, line)
    sg_nodes = _nodes(sg_line)

    def body(_, carry):
        e, lo, hi = carry
        f, slope = excess(e)
        f = jnp.where((e >= lmax) & (_DIRS[:, None] < 0), -1.0, f)
        lo = jnp.where(f > 0, e, lo)
        hi = jnp.where(f > 0, hi, e)
        step = jnp.where(slope < 0, f / slope, jnp.nan)
        e_new = e - step
        inside = (e_new >= lo) & (e_new <= hi)
        # bisection in log ε (ε spans many decades: 1e-4 to 500), from 1e-12·hi while lo = 0
        mid = jnp.sqrt(jnp.maximum(lo, 1e-12 * hi) * hi)
        return jnp.where(inside, e_new, mid), lo, hi

    hi = jnp.broadcast_to(1.5 * hi0 + 1.0, centre.shape)
    e, _, hi = jax.lax.fori_loop(0, _NEWTON_ITERATIONS, body,
                                 (centre, jnp.zeros_like(centre), hi))
    base = sg(jnp.max(e, axis=0))  # (n,)
    nudge = jnp.asarray(_NUDGE, base.dtype)
    cands = base[:, None] * (1.0 + nudge) + jnp.where(nudge > 0, 1e-300, 0.0)
    # and the search's upper end (where it stopped short of the root: bisection steps)
    cands = jnp.sort(jnp.concatenate([cands, sg(jnp.max(hi, axis=0))[:, None]], -1), axis=-1)
    log_up, rel, slope = _log_delta(sg_line, jnp.broadcast_to(cands, (2,) + cands.shape), sg_nodes)
    log_up, rel = _add_zero_beyond(log_up, rel, cands >= lmax[:, None])
    ok = jnp.all(log_up <= log_delta[None, :, None], axis=0)  # (n, m)
    first = jnp.argmax(ok, axis=-1)
    found = jnp.any(ok, axis=-1)
    pick = lambda v: jnp.take_along_axis(v, first[:, None], axis=-1)[:, 0]
    eps_out = jnp.where(found, pick(cands), jnp.inf)
    # relative error of ε: the true ε is at least the root of some direction's lower bound
    # (estimate − error); linearised in log δ at the returned point
    pick2 = lambda v: jnp.take_along_axis(v, first[None, :, None], axis=-1)[..., 0]
    rel_c, up_c, slope_c = pick2(rel), pick2(log_up), pick2(slope)
    log_lower = up_c + jnp.log(jnp.maximum((1.0 - rel_c) / (1.0 + rel_c), 1e-300))
    gap = (log_delta[None] - log_lower) / jnp.maximum(-slope_c, 1e-300)
    # a direction whose bound is exactly 0 (add, beyond its largest loss) constrains nothing
    bounds = (rel_c < 1.0) & (up_c > -jnp.inf)
    rel_e = jnp.min(jnp.where(bounds, gap, jnp.inf), axis=0) / jnp.maximum(eps_out, 1e-300)
    if gradient:
        dld = jnp.take_along_axis(slope_c, jnp.argmax(up_c, axis=0)[None], axis=0)[0]  # binding
        # implicit-function gradient in q and σ (value unchanged)
        e_fixed = sg(jnp.where(found, eps_out, 1.0))
        # only the directions that can bind at the verified ε enter: the add direction is
        # exactly zero from its largest loss on (its line is never looked at there, by the
        # search either)
        live = (found & active)[None] & ((_DIRS[:, None] > 0) | (e_fixed < lmax)[None])
        line = _finite_line(line, live)
        # and moments that vanished (nodes the bound drops) a finite stand-in too: this value
        # cancels, only its derivatives count
        line = line._replace(log_mt=jnp.where(jnp.isfinite(line.log_mt), line.log_mt, -1e30))
        at = jnp.broadcast_to(e_fixed[None, :, None], (2,) + e_fixed.shape + (1,))
        ld = _log_delta(line, at)[0]
        ld = jnp.max(jnp.where(live, ld[..., 0], -jnp.inf), axis=0)
        corr = (ld - sg(ld)) / jnp.where(dld < 0, sg(dld), -1.0)
        eps_out = eps_out - jnp.where(found, corr, 0.0)
    return (jnp.where(active, eps_out, jnp.inf), jnp.where(active & found, rel_e, jnp.inf))


@functools.partial(jax.jit, static_argnames=("nx", "nu", "narrow", "shifted", "warm"))
def _epsilon_value_chunk(q, s, t, log_delta, eps_rdp, nx, nu, c_scale=1.0, narrow=False,
                         shifted=True, warm=False, few_scale=None):
    """:func:`_epsilon_chunk` without the implicit gradient, for concrete calls (nothing
    differentiates them): its program compiles some 8% faster (9.7 s against 10.5 s for
    TIERS[0] on a 2 vCPU CPU, the same ε)."""
    return _epsilon_chunk(q, s, t, log_delta, eps_rdp, nx, nu, c_scale, narrow, shifted, warm,
                          few_scale, gradient=False)


# --------------------------------------------------------------------- host-level driver


def _padded_size(n: int, floor: int) -> int:
    """The smallest power of two ``≥ n`` and ``≥ floor``: calls share compiled programs."""
    return max(floor, 1 << int(np.ceil(np.log2(max(n, 1)))))


def _chunk_size(n: int, per_run: int) -> int:
    """Runs per compiled chunk: a power of two within the memory budget (at least 1).

    Small calls are padded to at least :data:`_MIN_PADDED_RUNS` runs (or the budget), so
    that calls of every small size share one compiled program per tier and segment count.
    """
    cap = 1 << int(np.log2(max(_CHUNK // per_run, 1)))
    return min(cap, _padded_size(n, _MIN_PADDED_RUNS))


def _chunked(fn, args, step: _Step):
    """``fn`` over runs in chunks of one padded size; numpy results of length n."""
    n, segs = args[0].shape[0], args[0].shape[1]
    size = _chunk_size(n, segs * (step.nu + step.nx) * 128)
    # few_scale as a float on every step (c_scale where unset): the steps of one tier keep
    # sharing one compiled program
    static = (step.nx, step.nu, step.c_scale, step.narrow, step.shifted, step.warm,
              step.few_line_scale)
    return _in_pieces(lambda *piece: _program_cache.call(fn.__name__, fn, list(piece), static),
                      args, size)


def _in_pieces(fn, args, size):
    """``fn`` over the runs (axis 0) of ``args`` in pieces of ``size`` runs, the last padded
    by repeating the last run; its outputs as NumPy arrays of length n (n ≥ 1)."""
    n = args[0].shape[0]
    outs = []
    for lo in range(0, n, size):
        idx = np.minimum(np.arange(lo, lo + size), n - 1)
        res = fn(*(np.asarray(a)[idx] for a in args))
        outs.append([np.asarray(r)[: min(size, n - lo)] for r in res])
    return [np.concatenate(parts) for parts in zip(*outs)]


def _escalate(fn, args, merge, steps):
    """Run each of ``steps`` (:class:`_Step` or its fields) on the runs the previous steps left
    above TOLERANCE.

    ``fn(*args, nx, nu, c_scale, narrow, shifted, warm, few_scale) -> (..., rel)``.
    ``merge(old, new) -> result`` keeps the tighter of two sound results of the same runs
    (:func:`_merge_log_delta`, :func:`_merge_epsilon`).
    """
    steps = [_Step(*step) for step in steps]
    out = _chunked(fn, args, steps[0])
    queue = collections.deque((step, True) for step in steps[1:])  # (step, runs it may take)
    while queue:
        step, runs = queue.popleft()
        todo = ~(out[-1] <= TOLERANCE) & runs
        if step.skip_above is not None:
            todo &= out[-1] <= step.skip_above
        if step.defer_above is not None and queue:  # deferred behind every step still queued
            later = todo & (out[-1] > step.defer_above)
            queue.append((step._replace(defer_above=None, few_scale=None), later))
            todo &= ~later
        todo = np.nonzero(todo)[0]
        if not todo.size:
            continue
        new = _chunked(fn, [a[todo] for a in args], step)
        for o, v in zip(out, merge([o[todo] for o in out], new)):
            o[todo] = v
    return out


def _merge_log_delta(old, new):
    """The tighter of two bounded (log δ_remove, log δ_add, rel) of the same runs: each
    direction's smaller upper bound, and the relative error bound from the better lower end
    (:func:`_tighter_log_delta`). A NaN is no bound (+∞, rel ∞).

    Keeping whole results by the smaller max(δ) instead could keep a `PROFILE_LOOSE` one whose
    bound was smaller by rounding (6e-14 of δ) over one within 1e-6: q = 0.0211, σ = 1 806,
    T = 10, ε = 1.31e-4 came back with rel 2.8e-3 where a later step had 7.5e-10.
    """
    clean = lambda r: [np.where(np.isnan(v), np.inf, v) for v in r]
    (lr_a, la_a, rel_a), (lr_b, la_b, rel_b) = clean(old), clean(new)
    (lr, la), rel = _tighter_log_delta((lr_a, la_a), rel_a, (lr_b, la_b), rel_b)
    return [lr, la, np.where(np.isnan(rel), np.inf, rel)]


def _merge_epsilon(old, new):
    """:func:`_tighter_epsilon` of two steps' (ε, rel) of the same runs."""
    return list(_tighter_epsilon(*old, *new))


def _prepare(q, sigma, steps, target):
    """Eager checks of the segments (tracers are skipped) and the precision rule."""
    _validate.check_range("q", q, low=0.0, high=1.0)
    _validate.check_range("sigma", sigma, low=0.0, low_inclusive=False)
    _validate.check_integer("steps", steps, low=0)
    return _precision.compute_context(q, sigma, steps, target)


def _flatten(q, sigma, steps, target, dtype, xp):
    """Runs ``(n, S)`` and targets ``(n,)`` as ``xp`` arrays, with the batch shape to restore.

    ``xp`` is NumPy for concrete inputs (the host-side steps then dispatch no JAX programs:
    a tenth of a one-run call's time in a fresh process) and :mod:`jax.numpy` for tracers.
    """
    q, sigma, steps = (xp.asarray(v, dtype) for v in (q, sigma, steps))
    target = xp.asarray(target, dtype)
    seg = np.broadcast_shapes(q.shape, sigma.shape, steps.shape)
    if len(seg) == 0:
        seg = (1,)
    shape = np.broadcast_shapes(seg[:-1], target.shape)
    full = shape + seg[-1:]
    flat = [xp.broadcast_to(v if v.ndim else v[None], full).reshape(-1, seg[-1])
            for v in (q, sigma, steps)]
    return flat, xp.broadcast_to(target, shape).reshape(-1), shape


def _evaluate(fn, args, merge, tier, concrete: bool):
    """``fn(*args, nx, nu)`` on the tiers asked for.

    Concrete inputs: escalation along ``_ESCALATION`` (``tier=None``) or the one tier, in
    chunks of bounded memory, results as NumPy arrays; calls of at most ``_FEW_RUNS`` runs
    start at its step ``_FEW_RUNS_STEP`` and try the steps before it last (each step is its
    own program, traced about 1 s the first time in a process, while one run costs
    milliseconds on any). Under a transformation: one call on ``TIERS[tier]`` (default
    tier 1).
    """
    if tier is not None:
        _validate.check_choice("tier", tier, tuple(range(len(TIERS))))
    if not concrete:
        return fn(*args, *TIERS[1 if tier is None else tier])
    first = _FEW_RUNS_STEP if np.shape(args[0])[0] <= _FEW_RUNS else 0
    # the skipped cheap steps come last: where the others leave a run unsettled, the line
    # Re z = c of the small tiers can still hold a better bound (q = 0.0028, σ = 0.76,
    # T = 4: RDP's 1.39 without them, 1.15 with TIERS[1])
    tiers = (_ESCALATION[first:] + _ESCALATION[:first] + _LONG_LINE if tier is None
             else (TIERS[tier],))
    return _escalate(fn, [np.asarray(a) for a in args], merge, tiers)


def _status(use_rdp, rel, xp=jnp):
    return xp.where(use_rdp, RDP_FALLBACK, xp.where(rel <= TOLERANCE, PROFILE_OK, PROFILE_LOOSE))


def _namespace(concrete: bool):
    """NumPy for the host-side steps of concrete calls, :mod:`jax.numpy` under tracing."""
    return np if concrete else jnp


def _single_step(qf, sf, tf, xp):
    """Runs equivalent to one SGM step ``(n,)``, and that step's q and σ (safe elsewhere).

    Their profile is exact in closed form (:mod:`jaxrdp._one_step`; float64), where the
    line integral has no composition to smooth the loss and is never within TOLERANCE:

    * runs of exactly one sampled step;
    * with concrete inputs, runs whose every sampled step has q = 1 (full batches): each
      step is a Gaussian mechanism, whose privacy loss is N(μ²/2, μ²) with μ = 1/σ in both
      directions, so T_i steps at σ_i compose to the loss of one Gaussian mechanism with
      σ = (Σ T_i/σ_i²)^{−1/2} (Dong, Roth and Su 2022, Corollary 3.3), rounded down by a
      few ulps (a smaller σ only raises δ). Not under a transformation: a derivative in q
      at q = 1 is that of the T-fold composition, which one step does not carry.
    """
    sampled = (qf > 0) & (tf > 0)
    count = xp.sum(xp.where(sampled, tf, 0.0), axis=-1)
    one = count == 1
    q1 = xp.sum(xp.where(sampled, qf, 0.0), axis=-1)
    s1 = xp.sum(xp.where(sampled, sf, 0.0), axis=-1)
    if xp is np:
        full = (count > 1) & np.all(~sampled | (qf == 1.0), axis=-1)
        mu2 = np.sum(np.where(sampled, tf / np.where(sampled, sf, 1.0) ** 2, 0.0), axis=-1)
        rounding = 1.0 - 4.0 * (qf.shape[-1] + 3) * np.finfo(np.float64).eps
        s_full = rounding / np.sqrt(np.where(full, mu2, 1.0))
        q1, s1 = np.where(full, 1.0, q1), np.where(full, s_full, s1)
        one = one | full
    one = one & (qf.dtype == np.float64)  # its error bounds are float64's
    return one, xp.where(one, q1, 0.5), xp.where(one, s1, 1.0)


def _two_step_runs(qf, sf, tf, xp):
    """Runs of exactly two sampled steps at one q < 1 and σ ``(n,)``, and that q and σ (safe
    elsewhere): concrete float64 calls only (none under a transformation).

    Their profile is bracketed by :mod:`jaxrdp._two_steps` (the one-step closed form averaged
    over the first step by convexity), where the line integral cancels most; the runs the
    bracket settles skip the line, the others keep the tighter of the two sound answers.
    """
    none = np.zeros(qf.shape[0], bool)
    if xp is not np or qf.dtype != np.float64:
        return none, None, None
    shared, q, s, count, _ = _shared_segment(qf, sf, tf)
    two = shared & (count == 2) & (q < 1.0)
    return two, np.where(two, q, 0.5), np.where(two, s, 1.0)


def _shared_segment(qf, sf, tf):
    """Per run ``(n,)`` (NumPy): whether its sampled segments (q > 0, T > 0) share one q and
    σ, that q and σ, their total number of steps, and their number of segments."""
    sampled = (qf > 0) & (tf > 0)
    top = lambda v: np.max(np.where(sampled, v, -np.inf), axis=-1)
    bottom = lambda v: np.min(np.where(sampled, v, np.inf), axis=-1)
    shared = (top(qf) == bottom(qf)) & (top(sf) == bottom(sf))
    count = np.sum(np.where(sampled, tf, 0.0), axis=-1)
    return shared, top(qf), top(sf), count, np.sum(sampled, axis=-1)


#: runs per call of :mod:`jaxrdp._two_steps` (its cells: 2 × 2 049 per run and direction,
#: up to 2 × 8 193 on the δ(ε) retries)
_TWO_STEP_PIECE = 16
#: the cells of two-step δ(ε): the first bracket's, then the retries' (each a program of its
#: own, compiled only where a call has such a run)
_TWO_STEP_CELLS = (_two_steps.CELLS, 2 * _two_steps.CELLS, 4 * _two_steps.CELLS)
#: two-step δ(ε) whose error bound is above TOLERANCE but below this many times it are
#: bracketed again on twice the cells
_FINER_CELLS_REACH = 8
#: runs per call of :mod:`jaxrdp._split_chernoff` (2 × 24 × 2 049 terms per run and pass;
#: its union term's 2 × 12 × 513 × 48 per run)
_SPLIT_PIECE = 8


def _two_step_log_delta(two, q2, s2, ef, cells):
    """The two-step bracket's (log δ_remove, log δ_add, rel) ``(n,)`` on ``cells`` cells for
    the runs in ``two`` (concrete; the other runs: no bound, +∞)."""
    return _on_runs(functools.partial(_two_steps.log_delta, cells=cells), two, (q2, s2, ef),
                    (np.inf, np.inf, np.inf), True, _TWO_STEP_PIECE)


def _split_runs(qf, sf, tf, unbounded):
    """Runs of one sampled segment at q < 1 (concrete float64 calls) among ``unbounded``
    ``(n,)``, and that segment's q, σ and T: the ones :mod:`jaxrdp._split_chernoff` also
    bounds; the smaller sound answer is kept.

    ``unbounded``: the runs whose answer has no lower end (relative error bound ≥ 1: the
    line's error bound above its estimate). Where few steps are sampled the split bound is
    there far tighter than the line; elsewhere it is not: on the 51 runs of
    ``benchmarks/bench_profile.py``'s first 2 048 that end ``PROFILE_LOOSE``, it was smaller
    on 5, all without a lower end (ε 0.40–0.99 times the line's), and 1.09–1.42 times the line's
    ε on the 43 with a finite bound (e.g. 1.35 at a bound of 0.69; before its union term), at
    about 22 ms per run.
    """
    if qf.dtype != np.float64:
        return np.zeros(qf.shape[0], bool), None, None, None
    _, q1, s1, t1, segments = _shared_segment(qf, sf, tf)
    runs = (segments == 1) & (q1 < 1.0) & unbounded
    return runs, np.where(runs, q1, 0.5), np.where(runs, s1, 1.0), np.where(runs, t1, 1.0)


def _one_exit_runs(qf, sf, tf, loose):
    """Runs of one sampled segment at q < 1 and T ≥ 2 among ``loose`` ``(n,)`` (concrete
    float64 calls), and that segment's q, σ and T: the ones :mod:`jaxrdp._one_exit` also
    brackets (cheap: closed forms only); the tighter answer is kept."""
    runs, q1, s1, t1 = _split_runs(qf, sf, tf, loose)
    if t1 is None:
        return runs, q1, s1, t1
    runs = runs & (t1 >= 2)
    return runs, q1, s1, np.where(runs, t1, 2.0)


def _tighter_log_delta(log_a, rel_a, log_b, rel_b):
    """The better of two sound upper bounds of log δ per direction (``(log δ_rem, log δ_add)``
    each, with its relative error bound): each direction's smaller bound, and the error bound
    from the better lower end: each bound's err/est ``rel`` puts the truth at least at
    max(δ)·(1 − rel)/(1 + rel) (:func:`_log_delta`)."""
    top = lambda logs: np.maximum(*logs)
    with np.errstate(invalid="ignore", divide="ignore"):
        low = lambda logs, r: np.where(r < 1.0, top(logs) + np.log1p(-np.minimum(r, 1.0))
                                       - np.log1p(r), -np.inf)
        end = np.maximum(low(log_a, rel_a), low(log_b, rel_b))
    logs = [np.minimum(u, v) for u, v in zip(log_a, log_b)]
    best = top(logs)
    ratio = np.exp(np.minimum(end, best) - best)  # lower end/upper end, in [0, 1]
    rel = np.where(best == -np.inf, 0.0, (1.0 - ratio) / (1.0 + ratio))
    return logs, rel


def _tighter_epsilon(eps_a, rel_a, eps_b, rel_b):
    """The tighter of two sound ε of the same runs, each with its relative error bound: the
    smaller ε with its own rel, or the one the other result's lower end ε·(1 − rel) gives it
    where that result is within TOLERANCE, if smaller. A NaN is no bound (+∞, rel ∞).

    A rel above the tolerance is not a lower end to combine: the line's rel of ε is its
    bracket of log δ carried to ε by the slope at ε (:func:`_epsilon_chunk`), close to the
    truth only where small (q = 0.0211, σ = 1 806, T = 10, δ = 1.66e-12: TIERS[0]'s ε
    1.9912e-4 with rel 0.064 puts the truth at 1.8635e-4 and above; TIERS[2]'s ε, within
    2.3e-12, is 1.85973e-4). Leaving such an end out changes no status: a loose result's end
    cannot bring a smaller ε within the tolerance. ε = 0 is exact (rel 0).
    """
    (e_a, rel_a), (e_b, rel_b) = ([np.where(np.isnan(v), np.inf, v) for v in pair]
                                  for pair in ((eps_a, rel_a), (eps_b, rel_b)))
    take_b = e_b < e_a
    eps, own = np.where(take_b, e_b, e_a), np.where(take_b, rel_b, rel_a)
    with np.errstate(invalid="ignore"):
        other_e, other_rel = np.where(take_b, e_a, e_b), np.where(take_b, rel_a, rel_b)
        end = np.where(np.isfinite(other_e) & (other_rel <= TOLERANCE),
                       np.minimum(other_e * (1.0 - other_rel), eps), 0.0)
        given = np.where((end > 0) & np.isfinite(eps), 1.0 - end / eps, np.inf)
    # an upper bound of 0 is the truth (ε ≥ 0)
    return eps, np.where(eps == 0, 0.0, np.minimum(own, given))


_one_step_epsilon = jax.jit(_one_step.epsilon)
_split_epsilon = lambda *args: (_split_chernoff.epsilon(*args),)  # noqa: E731 (one output)
_one_step_log_delta = jax.jit(_one_step.log_delta)


def _on_runs(fn, mask, args, fill, concrete, piece=None):
    """``fn(*args)`` (a jitted :mod:`jaxrdp._one_step` or :mod:`jaxrdp._two_steps`
    function) on the runs in ``mask``.

    Under a transformation, on every run (the caller masks). Concrete: on the masked runs
    only, padded to a power of two (at least ``_FEW_RUNS``; in pieces of at most ``piece``
    runs where given), so that calls share few compiled programs (run eagerly on every run,
    its bisection loop was compiled at every call: 1.9 s of a one-run call); ``fill`` gives
    the other runs' outputs.
    """
    if not concrete:
        return fn(*args)
    idx = np.nonzero(mask)[0]
    if not idx.size:
        return [np.full(mask.shape, v) for v in fill]
    size = _padded_size(idx.size, _FEW_RUNS)
    size = min(size, piece) if piece else size
    res = _in_pieces(fn, [np.asarray(a)[idx] for a in args], size)
    out = [np.full(mask.shape, v, r.dtype) for v, r in zip(fill, res)]
    for o, r in zip(out, res):
        o[idx] = r
    return out


def _rdp_companion(kind, qf, sf, tf, target, concrete):
    """The runs' RDP ε or δ (``kind``: "epsilon" or "delta") ``(n,)`` at ``target`` ``(n,)``:
    :func:`jaxrdp.conversions.epsilon_from_rdp` or ``delta_from_rdp`` of their composed RDP
    curve at :data:`jaxrdp.kernels.DEFAULT_ORDERS`.

    Concrete calls pad the runs as the profile's programs do (:func:`_padded_size`: at least
    :data:`_MIN_PADDED_RUNS`), in pieces of at most ``_RDP_PIECE`` runs, so
    that calls of different sizes share the RDP programs as they share the profile's (each
    number of runs compiled them anew before: 5–7 s on a 2 vCPU CPU, as long as the
    profile's first tier). The :class:`jaxrdp.conversions.OrderAtEdgeWarning` counts the
    caller's runs, not the padding.
    """
    convert = conversions.epsilon_from_rdp if kind == "epsilon" else conversions.delta_from_rdp
    value = lambda q, s, t, x, **kw: convert(conversions.compose_rdp(q, s, t),
                                             kernels.DEFAULT_ORDERS, x, **kw)
    if not concrete:
        return value(qf, sf, tf, target)[0]
    n = qf.shape[0]
    if n == 0:
        return np.zeros(0, qf.dtype)
    size = min(_RDP_PIECE, _padded_size(n, _MIN_PADDED_RUNS))

    def piece(*args):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", conversions.OrderAtEdgeWarning)
            res = value(*args, return_info=True)
        return res[0], res.at_edge

    values, edges = _in_pieces(piece, (qf, sf, tf, target), size)
    conversions._warn_if_at_edge(edges, kernels.DEFAULT_ORDERS, kind)
    return values


def _closed_form_only(q, sigma, steps, dtype) -> bool:
    """Whether every run of a traced call is covered by :func:`_single_step` whatever the
    traced values: ``steps`` concrete, at most one step per run over all segments, float64.

    Such a call needs no line program (a sampled step is exact in closed form; a run with
    nothing sampled is exact from the RDP companion): under ``jax.jit`` the ε of one step
    and its derivatives then trace without the line (one run, value and gradient: 9 901
    lines of jaxpr against 17 657).
    """
    if not _validate.is_concrete(steps) or np.dtype(dtype) != np.float64:
        return False
    full = np.broadcast_shapes(np.shape(q), np.shape(sigma), np.shape(steps))
    counts = np.atleast_1d(np.broadcast_to(np.asarray(steps, np.float64), full))
    return bool(np.all(np.sum(counts, axis=-1) <= 1))


def _evaluate_rest(fn, args, merge, tier, concrete, skip, fill, closed_only=False):
    """:func:`_evaluate` on the runs not in ``skip`` (concrete: only those are computed);
    ``fill`` gives the skipped runs' outputs. ``closed_only`` (traced calls,
    :func:`_closed_form_only`): every run is in ``skip``, nothing is computed."""
    if not concrete:
        if closed_only:
            return [jnp.full(skip.shape, v, args[0].dtype) for v in fill]
        return _evaluate(fn, args, merge, tier, concrete)
    rest = np.nonzero(~skip)[0]
    out = [np.full(skip.shape, v, np.float64) for v in fill]
    if rest.size:
        for o, v in zip(out, _evaluate(fn, [np.asarray(a)[rest] for a in args], merge, tier,
                                       concrete)):
            o[rest] = v
    return out


def delta_schedule(q, sigma, steps, epsilon, *, tier: int | None = None) -> ProfileDelta:
    """δ(ε) of a schedule of SGM segments composed (add-or-remove, tight).

    Args:
      q: per-segment sampling rates in ``[0, 1]``, shape ``(..., S)`` (last axis: segments).
      sigma: per-segment noise multipliers ``> 0``, broadcastable with ``q``.
      steps: per-segment integer step counts ``≥ 0``, broadcastable with ``q``.
      epsilon: ε ≥ 0, shape broadcastable with ``(...)``.
      tier: index into :data:`TIERS` to run for every run; default: escalate tier by tier
        where needed (concrete inputs) or tier 1 (under a transformation).

    Returns:
      :class:`ProfileDelta` of the broadcast batch shape.

    Raises:
      ValueError: with concrete inputs, naming an invalid argument.
    """
    dtype, ctx = _prepare(q, sigma, steps, epsilon)
    if _validate.is_concrete(epsilon):
        _validate.check_range("epsilon", epsilon, low=0.0)
    concrete = _validate.is_concrete(q, sigma, steps, epsilon)
    xp = _namespace(concrete)
    with ctx:
        (qf, sf, tf), ef, shape = _flatten(q, sigma, steps, epsilon, dtype, xp)
        d_rdp = xp.asarray(_rdp_companion("delta", qf, sf, tf, ef, concrete))
        one, q1, s1 = _single_step(qf, sf, tf, xp)
        two, q2, s2 = _two_step_runs(qf, sf, tf, xp)
        # the bracket first: the runs it settles skip the line's escalation, which cancels
        # most at two steps (and each of whose tiers is a program of its own to compile)
        bracket = (_two_step_log_delta(two, q2, s2, ef, _TWO_STEP_CELLS[0])
                   if concrete and two.any() else None)
        settled = two & (bracket[2] <= TOLERANCE) if bracket is not None else False
        lr, la, rel = _evaluate_rest(_delta_chunk, (qf, sf, tf, ef),
                                     _merge_log_delta, tier, concrete, one | settled,
                                     (-np.inf, -np.inf, np.inf),
                                     _closed_form_only(q, sigma, steps, dtype))
        lr1, la1, eta1 = (xp.asarray(v) for v in _on_runs(
            _one_step_log_delta, one, (q1, s1, ef), (-np.inf, -np.inf, 0.0), concrete))
        up = xp.log1p(jax.lax.stop_gradient(eta1))  # the bound carries no derivative
        lr = xp.where(one, lr1 + up, lr)
        la = xp.where(one, la1 + up, la)
        rel = xp.where(one, eta1, rel)
        if bracket is not None:
            lr, la, rel = (np.where(settled, np.inf, v) for v in (lr, la, rel))  # not run
            (lr, la), rel = _tighter_log_delta((lr, la), rel, bracket[:2], bracket[2])
            for cells in _TWO_STEP_CELLS[1:]:
                # the finer cells (gap about a quarter): runs above the tolerance within reach
                two = two & (rel > TOLERANCE) & (rel < _FINER_CELLS_REACH * TOLERANCE)
                if not two.any():
                    break
                finer = _two_step_log_delta(two, q2, s2, ef, cells)
                (lr, la), rel = _tighter_log_delta((lr, la), rel, finer[:2], finer[2])
        if concrete:
            split, q3, s3, t3 = _split_runs(qf, sf, tf, ~(rel < 1.0) & np.isfinite(ef))
            if split.any():
                lr3, la3 = _on_runs(_split_chernoff.log_delta, split,
                                    (q3, s3, t3, np.where(split, ef, 0.0)),
                                    (np.inf, np.inf), concrete, _SPLIT_PIECE)
                (lr, la), rel = _tighter_log_delta((lr, la), rel, (lr3, la3),
                                                   np.full(rel.shape, np.inf))
            exits, q4, s4, t4 = _one_exit_runs(qf, sf, tf, (rel > TOLERANCE) & (ef > 0)
                                               & np.isfinite(ef))
            if exits.any():
                lr4, la4, rel4 = _on_runs(_one_exit.log_delta, exits,
                                          (q4, s4, t4, np.where(exits, ef, 1.0)),
                                          (np.inf, np.inf, np.inf), concrete)
                (lr, la), rel = _tighter_log_delta((lr, la), rel, (lr4, la4), rel4)
        none = xp.all((qf == 0) | (tf == 0), axis=-1) | (ef == np.inf)
        d_prof = xp.exp(xp.maximum(lr, la))
        use_rdp = ~(d_prof < d_rdp) & ~none
        tiny = jnp.finfo(dtype).tiny
        d = xp.where(none, 0.0, xp.where(use_rdp, d_rdp, xp.maximum(d_prof, tiny)))
        res = ProfileDelta(d, xp.exp(lr), xp.exp(la), rel, d_rdp,
                           xp.where(none, PROFILE_OK, _status(use_rdp, rel, xp)))
        return ProfileDelta(*(jnp.asarray(v.reshape(shape)) for v in res))


def epsilon_schedule(q, sigma, steps, delta, *, tier: int | None = None) -> ProfileEpsilon:
    """ε(δ) of a schedule of SGM segments composed (add-or-remove, tight).

    Args:
      q: per-segment sampling rates in ``[0, 1]``, shape ``(..., S)`` (last axis: segments).
      sigma: per-segment noise multipliers ``> 0``, broadcastable with ``q``.
      steps: per-segment integer step counts ``≥ 0``, broadcastable with ``q``.
      delta: target δ in ``[0, 1]``, shape broadcastable with ``(...)``.
      tier: index into :data:`TIERS` to run for every run; default: escalate tier by tier
        where needed (concrete inputs) or tier 1 (under a transformation).

    Returns:
      :class:`ProfileEpsilon` of the broadcast batch shape (``.epsilon`` verified: the
      bounded profile δ there is at most ``delta``, or the RDP ε).

    Raises:
      ValueError: with concrete inputs, naming an invalid argument.
    """
    return _epsilon_schedule(q, sigma, steps, delta, tier, None)


def _epsilon_schedule(q, sigma, steps, delta, tier, epsilon_rdp):
    """:func:`epsilon_schedule`, with the runs' RDP ε given (``epsilon_rdp``) or computed."""
    dtype, ctx = _prepare(q, sigma, steps, delta)
    if _validate.is_concrete(delta):
        _validate.check_range("delta", delta, low=0.0, high=1.0)
    concrete = _validate.is_concrete(q, sigma, steps, delta)
    xp = _namespace(concrete)
    with ctx:
        (qf, sf, tf), df, shape = _flatten(q, sigma, steps, delta, dtype, xp)
        positive = xp.where(df > 0, df, 1e-300)
        if epsilon_rdp is None:
            e_rdp = _rdp_companion("epsilon", qf, sf, tf, positive, concrete)
        else:
            e_rdp = xp.broadcast_to(xp.asarray(epsilon_rdp, dtype), shape).reshape(-1)
        e_rdp = xp.where(df > 0, xp.broadcast_to(xp.asarray(e_rdp, dtype), df.shape), np.inf)
        one, q1, s1 = _single_step(qf, sf, tf, xp)
        two, q2, s2 = _two_step_runs(qf, sf, tf, xp)
        two = two & (e_rdp > 0) & (e_rdp < np.inf) if concrete else two
        bracket = None
        if concrete and two.any():
            e2, rel2, ok2 = _on_runs(functools.partial(_two_steps.epsilon, tolerance=TOLERANCE),
                                     two,
                                     (q2, s2, np.log(positive), np.where(two, e_rdp, 1.0)),
                                     (np.inf, np.inf, False), concrete, _TWO_STEP_PIECE)
            bracket = (np.where(ok2, e2, np.inf), np.where(ok2, rel2, np.inf))
        settled = two & (bracket[1] <= TOLERANCE) if bracket is not None else False
        chunk = _epsilon_value_chunk if concrete else _epsilon_chunk
        e_prof, rel = _evaluate_rest(chunk, (qf, sf, tf, xp.log(positive), e_rdp),
                                     _merge_epsilon, tier, concrete, one | settled,
                                     (np.inf, np.inf),
                                     _closed_form_only(q, sigma, steps, dtype))
        usable = one & (e_rdp > 0) & (e_rdp < np.inf)
        e1, rel1, ok1 = (xp.asarray(v) for v in _on_runs(
            _one_step_epsilon, usable, (q1, s1, xp.log(positive), xp.where(usable, e_rdp, 1.0)),
            (np.inf, np.inf, False), concrete))
        closed = usable & ok1
        e_prof = xp.where(closed, e1, e_prof)
        rel = xp.where(closed, rel1, rel)
        if bracket is not None:
            e_prof, rel = _tighter_epsilon(e_prof, rel, *bracket)
        if concrete:
            split, q3, s3, t3 = _split_runs(qf, sf, tf, ~(rel < 1.0) & (df > 0)
                                            & (e_rdp > 0) & (e_rdp < np.inf))
            if split.any():
                (e3,) = _on_runs(_split_epsilon, split,
                                 (q3, s3, t3, np.log(positive)), (np.inf,), concrete,
                                 _SPLIT_PIECE)
                e_prof, rel = _tighter_epsilon(e_prof, rel, e3, np.full(rel.shape, np.inf))
            exits, q4, s4, t4 = _one_exit_runs(qf, sf, tf, (rel > TOLERANCE) & (df > 0)
                                               & (e_rdp > 0) & (e_rdp < np.inf))
            sound = np.where(e_prof > 0, np.minimum(e_prof, e_rdp), e_rdp)
            if exits.any():  # searched only where the bracket meets δ at the sound ε already
                up4, _, _ = _on_runs(_one_exit.log_delta, exits,
                                     (q4, s4, t4, np.where(exits, sound, 1.0)),
                                     (np.inf, np.inf, np.inf), concrete)
                exits = exits & (up4 <= np.log(positive))
            if exits.any():
                e4, rel4, ok4 = _on_runs(
                    _one_exit.epsilon, exits,
                    (q4, s4, t4, np.log(positive), np.where(exits, sound, 1.0)),
                    (np.inf, np.inf, False), concrete)
                e_prof, rel = _tighter_epsilon(e_prof, rel, np.where(ok4, e4, np.inf),
                                               np.where(ok4, rel4, np.inf))
        use_rdp = ~(e_prof < e_rdp)
        # ε = 0 by RDP (nothing sampled, or δ ≥ 1, or noise that large) and ε = ∞ at δ = 0
        # are exact, whichever accountant says so
        exact = (e_rdp == 0) | (df == 0)
        res = ProfileEpsilon(xp.where(use_rdp, e_rdp, e_prof), e_rdp,
                             xp.where(exact, PROFILE_OK, _status(use_rdp, rel, xp)))
        return ProfileEpsilon(*(jnp.asarray(v.reshape(shape)) for v in res))


def epsilon_core(q, sigma, steps, delta):
    """ε(δ) of single-segment runs for internal callers (no checks), flat ``(n,)`` arrays.

    Traceable (one tier, :data:`TIERS` ``[1]``): the calibrators of :mod:`jaxrdp.sweep`
    search over it (``accountant="profile"``).
    """
    return epsilon_schedule(q[:, None], sigma[:, None], steps[:, None], delta, tier=1).epsilon


def epsilon_beside_rdp(q, sigma, steps, delta, epsilon_rdp) -> ProfileEpsilon:
    """:func:`epsilon` for a caller that already holds the runs' RDP ε (the command line).

    Not public. ``epsilon_rdp`` must be a sound RDP ε of the same runs at the same δ (e.g.
    from :func:`jaxrdp.conversions.epsilon`): it bounds the search and is the fallback
    returned where the profile cannot beat it. Saves tracing the shared-order RDP program
    (about 1 s in a fresh process).
    """
    q, sigma, steps = _segments(q, sigma, steps)
    return _epsilon_schedule(q, sigma, steps, delta, None, epsilon_rdp)


def _segments(*args):
    """Scalars or arrays → arrays with a trailing segment axis of length 1."""
    return (v[..., None] for v in (a if isinstance(a, (jax.Array, jax.core.Tracer))
                                   else np.asarray(a) for a in args))


def delta(q, sigma, steps, epsilon, *, tier: int | None = None) -> ProfileDelta:
    """Tight δ(ε) of ``steps`` SGM steps; all four arguments broadcast (NumPy rules).

    Args:
      q: sampling rate in ``[0, 1]``.
      sigma: noise multiplier ``> 0``.
      steps: integer number of steps ``≥ 0`` (may be traced; it only enters arithmetically).
      epsilon: ε ≥ 0.
      tier: as in :func:`delta_schedule`.

    Returns:
      :class:`ProfileDelta` (``.delta`` is never below the true δ; see the module docstring).

    Raises:
      ValueError: with concrete inputs, naming an invalid argument.
    """
    return delta_schedule(*_segments(q, sigma, steps), epsilon, tier=tier)


def epsilon(q, sigma, steps, delta, *, tier: int | None = None) -> ProfileEpsilon:
    """Tight ε(δ) of ``steps`` SGM steps; all four arguments broadcast (NumPy rules).

    Args:
      q: sampling rate in ``[0, 1]``.
      sigma: noise multiplier ``> 0``.
      steps: integer number of steps ``≥ 0`` (may be traced; it only enters arithmetically).
      delta: target δ in ``[0, 1]``.
      tier: as in :func:`epsilon_schedule`.

    Returns:
      :class:`ProfileEpsilon` (``.epsilon`` is never below the true ε).

    Raises:
      ValueError: with concrete inputs, naming an invalid argument.
    """
    return epsilon_schedule(*_segments(q, sigma, steps), delta, tier=tier)
