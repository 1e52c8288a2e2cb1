"""examples/mypkg/data.py, the README's `data.source = "mypkg.data:build"`: it follows the documented
contract (global batches of [B, seq_len, n_features] and [B, n_horizons], the same batches for the same
epoch, validation after training with an embargo) and stride trains on it.

Before: the README suggested `mypkg.data:build` but examples/mypkg had only a model, so
`--set data.source=mypkg.data:build` failed with "No module named 'mypkg.data'".
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from stride.cli.main import main
from stride.config import load_config
from stride.data import DataBundle

ROOT = Path(__file__).resolve().parents[2]
SMALL = ["data.n_assets=3", "data.n_steps=400", "data.seq_len=16", "data.horizons=[1, 4]"]


@pytest.fixture
def mypkg(monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201
    monkeypatch.syspath_prepend(str(ROOT / "examples"))  # what PYTHONPATH=examples does
    import mypkg.data

    return mypkg.data


def test_the_example_source_returns_what_the_contract_says(mypkg) -> None:  # noqa: ANN001
    cfg = load_config(overrides=SMALL).data
    bundle = mypkg.build(cfg=cfg, batch_size=8)
    assert isinstance(bundle, DataBundle) and (bundle.n_features, bundle.seq_len, bundle.n_horizons) == (2, 16, 2)
    bundle.train.set_epoch(0)
    batches = list(bundle.train)
    assert len(batches) == len(bundle.train) > 0
    x, y = batches[0]
    assert x.shape == (8, 16, 2) and y.shape == (8, 2) and x.dtype == y.dtype == torch.float32
    # reference in float64: a window's last input row is its end step's return; its targets the next h returns
    r = mypkg.simulate(cfg.n_assets, cfg.n_steps, cfg.seed, 0.3)
    order = torch.randperm(len(bundle.train.ends), generator=torch.Generator().manual_seed(cfg.seed * 1009))
    a, e = (int(v) for v in bundle.train.ends[order[0]])
    assert x[0, -1, 0].item() == pytest.approx(r[a, e] / 0.01, rel=1e-5)
    assert x[0, 0, 0].item() == pytest.approx(r[a, e - 15] / 0.01, rel=1e-5)
    for k, h in enumerate(cfg.horizons):
        assert y[0, k].item() == pytest.approx(r[a, e + 1:e + 1 + h].sum() / (0.01 * np.sqrt(h)), rel=1e-4, abs=1e-5)
    again = list(bundle.train)  # the same epoch again: the same batches (a resumed run replays to its step)
    assert all(torch.equal(p[0], q[0]) for p, q in zip(batches, again, strict=True))
    bundle.train.set_epoch(1)
    assert not torch.equal(next(iter(bundle.train))[0], x)
    # validation: every window ends after the last training window's targets (embargo of max(horizons))
    last_train_end = int(bundle.train.ends[:, 1].max())
    assert int(bundle.val.ends[:, 1].min()) > last_train_end + max(cfg.horizons) - 1
    assert sum(len(b[0]) for b in bundle.val) == len(bundle.val.ends)  # validation keeps its last short batch


def test_stride_trains_on_the_example_source(mypkg, tmp_path: Path) -> None:  # noqa: ANN001
    out = tmp_path / "run"
    assert main(["train", str(ROOT / "configs" / "quickstart.toml"), "--set", "data.source=mypkg.data:build",
                 "--set", "model.name=mypkg.models:build", *(a for s in SMALL for a in ("--set", s)),
                 "--set", "train.steps=3", "--set", "train.batch_size=16", "--set", "train.val_every=3",
                 "--no-progress", "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == 3 and np.isfinite(summary["final_train_loss"]) and np.isfinite(summary["final_val_loss"])
