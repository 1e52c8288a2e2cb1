"""A sweep directory: the plan, one result file per finished point, and each point's final state.

    DIR/sweep.json              what is swept: base config, --set, --grid, the points (id, values)
    DIR/points/<id>.json        a finished point's summary and log, written atomically (temporary name,
                                fsync, rename), so a killed sweep leaves complete files or none
    DIR/points/<id>.state.pt    its final model and optimizer state (tensors only), written before the
                                .json: a point whose .json exists can always be exported
    DIR/runs/<id>/              the run directory of a point trained one by one (--pack 1)
    DIR/failed/<id>.json        a point whose pack raised (not a config error): the error in one line, its pack, the
                                traceback's file (DIR/failed/pack-<k>.txt); deleted when the point finishes, the
                                traceback once no record names it (at the end of the sweep)

A point is finished exactly when its .json exists; resuming skips those and trains the rest. A point file is
checked when it is read (`point_problem`: what the report and the statistics read, a known status, finite
numbers): point files are written whole, so one that does not parse or fails the check was edited or damaged,
and the sweep refuses it in one line naming the file (exit status 2) rather than train it again over the
evidence or leave it out of the statistics without a word (audit 7, #10); deleting it retrains the point. A
directory
holding another sweep (other points) is refused rather than mixed (one holding a train run or bench results:
stride.files.folder_kind, asked by `stride sweep` first). A state file is read with torch's weights-only
loader only, and one it cannot load (crafted, damaged, missing) is one line naming the file and how to train
the point again (`load_state`).

Point ids hash only the grid values, so each point file also carries the config_hash of the point's config as
the plan has it (`plan_config_hash`; `config_hash` in files written before: its summary's config_hash is another,
of the config the run trained with, see PLAN_HASH), and a point file whose hash is not the plan's for that id is
refused: with sweep.json deleted (the way around "holds another sweep"), a sweep of another base config or --set
took the old points as finished and ranked them beside its own (audit 10, F4). Point files written before the field are
not checked for it. A sweep.json or packs.jsonl that parses but has the wrong shape is one line naming the file
(SweepFileError), as a damaged point file is. Each is read through stride.files.input_file: a regular file only (a
FIFO or a link to /dev/zero is refused in one line, never read: one filled the memory, audit 14 M3) and up to a
size (PLAN_MAX_BYTES, POINT_MAX_BYTES, PACK_LOG_MAX_BYTES) far above what a sweep writes.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import pickle
import re
from pathlib import Path
from typing import Any

import torch

from stride.config import config_hash
from stride.config.errors import ConfigError
from stride.data.build import SPLIT_VERSION
from stride.errors import StrideError
from stride.files import strict_json
from stride.files.input_file import InputFileError, InputFileMissing, read_input_text
from stride.metrics.run_dir import atomic_write_text
from stride.sweep.grid import Axis, Point

SCHEMA = "stride.sweep"
VERSION = 1


STATE_KEYS = ("model", "optim", "step", "data")  # a point's state (PackedTrainer.model_state, export.solo_state)
# what a sweep's files may weigh: sweep.json holds ~200 bytes a point (a million-point grid: 200 MB), a point file a
# few KiB (its summary and log), packs.jsonl ~250 bytes a pack
PLAN_MAX_BYTES, POINT_MAX_BYTES, PACK_LOG_MAX_BYTES = 1 << 30, 256 << 20, 256 << 20
FAILED_DIR = "failed"  # DIR/failed/: the points whose last attempt failed, and their packs' tracebacks


class SweepStateError(StrideError):
    """A finished point's state file is missing, damaged or not stride's (one line, exit status 2)."""

    exit_code = 2


class SweepPointError(StrideError):
    """A point file (points/<id>.json) that does not hold a finished point: edited or damaged (exit status 2)."""

    exit_code = 2


class SweepFileError(StrideError):
    """sweep.json or packs.jsonl holds JSON of the wrong shape: edited or damaged (exit status 2, one line)."""

    exit_code = 2


# A point file's hash of its config as the sweep's plan has it (sweep.json's points' config_hash: the base config,
# --set and the grid values). Its summary's own `config_hash` is of the config the run trained with, which the sweep
# adjusts for display (metrics.progress off): another hash of another config, so this one has its own name. Point
# files written before it was renamed hold it as `config_hash` (OLD_PLAN_HASH), still read.
PLAN_HASH, OLD_PLAN_HASH = "plan_config_hash", "config_hash"


def plan_hash_of(obj: dict[str, Any]) -> Any:
    """A point file's plan config hash, under its name or the one it had before (None: written before either)."""
    return obj.get(PLAN_HASH, obj.get(OLD_PLAN_HASH))


