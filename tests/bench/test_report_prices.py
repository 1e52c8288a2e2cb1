"""`stride report` and `stride bench` find their default price table from any directory.

Before: the default was `configs/prices.toml` relative to the current directory, so `stride report DIR` run
anywhere but a clone's root (and always in a pip-installed stride, which has no configs/) failed with
"price table not found: configs/prices.toml". The table now ships inside the package.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from stride.bench.results import make_results
from stride.cli.main import main
from stride.report.recommend import DEFAULT_PRICES, load_prices

ROOT = Path(__file__).resolve().parents[2]


def _results(folder: Path) -> Path:
    w = {"name": "solo", "version": 1, "mfu": 0.5, "peak_mem_bytes": 2**20, "time_to_target_s": None, "run_dir": None,
         "throughput": {"unit": "samples/s", "median": 1000.0, "min": 990.0, "max": 1010.0, "cv": 0.01},
         "step_time_breakdown_s": {"data": 0.01, "forward": 0.3, "backward": 0.6, "optimizer": 0.05, "other": 0.04}}
    folder.mkdir()
    (folder / "results.json").write_text(json.dumps(make_results("quick", {"gpus": []}, [w])))
    return folder


def test_report_without_prices_works_from_another_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    bench = _results(tmp_path / "bench")
    elsewhere = tmp_path / "elsewhere"  # no configs/ folder here, as for a pip-installed stride
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert main(["report", str(bench)]) == 0, capsys.readouterr().err
    solo = (bench / "summary.md").read_text().split("**solo**")[1].split("\n")[0]
    # the shipped table's cpu price: 1e6 samples at 1000/s take 1000 s
    cpu = load_prices()["cpu"]
    assert f"Cost: {cpu * 1000 / 3600:.4f} USD per million samples (cpu)" in solo


def test_the_default_price_table_is_package_data() -> None:
    """What a wheel installs: the table beside stride/report's code, listed in pyproject's package-data."""
    assert DEFAULT_PRICES.is_file() and DEFAULT_PRICES.parent == ROOT / "stride" / "report"
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert any(DEFAULT_PRICES.match(pattern) for pattern in data.get("stride.report", []))
    assert load_prices() == load_prices(DEFAULT_PRICES) and load_prices()["cpu"] > 0


def test_an_explicit_missing_price_table_is_still_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bench = _results(tmp_path / "bench")
    assert main(["report", str(bench), "--prices", str(tmp_path / "nope.toml")]) == 2
    assert "price table not found" in capsys.readouterr().err


def test_a_deeply_nested_price_table_is_one_line(tmp_path: Path) -> None:
    """tomllib recurses per level: arrays nested 100,000 deep were a RecursionError traceback (audit 14, L4)."""
    deep = tmp_path / "deep.toml"
    deep.write_text(f"[prices]\nx = {'[' * 100_000}{']' * 100_000}\n")
    with pytest.raises(ValueError, match=rf"^{deep}: not valid TOML: nested too deeply to read$"):
        load_prices(deep)
