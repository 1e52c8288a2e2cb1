"""The lone model's timed run stops at SOLO_MAX_S of wall time, however slow its steps turn out.

Before (audit 7, #11): the window length came from the throwaway run's fastest step, so a host that slowed down
after it timed all 3 x n planned steps: "median of 3 windows of 46 steps, 31.07 s timed" where docs/sweep.md says
at most 5 s. The tests replace the cap's clock (each reading 1 s later than the last), never time this machine.
"""

from __future__ import annotations

import pytest
from sweep_fixtures import config

from stride.sweep import sizing
from stride.train.trainer import Trainer

MS = 1e-3


class Runs:
    """Each solo Trainer run's planned steps and the steps it ran; the throwaway (first) run's walls set to 2 ms,
    so the timed run plans 3 windows of 63 steps."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.planned: list[int] = []
        self.ran: list[int] = []
        real_fit = Trainer.fit
        runs = self

        def fit(trainer: Trainer, *args, **kwargs):
            runs.planned.append(trainer.cfg.train.steps)
            try:
                out = real_fit(trainer, *args, **kwargs)
            finally:
                runs.ran.append(len(trainer.timer.step_seconds))
            if len(runs.ran) == 1:
                trainer.timer.step_seconds[:] = [2 * MS] * len(trainer.timer.step_seconds)
            return out

        monkeypatch.setattr(Trainer, "fit", fit)


def slow_clock(monkeypatch: pytest.MonkeyPatch, step_s: float) -> None:
    """The cap's clock: each reading `step_s` later than the last (one reading a step)."""
    now = [0.0]

    def clock() -> float:
        now[0] += step_s
        return now[0]

    monkeypatch.setattr(sizing, "_clock", clock)


def test_slow_steps_are_cut_at_the_cap_and_split_into_three_windows(monkeypatch: pytest.MonkeyPatch) -> None:
    runs = Runs(monkeypatch)
    slow_clock(monkeypatch, 1.0)  # every timed step takes 1 s of the cap's clock where 2 ms were planned
    r = sizing.measure_solo(config("mlp"))
    assert runs.planned == [sizing.SOLO_WARMUP_STEPS, sizing.SOLO_SKIP + 3 * 63]
    # 5 timed steps fit in 5 s (the next would end at 6 s): the run stopped there, not after 189 steps
    assert sizing.SOLO_MAX_S == 5.0 and runs.ran == [sizing.SOLO_WARMUP_STEPS, sizing.SOLO_SKIP + 5]
    assert r.capped and r.window_steps == 1 and len(r.windows) == 3  # 5 steps: 3 windows of 1
    assert r.samples_per_s > 0 and r.timed_s > 0
    assert "windows of 1 steps" in r.describe() and "cut at the 5 s cap" in r.describe()
    assert r.as_dict()["capped"] is True


def test_steps_as_planned_are_not_cut(monkeypatch: pytest.MonkeyPatch) -> None:
    runs = Runs(monkeypatch)
    slow_clock(monkeypatch, 0.002)  # as the throwaway run's: 189 steps take 0.38 s, within the cap
    r = sizing.measure_solo(config("mlp"))
    assert runs.ran == runs.planned == [sizing.SOLO_WARMUP_STEPS, sizing.SOLO_SKIP + 3 * 63]
    assert not r.capped and r.window_steps == 63 and len(r.windows) == 3 and "cap" not in r.describe()


def test_the_cap_leaves_fewer_windows_when_fewer_than_three_steps_fit(monkeypatch: pytest.MonkeyPatch) -> None:
    runs = Runs(monkeypatch)
    slow_clock(monkeypatch, 2.0)  # 2 s a step: 2 fit in 5 s (a third would end at 6 s)
    r = sizing.measure_solo(config("mlp"))
    assert runs.ran[1] == sizing.SOLO_SKIP + 2
    assert r.capped and r.window_steps == 1 and len(r.windows) == 2  # whole windows only