STATUSES = ("done", "target", "diverged")  # how a point ends (stride.sweep.jobs, stride.sweep.packed_train)
MODES = ("solo", "packed")
# summary numbers the report computes with (None: not measured, or non-finite when written: strict_json's null)
SUMMARY_NUMBERS = ("final_val_loss", "final_train_loss", "steps", "diverged_at_step", "time_to_target_s",
                   "samples_per_s", "step_time_s", "train_time_s", "wall_time_s", "peak_mem_bytes", "params")
# a loss is mse, huber or pinball: never below 0 (a final_val_loss of -1e308 ended the report in an OverflowError)
NON_NEGATIVE = ("final_val_loss", "final_train_loss", "steps", "diverged_at_step", "time_to_target_s", "samples_per_s",
                "step_time_s", "train_time_s",
                "wall_time_s", "peak_mem_bytes", "params", "one_by_one_s")


def _number_problem(where: str, key: str, v: Any) -> str | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float):
        return f"{where}{key} is {json.dumps(v)[:40]}, not a number"
    if not math.isfinite(v):
        return f"{where}{key} is {v} (stride writes a non-finite value as null)"
    if key in NON_NEGATIVE and v < 0:
        return f"{where}{key} is {v}, below 0"
    return None


def point_problem(obj: Any, pid: str, values: dict[str, Any] | None = None) -> str | None:
    """What makes `obj` (a point file's content) not a finished point `pid` (with the plan's `values`, if given);
    None when it is one. Checked: every key the report and the statistics read, with its type, and finite
    numbers (a NaN loss stopped the sweep's summary with a traceback from `statistics`)."""
    if not isinstance(obj, dict):
        return f"holds a JSON {type(obj).__name__}, not a point's result"
    if obj.get("id") != pid:
        return f"its id is {json.dumps(obj.get('id'))[:40]}, not {pid!r}"
    s = obj.get("summary")
    if not isinstance(s, dict) or not s:
        return "its summary is empty" if isinstance(s, dict) else "it has no summary"
    if s.get("status") not in STATUSES:
        return f"summary.status is {json.dumps(s.get('status'))[:40]}, not one of {', '.join(STATUSES)}"
    for key in SUMMARY_NUMBERS:
        if why := _number_problem("summary.", key, s.get(key)):
            return why
    if why := _number_problem("", "one_by_one_s", obj.get("one_by_one_s")):
        return why
    if not isinstance(obj.get("label"), str) or not isinstance(obj.get("values"), dict):
        return "its label or values are missing"
    for key in (PLAN_HASH, OLD_PLAN_HASH):
        if obj.get(key) is not None and not isinstance(obj[key], str):
            return f"its {key} is {json.dumps(obj[key])[:40]}, not text"
    if values is not None and obj["values"] != values:
        return f"its values {json.dumps(obj['values'])[:80]} are not the plan's {json.dumps(values)[:80]}"
    if obj.get("mode") not in MODES:
        return f"mode is {json.dumps(obj.get('mode'))[:40]}, not one of {', '.join(MODES)}"
    pack = obj.get("pack")
    if not (isinstance(pack, dict) and all(type(pack.get(k)) is int and pack[k] >= 0 for k in ("index", "size"))):
        return "its pack (index, size) is missing or not whole numbers"
    return history_problem(s, obj.get("history"))


