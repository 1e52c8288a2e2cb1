"""The warm-up runs `--warmup` calls, bounded only by the per-size byte budget as the timed calls are: it was capped at
`--iters` too, so `--iters 1 --warmup 5` warmed up once (nccl-tests runs its -w warm-up iterations whatever -n)."""

from __future__ import annotations

import pytest

import stride.comm.bench as bench
import stride.comm.timing as timing


class _Counted:
    """A collective that counts its calls and is always right."""

    calls = 0

    def __init__(self, name: str, count: int, rank: int, world: int) -> None:
        self.run = self._run

    def _run(self) -> None:
        type(self).calls += 1

    def check(self) -> None:
        return None


@pytest.mark.parametrize(("iters", "warmup", "nbytes", "budget", "want"), [
    (1, 5, 1024, 1 << 31, 1 + 5),  # the audit's case: 2 calls before
    (20, 5, 1024, 1 << 31, 20 + 5),
    (3, 0, 1024, 1 << 31, 3),
    (20, 5, 1024, 2048, 2 + 2),  # a big size: both bounded by the budget (2 calls of 1 KiB)
])
def test_warmup_is_what_was_asked_within_the_budget(iters: int, warmup: int, nbytes: int, budget: int, want: int,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    _Counted.calls = 0
    monkeypatch.setattr(bench, "Prepared", _Counted)
    monkeypatch.setattr(bench, "slowest_rank", lambda x: x)
    monkeypatch.setattr(bench.dist, "get_rank", lambda: 0)
    monkeypatch.setattr(bench.dist, "get_world_size", lambda: 2)
    monkeypatch.setattr(timing.dist, "barrier", lambda: None)
    rows = bench.run_benchmark(["all_reduce"], [nbytes], iters, warmup, budget_bytes=budget)
    assert len(rows) == 1 and rows[0].correct
    assert _Counted.calls == want
