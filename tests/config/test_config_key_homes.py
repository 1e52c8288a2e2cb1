"""A key written without its section is pointed to the section that holds it, and repeated list entries are refused
(outside audit 2, F11): `--set target_val_loss=1.3` said only "must be section.key", a top-level `steps = 3` was an
"unknown section [steps]", and `data.horizons = [1, 1]` trained one target twice."""

from __future__ import annotations

from pathlib import Path

import pytest

from stride.cli.main import main
from stride.config import ConfigError, load_config

ROOT = Path(__file__).resolve().parents[2]
CFG = ROOT / "configs" / "quickstart.toml"


def test_a_key_without_its_section_names_its_section() -> None:
    with pytest.raises(ConfigError, match="did you mean `train.target_val_loss`"):
        load_config(CFG, ["target_val_loss=1.3"])


def test_a_top_level_key_is_said_to_be_outside_every_section(tmp_path: Path) -> None:
    p = tmp_path / "c.toml"
    p.write_text("steps = 3\n[train]\nsteps = 2\n")
    with pytest.raises(ConfigError, match="`steps = 3` is outside every section.*did you mean `train.steps`"):
        load_config(p)
    p.write_text("[trian]\nsteps = 2\n")  # a misspelt section is still a section
    with pytest.raises(ConfigError, match="unknown section `\\[trian\\]`"):
        load_config(p)


@pytest.mark.parametrize(("key", "value"), [("data.horizons", "[1, 5, 1]"), ("model.quantiles", "[0.1, 0.1, 0.9]")])
def test_a_list_entry_given_twice_is_refused(key: str, value: str) -> None:
    with pytest.raises(ConfigError, match=f"`{key}` = .* twice: each once"):
        load_config(CFG, [f"{key}={value}", "model.loss=quantile"])


def test_repro_refuses_a_nan_tolerance(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="--tolerance = nan must be >= 0"):
        main(["repro", str(tmp_path), "--tolerance", "nan"])
