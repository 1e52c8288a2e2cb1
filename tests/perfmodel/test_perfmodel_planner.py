"""Planner search, the `stride plan` CLI, and `--from-csv` on the published rows."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from stride.cli.main import main
from stride.config.errors import ConfigError
from stride.perfmodel.hardware import load_catalog
from stride.perfmodel.model_spec import PRESETS, parse_model_spec
from stride.perfmodel.planner import default_global_batch, explain, search

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "perfmodel"


def test_thousand_gpu_search_is_fast_and_ranked() -> None:
    spec, hw = PRESETS["llama3-70b"], load_catalog().get("h100")
    t0 = time.perf_counter()
    res = search(spec, hw, 1000, default_global_batch(spec, 1000))
    elapsed = time.perf_counter() - t0
    assert elapsed < 5.0, f"search took {elapsed:.2f} s"
    assert res.ranked and all(p.fits for p in res.ranked)
    times = [p.step_time_s for p in res.ranked]
    assert times == sorted(times)
    assert all(not p.fits for p in res.rejected_memory)
    assert explain(res.ranked[-1], res.best).startswith("+")


def test_model_spec_parsing() -> None:
    s = parse_model_spec("layers=4,hidden=256,heads=8,kv=2,vocab=1000,seq=512,act=swiglu,ffn=700")
    assert (s.layers, s.kv_heads, s.ffn, s.act) == (4, 2, 700, "swiglu")
    assert parse_model_spec("llama3-8b,seq=4096").seq == 4096
    assert parse_model_spec("layers=2,hidden=64,heads=4,vocab=10,seq=8").ffn == 256
    for bad, msg in [("lama3-8b", "did you mean"), ("layers=2,hidden=64", "missing heads"),
                     ("layers=x,hidden=64,heads=4,vocab=10,seq=8", "expects int"),
                     ("layers=2,hidden=63,heads=4,vocab=10,seq=8", "not divisible")]:
        with pytest.raises(ConfigError, match=msg):
            parse_model_spec(bad)


def test_cli_plan_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--model", "llama3-8b", "--hardware", "h100", "--devices", "16", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["best"]["fits"] and out["best"]["devices"] == 16
    assert out["best"]["step_time_s"] == pytest.approx(sum(out["best"]["breakdown_s"].values()), rel=1e-9)


def test_cli_compare_hardware(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--model", "llama3-8b", "--devices", "8", "--compare-hardware", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["hardware"]
    ok = [r for r in rows if "reason" not in r]
    assert [r["days_to_budget"] for r in ok] == sorted(r["days_to_budget"] for r in ok)
    assert {r["hardware"] for r in rows} == set(load_catalog().names())


def test_cli_from_csv_never_crashes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = SHARED / "published_dev.csv"
    if not src.exists():
        pytest.skip(f"../shared/perfmodel/published_dev.csv not found: {src}")
    lines = src.read_text().splitlines()
    header = lines[0].split(",")
    bad = dict.fromkeys(header, "")
    bad.update(row_id="broken-1", gpu="Z9000", ffn_act="gelu", layers="2")
    bad2 = dict(bad, row_id="broken-2", ffn_act="relu^2")
    f = tmp_path / "rows.csv"
    f.write_text("\n".join(lines + [",".join(r[k] for k in header) for r in (bad, bad2)]) + "\n")
    assert main(["plan", "--from-csv", str(f), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == len(lines) + 1
    keys = {"row_id", "iter_time_s", "tokens_per_s_per_gpu", "mfu", "peak_mem_gib", "fits"}
    assert all(keys <= set(r) for r in rows)
    good = [r for r in rows if not r.get("reason")]
    assert len(good) == len(lines) - 1 and all(r["tokens_per_s_per_gpu"] > 0 for r in good)
    broken = {r["row_id"]: r for r in rows if r.get("reason")}
    assert set(broken) == {"broken-1", "broken-2"} and broken["broken-1"]["tokens_per_s_per_gpu"] is None
    assert "relu^2" in broken["broken-2"]["reason"]


def test_cli_errors_are_clean(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--model", "llama3-8b", "--devices", "8", "--hardware", "z100"]) == 2
    assert "unknown hardware" in capsys.readouterr().err
