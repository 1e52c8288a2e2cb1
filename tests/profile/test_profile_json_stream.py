"""The streaming reader: same events as json.load, chunk boundaries anywhere, clear errors on bad files."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from shared_data import TRACES, need_shared

from stride.profile import json_stream
from stride.profile.errors import TraceError
from stride.profile.json_stream import scan_trace

SHARED = TRACES


def _collect(path: Path) -> tuple[dict, list]:
    events: list = []
    meta = scan_trace(path, events.extend)
    return meta, events


DOC = {"schemaVersion": 1, "traceEvents": [{"ph": "X", "name": "a \u00e9 \\\" ]}", "ts": 12345678901234.5, "dur": 7},
                                           {"ph": "i", "ts": 3, "args": {"x": [1, 2, {"y": None}]}}],
       "distributedInfo": {"rank": 5}, "displayTimeUnit": "ns", "tail": 123456789}


@pytest.mark.parametrize("chunk", [1, 2, 3, 7, 64, 1 << 22])
def test_any_chunk_size_gives_the_same_events(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    p = tmp_path / "t.json"
    p.write_text(json.dumps(DOC, indent=2))
    monkeypatch.setattr(json_stream, "CHUNK_CHARS", chunk)
    meta, events = _collect(p)
    assert events == DOC["traceEvents"]
    assert meta == {k: v for k, v in DOC.items() if k != "traceEvents"}  # the number at the very end is whole


def test_gzip_and_array_format(tmp_path: Path) -> None:
    p = tmp_path / "t.json.gz"
    with gzip.open(p, "wt") as fh:
        json.dump(DOC["traceEvents"], fh)
    meta, events = _collect(p)
    assert meta == {} and events == DOC["traceEvents"]


@pytest.mark.parametrize("name", ["cpu_gloo_2rank/rank0.pt.trace.json.gz", "hta/trace_filter/sampled_rank-1.json.gz"])
def test_shared_trace_equals_json_load(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    p = need_shared(SHARED / name)
    monkeypatch.setattr(json_stream, "CHUNK_CHARS", 4093)  # a prime: boundaries fall everywhere
    with gzip.open(p, "rt") as fh:
        ref = json.load(fh)
    meta, events = _collect(p)
    assert events == ref["traceEvents"]
    assert meta == {k: v for k, v in ref.items() if k != "traceEvents"}


@pytest.mark.parametrize("cut", [10, 40, 0.5, -2, -1])
def test_truncated_file_names_file_and_problem(tmp_path: Path, cut: float) -> None:
    text = json.dumps(DOC)
    n = int(len(text) * cut) if isinstance(cut, float) else (cut if cut > 0 else len(text) + cut)
    p = tmp_path / "cut.json"
    p.write_text(text[:n])
    with pytest.raises(TraceError, match=r"cut\.json: (truncated|malformed)"):
        _collect(p)


def test_truncated_gzip(tmp_path: Path) -> None:
    raw = gzip.compress(json.dumps(DOC).encode())
    p = tmp_path / "cut.json.gz"
    p.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(TraceError, match=r"cut\.json\.gz"):
        _collect(p)


@pytest.mark.parametrize("text, what", [
    ("", "empty file"),
    ("hello", "not a JSON trace"),
    ('{"schemaVersion": 1}', "no 'traceEvents'"),
    ('{"traceEvents": {"a": 1}}', "'traceEvents' is not a list"),
    ('{"traceEvents": [1, 2]}', "is a int, not an object"),
    ('{"traceEvents": [{"ph": "X"} {"ph": "X"}]}', "malformed JSON"),
    ('{"traceEvents": []} trailing', "unexpected data after the end"),
])
def test_malformed(tmp_path: Path, text: str, what: str) -> None:
    p = tmp_path / "bad.json"
    p.write_text(text)
    with pytest.raises(TraceError, match="bad.json") as exc:
        _collect(p)
    assert what in str(exc.value)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="nope.json: cannot open"):
        _collect(tmp_path / "nope.json")


@pytest.mark.parametrize("chunk", [5, 50, 333, 4096])
def test_nested_separators_inside_events(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    """`},` inside events (nested objects before other keys, lists of objects, strings) must not cut events."""
    events = [{"ph": "X", "args": {"o": {"p": i}, "l": [{"a": 1}, {"b": "},{"}], "s": "x}, {y"}, "ts": i, "dur": 1}
              for i in range(300)]
    p = tmp_path / "n.json"
    p.write_text(json.dumps({"traceEvents": events}, indent=None))
    monkeypatch.setattr(json_stream, "CHUNK_CHARS", chunk)
    meta, got = _collect(p)
    assert got == events and meta == {}


def test_a_gzip_cut_in_half_says_what_is_true(tmp_path: Path) -> None:
    """Audit 5: a .gz cut in half read "compressed or text stream is broken near character 0" (the text reader
    loses the chunk it was decoding). Now: how many compressed bytes, what they decompress to, and that the end is
    missing."""
    text = json.dumps({"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": f"op{i}", "ts": i, "dur": 1}
                                       for i in range(20_000)]})
    raw = gzip.compress(text.encode())
    p = tmp_path / "half.json.gz"
    p.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(TraceError) as exc:
        _collect(p)
    msg = str(exc.value)
    assert "half.json.gz: the gzip stream ends early" in msg and f"{len(raw) // 2:,} compressed bytes" in msg
    assert "near character" not in msg and "end-of-stream marker" in msg
    decoded = int(msg.split("decompress to ")[1].split(" bytes")[0].replace(",", ""))
    assert 0 < decoded < len(text)


@pytest.mark.parametrize("gz", [False, True])
def test_utf8_byte_order_mark_is_skipped(tmp_path: Path, gz: bool) -> None:
    """A trace saved with a UTF-8 BOM (some Windows tools write one) reads as without it; before it was refused
    as "not a JSON trace: starts with '\\ufeff'" (outside audit of `stride analyze`)."""
    raw = b"\xef\xbb\xbf" + json.dumps(DOC).encode("utf-8")
    p = tmp_path / ("bom.json.gz" if gz else "bom.json")
    p.write_bytes(gzip.compress(raw) if gz else raw)
    meta, events = _collect(p)
    assert meta == {k: v for k, v in DOC.items() if k != "traceEvents"} and events == DOC["traceEvents"]
