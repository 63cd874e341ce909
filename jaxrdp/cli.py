"""The ``jaxrdp`` command line.

Subcommands print human-readable text by default and one JSON object with ``--json``.
Bad input exits with status 2 and a one-line message (no traceback).
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

__all__ = ["main"]


class _UsageError(Exception):
    """A user error: reported in one line, exit status 2."""


def _cmd_rdp(args) -> dict:
    import jaxrdp

    orders = jaxrdp.DEFAULT_ORDERS if args.orders is None else np.asarray(args.orders, float)
    try:
        values = np.asarray(jaxrdp.rdp(args.q, args.sigma, orders))
    except ValueError as err:
        raise _UsageError(str(err)) from None
    return {
        "q": args.q,
        "sigma": args.sigma,
        "orders": orders.tolist(),
        "rdp": values.tolist(),
    }


def _print_rdp(result: dict) -> None:
    print(f"Per-step RDP of the Sampled Gaussian Mechanism, q={result['q']:g}, σ={result['sigma']:g}")
    print(f"{'order α':>10s}  {'RDP ε(α)':>14s}")
    for a, r in zip(result["orders"], result["rdp"]):
        print(f"{a:10g}  {r:14.6e}")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="jaxrdp",
        description="Rényi-DP accounting of the Sampled Gaussian Mechanism (DP-SGD).",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser(
        "rdp",
        help="per-step RDP of the SGM at the default orders",
        description="Per-step RDP of the Sampled Gaussian Mechanism.",
        epilog="example: jaxrdp rdp --q 0.01 --sigma 1.1",
    )
    p.add_argument("--q", type=float, required=True, help="sampling rate in [0, 1]")
    p.add_argument("--sigma", type=float, required=True, help="noise multiplier σ ≥ 0")
    p.add_argument("--orders", type=float, nargs="+", help="Rényi orders (default: DEFAULT_ORDERS)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(run=_cmd_rdp, show=_print_rdp)
    return parser


def main(argv=None) -> int:
    """Entry point of the ``jaxrdp`` console script.

    Args:
      argv: command-line arguments without the program name (default ``sys.argv[1:]``).

    Returns:
      The exit status: 0 on success, 2 on bad input (a one-line message on stderr).
    """
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        result = args.run(args)
    except _UsageError as err:
        print(f"jaxrdp {args.command}: error: {err}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result))
    else:
        args.show(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
