"""Latency of one run: one ``jaxrdp.epsilon`` call, and the README's main command as a process.

Run from the repository root::

    python benchmarks/bench_cli.py               # 5 processes of each kind
    python benchmarks/bench_cli.py --repeats 9
    python benchmarks/bench_cli.py --no-process  # the in-process call only

First, in this process: one ``jaxrdp.epsilon(256/60000, 1.1, 3516, 1e-5)`` call after
compilation (Python floats, float64), best and median of 200 calls, each waited for.

Then it times whole processes, start-up included (interpreter, imports, tracing, compilation or
reading the compiled program back, the evaluation, printing):

* ``jaxrdp epsilon --dataset-size 60000 --batch-size 256 --epochs 15 --noise-multiplier 1.1``
  with an **empty** compilation cache (a fresh ``XDG_CACHE_HOME`` for every repetition:
  what a new user's first call costs);
* the same command with a **warm** cache (every later call);
* the same ε with dp_accounting's ``RdpAccountant`` in a fresh ``python -c``;
* ``python -c "import jax, jax.numpy"``: the floor of any JAX process.

Each process is timed by the wall clock and by the CPU time the operating system charges
it (user + system, the reaped child's ``os.times``); on a machine shared with other work the CPU time
is the steadier figure. Prints min and median of each and the ratios of the medians to
dp_accounting's. Both programs' ε are checked to agree (to 1e-9: jaxrdp evaluates the
same integer orders exactly, and its extra orders can only lower ε).
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
    cli = [sys.executable, "-m", "jaxrdp", *CLI_ARGS]
    first, warm, theirs, floor = [], [], [], []
    try:
        warm_env = _clean_env(os.path.join(root, "warm"))
        _run(cli, warm_env)  # fills the warm cache
        # Interleaved, so that a change of the machine's load touches every kind alike.
        for i in range(args.repeats):
            first.append(_run(cli, _clean_env(os.path.join(root, f"empty{i}"))))
            warm.append(_run(cli, warm_env))
            theirs.append(_run([sys.executable, "-c", DP_ACCOUNTING_SCRIPT], warm_env))
            floor.append(_run([sys.executable, "-c", JAX_FLOOR_SCRIPT], warm_env))
    finally:
        shutil.rmtree(root, ignore_errors=True)

    ours = json.loads(warm[-1][2])["epsilon"]
    assert all(json.loads(r[2])["epsilon"] == ours for r in first + warm), "ε changed"
    reference = float(theirs[-1][2])
    assert ours <= reference * (1 + 1e-9), (ours, reference)
    assert abs(ours / reference - 1) < 1e-9, (ours, reference)

    print(f"{args.repeats} processes of each kind, min / median; ratios of medians to "
          "dp_accounting's")
    print(f"ε: jaxrdp {ours!r}, dp_accounting {reference!r}")
    print(_summary("jaxrdp, empty compilation cache", first, theirs))
    print(_summary("jaxrdp, warm compilation cache", warm, theirs))
    print(_summary("dp_accounting, fresh Python", theirs))
    print(_summary("floor: python -c 'import jax'", floor, theirs))


if __name__ == "__main__":
    main()
