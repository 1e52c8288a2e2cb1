"""The lone model's rate behind the sweep's speed-up is a measurement that holds: warmed up, then timed long enough.

Before: `one_by_one_rates` timed 3 steps (about 8 ms) of the first Trainer in a fresh process, cold caches and
all; three identical `stride sweep ... --pack 9` runs of a small MLP printed 3.28x, 1.61x and 12.26x "on training
steps" (solo 6.9k, 15.4k, 2.7k samples/s where solo `stride train` runs read 21-33k; Intel Xeon, 2 cores).

The tests give every solo Trainer run made-up step times (the real steps run, their walls are replaced), so
what they check is the method (which steps are timed, how many, the median) and never this machine's speed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sweep_fixtures import config, mlp_toml

from stride.cli.main import main
from stride.sweep import sizing
from stride.sweep.grid import Point
from stride.sweep.packing import pack_key
from stride.sweep.runner import ClassPlan, one_by_one_rates
from stride.train.trainer import Trainer

MS = 1e-3


class FakeClock:
    """Replaces each solo Trainer run's step walls after its real fit(): `walls(k, steps)` for the k-th run."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, walls) -> None:
        self.runs: list[tuple[int, int]] = []  # (train.steps, metrics.skip_steps) of each run
        real_fit = Trainer.fit
        clock = self

        def fit(trainer: Trainer, *args, **kwargs):
            out = real_fit(trainer, *args, **kwargs)
            steps = len(trainer.timer.step_seconds)
            clock.runs.append((trainer.cfg.train.steps, trainer.cfg.metrics.skip_steps))
            trainer.timer.step_seconds[:] = walls(len(clock.runs) - 1, steps)
            return out

        monkeypatch.setattr(Trainer, "fit", fit)


def _cold_then_steady(k: int, steps: int) -> list[float]:
    """The first run (a fresh process): 50 ms steps, then 8 ms, then 2 ms; every later run: 2 slow first steps,
    then 2 ms steps."""
    walls = [50 * MS, 50 * MS, 8 * MS, 8 * MS, 8 * MS] if k == 0 else [50 * MS] * sizing.SOLO_SKIP
    return (walls + [2 * MS] * steps)[:steps]


