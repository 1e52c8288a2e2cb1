"""What a sweep suggests where a configuration has fewer than 2 finished seeds: only what would help.

Before, every such sweep said "add seeds with --grid train.seed=0..2", also a sweep stopped after one seed of each
configuration whose grid was `--grid train.seed=0..2` already (its other seeds only needed the same command again),
and a sweep of seed 5 (whose suggestion dropped seed 5 and, in the same folder, is refused as another grid).
"""

from __future__ import annotations

import pytest

from stride.bench.stop import SweepStopped
from stride.cli.main import INTERRUPTED, main
from stride.sweep import runner
from stride.sweep.report import seed_advice


def _plan(axes: dict[str, list]) -> dict:
    n = 1
    for v in axes.values():
        n *= len(v)
    return {"axes": [{"key": k, "values": v} for k, v in axes.items()], "points": [{}] * n}


@pytest.mark.parametrize("axes, finished, seeds, says", [
    ({"optim.lr": [1, 2], "train.seed": [0, 1, 2]}, 2, [0, 1, 2],
     "the grid has 3 seeds a configuration, 4 point(s) not finished: run the same command again to train them"),
    ({"optim.lr": [1, 2], "data.seed": [0, 1]}, 2, [0], "the grid has 2 seeds a configuration, 2 point(s) not"),
    ({"optim.lr": [1, 2]}, 2, [0], "add seeds with --grid train.seed=0..2 in another --out"),
    ({"optim.lr": [1, 2], "train.seed": [5]}, 2, [5], "add seeds with --grid train.seed=5..7 in another --out"),
])
def test_the_advice_adds_only_what_the_grid_lacks(axes, finished, seeds, says) -> None:
    assert seed_advice(_plan(axes), [{}] * finished, seeds).startswith(says)


def test_a_stopped_sweep_asks_for_its_own_seeds_not_for_more(tmp_path, monkeypatch, capsys) -> None:
    """A real sweep, stopped (as by SIGTERM) after the first seed of each of its 2 configurations finished."""
    from sweep_fixtures import mlp_toml

    cfg = tmp_path / "c.toml"
    cfg.write_text(mlp_toml(4, 4))
    real, calls = runner.run_job, []

    def stop_after_two(job, **kw):  # noqa: ANN001, ANN003, ANN202
        if len(calls) == 2:
            raise SweepStopped("SIGTERM")
        calls.append(job.index)
        return real(job, **kw)

    monkeypatch.setattr(runner, "run_job", stop_after_two)
    out = tmp_path / "s"
    capsys.readouterr()
    assert main(["sweep", str(cfg), "--grid", "train.seed=0..2", "--grid", "optim.lr=1e-3,3e-3", "--pack", "1",
                 "--out", str(out)]) == INTERRUPTED
    err = capsys.readouterr().err
    assert "--grid train.seed=0..2" not in err  # the grid's own seeds: suggested before
    best = [line for line in err.splitlines() if "(1 seed: seed noise unknown" in line]
    assert len(best) == 2 and all("the grid has 3 seeds a configuration, 4 point(s) not finished: run the same "
                                  "command again to train them" in line for line in best), err
    summary = (out / "summary.md").read_text()
    assert "4 point(s) not finished: run the same command again" in summary and "train.seed=0..2" in summary
    assert "add seeds" not in summary
