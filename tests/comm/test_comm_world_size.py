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


@pytest.mark.parametrize(("argv", "line"), [
    (["--min-bytes", "2K", "--max-bytes", "1K"],
     "stride comm: --min-bytes (2048 B) is above --max-bytes (1024 B); give a smaller --min-bytes or a larger "
     "--max-bytes"),
    (["--factor", "1"], "stride comm: --factor 1: must be >= 2 (each size is the one before times --factor)"),
])
def test_a_bad_size_range_names_its_options(argv: list[str], line: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`sizes: need 0 < min (2048) <= max (1024)` and `size factor 1` named no option."""
    from stride.cli.main import main

    assert main(["comm", *argv]) == 2
    assert capsys.readouterr().err.strip() == line
