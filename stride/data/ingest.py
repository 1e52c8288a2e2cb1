"""Ingest Parquet, Arrow IPC, CSV and NumPy files into a store, checking every row on the way in.

Input is a long table: a timestamp column, an optional symbol column, and numeric feature columns.
Files are read in chunks (pyarrow streaming readers), so memory is bounded by one chunk. Anything
wrong stops the ingestion with an error naming the file, column and first bad row, and removes the
temporary directory: nothing half-written is left that looks like a store. A file that cannot be read
(not the format its name says, deleted midway, a `.npy` of Python objects: never unpickled) is one
such error; so is a finite value beyond the store dtype's range (1e300 would become inf), which no
fill policy replaces, and a CSV number beyond float64 itself (1e400, which pyarrow reads as inf). `--out` may not
be, hold or sit inside a source. A feature column without a name is refused before anything is written (the store's
reader refuses it), and the store is checked as its reader checks it before it is committed.

Integer timestamps carry no unit: 1704189600 is seconds (2024-01-02), 1704189600000 milliseconds of the same
moment. Reading every integer as nanoseconds put a file of Unix seconds on one day of 1970. The unit is read
from the magnitude (s, ms, us or ns since 1970-01-01 UTC whose dates fall in 1990-2100: the four ranges do not
overlap), stated on the `stride.data` logger and in the manifest (`time_unit`), or forced with `time_unit`
(`--time-unit`; then any integer is taken, a row counter as nanoseconds too). A value that fits no unit, or not
the unit of the rows before it, is an error naming its row.
"""

from __future__ import annotations

import json
import logging
import re
import tokenize
import unicodedata
import zipfile
import zlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from stride.config.errors import clipped
from stride.data.store import StoreError, StoreWriter
from stride.errors import StrideError, one_line
from stride.files.input_file import not_found_or_special
from stride.files.owner import parse as parse_tag

SUFFIXES = {".parquet": "parquet", ".pq": "parquet", ".arrow": "arrow", ".feather": "arrow", ".ipc": "arrow",
            ".csv": "csv", ".gz": "csv", ".npy": "numpy", ".npz": "numpy"}
FILL_POLICIES = ("error", "ffill", "zero")
CHUNK_ROWS = 1 << 16
TIME_UNITS = {"s": 10**9, "ms": 10**6, "us": 10**3, "ns": 1}  # nanoseconds in one unit of an integer timestamp
UNIT_WORDS = {"s": "seconds", "ms": "milliseconds", "us": "microseconds", "ns": "nanoseconds"}
DATE_RANGE_S = (631152000, 4102444800)  # 1990-01-01 and 2100-01-01 00:00 UTC in Unix seconds: what detection reads

log = logging.getLogger("stride.data")


class IngestError(StrideError, ValueError):
    """Bad input data: names the file, column and row."""

    exit_code = 2


# |x| from which a value rounds to inf in the store's dtype (round to nearest even): float32 max + half an ulp
# is 2^128 - 2^103; bfloat16's, 2^128 - 2^119.
OVERFLOW = {"float32": 2.0**128 - 2.0**103, "bfloat16": 2.0**128 - 2.0**119}


def check_out(src: Path, out: Path) -> None:
    """`--out` must not be a source, contain one, or sit inside a source folder."""
    s, o = src.resolve(), out.resolve()
    if o == s:
        raise IngestError(f"--out {out} is the source {src}: refused (the store would replace its own input)")
    if o in s.parents:
        raise IngestError(f"--out {out} contains the source {src}: refused (replacing it would delete the sources)")
    if src.is_dir() and s in o.parents:
        raise IngestError(f"--out {out} is inside the source folder {src}: refused (choose a folder outside it)")


def find_sources(src: str | Path) -> list[Path]:
    """One file, or every supported file under a directory (sorted, hidden and temp entries skipped)."""
    src = Path(src)
    if src.is_file():
        return [src]
    if not src.is_dir():
        raise IngestError(not_found_or_special(src))
    files = sorted(p for p in src.rglob("*") if p.is_file() and p.suffix in SUFFIXES
                   and not any(part.startswith(".") for part in p.relative_to(src).parts))
    if not files:
        from stride.files.store_marker import is_store

        if is_store(src, through_symlink=True):  # an ingest's output given as its input (first-contact audit 12-07)
            raise IngestError(f"{src}: is a stride store (what ingest writes), not source files: train on it as it is "
                              f"(--set data.source=store --set data.store={src}), or ingest the files it came from")
        raise IngestError(f"{src}: no .parquet, .arrow, .csv, .npy or .npz files")
    return files


def _numpy_table(path: Path, time_col: str) -> pa.Table:
    """A .npy's columns (row numbers as times) or a .npz's arrays. A header cut short or edited (numpy's parser
    raised tokenize.TokenError or SyntaxError: a traceback, audit 14 L5) or an .npz that is no complete zip archive is
    an IngestError naming the file."""
    try:
        return _load_numpy(path, time_col)
    except (SyntaxError, tokenize.TokenError) as exc:
        raise IngestError(one_line(f"{path}: cannot be read: its header is not a valid .npy header (cut short or "
                                   f"edited: {type(exc).__name__}: {exc})")) from None
    except zipfile.BadZipFile as exc:
        raise IngestError(one_line(f"{path}: cannot be read: not a complete .npz (zip) archive ({exc})")) from None


def _npz_claims(path: Path) -> None:
    """Refuse an .npz member whose header claims more data than the member holds. numpy allocates the claimed
    shape before it reads a byte of a zip member: a 200-byte member claiming (10**12,) float64 was a MemoryError
    traceback ("Unable to allocate 7.28 TiB"), one claiming 22 GiB was allocated and then read short."""
    with zipfile.ZipFile(path) as zf:
        for info in zf.infolist():
            if not info.filename.endswith(".npy"):
                continue  # np.load names only the .npy members as arrays
            with zf.open(info) as f:
                version = np.lib.format.read_magic(f)
                if version not in ((1, 0), (2, 0)):
                    continue  # (3, 0), a UTF-8 header: numpy's own reader checks it as it reads
                read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
                shape, _, dtype = read(f)
                held = info.file_size - f.tell()
            claimed = int(np.prod(shape, dtype=object)) * dtype.itemsize
            if claimed > held:
                raise IngestError(f"{path}: cannot be read: its array {info.filename[:-4]!r} claims shape {shape} "
                                  f"of {dtype} ({claimed:,} bytes) but holds {held:,} bytes of data (cut short or "
                                  "edited)")