def history_problem(s: dict[str, Any], history: Any) -> str | None:
    """Where the summary disagrees with the point's own log (`history`, as the run wrote both): its final val loss
    is the last logged val_loss, its final train loss the train loss logged at its last step (where one was), and
    no entry is past its steps. A hand edit of `summary.final_val_loss` re-ranked the sweep without a word."""
    if history is None:
        return None
    if not (isinstance(history, list) and all(isinstance(h, dict) for h in history)):
        return "its history is not a list of tables"
    steps = [h["step"] for h in history if type(h.get("step")) is int]
    if s.get("steps") is not None and steps and max(steps) > s["steps"]:
        return f"summary.steps is {s['steps']}, but its history goes to step {max(steps)}"
    vals = [h for h in history if "val_loss" in h]
    v = s.get("final_val_loss")
    if v is not None and vals and vals[-1]["val_loss"] != v:
        return (f"summary.final_val_loss is {v}, but its history's last val_loss (step {vals[-1].get('step')}) is "
                f"{vals[-1]['val_loss']}")
    train = [h for h in history if "loss" in h]
    t = s.get("final_train_loss")
    if t is not None and train and train[-1].get("step") == s.get("steps") and train[-1]["loss"] != t:
        return (f"summary.final_train_loss is {t}, but its history's loss at step {s.get('steps')} is "
                f"{train[-1]['loss']}")
    return None


def _why_not_loaded(exc: BaseException) -> str:
    """Why torch could not load a state file, in words of our own (torch's message advises weights_only=False)."""
    text = str(exc)
    if isinstance(exc, pickle.UnpicklingError) or "weights_only" in text.lower():
        m = re.search(r"(?:unsupported GLOBAL|Unsupported global: GLOBAL)\s+([\w.]+)", text, re.IGNORECASE)
        return f"its pickle asks for {m.group(1)}, which a state file never holds" if m else \
            "its pickle holds something other than tensors and plain values"
    if "zip archive" in text or "central directory" in text or isinstance(exc, EOFError):
        return "not a complete zip archive: truncated or overwritten"
    if isinstance(exc, OSError):
        return exc.strerror or type(exc).__name__
    return f"{type(exc).__name__}"


def _retrain(root: Path, pid: str) -> str:
    return (f"to train the point again, delete {root}/points/{pid}.json and {pid}.state.pt and run the same sweep "
            "command again")


def _failure_record(path: Path) -> dict[str, Any]:
    """A failed point's record (DIR/failed/<id>.json); InputFileError, ValueError (not JSON, not a JSON object) or
    RecursionError where it cannot be one."""
    rec = json.loads(read_input_text(path, limit=POINT_MAX_BYTES, what="failure record"))
    if not isinstance(rec, dict):
        raise ValueError("not a JSON object")
    return rec


