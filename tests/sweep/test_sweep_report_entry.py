"""A sweep point's results.json entry counts its one measurement, whatever its throughput.

Before: a point whose `samples_per_s` was 0.0 got `n` = 0 beside median 0.0, and `stride report` / `stride compare`
refused the sweep's results.json ("throughput.n = 0 (no measurement) beside throughput.median = 0.0").
"""

from __future__ import annotations

import pytest

from stride.report.inputs import count_problem
from stride.sweep.report_files import _entry


def _point(samples_per_s: float | None) -> dict:
    return {"id": "p0", "label": "p0", "values": {}, "mode": "alone", "pack": None,
            "summary": {"samples_per_s": samples_per_s, "steps": 4, "status": "ok"}}


@pytest.mark.parametrize(("sps", "n"), [(0.0, 1), (12.5, 1), (None, 0)])
def test_a_point_counts_one_measurement_when_it_has_a_figure(sps: float | None, n: int) -> None:
    tput = _entry(_point(sps))["throughput"]
    assert (tput["median"], tput["n"]) == (sps, n)
    assert count_problem(tput) is None
