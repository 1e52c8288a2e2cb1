"""Combinations of training techniques that cannot run are refused before the first step with one line naming the
keys; those that run use the technique the config names (no silent fallback)."""

from __future__ import annotations

import pytest

from stride.config import ConfigError, load_config
from stride.train.trainer import Trainer

TINY = ["model.name='mlp'", "data.n_assets=4", "data.n_steps=1024", "data.seq_len=8", "data.horizons=[1, 5]",
        "train.batch_size=32", "train.val_every=0", "train.threads=1", "metrics.progress=false"]


def test_triton_kernels_under_the_interpreter_with_compile_are_refused_up_front(monkeypatch):
    """TRITON_INTERPRET=1 + kernels=triton + compile: dynamo traced the interpreter and died at the first step with an
    InterpreterError traceback; now a ConfigError naming both keys before anything is built."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    pytest.importorskip("triton")
    for mode in ("model", "model+optimizer"):
        cfg = load_config(overrides=TINY + ["train.kernels='triton'", f"train.compile='{mode}'", "train.steps=1"])
        with pytest.raises(ConfigError, match=r"`train.kernels` = 'triton' with `train.compile`"):
            Trainer(config=cfg, write_run_dir=False)
    # either alone still runs
    cfg = load_config(overrides=TINY + ["train.kernels='triton'", "train.steps=1"])
    Trainer(config=cfg, write_run_dir=False)
