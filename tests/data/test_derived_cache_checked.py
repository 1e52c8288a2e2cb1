"""A store's derived caches are data stride wrote, checked as the store's own files are (audit 14, M4).

A rolling-z-score cache filled with NaN (same size) was used by name and size alone (the NaN loss was blamed on the
learning rate) and `inspect --verify` passed; a `derived` link out of the store had the caches written and read
wherever it pointed; `loader_probe.json` values (3000 gather threads, prefetch 50000, ahead -7) were taken as they
were (the last a ValueError traceback). Now each cache has a record (key, size, XXH3-128, sampled block digests):
one that differs is rebuilt with a warning, `inspect --verify` names it, a derived/ link out of the store is refused
in one line, and a cached loader plan out of range is measured again, with a warning.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest

from stride.cli.main import main
from stride.data import normalize, probe
from stride.data.ingest import ingest
from stride.data.normalize import derived_features, record_path
from stride.data.store import StoreError, open_store

T0 = np.datetime64("2024-01-02T14:31", "s")


@pytest.fixture
def store(tmp_path: Path) -> Path:
    rng = np.random.default_rng(0)
    v = np.stack([100 * np.exp(np.cumsum(1e-3 * rng.standard_normal(300))), rng.standard_normal(300)], 1)
    rows = [f"{T0 + np.timedelta64(i, 'm')},{float(a)!r},{float(b)!r}" for i, (a, b) in enumerate(v)]
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "A.csv").write_text("\n".join(["timestamp,close,x", *rows]) + "\n")
    return ingest(tmp_path / "src", tmp_path / "st")


def _rolling(store_path: Path) -> np.memmap:
    st = open_store(store_path)
    sha = st.manifest["files"]["values.bin"]["sha256"]
    return derived_features(st.values, store_path, sha, [0, 1], st.segments(), "rolling", 8)


def test_a_changed_cache_is_rebuilt_with_a_warning(store: Path, caplog: pytest.LogCaptureFixture) -> None:
    good = np.array(_rolling(store))
    (cache,) = (store / "derived").glob("rolling8-*.f32")
    assert json.loads(record_path(cache).read_text())["bytes"] == cache.stat().st_size
    poisoned = np.memmap(cache, dtype=np.float32, mode="r+")
    poisoned[:] = np.nan  # the same size: it was used as it was
    poisoned.flush()
    del poisoned
    with caplog.at_level(logging.WARNING, logger="stride.data"):
        again = np.array(_rolling(store))
    assert np.isfinite(again).all() and np.array_equal(again, good)
    assert f"derived feature cache {cache} changed since it was written" in caplog.text


def test_inspect_verify_names_a_changed_cache(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _rolling(store)
    assert main(["data", "inspect", str(store), "--verify"]) == 0
    assert "and of 1 derived feature cache(s)" in capsys.readouterr().out
    (cache,) = (store / "derived").glob("rolling8-*.f32")
    with open(cache, "r+b") as f:  # one byte between the sampled blocks' reach is enough for --verify
        f.seek(cache.stat().st_size // 2 + 3)
        b = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([b[0] ^ 0xFF]))
    assert main(["data", "inspect", str(store), "--verify"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"stride data inspect: {cache}: differs from its record") and "delete it" in err, err


def test_a_derived_link_out_of_the_store_is_refused(store: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (store / "derived").symlink_to(elsewhere)
    with pytest.raises(StoreError, match=r"derived: a link to .*elsewhere, outside the store: refused"):
        _rolling(store)
    with pytest.raises(StoreError, match="outside the store"):
        probe.cache_path(str(store))
    assert list(elsewhere.iterdir()) == []


@pytest.mark.parametrize(("change", "why"), [
    ({"gather_threads": 3000}, "gather_threads = 3000 is not 1.."),
    ({"prefetch": 50000}, "prefetch = 50000 is not 0..8"),
    ({"ahead": -7}, "ahead = -7 is not 0..64"),
    ({"native": "yes"}, "are not true or false"),
])
def test_a_cached_loader_plan_out_of_range_is_measured_again(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                             change: dict, why: str) -> None:
    path = tmp_path / "loader_probe.json"
    plan = probe.LoaderPlan(prefetch=0, gather_threads=1).as_dict()
    path.write_text(json.dumps({"k": {k: v for k, v in plan.items() if k != "origin"}}))
    assert probe._cached(path, "k").origin == "cache"  # as the probe wrote it: used
    path.write_text(json.dumps({"k": {**{k: v for k, v in plan.items() if k != "origin"}, **change}}))
    with caplog.at_level(logging.WARNING, logger="stride.data"):
        assert probe._cached(path, "k") is None
    assert why in caplog.text and "measuring the loader again" in caplog.text


def test_an_unrecorded_cache_of_an_earlier_stride_is_rebuilt_quietly(store: Path,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    good = np.array(_rolling(store))
    (cache,) = (store / "derived").glob("rolling8-*.f32")
    record_path(cache).unlink()
    cache.write_bytes(np.full(good.shape, 7.0, np.float32).tobytes())
    with caplog.at_level(logging.WARNING, logger="stride.data"):
        assert np.array_equal(np.array(_rolling(store)), good)
    assert "rebuilding" not in caplog.text and record_path(cache).is_file()
    assert normalize.verify_derived(store) == 1