class SweepStore:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.points_dir = self.root / "points"
        self.values: dict[str, dict[str, Any]] = {}  # each point's grid values, as the plan has them (JSON types)
        self.hashes: dict[str, str] = {}  # each point's config_hash, as the plan has it

    # -- the plan ------------------------------------------------------------------------------
    def plan(self, config: str | None, overrides: list[str], axes: list[Axis], points: list[Point]) -> dict[str, Any]:
        return {"schema": SCHEMA, "version": VERSION, "split_version": SPLIT_VERSION, "config": config,
                "overrides": list(overrides),
                "grid": [a.text for a in axes], "axes": [{"key": a.key, "values": a.values} for a in axes],
                "points": [{"id": p.id, "values": p.values, "config_hash": config_hash(p.config)}
                           for p in points]}  # config_hash reads config_view: 4x faster than asdict

    def open(self, plan: dict[str, Any]) -> int:
        """Create the directory, or check it holds this sweep; returns how many points are already finished."""
        path = self.root / "sweep.json"
        if path.exists():  # a FIFO or a link to /dev/zero too (read_input_text refuses them); a link to nothing: none
            try:
                old = json.loads(read_input_text(path, limit=PLAN_MAX_BYTES, what="sweep plan"))
            except InputFileError as exc:  # a FIFO, /dev/zero, a directory, too large, not UTF-8: never read whole
                raise SweepFileError(f"{exc}; use another --out") from None
            except (ValueError, RecursionError) as exc:
                raise ConfigError(f"{path}: not a stride sweep file ({exc}); use another --out") from None
            if why := _plan_problem(old):
                raise SweepFileError(f"{path}: not a stride sweep file ({why}); use another --out") from None
            mine = [(p["id"], p["config_hash"]) for p in plan["points"]]
            theirs = [(p.get("id"), p.get("config_hash")) for p in old.get("points", [])]
            if old.get("schema") != SCHEMA or mine != theirs:
                raise ConfigError(f"{self.root} holds another sweep ({_what_differs(old, plan)}); resume it with its "
                                  "own config and --grid, or use another --out")
            was = old.get("split_version", 1)  # plans written before the field are version 1
            finished = [p["id"] for p in plan["points"] if self.result_path(p["id"]).exists()]
            if was != SPLIT_VERSION and finished:
                raise ConfigError(
                    f"{self.root}: its {len(finished)} finished point(s) were validated on the data split of an "
                    f"earlier stride (split version {was}, now {SPLIT_VERSION}: the synthetic source's embargo now "
                    "counts from the last training target); their validation losses do not compare with new points': "
                    "start the sweep again in another --out")
        else:  # no sweep.json: a report file there that no sweep wrote would be replaced without a word
            for name in REPORT_FILES:
                if (self.root / name).exists() and not _sweep_wrote(self.root / name):
                    raise ConfigError(f"{self.root / name}: not a `stride sweep` report, and a sweep writes its "
                                      f"{name} there (no sweep.json beside it: no earlier sweep wrote it); move it, "
                                      "or use another --out")
        text = strict_json.dumps(plan, indent=2, default=str)
        self.values = {p["id"]: p["values"] for p in json.loads(text)["points"]}
        self.hashes = {p["id"]: p["config_hash"] for p in plan["points"]}
        # every point file is checked before sweep.json is written: a refused directory keeps the plan it had
        finished = sum(self.done(p["id"]) for p in plan["points"])
        self.points_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, text + "\n")
        return finished

    # -- points ---------------------------------------------------------------------------------
    def result_path(self, pid: str) -> Path:
        return self.points_dir / f"{pid}.json"

    def state_path(self, pid: str) -> Path:
        return self.points_dir / f"{pid}.state.pt"

    def run_dir(self, pid: str) -> Path:
        return self.root / "runs" / pid

    def done(self, pid: str) -> bool:
        return self.read(pid) is not None

    def read(self, pid: str) -> dict[str, Any] | None:
        """The finished point's result; None when it has no point file. A point file that is not a finished point
        of this sweep is SweepPointError, naming the file (module docstring)."""
        path = self.result_path(pid)
        try:
            text = read_input_text(path, limit=POINT_MAX_BYTES, what="point file")
        except InputFileMissing:
            return None
        except InputFileError as exc:  # a FIFO, /dev/zero, a directory, too large, unreadable, not UTF-8
            raise SweepPointError(f"{exc}; {_retrain(self.root, pid)}") from None
        try:
            obj = json.loads(text)
        except (ValueError, RecursionError) as exc:
            why: str | None = f"not valid JSON ({str(exc)[:80]})"
        else:
            why = point_problem(obj, pid, self.values.get(pid))
        if why is not None:
            raise SweepPointError(f"{path}: {why}: not a finished point of this sweep (point files are written "
                                  f"whole: it was edited or damaged); {_retrain(self.root, pid)}")
        mine, theirs = self.hashes.get(pid), plan_hash_of(obj)
        if mine is not None and theirs is not None and theirs != mine:
            raise SweepPointError(
                f"{path}: trained with another config than this sweep's point {pid} ({PLAN_HASH} {theirs}, this "
                f"sweep's {mine}: another base config or --set, in a directory whose sweep.json is not the one it was "
                f"written with); it would be ranked beside points trained otherwise: use another --out, or "
                f"{_retrain(self.root, pid)}")
        return obj

    def plan_hash(self, pid: str) -> str | None:
        """The point's config_hash as the plan has it (written into its point file)."""
        return self.hashes.get(pid)

    def write(self, pid: str, result: dict[str, Any], state: dict[str, Any] | None) -> None:
        """The point's state (if any), then its result: each atomically, the result last."""
        if state is not None:
            tmp = self.state_path(pid).with_name(f".{pid}.state.pt.tmp-{os.getpid()}")
            torch.save(state, tmp)
            with open(tmp, "rb") as f:
                os.fsync(f.fileno())
            os.replace(tmp, self.state_path(pid))
        atomic_write_text(self.result_path(pid), strict_json.dumps(result, indent=1) + "\n")
        self.failure_path(pid).unlink(missing_ok=True)  # an earlier attempt's failure: the point is finished now

    # -- failed points ---------------------------------------------------------------------------
    def failure_path(self, pid: str) -> Path:
        return self.root / FAILED_DIR / f"{pid}.json"

    def write_failure(self, pid: str, record: dict[str, Any]) -> None:
        """Record that the point's last attempt failed (its pack raised): no point file, so a rerun trains it."""
        self.failure_path(pid).parent.mkdir(exist_ok=True)
        atomic_write_text(self.failure_path(pid), strict_json.dumps(record, indent=1) + "\n")

    def write_traceback(self, index: int, text: str) -> Path:
        """The failed pack's traceback, in the sweep folder (the line on the console holds only its last line)."""
        path = self.root / FAILED_DIR / f"pack-{index}.txt"
        path.parent.mkdir(exist_ok=True)
        atomic_write_text(path, text)
        return path

    def prune_tracebacks(self) -> int:
        """Delete the failed packs' traceback files that no failure record names any more (every point of that pack
        finished on a later attempt), and failed/ itself once empty; how many were deleted. A record that cannot be
        read keeps every traceback (nothing is deleted on a guess)."""
        folder = self.root / FAILED_DIR
        if folder.is_symlink() or not folder.is_dir():  # a link leads out of the sweep: not our files to delete
            return 0
        named: set[str] = set()
        for rec_path in folder.glob("*.json"):
            try:
                named.add(Path(str(_failure_record(rec_path)["traceback"])).name)
            except (InputFileError, ValueError, RecursionError, KeyError):
                return 0
        gone = 0
        for tb in folder.glob("pack-*.txt"):
            if tb.name not in named:
                tb.unlink(missing_ok=True)
                gone += 1
        with contextlib.suppress(OSError):  # not empty: records of points still failed
            folder.rmdir()
        return gone

    def failures(self, ids: list[str]) -> list[dict[str, Any]]:
        """The failure records of the points among `ids` that are not finished (their last attempt failed). A record
        that cannot be read is still a failure: it says so rather than hide the point."""
        out = []
        for pid in ids:
            path = self.failure_path(pid)
            if not path.exists() or self.result_path(pid).exists():
                continue
            try:
                rec = _failure_record(path)
            except (InputFileError, ValueError, RecursionError) as exc:
                rec = {"id": pid, "error": f"(its failure record {path} is unreadable: {str(exc)[:80]})"}
            out.append(rec)
        return out

    def load_state(self, pid: str) -> dict[str, Any]:
        """The finished point's state, read by torch's restricted (weights-only) unpickler. A file it refuses (a
        crafted pickle), a damaged one (truncated, not a zip) or one without a point's keys is one line,
        SweepStateError, never torch's traceback (whose advice is to load it with the unsafe unpickler)."""
        path = self.state_path(pid)
        where = str(path)
        if not self.done(pid):
            raise ConfigError(f"point {pid} is not finished in {self.root} (no {pid}.json in points/): not trained "
                              "yet; run the sweep to the end, then export it")
        if not path.is_file():
            raise SweepStateError(
                f"{where} is missing, though the point finished ({pid}.json is there): its state cannot be "
                f"exported, and the sweep does not train a finished point again; to retrain it, delete "
                f"{self.root}/points/{pid}.json and run the same sweep command again")
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as exc:  # noqa: BLE001 (every way a file can fail to load is this one line)
            raise SweepStateError(f"{where} is damaged or not a stride state file ({_why_not_loaded(exc)}; refused: "
                                  f"nothing in it was run); {_retrain(self.root, pid)}") from None
        missing = [k for k in STATE_KEYS if not (isinstance(state, dict) and k in state)]
        if missing or not isinstance(state["model"], dict) or not isinstance(state["optim"], dict):
            what = f"no {', '.join(missing)}" if missing else "model or optim is not a table of tensors"
            raise SweepStateError(f"{where} is not a stride state file ({what}); {_retrain(self.root, pid)}")
        return state

    def results(self, ids: list[str]) -> list[dict[str, Any]]:
        return [r for r in (self.read(i) for i in ids) if r is not None]


