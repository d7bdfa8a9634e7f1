"""The ``tabloader`` command line: demo, synth, fit, transform, inspect, bench.

Examples::

    tabloader demo --rows 200000                      # the end-to-end demo (make demo)
    tabloader synth criteo raw/ --rows 1e6 --files 4  # synthetic data as parquet
    tabloader fit spec.yaml raw/ wf/                  # fit a workflow, save it
    tabloader transform wf/ raw/ out/ --output-files 4 --shuffle
    tabloader inspect wf/                             # a saved workflow's schema and statistics
    tabloader inspect out/                            # a dataset's schema
    tabloader bench loader -- --rows 100000           # benchmarks/loader.py with arguments

Exit codes: 0 success, 2 bad arguments or a user error (missing file, bad spec, missing
column), 1 any other failure, 130 Ctrl-C, 143 SIGTERM (both remove the temporary of a write
in progress), 141 stdout closed early (``| head``).
"""

from __future__ import annotations

import argparse
import contextlib
import decimal
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from tabloader.spec import SPEC_HELP, load_workflow_spec

_LARGEST = 2**63 - 1  # numpy's int64: the largest count or seed the commands can use
_SIGNALED = 128  # a shell reports a command that signal N ended as exit code 128 + N

TRUST_HELP = ("import MODULE (a dotted name; repeat for several) and trust the functions defined in it; "
              "operators it registers on import can be loaded. Nothing is imported or trusted otherwise")


def _whole_number(minimum: int) -> Callable[[str], int]:
    """An argparse type: a whole number >= ``minimum``, written ``1000000``, ``1_000_000`` or
    ``1e6``; ``1.5``, ``inf`` and ``nan`` are refused (argparse names the option)."""

    def parse(text: str) -> int:
        try:
            number = decimal.Decimal(text)  # exact, unlike float: 1e6 is whole, 1.5 is not
        except decimal.InvalidOperation:
            number = None
        if number is None or not number.is_finite() or number != number.to_integral_value():
            raise argparse.ArgumentTypeError(f"expected a whole number such as 1000 or 1e6, got {text!r}")
        if number < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {text}")
        if number > _LARGEST:
            raise argparse.ArgumentTypeError(f"must be <= {_LARGEST} (2**63 - 1), got {text}")
        return int(number)

    return parse


_positive_int = _whole_number(minimum=1)
_seed = _whole_number(minimum=0)  # numpy's generators take no negative seeds


def _threads(text: str) -> int:
    """An argparse type: a thread count, at most the CPUs here (torch would try to start any number)."""
    count, cpus = _positive_int(text), os.cpu_count() or 1
    if count > cpus:
        raise argparse.ArgumentTypeError(f"must be <= {cpus} (the CPUs of this machine), got {text}")
    return count


def _device(text: str) -> str:
    """An argparse type: auto, cpu, cuda or cuda:N."""
    if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", text):
        raise argparse.ArgumentTypeError(f"expected auto, cpu, cuda or cuda:N, got {text!r}")
    return text


