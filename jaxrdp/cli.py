"""The ``jaxrdp`` command line: ε of a DP-SGD run, calibration, and sweeps.

Every subcommand prints human-readable text by default and one JSON object with
``--json``. Bad input (negative σ, δ ∉ (0, 1), q > 1, an unparsable range, ...) exits with
status 2 and a one-line message, without a traceback; a target that cannot be met exits
with status 1.

Examples::

    jaxrdp epsilon --dataset-size 60000 --batch-size 256 --epochs 15 --noise-multiplier 1.1
    jaxrdp epsilon --q 0.01 --noise-multiplier 1.1 --steps 10000 --delta 1e-5
    jaxrdp calibrate --epsilon 3 --dataset-size 60000 --batch-size 256 --epochs 15
    jaxrdp steps --epsilon 3 --dataset-size 60000 --batch-size 256 --noise-multiplier 1.1
    jaxrdp batch-size --epsilon 3 --dataset-size 60000 --epochs 15 --noise-multiplier 1.1
    jaxrdp sweep --q 1e-4:1e-1:40log --noise-multiplier 0.8:10:40 --steps 10000 --delta 1e-5
    jaxrdp rdp --q 0.01 --noise-multiplier 1.1
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import os
import sys

import numpy as np

__all__ = ["main", "parse_range", "run"]


class UsageError(Exception):
    """Bad input: reported in one line, exit status 2."""


class TargetError(Exception):
    """A target that cannot be met: reported in one line, exit status 1."""


# --------------------------------------------------------------------------- parsing


def parse_range(text: str) -> np.ndarray:
    """Parse a value list or range from the command line.

    Accepted forms: ``"0.1"`` (one value), ``"0.1,0.2,0.5"`` (a list), ``"a:b:n"`` (``n``
    values evenly spaced from ``a`` to ``b``) and ``"a:b:nlog"`` (``n`` values evenly
    spaced in log scale; ``a, b > 0``).

    Args:
      text: the argument as typed.

    Returns:
      A 1-D float64 array.

    Raises:
      UsageError: the text is not one of the forms above.
    """
    try:
        if ":" in text:
            parts = text.split(":")
            if len(parts) != 3:
                raise ValueError
            lo, hi, count = float(parts[0]), float(parts[1]), parts[2].strip().lower()
            log = count.endswith("log")
            n = int(count[:-3] if log else count)
            if n < 1 or not (math.isfinite(lo) and math.isfinite(hi)):
                raise ValueError
            if log:
                if lo <= 0 or hi <= 0:
                    raise UsageError(f"log range needs positive ends: {text!r}")
                return np.geomspace(lo, hi, n)
            return np.linspace(lo, hi, n)
        values = np.array([float(v) for v in text.split(",")], dtype=np.float64)
        if values.size == 0 or not np.all(np.isfinite(values)):
            raise ValueError
        return values
    except UsageError:
        raise
    except ValueError:
        raise UsageError(
            f"cannot parse {text!r}: expected a number, a list 'a,b,c', a range 'a:b:n' "
            "or a log range 'a:b:nlog'"
        ) from None


def _positive_int(name, value):
    if value is None:
        return None
    if value != int(value) or value < 1:
        raise UsageError(f"--{name} must be a positive integer; got {value!r}")
    return int(value)


class _RunShape:
    """The run being accounted: sampling rate, steps and a default δ."""

    def __init__(self, args, *, need_steps=True, need_sigma=False):
        self.dataset_size = _positive_int("dataset-size", getattr(args, "dataset_size", None))
        batch = _positive_int("batch-size", getattr(args, "batch_size", None))
        epochs = getattr(args, "epochs", None)
        self.q = getattr(args, "q", None)
        self.steps = getattr(args, "steps", None)
        if self.dataset_size is not None and batch is not None:
            if self.q is not None:
                raise UsageError("give either --q or --dataset-size with --batch-size, not both")
            if batch > self.dataset_size:
                raise UsageError("--batch-size cannot exceed --dataset-size")
            self.q = batch / self.dataset_size
            if need_steps and self.steps is None:
                if epochs is None:
                    raise UsageError("give --epochs (or --steps) with --dataset-size/--batch-size")
                if epochs <= 0:
                    raise UsageError(f"--epochs must be positive; got {epochs!r}")
                self.steps = math.ceil(epochs * self.dataset_size / batch)
        if self.q is None:
            raise UsageError("give --q, or --dataset-size with --batch-size")
        if need_steps and self.steps is None:
            raise UsageError("give --steps, or --epochs with --dataset-size/--batch-size")
        if self.steps is not None:
            self.steps = _positive_int("steps", self.steps)
        self.batch_size = batch

    def delta(self, args):
        if args.delta is not None:
            return args.delta
        if self.dataset_size is None:
            raise UsageError("give --delta (the default 1/N² needs --dataset-size)")
        return 1.0 / self.dataset_size**2


def _call(fn, *args, **kwargs):
    """Run a library call, turning its ValueErrors into one-line usage errors."""
    try:
        return fn(*args, **kwargs)
    except ValueError as err:  # includes sweep.CalibrationError
        from jaxrdp import sweep

        if isinstance(err, sweep.CalibrationError):
            raise TargetError(str(err)) from None
        raise UsageError(str(err)) from None


# -------------------------------------------------------------------------- commands


def _run_fields(run, delta, args) -> dict:
    """The run a result is about: δ, q, σ (when given) and the number of steps."""
    out = {"delta": delta, "q": run.q}
    if getattr(args, "noise_multiplier", None) is not None:
        out["noise_multiplier"] = args.noise_multiplier
    if run.steps is not None:
        out["steps"] = run.steps
    return out


def _cmd_epsilon(args) -> dict:
    from jaxrdp import conversions

    run = _RunShape(args)
    delta = run.delta(args)
    # One ε per process: the program that compiles fastest (= jaxrdp.epsilon to 1e-13).
    eps, order = _call(conversions.epsilon_once, run.q, args.noise_multiplier, run.steps, delta)
    out = {"epsilon": float(eps), "order": float(order), **_run_fields(run, delta, args)}
    if not args.rdp_only:
        from jaxrdp import profile

        tight = _call(profile.epsilon_beside_rdp, run.q, args.noise_multiplier, run.steps,
                      delta, eps)
        out["epsilon_profile"] = float(tight.epsilon)
        out["profile_status"] = _PROFILE_STATUS[int(tight.status)]
    return out


#: how the profile's per-element status reads on the command line.
_PROFILE_STATUS = ("tight", "bounded", "rdp fallback")


def _show_epsilon(r: dict) -> str:
    order = f"(best Rényi order α = {r['order']:g})"
    if "epsilon_profile" in r:
        text = (f"ε = {r['epsilon_profile']:.6g} by the exact privacy profile "
                f"({r['profile_status']})\n"
                f"ε = {r['epsilon']:.6g} by RDP {order}\nat δ = {r['delta']:.3g}\n")
    else:
        text = f"ε = {r['epsilon']:.6g}  {order} at δ = {r['delta']:.3g}\n"
    return text + f"DP-SGD: q = {r['q']:.6g}, σ = {r['noise_multiplier']:g}, {r['steps']} steps"


def _cmd_calibrate(args) -> dict:
    from jaxrdp import sweep

    run = _RunShape(args)
    delta = run.delta(args)
    result = _call(sweep.noise_multiplier, args.epsilon, delta, run.q, run.steps,
                   accountant=args.accountant)
    sigma = _call(result.unwrap)
    return {
        "accountant": args.accountant,
        "noise_multiplier": float(sigma),
        "target_epsilon": args.epsilon,
        **_run_fields(run, delta, args),
    }


def _show_calibrate(r: dict) -> str:
    return (
        f"noise multiplier σ = {r['noise_multiplier']:.6g} meets ε ≤ {r['target_epsilon']:g} "
        f"at δ = {r['delta']:.3g} ({_ACCOUNTANT_TEXT[r['accountant']]})\nDP-SGD: q = {r['q']:.6g}, {r['steps']} steps"
    )


#: the accountant a calibration was made against, as the command line says it.
_ACCOUNTANT_TEXT = {"rdp": "by RDP", "profile": "by the exact privacy profile"}


def _add_accountant(p) -> None:
    p.add_argument(
        "--accountant", choices=("rdp", "profile"), default="rdp",
        help="calibrate against RDP (default) or the exact privacy profile (tighter, slower)",
    )


def _cmd_steps(args) -> dict:
    from jaxrdp import sweep

    run = _RunShape(args, need_steps=False)
    delta = run.delta(args)
    result = _call(sweep.max_steps, args.epsilon, delta, run.q, args.noise_multiplier,
                   accountant=args.accountant)
    steps = int(_call(result.unwrap))
    out = {"accountant": args.accountant, "steps": steps, "target_epsilon": args.epsilon, **_run_fields(run, delta, args)}
    if run.batch_size is not None:
        out["epochs"] = steps * run.batch_size / run.dataset_size
    return out


def _show_steps(r: dict) -> str:
    text = (
        f"at most {r['steps']} steps meet ε ≤ {r['target_epsilon']:g} at δ = {r['delta']:.3g} "
        f"({_ACCOUNTANT_TEXT[r['accountant']]})\n"
        f"DP-SGD: q = {r['q']:.6g}, σ = {r['noise_multiplier']:g}"
    )
    if "epochs" in r:
        text += f"  ({r['epochs']:.4g} epochs)"
    return text


def _cmd_batch_size(args) -> dict:
    from jaxrdp import sweep

    n = _positive_int("dataset-size", args.dataset_size)
    if args.epochs <= 0:
        raise UsageError(f"--epochs must be positive; got {args.epochs!r}")
    delta = args.delta if args.delta is not None else 1.0 / n**2
    result = _call(
        sweep.batch_size, args.epsilon, delta, args.noise_multiplier, args.epochs, n,
        accountant=args.accountant,
    )
    batch = int(_call(result.unwrap))
    return {
        "accountant": args.accountant,
        "batch_size": batch,
        "q": batch / n,
        "steps": math.ceil(args.epochs * n / batch),
        "target_epsilon": args.epsilon,
        "delta": delta,
        "noise_multiplier": args.noise_multiplier,
        "epochs": args.epochs,
        "dataset_size": n,
    }


def _show_batch_size(r: dict) -> str:
    return (
        f"largest batch size B = {r['batch_size']} meets ε ≤ {r['target_epsilon']:g} at "
        f"δ = {r['delta']:.3g} ({_ACCOUNTANT_TEXT[r['accountant']]})\n"
        f"DP-SGD: N = {r['dataset_size']}, q = {r['q']:.6g}, "
        f"σ = {r['noise_multiplier']:g}, {r['epochs']:g} epochs = {r['steps']} steps"
    )


def _cmd_sweep(args) -> dict:
    from jaxrdp import sweep

    q = parse_range(args.q)
    steps = parse_range(args.steps)
    if np.any(steps != np.round(steps)) or np.any(steps < 1):
        raise UsageError(f"--steps must be positive integers; got {args.steps!r}")
    rows = []
    if args.target_epsilon is not None:
        targets = parse_range(args.target_epsilon)
        tq, ts, te = np.meshgrid(q, steps, targets, indexing="ij")
        result = _call(sweep.noise_multiplier, te, args.delta, tq, ts)
        sigma = np.asarray(result.value)
        status = np.asarray(result.status)
        for idx in np.ndindex(sigma.shape):
            rows.append(
                {
                    "q": tq[idx],
                    "steps": int(ts[idx]),
                    "delta": args.delta,
                    "target_epsilon": te[idx],
                    "noise_multiplier": float(sigma[idx]),
                    "status": sweep.Status(int(status[idx])).name,
                }
            )
        kind = "noise_multiplier"
    else:
        if args.noise_multiplier is None:
            raise UsageError("give --noise-multiplier RANGE (ε sweep) or --target-epsilon (σ* sweep)")
        sigma = parse_range(args.noise_multiplier)
        eps = np.asarray(_call(sweep.epsilon_grid, q, sigma, steps, np.array([args.delta])))
        eps = eps.reshape(q.size, sigma.size, steps.size)
        for i, j, k in np.ndindex(eps.shape):
            rows.append(
                {
                    "q": q[i],
                    "noise_multiplier": sigma[j],
                    "steps": int(steps[k]),
                    "delta": args.delta,
                    "epsilon": float(eps[i, j, k]),
                }
            )
        kind = "epsilon"
        if args.plot:
            _plot_heatmap(args.plot, q, sigma, eps[:, :, 0], steps[0], args.delta)
    if args.out:
        with open(args.out, "w", newline="") as fh:
            _write_csv(fh, rows)
    return {"kind": kind, "rows": rows, "out": args.out, "plot": args.plot}


def _write_csv(fh, rows):
    writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)


def _show_sweep(r: dict) -> str:
    if r["out"]:
        text = f"wrote {len(r['rows'])} rows ({r['kind']}) to {r['out']}"
    else:
        buf = io.StringIO()
        _write_csv(buf, r["rows"])
        text = buf.getvalue().rstrip("\n")
    if r["plot"]:
        text += f"\nheatmap saved to {r['plot']}"
    return text


def _plot_heatmap(path, q, sigma, eps, steps, delta):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise UsageError("--plot needs matplotlib (pip install matplotlib)") from None
    fig, ax = plt.subplots(figsize=(6, 4.5))
    mesh = ax.pcolormesh(sigma, q, np.log10(eps), shading="nearest", cmap="viridis")
    ax.set_yscale("log" if q.min() > 0 and q.max() / q.min() > 20 else "linear")
    ax.set_xlabel("noise multiplier σ")
    ax.set_ylabel("sampling rate q")
    ax.set_title(f"log₁₀ ε after {int(steps)} steps, δ = {delta:g}")
    fig.colorbar(mesh, ax=ax, label="log₁₀ ε")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _cmd_rdp(args) -> dict:
    import jaxrdp

    orders = jaxrdp.DEFAULT_ORDERS if args.orders is None else parse_range(args.orders)
    values = np.asarray(_call(jaxrdp.rdp, args.q, args.noise_multiplier, orders))
    return {
        "q": args.q,
        "noise_multiplier": args.noise_multiplier,
        "orders": orders.tolist(),
        "rdp": values.tolist(),
    }


def _show_rdp(r: dict) -> str:
    lines = [
        f"per-step RDP of the Sampled Gaussian Mechanism, q = {r['q']:g}, "
        f"σ = {r['noise_multiplier']:g}",
        f"{'order α':>10s}  {'RDP ε(α)':>14s}",
    ]
    lines += [f"{a:10g}  {v:14.6e}" for a, v in zip(r["orders"], r["rdp"])]
    return "\n".join(lines)


# --------------------------------------------------------------------------- parser


class _Parser(argparse.ArgumentParser):
    """argparse, but usage errors are one line and exit with status 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def _add_common(p, *, sigma=True, sigma_required=True, target=False, steps=True, shape=True):
    if target:
        p.add_argument("--epsilon", type=float, required=True, help="target ε")
    if shape:
        p.add_argument("--q", type=float, help="sampling rate (or use --dataset-size/--batch-size)")
        p.add_argument("--dataset-size", type=int, help="N, number of training records")
        p.add_argument("--batch-size", type=int, help="expected batch size B (q = B/N)")
        p.add_argument("--epochs", type=float, help="epochs (steps = ⌈epochs·N/B⌉)")
    if steps:
        p.add_argument("--steps", type=int, help="number of DP-SGD steps")
    if sigma:
        p.add_argument(
            "--noise-multiplier", "--sigma", type=float, required=sigma_required,
            help="noise multiplier σ",
        )
    p.add_argument("--delta", type=float, help="δ (default 1/N² when --dataset-size is given)")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="jaxrdp",
        description="Exact Rényi-DP accounting of DP-SGD (the Sampled Gaussian Mechanism).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="run 'jaxrdp COMMAND --help' for an example of each command",
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    def command(name, help_text, example, run, show):
        p = sub.add_parser(
            name, help=help_text, description=help_text, epilog=f"example:\n  {example}",
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        p.set_defaults(run=run, show=show)
        return p

    p = command(
        "epsilon", "ε of a DP-SGD run",
        "jaxrdp epsilon --dataset-size 60000 --batch-size 256 --epochs 15 --noise-multiplier 1.1",
        _cmd_epsilon, _show_epsilon,
    )
    _add_common(p)
    p.add_argument(
        "--rdp-only", action="store_true",
        help="only the RDP ε, without the tight ε of the exact privacy profile "
        "(jaxrdp.profile) beside it: about 0.3 s shorter per run, 2.4 s on a first run",
    )
    p.add_argument("--profile", action="store_true", help=argparse.SUPPRESS)  # the default now
    p = command(
        "calibrate", "the smallest noise multiplier meeting a target (ε, δ)",
        "jaxrdp calibrate --epsilon 3 --dataset-size 60000 --batch-size 256 --epochs 15",
        _cmd_calibrate, _show_calibrate,
    )
    _add_common(p, sigma=False, target=True)
    _add_accountant(p)
    p = command(
        "steps", "the largest number of steps (and epochs) meeting a target (ε, δ)",
        "jaxrdp steps --epsilon 3 --dataset-size 60000 --batch-size 256 --noise-multiplier 1.1",
        _cmd_steps, _show_steps,
    )
    _add_common(p, target=True, steps=False)
    _add_accountant(p)
    p = command(
        "batch-size", "the largest batch size meeting a target (ε, δ) over some epochs",
        "jaxrdp batch-size --epsilon 3 --dataset-size 60000 --epochs 15 --noise-multiplier 1.1",
        _cmd_batch_size, _show_batch_size,
    )
    p.add_argument("--epsilon", type=float, required=True, help="target ε")
    p.add_argument("--dataset-size", type=int, required=True, help="N, number of records")
    p.add_argument("--epochs", type=float, required=True, help="number of epochs")
    p.add_argument("--noise-multiplier", "--sigma", type=float, required=True, help="σ")
    p.add_argument("--delta", type=float, help="δ (default 1/N²)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    _add_accountant(p)
    p = command(
        "sweep", "ε (or the calibrated σ*) over ranges of q, σ and steps, as CSV",
        "jaxrdp sweep --q 1e-4:1e-1:40log --noise-multiplier 0.8:10:40 --steps 10000 "
        "--delta 1e-5 --out eps.csv --plot eps.png",
        _cmd_sweep, _show_sweep,
    )
    p.add_argument("--q", required=True, help="sampling rates: a, a,b,c, a:b:n or a:b:nlog")
    p.add_argument("--noise-multiplier", "--sigma", help="noise multipliers (range)")
    p.add_argument("--steps", required=True, help="step counts (range)")
    p.add_argument("--delta", type=float, required=True, help="δ")
    p.add_argument("--target-epsilon", help="calibrate σ* for these ε instead of computing ε")
    p.add_argument("--out", help="CSV file to write (default: print the CSV)")
    p.add_argument("--plot", help="PNG heatmap of ε over (q, σ) at the first step count")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p = command(
        "rdp", "per-step RDP of the Sampled Gaussian Mechanism at the default orders",
        "jaxrdp rdp --q 0.01 --noise-multiplier 1.1", _cmd_rdp, _show_rdp,
    )
    p.add_argument("--q", type=float, required=True, help="sampling rate in [0, 1]")
    p.add_argument("--noise-multiplier", "--sigma", type=float, required=True, help="σ ≥ 0")
    p.add_argument("--orders", help="Rényi orders (default: DEFAULT_ORDERS), e.g. 2:64:63")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    return parser


#: Set to 1 to keep the command line from using its persistent compilation cache.
NO_CACHE_VARIABLE = "JAXRDP_NO_COMPILATION_CACHE"


def _cache_directory() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "jaxrdp", "xla")


def _enable_compilation_cache() -> None:
    """Point JAX's persistent compilation cache at the user's cache directory.

    The kernels take a few seconds to compile and a command runs them once, so from the
    second run on the compiled programs are read back instead (about 3× shorter runs).
    Left alone when the user configured JAX's cache (``JAX_COMPILATION_CACHE_DIR`` or
    ``jax.config``) or switched it off (``JAX_ENABLE_COMPILATION_CACHE=false``), when
    :data:`NO_CACHE_VARIABLE` is set to a non-empty value other than ``0``, or when the
    directory cannot be created. Programs are cached however fast they compiled, unless
    ``JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS`` says otherwise. Beside it, the traced
    programs themselves are kept (:mod:`jaxrdp._program_cache`): a later run then skips
    tracing them too. Only the command line does this; importing :mod:`jaxrdp` changes no
    JAX setting.
    """
    if os.environ.get(NO_CACHE_VARIABLE, "0") not in ("", "0"):
        return
    import jax

    if os.environ.get("JAX_COMPILATION_CACHE_DIR") or jax.config.jax_compilation_cache_dir:
        return
    if not jax.config.jax_enable_compilation_cache:
        return
    directory = _cache_directory()
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError:
        return
    jax.config.update("jax_compilation_cache_dir", directory)
    if "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS" not in os.environ:
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    from jaxrdp import _program_cache

    _program_cache.enable(os.path.join(os.path.dirname(directory), "programs"))


def main(argv=None) -> int:
    """Entry point of the ``jaxrdp`` console script.

    Args:
      argv: command-line arguments without the program name (default ``sys.argv[1:]``).

    Returns:
      The exit status: 0 on success, 1 when a target cannot be met, 2 on bad input
      (a one-line message on stderr in both error cases).
    """
    parser = _parser()
    args = parser.parse_args(argv)
    _enable_compilation_cache()
    try:
        result = args.run(args)
    except UsageError as err:
        print(f"jaxrdp {args.command}: error: {err}", file=sys.stderr)
        return 2
    except TargetError as err:
        print(f"jaxrdp {args.command}: {err}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(result, default=float))
    else:
        print(args.show(result))
    return 0


def run() -> None:
    """Entry point of the ``jaxrdp`` program (console script and ``python -m jaxrdp``).

    Runs :func:`main` on ``sys.argv``, flushes the output and ends the process with its
    exit status at once, skipping the interpreter's teardown of JAX and XLA: about 0.2 s of
    CPU time, a sixth of a whole ``jaxrdp epsilon`` run. Nothing is left to do by then: the
    compilation cache is written when a program is compiled, and output files are closed.
    Exceptions other than the usage and target errors that :func:`main` reports (and
    ``SystemExit``, e.g. from ``--help``) propagate as usual.
    """
    status = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


if __name__ == "__main__":
    run()
