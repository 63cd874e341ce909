"""First-call latency of the profile's calibrators: the compilation a fresh process pays.

    PYTHONPATH=. python benchmarks/bench_first_calls.py

Each calibrator of :mod:`jaxrdp.sweep` with ``accountant="profile"`` (``refine=False``: the
compiled search alone; ``batch_size`` has no refinement) and :func:`jaxrdp.profile.epsilon` of one run are called in a fresh
Python process (empty compilation cache), twice: the first call includes tracing and XLA's
compilation, the second is the same call on the compiled programs. Every answer is checked
in the same process against the traceable profile ε the search uses (``tier=1``): the value
returned meets the target and the next one (σ·(1 − 1e-3), T + 1, q·(1 + 1e-3), B + 1)
does not, or, for ``profile.epsilon``, lies below the RDP ε.
"""

import json
import subprocess
import sys

CASE = dict(target=1.89, delta=1e-5, q=0.001244, sigma=0.606078, steps=752)

CALLS = {
    "profile.epsilon (one run)": "profile.epsilon(q, sigma, steps, delta)",
    "sweep.noise_multiplier": "sweep.noise_multiplier(target, delta, q, steps, **kw)",
    "sweep.max_steps": "sweep.max_steps(target, delta, q, sigma, **kw)",
    "sweep.sampling_rate": "sweep.sampling_rate(target, delta, sigma, steps, **kw)",
    "sweep.batch_size": "sweep.batch_size(target, delta, sigma, 1.0, 50000, accountant='profile')",
}

CHILD = r"""
import json, sys, time, warnings
warnings.filterwarnings("ignore")
t0 = time.perf_counter()
from jaxrdp import profile, sweep
t_import = time.perf_counter() - t0
globals().update(json.loads(sys.argv[1]))
kw = dict(accountant="profile", refine=False)
t0 = time.perf_counter(); res = eval(sys.argv[2]); first = time.perf_counter() - t0
t0 = time.perf_counter(); res = eval(sys.argv[2]); second = time.perf_counter() - t0

def eps(qq, ss, tt):
    return float(profile.epsilon(qq, ss, tt, delta, tier=1).epsilon)

name = sys.argv[3]
if name.startswith("profile"):
    ok = float(res.epsilon) < float(res.epsilon_rdp)
    value = float(res.epsilon)
else:
    value = float(res.value)
    ok = int(res.status) == int(sweep.Status.OK)
    if name.endswith("noise_multiplier"):
        ok &= eps(q, value, steps) <= target < eps(q, value * (1 - 1e-3), steps)
    elif name.endswith("max_steps"):
        ok &= eps(q, sigma, value) <= target < eps(q, sigma, value + 1)
    elif name.endswith("sampling_rate"):
        ok &= eps(value, sigma, steps) <= target < eps(value * (1 + 1e-3), sigma, steps)
    else:
        b = value
        ok &= eps(b / 50000, sigma, -(-50000 // b)) <= target
        ok &= eps((b + 1) / 50000, sigma, -(-50000 // (b + 1))) > target
print(json.dumps(dict(first=first, second=second, value=value, ok=bool(ok), imp=t_import)))
"""


def main():
    print(f"case: ε = {CASE['target']}, δ = {CASE['delta']}, q = {CASE['q']}, σ = {CASE['sigma']},"
          f" T = {CASE['steps']} (one target; batch size over N = 50 000, 1 epoch)")
    print(f"{'call':28s} {'first call':>11s} {'second':>9s}  value        checked")
    for name, expr in CALLS.items():
        out = subprocess.run([sys.executable, "-c", CHILD, json.dumps(CASE), expr, name],
                             capture_output=True, text=True, check=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"{name:28s} {r['first']:10.1f}s {r['second'] * 1e3:7.1f}ms  {r['value']:<12.6g} "
              f"{'ok' if r['ok'] else 'FAILED'}")


if __name__ == "__main__":
    main()
