"""The run directory: resolved config, environment, metrics.jsonl, summary.json.

Files that describe a finished state (config, env, summary) are written to a temporary name and
renamed, so a crash never leaves a half-written file that parses as valid. The temporary name is
tagged with this process (stride.files.owner): a write that fails (a full disk) removes it, and a
run folder opened later removes those whose process is gone. The folder is locked for the run's life
(stride.files.run_lock): a second run on it is refused, naming the holder. A run that ends before it
wrote anything (a refused resume, a run found finished) leaves the folder as it found it: the lock
file's previous content is put back, and a folder it made is removed. For a run that resumes an earlier
one's checkpoint, the new config.toml and env.json, and the cut of the earlier segment's metrics.jsonl records past
the step it continues from, are written with the run's first own write (a metrics line, a checkpoint's flush,
a summary), not when the run is accepted: a resume that fails before that (at another layout whose first step
fails, on a bad device) leaves the earlier run's files as they were. A fresh run writes its config.toml and
env.json at once: a run that dies at its first step still says what it was (and `stride top` finds its lock).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import time
from pathlib import Path
from typing import Any, TextIO

from stride.errors import WRONG_KIND_OF_PATH, StrideError, describe_os_error, one_line, os_reason
from stride.files import run_lock, strict_json
from stride.files.append_file import open_append
from stride.files.input_file import not_found_or_special
from stride.files.owner import remove_abandoned, tagged_name
from stride.metrics.env import fingerprint

FLUSH_S = 0.1  # seconds a metrics.jsonl line may wait in the buffer (RunDir.log says why)

_FILE_TMP = re.compile(r"^[A-Za-z0-9_.-]+\.(json|toml|jsonl|html|md)$")  # the rest of a tagged file's name
# What a run writes in its folder (the trainer, the observers, `stride profile`): what --overwrite removes.
# A copy of config.toml as the run wrote it, for the run's own reading only: config.toml is the user's to edit, and
# `stride repro` names the keys an edit changed against this copy (stride.launch.repro.recorded_config), where it
# hashes to summary.json's config_hash; before, only a run with checkpoints (their meta.json) could name them.
RECORDED_CONFIG = "config.recorded.toml"
# The records a rollback took out of metrics.jsonl (the steps it trained again), one line per rollback with its
# from_step, to_step and reason: metrics.jsonl holds one record per step, and the rollback stays visible here.
ROLLBACKS = "rollbacks.jsonl"
RUN_FILES = ("config.toml", RECORDED_CONFIG, "env.json", "metrics.jsonl", ROLLBACKS, "summary.json", "system.jsonl",
             "prometheus.json", "analysis.json", "tensorboard", "mlflow", "wandb", "tracking.json", "traces",
             "report.html", "summary.md")


class RunDirError(StrideError):
    """The run folder cannot be written (a full disk, no permission); the message names the file."""

    @classmethod
    def from_os(cls, exc: OSError, path: Path) -> RunDirError:
        """The error for `exc` on `path`: exit status 2 where the path is the wrong kind of thing (a file where the
        folder belongs: `metrics.out_dir` naming a file), as `--out` naming one; 1 for the machine's state."""
        err = cls(one_line(describe_os_error(exc, path)))
        if isinstance(exc, WRONG_KIND_OF_PATH):
            err.exit_code = 2
        return err


