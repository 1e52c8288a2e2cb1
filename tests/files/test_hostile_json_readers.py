"""Hostile JSON and NumPy inputs that reached a traceback past readers built to refuse them (audit of session 37).

Python's json raises three things on text that is not what stride writes: JSONDecodeError, a plain ValueError for
an integer literal over 4300 digits (`sys.int_info.str_digits_check_threshold`), and RecursionError for arrays or
objects nested thousands deep. Readers that caught JSONDecodeError alone let the other two through as tracebacks
(`stride report`, `stride compare`, `stride plan --efficiency`), or printed the bare ValueError without the file.
Each test here fails on the code before the fix.
"""

from __future__ import annotations

import json
import os
import struct
import threading
import zipfile
from pathlib import Path

import numpy as np
import pytest

from stride.cli.main import main

DEEP = "[" * 100_000 + "]" * 100_000
BIG_INT = "9" * 5000  # over Python's 4300-digit limit for int(str)


@pytest.mark.parametrize("text", [DEEP, '{"steps": ' + BIG_INT + "}"], ids=["nested", "huge-int"])
def test_report_and_compare_name_a_run_summary_that_json_cannot_read(
        tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "RUN"
    run.mkdir()
    (run / "summary.json").write_text(text)
    for argv in (["report", str(run)], ["compare", str(run), str(run)]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert f"{run / 'summary.json'}: not valid JSON" in err, err
        assert "Traceback" not in err


@pytest.mark.parametrize("text", [DEEP, '{"suite": ' + BIG_INT + "}"], ids=["nested", "huge-int"])
def test_report_names_a_results_json_that_json_cannot_read(
        tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]) -> None:
    bench = tmp_path / "BENCH"
    bench.mkdir()
    (bench / "results.json").write_text(text)  # the folder's kind is asked first (folder_kind), then the file is read
    for target in (bench, bench / "results.json"):
        assert main(["report", str(target)]) == 2
        err = capsys.readouterr().err
        assert f"{bench / 'results.json'}: not valid JSON" in err, err


def test_a_metrics_line_with_a_huge_integer_is_a_note_not_a_traceback(tmp_path: Path) -> None:
    from stride.bench.stats import run_step_rates

    (tmp_path / "metrics.jsonl").write_text('{"step": 4, "step_time_s": 0.5, "samples_per_s": 128.0}\n'
                                            '{"step": 5, "step_time_s": ' + BIG_INT + ', "samples_per_s": 1.0}\n')
    rates, why = run_step_rates(tmp_path, {"steps": 6, "start_step": 0}, {"metrics": {"skip_steps": 0}})
    assert rates == [] and why == "metrics.jsonl line 2 is not JSON (a cut or damaged line)"


def test_plan_names_an_efficiency_file_with_a_huge_integer(tmp_path: Path) -> None:
    from stride.config.errors import ConfigError
    from stride.perfmodel.efficiency import read_json

    path = tmp_path / "eff.json"
    path.write_text('{"gemm": ' + BIG_INT + "}")
    with pytest.raises(ConfigError, match=r"eff\.json: not valid JSON: Exceeds the limit"):
        read_json(path)


def _fake_peak(device: object, dtype: object, n: int, seconds: float) -> float:
    return {"torch.float32": 2.0e11, "torch.bfloat16": 4.0e11, "torch.float16": 1.0e11}[str(dtype)]


@pytest.mark.parametrize("fp32", ['"x"', "NaN", "-1", "0", "null", "[1]"])
def test_a_damaged_dtype_speed_cache_is_measured_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       fp32: str) -> None:
    """A cached figure that is no positive number left precision advice a TypeError ('x' <= 0) or nonsense."""
    from stride.metrics import dtype_speed

    monkeypatch.setenv("STRIDE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(dtype_speed, "_MEMO", {})
    monkeypatch.setattr(dtype_speed, "measured_matmul_peak", _fake_peak)
    key = dtype_speed.host_key()
    text = json.dumps({key: {"fp32": "@", "bf16": 4e11, "fp16": 1e11}})
    dtype_speed.cache_path().write_text(text.replace('"@"', fp32))
    assert dtype_speed.measured_dtype_flops() == {"fp32": 2.0e11, "bf16": 4.0e11, "fp16": 1.0e11}
    assert json.loads(dtype_speed.cache_path().read_text())[key]["fp32"] == 2.0e11  # the damaged figure replaced


def test_a_fifo_or_a_deeply_nested_cache_file_is_no_cache(tmp_path: Path) -> None:
    """A FIFO in the cache's place blocked every command that reads it, for ever; nesting was a traceback."""
    from stride.files.user_cache import read_json_cache

    nested = tmp_path / "nested.json"
    nested.write_text(DEEP)
    assert read_json_cache(nested) == {}
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    got: list[dict] = []
    reader = threading.Thread(target=lambda: got.append(read_json_cache(fifo)), daemon=True)
    reader.start()
    reader.join(30)  # not a timing: the old reader never returned
    if reader.is_alive():  # free the blocked open so the thread ends, then fail
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("read_json_cache blocked on a FIFO")
    assert got == [{}]


def _npy_header(shape: tuple[int, ...]) -> bytes:
    d = "{'descr': '<f8', 'fortran_order': False, 'shape': " + repr(shape) + ", }"
    d += " " * (63 - (len(d) + 10) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(d)) + d.encode()


def test_an_npz_member_claiming_terabytes_is_refused_naming_it(tmp_path: Path) -> None:
    """numpy allocates a zip member's claimed shape before reading it: 7.28 TiB was a MemoryError traceback."""
    from stride.data.ingest import IngestError, ingest

    src = tmp_path / "x.npz"
    with zipfile.ZipFile(src, "w") as z:
        z.writestr("timestamp.npy", _npy_header((10**12,)) + b"\0" * 64)
    with pytest.raises(IngestError, match=r"x\.npz: cannot be read: its array 'timestamp' claims shape "
                                          r"\(1000000000000,\) of float64 \(8,000,000,000,000 bytes\) but holds 64"):
        ingest(src, tmp_path / "store")
    assert not (tmp_path / "store").exists()


def test_a_whole_npz_still_ingests(tmp_path: Path) -> None:
    from stride.data.ingest import ingest
    from stride.data.store import open_store

    n = 50
    close = np.linspace(1.0, 2.0, n)
    np.savez_compressed(tmp_path / "x.npz", timestamp=(1704189600 + 60 * np.arange(n)).astype(np.int64), close=close)
    ingest(tmp_path / "x.npz", tmp_path / "store")
    store = open_store(tmp_path / "store")
    assert store.n_rows == n


def test_compare_names_a_run_config_that_is_not_utf8(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """config.toml's bytes were decoded with read_text(): a UnicodeDecodeError traceback in `stride compare`, and a
    line naming no file in `stride report`."""
    run = tmp_path / "RUN"
    run.mkdir()
    (run / "summary.json").write_text('{"name": "x", "samples_per_s": 100.0, "steps": 6}')
    (run / "config.toml").write_bytes(b"[train]\nsteps = 6\nname = '\xff'\n")
    for argv in (["compare", str(run), str(run)], ["report", str(run)]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert f"run config {run / 'config.toml'} is not UTF-8 text (byte 0xff at offset 26)" in err, err


@pytest.mark.parametrize("threads", [-7, 2.5, "2", 10**6, True])
def test_report_probes_dtype_speed_at_no_thread_count_env_json_cannot_mean(monkeypatch: pytest.MonkeyPatch,
                                                                           threads: object) -> None:
    """env.json's torch_threads went to torch.set_num_threads as it was: -7 or 2.5 was torch's RuntimeError (a
    traceback of `stride report`), 10**6 a million-thread probe. Such a count now probes at the current count."""
    import platform

    from stride.metrics.env import cpu_model
    from stride.report import recommend

    asked: list[object] = []
    monkeypatch.setattr(recommend, "host_speeds", lambda t=None: asked.append(t))
    env = {"hostname": platform.node(), "cpu_model": cpu_model(), "gpus": [], "torch_threads": threads}
    recommend._host_speeds(env)
    recommend._host_speeds({**env, "torch_threads": 1})
    assert asked == [None, 1]


def test_repro_passes_over_a_checkpoint_meta_json_nested_too_deeply(tmp_path: Path) -> None:
    """`stride repro` of an edited config looks for the recorded one in checkpoints' meta.json: one nested 100k deep
    was a RecursionError traceback; it is no record, as an unreadable one is, and the next checkpoint's is taken."""
    from stride.config import config_to_dict, load_config
    from stride.config.loader import config_hash
    from stride.launch.repro import recorded_config

    cfg = load_config()
    good = tmp_path / "checkpoints" / "step_00000003"
    bad = tmp_path / "checkpoints" / "step_00000006"
    good.mkdir(parents=True)
    bad.mkdir()
    (good / "meta.json").write_text(json.dumps({"config": config_to_dict(cfg)}))
    (bad / "meta.json").write_text(DEEP)
    got = recorded_config(tmp_path, cfg, config_hash(cfg))
    assert got is not None and got[1] == "its checkpoint's meta.json" and got[0]["optim"]["lr"] == cfg.optim.lr


def test_a_failed_folder_linked_out_of_the_sweep_has_nothing_deleted(tmp_path: Path) -> None:
    """prune_tracebacks deleted every pack-*.txt no record names in failed/, followed through a symlink: a sweep
    folder whose failed/ links elsewhere lost that folder's pack-*.txt files at the end of the next sweep."""
    from stride.sweep.store import SweepStore

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "pack-1.txt").write_text("someone else's file")
    root = tmp_path / "sweep"
    root.mkdir()
    (root / "failed").symlink_to(elsewhere)
    assert SweepStore(root).prune_tracebacks() == 0
    assert (elsewhere / "pack-1.txt").read_text() == "someone else's file"


def test_toml_with_an_integer_over_4300_digits_is_named_not_a_traceback(tmp_path: Path) -> None:
    """tomllib raises a plain ValueError (not TOMLDecodeError) for such an integer: a traceback of `stride train
    CONFIG`, `--set`, `stride plan --hardware-file`, and a line naming no file from `stride report --prices`."""
    from stride.config import load_config
    from stride.config.errors import ConfigError
    from stride.perfmodel.hardware import load_catalog
    from stride.report.recommend import load_prices

    cfg = tmp_path / "c.toml"
    cfg.write_text("[train]\nsteps = " + BIG_INT + "\n")
    with pytest.raises(ConfigError, match=r"c\.toml: not valid TOML: Exceeds the limit \(4300 digits\)"):
        load_config(cfg)
    with pytest.raises(ConfigError, match=r"--set `train\.steps=9+\.\.\.`: Exceeds the limit \(4300 digits\)"):
        load_config(overrides=["train.steps=" + BIG_INT])
    hw = tmp_path / "hw.toml"
    hw.write_text('[hardware.mine]\nbase = "h100-sxm"\nmemory_gib = ' + BIG_INT + "\n")
    with pytest.raises(ConfigError, match=r"hardware file .*hw\.toml is not valid TOML: Exceeds the limit"):
        load_catalog(hw)
    prices = tmp_path / "p.toml"
    prices.write_text("[prices]\nh100-sxm = " + BIG_INT + "\n")
    with pytest.raises(ValueError, match=r"p\.toml: not valid TOML: Exceeds the limit"):
        load_prices(prices)


class _NoScan(list):
    """A column list that fails a test where it is scanned whole once per column (`in`, `count`)."""

    def __contains__(self, item: object) -> bool:
        raise AssertionError("a per-column scan of the column list (quadratic in the columns)")

    def count(self, item: object) -> int:
        raise AssertionError("a per-column count over the column list (quadratic in the columns)")


def test_checking_the_columns_scans_the_list_once_not_once_per_column(tmp_path: Path) -> None:
    """A 1 MB CSV of 40,000 columns took 71 s to ingest (AMD EPYC, 2 cores), 10 s after: `c in schema` and
    `schema.count(c)` for each column were O(n^2). Checked without timing: the list is never scanned per column,
    and what the check refuses is unchanged."""
    from stride.data.ingest import IngestError, _check_columns

    names = [f"c{i}" for i in range(50)]
    header = ["timestamp", *names]
    _check_columns(tmp_path / "x.csv", None, header, _NoScan(names), "timestamp", "symbol", header)
    with pytest.raises(IngestError, match=r"requested columns \['c3'\] are named more than once"):
        _check_columns(tmp_path / "x.csv", None, header, _NoScan([*names, "c3"]), "timestamp", "symbol", header)
    with pytest.raises(IngestError, match="column 3 of the header has no name"):
        _check_columns(tmp_path / "x.csv", None, header, _NoScan(["c0", ""]), "timestamp", "symbol",
                       ["timestamp", "c0", ""])
