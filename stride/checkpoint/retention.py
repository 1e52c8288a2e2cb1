"""What a run may delete in its checkpoint folder: only its own committed checkpoints, never the newest valid one.

Retention used to count the newest K step folders, whatever they were: a stray `step_00000099` (no
manifest) made a run delete all of its own saves, two truncated checkpoints on top made a restarted run
delete each new save, and `resume = never` on a finished run's folder deleted that run's checkpoints.
Now:

- a checkpoint belongs to a *lineage*: a run that starts from nothing draws a new id, a run that resumes
  (or rolls back) takes the id of the checkpoint it loaded; the manifest records it (and `meta.json`, for
  a folder whose manifest was damaged). A checkpoint from before lineages (no id) counts as the lineage
  of a run that resumed from such a checkpoint.
- `keep_last` counts this lineage's checkpoints that verify (sizes; with `verify = "checksum"` the
  checksums too, once per checkpoint: a file whose size, mtime or inode changes is checked again), newest
  first; `keep_every` keeps its multiples. Only this lineage's other checkpoints *older* than the newest
  kept one are deleted (a corrupt newer one stays until a save of that step replaces it). A folder without
  a stride manifest, or another lineage's, is never touched.
- a save of a step whose folder exists replaces it only if that folder is this lineage's, or a stride
  checkpoint no run can resume from (corrupt, truncated, a refused `.metadata`); anything else (a folder
  stride did not write, another run's valid checkpoint) fails the save with a message instead.
- deleting renames the folder to a tagged `.trash-stride-<host>-<pid>-...` name first, so a kill midway
  never leaves a step folder that is half gone.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from stride.checkpoint.manifest import FORMATS, MANIFEST
from stride.checkpoint.safe_read import META, check_checkpoint
from stride.files.owner import tagged_name


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        m = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError):
        return None
    return m if isinstance(m, dict) else None


def read_manifest(folder: Path) -> dict[str, Any] | None:
    """The folder's manifest if it is a stride checkpoint manifest (not checked against the files)."""
    m = _read_json(folder / MANIFEST)
    return m if m is not None and isinstance(m.get("format"), str) and m["format"] in FORMATS else None


def written_by(folder: Path) -> dict[str, Any] | None:
    """What says who wrote a step folder: its manifest, else (a damaged manifest) stride's `meta.json`
    (which holds the config hash and, since lineages, the lineage id); None when neither is stride's."""
    m = read_manifest(folder)
    if m is not None:
        return m
    meta = _read_json(folder / META)
    return meta if meta is not None and "config_hash" in meta and "step" in meta else None


def signature(folder: Path) -> tuple:
    """Name, size, mtime and inode of every file: a checkpoint whose signature is unchanged need not be re-hashed."""
    try:
        return tuple(sorted((p.name, st.st_size, st.st_mtime_ns, st.st_ino)
                            for p in folder.iterdir() if p.is_file() and (st := p.stat())))
    except OSError:
        return ()


class Lineage:
    """This run's lineage id, which checkpoints are its own, and which of them verified (cached by signature)."""

    def __init__(self, checksums: bool) -> None:
        self.id = os.urandom(8).hex()
        self.legacy = False  # resumed from a checkpoint written before lineages: id-less manifests are ours too
        self.checksums = checksums
        self._verified: dict[str, tuple] = {}

    def adopt(self, manifest: dict[str, Any] | None) -> None:
        """Resuming (or rolling back to) a checkpoint continues its lineage."""
        lid = (manifest or {}).get("lineage")
        if isinstance(lid, str) and lid:
            self.id = lid
        else:
            self.legacy = True

    def owns(self, manifest: dict[str, Any] | None) -> bool:
        if manifest is None:
            return False
        lid = manifest.get("lineage")
        return lid == self.id or (self.legacy and lid is None)

    def mark_verified(self, folder: Path) -> None:
        self._verified[folder.name] = signature(folder)

    def verified(self, folder: Path, step: int) -> bool:
        sig = signature(folder)
        if sig and self._verified.get(folder.name) == sig:
            return True
        if check_checkpoint(folder, step, self.checksums).ok:
            self._verified[folder.name] = sig
            return True
        return False


def may_replace(folder: Path, step: int, lineage: Lineage) -> str:
    """'' if a save of `step` may replace the existing `folder`; otherwise why not (for the error message)."""
    who = written_by(folder)
    if lineage.owns(who):
        return ""  # this run's own (a re-save after a rollback, or its corrupted copy)
    if who is None:
        return "it holds no stride checkpoint (no manifest.json or meta.json of stride's)"
    if not check_checkpoint(folder, step, lineage.checksums).ok:
        return ""  # a stride checkpoint that no run can resume from (corrupt, truncated, crafted)
    return "it is a valid checkpoint of another run (another lineage)"


def remove_folder(root: Path, folder: Path) -> None:
    """Rename to a tagged trash name (atomic: the step folder is gone at once), then delete."""
    trash = root / tagged_name("trash", folder.name)
    folder.rename(trash)
    shutil.rmtree(trash, ignore_errors=True)


def retain(root: Path, steps: list[int], folder_of, lineage: Lineage, keep_last: int, keep_every: int) -> list[int]:
    """Delete this lineage's checkpoints that retention no longer keeps; returns the steps deleted.

    `steps`: the step folders found, newest first; `folder_of(step)` their paths."""
    ours = [s for s in steps if lineage.owns(written_by(folder_of(s)))]
    valid: list[int] = []
    for s in ours:
        if len(valid) >= max(1, keep_last):
            break
        if lineage.verified(folder_of(s), s):
            valid.append(s)
    if not valid:
        return []  # nothing of ours verifies: delete nothing
    keep = set(valid)
    if keep_every:
        keep |= {s for s in ours if s % keep_every == 0}
    gone = []
    for s in ours:
        if s not in keep and s < valid[0]:
            try:
                remove_folder(root, folder_of(s))
                gone.append(s)
            except OSError:
                pass
    return gone
