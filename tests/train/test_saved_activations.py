"""`saved_activation_bytes` counts activations, not the weights autograd saves through a view (outside audit 3:
a Linear stack at batch 1 reported its weights as activations, and grad_accum4's ratio read 0.43x, not 1/4)."""

from __future__ import annotations

import torch

from stride.bench.workloads import WORKLOADS
from stride.config import load_config
from stride.data.build import build_data
from stride.metrics.memory import SavedActivations
from stride.train.trainer import Trainer


def test_weights_saved_through_a_view_are_not_activations() -> None:
    m = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024))
    x = torch.randn(3, 1024)
    for model in (None, m):
        with SavedActivations(model) as saved:
            m(x).sum()
        # the first Linear saves its input, ReLU its output (which the second Linear saves too): 2 x 3 x 1024 x 4 B
        assert saved.bytes == 2 * 3 * 1024 * 4


def test_buffers_of_the_model_are_not_activations() -> None:
    class Scaled(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("table", torch.randn(4096))
            self.w = torch.nn.Parameter(torch.randn(4096))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * self.w * self.table.view(1, -1)  # the buffer saved through a view

    m, x = Scaled(), torch.randn(2, 4096)
    with SavedActivations(m) as saved:
        m(x).sum()
    with SavedActivations() as everything:
        m(x).sum()
    assert everything.bytes - saved.bytes == 4096 * 4  # exactly the buffer's storage
    assert saved.bytes > 0


def test_gradient_accumulation_of_4_saves_a_quarter_of_the_activations(tmp_path) -> None:
    """Each micro-batch saves a quarter of the activations; its input and target are slices of the whole batch,
    whose storages (resident anyway) the first layer and the loss keep: counted once, whole."""
    base = [*WORKLOADS["mlp_tiny"].overrides, "train.steps=2", "train.val_every=0", "train.threads=1"]
    sizes = []
    for accum in (1, 4):
        cfg = load_config(overrides=[*base, f"train.grad_accum={accum}"])
        sizes.append(Trainer(config=cfg, write_run_dir=False).fit().summary["saved_activation_bytes"])
    x, y = next(iter(build_data(cfg.data, cfg.train.batch_size).train))
    batch_input = x.numel() * x.element_size() + y.numel() * y.element_size()  # the loss saves its target slice
    assert sizes[1] == (sizes[0] - batch_input) // 4 + batch_input  # was 0.43x of sizes[0] with the weights in
