"""A tiny 2-rank training config and a reader of its progress, for the tests that launch real `--nproc` runs."""

from __future__ import annotations

import textwrap
from pathlib import Path


def tiny_config(path: Path, steps: int, name: str, checkpoint_every: int) -> Path:
    path.write_text(textwrap.dedent(f"""
        [train]
        name = "{name}"
        threads = 1
        steps = {steps}
        val_every = 0
        batch_size = 8
        [model]
        d_model = 32
        n_layers = 2
        [data]
        n_assets = 4
        n_steps = 600
        seq_len = 16
        [metrics]
        flops = false
        log_every = 1
        [checkpoint]
        enabled = true
        every = {checkpoint_every}
    """))
    return path


def steps_logged(out: Path) -> int:
    try:
        return sum('"loss"' in line for line in (out / "metrics.jsonl").read_text().splitlines())
    except OSError:
        return 0
