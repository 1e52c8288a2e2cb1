"""The trainer's own timers and the trace analyzer agree on the same profiled steps."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "foundation"))
from helpers import small_config  # noqa: E402

from stride.cli.main import main  # noqa: E402
from stride.profile.analyze import analyze_traces  # noqa: E402
from stride.train.profiling import ProfilerCallback, steps_needed  # noqa: E402
from stride.train.trainer import Trainer  # noqa: E402


@pytest.mark.slow
def test_timers_and_analyzer_agree(tmp_path) -> None:
    cfg = small_config(train__steps=steps_needed(1, 1, 3), model__size="small", data__seq_len=32)
    cb = ProfilerCallback(tmp_path / "traces", wait=1, warmup=1, active=3)
    Trainer(config=cfg, write_run_dir=False, callbacks=[cb]).fit()
    assert cb.trace_path is not None and cb.trace_path.name == "trace_rank0.json"
    report = analyze_traces([tmp_path / "traces"])
    rank = report["ranks"]["0"]
    assert len(rank["steps"]) == 3
    ann = {a["name"]: a["total_us"] / 1e6 for a in rank["annotations"]}
    timers = {k: sum(s[k] for s in cb.active_step_times) for k in ("forward", "backward", "optimizer")}
    for phase in ("forward", "backward"):
        assert ann[f"stride.{phase}"] == pytest.approx(timers[phase], rel=0.05), (phase, ann, timers)
    assert ann["stride.optimizer"] == pytest.approx(timers["optimizer"], rel=0.25, abs=2e-3)


@pytest.mark.slow
def test_profile_cli_writes_trace_and_analysis(tmp_path, capsys) -> None:
    rc = main(["profile", "configs/quickstart.toml", "--steps", "2", "--out", str(tmp_path), "--json",
               "--set", "data.n_steps=1024", "--set", "data.seq_len=16", "--set", "data.n_assets=4"])
    assert rc == 0
    assert (tmp_path / "traces" / "trace_rank0.json").is_file()
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["ranks"]["0"]["verdict"] is not None
    assert json.loads((tmp_path / "analysis.json").read_text())["ranks"]["0"]["steps"] == report["ranks"]["0"]["steps"]