def _load_numpy(path: Path, time_col: str) -> pa.Table:
    if path.suffix == ".npz":
        _npz_claims(path)
        with np.load(path) as z:
            return pa.table({k: z[k] for k in z.files})
    arr = np.load(path, mmap_mode="r")
    if arr.ndim != 2:
        raise IngestError(f"{path}: a .npy source must be 2-D [rows, columns], got shape {arr.shape}")
    cols = {f"c{i}": np.asarray(arr[:, i]) for i in range(arr.shape[1])}
    rows = pa.array(np.arange(arr.shape[0], dtype=np.int64), pa.timestamp("ns"))  # row numbers: no unit to detect
    return pa.table({time_col: rows, **cols})


def _readable_chunks(path: Path, time_col: str, time_format: str | None = None
                     ) -> Iterator[pa.RecordBatch | pa.Table]:
    """read_chunks, with every way a file can fail to read turned into an IngestError naming it."""
    header: list[str] = []
    try:
        for chunk in read_chunks(path, time_col, time_format):
            _check_names(chunk.schema, path)
            header = chunk.schema.names
            yield chunk
    except FileNotFoundError:
        raise IngestError(f"{path}: the file disappeared while it was being ingested") from None
    except (OSError, EOFError, zlib.error, ValueError, pa.ArrowException) as exc:
        if isinstance(exc, IngestError):
            raise
        # a CSV block whose timestamps are of another kind than the first block's, which typed the column
        m = re.match(r"In CSV column #(\d+): CSV conversion error to (timestamp|int)", str(exc))
        if m and time_col in header and header.index(time_col) == int(m.group(1)) and \
                (mix := _csv_time_mix(path, time_col)) is not None:
            raise IngestError(f"{path}: timestamp column {time_col!r} {mix}") from None
        what = "not a gzip file" if path.suffix == ".gz" and "zlib" in str(exc) else str(exc)
        if "allow_pickle" in what or "Python objects" in what:
            what = "it holds Python objects (dtype object); only numeric arrays are read, nothing is unpickled"
        raise IngestError(one_line(f"{path}: cannot be read: {what}")) from None


def _check_names(schema: pa.Schema, path: Path) -> None:
    """Column names are text: a CSV header in another encoding (Latin-1 `cl\\xe9se`) is an IngestError naming the
    column (pyarrow reads the header's bytes as they are and fails only when a name is decoded)."""
    for i in range(len(schema)):
        try:
            _ = schema.field(i).name  # decoded here, and raises here, on bytes that are not UTF-8
        except UnicodeDecodeError as exc:
            raw = bytes(exc.object)
            raise IngestError(f"{path}: cannot be read: column names are not UTF-8 (byte 0x{raw[exc.start]:02x} at "
                              f"position {exc.start} of column {i + 1}'s name {raw!r}); save the file as UTF-8"
                              ) from None


def _not_a_number(col: Any, row0: int = 0) -> str:
    """' (row N: 'x' is not a number)' for the first value of a text column that does not read as a number, or '':
    a CSV column that pyarrow typed as text for one stray cell was refused without saying which (first-contact audit
    of 2026-12-06)."""
    if not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
        return ""
    for i, v in enumerate(col.to_pylist()):
        if v is None:
            continue
        try:
            float(v)
        except ValueError:
            return f" (row {row0 + i}, 0-based data row: {clipped(repr(v), 40)} is not a number)"
    return ""


def _to_float32(chunk: Any, schema: list[str], path: Path, first: Path | None, dtype: str, row0: int = 0
                ) -> tuple[np.ndarray, list, list]:
    """[rows, columns] float32 of the feature columns; where a finite source value leaves the store dtype's
    range: [(row, column, value as shown)] (the first of each column); and integers float32 cannot hold exactly (above
    2^24): [(column, how many, first row, value, stored value)]."""
    vals = np.empty((chunk.num_rows, len(schema)), np.float32)
    over, rounded = [], []
    for j, c in enumerate(schema):
        col = chunk.column(c)
        if not (pa.types.is_floating(col.type) or pa.types.is_integer(col.type)):
            where = f" (numeric in {first})" if first is not None and first != path else ""
            raise IngestError(f"{path}: column {c!r} has type {col.type}{where}{_not_a_number(col, row0)}; feature "
                              "columns must be numeric")
        src = col.to_numpy(zero_copy_only=False)
        with np.errstate(over="ignore", invalid="ignore"):
            vals[:, j] = np.asarray(src, dtype=np.float32)
        if pa.types.is_floating(col.type):
            # a float64 bound: a Python float beside a float32 column is cast to float32, overflowing with a warning
            big = np.flatnonzero(np.isfinite(src) & (np.abs(src) >= np.float64(OVERFLOW[dtype])))
            if len(big):
                over.append((int(big[0]), j, f"{float(src[big[0]]):g}"))
        elif dtype == "float32":  # bfloat16 stores round every value to 3 digits, as documented
            changed = _changed_integers(np.asarray(src), vals[:, j])
            if len(changed):
                r = int(changed[0])
                rounded.append((j, len(changed), r, int(src[r]), int(vals[r, j])))
    return vals, over, rounded


# The texts pyarrow reads as an infinity (case-insensitive, blanks around): any other text that parsed to inf is a
# number beyond float64 (1e400), out of range like 1e300 (audit of 2026-12-07: it became inf, then 0 or the value
# before under a fill policy).
INF_TEXT = r"^\s*[+-]?inf(inity)?\s*$"


def _csv_source(path: Path) -> Any:
    return pa.CompressedInputStream(str(path), "gzip") if path.suffix == ".gz" else str(path)


class CsvText:
    """A CSV's feature columns as text, read by a second streaming reader that follows the first: rows are asked for
    in file order, chunk after chunk, so the file is read again at most once (and only where a value read as inf)."""

    def __init__(self, path: Path, columns: list[str]) -> None:
        self.path, self.columns = path, columns
        self._reader: Any = None
        self._batches: list[pa.RecordBatch] = []
        self._start = 0  # the file row of the first buffered batch
        self._window: tuple[int, int, pa.Table] | None = None

    def rows(self, row0: int, n: int) -> pa.Table:
        """The text of rows [row0, row0 + n) (row0 never below an earlier call's)."""
        if self._window is not None and self._window[:2] == (row0, n):
            return self._window[2]
        if self._reader is None:
            import pyarrow.csv as pcsv

            opts = pcsv.ConvertOptions(column_types={c: pa.string() for c in self.columns},
                                       include_columns=self.columns)
            self._reader = pcsv.open_csv(_csv_source(self.path), convert_options=opts)
        have = self._start + sum(b.num_rows for b in self._batches)
        while have < row0 + n:
            try:
                batch = self._reader.read_next_batch()
            except StopIteration:
                raise IngestError(f"{self.path}: the file changed while it was being ingested (it holds fewer rows "
                                  "than were read)") from None
            self._batches.append(batch)
            have += batch.num_rows
        while self._batches and self._start + self._batches[0].num_rows <= row0:
            self._start += self._batches.pop(0).num_rows
        table = pa.Table.from_batches(self._batches).slice(row0 - self._start, n)
        self._window = (row0, n, table)
        return table


