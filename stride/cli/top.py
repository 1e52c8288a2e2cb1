"""`stride top RUN_DIR [--interval S] [--once]`: a live terminal view that follows a run directory.

Reads what the trainer already writes (metrics.jsonl, system.jsonl, summary.json), so it works on
a run started anywhere whose directory is visible here, and needs no connection to the process.

A folder that does not exist yet is waited for (said once on stderr; --timeout counts the wait, and a folder that
never appeared is exit status 2 then; --once does not wait).
Following stops when summary.json appears (exit status 0), at --timeout (0), or when the run's process is gone
without writing one (exit status 1): the folder's lock file (stride.files.run_lock) names a pid on this host that
no longer runs, so nothing will be written again; a killed run used to be followed forever. A pid on another host
cannot be checked from here: such a run is followed until --timeout. Nothing is locked or written: the check
reads the lock file's content only.

Every run file is read through stride.files.input_file: only a regular file (a FIFO hung `top --once`, a link to
/dev/zero grew it to 24 GB, audit 14 M3), each up to a size that names the file when it is past it, and a followed
file in pieces, whose line without a newline may grow to a limit (stride.metrics.observe.follow). Only the records
the view shows are kept (the last KEEP_RECORDS), so a long run's metrics.jsonl is read in the memory of a short one's.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any

from stride.errors import StrideError
from stride.files.input_file import (
    InputFileError,
    InputFileMissing,
    InputFileTooLarge,
    NotARegularFile,
    json_object,
    read_input_text,
)
from stride.metrics.observe.follow import STARTED_OVER, JsonlFollower

SPARK = "▁▂▃▄▅▆▇█"
RUN_FILES = ("config.toml", "metrics.jsonl", "summary.json")  # what `stride train` writes into a run directory
SMALL_FILE_BYTES = 64 << 20  # summary.json, config.toml, the lock file: KiBs
KEEP_RECORDS = 4096  # training and validation records kept: the view shows the last and a 40-step sparkline


class TopInputError(StrideError):
    """A path, option or run file the user gave that `stride top` cannot show: bad input (exit 2)."""

    exit_code = 2


def register(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", type=Path, help="a run directory (being written, or finished)")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between refreshes (default 1)")
    p.add_argument("--once", action="store_true", help="print one frame and exit (default: follow the run)")
    p.add_argument("--timeout", type=float, default=None,
                   help="stop following after this many seconds (default: when the run writes summary.json, or "
                   "when its process is gone without writing one: exit status 1)")
    p.set_defaults(func=run)


def sparkline(values: list[float], width: int = 40) -> str:
    vals = [v for v in values if math.isfinite(v)][-width:]  # a NaN loss has no height
    if not vals:
        return ""
    lo, hi = min(vals), max(vals)
    if hi == lo:
        return SPARK[0] * len(vals)
    return "".join(SPARK[min(len(SPARK) - 1, int((v - lo) / (hi - lo) * len(SPARK)))] for v in vals)


def number(rec: dict[str, Any], key: str) -> float | None:
    """rec[key] where it is a number (a record written by another version, or edited, may lack it)."""
    v = rec.get(key)
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def fmt(v: float | None, spec: str, scale: float = 1.0) -> str:
    return "-" if v is None else format(v * scale, spec)


def read_run_file(path: Path, what: str) -> str | None:
    """A small run file's text (summary.json, config.toml, the lock file); None while there is nothing at `path`.
    A FIFO, a device, a directory or a file past SMALL_FILE_BYTES is a ValueError naming it (`run` makes it one
    line)."""
    try:
        return read_input_text(path, limit=SMALL_FILE_BYTES, what=what)
    except InputFileMissing:
        return None
    except InputFileError as exc:
        raise ValueError(str(exc)) from None


class RunView:
    """The state of one run directory, updated from its files."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.metrics = JsonlFollower(run_dir / "metrics.jsonl")
        self.system = JsonlFollower(run_dir / "system.jsonl")
        self.train: deque[dict[str, Any]] = deque(maxlen=KEEP_RECORDS)
        self.val: deque[dict[str, Any]] = deque(maxlen=KEEP_RECORDS)
        self.sys_last: dict[str, Any] | None = None
        self.summary: dict[str, Any] | None = None
        self.total_steps: int | None = None
        self.gone: int | None = None  # the pid of the run's process, once it is known to be gone without a summary

    def check_writer(self) -> None:
        """Note the run's process as gone (`gone`) when its lock file names a pid of this host that no longer
        runs; called before `refresh`, so whatever it wrote before it ended is read after."""
        if self.summary is None and self.gone is None:
            self.gone = writer_gone(self.run_dir)

    def refresh(self) -> None:
        for rec in self.metrics.iter_new():
            if rec is STARTED_OVER:  # metrics.jsonl was rewritten (a resume): what is held is not in it any more
                self.train.clear()
                self.val.clear()
            elif isinstance(rec, dict):
                _add(self.train if "loss" in rec else self.val if "val_loss" in rec else None, rec)
        for rec in self.system.iter_new():  # the last record is what is shown
            if rec is STARTED_OVER:
                self.sys_last = None
            elif isinstance(rec, dict):
                self.sys_last = rec
        if self.total_steps is None and (self.run_dir / "config.toml").is_file():
            import tomllib

            try:  # only for "step N / total": a config.toml that cannot say it leaves the total unknown
                text = read_run_file(self.run_dir / "config.toml", "run config")
                steps = tomllib.loads(text or "")["train"]["steps"]
                self.total_steps = steps if type(steps) is int else None
            except (ValueError, RecursionError, KeyError, TypeError):  # TOMLDecodeError is a ValueError
                self.total_steps = None
        path = self.run_dir / "summary.json"
        if path.is_file() and (text := read_run_file(path, "run summary")) is not None:  # written whole, by a rename
            try:
                summary = json_object(text, path)
            except InputFileError as exc:
                raise ValueError(str(exc)) from None
            from stride.report.inputs import range_problem

            if why := range_problem(summary):  # a corrupted or hand-edited figure is not shown as measured
                raise ValueError(f"{path}: {why}")
            self.summary = summary

    def render(self) -> Any:
        from rich.console import Group
        from rich.table import Table

        from stride.shown_text import add_row, literal

        # every cell as written (rich markup and control characters in a run file's values shown, not acted on:
        # `{"step": "[/bold]"}` ended `top` with a MarkupError, an ESC in a gpu index reached the terminal)
        t = Table(title=literal(f"stride top: {self.run_dir}"), show_header=True, expand=False)
        t.add_column("metric")
        t.add_column("value", justify="right")

        def row(name: str, value: str) -> None:
            add_row(t, name, value)

        last = self.train[-1] if self.train else {}
        step = last.get("step")
        row("step", f"{step if step is not None else '-'} / {self.total_steps or '?'}"
                  + (f"  (diverged at step {self.summary.get('diverged_at_step')})"
                     if self.summary and self.summary.get("status") == "diverged" else "  (finished)" if self.summary
                     else f"  (process gone: pid {self.gone})" if self.gone is not None else ""))
        if last:
            row("loss", fmt(number(last, "loss"), ".4g"))
            row("lr", fmt(number(last, "lr"), ".3g"))
        # One statistic for every rate shown: a finished run's summary.json (the mean over its timed steps, which
        # MFU is of too); a live run's last logged step (no MFU: summary.json has it at the end). Before, a
        # finished run showed the last step's samples/s beside the summary's MFU.
        if self.summary is not None and number(self.summary, "step_time_s") is not None:
            s = self.summary
            timed = s.get("timed_steps")
            basis = f"mean over {timed} timed steps, summary.json" if isinstance(timed, int) else "summary.json"
            step_s, phases = number(s, "step_time_s"), s.get("step_time_breakdown_s")
            row(f"samples/s ({basis})", fmt(number(s, "samples_per_s") or None, ",.0f"))
            row("step time (same)", fmt(step_s, ".2f", 1e3) + " ms")
            mfu = number(s, "mfu")
            row("MFU (same)", fmt(mfu, ".2f", 100) + " %" if mfu is not None
                      else "n/a (mfu_error in summary.json)" if s.get("mfu_error") else "-")
        elif last:
            step_s, phases = number(last, "step_time_s"), last.get("breakdown_s")
            row(f"samples/s (step {last.get('step')}, the last logged)",
                      fmt(number(last, "samples_per_s") or None, ",.0f"))
            row("step time (same step)", fmt(step_s, ".2f", 1e3) + " ms")
        else:
            step_s, phases = None, None
        for phase, sec in (phases.items() if isinstance(phases, dict) else ()):
            if isinstance(sec, int | float):
                row(f"  {phase}", f"{sec * 1e3:.2f} ms ({100 * sec / (step_s or 1.0):.1f} %)")
        if self.val:
            row("val loss", f"{fmt(number(self.val[-1], 'val_loss'), '.4g')} (step {self.val[-1].get('step')})")
        if self.sys_last:
            row("CPU (process)", fmt(number(self.sys_last, "cpu_percent"), ".0f") + " %")
            row("RSS", fmt(number(self.sys_last, "rss_bytes"), ",.0f", 2**-20) + " MiB")
            gpus = self.sys_last.get("gpus")
            for g in gpus if isinstance(gpus, list) else ():
                if isinstance(g, dict):
                    row(f"gpu{g.get('index')}", f"{g.get('util_percent')} % util, {g.get('temperature_c')} C, "
                              f"{g.get('power_w')} W")
        losses = [v for r in self.train if (v := number(r, "loss")) is not None]
        return Group(t, literal(f"loss {sparkline(losses)}"))


