"""Read a Chrome/Kineto trace one event at a time, so a multi-GB trace never sits in memory whole.

The top-level object is walked key by key; every key except `traceEvents` is decoded whole (they are
small: metadata, `distributedInfo`), and `traceEvents` is decoded in batches over a sliding text
buffer: the buffer is cut after its last `},` and `[` + cut + `]` is handed to the C decoder in one
call. That parse can only succeed when the cut falls between two whole top-level events (a cut inside
a string leaves it unterminated, one inside a nested value leaves brackets open), so a success is
exact; on failure the reader falls back to one `raw_decode` per event. Truncation and malformed JSON
raise `TraceError` naming the file and the character offset.
"""

from __future__ import annotations

import gzip
import json
import re
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TextIO

from stride.profile.errors import NotATrace, TraceError

CHUNK_CHARS = 1 << 22  # 4 Mi characters per read
MAX_VALUE_CHARS = 1 << 28  # one JSON value (an event, a metadata entry) larger than this is refused
_WS = re.compile(r"[ \t\n\r]*")


def open_text(path: Path) -> TextIO:
    """Open `.json` or `.json.gz` (detected by magic bytes, not only by name) as text; a UTF-8 byte-order mark (some
    Windows editors and tools write one) is skipped: such a trace was refused as "starts with '\\ufeff'"."""
    try:
        with open(path, "rb") as fh:
            magic = fh.read(2)
    except OSError as exc:
        raise TraceError(f"{path}: cannot open: {exc.strerror or exc}") from exc
    if magic == b"\x1f\x8b":
        return gzip.open(path, "rt", encoding="utf-8-sig")
    return open(path, encoding="utf-8-sig")


def _gzip_cut_short(path: Path) -> str:
    """What is true of a gzip file that ends early: its size, how much it decompresses to, and that the end is
    missing. (A character offset says nothing here: the text reader loses the chunk it was decoding, so it read
    "near character 0" of a 190 KB file cut in half.)"""
    size = decoded = 0
    try:
        d = zlib.decompressobj(wbits=47)  # gzip or zlib header
        with open(path, "rb") as fh:
            while block := fh.read(1 << 20):
                size += len(block)
                while block:
                    decoded += len(d.decompress(block))
                    block = b""
                    if d.eof:  # a member ended whole (gzip files may hold several): the next one follows
                        block, d = d.unused_data, zlib.decompressobj(wbits=47)
    except (OSError, zlib.error):
        pass
    return (f"{path}: the gzip stream ends early: the file's {size:,} compressed bytes decompress to {decoded:,} "
            "bytes and stop before gzip's end-of-stream marker (the file was cut short: an interrupted write or copy)")


class _Buffer:
    """A sliding window over the text of one file, refilled on demand."""

    def __init__(self, fh: TextIO, path: Path) -> None:
        self.fh, self.path = fh, path
        self.buf, self.pos, self.base, self.eof = "", 0, 0, False
        self.decoder = json.JSONDecoder()

    def fill(self) -> None:
        try:
            chunk = self.fh.read(CHUNK_CHARS)
        except EOFError as exc:  # gzip: the compressed stream stops before its end-of-stream marker
            raise TraceError(_gzip_cut_short(self.path)) from exc
        except (OSError, zlib.error, UnicodeDecodeError) as exc:
            raise TraceError(
                f"{self.path}: compressed or text stream is broken near character {self.offset}: {exc}"
            ) from exc
        if not chunk:
            self.eof = True
        self.base += self.pos
        self.buf = self.buf[self.pos :] + chunk
        self.pos = 0

    @property
    def offset(self) -> int:
        return self.base + self.pos

    def skip_ws(self) -> str:
        """Skip whitespace; return the next character ('' at end of file)."""
        while True:
            self.pos = _WS.match(self.buf, self.pos).end()
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if self.eof:
                return ""
            self.fill()

    def expect(self, chars: str, where: str) -> str:
        c = self.skip_ws()
        if c == "":
            raise TraceError(f"{self.path}: truncated: file ends inside {where} (character {self.offset})")
        if c not in chars:
            raise TraceError(
                f"{self.path}: malformed JSON in {where} at character {self.offset}: "
                f"expected one of {chars!r}, got {c!r}"
            )
        self.pos += 1
        return c

    def value(self, where: str) -> Any:
        """Decode one JSON value at the cursor, refilling the buffer while it is incomplete."""
        self.skip_ws()
        while True:
            try:
                obj, end = self.decoder.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError as exc:
                if not self.eof and len(self.buf) - self.pos < MAX_VALUE_CHARS:
                    self.fill()
                    continue
                what = "truncated" if self.eof else "malformed JSON (or a value over 256 Mi characters)"
                raise TraceError(
                    f"{self.path}: {what} in {where} at character {self.base + exc.pos}: {exc.msg}"
                ) from None
            if end == len(self.buf) and not self.eof:  # a number may continue in the next chunk
                self.fill()
                continue
            self.pos = end
            return obj


