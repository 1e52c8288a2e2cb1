"""The manifest that makes a checkpoint folder valid: step, files, sizes and SHA-256 checksums.

It is written last, after every shard and metadata file is on disk, into the temporary folder that
is then renamed into place; so a folder with a manifest whose checksums match is complete, and
anything else (a crash mid-save, a truncated or edited file) is refused before DCP reads a byte.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MANIFEST = "manifest.json"
FORMAT = "stride-checkpoint/1"
_CHUNK = 1 << 22


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def sha256_files(paths: list[Path]) -> list[str]:
    """Checksums of several files in parallel (hashlib releases the GIL on large buffers)."""
    if len(paths) <= 1:
        return [sha256_file(p) for p in paths]
    with ThreadPoolExecutor(max_workers=min(len(paths), os.cpu_count() or 1)) as pool:
        return list(pool.map(sha256_file, paths))


def fsync_path(path: Path) -> None:
    """fsync a file or a directory (the latter makes a rename or a new entry durable)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_manifest(folder: Path, step: int, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Checksum every file under `folder` and write manifest.json (via a temp name, fsynced)."""
    paths = [p for p in sorted(folder.rglob("*"))
             if p.is_file() and p.name != MANIFEST and not p.name.startswith(f".{MANIFEST}")]
    files = {p.relative_to(folder).as_posix(): {"bytes": p.stat().st_size, "sha256": h}
             for p, h in zip(paths, sha256_files(paths), strict=True)}
    manifest = {"format": FORMAT, "step": step, "created_unix": time.time(), "files": files, **(extra or {})}
    tmp = folder / f".{MANIFEST}.tmp"
    with open(tmp, "w") as f:
        json.dump(manifest, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, folder / MANIFEST)
    fsync_path(folder)
    return manifest


@dataclass
class Verdict:
    ok: bool
    reason: str  # why it is not valid ("" when it is)
    manifest: dict[str, Any] | None = None


def verify(folder: Path, step: int | None = None, checksums: bool = True) -> Verdict:
    """Is `folder` a complete checkpoint? Checks the manifest, then every file's size (and SHA-256)."""
    mpath = folder / MANIFEST
    if not mpath.is_file():
        return Verdict(False, "no manifest.json (the save never committed)")
    try:
        manifest = json.loads(mpath.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        return Verdict(False, f"manifest.json is not valid JSON ({exc.msg if hasattr(exc, 'msg') else exc})")
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        return Verdict(False, f"manifest.json is not a {FORMAT} manifest")
    files = manifest.get("files")
    if not isinstance(files, dict) or ".metadata" not in files:
        return Verdict(False, "manifest.json lists no DCP .metadata file")
    if step is not None and manifest.get("step") != step:
        return Verdict(False, f"manifest says step {manifest.get('step')!r} but the folder is step {step}")
    for rel, info in files.items():
        p = folder / rel
        if not p.is_file():
            return Verdict(False, f"{rel} is missing")
        size = p.stat().st_size
        if size != info.get("bytes"):
            return Verdict(False, f"{rel} has {size} bytes, the manifest says {info.get('bytes')}")
    if checksums:
        rels = list(files)
        for rel, h in zip(rels, sha256_files([folder / r for r in rels]), strict=True):
            if h != files[rel].get("sha256"):
                return Verdict(False, f"{rel} does not match its SHA-256 checksum (corrupted)")
    return Verdict(True, "", manifest)
