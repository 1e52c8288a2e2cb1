"""`stride plan --workload`'s "run it with" line names every process the layout needs (first-contact audit of
2026-12-07).

A 2-rank DDP layout printed `run it with: --set train.batch_size=64 --set train.grad_accum=1 --set
train.activation_checkpointing=none`: no `--nproc 2`, and no parallel key either (DDP is what N processes with every
degree 1 run), so the line pasted onto `stride train CONFIG` trained one process, not the layout the table ranked.
"""

from __future__ import annotations

import re

import pytest

from stride.cli.main import main


def _run_it_with(capsys: pytest.CaptureFixture[str], devices: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("COLUMNS", "400")  # one line, however wide the settings
    assert main(["plan", "--workload", "mlp_tiny", "--devices", devices, "--hardware", "epyc-9654"]) == 0
    out = capsys.readouterr().out
    best = re.search(r"^best: (.*?):", out, re.M)
    line = re.search(r"run it with: (.*)$", out, re.M)
    assert best and line, out
    return best.group(1) + "\n" + line.group(1)


def test_a_layout_of_two_ranks_says_nproc_2(capsys: pytest.CaptureFixture[str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    best, line = _run_it_with(capsys, "2", monkeypatch).split("\n")
    assert best.startswith("2 rank(s)"), best
    assert line.startswith("--nproc 2 --set train.batch_size="), line


def test_one_device_needs_no_nproc(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    best, line = _run_it_with(capsys, "1", monkeypatch).split("\n")
    assert best.startswith("1 rank(s)"), best
    assert line.startswith("--set train.batch_size=") and "--nproc" not in line, line
