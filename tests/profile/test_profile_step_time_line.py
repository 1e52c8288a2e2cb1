"""The profiled step beside the unprofiled one says where the added time went: "the profiler's own cost is 2.7 % of
the step" beside a step 2.45x longer read as a contradiction (first-contact audit of 2026-12-06)."""

from __future__ import annotations

from stride.profile.render import step_time_line


def test_a_slowed_step_says_most_of_the_added_time_is_inside_operators() -> None:
    line = step_time_line({"profiled_ms": 100.52, "unprofiled_ms": 40.99, "ratio": 100.52 / 40.99,
                           "profiler_idle_pct": 2.7})
    assert "(2.45x)" in line and "59.53 ms added" in line and "2.71 ms of it as idle time" in line
    assert "the other 56.82 ms ran inside operators" in line


def test_a_step_slowed_only_in_idle_time_says_no_more() -> None:
    line = step_time_line({"profiled_ms": 42.0, "unprofiled_ms": 40.0, "ratio": 1.05, "profiler_idle_pct": 4.7619})
    assert "2.00 ms added, 2.00 ms of it as idle time" in line and "inside operators" not in line
    assert step_time_line({"profiled_ms": 39.0, "unprofiled_ms": 40.0, "ratio": 0.975,
                           "profiler_idle_pct": 0.0}).endswith("profiling added nothing measurable")
