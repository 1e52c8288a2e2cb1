"""`stride profile` prints the step speed it measured in each precision (first-contact audit of 2026-12-07): README
says profile "measures which precision helps on your machine", and on the quick start (AMD EPYC, 2 cores) it measured
fp32 63.6 against bf16 34.9 samples/s, kept in analysis.json only, while the printed advice said only "measure"."""

from __future__ import annotations

from stride.cli.profile import speeds_line
from stride.profile.precision_advice import DtypeSpeeds


def test_the_line_gives_each_dtype_and_its_ratio_to_fp32() -> None:
    line = speeds_line(DtypeSpeeds({"fp32": 63.62, "bf16": 34.89}, "workload"))
    assert line == ("precision: this workload's step measured fp32 63.6, bf16 34.9 (0.55x fp32) samples/s on this "
                    "machine")


def test_a_dtype_that_did_not_run_is_left_out() -> None:
    line = speeds_line(DtypeSpeeds({"fp32": 100.0, "bf16": 250.0, "fp16": 0.0}, "workload"))
    assert "bf16 250.0 (2.50x fp32)" in line and "fp16" not in line
