"""A config (or a --set value) nested thousands deep is one line naming it, not tomllib's RecursionError traceback
(audit 14, L4: `stride train deep.toml` failed in config/loader.py with "maximum recursion depth exceeded")."""

from __future__ import annotations

from pathlib import Path

import pytest

from stride.cli.main import main
from stride.config import ConfigError, load_config

DEEP = "[" * 5000 + "]" * 5000


def test_a_deeply_nested_config_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "deep.toml"
    cfg.write_text(f"[extra]\nx = {DEEP}\n")
    with pytest.raises(ConfigError, match=rf"^{cfg}: not valid TOML: nested too deeply to read"):
        load_config(cfg)
    assert main(["train", str(cfg), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"stride train: config error: {cfg}: not valid TOML: nested too deeply") and \
        len(err.splitlines()) == 1, err
    assert not (tmp_path / "run").exists()


def test_a_deeply_nested_set_value_is_one_line() -> None:
    with pytest.raises(ConfigError, match=r"^--set `x=\[\[\[.*\.\.\.`: the value is nested too deeply to read$"):
        load_config(overrides=[f"x={DEEP}"])
