"""Held-out folds fitted in forked workers give exactly the folds fitted one after another (each fold is
independent: the same training rows, the same deterministic pattern search)."""

from __future__ import annotations

from stride.perfmodel import evaluate as ev
from stride.perfmodel.hardware import load_catalog


def test_folds_in_workers_equal_folds_in_turn() -> None:
    files = [p for p in ev.data_files() if p.name in ("torchtune.csv", "fms_fsdp.csv", "tinyllama.csv",
                                                      "megatron_deepspeed.csv")]
    samples, *_ = ev.load_samples(files, load_catalog())
    assert len({s.source for s in samples}) >= 3
    one = ev.held_out(samples, lambda s: s.source)
    two = ev.held_out(samples, lambda s: s.source, workers=2)
    assert one == two
