"""What an operator census of one training step holds: per layer and phase, FLOPs by the efficiency they
run at, bytes read and written, kernel count, saved-for-backward bytes and parameters; and the optimizer.

Taken by `census_step.take_census` on fake tensors (no memory, no compute); read by the cost model
(workload_cost.py) and the planner.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

PHASES = ("fwd", "bwd", "opt")
OUTSIDE = "(outside modules)"  # loss and glue ops not inside any child module

@dataclass
class PhaseCost:
    """Sums over one layer's kernels in one phase. FLOPs by the efficiency they run at; `bytes`
    read + written; `attn_exec_flops` halves causal attention (the kernel skips masked blocks)."""

    gemm_flops: float = 0.0
    attn_flops: float = 0.0
    attn_exec_flops: float = 0.0
    rnn_flops: float = 0.0
    bytes: float = 0.0
    kernels: int = 0

    @property
    def flops(self) -> float:
        return self.gemm_flops + self.attn_flops + self.rnn_flops

    def add(self, kind: str, flops: float, nbytes: float, causal: bool) -> None:
        if kind == "attention":
            self.attn_flops += flops
            self.attn_exec_flops += flops * (0.5 if causal else 1.0)
        elif kind == "rnn":
            self.rnn_flops += flops
        else:
            self.gemm_flops += flops
        self.bytes += nbytes
        self.kernels += 1

    def scaled(self, k: float) -> PhaseCost:
        return PhaseCost(*(getattr(self, f.name) * k for f in dataclasses.fields(self)))

    def plus(self, other: PhaseCost) -> PhaseCost:
        return PhaseCost(*(getattr(self, f.name) + getattr(other, f.name) for f in dataclasses.fields(self)))


@dataclass
class LayerCensus:
    """One layer: a block (`blocks.i`), another top-level child of the model, or OUTSIDE."""

    name: str
    params: int = 0
    param_bytes: int = 0
    is_block: bool = False
    fwd: PhaseCost = field(default_factory=PhaseCost)
    bwd: PhaseCost = field(default_factory=PhaseCost)
    saved_bytes: int = 0  # activations autograd keeps for backward (new storages)
    saved_param_bytes: int = 0  # parameter storages saved through a view (weight.t()): resident anyway
    saved_buffer_bytes: int = 0  # buffer storages saved (RoPE tables): resident anyway
    input_bytes: int = 0  # bytes of the layer's input tensor: what a checkpointed block keeps

    @property
    def flops(self) -> float:
        return self.fwd.flops + self.bwd.flops


@dataclass
class WorkloadCensus:
    name: str
    micro_batch: int  # samples per forward on one rank
    tokens_per_sample: int  # timesteps (or tokens) per sample
    precision: str
    layers: list[LayerCensus]
    optimizer: PhaseCost
    optimizer_name: str
    optimizer_state_bytes: int
    param_count: int
    param_bytes: int
    buffer_bytes: int
    broadcast_buffer_bytes: int  # what DDP broadcasts before each forward (persistent buffers only)
    batch_bytes: int  # one micro-batch of inputs and targets
    flop_counter_total: int  # FlopCounterMode's own total, for the cross-check
    flop_counter_by_layer: dict[str, int]
    grad_clip: bool = True

    @property
    def flops(self) -> float:
        """Forward + backward FLOPs of one micro-batch (model FLOPs: no recompute)."""
        return sum(la.flops for la in self.layers)

    @property
    def saved_bytes(self) -> int:
        return sum(la.saved_bytes for la in self.layers)

    @property
    def trainer_saved_bytes(self) -> int:
        """What the trainer's `saved_activation_bytes` counts: the activations alone; parameter and buffer
        storages saved through views are not (stride.metrics.memory.SavedActivations)."""
        return sum(la.saved_bytes for la in self.layers)

    def blocks(self) -> list[LayerCensus]:
        return [la for la in self.layers if la.is_block]

    def layer(self, name: str) -> LayerCensus:
        for la in self.layers:
            if la.name == name:
                return la
        raise KeyError(name)

    def to_dict(self) -> dict:
        return {
            "name": self.name, "micro_batch": self.micro_batch, "tokens_per_sample": self.tokens_per_sample,
            "precision": self.precision, "params": self.param_count, "param_bytes": self.param_bytes,
            "flops_fwd_bwd": self.flops, "saved_activation_bytes": self.saved_bytes,
            "trainer_saved_activation_bytes": self.trainer_saved_bytes,
            "optimizer": self.optimizer_name, "optimizer_state_bytes": self.optimizer_state_bytes,
            "layers": [{
                "name": la.name, "params": la.params, "param_bytes": la.param_bytes, "block": la.is_block,
                "fwd_flops": la.fwd.flops, "bwd_flops": la.bwd.flops, "fwd_bytes": la.fwd.bytes,
                "bwd_bytes": la.bwd.bytes, "kernels": la.fwd.kernels + la.bwd.kernels,
                "saved_bytes": la.saved_bytes, "saved_param_bytes": la.saved_param_bytes,
                "saved_buffer_bytes": la.saved_buffer_bytes,
            } for la in self.layers],
        }

