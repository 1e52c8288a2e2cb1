"""`stride` command line: one sub-command per module in `stride.cli`.

Each module listed in COMMANDS defines `register(subparsers)`, which adds its parser and sets
`func(args) -> int`. Modules are imported lazily at parse time only for the command that runs,
so `stride --help` stays fast and a command's heavy imports (torch, pyarrow) cost nothing elsewhere.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
import warnings
from collections.abc import Iterator
from typing import TextIO

# (command name, module under stride.cli, one-line help). Add new commands here.
COMMANDS: list[tuple[str, str, str]] = [
    ("train", "train", "train a workload from a TOML config"),
    ("config", "config", "show every config key: its value, default, choices and what it does"),
    ("bench", "bench", "run the benchmark suite (default: quick) and print a table"),
    ("compare", "compare", "compare two results (results.json, bench or run folders) against each side's "
     "measured spread"),
    ("report", "report", "write report.html and summary.md from a bench directory, a results.json or a run folder"),
    ("data", "data", "synthesize, ingest and inspect market data stores; probe the loader on this host"),
    ("profile", "profile", "train under torch.profiler, write traces per rank, and analyze them"),
    ("analyze", "analyze", "where a step's time goes, from profiler traces"),
    ("comm", "comm", "collective benchmark in the manner of nccl-tests"),
    ("repro", "repro", "re-run a recorded run directory and check the result matches"),
    ("launch", "launch", "submit to Slurm (requeue on preemption), write a Kubeflow PyTorchJob, or run on Ray Train"),
    ("top", "top", "live terminal view of a run directory's metrics"),
    ("plan", "plan", "predict step time, memory and cost; recommend a layout and hardware"),
    ("sweep", "sweep", "train a grid of small models, packed onto each device, here or on Ray; report significance"),
]


def version_line() -> str:
    """`stride 0.1.0 (torch 2.13.0+cpu, Python 3.11.7)`: read from package metadata, torch not imported."""
    import importlib.metadata
    import platform

    def v(pkg: str) -> str:
        try:
            return importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            return "not installed"

    return f"stride {v('stride')} (torch {v('torch')}, Python {platform.python_version()})"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="stride",
        description="stride: train fast, know why, decide. A training-performance platform for quant ML.",
    )
    parser.add_argument("-V", "--version", action="store_true", help="print stride's, torch's and Python's versions")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module, help_text in COMMANDS:
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(_module=module)
    return parser


INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for a command Ctrl-C stopped
PIPE_CLOSED = 141  # 128 + SIGPIPE, what a shell reports for a command whose reader (`| head`) left
# commands whose --out names a folder (a run, bench results, a sweep): one naming a file is refused before they start
OUT_IS_A_FOLDER = ("train", "bench", "sweep", "profile", "repro", "launch")
MAPS_STORES = ("train", "bench", "sweep", "profile", "repro", "data")  # commands that may map a data store's files


def main(argv: list[str] | None = None) -> int:
    """Run one command; its exit status. Ctrl-C anywhere a command does not handle it itself (`stride bench`
    does; `stride sweep` says what it kept) is one line and status 130, not a traceback: the status is returned,
    not left to CPython's uncaught-KeyboardInterrupt exit."""
    program = argv is None  # this process is the `stride` command (not a caller's main([...]), as in the tests)
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        code = _main(argv, program)
        if sys.stdout is not None:
            sys.stdout.flush()  # a reader that left is found here, not in the flush at interpreter exit
        return code
    except KeyboardInterrupt:
        name = argv[0] if argv and any(c[0] == argv[0] for c in COMMANDS) else None
        say(f"stride {name}: stopped (interrupted)" if name else "stride: stopped (interrupted)")
        return INTERRUPTED
    except BrokenPipeError:
        if not stdout_closed():  # a pipe of the command's own (a child's stdin): not the reader of stdout
            raise
        return _quiet_for_closed_stdout()
    except SystemExit as exc:
        # rich's Console answers a closed stdout with SystemExit(1), raised while handling the BrokenPipeError
        # (Console.on_broken_pipe; it has pointed stdout at os.devnull already)
        if exc.code == 1 and isinstance(exc.__context__, BrokenPipeError):
            return _quiet_for_closed_stdout()
        raise


