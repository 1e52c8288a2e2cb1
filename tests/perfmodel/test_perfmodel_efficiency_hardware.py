"""`stride plan --efficiency FILE` warns when FILE was calibrated on another part than the plan's.

Before: factors calibrated on `local-cpu` were applied to an H100 plan without a word."""

from __future__ import annotations

import json
from pathlib import Path

from stride.cli.main import main

PLAN = ["plan", "--model", "llama3-8b", "--devices", "8", "--global-batch", "64", "--seq", "4096", "--json"]


def _eff(tmp_path: Path, hardware: str) -> Path:
    f = tmp_path / "eff.json"
    f.write_text(json.dumps({"hardware": hardware, "efficiency": {"gemm": 0.8}}))
    return f


def test_another_part_is_named_in_a_warning(tmp_path: Path, capsys) -> None:
    assert main([*PLAN, "--hardware", "h100-sxm", "--efficiency", str(_eff(tmp_path, "local-cpu"))]) == 0
    err = capsys.readouterr().err
    assert "calibrated on local-cpu; applied to h100-sxm" in err


def test_the_calibrated_part_itself_and_its_alias_are_quiet(tmp_path: Path, capsys) -> None:
    for name in ("h100-sxm", "h100"):
        assert main([*PLAN, "--hardware", name, "--efficiency", str(_eff(tmp_path, "h100-sxm"))]) == 0
        assert "calibrated on" not in capsys.readouterr().err, name
