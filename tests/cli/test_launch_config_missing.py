"""`stride launch slurm|k8s` with a config path that is not there says where a relative path was looked for, as
`stride train` does (first-contact audit of 2026-12-07): from another folder they said only "config file not found:
configs/quickstart.toml"."""

from __future__ import annotations

from pathlib import Path

import pytest

from stride.cli.main import main


@pytest.mark.parametrize("argv", [["launch", "slurm", "configs/quickstart.toml", "--nodes", "1", "--dry-run"],
                                  ["launch", "k8s", "configs/quickstart.toml"]])
def test_a_missing_relative_config_names_where_it_was_looked_for(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                 monkeypatch: pytest.MonkeyPatch,
                                                                 argv: list[str]) -> None:
    monkeypatch.chdir(tmp_path)
    rc = main(argv)
    cap = capsys.readouterr()
    assert rc == 2 and cap.out == "" and len(cap.err.strip().splitlines()) == 1, cap
    assert f"looked for {tmp_path.resolve() / 'configs' / 'quickstart.toml'}" in cap.err, cap.err
