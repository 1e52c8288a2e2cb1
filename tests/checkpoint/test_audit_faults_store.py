"""A data store replaced underneath a killed run, then the same command (outside audit of checkpoints under faults,
2026-12-07).

Before: the checkpoint recorded the store's window count only (meta.json `data`), so a store re-ingested with other
values of the same shape (corrected prices, `stride data ingest ... --overwrite`) resumed without a word and trained
its remaining steps on other data than its first ones. Now meta.json records the sha256 of the store's files (from
the store's manifest) and a resume onto other content is refused, naming the store and the file, unless forced; the
same data ingested again (new files, same bytes) still resumes exactly.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from ckpt_helpers import Crash, CrashAt, ckpt_config, fit

from stride.checkpoint import ConfigMismatchError
from stride.data.ingest import ingest
from stride.train.trainer import Trainer

T0 = np.datetime64("2024-01-02T14:30", "ns").astype(np.int64)


def _bars(root: Path, seed: int) -> Path:
    """Two symbols of 2 days x 50 minute bars (close, f1) as Parquet; `seed` draws the values, not the shape."""
    rng = np.random.default_rng(seed)
    for sym in ("AAA", "BBB"):
        for day in range(2):
            ts = T0 + day * 86_400 * 10**9 + np.arange(50) * 60 * 10**9
            t = pa.table({"timestamp": pa.array(ts, pa.timestamp("ns")), "symbol": [sym] * 50,
                          "close": 100 * np.exp(np.cumsum(1e-3 * rng.standard_normal(50))),
                          "f1": rng.standard_normal(50)})
            part = root / f"date=2024-01-0{2 + day}" / f"symbol={sym}"
            part.mkdir(parents=True, exist_ok=True)
            pq.write_table(t, part / "part-0.parquet")
    return root


def _on(store: Path, *more: str) -> list[str]:
    return ['data.source="store"', f'data.store="{store}"', "data.seq_len=4", "data.horizons=[1]",
            'model.name="mlp"', "train.batch_size=8", "train.steps=12", *more]


@pytest.fixture
def crashed(tmp_path: Path) -> tuple[Path, Path]:
    """A run on a store, killed (an exception) after step 7: checkpoints at steps 3 and 6."""
    store = ingest(_bars(tmp_path / "src", seed=0), tmp_path / "store")
    out = tmp_path / "run"
    with pytest.raises(Crash):
        fit(out, *_on(store), callbacks=[CrashAt(7)])
    return store, out


def test_a_store_replaced_by_other_data_of_the_same_shape_is_refused_naming_it(tmp_path: Path, crashed, capsys) -> None:
    store, out = crashed
    ingest(_bars(tmp_path / "src2", seed=1), store, overwrite=True)  # same rows and columns, other values
    metrics = (out / "metrics.jsonl").read_bytes()
    with pytest.raises(ConfigMismatchError) as exc:
        fit(out, *_on(store))
    msg = str(exc.value)
    assert msg.startswith(f"checkpoint {out / 'checkpoints' / 'step_00000006'} was taken on other data than the "
                          f"store {store.absolute()} holds (values.bin sha256 "), msg
    assert "timestamps.bin" not in msg  # the same bars: only the values differ
    assert "the store was re-ingested or replaced since" in msg and "force_resume" in msg
    assert (out / "metrics.jsonl").read_bytes() == metrics and not (out / "summary.json").exists()
    capsys.readouterr()
    s = fit(out, *_on(store, "checkpoint.force_resume=true"))  # the user's choice: continue on the new data
    assert s["checkpoint"]["resumed_from"] == "step_00000006" and s["steps"] == 12
    assert "(forced: continuing on this data)" in capsys.readouterr().err


def test_the_same_data_ingested_again_resumes_exactly(tmp_path: Path, crashed) -> None:
    store, out = crashed
    ingest(_bars(tmp_path / "src2", seed=0), store, overwrite=True)  # new files, the same bytes
    s = fit(out, *_on(store))
    try:
        ref = Trainer(config=ckpt_config(*_on(store), "checkpoint.enabled=false"), write_run_dir=False).fit().summary
    finally:
        torch.use_deterministic_algorithms(False)
    assert s["checkpoint"]["resumed_from"] == "step_00000006" and s["params_sha256"] == ref["params_sha256"]
    meta = json.loads((out / "checkpoints" / "step_00000012" / "meta.json").read_text())
    assert meta["data_store"] == {"path": str(store.absolute()), "sha256": {
        k: v["sha256"] for k, v in json.loads((store / "manifest.json").read_text())["files"].items()}}