def _overflowed_text(chunk: Any, schema: list[str], texts: CsvText, row0: int) -> list:
    """[(row, column, text)] of the first value per column that read as inf but whose text is a number (1e400,
    -1e400, 400 digits): beyond float64 when parsed, so beyond every store dtype."""
    found = []
    for j, c in enumerate(schema):
        col = chunk.column(c)
        if not pa.types.is_floating(col.type):
            continue
        inf = np.flatnonzero(np.asarray(pc.fill_null(pc.is_inf(col), False).to_numpy(zero_copy_only=False)))
        if not len(inf):
            continue
        cells = texts.rows(row0, chunk.num_rows).column(c).take(pa.array(inf))
        literal = pc.fill_null(pc.match_substring_regex(cells, INF_TEXT, ignore_case=True), True)
        number = np.flatnonzero(~np.asarray(literal.to_numpy(zero_copy_only=False)))
        if len(number):
            found.append((int(inf[number[0]]), j, clipped(cells[int(number[0])].as_py().strip(), 60)))
    return found


def _changed_integers(src: np.ndarray, f32: np.ndarray) -> np.ndarray:
    """Rows whose integer is not its float32 (only integers up to 2^24 all have one), compared exactly."""
    if src.dtype.kind == "f":  # an integer column with nulls arrives as float64 (NaN for null)
        big = np.flatnonzero(np.abs(np.nan_to_num(src)) > 2**24)
        return big[f32[big].astype(np.float64) != src[big]]
    signed = src.dtype.kind == "i"
    big = np.flatnonzero((src > 2**24) | (src < -(2**24)) if signed else src > 2**24)
    if not len(big):
        return big
    f = f32[big].astype(np.float64)  # float32 values are exact in float64 (integers above 2^24 too)
    lim = 2.0**63 if signed else 2.0**64
    fits = (f < lim) & (f >= -lim)
    same = np.zeros(len(big), bool)
    same[fits] = f[fits].astype(src.dtype) == src[big][fits]
    return big[~same]


def read_chunks(path: Path, time_col: str, time_format: str | None = None) -> Iterator[pa.RecordBatch | pa.Table]:
    """Stream a file as record batches (Parquet, Arrow IPC, CSV) or one table (NumPy).

    With `time_format`, a CSV's time column is read as text, so the format parses it: pyarrow would otherwise
    infer ISO-looking dates itself and the format would be ignored ('%Y-%d-%m' read as ISO swaps day and month)."""
    kind = SUFFIXES.get(path.suffix)
    if kind == "parquet":
        import pyarrow.parquet as pq

        yield from pq.ParquetFile(path).iter_batches(batch_size=CHUNK_ROWS)
    elif kind == "arrow":
        import pyarrow.ipc as ipc

        with pa.memory_map(str(path)) as src:
            try:
                reader: Any = ipc.open_file(src)
                for i in range(reader.num_record_batches):
                    yield reader.get_batch(i)
            except pa.ArrowInvalid:
                src.seek(0)
                yield from ipc.open_stream(src)
    elif kind == "csv":
        import pyarrow.csv as pcsv

        types = {time_col: pa.string()} if time_format else {}
        yield from pcsv.open_csv(_csv_source(path), convert_options=pcsv.ConvertOptions(column_types=types))
    elif kind == "numpy":
        yield _numpy_table(path, time_col)
    else:
        raise IngestError(f"{path}: unsupported file type {path.suffix!r} (parquet, arrow, feather, csv, npy, npz)")


def unit_of(value: int) -> str | None:
    """The unit in which integer timestamp `value` since 1970-01-01 UTC is a date in 1990-2100, or None."""
    for unit, ns in TIME_UNITS.items():
        per_s = 10**9 // ns
        if DATE_RANGE_S[0] * per_s <= value < DATE_RANGE_S[1] * per_s:
            return unit
    return None


