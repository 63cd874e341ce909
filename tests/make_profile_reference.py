"""Generate tests/data/profile_reference.csv and tests/data/profile_epsilon_reference.csv.

    PYTHONPATH=. python tests/make_profile_reference.py            # all rows (slow: minutes)
    PYTHONPATH=. python tests/make_profile_reference.py --quick    # closed forms only

The references come from tests/profile_reference.py (mpmath only, no jaxrdp). Not run by CI;
the CSVs are frozen. Each row records the method used and a conservative estimate of its
correct significant digits (see the header written into each file).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import mpmath as mp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import profile_reference as pr  # noqa: E402

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
OUT_DELTA = os.path.join(DATA, "profile_reference.csv")
OUT_EPS = os.path.join(DATA, "profile_epsilon_reference.csv")

# (q, sigma, steps, epsilon)
GAUSSIAN = [
    (1.0, 1.0, 1, 1e-4),
    (1.0, 1.0, 1, 1.0),
    (1.0, 0.3, 1, 10.0),
    (1.0, 0.5, 10, 50.0),
    (1.0, 2.0, 100, 2.0),
    (1.0, 10.0, 1000, 0.5),
    (1.0, 30.0, 2000, 1.24),
    (1.0, 100.0, 100000, 1.0),
    (1.0, 1e4, 100000, 1e-4),
    (1.0, 5.0, 3, 0.01),
]
SINGLE = [
    (1e-8, 0.3, 1, 1e-4),
    (1e-8, 0.3, 1, 5.0),
    (1e-6, 0.5, 1, 1.0),
    (1e-4, 0.3, 1, 20.0),
    (1e-3, 1.0, 1, 1e-4),
    (1e-3, 1.0, 1, 0.5),
    (0.0107, 1.97, 1, 0.1),
    (0.01, 0.8, 1, 0.5),
    (0.3, 2.0, 1, 0.1),
    (0.5, 1.0, 1, 0.3),
    (0.5, 1.0, 1, 3.0),
    (0.9, 0.5, 1, 50.0),
    (0.1, 1e4, 1, 1e-4),
    (256 / 50000, 1.0, 1, 1.24),
]
CONVOLUTION = [
    (0.0107, 1.97, 2, 0.02),
    (0.0107, 1.97, 3, 0.03),
    (0.0107, 1.97, 3, 0.1),
    (0.1, 1.0, 2, 0.5),
    (0.1, 1.0, 3, 1.0),
    (0.5, 0.5, 2, 5.0),
    (0.5, 0.5, 3, 10.0),
    (1e-3, 0.7, 3, 1.0),
    (1e-3, 0.7, 3, 1e-4),
    (0.3, 3.0, 3, 0.2),
    # σ in the hundreds, q·T ≈ 3e-4: the loss is confined near 1e-7 per step
    (9.152e-05, 814.6, 3, 3.695e-07),
]

LINE = [
    (256 / 50000, 1.0, 2000, 1.24),
    (256 / 50000, 1.0, 2000, 0.5),
    (4096 / 50000, 3.0, 875, 3.6),
    (0.01, 1.0, 10, 1.0),
    (0.1, 2.0, 10, 0.5),
    (0.01, 0.3, 10, 5.0),
    (1e-3, 0.8, 1000, 0.3),
    (0.02, 5.0, 100000, 1.0),
    (0.104, 1.005, 416, 21.623326),
    (0.5, 1e4, 100000, 1e-4),
    # few sampled steps in the far tail (q·T = 4.2, ε far above the mean loss): the RDP
    # fallback until the narrow strips of the discretisation bound
    (0.018541290513885245, 4.317246075107874, 226, 1.0),
    # ε far out, δ ≈ 1.3e-7: for δ = 1.29983e-7 dp_accounting's optimistic PLD (discretisation
    # 1e-4) returns ε = 757.256, above the truth (≈ 756.807), although its own δ(ε) is below
    # that δ from ε ≈ 756.4 on: its ε inversion is no lower bound there
    (0.09173922246558067, 0.4956472862098304, 10000, 756.8),
]
# (q, sigma, steps, delta, bracket)
EPSILON = [
    (1.0, 1.0, 1, 1e-5, (1.0, 10.0)),
    (1.0, 5.0, 1000, 1e-10, (10.0, 200.0)),
    (0.01, 0.8, 1, 1e-6, (1e-3, 5.0)),
    (0.5, 1.0, 1, 1e-8, (1.0, 20.0)),
    (0.1, 1.0, 2, 1e-5, (0.1, 5.0)),
    (256 / 50000, 1.0, 2000, 1e-5, (1.2, 1.3)),
]


def _fmt(x, n=20):
    return mp.nstr(x, n, min_fixed=1, max_fixed=0) if x != 0 else "0"


def _row(q, sigma, steps, eps, method):
    with mp.workdps(40):
        if method == "closed_gaussian":
            d = pr.gaussian_delta(eps, sigma, steps)
            rem, add, digits = d, d, 30
        elif method == "closed_single":
            rem = pr.single_step_delta(q, sigma, eps, "remove")
            add = pr.single_step_delta(q, sigma, eps, "add")
            digits = 30
        elif method == "line_integral":
            # u-step from the alias bound scaled by 1/3, checked against the step halved
            # (the Poisson aliases then shrink by orders of magnitude): digits = agreement.
            rem = pr.line_integral_delta(q, sigma, steps, eps, "remove", dps=25)
            add = pr.line_integral_delta(q, sigma, steps, eps, "add", dps=25)
            rem2 = pr.line_integral_delta(q, sigma, steps, eps, "remove", dps=25, h_scale=1 / 6)
            add2 = pr.line_integral_delta(q, sigma, steps, eps, "add", dps=25, h_scale=1 / 6)
            digits = 20
            for v, w in ((rem, rem2), (add, add2)):
                if v is None or w is None:
                    raise RuntimeError("line integral did not converge")
                if v != w and v != 0:
                    digits = min(digits, int(-mp.log10(abs(v - w) / abs(v))) - 1)
            rem, add = rem2, add2
        elif method == "nested_quad":
            rem = pr.nested_quad_delta(q, sigma, steps, eps, "remove")
            add = pr.nested_quad_delta(q, sigma, steps, eps, "add")
            d = max(rem, add)
            digits = 10 if d >= 1e-6 else (6 if d >= 1e-12 else 2)
        else:
            raise ValueError(method)
        return [repr(float(q)), repr(float(sigma)), str(int(steps)), repr(float(eps)),
                _fmt(rem), _fmt(add), _fmt(max(rem, add)), method, str(digits)]


HEADER = """\
# Exact privacy profile δ(ε) of the Sampled Gaussian Mechanism (add-or-remove, sensitivity 1).
# Generated by: PYTHONPATH=. python tests/make_profile_reference.py (mpmath only, no jaxrdp).
# Columns: q, sigma, steps (T), epsilon; delta_remove = E_P[(1-e^(eps-L_T))_+] with
#   P=(1-q)N(0,s^2)+qN(1,s^2), Q=N(0,s^2); delta_add the same with P and Q swapped;
#   delta = max(delta_remove, delta_add); method; digits = estimated correct significant digits.
# Methods: closed_gaussian (q=1 exact Gaussian, 60-digit arithmetic);
#   closed_single (T=1 closed form in normal tails, 60-digit arithmetic);
#   nested_quad (T=2,3: T=1 closed form in double-precision normal tails averaged over the other
#     steps by adaptive scipy quadrature, rel. tolerance 1e-12; see profile_reference.nested_quad_delta;
#     digits 10 where delta >= 1e-6, 6 down to 1e-12, 2 below (cancellation));
#   line_integral (inverse Laplace transform along Re z = c at the saddle point, 25-digit target,
#     see profile_reference.line_integral_delta; digits from the agreement of the u-trapezoid at
#     step h and h/2; value reported is the h/2 one. Rows appended with --part line).
# Values are printed with 20 significant digits; trust only `digits` of them.
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="closed forms only")
    ap.add_argument("--part", choices=("all", "delta", "epsilon", "line"), default="all")
    ap.add_argument("--rows", default=None, help="comma-separated indices into LINE (with --part line)")
    args = ap.parse_args()
    if args.part == "epsilon":
        return _epsilons(args)
    if args.part == "line":
        idx = [int(i) for i in args.rows.split(",")] if args.rows else range(len(LINE))
        for i in idx:
            q, sigma, steps, eps = LINE[i]
            t0 = time.time()
            try:
                row = _row(q, sigma, steps, eps, "line_integral")
            except RuntimeError as e:
                print("SKIPPED", LINE[i], e, flush=True)
                continue
            print(",".join(row), f"({time.time() - t0:.1f}s)", flush=True)
        return None
    rows = []
    plan = [(c, "closed_gaussian") for c in GAUSSIAN] + [(c, "closed_single") for c in SINGLE]
    if not args.quick:
        plan += [(c, "nested_quad") for c in CONVOLUTION]
        plan += [(c, "line_integral") for c in LINE]
    for (q, sigma, steps, eps), method in plan:
        t0 = time.time()
        try:
            rows.append(_row(q, sigma, steps, eps, method))
        except RuntimeError as e:
            print("SKIPPED", q, sigma, steps, eps, method, e, flush=True)
            continue
        print(",".join(rows[-1]), f"({time.time() - t0:.1f}s)", flush=True)
        _write(rows)
    if args.part == "all":
        _epsilons(args)


