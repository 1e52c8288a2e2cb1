"""A checkpoint whose model entries are not the built model's is refused (exit 2, naming entries and config keys).

The case found in review: tcn's `model.n_layers` counted n + 2 blocks before 4285274 and n since, so a run saved
with `model.n_layers = 2` (4 blocks) and extended by the new code (2 blocks) resumed with an unchanged config,
`resume_changes: []`: DCP loads what the model asks for and dropped blocks 2-3 without a word. The old code is
stood in for by a builder that builds n + 2 (or n + 1) blocks.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
from pathlib import Path

import pytest
import torch
from ckpt_helpers import ckpt_config, write_config
from torch import nn

from stride.config.schema import ModelConfig
from stride.models import registry
from stride.train.trainer import Trainer

TCN = ["model.name=tcn", "model.n_layers=2", "model.d_model=8"]


def _more_blocks(extra: int):  # noqa: ANN202
    real = registry.WORKLOADS["tcn"]

    def build(cfg: ModelConfig, n_features: int, seq_len: int, n_horizons: int) -> nn.Module:
        return real(dataclasses.replace(cfg, n_layers=(cfg.n_layers or 0) + extra), n_features, seq_len, n_horizons)

    return build


def _train(out: Path, *overrides: str) -> None:
    try:
        Trainer(config=ckpt_config(*overrides), out=out).fit()
    finally:
        torch.use_deterministic_algorithms(False)


def _cli(tmp_path: Path, out: Path, *overrides: str) -> tuple[int, str]:
    from stride.cli.main import main

    config = write_config(tmp_path / "resume.toml", *overrides)
    err = io.StringIO()
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            rc = main(["train", str(config), "--out", str(out), "--no-progress"])
    finally:
        torch.use_deterministic_algorithms(False)
    return rc, err.getvalue()


def _steps(out: Path) -> int:
    return max(json.loads(line).get("step", 0) for line in (out / "metrics.jsonl").read_text().splitlines())


def test_a_checkpoint_holding_blocks_the_model_lacks_is_refused(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Saved with 4 blocks (the old meaning of n_layers = 2), extended with 2: refused, exit 2, nothing trained; the
    message names dropped entries, the config keys and the recipe, which then resumes (docs/config.md)."""
    out = tmp_path / "R"
    with monkeypatch.context() as m:
        m.setitem(registry.WORKLOADS, "tcn", _more_blocks(2))
        _train(out, *TCN, "train.steps=6")
    rc, err = _cli(tmp_path, out, *TCN, "train.steps=12")
    assert rc == 2, err[-3000:]
    assert "it holds 8 model entries this model lacks (model.blocks.2.conv1.bias" in err
    assert "24 optimizer entries of parameters this model lacks (optim.state.blocks.2.conv1.bias.exp_avg" in err
    assert "`model.n_layers` = 2" in err and "holds 4 blocks" in err and "since 2026-12-07" in err
    assert "resuming from" not in err and _steps(out) == 6
    rc, err = _cli(tmp_path, out, *TCN[:2], "model.n_layers=4", "model.d_model=8", "train.steps=12",
                   "checkpoint.force_resume=true")
    assert rc == 0, err[-3000:]
    assert "model.n_layers: 2 (checkpoint) -> 4 (now)" in err and "resuming from step_00000006" in err
    assert _steps(out) == 12


def test_a_model_with_entries_the_checkpoint_lacks_is_refused_naming_them(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Saved with 2 blocks, resumed with 3: DCP's "Missing key in checkpoint state_dict" (one key) read as a damaged
    checkpoint: it fell back to step_00000003 and then said "put back a valid step_00000006 to extend the run", of a
    checkpoint that is fine. Now the same refusal as above, naming the entries, before any checkpoint is skipped."""
    out = tmp_path / "R"
    _train(out, *TCN, "train.steps=6")
    monkeypatch.setitem(registry.WORKLOADS, "tcn", _more_blocks(1))
    rc, err = _cli(tmp_path, out, *TCN, "train.steps=12")
    assert rc == 2, err[-3000:]
    assert "this model has 4 entries it lacks (model.blocks.2.conv1.bias" in err and "holds 2 blocks" in err
    assert "optimizer entries" not in err and "falling back" not in err and _steps(out) == 6
