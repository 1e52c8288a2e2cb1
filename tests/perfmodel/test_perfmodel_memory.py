"""Predicted memory of small local runs against what the trainer holds.

Per workload, one process, a few steps of the real `Trainer`: the trace-based prediction of the
bytes autograd saves (the trainer's own `saved_activation_bytes`), the parameters, the gradients
(measured with post-accumulate-grad hooks) and the optimizer state (the optimizer's tensors) must
match exactly. Process RSS is not compared: it also holds the Python runtime, torch's libraries and
allocator caches (hundreds of MB against these models' few MB), so it cannot check a prediction.
"""

from __future__ import annotations

import pytest
import torch

from stride.bench.workloads import WORKLOADS
from stride.config import load_config
from stride.perfmodel.census_workload import workload_census
from stride.perfmodel.hardware import load_catalog
from stride.perfmodel.layout import Layout
from stride.perfmodel.workload_cost import activation_bytes, workload_memory
from stride.train.callbacks import Callback
from stride.train.trainer import Trainer

FAST = ["ts_transformer_tiny", "mlp_tiny", "lstm_small", "tcn_small", "deeplob_small"]
SLOW = ["ts_transformer_small", "gpt_returns_small", "mlp_base"]
RUN = ["train.batch_size=8", "train.steps=2", "train.val_every=1000", "train.val_batches=1", "data.n_steps=2048",
       "metrics.flops=false", "metrics.log_every=1", "train.threads=1"]


class _GradBytes(Callback):
    def __init__(self) -> None:
        self.bytes = 0

    def on_fit_start(self, trainer: Trainer) -> None:
        seen: set[int] = set()

        def hook(p: torch.Tensor) -> None:
            if id(p) not in seen and p.grad is not None:
                seen.add(id(p))
                self.bytes += p.grad.numel() * p.grad.element_size()

        for p in trainer.model.parameters():
            p.register_post_accumulate_grad_hook(hook)


def _check(name: str, tmp_path) -> None:
    cfg = load_config(overrides=[*WORKLOADS[name].overrides, *RUN])
    grads = _GradBytes()
    trainer = Trainer(config=cfg, write_run_dir=False, callbacks=[grads])
    summary = trainer.fit().summary
    trace = workload_census(cfg, 8, name)
    mem = workload_memory(trace, Layout(micro_batch=8, precision=trace.precision), load_catalog().get("epyc-9654"))
    held = {
        "params": sum(p.numel() * p.element_size() for p in trainer.model.parameters()),
        "grads": grads.bytes,
        "optimizer": sum(v.numel() * v.element_size() for s in trainer.optimizer.state.values() for v in s.values()
                         if isinstance(v, torch.Tensor)),
    }
    print(f"{name}: saved {summary['saved_activation_bytes']} B (trace {trace.trainer_saved_bytes} B, of which "
          f"activations {trace.saved_bytes} B), held {held}, predicted "
          f"{ {k: int(mem[k]) for k in held} }")
    assert summary["saved_activation_bytes"] == trace.trainer_saved_bytes
    assert {k: int(mem[k]) for k in held} == held
    assert mem["activations"] == activation_bytes(trace, "none") == trace.saved_bytes > 0


@pytest.mark.parametrize("name", FAST)
def test_predicted_memory_matches_the_trainer(name: str, tmp_path) -> None:
    _check(name, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("name", SLOW)
def test_predicted_memory_matches_the_trainer_bf16_and_token_models(name: str, tmp_path) -> None:
    _check(name, tmp_path)


def test_full_recompute_keeps_block_inputs_and_one_block() -> None:
    """Full activation checkpointing: what the trainer saves in forward is the block inputs plus
    everything outside the blocks; the model adds one block's activations for its backward."""
    cfg = load_config(overrides=[*WORKLOADS["ts_transformer_tiny"].overrides, *RUN,
                                 "train.activation_checkpointing=full"])
    trainer = Trainer(config=cfg, write_run_dir=False)
    summary = trainer.fit().summary
    trace = workload_census(cfg, 8, "ts_transformer_tiny")
    outside = sum(la.saved_bytes for la in trace.layers if not la.is_block)
    block_inputs = sum(la.input_bytes for la in trace.blocks())
    # checkpoint saves each block's input (the RoPE tables it is passed are buffers: not activations)
    assert summary["saved_activation_bytes"] == outside + block_inputs
    assert activation_bytes(trace, "full") == pytest.approx(
        sum(la.saved_bytes for la in trace.layers if not la.is_block) + block_inputs
        + max(la.saved_bytes for la in trace.blocks()))