def _epsilons(args):
    erows = []
    for q, sigma, steps, delta, bracket in EPSILON if not args.quick else []:
        t0 = time.time()
        with mp.workdps(40):
            e = pr.epsilon_for_delta(q, sigma, steps, delta, dps=25, bracket=bracket)
            d, m = pr.profile_delta(q, sigma, steps, e, "both", 25)
        erows.append([repr(float(q)), repr(float(sigma)), str(int(steps)), repr(float(delta)),
                      _fmt(e, 16), _fmt(d, 16), m])
        print(",".join(erows[-1]), f"({time.time() - t0:.1f}s)", flush=True)
        _write_eps(erows)


EPS_HEADER = """\
# epsilon(delta) of the SGM privacy profile (add-or-remove, sensitivity 1): the epsilon at which
# max(delta_remove, delta_add) equals delta (see profile_reference.csv for the definitions).
# Generated by: PYTHONPATH=. python tests/make_profile_reference.py (mpmath only, no jaxrdp).
# Columns: q, sigma, steps, delta (target); epsilon (root by Illinois regula falsi, relative bracket
# width <= 1e-13, upper end reported so delta_at_epsilon <= delta); delta_at_epsilon; method of delta.
# Accuracy: epsilon to ~12 significant digits (closed-form methods), limited by the bracket width.
"""


def _write(rows):
    with open(OUT_DELTA, "w") as f:
        f.write(HEADER)
        f.write("q,sigma,steps,epsilon,delta_remove,delta_add,delta,method,digits\n")
        for r in rows:
            f.write(",".join(r) + "\n")


def _write_eps(rows):
    with open(OUT_EPS, "w") as f:
        f.write(EPS_HEADER)
        f.write("q,sigma,steps,delta,epsilon,delta_at_epsilon,method\n")
        for r in rows:
            f.write(",".join(r) + "\n")


if __name__ == "__main__":
    main()
