"""The ``liptable`` command line: ``report``, ``generate``, ``bench``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _report(args: argparse.Namespace) -> int:
    from derive import report

    written = report.write(Path(args.out), args.modules)
    for path in written:
        print(path)
    return 0


def _generate(args: argparse.Namespace) -> int:
    from derive import generate

    if args.check:
        stale = [p for p, text in generate.generated_files().items() if p.read_text() != text]
        for path in stale:
            print(f"stale: {path}")
        return 1 if stale else 0
    for path in generate.write_all():
        print(path)
    return 0


def _bench(args: argparse.Namespace) -> int:
    from derive import bench

    bench.main(args.n)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="liptable",
        description="Derive, prove and test the Jacobians and Lipschitz constants of "
        "deep-learning modules.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    report = commands.add_parser("report", help="write report/index.md and report/claims.json")
    report.add_argument("--out", default="report", help="output folder (default: report/)")
    report.add_argument("--modules", nargs="+", help="only these modules (default: all)")
    report.set_defaults(run=_report)
    generate = commands.add_parser("generate", help="regenerate kernels/_generated/")
    generate.add_argument("--check", action="store_true", help="only report stale files")
    generate.set_defaults(run=_generate)
    bench = commands.add_parser("bench", help="time the kernels against NumPy")
    bench.add_argument("--n", type=int, default=10**7, help="elements (default: 10^7)")
    bench.set_defaults(run=_bench)
    args = parser.parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
