"""`stride top`: the JSONL follower never parses a half-written line; the view follows a live run to its end."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from stride.cli.main import main
from stride.cli.top import RunView, sparkline
from stride.config import load_config
from stride.metrics.observe.follow import JsonlFollower
from stride.train.trainer import Trainer

TINY = ["data.n_assets=4", "data.n_steps=1024", "data.seq_len=16", "train.batch_size=32", "train.steps=6",
        "train.val_every=0", "metrics.progress=false", "train.threads=1", "metrics.log_every=2"]


def test_follower_holds_back_a_partial_line(tmp_path: Path) -> None:
    p = tmp_path / "m.jsonl"
    f = JsonlFollower(p)
    assert list(f.iter_new()) == []  # not there yet
    with open(p, "w") as w:
        w.write('{"step": 1, "loss": 0.5}\n{"step": 2, "lo')
    assert list(f.iter_new()) == [{"step": 1, "loss": 0.5}]
    assert list(f.iter_new()) == []  # the partial line is still partial
    with open(p, "a") as w:
        w.write('ss": 0.25}\n')
    assert list(f.iter_new()) == [{"step": 2, "loss": 0.25}]
    with open(p, "a") as w:
        w.write("not json\n")
    with pytest.raises(ValueError, match="line 3, a complete line, is not JSON"):
        list(f.iter_new())
    (tmp_path / "d.jsonl").mkdir()  # the guarded follower `stride top` uses: a directory, FIFO or device is refused
    with pytest.raises(ValueError, match=r"d.jsonl is a directory, not a regular file"):
        list(JsonlFollower(tmp_path / "d.jsonl").iter_new())


def test_sparkline_levels() -> None:
    assert sparkline([0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]) == "▁▂▃▄▅▆▇█"
    assert sparkline([3.0, 3.0]) == "▁▁" and sparkline([]) == ""


def test_view_of_a_finished_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = Trainer(config=load_config(overrides=TINY), out=tmp_path / "run").fit()
    view = RunView(tmp_path / "run")
    view.refresh()
    assert [r["step"] for r in view.train] == [2, 4, 6] and view.total_steps == 6
    assert view.train[-1]["loss"] == result.summary["final_train_loss"]
    assert view.summary is not None and view.sys_last is not None
    assert main(["top", str(tmp_path / "run"), "--once"]) == 0
    out = capsys.readouterr().out
    assert "6 / 6  (finished)" in out and f"{result.summary['final_train_loss']:.4g}" in out


@pytest.mark.slow
def test_top_follows_a_live_run_until_it_finishes(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    top = subprocess.Popen([sys.executable, "-m", "stride.cli.main", "top", str(run), "--interval", "0.1",
                            "--timeout", "120"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        result = Trainer(config=load_config(overrides=[*TINY, "train.steps=40", "metrics.log_every=5"]),
                         out=run).fit()
        out, err = top.communicate(timeout=60)
    finally:
        if top.poll() is None:
            top.kill()
    assert top.returncode == 0, err
    assert "40 / 40  (finished)" in out  # it stopped on summary.json, not on the timeout
    assert json.loads((run / "summary.json").read_text())["steps"] == result.summary["steps"] == 40



def test_summary_json_comes_after_every_metrics_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """metrics.jsonl lines are buffered (flushed every 0.1 s and at close); summary.json was written before the
    close, so a reader that waits for it (stride top) could find the last steps' lines missing (seen once in CI:
    the view of a finished run without "40 / 40"). Now every line is on disk when summary.json appears."""
    import stride.metrics.run_dir as run_dir

    on_disk: list[int] = []
    write = run_dir.atomic_write_text

    def spy(path: Path, text: str) -> None:
        if path.name == "summary.json":
            on_disk.append(len((path.parent / "metrics.jsonl").read_text().splitlines()))
        write(path, text)

    monkeypatch.setattr(run_dir, "atomic_write_text", spy)
    run = tmp_path / "run"
    Trainer(config=load_config(overrides=[*TINY, "train.steps=40", "metrics.log_every=5"]), out=run).fit()
    lines = (run / "metrics.jsonl").read_text().splitlines()
    assert json.loads(lines[-1])["step"] == 40
    assert on_disk == [len(lines)]  # all of them, when summary.json was written
