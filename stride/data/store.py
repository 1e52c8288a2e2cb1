"""The on-disk store: one row-major memory-mapped matrix of named float columns, plus a manifest.

Layout of a store directory:
  manifest.json    columns, dtype, row count, time range, per-symbol row runs, sha256 of each file
  values.bin       [rows, columns] float32 (or bfloat16), symbols one after another, time-ordered
  timestamps.bin   [rows] int64 nanoseconds since the epoch

Why row-major and raw binary: a window is T consecutive rows, so a batch is one gather of whole
windows from the memory map, and opening costs nothing (no decode, unlike Parquet). Why a
manifest written last and a rename: a store is valid only once `manifest.json` exists, and the
directory only gets its name when everything in it is complete, so an interrupted ingestion leaves
at most a `.tmp-` directory that `open_store` refuses.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

FORMAT = "stride-store"
VERSION = 1
DTYPES = {"float32": (np.float32, 4), "bfloat16": (np.uint16, 2)}


class StoreError(ValueError):
    """A store that is missing, incomplete or does not match its manifest."""


def _sha256(path: Path, chunk: int = 1 << 24) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


@dataclass
class Store:
    """An opened store: `values` is a zero-copy tensor view of the memory map."""

    path: Path
    manifest: dict[str, Any]
    values: torch.Tensor  # [rows, columns]
    timestamps: np.ndarray  # [rows] int64 ns, memory-mapped
    values_map: np.memmap | None = None  # the memory map behind `values` (for page hints, pages.py)

    @property
    def columns(self) -> list[str]:
        return list(self.manifest["columns"])

    @property
    def n_rows(self) -> int:
        return int(self.manifest["n_rows"])

    def column(self, name: str) -> int:
        try:
            return self.columns.index(name)
        except ValueError:
            raise StoreError(f"{self.path}: no column {name!r}; columns are {', '.join(self.columns)}") from None

    def segments(self) -> tuple[np.ndarray, np.ndarray]:
        """(starts, stops) row runs of each symbol."""
        runs = self.manifest["symbols"]
        return np.array([r["start"] for r in runs], np.int64), np.array([r["stop"] for r in runs], np.int64)


def open_store(path: str | Path, verify: bool = False) -> Store:
    """Open a committed store; `verify` recomputes every checksum (reads every byte)."""
    path = Path(path)
    man_path = path / "manifest.json"
    if not man_path.is_file():
        hint = " (an interrupted ingestion leaves only a .tmp- directory)" if path.exists() else ""
        raise StoreError(f"{path}: not a stride store: no manifest.json{hint}")
    manifest = json.loads(man_path.read_text())
    if manifest.get("format") != FORMAT or manifest.get("version") != VERSION:
        raise StoreError(f"{path}: manifest format {manifest.get('format')!r} v{manifest.get('version')} "
                         f"is not {FORMAT} v{VERSION}")
    np_dtype, width = DTYPES[manifest["dtype"]]
    n, c = int(manifest["n_rows"]), len(manifest["columns"])
    for name, want in (("values.bin", n * c * width), ("timestamps.bin", n * 8)):
        meta = manifest["files"][name]
        f = path / name
        size = f.stat().st_size if f.exists() else -1
        if size != want or size != meta["bytes"]:
            raise StoreError(f"{f}: {size} bytes on disk, manifest expects {want}")
        if verify and _sha256(f) != meta["sha256"]:
            raise StoreError(f"{f}: sha256 differs from the manifest (the file was changed or damaged)")
    # mode "c" (copy-on-write): writable for torch, never written back to the file.
    vals = np.memmap(path / "values.bin", dtype=np_dtype, mode="c", shape=(n, c)) if n else np.zeros((0, c), np_dtype)
    t = torch.from_numpy(vals)
    if manifest["dtype"] == "bfloat16":
        t = t.view(torch.bfloat16)
    ts = np.memmap(path / "timestamps.bin", dtype=np.int64, mode="r", shape=(n,)) if n else np.zeros(0, np.int64)
    return Store(path, manifest, t, ts, vals if isinstance(vals, np.memmap) else None)


class StoreWriter:
    """Streams rows, grouped per symbol, into a temporary directory; `commit` makes it a store.

    Rows of each symbol are appended to that symbol's spool files as they arrive (files may hold
    any mix of symbols), then `commit` concatenates the spools symbol by symbol, hashing as it
    writes, writes the manifest last and renames the directory into place. Memory use is one
    input chunk, whatever the dataset size.
    """

    def __init__(self, out: str | Path, columns: list[str], dtype: str = "float32", overwrite: bool = False) -> None:
        if dtype not in DTYPES:
            raise StoreError(f"store dtype {dtype!r} is not one of {', '.join(DTYPES)}")
        self.out = Path(out)
        if self.out.exists() and not overwrite:
            raise StoreError(f"{self.out} already exists (pass --overwrite to replace it)")
        self.columns, self.dtype, self.overwrite = list(columns), dtype, overwrite
        self.tmp = self.out.parent / f".tmp-{self.out.name}-{uuid.uuid4().hex[:8]}"
        (self.tmp / "spool").mkdir(parents=True)
        self.symbols: dict[str, dict[str, Any]] = {}  # symbol -> {id, rows, first_ts, last_ts}

    def _encode(self, values: np.ndarray) -> bytes:
        if self.dtype == "bfloat16":  # round to nearest even, as torch does
            return torch.from_numpy(np.ascontiguousarray(values, np.float32)).to(torch.bfloat16).view(
                torch.int16).numpy().tobytes()
        return np.ascontiguousarray(values, np.float32).tobytes()

    def append(self, symbol: str, ts: np.ndarray, values: np.ndarray) -> None:
        """Rows of one symbol, already checked to follow that symbol's last timestamp."""
        if not len(ts):
            return
        info = self.symbols.setdefault(symbol, {"id": len(self.symbols), "rows": 0, "first_ts": int(ts[0])})
        spool = self.tmp / "spool" / str(info["id"])
        with open(f"{spool}.v", "ab") as fv, open(f"{spool}.t", "ab") as ft:
            fv.write(self._encode(values))
            ft.write(np.ascontiguousarray(ts, np.int64).tobytes())
        info["rows"] += len(ts)
        info["last_ts"] = int(ts[-1])

    def last_ts(self, symbol: str) -> int | None:
        info = self.symbols.get(symbol)
        return None if info is None else info["last_ts"]

    def commit(self, extra: dict[str, Any] | None = None) -> Path:
        runs, start = [], 0
        hashes = {"values.bin": hashlib.sha256(), "timestamps.bin": hashlib.sha256()}
        with open(self.tmp / "values.bin", "wb") as fv, open(self.tmp / "timestamps.bin", "wb") as ft:
            for symbol in sorted(self.symbols):
                info = self.symbols[symbol]
                spool = self.tmp / "spool" / str(info["id"])
                for src, dst, key in ((f"{spool}.v", fv, "values.bin"), (f"{spool}.t", ft, "timestamps.bin")):
                    with open(src, "rb") as f:
                        while block := f.read(1 << 24):
                            dst.write(block)
                            hashes[key].update(block)
                    os.remove(src)
                runs.append({"symbol": symbol, "start": start, "stop": start + info["rows"],
                             "first_ts": info["first_ts"], "last_ts": info["last_ts"]})
                start += info["rows"]
            fv.flush()
            ft.flush()
            os.fsync(fv.fileno())
            os.fsync(ft.fileno())
        (self.tmp / "spool").rmdir()
        width = DTYPES[self.dtype][1]
        first = [r["first_ts"] for r in runs]
        last = [r["last_ts"] for r in runs]
        manifest = {
            "format": FORMAT, "version": VERSION, "dtype": self.dtype, "columns": self.columns,
            "n_rows": start, "time_range_ns": [min(first, default=None), max(last, default=None)],
            "time_range": [str(np.datetime64(min(first), "ns")) if runs else None,
                           str(np.datetime64(max(last), "ns")) if runs else None],
            "symbols": runs,
            "files": {
                "values.bin": {"bytes": start * len(self.columns) * width, "sha256": hashes["values.bin"].hexdigest(),
                               "shape": [start, len(self.columns)]},
                "timestamps.bin": {"bytes": start * 8, "sha256": hashes["timestamps.bin"].hexdigest(),
                                   "shape": [start]},
            },
            **(extra or {}),
        }
        if start == 0:
            self.abort()
            raise StoreError(f"{self.out}: no rows were ingested")
        man_tmp = self.tmp / "manifest.json.part"
        man_tmp.write_text(json.dumps(manifest, indent=1))
        man_tmp.rename(self.tmp / "manifest.json")  # the store is complete only now
        if self.out.exists() and self.overwrite:
            old = self.out.parent / f".old-{self.out.name}-{uuid.uuid4().hex[:8]}"
            self.out.rename(old)
            self.tmp.rename(self.out)
            shutil.rmtree(old)
        else:
            self.tmp.rename(self.out)
        return self.out

    def abort(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)
