"""`stride top --once` on a finished run shows samples/s, step time and MFU of one statistic, and names it.

Audit: it showed samples/s and step time of the last logged step beside MFU from summary.json (the mean
over the timed steps).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stride.cli.main import main
from stride.config import load_config
from stride.train.trainer import Trainer

TINY = ["data.n_assets=4", "data.n_steps=1024", "data.seq_len=16", "train.batch_size=32", "train.steps=8",
        "train.val_every=0", "metrics.progress=false", "train.threads=1", "metrics.log_every=4",
        "metrics.skip_steps=2", "metrics.peak_flops=1e15"]


def test_finished_run_shows_the_summarys_rates_together(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    s = Trainer(config=load_config(overrides=TINY), out=tmp_path / "run").fit().summary
    assert main(["top", str(tmp_path / "run"), "--once"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"samples/s (mean over {s['timed_steps']} timed steps, summary.json) │ {s['samples_per_s']:,.0f}" in out
    assert f"step time (same) │ {s['step_time_s'] * 1e3:.2f} ms" in out
    assert f"MFU (same) │ {100 * s['mfu']:.2f} %" in out


def test_live_run_shows_its_last_step_and_no_mfu(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    Trainer(config=load_config(overrides=TINY), out=tmp_path / "run").fit()
    (tmp_path / "run" / "summary.json").unlink()  # as while the run trains
    last = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()][-1]
    assert main(["top", str(tmp_path / "run"), "--once"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"samples/s (step {last['step']}, the last logged) │ {last['samples_per_s']:,.0f}" in out
    assert "MFU" not in out
