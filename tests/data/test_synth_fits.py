"""`stride data synth` refuses, before it allocates or writes anything, a day that does not fit in memory or an
output that does not fit the disk, in one line naming what it needs, what there is and what to lower; a long
synth shows a progress bar on a terminal.

The first-contact report: `--assets 100000 --days 10000 --freq 1s` grew to 19 GB in 9 s and was killed for memory
(exit 137) without a word, leaving its `.tmp-stride-...-synth-...` folder. Every test here fakes the memory or the
disk it is given: nothing large is allocated, and a guard fails the test if the simulator were built at all."""

from __future__ import annotations

import io
import tracemalloc
from pathlib import Path

import pytest
from rich.console import Console

from stride.cli import data as cli_data
from stride.cli.main import main
from stride.data import simulator
from stride.data.simulator import MarketSimulator, SimParams, synthesize
from stride.files import host as host_memory

GiB = 2**30


class NotBuilt:
    """In place of MarketSimulator where a refusal is expected: a synth that got this far would allocate."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        raise AssertionError("the simulator was built: the refusal must come before it")


@pytest.fixture
def host(monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201
    """Sets the host memory `stride train` and `stride data synth` see as available."""
    def set_available(n: int) -> None:
        monkeypatch.setattr(host_memory, "available_memory_bytes", lambda: n)
    return set_available


@pytest.mark.parametrize(("assets", "freq", "levels"), [(200, "1min", 0), (200, "1min", 5), (40, "1s", 1),
                                                         (300, "30min", 10)])
def test_the_estimate_covers_the_measured_peak_of_a_day(assets: int, freq: str, levels: int) -> None:
    sim = MarketSimulator(assets, 1, freq, params=SimParams(levels=levels))
    tracemalloc.start()
    try:
        sim.day(0)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    est = simulator.day_bytes(assets, sim.bars, levels)
    assert peak <= est <= 1.15 * peak + 64 * 1024, (peak, est)


def test_the_reported_command_is_refused_in_one_line_naming_need_room_and_fixes(
        tmp_path: Path, host, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    host(int(22.6 * GiB))
    monkeypatch.setattr(simulator, "MarketSimulator", NotBuilt)
    out = tmp_path / "s3"
    assert main(["data", "synth", "--out", str(out), "--assets", "100000", "--days", "10000", "--freq", "1s"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("stride data synth: --assets 100000 x --freq 1s (23400 bars a "
                                                   "day) x --levels 5 does not fit in memory")
    assert "about 856 GiB (100000 x 23400 cells x 393 B" in err and "22.6 GiB is available" in err
    assert "--assets 2638 or fewer" in err and "a coarser --freq (1min fits)" in err and "fewer --levels" in err
    assert not out.exists() and list(tmp_path.iterdir()) == []  # no output, no temporary folder


def test_each_fix_it_names_fits(tmp_path: Path, host, monkeypatch: pytest.MonkeyPatch) -> None:
    host(int(22.6 * GiB))
    monkeypatch.setattr(simulator, "MarketSimulator", NotBuilt)
    monkeypatch.setattr(simulator, "_free_space", lambda path: (10**18, None))
    with pytest.raises(simulator.SynthTooLarge, match=r"--levels 0 does not fit.* --assets 6776 or fewer or a "
                                                      r"coarser --freq \(15s fits\) \(--days"):
        synthesize(tmp_path / "o", 100000, 1, "1s", levels=0)
    for assets, freq, levels in ((2638, "1s", 5), (100000, "1min", 5), (6776, "1s", 0), (100000, "15s", 0)):
        with pytest.raises(AssertionError, match="the simulator was built"):  # past the check: it fits
            synthesize(tmp_path / "o", assets, 1, freq, levels=levels)
    with pytest.raises(simulator.SynthTooLarge, match="--assets 2639 x"):
        synthesize(tmp_path / "o", 2639, 1, "1s", levels=5)


def test_a_small_memory_limit_refuses_a_small_synth_and_allows_a_smaller_one(
        tmp_path: Path, host, capsys: pytest.CaptureFixture[str]) -> None:
    need = simulator.day_bytes(40, 390, 0)  # 40 assets x 1min bars, no book
    host(need - 1)
    args = ["data", "synth", "--out", str(tmp_path / "o"), "--days", "2", "--freq", "1min", "--levels", "0"]
    assert main([*args, "--assets", "40"]) == 2
    assert "does not fit in memory" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
    host(need)
    assert main([*args, "--assets", "40"]) == 0
    assert "wrote 80 files" in capsys.readouterr().out


def test_an_output_larger_than_the_free_disk_is_refused(tmp_path: Path, host, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    host(64 * GiB)
    monkeypatch.setattr(simulator, "MarketSimulator", NotBuilt)
    floor = simulator.output_bytes(100, 10000, 23400, 0)
    monkeypatch.setattr(simulator, "_free_space", lambda path: (floor - 1, None))
    args = ["data", "synth", "--out", str(tmp_path / "o"), "--assets", "100", "--days", "10000", "--freq", "1s",
            "--levels", "0"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "x --days 10000 does not fit on the disk of --out" in err and "its 1,000,000 Parquet files" in err
    assert "lower --days or --assets, use a coarser --freq, or another --out" in err
    monkeypatch.setattr(simulator, "_free_space", lambda path: (floor * 2, 10**5))  # bytes enough; files not
    assert main(args) == 2
    assert "makes 2,010,001 files and folders" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_the_disk_floor_is_below_what_synth_writes(tmp_path: Path) -> None:
    for freq, levels in (("1s", 0), ("1min", 5), ("390min", 10)):
        info = synthesize(tmp_path / f"{freq}-{levels}", 3, 2, freq, levels=levels)
        written = sum(f.stat().st_size for f in (tmp_path / f"{freq}-{levels}").rglob("*.parquet"))
        assert simulator.output_bytes(3, 2, info["bars_per_day"], levels) <= written


def test_progress_is_reported_per_file_and_drawn_only_on_a_terminal(tmp_path: Path) -> None:
    seen: list[tuple[int, int]] = []
    synthesize(tmp_path / "o", 3, 2, "30min", levels=0, progress=lambda done, total: seen.append((done, total)))
    assert seen == [(i, 6) for i in range(7)]
    term = io.StringIO()
    bar = cli_data.SynthProgress(3, Console(file=term, force_terminal=True, width=100), refresh_s=0)
    synthesize(tmp_path / "t", 3, 2, "30min", levels=0, progress=bar)
    bar.close()
    assert "synth day 2" in term.getvalue() and "6/6" in term.getvalue()
    plain = io.StringIO()
    bar = cli_data.SynthProgress(3, Console(file=plain, force_terminal=False))
    synthesize(tmp_path / "p", 3, 2, "30min", levels=0, progress=bar)
    bar.close()
    assert plain.getvalue() == ""
