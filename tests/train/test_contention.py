"""Threads starved of cores by other processes (outside audit 21, H1): a quick-start run went 2,659 -> 37 samples/s
with one core busy elsewhere and said nothing. The run now measures its threads' run-queue wait and says so in the
summary, the log, `stride bench`'s table and `stride sweep`'s speed-up."""

from __future__ import annotations

import multiprocessing as mp
import os
import sys
import time

import pytest

from stride.bench.table import noisy_note
from stride.config import load_config
from stride.metrics import contention
from stride.metrics.contention import CONTENDED_THREADS, ContentionClock, contention_note
from stride.sweep.report_files import cost
from stride.sweep.sizing import SOLO_MIN_WINDOW_STEPS, SoloRate
from stride.train.trainer import Trainer

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="run-queue wait is read from Linux's /proc")


def _spin(seconds: float) -> None:
    os.sched_setaffinity(0, {0})
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


@linux
def test_a_thread_sharing_its_core_with_a_busy_process_is_measured_waiting() -> None:
    """One thread pinned to the core a busy child process is pinned to waits about half the time; alone, hardly."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {0})
    try:
        def work(seconds: float) -> float | None:
            clock = ContentionClock()
            clock.start()
            end = time.perf_counter() + seconds
            while time.perf_counter() < end:
                pass
            return clock.waiting_threads()

        child = mp.get_context("fork").Process(target=_spin, args=(1.5,))
        child.start()
        time.sleep(0.1)
        shared = work(1.0)
        child.join()
    finally:
        os.sched_setaffinity(0, before)
    assert shared is not None and shared >= CONTENDED_THREADS, shared


def test_the_note_names_the_wait_and_the_way_out() -> None:
    assert contention_note(None, 2) is None and contention_note(CONTENDED_THREADS / 2, 2) is None
    note = contention_note(0.87, 2, 2)
    assert note is not None and "0.87" in note and "other processes" in note and "train.threads=1" in note
    own = contention_note(1.53, 4, 2)  # more threads than cores: the wait is the run's own (review M2)
    assert own is not None and "more than the 2 cores" in own and "other processes" not in own
    one = contention_note(0.87, 1, 2)  # a run at 1 thread already: fewer threads is no way out
    assert one is not None and one.endswith("can be tens of times slow; rerun on a quiet host")


def test_a_run_records_its_threads_wait_and_notes_a_starved_one(tmp_path, monkeypatch, caplog) -> None:
    cfg = load_config(overrides=["model.name=mlp", "model.size=tiny", "train.steps=4", "train.batch_size=32",
                                 "train.val_every=0", "train.threads=1", "metrics.progress=false"])
    quiet = Trainer(config=cfg, out=tmp_path / "quiet").fit().summary
    assert "run_queue_waiting_threads" in quiet
    waits = iter([10.0, 10.0 + 3600.0])  # an hour of waiting over a few seconds: starved, whatever the host
    monkeypatch.setattr(contention, "run_queue_wait_s", lambda pid="self": next(waits))
    starved = Trainer(config=cfg, out=tmp_path / "starved").fit().summary
    assert starved["run_queue_waiting_threads"] > 100 and "contended host" in starved["contention_note"]
    assert any("contended host" in r.getMessage() for r in caplog.records)


def test_bench_table_names_a_starved_workload_even_with_a_tight_spread() -> None:
    w = {"name": "mlp_tiny", "throughput": {"cv": 0.014}, "run_queue_waiting_threads": 0.9,
         "contention_note": "on average 0.90 ..."}
    assert "threads waiting for cores" in noisy_note([w]) and "mlp_tiny 0.90" in noisy_note([w])
    assert noisy_note([{**w, "contention_note": None}]) == ""


def test_a_sweep_speedup_from_a_capped_or_starved_lone_rate_is_labelled_unreliable() -> None:
    good = SoloRate(100.0, [99.0, 100.0, 101.0], SOLO_MIN_WINDOW_STEPS, 3.0, 12)
    assert good.unreliable() is None
    bad = SoloRate(37.0, [37.0, 37.5], 1, 3.45, 12, capped=True, waiting_threads=0.9)
    why = bad.unreliable()
    assert why and "cap" in why and "windows of 1 step" in why and "0.90 threads" in why
    slow = SoloRate(5.0, [5.0, 5.02, 4.98], 1, 3.0, 12)  # a slow model's 1-step windows, steady: by design (M1)
    assert slow.unreliable() is None
    pack = {"wall_s": 10.0, "time": 10.0, "train_s": 8.0, "one_by_one_rate": bad.as_dict()}
    c = cost([{"one_by_one_s": 280.0}], [pack], None)
    assert c["train_speedup"] == pytest.approx(35.0) and c["speedup_unreliable"] == why
    assert cost([{"one_by_one_s": 280.0}], [{**pack, "one_by_one_rate": good.as_dict()}], None)[
        "speedup_unreliable"] is None


def test_a_contended_workload_gets_no_bottleneck_advice() -> None:
    """Audit 21: a starved mlp_tiny was told to compile its optimizer step (the optimizer read 33 % of the step)."""
    from stride.report.recommend import bottleneck

    w = {"step_time_breakdown_s": {"forward": 0.2, "backward": 0.4, "optimizer": 0.4}, "mfu": 0.004,
         "contention_note": "on average 0.98 ...", "run_queue_waiting_threads": 0.98}
    kind, advice = bottleneck(w)
    assert kind == "contended host" and "0.98 threads" in advice and "compile" not in advice
