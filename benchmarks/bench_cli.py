"""Latency of one run: one ``jaxrdp.epsilon`` call, and the README's main command as a process.

Run from the repository root::

    python benchmarks/bench_cli.py               # 5 processes of each kind
    python benchmarks/bench_cli.py --repeats 9
    python benchmarks/bench_cli.py --no-process  # the in-process call only

First, in this process: one ``jaxrdp.epsilon(256/60000, 1.1, 3516, 1e-5)`` call after
compilation (Python floats, float64), best and median of 200 calls, each waited for.

Then it times whole processes, start-up included (interpreter, imports, tracing, compilation or
reading the compiled program back, the evaluation, printing):

* ``jaxrdp epsilon --dataset-size 60000 --batch-size 256 --epochs 15 --noise-multiplier 1.1``,
  which prints the tight ε (exact privacy profile) beside the RDP ε, with an **empty** cache
  (a fresh ``XDG_CACHE_HOME`` for every repetition: what a new user's first call costs) and
  with a **warm** one (every later call);
* the same command with ``--rdp-only`` (RDP alone), empty and warm;
* dp_accounting in a fresh ``python -c``: the same RDP ε (``RdpAccountant``), and the RDP ε
  plus the tight ε of its ``PLDAccountant`` (pessimistic, value discretisation 1e-4), the
  like-for-like process for each form of the command;
* ``python -c "import jax, jax.numpy"``: the floor of any JAX process.

Each process is timed by the wall clock and by the CPU time the operating system charges
it (user + system, the reaped child's ``os.times``); on a machine shared with other work the CPU time
is the steadier figure. Prints min and median of each and the ratios of the medians to
the like-for-like dp_accounting process. The ε are checked: RDP to agree with
dp_accounting's to 1e-9 (jaxrdp evaluates the same integer orders exactly, and its extra
orders can only lower ε), the profile's to lie at or below PLD's pessimistic ε and within
1e-4 of it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

CLI_ARGS = ["epsilon", "--dataset-size", "60000", "--batch-size", "256", "--epochs", "15",
            "--noise-multiplier", "1.1", "--json"]
DP_ACCOUNTING_SCRIPT = """
import logging
logging.getLogger("absl").setLevel(logging.ERROR)
import dp_accounting
from dp_accounting.rdp import rdp_privacy_accountant as r
acc = r.RdpAccountant()
q, steps = 256 / 60000, -(-15 * 60000 // 256)
acc.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(1.1)), steps)
print(repr(float(acc.get_epsilon(1 / 60000**2))))
"""
DP_ACCOUNTING_PLD_SCRIPT = DP_ACCOUNTING_SCRIPT + """
from dp_accounting.pld import pld_privacy_accountant as p
pld = p.PLDAccountant(value_discretization_interval=1e-4)
pld.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(1.1)), steps)
print(repr(float(pld.get_epsilon(1 / 60000**2))))
"""
JAX_FLOOR_SCRIPT = "import jax, jax.numpy"


def _clean_env(cache_home: str) -> dict:
    """The user's environment without JAX cache settings, caching into ``cache_home``, with
    the jaxrdp this script imports first on the path (the processes run elsewhere)."""
    import jaxrdp

    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("JAX_COMPILATION", "JAX_PERSISTENT_CACHE"))}
    source = os.path.dirname(os.path.dirname(os.path.abspath(jaxrdp.__file__)))
    env["PYTHONPATH"] = os.pathsep.join([source, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.pop("JAXRDP_NO_COMPILATION_CACHE", None)
    env.pop("JAX_ENABLE_COMPILATION_CACHE", None)
    env["XDG_CACHE_HOME"] = cache_home
    return env


def _run(argv, env) -> tuple[float, float, str]:
    """``(wall seconds, CPU seconds, stdout)`` of one whole process."""
    before = os.times()
    start = time.perf_counter()
    # Run outside the repository: ``python -m`` puts the working directory on the path.
    proc = subprocess.run(argv, env=env, capture_output=True, text=True,
                          cwd=os.path.dirname(env["XDG_CACHE_HOME"]))
    wall = time.perf_counter() - start
    after = os.times()
    if proc.returncode != 0:
        raise RuntimeError(f"{argv} failed ({proc.returncode}): {proc.stderr}")
    cpu = (after.children_user - before.children_user) + (
        after.children_system - before.children_system)
    return wall, cpu, proc.stdout


def _summary(label, runs, reference=None) -> str:
    walls, cpus = [r[0] for r in runs], [r[1] for r in runs]
    text = (f"  {label:34s} wall {min(walls):5.2f} / {statistics.median(walls):5.2f} s   "
            f"cpu {min(cpus):5.2f} / {statistics.median(cpus):5.2f} s")
    if reference is not None:
        ref_wall = statistics.median([r[0] for r in reference])
        ref_cpu = statistics.median([r[1] for r in reference])
        text += (f"   ×{statistics.median(walls) / ref_wall:4.2f} wall, "
                 f"×{statistics.median(cpus) / ref_cpu:4.2f} cpu")
    return text


def _latency(calls: int = 200) -> None:
    import jax

    import jaxrdp

    run = (256 / 60000, 1.1, 3516, 1e-5)
    expected = float(jaxrdp.epsilon(*run)[0])  # compiles
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        jax.block_until_ready(jaxrdp.epsilon(*run)[0])
        times.append(time.perf_counter() - start)
    assert float(jaxrdp.epsilon(*run)[0]) == expected
    print(f"jax {jax.__version__}, {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} CPUs")
    print(f"one jaxrdp.epsilon call (q = 256/60000, σ = 1.1, 3516 steps, δ = 1e-5), "
          f"{calls} calls: best {min(times) * 1e3:.3f} ms, median "
          f"{statistics.median(times) * 1e3:.3f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="processes of each kind")
    parser.add_argument("--no-process", action="store_true", help="skip the processes")
    args = parser.parse_args()
    _latency()
    if args.no_process:
        return

    root = tempfile.mkdtemp(prefix="jaxrdp-bench-cli-")
    both = [sys.executable, "-m", "jaxrdp", *CLI_ARGS]
    rdp_only = both + ["--rdp-only"]
    kinds = {k: [] for k in ("first", "warm", "first_rdp", "warm_rdp", "theirs", "theirs_pld",
                             "floor")}
    try:
        warm_env = _clean_env(os.path.join(root, "warm"))
        _run(both, warm_env)  # fills the warm cache (both programs)
        # Interleaved, so that a change of the machine's load touches every kind alike.
        for i in range(args.repeats):
            kinds["first"].append(_run(both, _clean_env(os.path.join(root, f"empty{i}"))))
            kinds["warm"].append(_run(both, warm_env))
            kinds["first_rdp"].append(
                _run(rdp_only, _clean_env(os.path.join(root, f"empty_rdp{i}"))))
            kinds["warm_rdp"].append(_run(rdp_only, warm_env))
            kinds["theirs"].append(_run([sys.executable, "-c", DP_ACCOUNTING_SCRIPT], warm_env))
            kinds["theirs_pld"].append(
                _run([sys.executable, "-c", DP_ACCOUNTING_PLD_SCRIPT], warm_env))
            kinds["floor"].append(_run([sys.executable, "-c", JAX_FLOOR_SCRIPT], warm_env))
    finally:
        shutil.rmtree(root, ignore_errors=True)

    results = [json.loads(r[2]) for k in ("first", "warm", "first_rdp", "warm_rdp")
               for r in kinds[k]]
    ours = results[-1]["epsilon"]
    tight = json.loads(kinds["warm"][-1][2])["epsilon_profile"]
    assert all(r["epsilon"] == ours for r in results), "ε changed"
    assert all(json.loads(r[2])["epsilon_profile"] == tight
               for r in kinds["first"] + kinds["warm"]), "profile ε changed"
    reference = float(kinds["theirs"][-1][2])
    assert ours <= reference * (1 + 1e-9), (ours, reference)
    assert abs(ours / reference - 1) < 1e-9, (ours, reference)
    pld = float(kinds["theirs_pld"][-1][2].split()[-1])
    assert tight <= pld and pld - tight < 1e-4 * pld, (tight, pld)

    print(f"{args.repeats} processes of each kind, min / median; ratios of medians to "
          "the like-for-like dp_accounting process")
    print(f"RDP ε: jaxrdp {ours!r}, dp_accounting {reference!r}")
    print(f"tight ε: jaxrdp profile {tight!r}, dp_accounting PLD (pessimistic) {pld!r}")
    theirs, theirs_pld = kinds["theirs"], kinds["theirs_pld"]
    print(_summary("jaxrdp epsilon, empty cache", kinds["first"], theirs_pld))
    print(_summary("jaxrdp epsilon, warm cache", kinds["warm"], theirs_pld))
    print(_summary("dp_accounting RDP + PLD", theirs_pld))
    print(_summary("jaxrdp epsilon --rdp-only, empty", kinds["first_rdp"], theirs))
    print(_summary("jaxrdp epsilon --rdp-only, warm", kinds["warm_rdp"], theirs))
    print(_summary("dp_accounting RDP", theirs))
    print(_summary("floor: python -c 'import jax'", kinds["floor"], theirs))


if __name__ == "__main__":
    main()
