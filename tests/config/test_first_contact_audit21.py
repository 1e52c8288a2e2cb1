"""Outside audit 21's wording findings (L4): a store path that does not exist said "not a stride store: no
manifest.json"; `--set foo.bar=1` named no section, where the same mistake in a file lists them."""

from __future__ import annotations

from pathlib import Path

import pytest

from stride.config import load_config
from stride.config.errors import ConfigError
from stride.data.store import StoreError, open_store


def test_a_missing_store_folder_is_said_to_be_missing(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="no such directory"):
        open_store(tmp_path / "nostore")
    (tmp_path / "empty").mkdir()
    with pytest.raises(StoreError, match="no manifest.json"):
        open_store(tmp_path / "empty")


def test_an_unknown_section_in_set_lists_the_sections() -> None:
    with pytest.raises(ConfigError, match=r"unknown section `foo`.*sections are model, data, optim, train"):
        load_config(overrides=["foo.bar=1"])