class CommandError(Exception):
    """A user error in a command: printed as one line, exit code 2."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tabloader", description=(__doc__ or "").splitlines()[0],
                                     epilog="Run `tabloader COMMAND --help` for a command's options.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = sub.add_parser("demo", help="synthetic Criteo-like data -> fit -> transform -> train a DLRM -> AUC",
                          description="Generate synthetic Criteo-like data, fit and apply the Criteo workflow, "
                                      "train a small DLRM for one epoch through tabloader.torch.Loader and "
                                      "report each stage's time and the validation AUC.")
    demo.add_argument("--rows", type=_positive_int, default=1_000_000,
                      help="rows to generate, train + validation (default 1M)")
    demo.add_argument("--device", type=_device, default="auto", help="auto (CUDA when available), cpu, cuda or cuda:N")
    demo.add_argument("--workdir", default=None, help="keep the data here (default: a temporary directory)")
    demo.add_argument("--seed", type=_seed, default=0)
    demo.add_argument("--batch-size", type=_positive_int, default=4096)
    demo.add_argument("--epochs", type=_positive_int, default=1)
    demo.add_argument("--threads", type=_threads, default=None, help="torch threads (default: the cores less one, for the loader)")
    demo.add_argument("--quiet", action="store_true", help="no progress bars, only the report")

    synth = sub.add_parser("synth", help="write a synthetic dataset as parquet")
    synth.add_argument("kind", choices=["criteo", "movielens"])
    synth.add_argument("path")
    synth.add_argument("--rows", type=_positive_int, default=1_000_000)
    synth.add_argument("--files", type=_positive_int, default=1)
    synth.add_argument("--seed", type=_seed, default=0)
    synth.add_argument("--overwrite", action="store_true")

    fit = sub.add_parser("fit", help="fit a workflow (YAML or Python spec) on a dataset and save it",
                         description="Fit a workflow on DATA and save it to OUT.", epilog=SPEC_HELP,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    fit.add_argument("spec", metavar="WORKFLOW_SPEC", help="a .yaml/.yml/.json or .py file (see below)")
    fit.add_argument("data", metavar="DATA", help="parquet/CSV file, directory or glob")
    fit.add_argument("out", metavar="OUT", help="directory to save the fitted workflow to")
    _filter_argument(fit)
    fit.add_argument("--overwrite", action="store_true", help="replace OUT if it exists")
    fit.add_argument("--quiet", action="store_true", help="no progress bars")

    transform = sub.add_parser("transform", help="apply a saved workflow to a dataset, write parquet")
    transform.add_argument("workflow", metavar="WORKFLOW_DIR", help="a directory written by `tabloader fit`")
    transform.add_argument("data", metavar="DATA", help="parquet/CSV file, directory or glob")
    transform.add_argument("out", metavar="OUT", help="output directory")
    _filter_argument(transform)
    transform.add_argument("--output-files", type=_positive_int, default=None,
                           help="number of parquet files (default: one per partition)")
    transform.add_argument("--shuffle", action="store_true", help="shuffle rows within partitions and the files")
    transform.add_argument("--seed", type=_seed, default=None, help="seed of --shuffle")
    transform.add_argument("--overwrite", action="store_true", help="replace OUT if it exists")
    transform.add_argument("--quiet", action="store_true", help="no progress bars")
    transform.add_argument("--trust", action="append", default=[], metavar="MODULE", help=TRUST_HELP)

    inspect = sub.add_parser("inspect", help="print a dataset's or a saved workflow's schema and statistics")
    inspect.add_argument("path", help="a dataset (file, directory, glob) or a saved workflow directory")
    inspect.add_argument("--trust", action="append", default=[], metavar="MODULE",
                         help="import MODULE first, so that the operators it registers can be described "
                              "(functions are never run by inspect)")

    bench = sub.add_parser("bench", help="run the benchmarks/ scripts and print their tables",
                           description="Run benchmarks/NAME.py (all of them by default) from the source "
                                       "checkout; arguments after `--` are passed to every script.")
    bench.add_argument("names", nargs="*", metavar="NAME", help="benchmarks to run (default: all)")
    bench.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    return parser


def cmd_demo(args: argparse.Namespace) -> None:
    from tabloader.demo import MIN_ROWS, format_report, run_demo

    if args.rows < MIN_ROWS:
        raise CommandError(f"--rows must be >= {MIN_ROWS} for the demo's train/validation split, got {args.rows}")
    if not args.quiet:
        print(f"tabloader demo: {args.rows:,} rows (progress on stderr; --quiet to hide it)", file=sys.stderr)
    report = run_demo(rows=args.rows, device=args.device, workdir=args.workdir, seed=args.seed, quiet=args.quiet,
                      batch_size=args.batch_size, epochs=args.epochs, threads=args.threads)
    print(format_report(report))


def cmd_synth(args: argparse.Namespace) -> None:
    from tabloader import synthetic

    write = synthetic.write_criteo if args.kind == "criteo" else synthetic.write_movielens
    start = time.perf_counter()
    write(args.path, args.rows, num_files=args.files, seed=args.seed, overwrite=args.overwrite)
    print(f"wrote {args.rows:,} {args.kind} rows in {args.files} file(s) to {args.path} "
          f"in {time.perf_counter() - start:.1f} s")


def _filter_argument(command: argparse.ArgumentParser) -> None:
    command.add_argument("--filter", nargs=3, action="append", default=None, metavar=("KEY", "OP", "VALUE"),
                         dest="filters", help="read only the files whose hive key KEY (a key=value folder) passes OP "
                         "VALUE, e.g. --filter dt '>=' 2024-12-01 (ops: == != < <= > >= in 'not in'; in takes "
                         "VALUE,VALUE,...); repeated: all must hold. A key typed as text (month=07) compares "
                         "with values as its folders spell them")
    command.add_argument("--partition-type", nargs=2, action="append", default=None, metavar=("KEY", "TYPE"),
                         dest="partition_types", help="the type of a hive key instead of the one inferred from its "
                         "folders (string, int32, int64, float64, date32, timestamp[us], bool); repeatable")


def filters_of(args: argparse.Namespace) -> list | None:
    """The ``--filter KEY OP VALUE`` options as ``Dataset(filters=...)`` takes them (values as
    text: the key's type reads them; ``in`` lists split at commas). A number spelled plainly is a
    number for an ordering (``<`` ...), so that a key typed as text refuses it rather than compare
    ``"10" < "7"`` as text; ``07`` stays the folder's text."""
    if not args.filters:
        return None
    return [(key, op, value.split(",") if op in ("in", "not in") else
             _plain_number(value) if op in ("<", "<=", ">", ">=") else value) for key, op, value in args.filters]


def _plain_number(text: str) -> Any:
    """``text`` as an int or float where it is one's own spelling (``7``, ``-2``, ``0.5``), else text."""
    for kind in (int, float):
        try:
            number = kind(text)
        except ValueError:
            continue
        return number if str(number) == text else text
    return text


def partition_types_of(args: argparse.Namespace) -> dict[str, str] | None:
    """The ``--partition-type KEY TYPE`` options as ``Dataset(partition_types=...)`` takes them."""
    return dict(args.partition_types) if args.partition_types else None


def cmd_fit(args: argparse.Namespace) -> None:
    from tabloader import Dataset
    from tabloader.describe import describe_schema

    if os.path.exists(args.out) and not args.overwrite:
        raise FileExistsError(f"{args.out} exists; pass --overwrite to replace it")
    dataset = Dataset(args.data, filters=filters_of(args), partition_types=partition_types_of(args))
    workflow = load_workflow_spec(args.spec, dataset.schema)  # a column the data lacks is named here or by fit
    start = time.perf_counter()
    workflow.fit(dataset, progress=not args.quiet)
    workflow.save(args.out, overwrite=args.overwrite)
    print(f"fitted on {dataset.num_rows:,} rows of {args.data} in {time.perf_counter() - start:.1f} s; "
          f"saved to {args.out}")
    describe_schema(workflow.output_schema, "output")


def cmd_transform(args: argparse.Namespace) -> None:
    from tabloader import Dataset

    workflow = load_saved_workflow(args.workflow, args.trust)
    if os.path.exists(args.out) and not args.overwrite:
        raise FileExistsError(f"{args.out} exists; pass --overwrite to replace it")
    dataset = Dataset(args.data, filters=filters_of(args), partition_types=partition_types_of(args))
    missing = [c for c in workflow.input_columns if c not in dataset.schema]
    if missing:
        raise CommandError(f"the workflow {args.workflow} reads column(s) {missing}, which {args.data} lacks "
                           f"(columns: {dataset.schema.column_names})")
    start = time.perf_counter()
    workflow.transform(dataset).to_parquet(args.out, output_files=args.output_files, shuffle=args.shuffle,
                                           seed=args.seed, overwrite=args.overwrite, progress=not args.quiet)
    out = Dataset(args.out)
    print(f"transformed {dataset.num_rows:,} rows of {args.data} -> {out.num_rows:,} rows in "
          f"{len(out.paths)} file(s) at {args.out} in {time.perf_counter() - start:.1f} s")


def trusted_modules(names: Sequence[str]) -> list[Any]:
    """The modules named by ``--trust``, imported: the user asked for exactly these."""
    import importlib

    modules = []
    for name in names:
        try:
            modules.append(importlib.import_module(name))
        except (ImportError, TypeError) as exc:  # TypeError: a relative name (".mod")
            raise CommandError(f"--trust {name}: cannot import it ({exc}); give an importable module name "
                               "(a dotted name on PYTHONPATH, not a file path)") from None
    return modules


def load_saved_workflow(path: str, trust: Sequence[str], untrusted: str = "raise") -> Any:
    """``Workflow.load`` trusting the ``--trust`` modules; a refusal says how to trust from here."""
    from tabloader.registry import UntrustedError
    from tabloader.workflow import Workflow

    trusted = trusted_modules(trust)
    try:
        return Workflow.load(path, trusted=trusted, untrusted=untrusted)
    except UntrustedError as exc:
        raise CommandError(f"{exc}. From the command line: --trust MODULE imports MODULE (which may register "
                           "operators) and trusts the functions defined in it") from None


def cmd_inspect(args: argparse.Namespace) -> None:
    from tabloader import Dataset
    from tabloader.describe import describe_dataset, describe_workflow
    from tabloader.saved_workflow import WORKFLOW_FILE

    if os.path.isdir(args.path) and os.path.isfile(os.path.join(args.path, WORKFLOW_FILE)):
        trusted_modules(args.trust)  # for the operators they register: inspect loads no function
        # Its functions are shown by name, never loaded or run; an unregistered operator class fails closed.
        describe_workflow(load_saved_workflow(args.path, (), untrusted="placeholder"), args.path)
    else:
        describe_dataset(Dataset(args.path))


def benchmarks_dir() -> Path:
    import tabloader

    return Path(tabloader.__file__).resolve().parents[1] / "benchmarks"


def available_benchmarks(directory: Path | None = None) -> list[str]:
    directory = directory or benchmarks_dir()
    if not directory.is_dir():
        return []
    return sorted(p.stem for p in directory.glob("*.py") if not p.name.startswith("_"))


def cmd_bench(args: argparse.Namespace) -> int:
    directory = benchmarks_dir()
    names = available_benchmarks(directory)
    if not names:
        raise CommandError(f"no benchmark scripts found in {directory}: `tabloader bench` runs the benchmarks/ "
                           "folder of a source checkout (git clone the repository and install it with pip -e)")
    if args.list:
        print("\n".join(names))
        return 0
    unknown = [n for n in args.names if n not in names]
    if unknown:
        raise CommandError(f"unknown benchmark(s) {unknown}; available: {', '.join(names)}")
    failed = []
    for name in args.names or names:
        script = directory / f"{name}.py"
        command = [sys.executable, str(script), *args.extra]
        print(f"== {name}: {' '.join(command[1:])}", flush=True)
        start = time.perf_counter()
        rc = subprocess.call(command, cwd=str(directory.parent))
        print(f"== {name}: exit code {rc} after {time.perf_counter() - start:.1f} s", flush=True)
        if rc != 0:
            failed.append(f"{name} (exit code {rc})")
    if failed:
        print(f"tabloader bench: error: failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


COMMANDS = {"demo": cmd_demo, "synth": cmd_synth, "fit": cmd_fit, "transform": cmd_transform,
            "inspect": cmd_inspect, "bench": cmd_bench}

# Exceptions that are the user's mistake (a path, a column, a spec): one line, exit code 2.
_USER_ERRORS = (CommandError, FileNotFoundError, FileExistsError, NotADirectoryError, IsADirectoryError,
                PermissionError, ValueError, TypeError, KeyError)


# Where a library message names a keyword argument that the command spells differently.
_KEYWORD_ALIASES = {"num_files": "files"}


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``tabloader ARGS``; returns the exit code. A closed stdout (``tabloader ... | head -1``)
    ends it quietly with 141 (128 + SIGPIPE, as a shell reports a tool that SIGPIPE ended)."""
    try:
        try:
            with _sigterm_as_interrupt():
                return _run(argv)
        finally:
            sys.stdout.flush()  # a closed pipe shows here (--help too), not at exit as a traceback
    except BrokenPipeError:
        # Whatever is still buffered for stdout goes nowhere, so exiting prints nothing either.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return _SIGNALED + signal.SIGPIPE


def _run(argv: Sequence[str] | None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1:]
    parser = build_parser()
    args = parser.parse_args(argv)
    if extra and args.command != "bench":
        parser.error(f"arguments after `--` are only taken by `bench`: {' '.join(extra)}")
    if args.command == "synth" and args.files > args.rows:  # every file gets a row; --files 1e18 would never end
        parser.error(f"argument --files: must be <= --rows ({args.rows}), got {args.files}")
    args.extra = extra
    flags = _flags_of_keywords(parser, args.command)
    try:
        rc = COMMANDS[args.command](args)
    except BrokenPipeError:
        raise
    except _USER_ERRORS as exc:
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        print(f"tabloader {args.command}: error: {_in_flags(str(message), flags)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        print(f"tabloader {args.command}: {'terminated' if isinstance(exc, _Terminated) else 'interrupted'}",
              file=sys.stderr)
        return _SIGNALED + (signal.SIGTERM if isinstance(exc, _Terminated) else signal.SIGINT)
    except Exception as exc:  # anything else: still one line, and a nonzero code
        print(f"tabloader {args.command}: error: {type(exc).__name__}: {_in_flags(str(exc), flags)}", file=sys.stderr)
        return 1
    return int(rc or 0)


def _flags_of_keywords(parser: argparse.ArgumentParser, command: str) -> dict[str, str]:
    """Library keyword -> the command's option: ``output_files`` -> ``--output-files``."""
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    options = {a.dest: a.option_strings[-1] for a in commands.choices[command]._actions if a.option_strings}
    options.pop("help", None)
    return {**options, **{keyword: options[dest] for keyword, dest in _KEYWORD_ALIASES.items() if dest in options}}


def _in_flags(message: str, flags: dict[str, str]) -> str:
    """A library message as the command's user reads it: ``pass overwrite=True`` -> ``pass
    --overwrite``, ``output_files must be >= 1`` -> ``--output-files must be >= 1``."""
    start = r"(?<![\w\-/\\.])"  # not inside a word, a flag or a path (hive-style dirs are `key=value`)
    if "partition_types" in flags:  # partition_types={'month': 'int32'} -> --partition-type month int32
        message = re.sub(rf"{start}partition_types=\{{'([^']+)': '([^']+)'\}}", rf"{flags['partition_types']} \1 \2",
                         message)
    for keyword, flag in flags.items():
        message = re.sub(rf"{start}{keyword}=True\b", flag, message)
        message = re.sub(rf"{start}{keyword}=", f"{flag} ", message)
        if "_" in keyword:  # a bare word is surely the keyword only when spelled like an identifier
            message = re.sub(rf"{start}{keyword}\b", flag, message)
    return message


class _Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C: writes in progress remove their temporaries on the way out."""


def _raise_terminated(signum: int, frame: Any) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not cut the clean-up short
    raise _Terminated


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():  # only the main thread handles signals
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(main())
