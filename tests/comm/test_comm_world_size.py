"""`stride comm` on fewer than 2 ranks is refused in one line (exit 2) before anything is sized or spawned:
`--nproc 0` divided by zero while the sizes were split over the ranks (a ZeroDivisionError traceback), and torchrun
with one rank raised RuntimeError from inside the benchmark (a traceback per rank)."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("nproc", ["0", "1", "-2"])
def test_fewer_than_two_processes_is_one_line(nproc: str, capsys: pytest.CaptureFixture[str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from stride.cli.main import main

    for key in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(key, raising=False)
    rc = main(["comm", "--nproc", nproc, "--max-bytes", "1K"])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.strip() == f"stride comm: --nproc {nproc}: a collective benchmark needs at least 2 processes"


def test_one_rank_under_torchrun_is_one_line(capsys: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from stride.cli.main import main

    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "1")  # never dialled: refused before the process group
    rc = main(["comm", "--max-bytes", "1K"])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.strip() == "stride comm: torchrun started 1 rank: a collective benchmark needs at least 2 processes"
