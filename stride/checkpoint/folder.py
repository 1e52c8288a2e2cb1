"""A checkpoint folder: its layout, its lock and clean-up at start, and finding and loading the newest valid checkpoint.

`CheckpointStore` (store.py) adds saving to it. Rank 0 looks and proposes; every other rank checks its own
view of what it will read (its shards and `.metadata`) and the ranks agree (a broadcast and a gather): with
a checkpoint folder that the nodes do not share, or whose copies differ, they all skip the same checkpoint.
"""

from __future__ import annotations

import contextlib
import errno
import os
import pickle
import re
import shutil
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException

from stride.checkpoint.errors import CheckpointError, CheckpointLoadError, ModelMismatchError
from stride.checkpoint.manifest import CHECKSUM, FORMATS, SHARD_RE, check_entries, verify
from stride.checkpoint.model_keys import keys_problem, template_names
from stride.checkpoint.retention import Lineage, read_manifest
from stride.checkpoint.safe_read import SafeFileSystemReader, SafeLoadPlanner, ShardEntryError, check_checkpoint
from stride.errors import one_line
from stride.files import run_lock
from stride.files.owner import parse, remove_abandoned, tagged_name, this_host
from stride.files.step_names import step_name, step_numbers
from stride.parallel.ranks import rank_and_world
from stride.parallel.watchdog import backend_timeout, collective

# One process without a process group is a supported case (no_dist=True), not something to warn about.
warnings.filterwarnings("ignore", message="torch.distributed is disabled, unavailable or uninitialized")
_LEFTOVER = re.compile(r"^(step_\d{8}|write-probe)$")  # what a tagged temporary name in this folder ends with
SHARED = "checkpoint.dir must be a folder every node shares (a shared filesystem, not node-local disk such as /tmp)"
T = TypeVar("T")
VIEW_WAIT_S = 3.0  # how long a rank looks again for a file another rank wrote (an NFS client's cached lookup)


@dataclass
class Choice:
    """The outcome of looking for a checkpoint to resume from."""

    step: int | None
    folder: Path | None
    meta: dict[str, Any] | None
    skipped: list[str] = field(default_factory=list)  # "step_00000010: <reason>"
    damaged: int = 0  # of the skipped, those a save committed (with a manifest): an earlier run's, not stray folders
    world_size: int | None = None  # the ranks that wrote it, from its .metadata (safe_read.saved_world)

    def describe(self) -> str:
        head = f"resuming from {self.folder.name} (the newest valid one)" if self.folder else "no valid checkpoint"
        return "; ".join([head, *(f"skipped {s}" for s in self.skipped)])