REPORT_FILES = ("report.html", "summary.md", "results.json", "table.parquet")  # stride.sweep.report_files writes
REPORT_MARKS = {"report.html": b"<!doctype html><meta charset='utf-8'><title>stride sweep</title>",
                "summary.md": b"# stride sweep: ", "table.parquet": b"PAR1"}


def _sweep_wrote(path: Path) -> bool:
    """Whether `path` (a report file in a folder without sweep.json) reads as `stride sweep`'s own: its first bytes,
    and for results.json and table.parquet their sweep section or columns. A sweep resumed after its sweep.json was
    deleted (to extend the grid) keeps its own report files; a user's report.html or summary.md was replaced."""
    if not path.is_file():
        return False
    try:
        with open(path, "rb") as f:
            head = f.read(256)
        if path.name == "results.json":
            obj = json.loads(read_input_text(path, limit=PLAN_MAX_BYTES, what="results file"))
            return isinstance(obj, dict) and isinstance(obj.get("sweep"), dict)
        if not head.startswith(REPORT_MARKS[path.name]):
            return False
        if path.name == "table.parquet":
            import pyarrow.parquet as pq

            return {"point", "label", "mode", "one_by_one_s"} <= set(pq.read_schema(path).names)
    except Exception:  # noqa: BLE001 (unreadable, not JSON, not parquet: not a sweep's file)
        return False
    return True


