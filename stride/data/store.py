"""The on-disk store: one row-major memory-mapped matrix of named float columns, plus a manifest.

Layout of a store directory:
  manifest.json    columns, dtype, row count, time range, per-symbol row runs, sha256 of each file and
                   digests of sampled blocks of it (checked at every open)
  values.bin       [rows, columns] float32 (or bfloat16), symbols one after another, time-ordered
  timestamps.bin   [rows] int64 nanoseconds since the epoch

Why row-major and raw binary: a window is T consecutive rows, so a batch is one gather of whole
windows from the memory map, and opening costs nothing (no decode, unlike Parquet). Why a
manifest written last and a rename: a store is valid only once `manifest.json` exists, and the
directory only gets its name when everything in it is complete, so an interrupted ingestion leaves
at most a tagged `.tmp-stride-<host>-<pid>-store-...` directory that `open_store` refuses and the next
ingestion into the same parent folder removes once its process is gone (stride.files.owner).

A manifest is input like any file: `open_store` checks its shape (dtype, columns, row count, symbol runs
that tile the rows exactly) before reading a byte, and that the data files are the store's own (no
symbolic link out of the folder); `verify` also checks every symbol run against the timestamps and
every value for NaN/inf. `StoreWriter.commit` runs the same checks on the staged store before it is moved into
place, so that nothing is committed that `open_store` refuses. `--overwrite` replaces only a folder that is a stride
store.

A store is replaced (ingest writes a new one and renames it in), never edited in place: a mapped file truncated or
overwritten in place (`truncate`, `cp` over it, `rsync --inplace`) kills the process that maps it with SIGBUS at
its next read past the new end, which Python cannot catch. `open_store` records the files it maps
(stride.data.mapped_files), and a command line gets one line naming the changed file when it dies that way
(audit 16, M3).
"""

from __future__ import annotations

import difflib
import errno
import hashlib
import json
import os
import re
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from stride.data import mapped_files
from stride.errors import StrideError, file_in_path, one_line, os_reason
from stride.files.owner import remove_abandoned, tagged_name
from stride.files.store_marker import FORMAT, is_store  # the store's marker, defined once below stride.data

VERSION = 1
DTYPES = {"float32": (np.float32, 4), "bfloat16": (np.uint16, 2)}


class StoreError(StrideError, ValueError):
    """A store that is missing, incomplete or does not match its manifest (or cannot be written)."""

    exit_code = 2


LEFTOVER = re.compile(r"^store-[0-9a-f]{8}-")  # the rest of a tagged temporary name of an ingestion


# At every open, blocks of each data file are hashed against digests the manifest recorded at commit: a file
# changed after ingestion (edited, overwritten, replaced by a same-size file) is an error before training,
# where only `--verify` (reading every byte: ~1 s a GiB here) used to notice. Small files are hashed whole;
# larger ones in 64 evenly spread 16 KiB blocks (first and last included), 1 MiB a file, so the cost does
# not grow with the store. Measured on a 256 MiB store (8M rows x 8 float32 columns; AMD EPYC, 2 cores, load
# 1.9; median of 15 alternated opens with and without the manifest's samples): the check adds 2.8 ms to an
# open with the files in the page cache, 11.4 ms with both evicted (posix_fadvise DONTNEED), against 0.3 ms
# for an open without it and 0.52 s for `--verify`. A sample, not a proof: an edit between the blocks passes
# (the NaN/inf check of the rows a run reads still stands behind it). Not mtimes: a copy (cp, rsync, a
# download) changes them and leaves the content whole.
SAMPLE_BLOCK, SAMPLE_BLOCKS = 1 << 14, 64


def _block_digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=8).hexdigest()


