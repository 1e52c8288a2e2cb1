"""What does this folder hold? A `stride train` run, `stride bench` results, a `stride sweep`, a data store.

`stride bench --out RUN` and `stride sweep --out RUN` used to write results.json, report.html, points/ ...
into a finished `stride train` run (and `stride train --out BENCHDIR` its summary.json beside a bench's
results.json); `stride report` and `stride compare` then read one in place of the other, and a sweep
replaced a bench's results.json. Now every command that writes such a folder asks `refuse_others` first,
before it creates or locks anything: a folder holding another command's results is refused with one line
naming what it holds; a folder holding the command's own kind is left to that command's rules (resume,
finished, refused as before).

What marks each kind, at the folder's top level only (a bench's `<workload>/` and a sweep's `runs/<id>/` are
ordinary run folders inside it):

- train: summary.json, a non-empty metrics.jsonl, or a checkpoint folder `checkpoints/step_NNNNNNNN` (the
  default `checkpoint.dir`; `stride sweep --export-to` writes only that);
- sweep: sweep.json, or a results.json whose suite is "sweep";
- bench: any other results.json (its suite is named);
- store: a `stride data ingest` store (manifest.json whose format is stride.files.store_marker.FORMAT). No
  command writes into one, and `stride data ingest --out STORE --overwrite` replaces the whole folder: a run
  written there was deleted without a word (audit 7, #5).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from stride.errors import StrideError
from stride.files.step_names import holds_steps
from stride.files.store_marker import is_store

COMMANDS = ("train", "bench", "sweep")
KINDS = (*COMMANDS, "store")  # every kind `what_it_holds` finds; a store is no command's own
_WHAT = {"train": "a `stride train` run", "bench": "`stride bench` results", "sweep": "a `stride sweep`",
         "store": "a stride data store"}
_STORE_WHY = "`stride data ingest --out` of that folder with --overwrite would delete what is written there"


class FolderHoldsOther(StrideError):
    """The folder holds another command's results; writing there would mix the two (exit status 2, one line)."""

    exit_code = 2


@dataclass(frozen=True)
class Held:
    kind: str  # "train" | "bench" | "sweep" | "store"
    evidence: str  # the files that say so, e.g. "summary.json", "results.json, suite 'quick'"
    suite: str | None = None  # results.json's suite, where there is one

    def describe(self) -> str:
        return f"{_WHAT[self.kind]} ({self.evidence})"


def _results_suite(path: Path) -> str | None:
    """results.json's suite; None where it does not parse or names none."""
    try:
        obj = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError):  # nested thousands deep: it was a traceback of `stride report DIR`
        return None
    suite = obj.get("suite") if isinstance(obj, dict) else None
    return suite if isinstance(suite, str) else None


def what_it_holds(folder: str | Path, checkpoint_dirs: tuple[str, ...] = ("checkpoints",)) -> list[Held]:
    """The kinds of results in `folder` (none for a missing or empty folder, or one holding other files);
    `checkpoint_dirs`: relative folders whose `step_NNNNNNNN` entries mark a train run."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    held: list[Held] = []
    train = []
    if (folder / "summary.json").is_file():
        train.append("summary.json")
    metrics = folder / "metrics.jsonl"
    if metrics.is_file() and metrics.stat().st_size > 0:
        train.append("metrics.jsonl")
    for d in dict.fromkeys(checkpoint_dirs):
        if not Path(d).is_absolute() and holds_steps(folder / d):
            train.append(f"checkpoints in {d}/")
    if train:
        held.append(Held("train", ", ".join(train)))
    results = folder / "results.json"
    suite = _results_suite(results) if results.is_file() else None
    if (folder / "sweep.json").is_file() or suite == "sweep":
        held.append(Held("sweep", "sweep.json" if (folder / "sweep.json").is_file() else "results.json, suite 'sweep'",
                         suite))
    elif results.is_file():
        held.append(Held("bench", f"results.json, suite {suite!r}" if suite else "results.json", suite))
    if is_store(folder, through_symlink=True):
        held.append(Held("store", "manifest.json"))
    return held


def others(folder: str | Path, command: str, checkpoint_dirs: tuple[str, ...] = ("checkpoints",)) -> list[Held]:
    """What `folder` holds that is not `command`'s own kind."""
    if command not in COMMANDS:
        raise ValueError(f"command {command!r} is not one of {COMMANDS}")
    return [h for h in what_it_holds(folder, checkpoint_dirs) if h.kind != command]


def refuse_others(folder: str | Path, command: str, option: str = "--out", *, kinds: tuple[str, ...] | None = None,
                  writes: str | None = None, why: str | None = None,
                  checkpoint_dirs: tuple[str, ...] = ("checkpoints",)) -> None:
    """FolderHoldsOther if `folder` holds results of another command than `command` (or, with `kinds`, of any
    of those kinds; `writes`: what the command would write there, `why`: what mixing them would break, in
    words). Nothing is written."""
    found = (others(folder, command, checkpoint_dirs) if kinds is None
             else [h for h in what_it_holds(folder, checkpoint_dirs) if h.kind in kinds])
    if not found:
        return
    held = " and ".join(h.describe() for h in found)
    mine = writes or {"train": "a training run", "bench": "bench results", "sweep": "a sweep"}[command]
    if why is None:
        why = (_STORE_WHY if all(h.kind == "store" for h in found)
               else "`stride report` or `stride compare` of that folder would read one in place of the other")
    raise FolderHoldsOther(f"{option} {folder} holds {held}: writing {mine} there would mix the two, and {why}; "
                           f"nothing was written; use another {option}")
