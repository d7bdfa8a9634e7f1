"""The ``tabloader`` command line.

Example:
    >>> main(["--help"])  # doctest: +SKIP
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from typing import Sequence


def _positive_int(text: str) -> int:
    try:
        value = int(float(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tabloader", description=(__doc__ or "The tabloader command line.").splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="generate synthetic Criteo-like data and run the pipeline on it")
    demo.add_argument("--rows", type=_positive_int, default=1_000_000, help="rows to generate (default 1M)")
    demo.add_argument("--files", type=_positive_int, default=4, help="parquet files to write")
    demo.add_argument("--workdir", default=None, help="where to write data (default: a temporary directory)")
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument("--quiet", action="store_true", help="no progress bars")

    synth = sub.add_parser("synth", help="write a synthetic dataset as parquet")
    synth.add_argument("kind", choices=["criteo", "movielens"])
    synth.add_argument("path")
    synth.add_argument("--rows", type=_positive_int, default=1_000_000)
    synth.add_argument("--files", type=_positive_int, default=1)
    synth.add_argument("--seed", type=int, default=0)
    synth.add_argument("--overwrite", action="store_true")

    inspect = sub.add_parser("inspect", help="print a dataset's schema and size")
    inspect.add_argument("path")
    return parser


def cmd_synth(args: argparse.Namespace) -> None:
    from tabloader import synthetic

    write = synthetic.write_criteo if args.kind == "criteo" else synthetic.write_movielens
    start = time.perf_counter()
    write(args.path, args.rows, num_files=args.files, seed=args.seed, overwrite=args.overwrite)
    print(f"wrote {args.rows:,} {args.kind} rows in {args.files} file(s) to {args.path} "
          f"in {time.perf_counter() - start:.1f} s")


def cmd_inspect(args: argparse.Namespace) -> None:
    from tabloader import Dataset

    describe(Dataset(args.path))


def describe(dataset) -> None:
    print(f"{dataset}\nrows: {dataset.num_rows:,}  partitions: {dataset.npartitions}")
    width = max(len(c.name) for c in dataset.schema)
    for col in dataset.schema:
        kind = f"list<{col.dtype}>" if col.is_list else col.dtype
        props = ", ".join(f"{k}={v}" for k, v in col.properties.items())
        print(f"  {col.name:<{width}}  {kind:<10} {','.join(sorted(col.tags)):<24} {props}")


def cmd_demo(args: argparse.Namespace) -> None:
    from tabloader import Dataset, synthetic

    workdir = args.workdir or tempfile.mkdtemp(prefix="tabloader-demo-")
    raw = os.path.join(workdir, "raw")
    start = time.perf_counter()
    synthetic.write_criteo(raw, args.rows, num_files=args.files, seed=args.seed, overwrite=True)
    elapsed = time.perf_counter() - start
    print(f"generated {args.rows:,} synthetic Criteo rows in {elapsed:.1f} s "
          f"({args.rows / elapsed:,.0f} rows/s) -> {raw}")
    describe(Dataset(raw))


COMMANDS = {"demo": cmd_demo, "synth": cmd_synth, "inspect": cmd_inspect}


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        COMMANDS[args.command](args)
    except (FileNotFoundError, FileExistsError, ValueError, TypeError) as exc:
        print(f"tabloader {args.command}: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
