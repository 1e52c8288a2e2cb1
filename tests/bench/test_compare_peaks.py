"""`stride compare` says when the two sides' MFUs divide by peaks more than 5 % apart (outside audit 13, L5: one
host's GEMM-measured clock went 2.75 -> 3.53 GHz within an hour, peak 3.52e11 -> 4.52e11 FLOP/s for one config)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stride.cli.main import main
from stride.report.compare import PEAK_DIFF, peak_note

SOURCE = "isa:fp32:2cores x {:.2f}GHz x 64FLOP/cycle (avx512f; clock: a measured fp32 GEMM / 0.9)"


def _run(folder: Path, clock_ghz: float, samples_per_s: float = 1000.0) -> Path:
    folder.mkdir()
    peak = 2 * clock_ghz * 1e9 * 64
    achieved = 2.868e9 * samples_per_s / 64
    (folder / "summary.json").write_text(json.dumps({
        "name": "quickstart", "samples_per_s": samples_per_s, "step_time_s": 64 / samples_per_s,
        "achieved_flops_per_s": achieved, "peak_flops_per_s": peak, "peak_flops_source": SOURCE.format(clock_ghz),
        "peak_clock_ghz": clock_ghz, "mfu": achieved / peak, "peak_mem_bytes": 2**20, "world_size": 1,
        "step_time_breakdown_s": {"forward": 0.02, "backward": 0.04}}))
    return folder


def test_compare_says_when_the_peaks_differ(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = _run(tmp_path / "a", 2.75), _run(tmp_path / "b", 3.53)
    assert main(["compare", str(a), str(b), "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    # 2 x 3.53 x 64 / (2 x 2.75 x 64) - 1 = +28 %: above the 5 % the note is for
    assert PEAK_DIFF < 3.53 / 2.75 - 1
    assert "the MFU peaks differ by +28%" in row["peak_note"] and "CPU clock 2.75 vs 3.53 GHz" in row["peak_note"]
    assert row["ratio"] == pytest.approx(1.0)  # the throughput ratio is what it was
    assert main(["compare", str(a), str(b)]) == 0
    out = " ".join(capsys.readouterr().out.split())  # the table's caption, unwrapped
    assert "quickstart: the MFU peaks differ by +28% (A 3.52e+11, B 4.52e+11 FLOP/s; CPU clock 2.75 vs 3.53 GHz)" in out


def test_no_note_within_five_percent_or_without_peaks() -> None:
    same = {"peak_flops_per_s": 3.52e11, "peak_clock_ghz": 2.75}
    assert peak_note(same, {"peak_flops_per_s": 3.52e11 * 1.049, "peak_clock_ghz": 2.88}) is None
    assert peak_note(same, {"peak_flops_per_s": 3.52e11 * 1.06, "peak_clock_ghz": 2.92}) is not None
    assert peak_note(same, {}) is None  # an older results.json: no peak recorded
    # not a clock: the sources are named (a bf16 run against an fp32 one, say)
    note = peak_note({"peak_flops_per_s": 3.5e11, "mfu_peak_source": "isa:fp32:..."},
                     {"peak_flops_per_s": 2.8e12, "mfu_peak_source": "isa:bf16:..."})
    assert note is not None and "A: isa:fp32:...; B: isa:bf16:..." in note
