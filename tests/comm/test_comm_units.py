"""Sizes, nccl-tests bus factors, the alpha-beta fit and the hardware-profile TOML (no processes)."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import numpy as np
import pytest
from comm_fakes import run_comm

from stride.comm.bench import Row, iters_for
from stride.comm.collectives import COLLECTIVES
from stride.comm.fit import fit_alpha_beta
from stride.comm.hwprofile import FORMAT, profile_tables, write_profile
from stride.comm.sizes import parse_bytes, size_ladder


def test_parse_bytes_and_ladder() -> None:
    assert [parse_bytes(s) for s in ("8", "1K", "64KB", "2M", "1G", " 3 mib ")] == [8, 1024, 65536, 2 << 20, 1 << 30,
                                                                                     3 << 20]
    with pytest.raises(ValueError, match="'12X'"):
        parse_bytes("12X")
    assert size_ladder(8, 64) == [8, 16, 32, 64]
    assert size_ladder(1, 100, 10) == [1, 10, 100]
    with pytest.raises(ValueError, match="min"):
        size_ladder(64, 8)


@pytest.mark.parametrize("n", [2, 4, 8])
def test_bus_factors_are_nccl_tests(n: int) -> None:
    want = {"all_reduce": 2 * (n - 1) / n, "all_gather": (n - 1) / n, "reduce_scatter": (n - 1) / n,
            "all_to_all": (n - 1) / n, "broadcast": 1.0, "send_recv": 1.0}
    assert {k: c.bus_factor(n) for k, c in COLLECTIVES.items()} == pytest.approx(want)


def test_fit_recovers_exact_line() -> None:
    x = np.array([8, 1 << 10, 1 << 16, 1 << 20, 1 << 24])
    ab = fit_alpha_beta(x, 25.0 + 0.001 * x)
    assert ab.alpha_us == pytest.approx(25.0, rel=1e-9)
    assert ab.beta_us_per_byte == pytest.approx(0.001, rel=1e-9)
    assert ab.bandwidth_GBps == pytest.approx(1.0)
    assert ab.r2 == pytest.approx(1.0)


def test_fit_weights_small_sizes() -> None:
    """5% noise on the largest point must not move alpha far (relative weighting)."""
    x = np.array([8.0, 64, 512, 4096, 1 << 22])
    y = 10.0 + 1e-3 * x
    y[-1] *= 1.05
    ab = fit_alpha_beta(x, y)
    assert ab.alpha_us == pytest.approx(10.0, rel=0.01)


def test_fit_never_negative() -> None:
    x = np.array([8.0, 1024, 1 << 20])
    flat_falling = fit_alpha_beta(x, [30.0, 29.0, 28.0])  # free fit would give beta < 0
    assert flat_falling.beta_us_per_byte == 0.0 and flat_falling.bandwidth_GBps is None
    # alpha alone, weighted by 1/t^2: the minimiser of sum((y - a) / y)^2 is sum(1/y) / sum(1/y^2)
    y = np.array([30.0, 29.0, 28.0])
    assert flat_falling.alpha_us == pytest.approx(np.sum(1 / y) / np.sum(1 / y**2))
    ys = 0.001 * x - 0.005  # an exact line with alpha < 0: refitted through the origin
    steep = fit_alpha_beta(x, ys)
    assert steep.alpha_us == 0.0
    r = x / ys  # minimiser of sum((y - b x) / y)^2 is sum(x/y) / sum((x/y)^2)
    assert steep.beta_us_per_byte == pytest.approx(np.sum(r) / np.sum(r**2), rel=1e-9)
    with pytest.raises(ValueError, match="2 distinct sizes"):
        fit_alpha_beta([8, 8], [1.0, 2.0])
    with pytest.raises(ValueError, match="positive"):
        fit_alpha_beta([8, 16], [1.0, 0.0])


def test_iters_for_bounds_big_messages() -> None:
    assert iters_for(8, 20, 1 << 30) == 20
    assert iters_for(1 << 30, 20, 1 << 31) == 2
    assert iters_for(1 << 32, 20, 1 << 31) == 1


def test_profile_toml_round_trip(tmp_path: Path) -> None:
    rows = [Row("all_reduce", b, b // 4, 20.0 + b * 0.002, 0.0, 0.0, True) for b in (8, 1024, 1 << 20)]
    rows.append(Row("broadcast", 8, 2, 5.0, 0.0, 0.0, True))  # one size only: no fit, no table
    rows.append(Row("all_gather", 8, 2, 5.0, 0.0, 0.0, False, "wrong"))
    p = write_profile(tmp_path / "sub" / "hw.toml", profile_tables(rows, "gloo", 2))
    doc = tomllib.loads(p.read_text())
    assert doc["meta"]["format"] == FORMAT and doc["meta"]["world_size"] == 2 and doc["meta"]["backend"] == "gloo"
    assert set(doc["collectives"]) == {"all_reduce"}
    ar = doc["collectives"]["all_reduce"]
    assert ar["alpha_us"] == pytest.approx(20.0) and ar["beta_us_per_byte"] == pytest.approx(0.002)
    assert ar["algbw_GBps"] == pytest.approx(0.5) and ar["busbw_GBps"] == pytest.approx(0.5)  # n=2: factor 1
    assert ar["sizes_bytes"] == [8, 1024, 1 << 20]
    assert not list((tmp_path / "sub").glob("*.tmp"))


def test_the_fit_line_quotes_no_bandwidth_where_time_did_not_grow_with_size() -> None:
    from stride.cli.comm import fit_line

    # gloo send/recv on the loaded 2-core AMD EPYC: ~2.6-8 ms at every size from 8 B to 4 MiB
    flat = [Row("send_recv", b, b // 4, t, 0.0, 0.0, True)
            for b, t in ((8, 3387.7), (4096, 4837.9), (1 << 20, 3801.0), (4 << 20, 2605.4))]
    growing = [Row("all_reduce", b, b // 4, 20.0 + b * 0.002, 0.0, 0.0, True) for b in (8, 1024, 1 << 20)]
    tables = profile_tables(flat + growing, "gloo", 2)
    line = fit_line("send_recv", tables["collectives.send_recv"])
    assert "bandwidth not resolved (time did not grow with size, 8-4,194,304 B)" in line
    assert "0.000 GB/s" not in line  # what it printed: a link that moves nothing
    assert "bandwidth 0.500 GB/s (busbw 0.500)" in fit_line("all_reduce", tables["collectives.all_reduce"])


# --- `stride comm` in this process: the benchmark itself replaced by synthetic rows (no processes) ---

FLAT = [(8, 3387.7), (4096, 4837.9), (1 << 20, 3801.0)]  # time did not grow with size: beta held at 0


def _rows(name: str, points: list[tuple[int, float]]) -> list[Row]:
    return [Row(name, b, b // 4, t, 0.0, 0.0, True) for b, t in points]


_comm = run_comm


def _profile_beside_a_clean_fit(rows: list, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                capsys: pytest.CaptureFixture[str]) -> tuple[Path, str]:
    """`stride comm --profile-out` over `rows` plus an all_to_all whose line fits exactly: (profile, console)."""
    rows = rows + _rows("all_to_all", [(b, 20.0 + b * 0.002) for b in (8, 1024, 1 << 20)])
    out = tmp_path / "hw.toml"
    assert _comm(["--profile-out", str(out)], monkeypatch, rows) == 0
    return out, capsys.readouterr().out


def test_profile_leaves_out_unresolved_collectives_and_the_planner_reads_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from stride.perfmodel.hardware import read_comm_profile

    out, console = _profile_beside_a_clean_fit(_rows("all_reduce", FLAT), tmp_path, monkeypatch, capsys)
    assert "left out of the profile: all_reduce (bandwidth not resolved)" in console and "--max-bytes" in console
    assert set(tomllib.loads(out.read_text())["collectives"]) == {"all_to_all"}
    assert set(read_comm_profile(out, "test")) == {"all_to_all"}  # it wrote beta = 0.0 and the planner refused it


def test_no_profile_written_when_no_bandwidth_resolved(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "hw.toml"
    assert _comm(["--profile-out", str(out), "--json"], monkeypatch, _rows("all_reduce", FLAT)) == 2
    cap = capsys.readouterr()
    assert "not written: no collective's bandwidth was resolved (all_reduce: bandwidth not resolved" in cap.err
    assert "--max-bytes" in cap.err and "--iters" in cap.err
    assert not out.exists() and not list(tmp_path.iterdir())
    assert json.loads(cap.out)["profile"]["left_out"] == {"all_reduce": "bandwidth not resolved (time did not grow "
                                                                         "with size, 8-1,048,576 B)"}


# gloo send_recv, 2 ranks on the loaded 2-core VM, --max-bytes 64K --iters 5: 134-2187 us with no size trend; the
# free fit has beta > 0 (2.99 GB/s) at R^2 -0.08, a line worse than the timings' mean. It was written as a bandwidth.
NOISE = list(zip([8 << i for i in range(14)],
                 [137.0, 154, 145, 144, 177, 153, 2187, 152, 134, 160, 145, 157, 168, 168], strict=True))


def test_a_fit_below_the_r2_floor_gives_no_bandwidth() -> None:
    from stride.comm.hwprofile import MIN_R2, unresolved

    fit = {"beta_us_per_byte": 1e-3, "sizes_bytes": [8, 1024]}
    assert unresolved({**fit, "fit_r2": MIN_R2}) is None and unresolved({**fit, "fit_r2": 0.99}) is None
    for r2 in (MIN_R2 - 0.01, 0.0, -0.53, float("nan"), None):
        assert "bandwidth not resolved (the fitted line explains under 50%" in unresolved({**fit, "fit_r2": r2})
    ab = fit_alpha_beta(*zip(*NOISE, strict=True))
    assert ab.beta_us_per_byte > 0 and ab.r2 < 0  # what used to reach the profile


def test_profile_leaves_out_a_fit_that_does_not_explain_the_timings(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from stride.perfmodel.hardware import read_comm_profile

    out, console = _profile_beside_a_clean_fit(_rows("send_recv", NOISE), tmp_path, monkeypatch, capsys)
    line = next(x for x in console.splitlines() if x.startswith("send_recv:"))
    assert "bandwidth not resolved (the fitted line explains under 50% of the timings' variance" in line
    assert "r2 -0.081" in line and "GB/s" not in line  # one line, no bandwidth quoted
    assert "left out of the profile: send_recv (bandwidth not resolved)" in console and "--iters" in console
    assert set(tomllib.loads(out.read_text())["collectives"]) == {"all_to_all"}
    assert set(read_comm_profile(out, "test")) == {"all_to_all"}


def test_no_profile_written_when_every_fit_is_noise(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "hw.toml"
    assert _comm(["--profile-out", str(out)], monkeypatch, _rows("send_recv", NOISE)) == 2
    err = capsys.readouterr().err
    assert "not written: no collective's bandwidth was resolved (send_recv: bandwidth not resolved (the fitted" in err
    assert not out.exists() and not list(tmp_path.iterdir())


def test_write_profile_validates_before_the_rename(tmp_path: Path) -> None:
    def refuse(tmp: Path) -> None:
        raise ValueError(f"refused {tmp.name}")

    rows = _rows("all_reduce", [(b, 20.0 + b * 0.002) for b in (8, 1024)])
    with pytest.raises(ValueError, match="refused"):
        write_profile(tmp_path / "hw.toml", profile_tables(rows, "gloo", 2), refuse)
    assert not list(tmp_path.iterdir())  # neither the profile nor its temp file


def test_sizes_all_too_small_is_an_error(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    assert _comm(["--collectives", "all_gather", "--min-bytes", "5", "--max-bytes", "7"], monkeypatch) == 2
    err = capsys.readouterr().err
    assert "every size (5 B) is below" in err and "all_gather 8 B" in err and len(err.strip().splitlines()) == 1


def test_sizes_partly_too_small_get_a_note(monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    rows = _rows("all_gather", [(8, 5.0), (16, 6.0)])
    assert _comm(["--collectives", "all_gather", "--min-bytes", "4", "--max-bytes", "16", "--nproc", "2"],
                 monkeypatch, rows) == 0
    assert "note: 4 B skipped for all_gather (below 8 B" in capsys.readouterr().err


def test_unavailable_backend_is_one_line(monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    import torch.distributed as dist

    if dist.is_backend_available("mpi"):
        pytest.skip("this torch has MPI")
    assert _comm(["--backend", "mpi"], monkeypatch) == 2
    err = capsys.readouterr().err
    assert err.startswith("stride comm: --backend mpi: not available") and "available here: gloo" in err


def test_max_bytes_beyond_available_memory_is_refused(monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    import collections

    import psutil

    mem = collections.namedtuple("mem", "available")
    monkeypatch.setattr(psutil, "virtual_memory", lambda: mem(4 << 30))
    assert _comm(["--collectives", "all_reduce", "--min-bytes", "1G", "--max-bytes", "1G"], monkeypatch) == 2
    err = capsys.readouterr().err  # all_reduce: (1 buffer + 6) x 1 GiB x 2 ranks
    assert "the largest size, 1 GiB: about 14 GiB needed (2 ranks here" in err and "4 GiB available" in err


def test_probe_reads_the_comm_profile_before_probing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    import stride.perfmodel.probe
    from stride.cli.main import main

    bad = tmp_path / "hw.toml"
    bad.write_text('[meta]\nformat = "stride-hwprofile-1"\nworld_size = 2\n'
                   "[collectives.all_reduce]\nalpha_us = 2037.5\nbeta_us_per_byte = 0.0\n")

    def no_probe(threads: int) -> dict:
        raise AssertionError("probed before reading the comm profile")

    monkeypatch.setattr(stride.perfmodel.probe, "probe_niced", no_probe)
    out = tmp_path / "local.toml"
    assert main(["plan", "probe", "--out", str(out), "--comm-profile", str(bad)]) == 2
    assert "alpha must be >= 0 and beta > 0" in capsys.readouterr().err and not out.exists()


def test_the_planner_skips_a_noisy_fit_in_a_profile_written_before_the_floor(tmp_path: Path) -> None:
    """A profile `stride comm` wrote before the R^2 floor may hold a noise fit (the docs' old example: R^2 -0.397):
    the planner's reader leaves that collective out, and refuses a profile of noise alone."""
    from stride.comm.fit_quality import MIN_R2
    from stride.config.errors import ConfigError
    from stride.perfmodel.hardware import read_comm_profile

    p = tmp_path / "old.toml"
    head = '[meta]\nformat = "stride-hwprofile-1"\nworld_size = 2\n'
    good = "[collectives.all_reduce]\nalpha_us = 245.0\nbeta_us_per_byte = 0.001133\nfit_r2 = 0.945\n"
    noisy = f"[collectives.send_recv]\nalpha_us = 121.3\nbeta_us_per_byte = 0.05\nfit_r2 = {MIN_R2 - 0.897}\n"
    p.write_text(head + good + noisy)
    assert set(read_comm_profile(p, "hw")) == {"all_reduce"}
    p.write_text(head + noisy)
    with pytest.raises(ConfigError, match="none whose fit_r2 reaches 0.5"):
        read_comm_profile(p, "hw")
    p.write_text(head + good.replace("fit_r2 = 0.945\n", ""))  # no fit_r2 at all (hand-written): taken as it is
    assert set(read_comm_profile(p, "hw")) == {"all_reduce"}


def test_repeats_report_the_median_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    """--repeats N times the batch of calls N times and reports the median: one batch on a shared host moved by
    +-0.5 ms between sizes, and the start-up / bandwidth fit was left out as noise (the local check's profile)."""
    from stride.comm import bench

    class Fake:
        def __init__(self, *a) -> None:
            pass

        def check(self) -> None:
            return None

        def run(self) -> None:
            pass

    batches = iter([5e-3, 1e-3, 2e-3])
    warmups: list[int] = []

    def time_calls(run, n, warmup):
        warmups.append(warmup)
        return next(batches)

    monkeypatch.setattr(bench.dist, "get_rank", lambda: 0)
    monkeypatch.setattr(bench.dist, "get_world_size", lambda: 2)
    monkeypatch.setattr(bench, "Prepared", Fake)
    monkeypatch.setattr(bench, "slowest_rank", lambda s: s)
    monkeypatch.setattr(bench, "time_calls", time_calls)
    (row,) = bench.run_benchmark(["all_reduce"], [4096], iters=20, warmup=5, repeats=3)
    assert row.time_us == pytest.approx(2e3)  # the median of 5, 1 and 2 ms
    assert warmups == [5, 0, 0]  # warmed up once
