"""Store keys beside the synthetic source are refused (first-contact audit of 2026-12-07): `stride train
configs/quickstart.toml --set data.store=runs/store` (data.source left "synthetic") trained on the simulated market
and said nothing, so a newcomer believed the run had read their data."""

from __future__ import annotations

from pathlib import Path

import pytest

from stride.config import ConfigError, load_config

ROOT = Path(__file__).resolve().parents[2]
CFG = ROOT / "configs" / "quickstart.toml"


@pytest.mark.parametrize("given", ["data.store='runs/store'", 'data.columns=["mid"]', "data.target_column='mid'",
                                   "data.cross_days=true"])
def test_a_store_key_without_the_store_source_is_refused(given: str) -> None:
    key = given.split("=")[0]
    with pytest.raises(ConfigError, match=f'`{key}` = .*read only with `data.source` = "store".*simulated market'):
        load_config(CFG, [given])


def test_the_same_keys_with_the_store_source_load() -> None:
    cfg = load_config(CFG, ["data.source='store'", "data.store='runs/store'", 'data.columns=["mid"]',
                            "data.target_column='mid'", "data.cross_days=true"])
    assert (cfg.data.source, cfg.data.store, cfg.data.columns) == ("store", "runs/store", ["mid"])


def test_a_module_factory_source_may_read_them() -> None:
    """A `module:factory` source gets the whole config (`cfg=`) and may read `data.store`: not refused."""
    cfg = load_config(CFG, ["data.source='mypkg.data:build'", "data.store='runs/store'"])
    assert cfg.data.store == "runs/store"