def sample_digests(path: Path, size: int) -> dict[str, Any]:
    """The manifest's `sample` entry of a data file of `size` bytes: block offsets and their digests."""
    if size <= SAMPLE_BLOCK * SAMPLE_BLOCKS:
        offsets = list(range(0, size, SAMPLE_BLOCK))
    else:
        offsets = [i * (size - SAMPLE_BLOCK) // (SAMPLE_BLOCKS - 1) for i in range(SAMPLE_BLOCKS)]
    with open(path, "rb") as f:
        digests = [_block_digest(os.pread(f.fileno(), SAMPLE_BLOCK, o)) for o in offsets]
    return {"block_bytes": SAMPLE_BLOCK, "offsets": offsets, "blake2b_64": digests}


def changed_block(f: Path, sample: dict[str, Any]) -> int | None:
    """The offset of the first block `sample` (from `sample_digests`) names whose bytes in `f` no longer match their
    digest; None when all match."""
    block = sample["block_bytes"]
    with open(f, "rb") as fh:
        for o, want in zip(sample["offsets"], sample["blake2b_64"], strict=True):
            if _block_digest(os.pread(fh.fileno(), block, o)) != want:
                return o
    return None


def _check_sample(path: Path, f: Path, sample: dict[str, Any], row_bytes: int) -> None:
    """Compare the blocks `sample` names with the file; a difference names the rows it covers."""
    block = sample["block_bytes"]
    if (o := changed_block(f, sample)) is not None:
        raise StoreError(f"{f}: changed after the store was committed (bytes {o}..{o + block - 1}, rows "
                         f"{o // row_bytes}..{(o + block - 1) // row_bytes}, differ from the manifest's "
                         f"digest); `stride data inspect {path} --verify` checks every byte; re-ingest "
                         "the store to repair it")


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
            folded = [c for c in self.columns if c.lower() == str(name).lower()]
            close = folded or difflib.get_close_matches(str(name), self.columns, n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise StoreError(f"{self.path}: no column {name!r}{hint}; columns are {', '.join(self.columns)}") from None

    def segments(self) -> tuple[np.ndarray, np.ndarray]:
        """(starts, stops) row runs of each symbol."""
        runs = self.manifest["symbols"]
        return np.array([r["start"] for r in runs], np.int64), np.array([r["stop"] for r in runs], np.int64)


def _check_manifest(path: Path, m: Any) -> None:
    """The manifest's shape: every field the reader uses has the type it needs, and the symbol runs tile
    [0, n_rows) in order (a run outside the data would let windows read past it)."""
    def bad(what: str) -> StoreError:
        return StoreError(f"{path / 'manifest.json'}: {what}")

    if not isinstance(m, dict) or m.get("format") != FORMAT or m.get("version") != VERSION:
        got = (m.get("format"), m.get("version")) if isinstance(m, dict) else (type(m).__name__, None)
        raise bad(f"format {got[0]!r} v{got[1]} is not {FORMAT} v{VERSION}")
    if not isinstance(m.get("dtype"), str) or m["dtype"] not in DTYPES:
        raise bad(f"dtype {m.get('dtype')!r} is not one of {', '.join(DTYPES)}")
    cols, n = m.get("columns"), m.get("n_rows")
    if not isinstance(cols, list) or not cols or not all(isinstance(c, str) and c for c in cols) \
            or len(set(cols)) != len(cols):
        raise bad("columns must be a non-empty list of distinct names")
    if type(n) is not int or n < 0:
        raise bad(f"n_rows {n!r} is not a row count")
    files = m.get("files")
    for name in ("values.bin", "timestamps.bin"):
        info = files.get(name) if isinstance(files, dict) else None
        if not isinstance(info, dict) or type(info.get("bytes")) is not int or not isinstance(info.get("sha256"), str):
            raise bad(f"files.{name} must give its bytes and sha256")
        # the shape the writer recorded must be the one n_rows and columns give (an edited shape passed
        # `inspect --verify`, outside audit of the sinks; an edited column list was blamed on values.bin's size)
        want = [n, len(cols)] if name == "values.bin" else [n]
        if "shape" in info and info["shape"] != want:
            raise bad(f"files.{name}.shape {info['shape']!r} does not match n_rows {n}"
                      + (f" x {len(cols)} columns" if name == "values.bin" else "")
                      + " (the manifest was edited; re-ingest the store to repair it)")
        smp = info.get("sample")  # absent in stores committed before sampled digests: sizes only
        if smp is not None and not (isinstance(smp, dict) and type(smp.get("block_bytes")) is int
                                    and 0 < smp["block_bytes"] <= 1 << 24 and isinstance(smp.get("offsets"), list)
                                    and len(smp["offsets"]) <= 4096
                                    and isinstance(smp.get("blake2b_64"), list)
                                    and len(smp["offsets"]) == len(smp["blake2b_64"])
                                    and all(type(o) is int and o >= 0 for o in smp["offsets"])
                                    and all(isinstance(d, str) for d in smp["blake2b_64"])):
            raise bad(f"files.{name}.sample must give block_bytes (at most 16 MiB), offsets and blake2b_64 digests, "
                      "one per offset (at most 4096)")
    runs, at = m.get("symbols"), 0
    if not isinstance(runs, list):
        raise bad("symbols must be a list of row runs")
    for k, r in enumerate(runs):
        keys = ("start", "stop", "first_ts", "last_ts")
        if not isinstance(r, dict) or not isinstance(r.get("symbol"), str) \
                or any(type(r.get(x)) is not int for x in keys):
            raise bad(f"symbol run {k} is not {{symbol, start, stop, first_ts, last_ts}}")
        if r["start"] != at or r["stop"] <= r["start"] or r["stop"] > n:
            raise bad(f"symbol run {k} ({r['symbol']!r}) covers rows [{r['start']}, {r['stop']}); the runs must tile "
                      f"rows [0, {n}) in order (next expected start {at})")
        at = r["stop"]
    if at != n:
        raise bad(f"the symbol runs end at row {at}, but the store has {n} rows")


def _verify_contents(path: Path, m: dict[str, Any], vals: np.ndarray, ts: np.ndarray) -> None:
    """`verify`: every run's first/last timestamp as the manifest says, strictly increasing inside, values finite."""
    for r in m["symbols"]:
        a, b = r["start"], r["stop"]
        if int(ts[a]) != r["first_ts"] or int(ts[b - 1]) != r["last_ts"]:
            raise StoreError(f"{path}: symbol {r['symbol']!r} rows [{a}, {b}): timestamps {int(ts[a])}.."
                             f"{int(ts[b - 1])} differ from the manifest's {r['first_ts']}..{r['last_ts']}")
        for lo in range(a, b, 1 << 22):
            hi = min(b, lo + (1 << 22) + 1)
            if (np.diff(ts[lo:hi]) <= 0).any():
                raise StoreError(f"{path}: symbol {r['symbol']!r}: timestamps not strictly increasing near row {lo}")
    for lo in range(0, len(vals), 1 << 18):
        chunk = torch.from_numpy(np.ascontiguousarray(vals[lo:lo + (1 << 18)]))
        x = chunk.view(torch.bfloat16).float() if m["dtype"] == "bfloat16" else chunk
        if not torch.isfinite(x).all():
            row = lo + int(torch.nonzero(~torch.isfinite(x))[0, 0])
            raise StoreError(f"{path}: values.bin holds NaN or inf at row {row}")


def _check_store(path: Path, manifest: Any, verify: bool = False) -> None:
    """Everything `open_store` checks before mapping a byte: the manifest's shape, and each data file inside the
    store, of the manifest's size, its sampled blocks matching (every byte's sha256 with `verify`). Also run by
    `StoreWriter.commit` on the staged store before it is moved into place, so that no store is committed that
    its reader refuses."""
    _check_manifest(path, manifest)
    width = DTYPES[manifest["dtype"]][1]
    n, c = int(manifest["n_rows"]), len(manifest["columns"])
    root = path.resolve()
    for name, want in (("values.bin", n * c * width), ("timestamps.bin", n * 8)):
        meta = manifest["files"][name]
        f = path / name
        if f.exists() and f.resolve().parent != root:
            raise StoreError(f"{f}: a link to {f.resolve()}, outside the store: refused")
        if not f.is_file():
            what = "missing" if not os.path.lexists(f) else "not a regular file"
            raise StoreError(f"{f}: {what} (the manifest expects {want} bytes; removed or replaced since the store "
                             "was committed; re-ingest the store to repair it)")
        size = f.stat().st_size
        if size != want or size != meta["bytes"]:
            raise StoreError(f"{f}: {size} bytes on disk, manifest expects {want} (truncated, replaced or missing "
                             f"since the store was committed; `stride data inspect {path} --verify` checks every "
                             "file; re-ingest the store to repair it)")
        if meta.get("sample") is not None:
            _check_sample(path, f, meta["sample"], c * width if name == "values.bin" else 8)
        if verify and _sha256(f) != meta["sha256"]:
            raise StoreError(f"{f}: sha256 differs from the manifest (the file was changed or damaged)")


def open_store(path: str | Path, verify: bool = False) -> Store:
    """Open a committed store; `verify` recomputes every checksum (reads every byte) and checks the contents."""
    path = Path(path)
    man_path = path / "manifest.json"
    if not path.exists():  # "not a stride store: no manifest.json" read as if a folder were there (audit 21, L4)
        # a config's relative `data.store` is read from the current directory, not the config's folder: say where
        where = "" if path.is_absolute() else f"; looked for {path.resolve()}: relative paths are read from the " \
            "current directory"
        raise StoreError(f"{path}: no such directory (a store is the folder `stride data ingest` or `synth` "
                         f"wrote{where})")
    if not man_path.is_file():
        hint = " (an interrupted ingestion leaves only a .tmp- directory)"
        raise StoreError(f"{path}: not a stride store: no manifest.json{hint}")
    try:
        manifest = json.loads(man_path.read_text())
    except (ValueError, RecursionError) as exc:
        raise StoreError(one_line(f"{man_path}: not valid JSON ({exc})")) from None
    except OSError as exc:
        raise StoreError(f"{man_path}: cannot be read ({exc.strerror or exc})") from None
    _check_store(path, manifest, verify)
    np_dtype = DTYPES[manifest["dtype"]][0]
    n, c = int(manifest["n_rows"]), len(manifest["columns"])
    # mode "c" (copy-on-write): writable for torch, never written back to the file.
    vals = np.memmap(path / "values.bin", dtype=np_dtype, mode="c", shape=(n, c)) if n else np.zeros((0, c), np_dtype)
    t = torch.from_numpy(vals)
    if manifest["dtype"] == "bfloat16":
        t = t.view(torch.bfloat16)
    ts = np.memmap(path / "timestamps.bin", dtype=np.int64, mode="r", shape=(n,)) if n else np.zeros(0, np.int64)
    for name, mapped in (("values.bin", vals), ("timestamps.bin", ts)):
        if isinstance(mapped, np.memmap):  # named should it change in place while mapped (module docstring)
            mapped_files.record(path / name, mapped)
    if verify:
        _verify_contents(path, manifest, vals, ts)
    return Store(path, manifest, t, ts, vals if isinstance(vals, np.memmap) else None)


def fill_empty(tmp: Path, out: Path, last: str) -> None:
    """Move the finished `tmp` folder's entries (it was built inside `out`) up into the empty folder `out`, `last`
    (the manifest, the marker that makes it complete) last, then remove `tmp`. An empty folder is filled in place,
    not replaced by a rename, and built inside itself, on its own filesystem: `--out .` cannot be renamed over, and
    an empty mount point neither, nor filled across filesystems (the session's reviews of 2026-12-05: "Device or
    resource busy", then "Invalid cross-device link", each after the whole ingest)."""
    for name in [*sorted(n for n in os.listdir(tmp) if n != last), last]:
        os.replace(tmp / name, out / name)
    tmp.rmdir()


def swap_in(tmp: Path, out: Path, trash: Path) -> None:
    """Replace the folder `out` by the finished folder `tmp`: `out` renamed to `trash`, `tmp` renamed into its
    place; stopped (Ctrl-C) or failed between the two renames, the earlier folder is put back. The caller removes
    `trash` (ingest's --overwrite, synth's)."""
    out.rename(trash)
    try:
        tmp.rename(out)
    except BaseException:
        if not os.path.lexists(out):
            trash.rename(out)
        raise


def derived_dir(store: Path) -> Path:
    """The store's derived/ folder (its caches), which may not be there yet. A derived/ that leads out of the store
    (a link: the caches would be written and read wherever it points, audit 14 M4) or is not a folder is a
    StoreError naming it, as a values.bin link out of the store is."""
    derived = Path(store) / "derived"
    if os.path.islink(derived):
        target = derived.resolve()
        if not target.is_dir():
            raise StoreError(f"{derived}: a link to {target}, which is no folder: refused (derived/ holds the store's "
                             "caches; remove the link and they are made again)")
        if target.parent != Path(store).resolve():
            raise StoreError(f"{derived}: a link to {target}, outside the store: refused (derived/ holds the store's "
                             "caches, written and read inside it; remove the link and they are made again)")
    elif os.path.lexists(derived) and not derived.is_dir():
        raise StoreError(f"{derived}: not a folder (derived/ holds the store's caches; remove it and they are made "
                         "again)")
    return derived


def derived_writable(store: Path) -> bool:
    """Can the store's derived/ folder (its caches: normalised features, the loader probe's figures) be written,
    or created where it is not there yet? A shared or mounted store may be read-only: its caches go elsewhere. A
    derived/ that leads out of the store is a StoreError (`derived_dir`)."""
    derived = derived_dir(store)
    return os.access(derived if derived.is_dir() else store, os.W_OK)


def empty_but(path: Path, own: Path | None = None, rest: re.Pattern[str] | None = None) -> bool:
    """A real folder (not a link) with nothing in it but `own` (this process's temporary folder inside it); with
    `rest`, a killed run's temporary folders in it (their process gone) are removed first, so they do not make it
    look used."""
    try:
        if not path.is_dir() or path.is_symlink():
            return False
        if rest is not None:
            remove_abandoned(path, rest=rest)
        return all(own is not None and p.name == own.name for p in path.iterdir())
    except OSError:
        return False


def _empty_dir(path: Path) -> bool:
    """A real folder (not a link) with nothing in it but killed ingestions' temporary folders (removed here)."""
    return empty_but(path, rest=LEFTOVER)


# What a store folder holds: its files and the derived caches (normalised features, the loader probe's figures).
STORE_ENTRIES = ("manifest.json", "values.bin", "timestamps.bin", "derived")


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
        if not columns or not all(isinstance(c, str) and c for c in columns) or len(set(columns)) != len(columns):
            # what the manifest check refuses, refused before anything is written (ingest names the input's column)
            raise StoreError(one_line(f"{self.out}: columns {list(columns)!r}: a store's columns must be a non-empty "
                                      "list of distinct names"))
        self.empty = _empty_dir(self.out)  # an empty folder is used as it is: nothing in it to replace
        if os.path.lexists(self.out) and not self.empty and not is_store(self.out):
            raise StoreError(f"{self.out} exists and is not a stride store (no stride-store manifest.json): "
                             "ingest writes a new or empty folder and --overwrite replaces only a store; remove it "
                             "yourself or choose another --out")
        if os.path.lexists(self.out) and not self.empty and not overwrite:
            raise StoreError(f"{self.out} already exists (pass --overwrite to replace it)")
        if overwrite and not self.empty and (other := sorted(set(os.listdir(self.out)) - set(STORE_ENTRIES))):
            # a run written into the store folder (stride train --out STORE) went with it, without a word (audit 7)
            shown = ", ".join(other[:5]) + (f" and {len(other) - 5} more" if len(other) > 5 else "")
            raise StoreError(f"{self.out} is a stride store that also holds {shown}: --overwrite replaces a store, "
                             "not what else is in its folder; move those or choose another --out")
        self.columns, self.dtype, self.overwrite = list(columns), dtype, overwrite
        # beside the folder (also for `--out .`, whose Path.parent is itself); inside an empty one, on its filesystem
        whole = Path(os.path.abspath(self.out))
        self._beside, self._name = (whole if self.empty else whole.parent), whole.name
        self.tmp = self._beside / tagged_name("tmp", f"store-{uuid.uuid4().hex[:8]}-{self._name}")
        try:
            self._beside.mkdir(parents=True, exist_ok=True)
            remove_abandoned(self._beside, rest=LEFTOVER)  # killed ingestions' folders (their process is gone)
            (self.tmp / "spool").mkdir(parents=True)
        except OSError as exc:
            blocker = file_in_path(self.out.parent)
            if blocker is not None:  # mkdir's "File exists" did not say which part of the path is a file
                raise StoreError(f"{self.out}: {blocker} is a file, not a directory; give a directory path") from None
            raise StoreError(f"cannot create {self.tmp}: {os_reason(exc)}") from None
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
                               "shape": [start, len(self.columns)],
                               "sample": sample_digests(self.tmp / "values.bin", start * len(self.columns) * width)},
                "timestamps.bin": {"bytes": start * 8, "sha256": hashes["timestamps.bin"].hexdigest(),
                                   "shape": [start], "sample": sample_digests(self.tmp / "timestamps.bin", start * 8)},
            },
            **(extra or {}),
        }
        if start == 0:
            self.abort()
            raise StoreError(f"{self.out}: no rows were ingested")
        text = json.dumps(manifest, indent=1)
        try:  # the reader's own checks, on the staged store as it would be read: never commit what open_store refuses
            _check_store(self.tmp, json.loads(text))
        except StoreError as exc:
            self.abort()
            why = str(exc).replace(f"{self.tmp}{os.sep}", "")
            raise StoreError(one_line(f"{self.out}: not written: the store would be refused when opened ({why})")
                             ) from None
        man_tmp = self.tmp / "manifest.json.part"
        man_tmp.write_text(text)
        man_tmp.rename(self.tmp / "manifest.json")  # the store is complete only now
        if self.empty:
            if not empty_but(self.out, own=self.tmp):  # an entry added since the start
                self.abort()
                raise StoreError(f"{self.out} is no longer empty: the store was not written into it")
            fill_empty(self.tmp, self.out, "manifest.json")
        elif os.path.lexists(self.out) and self.overwrite:
            if not is_store(self.out):  # checked at the start too; the folder may have changed since
                self.abort()
                raise StoreError(f"{self.out} is no longer a stride store: not replaced")
            old = self._beside / tagged_name("trash", f"store-{uuid.uuid4().hex[:8]}-{self._name}")
            swap_in(self.tmp, self.out, old)
            shutil.rmtree(old)
        else:
            try:
                self.tmp.rename(self.out)
            except OSError as exc:
                if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST) or not os.path.lexists(self.out):
                    raise
                # another ingest (or anything else) made the folder since the start: the rename's errno text
                # ("Directory not empty") said nothing of that (audit 16, L5)
                self.abort()
                raise StoreError(f"{self.out}: another ingest (or another process) wrote it while this one ran (it "
                                 "was not there at the start); this store was not written: choose another --out, "
                                 "or pass --overwrite to replace that one") from None
        return self.out

    def abort(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)

    def disk_error(self, exc: OSError) -> StoreError:
        """An OSError while writing the store, in words; the temporary folder is removed."""
        self.abort()
        return StoreError(f"cannot write the store {self.out}: {os_reason(exc)} (nothing was written)")
