"""`stride comm`'s smallest size: 4 B x ranks only where the collective splits the buffer over the ranks.

Before (audit 7, #15): every collective's smallest size was one float32 per rank, so at 64 ranks broadcast,
all_reduce and send_recv skipped every size below 256 B ("one float32 per rank"), though they send the whole
buffer and one float32 is enough.
"""

from __future__ import annotations

import pytest

from stride.comm.bench import Row
from stride.comm.collectives import COLLECTIVES

SPLIT = {"all_gather", "reduce_scatter", "all_to_all"}


@pytest.mark.parametrize("world", [2, 3, 64])
def test_min_bytes_is_one_float32_unless_the_buffer_is_split(world: int) -> None:
    assert {k: c.min_bytes(world) for k, c in COLLECTIVES.items()} == {
        k: 4 * world if k in SPLIT else 4 for k in COLLECTIVES}
    for c in COLLECTIVES.values():  # the smallest size the benchmark runs has one element a rank; below, none
        assert c.count_for(c.min_bytes(world), world) >= 1 and c.count_for(c.min_bytes(world) - 1, world) == 0


def _comm(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> int:
    import stride.comm.launch
    from stride.cli.main import main

    rows = [Row("broadcast", b, b // 4, 5.0, 0.0, 0.0, True) for b in (8, 16, 32, 64, 128, 256)]
    monkeypatch.setattr(stride.comm.launch, "run_spawned", lambda job, nproc: rows)
    return main(["comm", *argv])


def test_no_size_of_broadcast_is_skipped_at_64_ranks(monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--nproc", "64", "--min-bytes", "8", "--max-bytes", "256", "--json"]
    assert _comm([*argv, "--collectives", "broadcast,all_reduce,send_recv"], monkeypatch) == 0
    assert "skipped" not in capsys.readouterr().err
    assert _comm([*argv, "--collectives", "broadcast,all_gather"], monkeypatch) == 0
    err = [ln for ln in capsys.readouterr().err.strip().splitlines() if "warning:" not in ln]  # 64 ranks > cores
    assert err == ["stride comm: note: 8, 16, 32, 64, 128 B skipped for all_gather (below 256 B, one float32 per "
                   "rank at 64 ranks)"]


def test_a_size_below_one_float32_is_refused(monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert _comm(["--collectives", "broadcast", "--min-bytes", "2", "--max-bytes", "3"], monkeypatch) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "every size (2 B) is below" in err[0] and "broadcast 4 B" in err[0]


# 4 and 8 B on 2 real ranks: tests/comm/test_comm_dist.py::test_a_port_taken_between_its_choice_and_the_bind_is_retried
# runs them (its one spawn of 2 ranks serves both checks)
