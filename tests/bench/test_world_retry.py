"""A world-sweep point's retry (a failed launch is tried once more) starts in an empty run folder. It ran in the
failed attempt's folder, where `stride train` refuses to start over a partial run ("holds an earlier run's
metrics.jsonl ... use another --out, or --overwrite"), so the retry of a launch that failed mid-run always failed."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

import stride.bench.world as world
from stride.bench.pinning import core_plan
from stride.bench.scaling import Point
from stride.bench.workloads import WORKLOADS


def test_the_retry_starts_in_an_empty_run_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[bool] = []

    def fake_run(cmd: list[str], **kw: Any) -> subprocess.CompletedProcess:
        out = Path(cmd[cmd.index("--out") + 1])
        calls.append(out.exists())  # what the attempt finds
        out.mkdir(parents=True, exist_ok=True)
        if len(calls) == 1:  # the first attempt trains a little, then a rank dies
            (out / "metrics.jsonl").write_text('{"step": 1, "loss": 1.0}\n')
            return subprocess.CompletedProcess(cmd, 1, "", "rank 1 died")
        (out / "summary.json").write_text(json.dumps({"world_size": 1, "samples_per_s": 1.0}))
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(world.subprocess, "run", fake_run)
    point = Point("single", "baseline", 1, 256)
    _, summary = world.run_point(WORKLOADS["mlp_tiny"], point, "cpu", tmp_path / "p", [], core_plan(1, pin=False))
    assert calls == [False, False]  # the retry found no partial run of the first attempt
    assert len(summary["launch_retries"]) == 1 and (tmp_path / "p" / "torchrun.failed-1.log").is_file()