def entry(argv: list[str] | None = None) -> None:
    """The `stride` program (console script, `python -m stride`, a rank's `python -m stride.bench.rank_entry`):
    `main(argv)`, then the process ends without the interpreter's slow teardown (stride.cli.process_exit;
    STRIDE_FULL_EXIT=1 turns that off). Never returns. Callers in their own interpreter call `main([...])`, which
    returns the status."""
    from stride.cli.process_exit import end_process

    end_process(lambda: main(argv))


def stdout_closed() -> bool:
    """Whether stdout's reader has gone (`stride ... | head` after head exits): the pipe reports an error or hang-up.
    True where that cannot be asked (no poll(), a stdout without a file descriptor)."""
    import select

    try:
        fd = sys.stdout.fileno()
        poller = select.poll()
    except (AttributeError, OSError, ValueError):
        return True
    poller.register(fd, select.POLLOUT)
    return any(ev & (select.POLLERR | select.POLLHUP) for _, ev in poller.poll(0))


def _quiet_for_closed_stdout() -> int:
    """The end of a command whose stdout was closed: no message, no traceback, the status a shell gives a process
    SIGPIPE killed. stdout is pointed at os.devnull so that the flush at interpreter exit, of what is still buffered,
    does not fail again ("Exception ignored ... BrokenPipeError"), as Python's docs on SIGPIPE recommend."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (AttributeError, OSError, ValueError):  # a stdout without a file descriptor (a caller's StringIO)
        pass
    return PIPE_CLOSED


@contextlib.contextmanager
def stride_warnings_as_lines(name: str) -> Iterator[None]:
    """Within: a warning of stride's own (a class defined in a stride module, e.g. the peak one MFU would divide by
    being below what a run achieved) is shown as `stride NAME: warning: message` on rank 0, not Python's file, line
    and source (`summary.py:155: PeakBelowAchievedWarning: ...`, seen through `stride bench`, `profile` and `repro`:
    first-contact audit of 2026-12-06); every other warning as before. The warning itself is unchanged."""
    with warnings.catch_warnings():  # restores showwarning on the way out
        before = warnings.showwarning

        def show(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                 file: TextIO | None = None, line: str | None = None) -> None:
            if not category.__module__.startswith("stride."):
                before(message, category, filename, lineno, file, line)
            elif os.environ.get("RANK", "0") == "0":  # every rank computes the same figures
                say(f"stride {name}: warning: {message}")

        warnings.showwarning = show
        yield


def _main(argv: list[str], program: bool = False) -> int:
    parser = build_parser()
    if not argv or argv[0] in ("-h", "--help"):
        parser.print_help()
        return 0
    if argv[0] in ("-V", "--version"):
        print(version_line())
        return 0
    name = argv[0]
    entry = next((c for c in COMMANDS if c[0] == name), None)
    if entry is None:
        parser.parse_args(argv)  # argparse prints the "invalid choice" error and exits 2
        return 2
    mod = importlib.import_module(f"stride.cli.{entry[1]}")
    cmd_parser = argparse.ArgumentParser(prog=f"stride {name}", description=entry[2])
    mod.register(cmd_parser)
    args = cmd_parser.parse_args(argv[1:])
    refusal = out_refusal(getattr(args, "out", None)) if name in OUT_IS_A_FOLDER else None
    if refusal is not None:
        say(f"stride {name}: {refusal}")
        return 2
    if program and name in MAPS_STORES:
        # a store file changed in place kills the process with SIGBUS, which no Python code survives: a watcher
        # names the file then (stride.data.mapped_files; these commands load torch anyway)
        from stride.data.mapped_files import note_faults

        note_faults(f"stride {name}")
    from stride.config.errors import ConfigError

    if name == "train":
        from stride.launch.torchrun import clear_refusal

        clear_refusal()
    try:
        with stride_warnings_as_lines(name):
            return int(args.func(args) or 0)
    except ConfigError as exc:
        # a refusal that is no config problem may set label = "" (the folder holds another run): said as StrideError's
        say(f"stride {name}: {exc.label}: {exc}" if exc.label else f"stride {name}: {exc}")
        if name == "train":  # a rank of `stride train --nproc`: tell the launcher it refused (not a crash)
            from stride.launch.torchrun import record_refusal

            record_refusal()
        if "torch.distributed" in sys.modules:  # a refused resume holds the trainer's gloo groups (see below)
            from stride.cli.train import release_process_groups

            _drop_tracebacks(exc)
            del exc
            release_process_groups()
        return 2
    except OSError as exc:  # a path the user gave: missing, a file for a directory, no permission, disk full
        if isinstance(exc, BrokenPipeError) and stdout_closed():
            raise  # `| head` left: main() ends the command quietly
        from stride.errors import WRONG_KIND_OF_PATH, describe_os_error

        say(f"stride {name}: {describe_os_error(exc)}")
        # a path of the wrong kind (--out naming a file, or a file in its path) is bad input: 2, as every refusal of
        # what the user gave (it was 1 for train, bench, sweep and profile, outside audit); a missing permission,
        # a full disk and the like are the machine's state: 1
        return 2 if isinstance(exc, WRONG_KIND_OF_PATH) else 1
    except Exception as exc:
        # A failed checkpoint save or load gets its message, not a traceback; the previous
        # checkpoint is intact (stride.checkpoint guarantees it).
        from stride.checkpoint.errors import CheckpointError

        if isinstance(exc, CheckpointError):
            say(f"stride {name}: checkpoint error: {exc}")
            from stride.cli.train import release_process_groups

            _drop_tracebacks(exc)
            del exc
            release_process_groups()
            return 1
        from stride.errors import StrideError, one_line

        if isinstance(exc, StrideError):  # bad input or a folder/disk problem, explained in its message
            say(f"stride {name}: {one_line(str(exc))}")
            code = exc.exit_code
            from stride.cli.train import release_process_groups

            _drop_tracebacks(exc)
            del exc
            release_process_groups()
            return code
        raise


def say(text: str) -> None:
    """`text` and its newline on stderr in one write, flushed. Every rank of `stride train --nproc` says its refusal or
    error; print writes the text and the newline separately, so a multi-line one (a checkpoint's config diff) glued
    onto the next rank's first line: `... -> 'bf16' (now)stride train: config error: ...` (outside audit of the
    layouts; review: the checkpoint-error and other branches still printed)."""
    if sys.stderr is None:  # (pythonw) print wrote nowhere too
        return
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def out_refusal(out: str | os.PathLike[str] | None) -> str | None:
    """What is wrong with an --out that must be a folder, or None: a regular file at that path or at one of its
    parents is bad input (exit 2, as `stride data synth --out FILE` says it); it was `FileExistsError` text and exit 1
    from train, bench, profile and repro (outside audit)."""
    if out is None:
        return None
    from pathlib import Path

    from stride.errors import file_in_path, one_line

    blocker = file_in_path(Path(out))
    if blocker is None:
        return None
    return one_line(f"--out {out}: {blocker} is a file, not a directory; give a directory path")


def _drop_tracebacks(exc: BaseException) -> None:
    """Clear the tracebacks of `exc` and every exception chained to it: their frames hold the trainer and
    its process groups, which must be freed before interpreter teardown (see `stride.cli.train._train`)."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        e.__traceback__ = None
        todo += [e.__cause__, e.__context__]


if __name__ == "__main__":
    entry()
