"""``python -m bench [suite ...] [--quick] [--no-save]``: run suites, print tables, save JSON."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench import SUITES, load_suite
from bench.timing import RESULTS_DIR, Options, format_table, write_results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("suites", nargs="*", metavar="suite", help=f"suites to run (default: all of {sorted(SUITES)})")
    parser.add_argument("--quick", action="store_true", help="fewer rounds: a smoke run, not numbers to quote")
    parser.add_argument("--no-save", action="store_true", help="print only, write no JSON")
    parser.add_argument("--output-dir", type=Path, default=RESULTS_DIR, help="where the JSON results go")
    parser.add_argument("--list", action="store_true", help="list the registered suites and exit")
    args = parser.parse_args(argv)

    if args.list:
        print("\n".join(sorted(SUITES)))
        return 0
    names = args.suites or list(SUITES)
    unknown = [name for name in names if name not in SUITES]
    if unknown:
        parser.error(f"unknown suite(s) {', '.join(unknown)}; choose from {', '.join(sorted(SUITES))}")

    options = Options(quick=args.quick)
    missed = []
    for name in names:
        print(f"== {name}", flush=True)
        results = load_suite(name)(options)
        print(format_table(results), flush=True)
        missed += [f"{name}: {r.name} ({r.variant})" for r in results if r.meets_target is False]
        if not args.no_save:
            print(f"saved {write_results(name, results, args.output_dir)}", flush=True)
    if missed:
        print("over target: " + "; ".join(missed), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