def test_solo_rate_is_warmed_up_then_timed_at_least_the_minimum(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = config("mlp")  # batch 32
    clock = FakeClock(monkeypatch, _cold_then_steady)
    r = sizing.measure_solo(cfg)
    # a throwaway run first (its steps are not in the rate), then a fresh Trainer whose first steps are not either
    assert len(clock.runs) == 2 and clock.runs[0] == (sizing.SOLO_WARMUP_STEPS, sizing.SOLO_SKIP)
    n = r.window_steps
    assert clock.runs[1] == (sizing.SOLO_SKIP + sizing.SOLO_WINDOWS * n, sizing.SOLO_SKIP)
    # at least the minimum steps and seconds a window (0.1 s x 1.25 margin at 2 ms a step: 63 steps), 3 windows
    assert n == 63 and n >= sizing.SOLO_MIN_WINDOW_STEPS and len(r.windows) == sizing.SOLO_WINDOWS == 3
    assert r.timed_s == pytest.approx(0.378) and r.timed_s >= sizing.SOLO_WINDOWS * sizing.SOLO_MIN_WINDOW_S
    # only the steady 2 ms steps count: 32 samples / 2 ms; the cold run's 50 ms and 8 ms steps are not in it
    assert r.samples_per_s == pytest.approx(16_000) and r.windows == pytest.approx([16_000] * 3)
    assert r.warmup_steps == sizing.SOLO_WARMUP_STEPS + sizing.SOLO_SKIP
    assert r.describe() == ("16,000 samples/s alone (the Trainer): median of 3 windows of 63 steps, 0.38 s timed "
                            "(16,000-16,000 samples/s), after 10 untimed warm-up steps")


def test_solo_rate_median_of_uneven_windows(monkeypatch: pytest.MonkeyPatch) -> None:
    def walls(k: int, steps: int) -> list[float]:
        if k == 0:
            return [2 * MS] * steps  # window length: 63 steps
        w = [9.0] * sizing.SOLO_SKIP + [MS] * 63 + [4 * MS] * 63 + [2 * MS] * 63
        return w[:steps]

    FakeClock(monkeypatch, walls)
    r = sizing.measure_solo(config("mlp"))
    assert r.windows == pytest.approx([32_000, 8_000, 16_000])  # the 9 s first steps are in none of them
    assert r.samples_per_s == pytest.approx(16_000)


def test_a_slow_model_is_timed_a_few_steps_not_minutes(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock(monkeypatch, lambda k, steps: [1.0] * steps)  # 1 s a step
    r = sizing.measure_solo(config("mlp"))
    assert r.window_steps == 1 and clock.runs[1] == (sizing.SOLO_SKIP + 3, sizing.SOLO_SKIP)
    assert r.timed_s == pytest.approx(3.0) and r.timed_s <= sizing.SOLO_MAX_S
    assert r.samples_per_s == pytest.approx(32.0)
    assert sizing._window_steps(10.0) == 1 and sizing._window_steps(3 * MS) == 42  # ceil(0.125 s / 3 ms)


def test_one_by_one_rates_measure_a_packed_class_with_it(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock(monkeypatch, _cold_then_steady)
    cfg = config("mlp")
    points = [Point(id="a", values={}, config=cfg)]
    key = pack_key(cfg)
    logged: list[str] = []
    rates = one_by_one_rates(points, {key: ClassPlan(2, None, "--pack 2")}, logged.append)
    assert len(clock.runs) == 2 and rates[key].samples_per_s == pytest.approx(16_000)
    assert logged == [f"one by one, for the speed-up: {rates[key].describe()}"]


def test_the_sweep_reckons_one_by_one_at_the_measured_rate_and_says_how(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock(monkeypatch, _cold_then_steady)  # the pack trains in its own loop: only solo runs are faked
    cfg = tmp_path / "sweep.toml"
    cfg.write_text(mlp_toml(6, 3))
    out = tmp_path / "s"
    assert main(["sweep", str(cfg), "--grid", "train.seed=0..1", "--pack", "2", "--out", str(out)]) == 0
    # a throwaway run, then 3 windows of 63 steps after 2 (before: one run of 2 + 3 steps, its own figure)
    assert clock.runs == [(8, 2), (2 + 3 * 63, 2)]
    points = [json.loads(p.read_text()) for p in sorted((out / "points").glob("*.json"))]
    assert len(points) == 2
    for p in points:
        assert p["mode"] == "packed" and p["one_by_one_s"] == pytest.approx(6 * 32 / 16_000)
        assert p["one_by_one_method"].startswith("its steps at 16,000 samples/s alone (the Trainer): median of 3 "
                                                 "windows of 63 steps, 0.38 s timed")
    pack = json.loads((out / "packs.jsonl").read_text().splitlines()[0])
    assert pack["one_by_one_rate"]["samples_per_s"] == pytest.approx(16_000)
    assert pack["one_by_one_rate"]["window_steps"] == 63 and pack["one_by_one_rate"]["timed_s"] == pytest.approx(0.378)
    cost = json.loads((out / "results.json").read_text())["sweep"]["cost"]
    assert cost["one_by_one_s"] == pytest.approx(2 * 6 * 32 / 16_000)
    # results.json and summary.md say how the lone model's rate was measured, once a class
    assert len(cost["one_by_one_methods"]) == 1 and "median of 3 windows of 63 steps" in cost["one_by_one_methods"][0]
    assert f"one by one, measured: {cost['one_by_one_methods'][0]}" in (out / "summary.md").read_text()


def test_a_class_whose_lone_run_diverges_has_no_rate_and_the_sweep_goes_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """The review: the rate run is ~200 steps of the class's first point (maybe the grid's largest lr); its
    divergence stopped the whole sweep before any point trained."""
    from stride.train.divergence import TrainingDiverged

    def diverge(trainer: Trainer, *args, **kwargs):
        raise TrainingDiverged("loss is nan at step 3", 3)

    monkeypatch.setattr(Trainer, "fit", diverge)
    r = sizing.measure_solo(config("mlp"))
    assert r.samples_per_s == 0.0 and r.windows == []


def test_a_run_that_stops_short_scores_whole_windows_only(monkeypatch: pytest.MonkeyPatch) -> None:
    FakeClock(monkeypatch, lambda k, steps: ([2 * MS] * steps)[: max(1, steps // 2)] if k else [2 * MS] * steps)
    r = sizing.measure_solo(config("mlp"))
    assert len(r.windows) == 1  # of 3 windows, only the first was run whole
    assert r.samples_per_s == pytest.approx(32 / (2 * MS))
