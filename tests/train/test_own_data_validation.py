"""The caller's training data is never validated on [data]'s series (outside audit 37, look-ahead and leakage).

`Trainer(train_data=(X, Y), config=cfg)` without a model built [data] for the model's shapes and took its
validation split too: a run training on the caller's data (targets 1000, loss about 1e6) reported final_val_loss
1.70, the loss on the synthetic market. Now such a run validates only on `val_data` the caller passes, and says so.
"""

from __future__ import annotations

import pytest
import torch

import stride
from stride.kernels import runtime


def _cfg():  # noqa: ANN202
    return stride.load_config(overrides=["model.name=mlp", "data.n_assets=4", "data.n_steps=1024", "data.seq_len=8",
                                         "data.horizons=[1, 5]", "train.steps=2", "train.batch_size=32",
                                         "train.val_every=1", "train.val_batches=1", "train.threads=1",
                                         "metrics.progress=false", "metrics.flops=false"])


def _data(target: float) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.zeros(64, 8, 7), torch.full((64, 2), target)  # synthetic shapes: 7 features, 2 horizons


def test_the_callers_data_is_not_validated_on_the_configs_series(caplog: pytest.LogCaptureFixture) -> None:
    runtime._noticed.discard("train-own-data-no-val")  # said once a process: another test may have said it
    tr = stride.Trainer(train_data=_data(1000.0), config=_cfg(), write_run_dir=False)
    assert tr.val_data is None
    s = tr.fit().summary
    assert s["final_train_loss"] > 1e5 and s["final_val_loss"] is None
    assert "no validation: the training data is the caller's" in caplog.text


def test_the_callers_validation_data_is_what_validation_reads() -> None:
    xv, yv = _data(3.0)
    tr = stride.Trainer(train_data=_data(1000.0), val_data=(xv, yv), config=_cfg(), write_run_dir=False)
    s = tr.fit().summary
    with torch.no_grad():
        ref = float(tr.loss_fn(tr.model(xv[:32]), yv[:32]))  # the first val batch (val_batches = 1)
    assert s["final_val_loss"] == pytest.approx(ref, rel=1e-5) and ref > 1.0