def _shown(v: Any, option: str = "", limit: int = 120) -> str:
    """A plan's value for a message: a list of options as the command line has them (`--grid a=1,2`; none: "none")."""
    if isinstance(v, list) and all(isinstance(g, str) for g in v):
        text = " ".join(f"{option} {g}" for g in v) or "none"
    else:
        text = str(v)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _what_differs(old: dict[str, Any], plan: dict[str, Any]) -> str:
    """What tells the sweep in the folder (sweep.json, `old`) from this command's (`plan`), for the refusal: its grid,
    or, with the same grid, its config file or --set, or else the configs' hashes (the same file, edited). It said
    only "other points or configs", and a user who added a seed or changed a --set had to find which."""
    if old.get("grid") != plan["grid"]:
        return f"its grid is {_shown(old.get('grid'), '--grid')}; this command's is {_shown(plan['grid'], '--grid')}"
    if old.get("config") != plan["config"]:
        return f"the same grid of another config file: {_shown(old.get('config'))}, not {_shown(plan['config'])}"
    if old.get("overrides") != plan["overrides"]:
        return (f"the same grid with other --set: {_shown(old.get('overrides'), '--set')}, not "
                f"{_shown(plan['overrides'], '--set')}")
    return "the same grid, config file and --set, but the configs differ: the config file was edited since"


def _plan_problem(obj: Any) -> str | None:
    """What makes a parsed sweep.json not a sweep plan as `SweepStore.plan` writes it (what `open` reads); None if
    it is one. It was an AttributeError traceback for a JSON list."""
    if not isinstance(obj, dict):
        return f"a JSON {type(obj).__name__}, not an object"
    points = obj.get("points", [])
    if not isinstance(points, list) or not all(isinstance(p, dict) for p in points):
        return "its points are not a list of tables"
    if not isinstance(obj.get("split_version", 1), int):
        return f"split_version is {json.dumps(obj.get('split_version'))[:40]}, not a whole number"
    return None