def _add(records: deque[dict[str, Any]] | None, rec: dict[str, Any]) -> None:
    """Append `rec`, keeping one record per step, the last: a record of a step at or before the last one held (a
    resumed run logs the steps after its checkpoint again) drops the held records from that step on."""
    if records is None:
        return
    step = rec.get("step")
    if type(step) is int:
        while records and type(last := records[-1].get("step")) is int and last >= step:
            records.pop()
    records.append(rec)


def writer_gone(run_dir: Path) -> int | None:
    """The pid the run folder's lock file names, when it is of this host and no longer runs; None while the writer
    may live (running, another host's, no lock file or no name in it). The lock itself is never taken: a reader's
    lock, however brief, could refuse a run starting in that instant."""
    from stride.files.owner import pid_alive, this_host
    from stride.files.run_lock import LOCK_NAME

    try:
        info = json.loads(read_input_text(run_dir / LOCK_NAME, limit=SMALL_FILE_BYTES, what="run lock file") or "{}")
    except (NotARegularFile, InputFileTooLarge) as exc:  # a FIFO or /dev/zero: never read, named in one line
        raise ValueError(str(exc)) from None
    except (InputFileError, ValueError, RecursionError):  # none yet, unreadable, not a holder's name
        return None
    if not isinstance(info, dict) or info.get("host") != this_host():
        return None
    pid = info.get("pid")
    if type(pid) is not int or pid <= 0:
        return None
    return None if pid_alive(pid) else pid


