"""``python -m bench [suite ...] [--quick] [--no-save]``: run suites, print tables, save JSON."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench import SUITES, load_suite
from bench.chart import write_chart
from bench.timing import RESULTS_DIR, Options, Result, format_table, today, write_results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("suites", nargs="*", metavar="suite", help=f"suites to run (default: all of {sorted(SUITES)})")
    parser.add_argument("--quick", action="store_true", help="fewer rounds: a smoke run, not numbers to quote")
    parser.add_argument("--no-save", action="store_true", help="print only, write no JSON")
    parser.add_argument("--output-dir", type=Path, default=RESULTS_DIR, help="where the JSON results go")
    parser.add_argument(
        "--threads",
        type=_threads,
        default=1,
        help="torch CPU threads for the measurements: a count (default 1), or 'default' for torch's own "
        "choice on this machine, which is what a user's script runs at",
    )
    parser.add_argument("--list", action="store_true", help="list the registered suites and exit")
    args = parser.parse_args(argv)

    if args.list:
        print("\n".join(sorted(SUITES)))
        return 0
    names = args.suites or list(SUITES)
    unknown = [name for name in names if name not in SUITES]
    if unknown:
        parser.error(f"unknown suite(s) {', '.join(unknown)}; choose from {', '.join(sorted(SUITES))}")

    if args.threads < 1:
        parser.error("--threads must be at least 1")
    options = Options(quick=args.quick, threads=args.threads)
    missed = []
    everything: dict[str, list[Result]] = {}
    for name in names:
        print(f"== {name}", flush=True)
        results = load_suite(name)(options)
        everything[name] = results
        print(format_table(results), flush=True)
        missed += [f"{name}: {r.name} ({r.variant})" for r in results if r.meets_target is False]
        if not args.no_save:
            print(f"saved {write_results(name, results, args.output_dir)}", flush=True)
    if not args.no_save and len(names) > 1:
        print(f"saved {write_results('', [r for rs in everything.values() for r in rs], args.output_dir)}")
        chart = write_chart(everything, args.output_dir / f"{today()}.png")
        print(f"saved {chart}" if chart else "no chart: nothing to draw, or matplotlib is not installed", flush=True)
    if missed:
        print("over target: " + "; ".join(missed), file=sys.stderr)
    return 0


def _threads(text: str) -> int:
    if text == "default":
        import torch

        return torch.get_num_threads()  # read before any suite sets it: torch's choice for this machine
    return int(text)


if __name__ == "__main__":
    sys.exit(main())
