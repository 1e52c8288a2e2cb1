"""`stride data synth | ingest | inspect` from the command line entry point, and `stride train` on the store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stride.cli.main import main


def test_synth_ingest_inspect_train(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    syn, st = tmp_path / "syn", tmp_path / "st"
    assert main(["data", "synth", "--out", str(syn), "--assets", "2", "--days", "2", "--freq", "5min"]) == 0
    assert main(["data", "ingest", str(syn), "--out", str(st), "--columns", "close,mid,spread,volume"]) == 0
    capsys.readouterr()
    assert main(["data", "inspect", str(st), "--verify", "--json"]) == 0
    m = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert m["n_rows"] == 2 * 2 * 78 and m["columns"] == ["close", "mid", "spread", "volume"] and m["n_symbols"] == 2
    assert main(["data", "ingest", str(syn), "--out", str(st)]) == 2
    assert "already exists" in capsys.readouterr().err
    assert main(["data", "inspect", str(tmp_path)]) == 2
    assert "no manifest.json" in capsys.readouterr().err
    cfg = tmp_path / "run.toml"
    cfg.write_text(f'[data]\nsource = "store"\nstore = "{st}"\nseq_len = 8\nhorizons = [1, 3]\nval_fraction = 0.3\n'
                   "[train]\nsteps = 3\nbatch_size = 16\nval_every = 3\nthreads = 1\n[metrics]\nflops = false\n")
    assert main(["train", str(cfg), "--no-progress", "--out", str(tmp_path / "run")]) == 0
    assert (tmp_path / "run").is_dir()
