"""The trainer's hot path: profiler ranges only under a profiler, deferred step timing that books the
same seconds, a progress bar without a refresh thread, and the one-micro-step loss unchanged."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import pytest
import torch
from rich.console import Console

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "foundation"))
from helpers import small_config  # noqa: E402

from stride.metrics.step_timer import MAX_PENDING, StepTimer  # noqa: E402
from stride.train import progress as progress_mod  # noqa: E402
from stride.train.trainer import Trainer, phase_range  # noqa: E402


def test_phase_range_records_only_under_a_profiler() -> None:
    assert type(phase_range("stride.forward")).__name__ == "nullcontext"
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof, \
            phase_range("stride.forward"):
        torch.ones(3).sum()
    names = {e.name for e in prof.events()}
    assert "stride.forward" in names


class _ScriptedClock:
    """Real StepTimers read time.perf_counter; this feeds both the same readings."""

    def __init__(self, readings: list[float]) -> None:
        self.readings = readings

    def __call__(self) -> float:
        return self.readings.pop(0)


def _drive(timer: StepTimer, steps: int, resolve_every: int, monkeypatch) -> list[dict[str, float]]:
    # each step: start, 4 marks, end -> 6 readings; phases of 1, 2, 3, 4 ms plus 0.5 ms of "other"
    readings = []
    t = 0.0
    for _ in range(steps):
        readings.append(t)
        for dt in (1e-3, 2e-3, 3e-3, 4e-3):
            t += dt
            readings.append(t)
        t += 0.5e-3
        readings.append(t)
    monkeypatch.setattr(time, "perf_counter", _ScriptedClock(readings))
    lasts = []
    for i in range(1, steps + 1):
        timer.start_step()
        for p in ("data", "forward", "backward", "optimizer"):
            timer.mark(p)
        lasts.append(dict(timer.end_step(record=i > 2, resolve=i % resolve_every == 0)))
    return lasts


def test_deferred_timer_books_the_same_seconds(monkeypatch) -> None:
    now = StepTimer(torch.device("cpu"))
    later = StepTimer(torch.device("cpu"), defer=True)
    _drive(now, 25, 1, monkeypatch)
    lasts = _drive(later, 25, 10, monkeypatch)
    assert later._pending  # steps 21..25 not resolved yet
    assert later.mean() == pytest.approx(now.mean(), rel=1e-12)  # mean() books what is pending
    assert later.steps == now.steps == 23 and later.totals == pytest.approx(now.totals, rel=1e-12)
    assert later.step_seconds == pytest.approx(now.step_seconds)
    # a resolving step reports the mean of the steps it resolved: 1, 2, 3, 4 ms, 0.5 ms other
    assert lasts[9] == pytest.approx({"data": 1e-3, "forward": 2e-3, "backward": 3e-3, "optimizer": 4e-3,
                                      "other": 0.5e-3, "total": 10.5e-3}, rel=1e-9)
    assert lasts[10] == lasts[9]  # not resolving: the last resolved figures


def test_time_added_after_a_step_is_in_its_total(monkeypatch) -> None:
    """A checkpoint stall after a step (`add`) counts in the step total, so the parts sum to it; after a warm-up
    step (not booked) it is not booked either."""
    timer = StepTimer(torch.device("cpu"))
    _drive(timer, 4, 1, monkeypatch)  # steps 3 and 4 booked: 10.5 ms each
    timer.add("checkpoint", 0.02)
    mean = timer.mean()
    assert mean["total"] == pytest.approx((2 * 10.5e-3 + 0.02) / 2, rel=1e-12)
    assert mean["checkpoint"] == pytest.approx(0.01, rel=1e-12)
    assert sum(v for k, v in mean.items() if k != "total") == pytest.approx(mean["total"], rel=1e-12)
    assert timer.step_seconds[-1] == pytest.approx(10.5e-3 + 0.02, rel=1e-12)  # the throughput windows' wall too
    warm = StepTimer(torch.device("cpu"))
    _drive(warm, 2, 1, monkeypatch)  # both warm-up steps
    warm.add("checkpoint", 0.02)
    assert warm.totals.get("checkpoint", 0.0) == 0.0 and warm.totals.get("total", 0.0) == 0.0


def test_deferred_timer_is_bounded(monkeypatch) -> None:
    timer = StepTimer(torch.device("cpu"), defer=True)
    _drive(timer, MAX_PENDING + 5, 10**9, monkeypatch)
    assert len(timer._pending) <= MAX_PENDING


def test_trainer_breakdown_with_deferred_timing_matches(monkeypatch) -> None:
    """The trainer resolves at log steps; the summary's breakdown covers every timed step."""
    monkeypatch.setattr("stride.train.trainer.StepTimer", lambda device: StepTimer(device, defer=True))
    s = Trainer(config=small_config(train__steps=7, metrics__log_every=3), write_run_dir=False).fit().summary
    b = s["step_time_breakdown_s"]
    assert s["timed_steps"] == 7
    assert sum(b.values()) == pytest.approx(s["step_time_s"], rel=1e-9)
    assert all(b[k] > 0 for k in ("data", "forward", "backward", "optimizer"))


def test_live_progress_bar_has_no_refresh_thread(monkeypatch, tmp_path) -> None:
    """rich's auto-refresh thread is off; the loop redraws at most every REFRESH_S and at log lines."""
    sink = (tmp_path / "bar.txt").open("w")
    monkeypatch.setattr(progress_mod, "Console", lambda stderr: Console(force_terminal=True, file=sink))
    before = {t.name for t in threading.enumerate()}
    bar = progress_mod.TrainProgress(100, True)
    assert bar.live
    added = {t.name for t in threading.enumerate()} - before
    assert not added, added
    drawn = []
    monkeypatch.setattr(bar._bar, "refresh", lambda: drawn.append(1))
    for step in range(1, 50):
        bar.advance(step)  # all within REFRESH_S: one redraw (the first)
    assert len(drawn) == 1
    bar.log(50, 1.0, 100.0)
    assert len(drawn) == 2 and bar._bar.tasks[0].completed == 50
    bar.advance(100)  # the last step is always drawn
    assert len(drawn) == 3
    bar.close()
    sink.close()


def test_one_micro_step_loss_is_the_loss_itself() -> None:
    """grad_accum = 1 hands back the loss without the zeros/divide/sum bookkeeping, with the same value;
    grad_accum = 2 still sums loss / 2 over the micro-steps."""
    tr = Trainer(config=small_config(train__steps=1), write_run_dir=False)
    tr.setup()
    x, y = tr.next_batch()
    with torch.no_grad():
        expect = tr.loss_fn(tr.wrapped(x), y)
    loss = tr.train_step(x, y)
    assert loss.grad_fn is None and torch.equal(loss, expect)
    tr2 = Trainer(config=small_config(train__steps=1, train__grad_accum=2), write_run_dir=False)
    tr2.setup()
    x, y = tr2.next_batch()
    with torch.no_grad():
        halves = [tr2.loss_fn(tr2.wrapped(x[i * 16:(i + 1) * 16]), y[i * 16:(i + 1) * 16]) / 2 for i in (0, 1)]
    assert torch.equal(tr2.train_step(x, y), torch.zeros(()) + halves[0] + halves[1])