@dataclass
class TimeUnit:
    """The unit of integer timestamps: `asked` ("auto" or one of TIME_UNITS), else detected from the first integer
    timestamp ingested (`unit`, and the file it came from); every later one must be a date in that unit."""

    asked: str = "auto"
    unit: str | None = None
    first: Path | None = None
    integer: bool = False  # integer timestamps were read (in `unit`)

    def __post_init__(self) -> None:
        if self.asked not in ("auto", *TIME_UNITS):
            raise IngestError(f"time unit {self.asked!r} is not one of auto, {', '.join(TIME_UNITS)}")
        if self.asked != "auto":
            self.unit = self.asked

    def to_ns(self, raw: np.ndarray, path: Path, time_col: str, row0: int) -> np.ndarray:
        """Integer timestamps as int64 nanoseconds since 1970; an IngestError naming the first row that fits no
        unit (detected), or overflows 64-bit nanoseconds (given)."""
        if not len(raw):
            return raw
        self.integer = True
        where = f"(0-based data row; column {time_col!r})"
        if self.asked != "auto":
            ns = TIME_UNITS[self.asked]
            lim = np.iinfo(np.int64).max // ns
            bad = np.flatnonzero((raw > lim) | (raw < -lim))
            if len(bad):
                raise IngestError(f"{path}: integer timestamp {int(raw[bad[0]])} at row {int(bad[0]) + row0} {where} "
                                  f"in {UNIT_WORDS[self.asked]} (time unit {self.asked}, as given) is beyond what "
                                  "64-bit nanoseconds since 1970 hold (years 1678-2262)")
            return raw * ns
        if self.unit is None:
            self.unit, self.first = unit_of(int(raw[0])), path
            if self.unit is None:
                raise IngestError(
                    f"{path}: integer timestamp {int(raw[0])} at row {row0} {where} fits no unit: as seconds, "
                    "milliseconds, microseconds or nanoseconds since 1970-01-01 UTC it is no date in 1990-2100; "
                    "give the unit with --time-unit s|ms|us|ns (ns takes any integer, a row counter too) or write "
                    "ISO-8601 timestamps")
        ns = TIME_UNITS[self.unit]
        lo, hi = (x * (10**9 // ns) for x in DATE_RANGE_S)
        bad = np.flatnonzero((raw < lo) | (raw >= hi))
        if len(bad):
            v = int(raw[bad[0]])
            other = unit_of(v)
            reads = f"it reads as {UNIT_WORDS[other]}" if other else "it is no date in 1990-2100 in any unit"
            raise IngestError(
                f"{path}: integer timestamp {v} at row {int(bad[0]) + row0} {where} is not a date in 1990-2100 in "
                f"{UNIT_WORDS[self.unit]}, the unit the first timestamps (in {self.first}) were detected in; {reads}; "
                "give one unit with --time-unit s|ms|us|ns")
        return raw * ns

    def describe(self, time_col: str) -> str:
        how = "as given" if self.asked != "auto" else "detected from their magnitude; --time-unit forces a unit"
        return (f"integer timestamps in column {time_col!r} read as {UNIT_WORDS[self.unit or 'ns']} since "
                f"1970-01-01 UTC ({how})")


# What one text timestamp is, for saying what a column mixes: an integer (an epoch), ISO-8601 with a zone offset
# (`Z`, `+01:00`, `+0100`, `+01`) or without one.
_INTEGER_TEXT = re.compile(r"\s*[+-]?\d+\s*")
_ISO_TEXT = re.compile(r"\s*\d{4}-\d{2}-\d{2}(?:[T ]\d{2}(?::?\d{2}(?::?\d{2}(?:[.,]\d+)?)?)?"
                       r"(?P<zone>[Zz]|[+-]\d{2}(?::?\d{2})?)?)?\s*")


def _time_kinds(values: list, row0: int, firsts: dict[str, tuple[int, str]]) -> None:
    """Add to `firsts` the first row and value of each kind of text timestamp in `values` (rows from `row0`):
    int, zoned, naive, other."""
    for i, v in enumerate(values):
        if v is None:
            continue
        if _INTEGER_TEXT.fullmatch(v):
            kind = "int"
        else:
            m = _ISO_TEXT.fullmatch(v)
            kind = "other" if m is None else "zoned" if m.group("zone") else "naive"
        if kind not in firsts:
            firsts[kind] = (row0 + i, v)


def _time_mix(firsts: dict[str, tuple[int, str]]) -> str | None:
    """What a timestamp column mixes, naming the first row of each kind (`_time_kinds`), or None."""
    def shown(kind: str, what: str) -> str:
        row, v = firsts[kind]
        return f"row {row} {clipped(repr(v), 40)} {what}"

    if "int" in firsts and len(firsts) > 1:
        text = min((k for k in firsts if k != "int"), key=lambda k: firsts[k][0])
        pair = sorted([("int", "is an integer (epoch)"), (text, "is text")], key=lambda kw: firsts[kw[0]][0])
        return (f"mixes integer (epoch) timestamps and text: {', '.join(shown(*kw) for kw in pair)}; write every "
                "timestamp one way (integers since 1970, with --time-unit, or ISO-8601 text)")
    if "zoned" in firsts and "naive" in firsts:
        naive_first = firsts["naive"][0] < firsts["zoned"][0]
        pair = [("naive", "has no zone offset"), ("zoned", "has one")] if naive_first else \
            [("zoned", "has a zone offset"), ("naive", "has none")]
        return (f"mixes timestamps with and without a zone offset: {', '.join(shown(*kw) for kw in pair)}; write "
                "every timestamp with its offset (2024-01-02T10:00:00Z), or every one without (read as UTC)")
    return None


def _iso_timestamps(col: Any, path: Path, time_col: str, row0: int) -> Any:
    """A text timestamp column as timestamp[ns]: ISO-8601 without a zone offset (read as UTC), or with one in every
    row. A column that mixes the two, or integers and text, says so naming a row of each (it blamed a valid value
    and suggested --time-format: audit of 2026-12-07); anything else does not parse as ISO-8601."""
    errors = []
    for tz in (None, "UTC"):  # pyarrow parses an offset only into a zoned type, and none into a zoned one
        try:
            return pc.cast(col, pa.timestamp("ns", tz))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            errors.append(exc)
    firsts: dict[str, tuple[int, str]] = {}
    _time_kinds(col.to_pylist(), row0, firsts)
    mix = _time_mix(firsts)
    if mix is not None:
        raise IngestError(f"{path}: timestamp column {time_col!r} {mix}")
    zoned_first = "zoned" in firsts and firsts["zoned"] == min(firsts.values())
    exc = errors[1] if zoned_first else errors[0]  # the error of the first value's kind
    raise IngestError(f"{path}: timestamp column {time_col!r} does not parse as ISO-8601 (pass --time-format, "
                      f"{_format_example(col)}): {exc}")


# Common non-ISO layouts, tried on a text time column that is not ISO-8601 to suggest its --time-format
TIME_FORMATS = ("%m/%d/%Y", "%d/%m/%Y", "%m/%d/%Y %H:%M", "%d/%m/%Y %H:%M", "%m/%d/%Y %H:%M:%S", "%d/%m/%Y %H:%M:%S",
                "%d.%m.%Y", "%d.%m.%Y %H:%M:%S", "%Y%m%d", "%Y%m%d %H:%M:%S", "%Y%m%d %H%M%S", "%Y/%m/%d",
                "%Y/%m/%d %H:%M:%S", "%d-%b-%Y", "%d-%b-%Y %H:%M:%S", "%m/%d/%Y %I:%M:%S %p", "%m/%d/%Y %I:%M %p")


def _format_example(col: Any, sample: int = 1000) -> str:
    """"e.g. '%m/%d/%Y %H:%M' (it reads every value tried)" for the first common layout that reads the column's first
    `sample` texts, both where day and month could swap, else "e.g. '%m/%d/%Y'": the fixed example did not match a
    `01/02/2024 14:30` column, and a second try with it failed again (first-contact audit of 2026-12-07)."""
    import datetime as dt

    texts = [v for v in col.slice(0, sample).to_pylist() if isinstance(v, str)] if len(col) else []
    fits = []
    for fmt in TIME_FORMATS:
        try:
            for v in texts:
                dt.datetime.strptime(v, fmt)
        except ValueError:
            continue
        fits.append(fmt)
    if not texts or not fits:
        return "e.g. '%m/%d/%Y'"
    if len(fits) > 1:
        return f"one of {', '.join(repr(f) for f in fits)}: each reads the first {len(texts):,} values; check which"
    return f"e.g. {fits[0]!r}, which reads the first {len(texts):,} values"


def _csv_time_mix(path: Path, time_col: str) -> str | None:
    """What a CSV's timestamp column mixes, read again as text (`_time_mix`), or None: pyarrow types a CSV column
    from its first block and fails at the first value of another kind in a later block without saying its row."""
    import pyarrow.csv as pcsv

    firsts: dict[str, tuple[int, str]] = {}
    row0 = 0
    try:
        opts = pcsv.ConvertOptions(column_types={time_col: pa.string()}, include_columns=[time_col])
        for batch in pcsv.open_csv(_csv_source(path), convert_options=opts):
            _time_kinds(batch.column(0).to_pylist(), row0, firsts)
            row0 += batch.num_rows
            if (mix := _time_mix(firsts)) is not None:
                return mix
    except (OSError, pa.ArrowException):
        return None
    return None


def _timestamps_ns(col: pa.Array | pa.ChunkedArray, path: Path, time_col: str, fmt: str | None,
                   unit: TimeUnit | None = None, row0: int = 0) -> np.ndarray:
    """int64 nanoseconds since 1970-01-01 UTC of a timestamp, date, string or integer column (integers in `unit`)."""
    integer = pa.types.is_integer(col.type)
    if (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)) and fmt:
        try:
            col = pc.strptime(col, format=fmt, unit="ns")
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise IngestError(f"{path}: timestamp column {time_col!r} does not parse with --time-format {fmt!r}: "
                              f"{exc}") from None
    elif pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
        col = _iso_timestamps(col, path, time_col, row0)
    if pa.types.is_timestamp(col.type):
        col = pc.cast(col, pa.timestamp("ns", col.type.tz)).cast(pa.int64())
    elif pa.types.is_date(col.type):
        col = pc.cast(pc.cast(col, pa.timestamp("ns")), pa.int64())
    elif not integer:
        raise IngestError(f"{path}: timestamp column {time_col!r} has type {col.type}; "
                          "expected a timestamp, date or integer")
    if col.null_count:
        raise IngestError(f"{path}: timestamp column {time_col!r} has {col.null_count} missing values")
    ts = np.asarray(col.to_numpy(zero_copy_only=False), dtype=np.int64)
    return (unit if unit is not None else TimeUnit()).to_ns(ts, path, time_col, row0) if integer else ts


def _fill(vals: np.ndarray, bad: np.ndarray, policy: str, carry: np.ndarray | None) -> np.ndarray | None:
    """Fill non-finite entries; returns None where ffill has no earlier value to carry."""
    if policy == "zero":
        vals[bad] = 0.0
        return vals
    if carry is not None:  # the symbol's last row from an earlier chunk leads the forward fill
        vals = np.concatenate([carry[None], vals])
        bad = np.concatenate([np.zeros((1, vals.shape[1]), bool), bad])
    idx = np.where(~bad, np.arange(len(vals))[:, None], -1)
    idx = np.maximum.accumulate(idx, axis=0)
    if (idx < 0).any():
        return None
    vals = np.take_along_axis(vals, idx, axis=0)
    return vals[1:] if carry is not None else vals


def ingest(
    src: str | Path,
    out: str | Path,
    *,
    time_col: str = "timestamp",
    time_format: str | None = None,
    symbol_col: str = "symbol",
    columns: list[str] | None = None,
    fill_policy: str = "error",
    dtype: str = "float32",
    overwrite: bool = False,
    time_unit: str = "auto",
) -> Path:
    """Ingest every file under `src` into a new store at `out`; returns `out`.

    `time_unit`: of integer timestamps, "auto" (detected from their magnitude, see the module docstring) or one
    of s, ms, us, ns."""
    if fill_policy not in FILL_POLICIES:
        raise IngestError(f"fill policy {fill_policy!r} is not one of {', '.join(FILL_POLICIES)}")
    unit = TimeUnit(time_unit)
    if time_col == symbol_col:  # `--time-col symbol`: the symbol column cannot also be the timestamps
        raise IngestError(f"the timestamp column (--time-col) and the symbol column (--symbol-col) are both "
                          f"{time_col!r}: one column cannot be both; name the timestamp column with --time-col")
    check_out(Path(src), Path(out))
    files = find_sources(src)
    check_synth_tree(Path(src), files)
    root = Path(src) if Path(src).is_dir() else None
    check_stem_symbols(files, root, symbol_col, time_col)
    rows_in = 0
    writer: StoreWriter | None = None
    schema: list[str] | None = None
    first_file: Path | None = None
    carry: dict[str, np.ndarray] = {}
    rounded: dict[int, list] = {}  # column -> [integers changed, (file, row, value, stored) of the first]
    time_types: set[str] = set()  # the time column's types where it was not text (--time-format not used)
    time_text = False  # ... and whether it was text somewhere (--time-format used)
    try:
        for path in files:
            row0 = 0
            file_sym, _ = path_symbol(path, root, symbol_col)
            texts: CsvText | None = None  # the CSV's cells as text, read again only where a value parsed to inf
            for chunk in _readable_chunks(path, time_col, time_format):
                names = [n for n in chunk.schema.names if n not in (time_col, symbol_col)]
                if time_col not in chunk.schema.names:
                    have, hdr = ", ".join(chunk.schema.names), chunk.schema.names
                    raise IngestError(f"{path}: no timestamp column {time_col!r}{_near(time_col, hdr)} (columns: "
                                      f"{have}){_delimiter_hint(hdr) or '; name it with --time-col'}")
                # the time column first: a --time-col that names a text column is said to be that, not reported as
                # the default `timestamp` column turned feature and found non-numeric
                tcol = chunk.column(time_col)
                if pa.types.is_string(tcol.type) or pa.types.is_large_string(tcol.type):
                    time_text = True
                else:
                    time_types.add(str(tcol.type))
                ts = _timestamps_ns(tcol, path, time_col, time_format, unit, row0)
                if schema is None:
                    schema = list(columns) if columns else names  # in the order asked for
                    _check_columns(path, columns, names, schema, time_col, symbol_col, chunk.schema.names)
                    for c in schema:
                        t = chunk.schema.field(c).type
                        if not (pa.types.is_floating(t) or pa.types.is_integer(t)):
                            raise IngestError(f"{path}: column {c!r} has type {t}"
                                              f"{_not_a_number(chunk.column(c), row0)}; feature columns must be "
                                              "numeric (choose columns with --columns)"
                                              f"{_symbol_hint(c, t, symbol_col, chunk.schema.names)}")
                    first_file = path
                    writer = StoreWriter(out, schema, dtype=dtype, overwrite=overwrite)
                elif columns is None and sorted(names) != sorted(schema):
                    extra, lost = sorted(set(names) - set(schema)), sorted(set(schema) - set(names))
                    raise IngestError(f"{path}: schema differs from {first_file}: extra columns {extra}, "
                                      f"missing columns {lost}")
                elif columns is not None and set(schema) - set(names):
                    raise IngestError(f"{path}: schema differs from {first_file}: missing columns "
                                      f"{sorted(set(schema) - set(names))}")
                assert writer is not None
                n = chunk.num_rows
                vals, over, changed = _to_float32(chunk, schema, path, first_file, dtype, row0)
                if SUFFIXES.get(path.suffix) == "csv":  # an inf there may be a number beyond float64 (1e400)
                    texts = texts if texts is not None else CsvText(path, schema)
                    over += _overflowed_text(chunk, schema, texts, row0)
                for j, count, r, value, stored in changed:
                    rounded.setdefault(j, [0, (path, r + row0, value, stored)])[0] += count
                if symbol_col in chunk.schema.names:
                    sym_col = chunk.column(symbol_col).cast(pa.string())
                    blank = np.flatnonzero(pc.fill_null(pc.equal(sym_col, ""), True))  # else stored as "None", ""
                    if len(blank):
                        raise IngestError(f"{path}: symbol column {symbol_col!r} is empty at row {blank[0] + row0} "
                                          "(0-based data row); every row needs its symbol")
                    ctrl = np.flatnonzero(pc.fill_null(pc.match_substring_regex(sym_col, CONTROL), False))
                    if len(ctrl):  # checked on the text: numpy's str would drop a trailing NUL ("z\0" -> "z")
                        _check_symbol_text(path, str(sym_col[int(ctrl[0])]), int(ctrl[0]) + row0, True)
                    syms = np.asarray(sym_col.to_numpy(zero_copy_only=False))
                else:
                    if row0 == 0:
                        _check_symbol_text(path, file_sym, 0, False)
                    syms = np.full(n, file_sym, dtype=object)  # sp500.csv.gz -> sp500; symbol=ESH4/ -> ESH4
                if over:
                    r, c, value = min(over)
                    raise IngestError(f"{path}: column {schema[c]!r} has {value} at row {r + row0} (0-based data "
                                      f"row; symbol {syms[r]}), beyond {dtype}'s range (largest "
                                      f"{_largest(dtype):.4g}): the store cannot hold it; rescale the column (fill "
                                      "policies never replace it)")
                uniq, inv = np.unique(syms.astype(str), return_inverse=True)
                order = np.argsort(inv, kind="stable")  # group by symbol, keep file order inside
                bounds = np.searchsorted(inv[order], np.arange(len(uniq) + 1))
                for k, sym in enumerate(uniq):
                    rows = order[bounds[k] : bounds[k + 1]]
                    _check_time(path, time_col, str(sym), ts[rows], rows + row0, writer.last_ts(str(sym)))
                    v = vals[rows]
                    bad = ~np.isfinite(v)
                    if bad.any():
                        if fill_policy == "error":
                            r, c = np.argwhere(bad)[0]
                            raise IngestError(
                                f"{path}: column {schema[c]!r} has {'NaN' if np.isnan(v[r, c]) else 'inf'} at row "
                                f"{int(rows[r] + row0)} (0-based data row; symbol {sym}); set a fill policy "
                                "(--fill-policy ffill|zero) to fill it")
                        filled = _fill(v, bad, fill_policy, carry.get(str(sym)))
                        if filled is None:
                            r, c = np.argwhere(bad)[0]
                            raise IngestError(f"{path}: column {schema[c]!r} is missing at row {int(rows[r] + row0)} "
                                              f"(symbol {sym}) with no earlier value to forward-fill")
                        v = filled
                    carry[str(sym)] = v[-1].copy()
                    writer.append(str(sym), ts[rows], v)
                row0 += n
            rows_in += row0
        if writer is None:
            raise IngestError(f"{src}: the input files hold no rows")
        if not rows_in:  # the store's own check named --out, the folder being written, not the input
            what = "holds no rows" if len(files) == 1 else f"holds no rows in any of its {len(files)} files"
            raise IngestError(f"{src}: {what}; nothing to ingest")
        read_as = {"time_unit": unit.unit, "time_unit_from": "magnitude" if unit.asked == "auto" else "given"}
        store = writer.commit({"sources": [str(p) for p in files], "fill_policy": fill_policy,
                               "time_column": time_col, "symbol_column": symbol_col,
                               **(read_as if unit.integer else {})})
        if unit.integer:
            log.warning("stride data ingest: %s", unit.describe(time_col))
        if rounded:
            log.warning("stride data ingest: note: %s", _rounding_note(rounded, schema or []))
        if time_format and time_types:
            kinds = ", ".join(sorted(time_types))
            if time_text:
                log.warning("stride data ingest: note: --time-format %r was used only where the timestamp column %r "
                            "is text; elsewhere it is %s and was read as it is", time_format, time_col, kinds)
            else:
                log.warning("stride data ingest: note: --time-format %r was not used: the timestamp column %r is not "
                            "text (%s) and was read as it is", time_format, time_col, kinds)
        return store
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:  # an unreadable or inconsistent file
        if writer is not None:
            writer.abort()
        where = f"{path}: " if "path" in locals() else ""
        raise IngestError(one_line(f"{where}cannot be read: {exc}")) from exc
    except OSError as exc:  # reading errors are IngestErrors by now: this is writing the store (a full disk)
        if writer is None:
            raise StoreError(f"cannot write the store {out}: {exc.strerror or exc}") from None
        raise writer.disk_error(exc) from None
    except BaseException:
        if writer is not None:
            writer.abort()
        raise


CONTROL = r"[\x00-\x1f\x7f-\x9f\x{2028}\x{2029}]"  # Unicode Cc, Zl, Zp in RE2 (_check_symbol_text)
SYNTH_LAYOUT = re.compile(r"date=\d{4}-\d{2}-\d{2}/symbol=S\d{3,}/part-0\.parquet")


def check_synth_tree(src: Path, files: list[Path]) -> None:
    """Refuse a `stride data synth` temporary folder (a killed or running synth: not a dataset yet); warn where a
    tree laid out as synth writes it has no completion marker (an older stride's synth, maybe interrupted), or
    holds another number of files than its marker says (files removed or added since)."""
    from stride.data.simulator import MARKER

    for p in (src, *src.resolve().parents):
        tag = parse_tag(p.name)
        if tag is not None and tag.rest.startswith("synth-"):
            raise IngestError(f"{p}: the temporary folder of an unfinished `stride data synth` (killed, or still "
                              "running): not a complete dataset; rerun the synth and ingest its --out")
    if not src.is_dir():
        return
    try:
        marker = json.loads((src / MARKER).read_text())
    except FileNotFoundError:
        if files and all(SYNTH_LAYOUT.fullmatch(f.relative_to(src).as_posix()) for f in files):
            log.warning("stride data ingest: note: %s is laid out as `stride data synth` writes (date=/symbol= "
                        "folders) but has no %s, the mark of a finished synth: an older synth, maybe interrupted "
                        "(days or symbols missing); ingested as it is", src, MARKER)
        return
    except (OSError, ValueError, RecursionError):
        marker = None
    want = marker.get("files") if isinstance(marker, dict) else None
    if not isinstance(want, int):
        log.warning("stride data ingest: note: %s has a %s that cannot be read (not the mark of a finished synth); "
                    "ingested as it is", src, MARKER)
    elif want != len(files):
        log.warning("stride data ingest: note: %s holds %d data files, its synth marker %s says %d: files were "
                    "added or removed since the synth; ingested as it is", src, len(files), MARKER, want)


def path_symbol(path: Path, root: Path | None, symbol_col: str) -> tuple[str, bool]:
    """The symbol of a file without a symbol column, and whether it came from a partition key: a hive folder
    `<symbol_col>=X` between the source folder and the file (URL-decoded, as pyarrow's hive partitioning reads it;
    the innermost wins), else the file's name up to its first dot (`sp500.csv.gz` -> `sp500`)."""
    parts = path.relative_to(root).parts[:-1] if root is not None else ()
    for part in reversed(parts):
        key, eq, value = part.partition("=")
        if eq and key == symbol_col and value:
            if value == "__HIVE_DEFAULT_PARTITION__":
                raise IngestError(f"{path}: folder {part!r} is a null symbol partition; every row needs its symbol")
            return unquote(value), True
    return path.name.split(".")[0], False


# Hive partition folders that split one series in time: `date=2024-01-02`, `year=2024`, `dt=20240102`. Files of one
# name under them are one instrument's; any other partition (`ticker=AAPL`, `contract=ESH4`) may name instruments.
_TIME_KEYS = {"date", "dt", "day", "days", "year", "month", "week", "hour", "time", "timestamp", "ts", "session"}
_TIME_VALUE = re.compile(r"\d{4}(-?\d{2}){0,2}([ T_]\d{2}(:?\d{2}){0,2})?")


def _folder_without_partitions(path: Path) -> tuple[str, ...]:
    """A file's folder less its time partition folders (`date=2024-01-02`): one file a day of one instrument
    (`date=.../AAPL.parquet`) is one symbol's, as files of one folder are; `ticker=AAPL/data.parquet` and
    `ticker=MSFT/data.parquet` stay apart (they are two instruments)."""
    def in_time(part: str) -> bool:
        key, eq, value = part.partition("=")
        return bool(eq) and (key.lower() in _TIME_KEYS or bool(_TIME_VALUE.fullmatch(value)))

    return tuple(part for part in path.parent.parts if not in_time(part))


def _check_file_folders(from_name: list[Path], sym: str, symbol_col: str) -> None:
    """Two files in different folders named alike would become one symbol (two instruments merged): refused, naming
    the first file and the first whose folder differs from its. Folders that differ only in time partitions
    (`date=...`) do not count: a day's file per folder is common."""
    first = _folder_without_partitions(from_name[0])
    other = next((p for p in from_name[1:] if _folder_without_partitions(p) != first), None)
    if other is not None:
        raise IngestError(f"{from_name[0]} and {other} would both be symbol {sym!r}: without a {symbol_col!r} column "
                          f"or a {symbol_col}=NAME folder a file's symbol is its name, and these are in different "
                          f"folders; add a {symbol_col!r} column, put each file under a {symbol_col}=NAME folder, or "
                          "rename one")


# What may follow a name stem's first dot in files of one symbol: part numbers (`AAA.1.csv`, `AAA.part-2.csv`,
# `AAA.part1of2.csv`) and time partitions (`AAA.2024-01-02.csv`, `AAA.2024_01_02.csv`, `AAA.2024Q1.csv`, as in
# folder names: _TIME_VALUE). A component without letters is taken as one too.
_PART = re.compile(r"(part[-_]?)?\d+(of\d+)?|\d{4}[-_]?q[1-4]|[^a-z]*", re.IGNORECASE)
STEM_FILES_SHOWN = 3  # files named in the refusal of a stem shared by other instruments


def _stem_suffix(path: Path) -> str:
    """What lies between a file name's first dot and its file-type suffixes: `CL.F24.csv` -> `F24`, `AAA.1.csv.gz`
    -> `1`, `sp500.csv` -> nothing."""
    parts = path.name.split(".")[1:]
    while parts and f".{parts[-1]}" in SUFFIXES:
        parts.pop()
    return ".".join(parts)


def _instrument_suffix(suffix: str) -> str:
    """The suffix without its part numbers and dates: what, if anything, names an instrument (`F24`, `B`, `US`)."""
    return ".".join(c for c in suffix.split(".") if c and not (_PART.fullmatch(c) or _TIME_VALUE.fullmatch(c)))


def _has_column(path: Path, name: str, time_col: str) -> bool | None:
    """Whether the file has column `name` (its schema or header; the first chunk only where neither is cheap); None
    for a file without rows (it adds none to a symbol)."""
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        try:
            return name in pq.read_schema(path).names
        except (OSError, pa.ArrowException):
            pass  # the ingestion itself says what is wrong with the file
    chunks = _readable_chunks(path, time_col)
    try:
        first = next(chunks, None)
    finally:
        chunks.close()
    return None if first is None else name in first.schema.names


def check_stem_symbols(files: list[Path], root: Path | None, symbol_col: str, time_col: str) -> None:
    """Refuse, before anything is written, files that the name-stem rule would stitch into one symbol although their
    names tell instruments apart: `CL.F24.csv` + `CL.G24.csv` (two contracts, one series across the roll) or
    `BRK.A.csv` + `BRK.B.csv` (two share classes, then "timestamp out of order"). Only where one stem carries two or
    more suffixes once part numbers and dates are taken out: one suffix throughout (`AAPL.US.csv` in every date
    folder, Spark's `part-00000-<uuid>.snappy.parquet`, `data.v2.csv`) is one series, as are `AAA.1.csv`,
    `AAA.2024-01-02.csv`. Then files of one name in folders that differ in more than time partitions
    (`_check_file_folders`). Files with a symbol column or under a `<symbol_col>=X` folder take no symbol from
    their name, and are left out (read only for stems in doubt: a schema, or a first chunk)."""
    by_stem: dict[str, list[Path]] = {}
    for path in files:
        sym, keyed = path_symbol(path, root, symbol_col)
        if not keyed:
            by_stem.setdefault(sym, []).append(path)
    for sym, group in by_stem.items():
        if len({_instrument_suffix(_stem_suffix(p)) for p in group}) < 2 and \
                len({_folder_without_partitions(p) for p in group}) < 2:
            continue
        from_name = [p for p in group if _has_column(p, symbol_col, time_col) is False]
        kinds = sorted({_instrument_suffix(_stem_suffix(p)) for p in from_name})
        if len(kinds) < 2:
            if from_name:
                _check_file_folders(from_name, sym, symbol_col)
            continue
        shown = ", ".join(str(p) for p in from_name[:STEM_FILES_SHOWN])
        more = f" and {len(from_name) - STEM_FILES_SHOWN} more" if len(from_name) > STEM_FILES_SHOWN else ""
        suffixes = ", ".join(repr(x) for x in kinds[:STEM_FILES_SHOWN])
        example = next(p for p in from_name if _instrument_suffix(_stem_suffix(p))).name.replace(".", "_", 1)
        raise IngestError(
            f"{len(from_name)} files would all be symbol {sym!r} (a file's symbol is its name up to the first dot): "
            f"{shown}{more}; their suffixes ({suffixes}) are not part numbers or dates, so they look like different "
            "instruments (contracts, share classes) that would be stitched into one series; add a "
            f"{symbol_col!r} column (or name yours with --symbol-col), put each instrument's files under a "
            f"{symbol_col}=NAME folder, or rename them (e.g. {example})")


def _check_symbol_text(path: Path, sym: str, row: int, from_column: bool) -> None:
    """A symbol with a line break or another control character (it would split the inspect table and logs)."""
    bad = next((c for c in sym if unicodedata.category(c) in ("Cc", "Zl", "Zp")), None)
    if bad is not None:
        where, fix = (f"at row {row} (0-based data row)", "clean the symbol column") if from_column else \
            ("(from the file's path)", "rename the file or folder")
        raise IngestError(f"{path}: symbol {sym!r} {where} holds the control character {bad!r}: symbols are names "
                          f"printed in tables and logs; {fix}")


def _rounding_note(rounded: dict[int, list], schema: list[str]) -> str:
    """One line: per integer column, how many values float32 changed, and the first of them."""
    parts = []
    for j, (count, (path, row, value, stored)) in sorted(rounded.items()):
        parts.append(f"column {schema[j]!r}: {count:,} values (first {value} -> {stored}, {path.name} row {row})")
    return ("integers above 2^24 were rounded to the nearest float32, which holds every integer only up to "
            f"16,777,216: {'; '.join(parts)}; rescale the column (e.g. volume in thousands) to keep every digit")


def _near(name: str, names: list[str]) -> str:
    """' (did you mean 'Date'?)' for the file's column closest to a name it lacks (same letters in another case
    first), or '': `--time-col date` on a `Date` header listed the columns without pointing at the one meant
    (first-contact audit of 2026-12-07)."""
    import difflib

    close = [n for n in names if n.lower() == name.lower()] or difflib.get_close_matches(name, names, n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _delimiter_hint(names: list[str]) -> str:
    """'; the header looks separated by ';' ...' where a CSV read as one column holds another separator: a
    `time;ticker;bid` file read as one column named `time;ticker;bid`, reported only as a missing time column. And
    pandas' name for an unnamed index (`df.to_parquet` of a DatetimeIndex), which holds the times."""
    index = next((n for n in names if n.startswith("__index_level_")), None)
    if index is not None:
        return (f"; {index!r} is how pandas stores an unnamed index (a DatetimeIndex's times): pass --time-col "
                f"{index}, or name the index before writing the file")
    if len(names) != 1:
        return ""
    sep = next((c for c in (";", "\t", "|") if c in names[0]), None)
    return (f"; the header looks separated by {sep!r}, and stride reads comma-separated CSV: save the file with commas"
            if sep else "")


def _symbol_hint(column: str, typ: Any, symbol_col: str, header: list[str]) -> str:
    """For a feature column of a date or time type: that a store has one timestamp column. Else '; if 'ticker' names
    the instrument, pass --symbol-col ticker' for a text column where the file has no column named as --symbol-col:
    the likely reason a text column is among the features is that the file's symbol column has another name
    (first-contact audit of 2026-12-07: `ticker` was refused as a non-numeric feature with no word of --symbol-col)."""
    if pa.types.is_time(typ) or pa.types.is_date(typ) or pa.types.is_timestamp(typ):
        # a `date,time,...` file: the time of day read as a feature (first-contact audit of 2026-12-07)
        return (f"; {column!r} holds times or dates, and a store has one timestamp column (--time-col): join the date "
                "and the time of day into one column (e.g. 2024-01-02T14:30:00), or leave it out with --columns")
    if symbol_col in header or not (pa.types.is_string(typ) or pa.types.is_large_string(typ)):
        return ""
    return f"; if {column!r} names the instrument, pass --symbol-col {column}"


def _check_columns(path: Path, asked: list[str] | None, names: list[str], schema: list[str], time_col: str,
                   symbol_col: str, header: list[str]) -> None:
    """The feature columns: at least one, each once, each named, each in the file and none the time or symbol
    column. A column without a name (a CSV header `timestamp,symbol,px,`) was written into a store whose manifest
    the reader then refused, left at --out (audit of 2026-12-07): `header` is the file's column names in order, to
    say which."""
    features = set(schema)  # sets, not `in`/`count` on the list: O(n^2) took 71 s on a 1 MB CSV of 40,000 columns
    for i, c in enumerate(header):
        if c in features and not c.strip():
            where = "of the header " if SUFFIXES.get(path.suffix) == "csv" else ""
            what = "has no name" if not c else f"has no name (only whitespace: {c!r})"
            fix = "name it in the header" if where else "name it"
            raise IngestError(f"{path}: column {i + 1} {where}{what}: a store's columns are named; {fix}, or choose "
                              "the feature columns with --columns")
    for c in asked or []:
        if c in (time_col, symbol_col):
            role = "timestamp" if c == time_col else "symbol"
            raise IngestError(f"{path}: requested column {c!r} is the {role} column, not a feature column")
    missing = sorted(set(asked or []) - set(names))
    if missing:
        raise IngestError(f"{path}: requested columns {missing} are not in the file{_near(missing[0], names)} "
                          f"(columns: {', '.join(names)})")
    for c in schema:  # printed by `stride data inspect` and in errors, as symbols are (_check_symbol_text)
        bad = next((ch for ch in c if unicodedata.category(ch) in ("Cc", "Zl", "Zp")), None)
        if bad is not None:
            raise IngestError(f"{path}: column name {c!r} holds the control character {bad!r}: column names are "
                              "printed in tables and logs; rename the column")
    twice = sorted(c for c, n in Counter(schema).items() if n > 1)
    if twice:
        raise IngestError(f"{path}: requested columns {twice} are named more than once")
    if not schema:
        raise IngestError(f"{path}: no feature columns besides {time_col!r} and {symbol_col!r}; a store needs at "
                          "least one numeric column")


def _largest(dtype: str) -> float:
    import torch

    return float(torch.finfo(torch.bfloat16 if dtype == "bfloat16" else torch.float32).max)


def _check_time(path: Path, time_col: str, sym: str, ts: np.ndarray, rows: np.ndarray, last: int | None) -> None:
    full = ts if last is None else np.concatenate([[last], ts])
    d = np.diff(full)
    bad = np.flatnonzero(d <= 0)
    if len(bad):
        i = bad[0] + (0 if last is None else -1) + 1  # index into ts of the offending row
        what = "duplicated" if d[bad[0]] == 0 else "out of order"
        now, before = np.datetime64(int(full[bad[0] + 1]), "ns"), np.datetime64(int(full[bad[0]]), "ns")
        raise IngestError(f"{path}: timestamp {what} at row {int(rows[i])} (symbol {sym}, column {time_col!r}): "
                          f"{now} after {before}")