def scan_trace(path: Path, on_events: Callable[[list[dict]], None]) -> dict[str, Any]:
    """Stream `path`, calling `on_events(batch)` with the trace events in order; return the other top-level keys.

    Whatever the bytes, the only error is a TraceError naming the file: a number with more digits than
    Python converts (ValueError), nesting deeper than the decoder recurses (RecursionError), and an event
    whose fields have types `on_events` cannot use (TypeError, AttributeError) included."""
    with open_text(path) as fh:
        b = _Buffer(fh, path)
        try:
            return _scan(b, path, on_events)
        except TraceError:
            raise
        except (ValueError, RecursionError, TypeError, AttributeError) as exc:
            what = "nested too deeply" if isinstance(exc, RecursionError) else f"{type(exc).__name__}: {exc}"
            if isinstance(exc, TypeError | AttributeError):
                what = f"an event field has an unexpected type ({what})"
            raise TraceError(f"{path}: unreadable trace near character {b.offset}: {what[:200]}") from None


def _scan(b: _Buffer, path: Path, on_events: Callable[[list[dict]], None]) -> dict[str, Any]:
    meta: dict[str, Any] = {}
    b.fill()
    first = b.skip_ws()
    if first == "":
        raise TraceError(f"{path}: empty file, not a profiler trace")
    if first == "[":  # Chrome's JSON Array Format: the file is the event list
        for batch in _iter_array(b, "the top-level event array"):
            _check_events(batch, path, b)
            on_events(batch)
    elif first == "{":
        b.pos += 1
        seen_events = False
        if b.skip_ws() == "}":
            b.pos += 1
        else:
            while True:
                key = b.value("a top-level key")
                if not isinstance(key, str):
                    raise TraceError(
                        f"{path}: malformed JSON: top-level key at character {b.offset} is not a string"
                    )
                b.expect(":", f"top-level key {key!r}")
                if key == "traceEvents":
                    if b.skip_ws() != "[":
                        raise TraceError(f"{path}: 'traceEvents' is not a list (character {b.offset})")
                    seen_events = True
                    for batch in _iter_array(b, "'traceEvents'"):
                        _check_events(batch, path, b)
                        on_events(batch)
                else:
                    meta[key] = b.value(f"top-level key {key!r}")
                if b.expect(",}", "the top-level object") == "}":
                    break
        if not seen_events:
            raise NotATrace(f"{path}: no 'traceEvents' list: not a PyTorch profiler / Chrome trace")
    else:
        raise TraceError(f"{path}: not a JSON trace: starts with {first!r}")
    if b.skip_ws() != "":
        raise TraceError(f"{path}: unexpected data after the end of the trace at character {b.offset}")
    return meta


def _iter_array(b: _Buffer, where: str) -> Iterator[list]:
    """Yield the elements of the JSON array whose '[' is at the cursor, in batches."""
    b.pos += 1
    if b.skip_ws() == "]":
        b.pos += 1
        return
    loads = json.loads
    while True:
        batch = None
        hi = len(b.buf)
        for _ in range(4):  # a few candidate cuts, latest first
            cut = b.buf.rfind("},", b.pos, hi)
            if cut <= b.pos:
                break
            hi = cut
            nxt = _WS.match(b.buf, cut + 2).end()
            if nxt < len(b.buf) and b.buf[nxt] != "{":
                continue  # `},` followed by a key: inside an event, not between two
            try:
                batch = loads("[" + b.buf[b.pos : cut + 1] + "]")
            except json.JSONDecodeError:
                continue
            break
        if batch is not None:
            b.pos = cut + 1  # the ',' after the last event of the batch comes next
            yield batch
            b.expect(",", where)
            if len(b.buf) - b.pos < 1 << 16 and not b.eof:
                b.fill()
            continue
        yield [b.value(f"{where} (element near character {b.offset})")]
        if b.expect(",]", where) == "]":
            return


def _check_events(batch: list, path: Path, b: _Buffer) -> None:
    for ev in batch:
        if not isinstance(ev, dict):
            raise TraceError(
                f"{path}: trace event before character {b.offset} is a {type(ev).__name__}, not an object"
            )
