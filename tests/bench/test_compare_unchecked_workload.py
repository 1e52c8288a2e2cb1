"""`stride compare` of an entry without its `config` (outside audit of the benchmark figures): the workload check
(batch size, model, data) was skipped without a word, and batch 256 against 128 read "within noise"."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from stride.cli.main import main


def _file(path: Path, config: dict[str, Any] | None, median: float) -> Path:
    entry: dict[str, Any] = {"name": "mlp", "version": 1, "mfu": None, "peak_mem_bytes": 1, "time_to_target_s": None,
                             "step_time_breakdown_s": {},
                             "throughput": {"unit": "samples/s", "median": median, "min": 0.9 * median,
                                            "max": 1.1 * median, "cv": 0.08, "n": 3}}
    if config is not None:
        entry["config"] = config
    path.write_text(json.dumps({"schema": "stride.bench.results", "schema_version": 2, "suite": "quick",
                                "environment": {}, "workloads": [entry]}))
    return path


def test_a_side_without_config_is_said_under_the_table_and_in_json(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    a = _file(tmp_path / "a.json", None, 46000.0)
    b = _file(tmp_path / "b.json", {"train": {"batch_size": 128}}, 38000.0)
    assert main(["compare", str(a), str(b), "--json"]) == 0
    [row] = json.loads(capsys.readouterr().out)
    assert row["verdict"] == "within noise"  # 0.826 inside a band of 2 x sqrt(2) x 0.08 = 22.6 %
    assert row["workload_unchecked"] == "A has no config, so the batch size, model and data were not compared"
    assert main(["compare", str(a), str(b)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert ("mlp: workload not checked: A has no config, so the batch size, model and data were not compared; the "
            "verdict is of two throughputs that may be of different workloads") in out


def test_both_configs_checked_as_before(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = _file(tmp_path / "a.json", {"train": {"batch_size": 256}}, 46000.0)
    b = _file(tmp_path / "b.json", {"train": {"batch_size": 128}}, 38000.0)
    assert main(["compare", str(a), str(b)]) == 2
    assert "train.batch_size 256 vs 128" in capsys.readouterr().err
    a2 = _file(tmp_path / "a2.json", {"train": {"batch_size": 128}}, 46000.0)
    assert main(["compare", str(a2), str(b), "--json"]) == 0
    [row] = json.loads(capsys.readouterr().out)
    assert row["workload_unchecked"] is None
