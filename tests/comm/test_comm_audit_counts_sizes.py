"""`stride comm` as nccl-tests prints and reads it (outside audit).

Before: the `count` of all_gather and reduce_scatter was the whole buffer's elements (16384 at 64 KiB, 2 ranks)
where nccl-tests prints one rank's (8192); `--collectives ,` said "unknown collective(s) []"; `--min-bytes 1.5K`
and `1e3` were "expected a number"; `--max-bytes 99999999999999999999999` said "7.04e+13 GiB: about
985162418487296.0 GiB needed"; `--nproc 64` on 2 cores said nothing and measured the scheduler.
"""

from __future__ import annotations

import pytest
from comm_fakes import run_comm

from stride.comm.bench import Row
from stride.comm.sizes import parse_bytes

_comm = run_comm


def test_count_is_nccl_tests_count_and_the_bandwidths_are_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    """nccl-tests' count is its paramcount: per-rank input of all_gather, per-rank output of reduce_scatter, the
    per-peer chunk of alltoall; the whole buffer for the others. Its size (bytes) stays the whole buffer."""
    from stride.comm import bench

    class Fake:
        def __init__(self, *a: object) -> None:
            pass

        def check(self) -> None:
            return None

        def run(self) -> None:
            pass

    monkeypatch.setattr(bench.dist, "get_rank", lambda: 0)
    monkeypatch.setattr(bench.dist, "get_world_size", lambda: 2)
    monkeypatch.setattr(bench, "Prepared", Fake)
    monkeypatch.setattr(bench, "slowest_rank", lambda s: s)
    monkeypatch.setattr(bench, "time_calls", lambda run, n, warmup: 1e-3)
    names = ["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "send_recv"]
    rows = {r.collective: r for r in bench.run_benchmark(names, [65536], iters=1, warmup=0)}
    assert {k: (r.bytes, r.count) for k, r in rows.items()} == {
        "all_reduce": (65536, 16384), "all_gather": (65536, 8192), "reduce_scatter": (65536, 8192),
        "all_to_all": (65536, 8192), "broadcast": (65536, 16384), "send_recv": (65536, 16384)}
    for r in rows.values():  # algbw = the whole size / time, busbw = algbw x the bus factor, as before
        assert r.algbw_GBps == pytest.approx(65536 / 1e-3 / 1e9)
    assert rows["all_reduce"].busbw_GBps == pytest.approx(rows["all_reduce"].algbw_GBps)  # 2(n-1)/n = 1 at n = 2
    assert rows["all_gather"].busbw_GBps == pytest.approx(rows["all_gather"].algbw_GBps / 2)


@pytest.mark.parametrize("given", [",", " , ", ""])
def test_an_empty_collectives_list_is_said_so(given: str, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert _comm(["--collectives", given], monkeypatch) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "the list is empty" in err[0] and "[]" not in err[0], err
    assert "all_reduce" in err[0]


def test_an_unknown_collective_is_named_without_a_python_list(monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert _comm(["--collectives", "all_reduce,allgather"], monkeypatch) == 2
    err = capsys.readouterr().err
    assert "unknown collective(s) allgather" in err and "did you mean" in err


@pytest.mark.parametrize(("text", "want"), [("8", 8), ("1.5K", 1536), ("1e3", 1000), ("1E3", 1000), (".5K", 512),
                                            ("2.0M", 2 << 20), ("64k", 65536), ("1e18", 10**18)])
def test_sizes_nccl_tests_reads_and_whole_fractions(text: str, want: int) -> None:
    assert parse_bytes(text, "--min-bytes") == want


@pytest.mark.parametrize(("text", "words"), [
    ("0.5", "is 0.5 bytes, not a whole number of bytes"),
    ("1.1K", "is 1126.4 bytes, not a whole number of bytes"),
    ("0", "at least 1 byte"),
    ("-8", "at least 1 byte"),
    ("12X", "expected a number of bytes with an optional unit K, M or G"),
    ("99999999999999999999999", "larger than any buffer can be"),
    ("1e400", "larger than any buffer can be"),
    ("1E19", "larger than any buffer can be"),
])
def test_sizes_refused_with_the_reason(text: str, words: str) -> None:
    with pytest.raises(ValueError, match="--max-bytes") as exc:
        parse_bytes(text, "--max-bytes")
    assert words in str(exc.value)
    assert parse_bytes(str((1 << 63) - 1)) == (1 << 63) - 1  # 8 EiB, the most a tensor holds


def test_fractional_and_scientific_sizes_run(monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    rows = [Row("all_reduce", 1000, 250, 5.0, 0.0, 0.0, True)]
    assert _comm(["--collectives", "all_reduce", "--min-bytes", "1e3", "--max-bytes", "1.5K", "--json"],
                 monkeypatch, rows) == 0
    assert "expected a number" not in capsys.readouterr().err


def test_an_impossible_max_bytes_is_one_readable_line(monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert _comm(["--max-bytes", "99999999999999999999999"], monkeypatch) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("stride comm: --max-bytes '99999999999999999999999': larger than any "
                                               "buffer can be"), err
    assert "e+" not in err[0] and "GiB needed" not in err[0]


def test_the_memory_refusal_says_sizes_in_readable_units(monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    import collections

    import psutil

    mem = collections.namedtuple("mem", "available")
    monkeypatch.setattr(psutil, "virtual_memory", lambda: mem(8 << 30))
    assert _comm(["--collectives", "all_reduce", "--min-bytes", "1G", "--max-bytes", "4E"], monkeypatch) == 2
    err = capsys.readouterr().err  # nothing like "7.04e+13 GiB: about 985162418487296.0 GiB"
    assert "--max-bytes '4E'" in err  # no E unit: refused as a size, not as memory
    assert _comm(["--collectives", "all_reduce", "--min-bytes", "1G", "--max-bytes", "4000000G"], monkeypatch) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("stride comm: --max-bytes: the largest size, 2 PiB: about 28 PiB "
                                               "needed (2 ranks here"), err
    assert "8 GiB available" in err[0]


def test_more_ranks_than_cores_is_warned_once(monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    import stride.files.rank_share

    monkeypatch.setattr(stride.files.rank_share, "usable_cores", lambda: 2)
    rows = [Row("all_reduce", 8, 2, 5.0, 0.0, 0.0, True)]
    assert _comm(["--nproc", "64", "--collectives", "all_reduce", "--max-bytes", "8", "--json"],
                 monkeypatch, rows) == 0
    err = [ln for ln in capsys.readouterr().err.splitlines() if "warning" in ln]
    assert err == ["stride comm: warning: 64 processes on the 2 usable cores of this host (os.sched_getaffinity) "
                   "will oversubscribe them: the timings will mostly measure the scheduler, not the collectives; use "
                   "--nproc 2 or fewer"]
    assert _comm(["--nproc", "2", "--collectives", "all_reduce", "--max-bytes", "8", "--json"], monkeypatch, rows) == 0
    assert "warning" not in capsys.readouterr().err
