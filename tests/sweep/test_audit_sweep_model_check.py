"""A grid point whose model the builder refuses is refused before any point trains (outside audit of `stride sweep`).

`--grid model.d_model=32,30` for the transformer (4 heads: 30 does not split into heads of even size) passes the
grid's checks (`validate_relations`: relations between keys, not the model's builder). Before, `--pack 1` trained
the d_model=32 points and then stopped with the builder's line, naming no grid point, and the same command again
stopped at the same place: the sweep could only be finished in another --out with another grid.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from stride.cli.main import main

TOML = "\n".join([
    "[model]", 'name = "ts_transformer"', 'size = "tiny"',
    "[data]", "n_assets = 4", "n_steps = 1024", "seq_len = 16",
    "[train]", "steps = 2", "batch_size = 16", "val_every = 2", "val_batches = 1", "threads = 1",
    "[metrics]", "progress = false", "flops = false", ""])


@pytest.mark.parametrize("pack", ["1", "2"])
def test_a_point_the_model_builder_refuses_stops_the_sweep_before_any_training(tmp_path: Path, capsys,
                                                                                pack: str) -> None:
    cfg = tmp_path / "t.toml"
    cfg.write_text(TOML)
    out = tmp_path / "s"
    argv = ["sweep", str(cfg), "--grid", "model.d_model=32,30", "--grid", "train.seed=0,1", "--pack", pack,
            "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert ("--grid point model.d_model=30 train.seed=0: `model.d_model` = 30 must split into `model.n_heads` = 4 "
            "heads of even size") in err
    assert "checked before any point of the sweep trains" in err
    assert not list((out / "points").glob("*.json"))  # was 2 under --pack 1: the d_model=32 points trained first
