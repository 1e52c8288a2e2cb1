"""`stride compare` on figures no run can measure (outside audit, defect 3).

Before: a results.json whose throughput median/min/max were 1e308 was compared: B's median printed as a 309-digit
integer, the ratio as a 300-digit one, verdict "faster", exit 0. Now a rate above 1e15/s (beyond any machine's
FLOP/s at any model's FLOPs a sample) or a positive one below 1e-9/s is refused, naming the file and the field, and
large figures print in scientific notation.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from stride.bench.results import ResultsError, make_results
from stride.cli.main import main
from stride.report.compare import compare_results


def _results(path: Path, median: float) -> Path:
    entry: dict[str, Any] = {"name": "w", "throughput": {"unit": "samples/s", "median": median,
                                                         # a cv of 1 % needs a spread (min == max: cv 0)
                                                         "min": 0.98 * median, "max": 1.02 * median, "cv": 0.01,
                                                         "n": 3},
                             "mfu": None, "peak_mem_bytes": 1, "step_time_breakdown_s": {}, "time_to_target_s": None}
    path.write_text(json.dumps(make_results("quick", {}, [entry])))
    return path


@pytest.mark.parametrize(("median", "why"), [(1e308, "is impossible: no run measures above 1e+15 a second"),
                                             (1e-310, "is impossible: a measured rate above 0 is at least 1e-09")])
def test_a_rate_no_run_can_measure_is_refused_naming_file_and_field(tmp_path: Path, capsys, median: float,
                                                                    why: str) -> None:
    a, b = _results(tmp_path / "a.json", 1000.0), _results(tmp_path / "b.json", median)
    assert main(["compare", str(a), str(b)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith(f"stride compare: {b}: workloads[0] (w): throughput.median = ")
    assert why in err and err.count("\n") == 1
    assert main(["report", str(b)]) == 2  # the same check: report read it as measured too
    assert why in capsys.readouterr().err


def test_large_figures_print_in_scientific_notation(tmp_path: Path, capsys) -> None:
    a, b = _results(tmp_path / "a.json", 1000.0), _results(tmp_path / "b.json", 2.5e12)
    assert main(["compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "2.500e+12" in out and "2.500e+09" in out and "faster" in out
    assert not re.search(r"\d{10}", out.replace(",", ""))  # no figure of 10 digits or more


def test_a_ratio_that_is_no_number_is_refused_in_python_too() -> None:
    """compare_results on results made in Python (no range check of a file): an overflowing ratio is refused."""
    def res(median: float) -> dict[str, Any]:
        return make_results("quick", {}, [{"name": "w", "throughput": {"unit": "samples/s", "median": median,
                                                                         "min": 0.98 * median, "max": 1.02 * median,
                                                                         "cv": 0.01},
                                            "mfu": None, "peak_mem_bytes": 1, "step_time_breakdown_s": {},
                                            "time_to_target_s": None}])
    with pytest.raises(ResultsError, match=r"workload w: throughput.median B / A = 1000.0 / 1e-310 is not a finite"):
        compare_results(res(1e-310), res(1000.0))
