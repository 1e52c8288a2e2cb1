"""`stride profile --out DIR` on a folder that holds a run: refused naming --overwrite, which it has.

Before: the refusal told the user to pass --overwrite, and `stride profile` had no such option (argparse usage)."""

from __future__ import annotations

import json
from pathlib import Path

from stride.cli.main import main

CONFIG = str(Path(__file__).resolve().parents[2] / "configs" / "quickstart.toml")
# bf16: no fp32-against-bf16 step probe (that probe trains 8 more short runs)
TINY = ["--set", "train.batch_size=16", "--set", "data.n_steps=512", "--set", "train.precision=bf16"]


def test_profile_into_a_used_folder_is_refused_then_replaced_with_overwrite(tmp_path: Path, capsys) -> None:
    out = tmp_path / "prof"
    args = ["profile", CONFIG, "--steps", "1", "--wait", "0", "--warmup", "0", *TINY,
            "--out", str(out), "--json"]
    assert main(args) == 0
    first = (out / "summary.json").read_bytes()
    capsys.readouterr()
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--overwrite" in err[0] and str(out) in err[0]
    assert (out / "summary.json").read_bytes() == first  # refused: nothing rewritten
    assert main([*args, "--overwrite"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])  # the analysis of the new run