def _is_space_error(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


class CheckpointFolder:
    def __init__(self, root: Path, checksums: bool = True, log: Callable[[str], None] = print) -> None:
        self.root = Path(root)
        self.checksums = checksums
        self.log = log
        self.rank, self.world = rank_and_world()
        # own group: async saves on the default one corrupt gloo traffic (FACTS.md)
        self.pg = dist.new_group(backend="gloo", timeout=backend_timeout()) if self.world > 1 else None
        self.no_dist = not (dist.is_available() and dist.is_initialized())
        self.lineage = Lineage(checksums)  # which checkpoints are this run's (retention deletes only those)
        self._lock: Path | None = None
        # rank 0's manifest entries (shards and .metadata) and checksum of the checkpoint newest_valid chose last, and
        # the files this rank has checked in its own view of it: load() checks the rest of what it reads
        self._chosen: tuple[str, dict[str, Any], str] | None = None
        self._view_checked: tuple[str, set[str]] | None = None
        # what prepare() changed that a run which saves nothing puts back (release(restore=True)): the folders it
        # made (the topmost first) with the times of the one above them, and the checkpoint folder's own times
        self._made: list[Path] = []
        self._above: run_lock.Stamp | None = None
        self._root_before: run_lock.Stamp | None = None
        owner = [this_host(), os.getpid()]  # rank 0's, in every temporary name of this run's saves
        if self.pg is not None:
            with collective("checkpoint owner broadcast"):
                dist.broadcast_object_list(owner, src=0, group=self.pg)
        self._owner_host, self._owner_pid = owner

    # -- layout -------------------------------------------------------------------------------
    def folder(self, step: int) -> Path:
        return self.root / step_name(step)

    def tmp_folder(self, step: int) -> Path:
        return self.root / tagged_name("tmp", step_name(step), host=self._owner_host, pid=self._owner_pid)

    def steps(self) -> list[int]:
        """Committed-looking step folders, newest first (validity is checked separately)."""
        return step_numbers(self.root)

    def _barrier(self, label: str, step: int | None = None) -> None:
        if self.pg is not None:
            with collective(label, step):
                dist.barrier(group=self.pg)

    def prepare(self, fresh: bool = False) -> list[str]:
        """Create and lock the folder, prove it is writable, remove this folder's uncommitted saves (tagged
        temporary folders of processes that are gone); returns what was removed.

        `fresh` (`checkpoint.resume = never`): refuse a folder that holds valid checkpoints, which the new
        run's saves would replace or retention would mix with its own; nothing is deleted.
        """
        removed: list[str] = []
        error = None
        if self.rank == 0:
            try:
                error = self._prepare_rank0(fresh, removed)
            except Exception as exc:
                error = exc
        if self.pg is not None:
            box = [None if error is None else (type(error).__name__, str(error))]
            with collective("checkpoint prepare-outcome broadcast"):
                dist.broadcast_object_list(box, src=0, group=self.pg)
            if box[0] is not None and error is None:
                error = CheckpointError(f"on rank 0: {box[0][1]}")
        if error is not None:
            raise error
        if self.pg is not None:
            self._check_shared()
        return removed

    def _check_shared(self) -> None:
        """Every rank sees a file rank 0 wrote into the folder, or every rank refuses to start.

        With a folder on node-local disk, each save "committed" only rank 0's files and no checkpoint could
        ever be loaded: the run found out at its first restart (audit 16, H1). One small file, a broadcast and
        a gather at start."""
        name, token = None, None
        if self.rank == 0:
            name, token = tagged_name("tmp", "write-probe"), os.urandom(8).hex()
            try:
                (self.root / name).write_text(token)
            except OSError as exc:  # it was writable a moment ago: every rank refuses alike, none waits
                name, token = None, exc.strerror or str(exc)
        box = [(name, token)]
        try:
            with collective("checkpoint shared-folder probe broadcast"):
                dist.broadcast_object_list(box, src=0, group=self.pg)
            name, token = box[0]
            if name is None:
                raise CheckpointError(f"checkpoint folder {self.root} is not writable: {token} (set `checkpoint.dir` "
                                      "to a writable folder)")
            views = self.gather("" if self.rank == 0 else _sees(self.root / name, token),
                                "checkpoint shared-folder probe gather")
        finally:
            if self.rank == 0 and name is not None:
                with contextlib.suppress(OSError):
                    (self.root / name).unlink()
        bad = "; ".join(f"rank {r} {why}" for r, why in enumerate(views) if why)
        if bad:
            raise CheckpointError(f"checkpoint folder {self.root} is not the same folder on every rank: {bad}: "
                                  f"{SHARED}")

    def _prepare_rank0(self, fresh: bool, removed: list[str]) -> None:
        try:
            if not self._made and self._root_before is None:
                missing = [p for p in [self.root, *self.root.parents] if not p.exists()][::-1]  # topmost first
                if missing:
                    self._made, self._above = missing, run_lock.stamp(missing[0].parent)
                else:
                    self._root_before = run_lock.stamp(self.root)
            self.root.mkdir(parents=True, exist_ok=True)
            probe = self.root / tagged_name("tmp", "write-probe")
            probe.write_bytes(b"stride")
            probe.unlink()
        except OSError as exc:
            raise CheckpointError(f"checkpoint folder {self.root} is not writable: {exc.strerror or exc} "
                                  "(set `checkpoint.dir` to a writable folder)") from exc
        if self._lock is None and not run_lock.covered(self.root):  # inside the run folder: its lock covers it
            self._lock = run_lock.acquire(self.root, "checkpoint folder")
        # We hold the folder: a tagged leftover of another host's process is abandoned too.
        for name in remove_abandoned(self.root, other_hosts=True, own_pid=True, rest=_LEFTOVER):
            tag = parse(name)
            kind = "a save that never committed" if tag and tag.kind == "tmp" else "a deletion that never finished"
            removed.append(f"{name} ({kind})")
        if fresh:
            valid = [self.folder(s).name for s in self.steps() if verify(self.folder(s), s, checksums=False).ok]
            if valid:
                raise CheckpointError(
                    f"checkpoint.resume = never, but {self.root} holds checkpoints of an earlier run "
                    f"({', '.join(valid[:3])}{', ...' if len(valid) > 3 else ''}): refusing to start over in it, "
                    "which would replace or mix with them; use another --out (or checkpoint.dir), resume with "
                    "checkpoint.resume = auto, or move them away yourself")

    # -- choosing ----------------------------------------------------------------------------------
    def newest_valid(self, below: int | None = None, skipped: list[str] | None = None) -> Choice:
        """The newest checkpoint (older than `below`) whose manifest, files and `.metadata` check out;
        rank 0 proposes, every other rank checks the sizes and checksums of its own shards and `.metadata` in
        its view of the folder, and all agree (the files DCP reads on a rank other than rank 0 were checked
        by nobody: audit 16, H1). `.metadata` is unpickled here with the allow-list
        (safe_read.check_checkpoint), so a crafted one is skipped with the reason like a corrupted file."""
        choice = Choice(None, None, None, list(skipped or []))
        while True:
            files: dict[str, Any] = {}
            algo = CHECKSUM
            if self.rank == 0:
                for step in self.steps():
                    if below is not None and step >= below:
                        continue
                    folder = self.folder(step)
                    verdict = check_checkpoint(folder, step, self.checksums)
                    if verdict.ok:
                        choice.step, choice.folder, choice.meta = step, folder, verdict.meta
                        choice.world_size = verdict.world_size
                        manifest = verdict.manifest or {}
                        files, algo = manifest.get("files") or {}, FORMATS[manifest["format"]]
                        break
                    choice.skipped.append(f"{folder.name}: {verdict.reason}")
                    choice.damaged += int((folder / "manifest.json").exists())  # decided on rank 0, for every rank
            if self.pg is None:
                return choice
            box = [(choice, {k: v for k, v in files.items() if k == ".metadata" or SHARD_RE.match(k)}, algo)]
            with collective("checkpoint resume-choice broadcast (rank 0 verifies checksums)"):
                dist.broadcast_object_list(box, src=0, group=self.pg)
            choice, files, algo = box[0]
            if choice.folder is None:
                return choice
            self._chosen = (choice.folder.name, files, algo)
            # this rank's own path to it (the same path as rank 0's, where the folder is the same one)
            views = self.gather("" if self.rank == 0 else self._view_problem(self.folder(choice.step), files, algo),
                                "checkpoint resume-choice check (every rank verifies its own shards)")
            bad = [(r, w) for r, w in enumerate(views) if w]
            if not bad:
                return choice
            choice.skipped.append(f"{choice.folder.name}: " + "; ".join(f"in rank {r}'s view of the folder, {w}"
                                                                        for r, w in bad) + f" ({SHARED})")
            choice.damaged += 1
            below = choice.step
            choice.step = choice.folder = choice.meta = choice.world_size = None

    def gather(self, value: Any, label: str, step: int | None = None) -> list[Any]:
        """Every rank's `value`, in rank order (one all-gather on the folder's group; one process: [value])."""
        if self.pg is None:
            return [value]
        out: list[Any] = [None] * self.world
        with collective(label, step):
            dist.all_gather_object(out, value, group=self.pg)
        return out

    def _view_problem(self, folder: Path, files: dict[str, Any], algo: str) -> str:
        """'' if this rank's view of `folder` holds its own shards and `.metadata` as rank 0's manifest lists
        them (sizes, and checksums with verify = checksum); otherwise what differs, in words. A rank reads
        about 1/world of the checkpoint here, and the page cache keeps it for the load that follows."""
        mine = [".metadata", *sorted(k for k in files if (m := SHARD_RE.match(k)) and int(m.group(1)) == self.rank)]
        why = self._check_in_view(folder, files, mine, algo)
        self._view_checked = (folder.name, set(mine)) if not why else None
        return why

    def _check_in_view(self, folder: Path, files: dict[str, Any], names: list[str], algo: str) -> str:
        """'' if `names` are in this rank's view of `folder` as `files` (rank 0's manifest entries) lists them;
        otherwise what differs, in words (check_entries'), or that the folder is missing or a file unreadable."""
        try:
            if not folder.is_dir():
                return f"{folder.name} is missing"
            return check_entries(folder, files, names, algo, self.checksums)
        except OSError as exc:
            return f"{exc.filename or folder.name} cannot be read ({exc.strerror or exc})"

    def load(self, folder: Path, make_template: Callable[[set[str]], dict[str, Any]]) -> dict[str, Any]:
        """DCP load into the template `make_template(saved keys)` builds; no arbitrary unpickling, and only
        the files the manifest lists. A failure is a CheckpointLoadError naming the folder and the cause
        (on every rank: DCP's read is collective). A checkpoint whose model entries are not the template's (the
        ranks' together) is refused, ModelMismatchError (stride.checkpoint.model_keys: DCP would drop the entries
        the model lacks without a word). Loading continues the checkpoint's lineage."""
        manifest: dict[str, Any] | None = None
        listed: set[str] = set()
        names: tuple[list[str], list[str]] | None = None
        try:  # everything that can fail on one rank only is inside: every rank reaches the gather below (review)
            manifest = read_manifest(folder)
            listed = set((manifest or {}).get("files") or {})
            reader = SafeFileSystemReader(folder, listed)
            md = reader.read_metadata()
            saved = set(md.state_dict_metadata)
            state = make_template(saved)
            names = template_names(state, saved)
            local: tuple[str, str] | None = None
            if self.pg is not None and self.rank != 0:
                local = ("view", self._read_set_problem(folder, state, md, manifest or {}))
        except (Exception, CheckpointException) as exc:  # DCP's CheckpointException is a BaseException
            if self.pg is None:
                raise CheckpointLoadError(f"{folder.name}: {self._why(exc)}") from exc
            local, cause = ("error", self._why(exc)), exc
        else:
            cause = None
        ranks = [names]
        if self.pg is not None:  # every rank agrees before DCP's collective read: all load, or all fall back
            views = self.gather((local if local and local[1] else None, names),
                                "checkpoint load check (every rank verifies the files it reads)")
            if why := _load_check_problem([v for v, _ in views]):
                raise CheckpointLoadError(f"{folder.name}: {why}") from cause
            ranks = [n for _, n in views]
        # DCP reads what the template asks for: a checkpoint entry the model lacks would be dropped without a word
        why, held = keys_problem(saved, ranks)
        if why:
            raise ModelMismatchError(f"{folder.name}: {why}", held)
        try:
            with collective(f"checkpoint load (DCP) of {folder.name}"):
                dcp.load(state, storage_reader=SafeFileSystemReader(folder, listed), planner=SafeLoadPlanner(),
                         process_group=self.pg, no_dist=self.no_dist)
        except (Exception, CheckpointException) as exc:  # DCP's CheckpointException is a BaseException
            raise CheckpointLoadError(f"{folder.name}: {self._why(exc)}") from exc
        self.lineage.adopt(manifest)
        self.lineage.mark_verified(folder)
        return state

    def _read_set_problem(self, folder: Path, state: dict[str, Any], md: Any, manifest: dict[str, Any]) -> str:
        """'' if every file this rank's load will read is in its view of `folder` as rank 0's manifest lists it (sizes,
        and checksums with verify = checksum); otherwise what differs, in words.

        newest_valid has each rank check its own shards, but a rank reads other ranks' files too: what DCP saved
        once for all (a TP rank's replicated parameters and their optimizer state, DDP's whole model, a stage's
        entries a layout change moves) is read by every rank that holds it. A rank's view in which such a file held
        other bytes (a stale NFS client cache, a partial copy) loaded them unchecked: under tp = 2, rank 1 trained on
        with an embedding entry of 5e36 and exit 0 (outside audit 18). DCP's own planner says which files this rank
        reads; those not checked yet are checked here."""
        planner = SafeLoadPlanner()
        planner.set_up_planner(state, md, False)
        plan = planner.create_local_plan()
        reads = sorted({str(md.storage_data[item.storage_index].relative_path) for item in plan.items})
        done = self._view_checked[1] if self._view_checked and self._view_checked[0] == folder.name else set()
        todo = [r for r in reads if r not in done]
        if not todo:
            return ""
        if self._chosen is not None and self._chosen[0] == folder.name:
            files, algo = self._chosen[1], self._chosen[2]
        else:  # loaded without newest_valid: this rank's own view of the manifest
            files, algo = manifest.get("files") or {}, FORMATS.get(str(manifest.get("format")), CHECKSUM)
        why = self._check_in_view(folder, files, todo, algo)
        return f"{why} ({SHARED})" if why else ""

    def fall_back(self, failed: Choice, exc: BaseException) -> Choice:
        """After `failed` would not load: the next older valid checkpoint, with the reason among the skipped.

        With none left the run must not start from step 0 over a partly loaded state: CheckpointError."""
        assert failed.folder is not None and failed.step is not None
        reason = str(exc).split(": ", 1)[-1]
        choice = self.newest_valid(below=failed.step, skipped=[*failed.skipped, f"{failed.folder.name}: {reason}"])
        if choice.folder is None:
            raise CheckpointError(f"checkpoint {failed.folder} could not be loaded ({reason}) and no older valid "
                                  f"checkpoint is left in {self.root}; move it away to start from step 0") from exc
        if self.rank == 0:  # every rank would say it alike (the load failed on all of them): once, as docs say
            self.log(f"could not load {failed.folder.name} ({reason}); falling back to {choice.folder.name}")
        return choice

    def _why(self, exc: BaseException) -> str:
        """The cause in words. torch's zip writer hides ENOSPC behind 'unexpected pos', so free space is checked."""
        seen: list[BaseException] = []
        todo: list[BaseException] = [exc]
        while todo:
            e = todo.pop()
            if e in seen:
                continue
            seen.append(e)
            todo += [c for c in (e.__cause__, e.__context__) if c is not None]
            for f in (getattr(e, "failures", None) or {}).values():
                inner = f[0] if isinstance(f, tuple) else getattr(f, "exc", f)
                if isinstance(inner, BaseException):
                    todo.append(inner)
        if any(_is_space_error(e) for e in seen):
            return "the disk is full"
        prev = next(iter(self.steps()), None)
        try:
            free = shutil.disk_usage(self.root).free
            need = sum(p.stat().st_size for p in self.folder(prev).rglob("*") if p.is_file()) if prev else 1 << 20
        except OSError:
            free, need = 1, 0
        if free < need:
            return f"the disk is full ({free / 1e6:.1f} MB free, a checkpoint needs about {need / 1e6:.1f} MB)"
        for e in seen:  # torch's weights_only text (six lines advising weights_only=False): stride's one line
            if isinstance(e, ShardEntryError):
                return str(e)
            if isinstance(e, pickle.UnpicklingError) and not str(e).startswith(".metadata"):
                return "a shard entry is not what DCP wrote (an edited or mismatched .metadata, or other bytes)"
        last = seen[-1] if seen else exc
        if not str(last).strip():  # e.g. a .distcp replaced by other bytes with its checksum rewritten: "EOFError: "
            return (f"{type(last).__name__} reading its .distcp shards: one is not what DCP wrote (cut short, or "
                    "other bytes)")
        return one_line(f"{type(last).__name__}: {last}")

    def release(self, restore: bool = False) -> None:
        """Let go of the folder's lock (rank 0); `restore`: nothing was written here, leave the folder as it was
        found: the lock file's content and times, the folders prepare() made removed (while empty), and the times
        of the folder above them (or of the checkpoint folder it found), so a refused or finished rerun changes
        nothing (docs/checkpoint.md)."""
        if self._lock is not None:
            run_lock.release(self._lock, restore=restore)
            self._lock = None
        made, self._made = self._made, []
        root_before, self._root_before = self._root_before, None
        if not restore:
            return
        if made:
            for d in reversed(made):  # the deepest first; one that is not empty stays, and so do those above it
                try:
                    d.rmdir()
                except OSError:
                    return
            run_lock.put_back(made[0].parent, self._above)
        else:
            run_lock.put_back(self.root, root_before)

    def __del__(self) -> None:  # a run that ended in an exception never closed its store: let the folder go
        with contextlib.suppress(Exception):
            self.release()


def _load_check_problem(views: list[tuple[str, str] | None]) -> str:
    """What the ranks' checks before a load found, in words ('' for nothing): files that differ in a rank's view
    of the folder, or a failure (reading `.metadata`, building the template, planning) on some ranks."""
    bad = [(r, v) for r, v in enumerate(views) if v is not None]
    if not bad:
        return ""
    texts = {text for _, (_, text) in bad}
    if len(texts) == 1 and len(bad) == len(views) and bad[0][1][0] == "error":  # the same failure everywhere
        return texts.pop()
    return "; ".join(f"in rank {r}'s view of the folder, {text}" if kind == "view" else f"on rank {r}: {text}"
                     for r, (kind, text) in bad)


def look_again(see: Callable[[], T], done: Callable[[T], bool]) -> T:
    """`see()` until `done` with what it saw, or VIEW_WAIT_S passed (then its last answer): a file another rank
    wrote may be missing from this rank's view for a few seconds (an NFS client answers a lookup from its cache)."""
    deadline = time.monotonic() + VIEW_WAIT_S
    while not done(got := see()) and time.monotonic() < deadline:
        time.sleep(0.2)
    return got


def _sees(path: Path, token: str) -> str:
    """'' if `path` holds `token`; otherwise what this rank sees instead (a missing file looked for again)."""
    def read() -> str | None:  # None: not there (yet)
        try:
            text = path.read_text()
        except FileNotFoundError:
            return None
        except OSError as exc:
            return f"cannot read the file rank 0 wrote there ({path.name}: {exc.strerror or exc})"
        return "" if text == token else f"reads other bytes in the file rank 0 wrote there ({path.name})"

    got = look_again(read, lambda seen: seen is not None)
    return f"does not see the file rank 0 wrote there ({path.name})" if got is None else got
