"""A list key given a scalar says how a TOML list is written (first-contact audit of 2026-12-07): `--set
data.columns=mid,spread` was refused as "expects a list, got str 'mid,spread'" without the form that works, and
`--set data.horizons=5` the same."""

from __future__ import annotations

from pathlib import Path

import pytest

from stride.config import ConfigError, load_config

ROOT = Path(__file__).resolve().parents[2]
CFG = ROOT / "configs" / "quickstart.toml"


@pytest.mark.parametrize(("given", "form"), [
    ("data.columns=mid,spread", """--set 'data.columns=["mid", "spread"]'"""),
    ("data.columns=[mid]", """--set 'data.columns=["mid"]'"""),
    ("data.horizons=5", "--set 'data.horizons=[5]'"),
    ("data.horizons=1,5", "--set 'data.horizons=[1, 5]'"),
])
def test_a_scalar_for_a_list_key_shows_the_list_form(given: str, form: str) -> None:
    with pytest.raises(ConfigError, match="expects a list") as info:
        load_config(CFG, [given])
    assert form in str(info.value), info.value


def test_the_form_works(tmp_path: Path) -> None:
    """The suggested value is itself accepted."""
    cfg = load_config(CFG, ["data.horizons=[1, 5]"])
    assert cfg.data.horizons == [1, 5]


def test_a_file_gets_the_form_under_its_section(tmp_path: Path) -> None:
    p = tmp_path / "c.toml"
    p.write_text('[data]\ncolumns = "mid"\n')
    with pytest.raises(ConfigError, match=r'columns = \["mid"\] \(under \[data\]\)'):
        load_config(p)
