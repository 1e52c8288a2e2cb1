"""`train.kernels = "triton"` swaps the model's norms, gated MLP, RoPE and loss for the Triton kernels
(run here under the interpreter) and trains to the same numbers as the torch code."""

from __future__ import annotations

import os

import pytest
import torch

from stride.config import load_config
from stride.train.trainer import Trainer

pytestmark = pytest.mark.skipif(
    not (torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1"),
    reason="needs a GPU or TRITON_INTERPRET=1 (set by tests/conftest.py)",
)

BASE = ["data.n_assets=2", "data.n_steps=512", "data.seq_len=8", "data.horizons=[1, 5]", "train.batch_size=8",
        "train.steps=3", "train.val_every=0", "metrics.progress=false", "metrics.flops=false",
        "model.d_model=16", "model.n_heads=2", "model.n_layers=1", "train.deterministic=true"]


@pytest.mark.slow
@pytest.mark.parametrize("loss", ["mse", "quantile"])
def test_triton_kernels_train_like_torch(loss: str) -> None:
    runs = {}
    for kernels in ("torch", "triton"):
        cfg = load_config(overrides=[*BASE, f"train.kernels={kernels}", f"model.loss={loss}"])
        t = Trainer(config=cfg, write_run_dir=False)
        runs[kernels] = (t, t.fit().summary)
    (tt, st), (tk, sk) = runs["torch"], runs["triton"]
    assert sk["kernels"] == "triton" and tk.kernel_modules == 5  # 3 RMSNorm, 1 SwiGLU, 1 Attention (RoPE)
    assert st["kernels"] == "torch"
    assert sk["final_train_loss"] == pytest.approx(st["final_train_loss"], rel=1e-5)
    pa = torch.cat([p.flatten() for p in tt.model.parameters()])
    pb = torch.cat([p.flatten() for p in tk.model.parameters()])
    assert (pa - pb).abs().max().item() < 1e-5
