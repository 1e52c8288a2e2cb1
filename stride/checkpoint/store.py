"""A folder of checkpoints: atomic save (sync or async), commit, retention, and finding the newest valid one.

Layout: `<root>/step_00000040/` holds DCP shards (`__<rank>_<i>.distcp`), DCP's `.metadata`, `meta.json`
(step, config) and `manifest.json` (sizes, XXH3-128 checksums). A save writes `<root>/.tmp-step_00000040/`;
every rank checksums its own files and all ranks agree on the outcome before rank 0 writes the manifest
and renames the folder into place, so a crash or a failure on any rank leaves either the complete folder
or a `.tmp-*` one that is never loaded.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shutil
import time
import warnings
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.staging import StagingOptions

from stride.checkpoint.dcp_io import TimedStager, shard_writer
from stride.checkpoint.errors import CheckpointError
from stride.checkpoint.manifest import MANIFEST, describe_files, fsync_path, verify, write_manifest
from stride.checkpoint.safe_read import SafeFileSystemReader, SafeLoadPlanner
from stride.parallel.ranks import rank_and_world
from stride.parallel.watchdog import backend_timeout, collective

# One process without a process group is a supported case (no_dist=True), not something to warn about.
warnings.filterwarnings("ignore", message="torch.distributed is disabled, unavailable or uninitialized")
STEP_RE = re.compile(r"^step_(\d{8})$")
META = "meta.json"
SHARD_RE = re.compile(r"^__(\d+)_\d+\.distcp$")  # DCP's FileSystemWriter: __<rank>_<file index>.distcp
WRITE_THREADS = max(1, min(4, os.cpu_count() or 1))


def step_name(step: int) -> str:
    return f"step_{step:08d}"


@dataclass
class Choice:
    """The outcome of looking for a checkpoint to resume from."""

    step: int | None
    folder: Path | None
    meta: dict[str, Any] | None
    skipped: list[str] = field(default_factory=list)  # "step_00000010: <reason>"

    def describe(self) -> str:
        head = f"resuming from {self.folder.name} (the newest valid one)" if self.folder else "no valid checkpoint"
        return "; ".join([head, *(f"skipped {s}" for s in self.skipped)])


def _is_space_error(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


class CheckpointStore:
    def __init__(self, root: Path, keep_last: int = 2, keep_every: int = 0, checksums: bool = True,
                 log: Callable[[str], None] = print) -> None:
        self.root = Path(root)
        self.keep_last, self.keep_every, self.checksums = keep_last, keep_every, checksums
        self.log = log
        self.rank, self.world = rank_and_world()
        # own group: async saves on the default one corrupt gloo traffic (FACTS.md)
        self.pg = dist.new_group(backend="gloo", timeout=backend_timeout()) if self.world > 1 else None
        self.no_dist = not (dist.is_available() and dist.is_initialized())
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="stride-ckpt")
        self._inflight: Future | None = None
        self._retention: Future | None = None  # deleting old checkpoints after a sync save
        # One stager per staging mode for the store's life: it keeps CPU buffers for the whole state and
        # copies into them, which stalls less than allocating a fresh copy per save (0.12 s vs 0.3 s for
        # 350 MB here). The buffers are reused only after the previous save committed (one in flight).
        self._stagers: dict[bool, TimedStager] = {}  # by stage_in_background
        self._staging: Future | None = None  # a background staging copy still reading the live state
        self.saved_steps: list[int] = []
        self.save_seconds: list[float] = []  # wall time of each save, staging to commit
        self.last_phases: dict[str, float] = {}  # the last save's DCP write and manifest+commit seconds
        self.last_stall_parts: dict[str, float] = {}  # what the last save's stall was made of (see save)

    # -- layout -------------------------------------------------------------------------------
    def folder(self, step: int) -> Path:
        return self.root / step_name(step)

    def tmp_folder(self, step: int) -> Path:
        return self.root / f".tmp-{step_name(step)}"

    def steps(self) -> list[int]:
        """Committed-looking step folders, newest first (validity is checked separately)."""
        if not self.root.is_dir():
            return []
        found = [int(m.group(1)) for p in self.root.iterdir() if p.is_dir() and (m := STEP_RE.match(p.name))]
        return sorted(found, reverse=True)

    def _barrier(self, label: str, step: int | None = None) -> None:
        if self.pg is not None:
            with collective(label, step):
                dist.barrier(group=self.pg)

    def prepare(self) -> list[str]:
        """Create the folder, prove it is writable, remove uncommitted saves; returns what was removed."""
        removed: list[str] = []
        if self.rank == 0:
            try:
                self.root.mkdir(parents=True, exist_ok=True)
                probe = self.root / f".write-probe-{os.getpid()}"
                probe.write_bytes(b"stride")
                probe.unlink()
            except OSError as exc:
                raise CheckpointError(f"checkpoint folder {self.root} is not writable: {exc.strerror or exc} "
                                      "(set `checkpoint.dir` to a writable folder)") from exc
            for p in sorted(self.root.iterdir()):
                if p.name.startswith((".tmp-", ".trash-")):
                    shutil.rmtree(p, ignore_errors=True)
                    removed.append(f"{p.name} (a save that never committed)")
        self._barrier("checkpoint barrier (prepare the folder)")
        return removed

    # -- choosing ----------------------------------------------------------------------------------
    def newest_valid(self) -> Choice:
        """The newest checkpoint whose manifest and files check out; rank 0 decides, every rank agrees."""
        choice = Choice(None, None, None)
        if self.rank == 0:
            for step in self.steps():
                folder = self.folder(step)
                verdict = verify(folder, step, checksums=self.checksums)
                meta = None
                if verdict.ok:
                    try:
                        meta = json.loads((folder / META).read_text())
                    except (OSError, json.JSONDecodeError) as exc:
                        verdict.ok, verdict.reason = False, f"{META} unreadable ({exc})"
                if verdict.ok:
                    choice.step, choice.folder, choice.meta = step, folder, meta
                    break
                choice.skipped.append(f"{folder.name}: {verdict.reason}")
        if self.pg is not None:
            box = [choice]
            with collective("checkpoint resume-choice broadcast (rank 0 verifies checksums)"):
                dist.broadcast_object_list(box, src=0, group=self.pg)
            choice = box[0]
        return choice

    def load(self, folder: Path, make_template: Callable[[set[str]], dict[str, Any]]) -> dict[str, Any]:
        """DCP load into the template `make_template(saved keys)` builds; no arbitrary unpickling."""
        reader = SafeFileSystemReader(folder)
        keys = set(reader.read_metadata().state_dict_metadata)
        state = make_template(keys)
        with collective(f"checkpoint load (DCP) of {folder.name}"):
            dcp.load(state, storage_reader=SafeFileSystemReader(folder), planner=SafeLoadPlanner(),
                     process_group=self.pg, no_dist=self.no_dist)
        return state

    # -- saving ------------------------------------------------------------------------------------
    def save(self, state: dict[str, Any], step: int, meta: dict[str, Any], *, asynchronous: bool = False,
             stage_in_background: bool = False) -> float:
        """Save `state` as step `step`; returns the seconds the caller was blocked (the stall).

        Async saves copy the state into CPU buffers (staging), then write in the background. With
        `stage_in_background` the copy itself runs in DCP's staging thread too and this returns at
        once: the caller must call `fence()` before it next changes any tensor in `state` (the trainer
        does so before the optimizer step). `last_stall_parts` says what the stall was made of.
        """
        t0 = time.perf_counter()
        parts: dict[str, float] = {}
        self.wait()  # at most one save in flight: a new one waits for the previous to commit
        parts["wait_previous_s"] = (t1 := time.perf_counter()) - t0
        tmp = self.tmp_folder(step)
        if self.rank == 0 and tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
        self._barrier("checkpoint barrier (before the save)", step)
        parts["prepare_s"] = (t2 := time.perf_counter()) - t1
        writer = shard_writer(tmp, WRITE_THREADS)
        if asynchronous:
            stager = self._stager_for(stage_in_background)
            try:
                response = dcp.async_save(state, storage_writer=writer, process_group=self.pg, no_dist=self.no_dist,
                                          async_stager=stager)
            except (Exception, CheckpointException) as exc:
                # Staging (the CPU copy) failed here, before DCP's first collective: no vote (the other
                # ranks' writes wait for this one and end by the collective watchdog, naming the save).
                self._raise_failed(step, {self.rank: self._why(exc)}, exc)
            if hasattr(response, "staging_completion"):  # the copy runs on in DCP's staging thread
                self._staging, upload = response.staging_completion, response.upload_completion
            else:
                upload = response
                parts["stage_copy_s"] = stager.last_s
            self._inflight = self._pool.submit(self._finish, upload, stager, tmp, step, meta, t0)
            parts["launch_s"] = time.perf_counter() - t2 - parts.get("stage_copy_s", 0.0)
            self.last_stall_parts = parts
            return time.perf_counter() - t0
        err: BaseException | None = None
        t_dcp = time.perf_counter()
        try:
            with collective("checkpoint write (DCP save)", step):
                dcp.save(state, storage_writer=writer, process_group=self.pg, no_dist=self.no_dist)
        except (Exception, CheckpointException) as exc:  # DCP's CheckpointException is a BaseException
            err = exc
        self.last_phases = {"dcp_s": time.perf_counter() - t_dcp}
        self._settle(err, tmp, step, meta, t0, background=False)
        parts["write_s"] = time.perf_counter() - t2
        self.last_stall_parts = parts
        return time.perf_counter() - t0

    def _finish(self, fut: Any, stager: TimedStager, tmp: Path, step: int, meta: dict[str, Any], t0: float) -> None:
        """The background half of an async save: wait for DCP's write, then vote and commit."""
        err: BaseException | None = None
        t_dcp = time.perf_counter()
        try:
            with collective("checkpoint write (DCP async save, in the background)", step):
                fut.result()
        except (Exception, CheckpointException) as exc:  # DCP's CheckpointException is a BaseException
            err = exc
        self.last_phases = {"dcp_s": time.perf_counter() - t_dcp, "stage_copy_s": stager.last_s}
        self._settle(err, tmp, step, meta, t0, background=True)

    def _settle(self, err: BaseException | None, tmp: Path, step: int, meta: dict[str, Any], t0: float,
                background: bool) -> None:
        """After the write: every rank checksums its own files and reports; all agree, then rank 0 commits.

        A failure on any rank (DCP's write, the checksums, or rank 0's commit) reaches every rank as the
        same CheckpointError naming the failing rank; the temporary folder is removed, never renamed.
        Retention (deleting old checkpoints, 0.1-0.2 s for 350 MB here) runs in the background thread.
        """
        t_commit = time.perf_counter()
        failures = self._describe(err) if err is not None else []
        files: dict[str, dict[str, Any]] = {}
        if not failures:
            try:
                if self.rank == 0:
                    (tmp / META).write_text(json.dumps({**meta, "step": step}, indent=1))
                files = describe_files(tmp, self._own_files(tmp))
            except Exception as exc:
                failures = [(self.rank, self._why(exc))]
        self.last_phases["checksum_s"] = (t_vote := time.perf_counter()) - t_commit
        outcomes = self._gather((failures, files), "checkpoint save-outcome vote", step)
        self.last_phases["vote_s"] = time.perf_counter() - t_vote
        failed = dict(sorted({r: why for fs, _ in outcomes for r, why in fs}.items()))
        commit_error = None
        if not failed and self.rank == 0:
            commit_error = self._commit(tmp, step, meta, {k: v for _, fs in outcomes for k, v in fs.items()})
        if self.pg is not None:
            box = [commit_error]
            with collective("checkpoint commit broadcast", step):
                dist.broadcast_object_list(box, src=0, group=self.pg)
            commit_error = box[0]
        if commit_error is not None:
            failed = {0: commit_error}
        if failed:
            if self.rank == 0:
                shutil.rmtree(tmp, ignore_errors=True)
            self._raise_failed(step, failed, err)
        self.last_phases["commit_s"] = time.perf_counter() - t_commit  # checksums, vote, manifest, rename
        if self.rank == 0:
            if background:
                self._retain()
            else:
                self._retention = self._pool.submit(self._retain)
        self.saved_steps.append(step)
        self.save_seconds.append(time.perf_counter() - t0)

    def _own_files(self, tmp: Path) -> list[Path]:
        """The files this rank wrote (its DCP shards `__<rank>_<i>.distcp`); rank 0 takes every other file."""
        mine = []
        for p in sorted(tmp.rglob("*")):
            if not p.is_file() or p.name == MANIFEST or p.name.startswith(f".{MANIFEST}"):
                continue
            m = SHARD_RE.match(p.name)
            if (int(m.group(1)) if m and p.parent == tmp else 0) == self.rank:
                mine.append(p)
        return mine

    def _gather(self, outcome: Any, label: str, step: int) -> list[Any]:
        if self.pg is None:
            return [outcome]
        out: list[Any] = [None] * self.world
        with collective(label, step):
            dist.all_gather_object(out, outcome, group=self.pg)
        return out

    def _describe(self, exc: BaseException) -> list[tuple[int, str]]:
        """(failing rank, cause) pairs; DCP's CheckpointException says which ranks failed."""
        dcp_failures = getattr(exc, "failures", None) if isinstance(exc, CheckpointException) else None
        if dcp_failures:
            return [(int(r), self._why(f[0] if isinstance(f, tuple) else f)) for r, f in dcp_failures.items()]
        return [(self.rank, self._why(exc))]

    def _raise_failed(self, step: int, failed: dict[int, str], exc: BaseException | None) -> None:
        prev = next((s for s in self.steps() if s != step), None)
        intact = f"the previous checkpoint {step_name(prev)} is intact" if prev is not None else "no earlier checkpoint"
        if self.world > 1:
            causes = " " + "; ".join(f"on rank {r}: {why}" for r, why in failed.items())
        else:
            causes = ": " + "; ".join(failed.values())
        raise CheckpointError(f"checkpoint save at step {step} into {self.root} failed{causes}; {intact}") from exc

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
        last = seen[-1] if seen else exc
        return f"{type(last).__name__}: {last}"

    def _commit(self, tmp: Path, step: int, meta: dict[str, Any], files: dict[str, dict[str, Any]]) -> str | None:
        """Rank 0: manifest (from every rank's checksums), rename into place, retention; the error in words."""
        try:
            on_disk = {p.relative_to(tmp).as_posix() for p in tmp.rglob("*")
                       if p.is_file() and p.name != MANIFEST and not p.name.startswith(f".{MANIFEST}")}
            unclaimed = sorted(on_disk - set(files))  # a file no rank described (a DCP naming change): check it here
            files = {**files, **describe_files(tmp, [tmp / r for r in unclaimed])}
            write_manifest(tmp, step, {"config_hash": meta.get("config_hash"), "world_size": self.world}, files=files)
            final = self.folder(step)
            if final.exists():  # a re-save of a step (after a rollback or a corrupt copy): replace it
                trash = self.root / f".trash-{final.name}-{os.getpid()}"
                final.rename(trash)
                shutil.rmtree(trash, ignore_errors=True)
            tmp.rename(final)
            fsync_path(self.root)
        except Exception as exc:
            return f"{self._why(exc)} (while committing)"
        return None

    def _retain(self) -> None:
        steps = self.steps()
        keep = set(steps[: self.keep_last])
        if self.keep_every:
            keep |= {s for s in steps if s % self.keep_every == 0}
        for s in steps:
            if s not in keep:
                folder = self.folder(s)
                (folder / "manifest.json").unlink(missing_ok=True)  # invalid at once, then removed
                shutil.rmtree(folder, ignore_errors=True)

    def wait(self) -> None:
        """Block until the in-flight save (if any) has committed; re-raise its error here."""
        fut, self._inflight = self._inflight, None
        retention, self._retention = self._retention, None
        self._staging = None  # the write it feeds has ended, so the copy has too
        if fut is not None:
            fut.result()
        if retention is not None:
            retention.result()

    def poll(self) -> None:
        """Surface a finished async save's error without blocking (one rank only).

        With several ranks the error waits for the next save, rollback or the end, which every rank
        reaches at the same step: a rank that raised alone here would leave the others blocked.
        """
        if self.world == 1 and self._inflight is not None and self._inflight.done():
            self.wait()

    def fence(self) -> float:
        """Block until a background staging copy has finished (the state may change after); seconds waited."""
        fut, self._staging = self._staging, None
        if fut is None or fut.done():
            return 0.0
        t0 = time.perf_counter()
        with contextlib.suppress(Exception):  # a failed copy fails the save: reported by its vote, at wait()
            fut.result()
        return time.perf_counter() - t0

    @property
    def staging(self) -> bool:
        """A background staging copy is still reading the live state."""
        return self._staging is not None and not self._staging.done()

    def _stager_for(self, in_background: bool) -> TimedStager:
        """One stager per mode for the store's life: CPU buffers allocated once, reused by every save."""
        if in_background not in self._stagers:
            self._stagers[in_background] = TimedStager(StagingOptions(
                use_pinned_memory=False, use_shared_memory=False, use_async_staging=in_background,
                use_non_blocking_copy=False))
        return self._stagers[in_background]

    def close(self) -> None:
        try:
            self.wait()
        finally:
            self._pool.shutdown(wait=True)
            for stager in self._stagers.values():
                stager.close()
            self._stagers.clear()
