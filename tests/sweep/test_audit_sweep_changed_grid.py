"""A folder holding another sweep is refused saying what differs (outside audit of `stride sweep`).

Before, the refusal said only "holds another sweep (other points or configs)": a user who had added a seed to the
grid, changed a --set or pointed at another config file had to find out which.
"""

from __future__ import annotations

import pytest
from sweep_fixtures import GRID

from stride.cli.main import main


@pytest.mark.parametrize("change, says", [
    (["--grid", "optim.lr=1e-3,2e-3", "--grid", "train.seed=0..2", "--pack", "2"],
     "its grid is --grid optim.lr=1e-3,2e-3 --grid train.seed=0..1; this command's is --grid optim.lr=1e-3,2e-3 "
     "--grid train.seed=0..2"),
    ([*GRID, "--set", "train.batch_size=16"], "the same grid with other --set: none, not --set train.batch_size=16"),
])
def test_the_refusal_says_what_differs(config, copy, capsys, change, says) -> None:
    capsys.readouterr()
    assert main(["sweep", str(config), *change, "--out", str(copy)]) == 2
    err = capsys.readouterr().err
    assert f"{copy} holds another sweep ({says}); resume it with its own config and --grid" in err, err


def test_another_config_file_with_the_same_grid(config, copy, tmp_path, capsys) -> None:
    other = tmp_path / "other.toml"
    other.write_text(config.read_text().replace("batch_size = 32", "batch_size = 16"))
    capsys.readouterr()
    assert main(["sweep", str(other), *GRID, "--out", str(copy)]) == 2
    err = capsys.readouterr().err
    assert f"holds another sweep (the same grid of another config file: {config.resolve()}, not {other.resolve()})" \
        in err, err
