"""A pack's own threads waiting on each other are no busy host (outside audit of `stride sweep`, D3).

packs.jsonl recorded a pack's whole run-queue wait (every thread of the process: the pack's lanes and torch's OpenMP
threads waiting on each other too) and the report put all of it on other processes: "UNRELIABLE: the packs'
timings were of a contended host (... threads waiting for cores other processes held)", as did the lone rate's
check. The Trainer has put a wait on other processes only as far as they used its cores since e6940bd
(`stride.metrics.contention.foreign_wait`); the sweep now records that use (`other_processes_cores`) beside the
wait, for each pack and for the lone rate, and reads min(wait, other processes' cores).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from sweep_fixtures import mlp_toml

import stride.sweep.runner
from stride.cli.main import main
from stride.metrics.contention import CONTENDED_THREADS
from stride.sweep.report_files import cost, pack_foreign_wait
from stride.sweep.runner import pack_record_problem
from stride.sweep.sizing import SOLO_MIN_WINDOW_STEPS, SoloRate

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="run-queue and /proc/stat times: Linux")


def _packs(*waits: tuple[float, float | None]) -> list[dict]:
    return [{"ids": [f"{k}a", f"{k}b"], "size": 2, "solo": False, "wall_s": 1.0, "time": 1.0 + k, "train_s": 0.5,
             "waiting_threads": w, **({} if o is None else {"other_processes_cores": o})}
            for k, (w, o) in enumerate(waits)]


def test_a_packs_wait_counts_only_as_far_as_other_processes_used_its_cores() -> None:
    results = [{"id": f"{k}{s}", "one_by_one_s": 1.0, "summary": {"steps": 10}} for k in range(2) for s in "ab"]
    quiet = _packs((0.9, 0.02), (0.4, 0.0))  # its own threads waited; the cores were its own
    assert cost(results, quiet, None)["packs_unreliable"] is None  # was "up to 0.90 threads waiting ..."
    busy = _packs((0.9, 0.6), (0.1, 1.0))
    assert cost(results, busy, None)["packs_unreliable"] == (
        "1 pack(s) with up to 0.60 threads waiting for cores other processes held")
    old = _packs((0.9, None))  # a record written before the field: the whole wait counts, as before
    assert pack_foreign_wait(old[0]) == 0.9
    assert "up to 0.90 threads" in cost(results[:2], old, None)["packs_unreliable"]
    assert pack_record_problem({**quiet[0], "index": 0}) is None
    assert "other_processes_cores is -1" in pack_record_problem({**quiet[0], "index": 0, "other_processes_cores": -1})


def test_the_lone_rates_wait_counts_only_as_far_as_other_processes_used_its_cores() -> None:
    rate = SoloRate(100.0, [99.0, 100.0, 101.0], SOLO_MIN_WINDOW_STEPS, 3.0, 12, waiting_threads=0.9,
                    other_processes_cores=0.03)
    assert rate.unreliable() is None and rate.as_dict()["other_processes_cores"] == 0.03
    busy = SoloRate(100.0, [99.0, 100.0, 101.0], SOLO_MIN_WINDOW_STEPS, 3.0, 12, waiting_threads=0.9,
                    other_processes_cores=0.5)
    assert busy.unreliable() == "0.50 threads waiting for cores other processes held"
    assert SoloRate(100.0, [100.0], SOLO_MIN_WINDOW_STEPS, 3.0, 12, waiting_threads=0.9).unreliable() == (
        "0.90 threads waiting for cores other processes held")  # not measured: the whole wait, as before


@linux
def test_a_pack_of_two_lanes_on_one_core_records_its_own_wait_and_the_cores_others_used(tmp_path: Path,
                                                                                         monkeypatch) -> None:
    """Two lanes (train.threads = 2) of a pack on one core wait on each other. packs.jsonl records the wait and the
    core's worth other processes used, and the report labels the speed-up only for the part they can have caused.
    (On the loaded 2-core AMD EPYC host: 1.47 threads waiting, 0.47 of the core used by other processes.)"""
    steady = SoloRate(20_000.0, [20_000.0] * 3, SOLO_MIN_WINDOW_STEPS, 0.3, 10)  # the lone rate is not tested here
    monkeypatch.setattr(stride.sweep.runner, "measure_solo", lambda cfg: steady)
    cfg = tmp_path / "c.toml"
    cfg.write_text(mlp_toml(12, 0).replace("threads = 1", "threads = 2"))
    out = tmp_path / "s"
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(before)})
    try:
        assert main(["sweep", str(cfg), "--grid", "train.seed=0..3", "--pack", "4", "--out", str(out)]) == 0
    finally:
        os.sched_setaffinity(0, before)
    rec = json.loads((out / "packs.jsonl").read_text().splitlines()[-1])
    waiting, other = rec["waiting_threads"], rec["other_processes_cores"]
    assert waiting is not None and other is not None and other >= 0
    c = json.loads((out / "results.json").read_text())["sweep"]["cost"]
    labelled = min(waiting, other) >= CONTENDED_THREADS
    assert (c["packs_unreliable"] is not None and "waiting for cores other processes held" in c["packs_unreliable"]) \
        == labelled, (waiting, other, c["packs_unreliable"])