def _gone_line(view: RunView, following: bool) -> str:
    step = view.train[-1].get("step") if view.train else None
    shown = f"showing the last logged step ({step})" if step is not None else "it logged no step"
    return (f"stride top: the run's process (pid {view.gone}) is gone and wrote no summary.json; {shown}"
            + ("; stopped following" if following else ""))


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.live import Live

    if args.interval <= 0:
        raise TopInputError(f"--interval = {args.interval} must be > 0")
    if args.timeout is not None and args.timeout < 0:
        raise TopInputError(f"--timeout = {args.timeout} must be >= 0")
    start = time.monotonic()  # --timeout counts from here: the wait for the folder is part of it
    waited = False
    if not args.run_dir.is_dir():
        if args.run_dir.exists() or args.once:  # --once shows what is there now: nothing to show is an error
            what = "a file, not a run directory" if args.run_dir.exists() else "no such directory"
            raise TopInputError(f"{args.run_dir}: {what}")
        # `stride top DIR` started before `stride train --out DIR` made the folder: wait for it, as for its files
        # (this exited 2 at once, "no such directory", a second before the folder appeared)
        print(f"stride top: {args.run_dir} does not exist yet: waiting for the run to create it "
              + (f"(up to --timeout {args.timeout:g} s; Ctrl-C stops)" if args.timeout is not None
                 else "(Ctrl-C stops)"), file=sys.stderr)
        waited = True
        while not args.run_dir.is_dir():
            if args.run_dir.exists():
                raise TopInputError(f"{args.run_dir}: a file, not a run directory")
            if args.timeout is not None and time.monotonic() - start >= args.timeout:
                raise TopInputError(f"{args.run_dir}: no such directory after waiting {args.timeout:g} s "
                                    "(--timeout): did the run start, with this --out?")
            time.sleep(args.interval if args.timeout is None
                       else max(0.0, min(args.interval, args.timeout - (time.monotonic() - start))))
    if not any((args.run_dir / f).exists() for f in RUN_FILES):
        runs = sorted(p.parent.name for p in args.run_dir.glob("*/metrics.jsonl"))
        if args.once or runs:  # a bench directory, or nothing to show: say where the runs are
            hint = f"; runs inside it: {', '.join(runs)} (e.g. stride top {args.run_dir / runs[0]})" if runs else ""
            raise TopInputError(f"{args.run_dir} holds no run files ({', '.join(RUN_FILES)}){hint}")
        if not waited:  # said once: the line above already says it waits for the run
            print(f"stride top: no run files in {args.run_dir} yet: waiting for the run to start (Ctrl-C stops)",
                  file=sys.stderr)
    view = RunView(args.run_dir)
    try:
        view.check_writer()
        view.refresh()
        console = Console()
        if args.once:
            console.print(view.render())
            if view.gone is not None and view.summary is None:
                print(_gone_line(view, following=False), file=sys.stderr)
            return 0
        with Live(view.render(), console=console, refresh_per_second=4) as live:
            while (view.summary is None and view.gone is None
                   and (args.timeout is None or time.monotonic() - start < args.timeout)):
                time.sleep(args.interval)
                view.check_writer()
                view.refresh()
                live.update(view.render())
    except ValueError as exc:  # a file of the run that is not what stride writes (a complete line that is not JSON)
        raise TopInputError(str(exc)) from None  # the main entry prints it as one line
    if view.summary is None and view.gone is not None:
        print(_gone_line(view, following=True), file=sys.stderr)
        return 1
    return 0
