"""The report's axis arithmetic and chart layout, without a browser (the browser test measures the result)."""

from __future__ import annotations

import re
import statistics

import pytest

from stride.bench.stats import spread_text
from stride.report.axes import ema, log2_ticks, nice_ticks, smoothing_span, text_width, tick_labels
from stride.report.svg import hbar_chart, line_chart


@pytest.mark.parametrize("lo,hi", [(0, 8080), (0.96, 1.76), (0, 0.113), (1000, 1003), (-3, 7), (5, 5)])
def test_nice_ticks_cover_the_data_in_1_2_5_steps(lo, hi) -> None:
    t = nice_ticks(lo, hi)
    steps = {round(b - a, 12) for a, b in zip(t, t[1:], strict=False)}
    assert len(t) >= 3 and len(steps) == 1 and t[0] <= lo and t[-1] >= hi
    mantissa = f"{steps.pop():e}".split("e")[0]
    assert float(mantissa) in (1.0, 2.0, 5.0)


def test_tick_labels_are_short_and_never_scientific() -> None:
    labels = tick_labels([0, 2000, 4000, 6000, 8000, 10000])
    assert labels == ["0", "2k", "4k", "6k", "8k", "10k"]  # one scale for the axis
    assert tick_labels([8070, 8080, 8090]) == ["8070", "8080", "8090"]
    assert tick_labels([0.0, 0.05, 0.1]) == ["0", "0.05", "0.10"]
    assert tick_labels([0, 5e6, 1e7]) == ["0", "5M", "10M"]
    assert not any("e+" in s or "e-" in s for s in tick_labels(nice_ticks(0, 3.2e9)))


def test_log2_axis_has_a_tick_per_power_of_two() -> None:
    assert log2_ticks(16, 256) == [16, 32, 64, 128, 256]
    assert log2_ticks(1, 4) == [1, 2, 4]
    assert log2_ticks(24, 100) == [16, 32, 64, 128]
    assert len(log2_ticks(2, 2)) == 3


def test_ema_smooths_and_is_unbiased_at_the_start() -> None:
    assert ema([3.0] * 10, 5) == pytest.approx([3.0] * 10)  # no pull towards 0 at the start
    noisy = [1.0 + (0.5 if i % 2 else -0.5) for i in range(100)]
    assert statistics.pstdev(ema(noisy, smoothing_span(len(noisy)))[10:]) < 0.1 * statistics.pstdev(noisy)
    assert ema([1.0, 5.0], 1) == [1.0, 5.0] and smoothing_span(5) == 1 and smoothing_span(400) == 51


def test_text_width_is_conservative() -> None:
    # at least the widest common sans-serif advances (Arial/DejaVu: digits 0.56-0.64 em, 'm' 0.83-0.97 em)
    assert text_width("8.08k") >= 5 * 0.55 * 11 and text_width("mmmm") >= 4 * 0.9 * 11
    assert text_width("ts_transformer_tiny+baseline") > text_width("ts_transformer_tiny")


def _floats(svg: str, cls: str) -> list[str]:
    return re.findall(rf'<g class="tick {cls}">.*?<text[^>]*>([^<]*)</text></g>', svg)


def test_charts_have_ticks_units_zero_and_legends_outside() -> None:
    svg = line_chart({"m": [(16, 8000.0), (256, 8080.0)]}, "t", "batch size (log2)", "throughput (samples/s)",
                     x_log2=True, y_zero=True)
    assert _floats(svg, "x") == ["16", "32", "64", "128", "256"]
    assert _floats(svg, "y")[0] == "0" and len(_floats(svg, "y")) > 2 and "e+" not in svg
    area = re.search(r'class="plot-area" x="([\d.]+)" y="[\d.]+" width="(\d+)"', svg)
    right = float(area.group(1)) + float(area.group(2))
    legend_x = float(re.search(r'<g class="legend"><line x1="([\d.]+)"', svg).group(1))
    assert legend_x > right  # legend right of the data area
    bars = hbar_chart({"a": {"fwd": 2.0, "bwd": 3.0}, "b": {"fwd": 1.0}}, "t", "ms per step")
    assert _floats(bars, "x")[0] == "0" and len(_floats(bars, "x")) > 2
    assert "no data" in line_chart({}, "t", "x (s)", "y (s)")


def test_one_measurement_is_one_run_not_a_cv_of_zero() -> None:
    assert spread_text({"n": 1, "cv": 0.0, "min": 5, "max": 5}) == "1 run"
    assert spread_text({"n": 3, "cv": 0.021, "min": 4, "max": 6}) == "2.1%"
    assert spread_text({"cv": 0.0, "min": 5, "max": 5}) == "1 run"  # files from before `n` was written