def atomic_write_text(path: Path, text: str) -> None:
    """Write `path` whole or not at all: a tagged temporary file, fsync, rename; on failure the temporary goes."""
    tmp = path.with_name(tagged_name("tmp", path.name))
    try:
        with open(tmp, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise RunDirError(one_line(f"cannot write {path}: {os_reason(exc)}")) from None


def json_text(obj: Any) -> str:
    """A JSON file's text as the run folder writes it (summary.json; the trackers log the same text): strict
    JSON, a non-finite number written as null and named in `nonfinite_fields` (stride.files.strict_json)."""
    return strict_json.dumps(obj, indent=2) + "\n"


def _record(line: str) -> dict[str, Any] | None:
    """One whole metrics.jsonl line as a record with an integer step; None for a line cut short or not a record."""
    if not line.endswith("\n"):
        return None
    try:
        record = json.loads(line)
    except (ValueError, RecursionError):  # a line nested thousands deep was a RecursionError traceback of the resume
        return None
    return record if isinstance(record, dict) and isinstance(record.get("step"), int) else None


def make_run_folder(out_dir: str | Path, name: str) -> Path:
    """Make a new, empty `<out_dir>/<stamp>-<name>[-i]` (RunDir.create, and `stride train --nproc`'s launcher, which
    hands one folder to every attempt of --max-restarts). A folder it cannot make is a RunDirError naming it."""
    base = Path(out_dir) / f"{time.strftime('%Y%m%d-%H%M%S')}-{name}"
    path, i = base, 1
    while True:  # mkdir without exist_ok: two runs started in the same second get two folders
        try:
            path.mkdir(parents=True)
            return path
        except FileExistsError:
            path, i = Path(f"{base}-{i}"), i + 1
        except OSError as exc:
            raise RunDirError.from_os(exc, path) from None


def _check_logs(path: Path) -> None:
    """Refuse a folder whose line logs are not regular files before anything runs: the appends would refuse them
    (stride.files.append_file) only at the first line, after a resumed run had trained and saved checkpoints."""
    for name in ("metrics.jsonl", "system.jsonl", ROLLBACKS):
        p = path / name
        if p.is_symlink() or (p.exists() and not p.is_file()):
            what = "a symbolic link" if p.is_symlink() else "a FIFO" if p.is_fifo() else "not a regular file"
            err = RunDirError(one_line(f"{p} is {what}: {name} must be a regular file of the run folder (move it away, "
                                       "or use another --out)"))
            err.exit_code = 2  # the wrong kind of path, as RunDirError.from_os says of one
            raise err


class RunDir:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.written = False  # this process wrote something here (else close() leaves the folder as it was)
        self._made = not path.exists()
        try:
            path.mkdir(parents=True, exist_ok=True)
            _check_logs(path)
            self._lock: Path | None = run_lock.acquire(path)
        except OSError as exc:
            raise RunDirError.from_os(exc, path) from None
        remove_abandoned(path, other_hosts=True, rest=_FILE_TMP)  # temporary files of killed runs (we hold the lock)
        self._metrics: TextIO | None = None
        self._flushed = 0.0  # time.monotonic() of the last flush of metrics.jsonl
        self._pending_record: tuple[str, dict[str, Any]] | None = None  # config.toml, env.json: see _commit
        self._pending_cut: int | None = None  # the step past which earlier metrics.jsonl records go: see _commit
        self.dropped_time_s: float | None = None  # the last `time_s` of the records that cut drops (None: none)

    @classmethod
    def create(cls, out_dir: str | Path, name: str, explicit: str | Path | None = None) -> RunDir:
        """`explicit` is the run directory itself (`--out`); else a new `<out_dir>/<stamp>-<name>[-i]`."""
        if explicit is not None:
            return cls(Path(explicit))
        run = cls(make_run_folder(out_dir, name))
        run._made = True
        return run

    def record(self, config_toml: str, resumed: bool = False) -> None:
        """The resolved config and the environment of a run that was accepted (a refused resume records none): at
        once for a run from step 0, with its first own write (`_commit`) for a run that resumed an earlier one's
        checkpoint (whose config and records stay until then). Decided by the caller, which knows whether it
        resumed: the files in the folder do not say it (an --overwrite cleared them, a failed attempt left some)."""
        self._pending_record = (config_toml, fingerprint())
        if not resumed:
            self._commit()

    def _commit(self) -> None:
        """Write what `record` and `drop_records_after` left for the run's first own write; from here on the
        folder holds this run. Until then a failure leaves an earlier run's config and records as they were."""
        if self._pending_cut is not None:
            step, self._pending_cut = self._pending_cut, None
            self._cut_records_after(step)
        if self._pending_record is not None:
            (config_toml, env), self._pending_record = self._pending_record, None
            self.written = True
            atomic_write_text(self.path / "config.toml", config_toml)
            atomic_write_text(self.path / RECORDED_CONFIG, config_toml)
            atomic_write_text(self.path / "env.json", json_text(env))

    def write_json(self, name: str, obj: Any) -> None:
        # the metrics lines logged so far reach the file first: a reader that waits for summary.json (`stride top`,
        # a user's script) then finds every step's line, not the last ones still in the buffer (a CI run of
        # stride top's test showed the summary with metrics.jsonl's last line missing)
        self.flush()  # writes what `record` left too (_commit)
        self.written = True
        atomic_write_text(self.path / name, json_text(obj))

    def write_text(self, name: str, text: str) -> None:
        self._commit()
        self.written = True
        atomic_write_text(self.path / name, text)

    def log(self, record: dict[str, Any]) -> None:
        """Append one line to metrics.jsonl; lines reach the file at least every FLUSH_S seconds, at every
        checkpoint (`flush`) and at `close`, so a crash loses at most FLUSH_S seconds of lines and never one
        of a step a checkpoint holds.

        Why not line-buffered (it was): a write system call for every logged line cost the trainer 7-10 us a
        step at log_every 10 (70-100 us a line in place, where the steps after it run with cold caches; a few
        us timed alone), against a buffer flushed at most every FLUSH_S: the fit loop's body on a one-Linear
        model, 20 alternated blocks of 200 steps, twice (Intel Xeon, KVM, one thread)."""
        self.written = True
        try:
            if self._metrics is None:
                self._commit()
                self._metrics = open_append(self.path / "metrics.jsonl")  # kept open
                self._flushed = time.monotonic()
            self._metrics.write(strict_json.dumps(record) + "\n")
            if time.monotonic() - self._flushed >= FLUSH_S:
                self.flush()
        except OSError as exc:
            raise RunDirError(one_line(f"cannot write {self.path / 'metrics.jsonl'}: {os_reason(exc)}")) from None

    def flush(self) -> None:
        """Write the metrics.jsonl lines logged so far to the file (a checkpoint calls this before it saves: the
        run's config and record cut are written then too, if no line was yet)."""
        self._commit()
        if self._metrics is not None:
            try:
                self._metrics.flush()
            except OSError as exc:
                raise RunDirError(one_line(f"cannot write {self.path / 'metrics.jsonl'}: {os_reason(exc)}")) from None
            self._flushed = time.monotonic()

    def drop_records_after(self, step: int) -> None:
        """Keep the metrics.jsonl records of steps up to `step` (where a resumed run continues), with the run's
        first own write (`_commit`). The rest belong to a segment that was killed before its next checkpoint,
        which the resumed run trains and logs again; a line cut short by the kill is dropped too (it would run
        into the next)."""
        self._pending_cut = step if self._pending_cut is None else min(step, self._pending_cut)
        self.dropped_time_s = self._last_time_after(self._pending_cut)

    def _last_time_after(self, step: int) -> float | None:
        """The largest `time_s` of the whole records past `step` (the run's clock when the killed segment logged
        last: the trainer counts it as lost time), read now, before the cut. None: no such record, or unreadable."""
        path = self.path / "metrics.jsonl"
        if path.exists() and not path.is_file():  # a FIFO (or a link to /dev/zero): never read, it blocked the resume
            return None
        try:
            lines = path.read_text().splitlines(keepends=True)
        except (OSError, UnicodeDecodeError):
            return None
        records = (r for r in map(_record, lines) if r is not None and r["step"] > step)
        times = [float(t) for r in records if strict_json.finite_number(t := r.get("time_s")) and t >= 0]
        return max(times, default=None)

    def _cut_records_after(self, step: int) -> list[dict[str, Any]]:
        """`drop_records_after`'s cut, now; also a rollback's (`roll_back_records`). Returns the whole records it
        dropped (a line cut short or not a record is dropped without one)."""
        path = self.path / "metrics.jsonl"
        if self._metrics is not None:
            self._metrics.flush()
        if path.exists() and not path.is_file():  # a FIFO blocked here for ever, a link to /dev/zero filled memory
            err = RunDirError(f"{not_found_or_special(path)}: metrics.jsonl must be a regular file (move it away)")
            err.exit_code = 2  # the wrong kind of path, as RunDirError.from_os says of one
            raise err
        try:
            lines = path.read_text(errors="replace").splitlines(keepends=True)  # damaged bytes: a line that is no
            # record (dropped as any unreadable line), not a UnicodeDecodeError in the middle of training
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise RunDirError(one_line(f"cannot read {path}: {os_reason(exc)}")) from None
        keep, dropped = [], []
        for line in lines:
            record = _record(line)
            if record is not None and record["step"] <= step:
                keep.append(line)
            elif record is not None:
                dropped.append(record)
        if len(keep) < len(lines):
            self.written = True
            atomic_write_text(path, "".join(keep))
        return dropped

    def roll_back_records(self, step: int, event: dict[str, Any]) -> list[dict[str, Any]]:
        """A rollback in the loop to the checkpoint of `step`: metrics.jsonl keeps the records up to `step`, as a
        resume's cut does (the steps after it are trained and logged again, so each step keeps one record), and the
        records it drops go, with `event` (from_step, to_step, reason), as one line into rollbacks.jsonl, so the
        rolled-back steps stay visible. Returns the dropped records. Before, both copies of the steps stayed in
        metrics.jsonl, the rolled-back ones first."""
        self.flush()  # the lines logged so far reach the file (and a resume's pending cut is made)
        if self._metrics is not None:  # the file is replaced below: the next line opens the new one
            with contextlib.suppress(OSError):
                self._metrics.close()
            self._metrics = None
        dropped = self._cut_records_after(step)
        self.written = True
        target = self.path / ROLLBACKS
        try:
            with open_append(target) as f:
                f.write(strict_json.dumps({**event, "records": dropped}) + "\n")
                f.flush()
                os.fsync(f.fileno())
        except OSError as exc:
            raise RunDirError(one_line(f"cannot write {target}: {os_reason(exc)}")) from None
        return dropped

    def clear(self, names: tuple[str, ...]) -> None:
        """Delete these entries of the folder (--overwrite: an earlier run's files); others are left alone."""
        self.written = True
        for name in names:
            p = self.path / name
            try:
                if p.is_dir() and not p.is_symlink():
                    shutil.rmtree(p)
                elif p.exists() or p.is_symlink():
                    p.unlink()
            except OSError as exc:
                raise RunDirError(one_line(f"cannot remove {p}: {os_reason(exc)}")) from None

    def close(self) -> None:
        """Close metrics.jsonl and let the folder go; a run that wrote nothing leaves it as it was."""
        if self._metrics is not None:
            with contextlib.suppress(OSError):  # the last line could not be flushed: the disk is full
                self._metrics.close()
            self._metrics = None
        if self._lock is not None:
            run_lock.release(self._lock, restore=not self.written)
            self._lock = None
            if self._made and not self.written:
                with contextlib.suppress(OSError):  # only if empty: something else may have written here
                    self.path.rmdir()

    def __del__(self) -> None:  # a run that ended in an exception never called close(): let the folder go
        with contextlib.suppress(Exception):
            self.close()
