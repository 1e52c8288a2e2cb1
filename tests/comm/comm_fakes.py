"""`stride comm` run in this process with the spawned benchmark replaced by given rows (argument checks and what is
printed from rows, without starting ranks)."""

from __future__ import annotations

import pytest

from stride.comm.bench import Row


def run_comm(argv: list[str], monkeypatch: pytest.MonkeyPatch, rows: list[Row] | None = None) -> int:
    """Run `stride comm` with `run_spawned` returning `rows` (or failing the test if it is reached)."""
    import stride.comm.launch
    from stride.cli.main import main

    def fake(job: object, nproc: int) -> list[Row]:
        assert rows is not None, "the benchmark ran; the arguments should have been refused first"
        return rows

    monkeypatch.setattr(stride.comm.launch, "run_spawned", fake)
    return main(["comm", *argv])
