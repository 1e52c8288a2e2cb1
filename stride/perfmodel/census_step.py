"""An operator census of one training step, taken on fake tensors without running it: per-layer FLOPs,
bytes moved, kernel count, saved-for-backward bytes and parameters, and the optimizer step. (Not a
profiler trace: nothing is timed; the cost model turns the census into time.)

The model is built by `stride.models.registry` inside `FakeTensorMode` (tensors with meta storage
that report device=cpu), then one forward, loss, backward and two optimizer steps run on it.
Why fake CPU tensors rather than `torch.device("meta")`: on the meta device torch sends SDPA to
its math path (which saves the s x s scores) and nn.LSTM to a cell-by-cell decomposition, so the
FLOPs and the saved tensors differ from the real CPU run (measured: tiny transformer 350M FLOPs
on meta against 300M on CPU); fake CPU tensors take the CPU kernels (flash SDPA, oneDNN RNN) with
meta shapes, allocate nothing, and take a 70B model's census as fast as a tiny one's.

What is counted, with torch's own tools:
- FLOPs: `torch.utils.flop_counter.FlopCounterMode` (its registry, plus stride.metrics.flops'
  oneDNN RNN formulas and, below, the CPU flash-attention ops torch has no entry for);
- per operator, a dispatch mode below the flop counter records its FLOPs (same registry), the
  bytes it reads and writes (tensor arguments, written arguments again, fresh outputs; views are
  free) and its layer (torch.utils.module_tracker, also in backward);
- saved-for-backward bytes: `saved_tensors_hooks`, deduplicated by storage as the trainer's
  `SavedActivations` does, split into activations, parameter storages saved through a view
  (`weight.t()` in linear: resident anyway) and buffers (RoPE tables);
- the optimizer: stride's own optimizer on the fake parameters, grad clipping, and the second
  step (the first allocates state), so its kernels, bytes and state bytes are the real ones.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils.flop_counter import FlopCounterMode

from stride.config.dtypes import PRECISION_DTYPES
from stride.models.plan import blocks_of, plan_of
from stride.parallel.data_parallel import persistent_buffers
from stride.perfmodel.census import OUTSIDE, LayerCensus, PhaseCost, WorkloadCensus
from stride.perfmodel.census_ops import OpRecorder, flop_mapping, layer_key, nbytes, storage_key


@dataclass
class CensusInputs:
    """What tracing needs: a model builder, loss builder, input/target shapes, precision, optimizer."""

    name: str
    build_model: Callable[[], nn.Module]
    build_loss: Callable[[nn.Module], Callable[[torch.Tensor, torch.Tensor], torch.Tensor]]
    x_shape: tuple[int, ...]
    x_dtype: torch.dtype
    y_shape: tuple[int, ...]
    y_dtype: torch.dtype
    precision: str = "fp32"
    build_optimizer: Callable[[list[nn.Parameter]], torch.optim.Optimizer] | None = None
    optimizer_name: str = "adamw"
    grad_clip: float | None = 1.0
    checkpoint_blocks: Callable[[nn.Module], Any] | None = None  # applies AC from outside, as the trainer


def _autocast(precision: str):
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast("cpu", dtype=PRECISION_DTYPES[precision])


def _make(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype) if dtype.is_floating_point else torch.zeros(shape, dtype=dtype)


@contextlib.contextmanager
def fake_mode() -> Iterator[FakeTensorMode]:
    with FakeTensorMode(allow_non_fake_inputs=False) as mode:
        yield mode


def take_census(inp: CensusInputs, fake: bool = True) -> WorkloadCensus:
    """Run one training micro-step (forward, loss, backward) and two optimizer steps, recording
    everything listed in the module docstring. `fake=False` runs on real CPU tensors (tests)."""
    ctx = fake_mode() if fake else contextlib.nullcontext()
    with ctx, torch.random.fork_rng():
        return _census(inp)


class _Layers:
    """The census's layers: each block (`blocks.i`), each other top-level child, and OUTSIDE; with
    their parameters, and the saved-for-backward bytes the `pack` hook attributes to them."""

    def __init__(self, model: nn.Module, blocks_attr: str | None) -> None:
        self.blocks_attr = blocks_attr
        self.by_name: dict[str, LayerCensus] = {}
        for name, child in model.named_children():
            if name == blocks_attr:
                for i in range(len(child)):
                    self[f"{name}.{i}"]
            else:
                self[name]
        for pname, p in model.named_parameters():
            parts = pname.split(".")
            la = self[".".join(parts[:2]) if parts[0] == blocks_attr else parts[0]]
            la.params += p.numel()
            la.param_bytes += nbytes(p)
        self.param_keys = {storage_key(p) for p in model.parameters()}
        self.buffer_keys = {storage_key(b) for b in model.buffers()}
        self.seen: set[int] = set()
        self.where: Callable[[], str] = lambda: OUTSIDE

    def __getitem__(self, name: str) -> LayerCensus:
        if name not in self.by_name:
            is_block = bool(self.blocks_attr) and name.startswith(f"{self.blocks_attr}.")
            self.by_name[name] = LayerCensus(name, is_block=is_block)
        return self.by_name[name]

    def pack(self, t: torch.Tensor) -> torch.Tensor:
        """saved_tensors_hooks pack: every storage once, split by what it is; the trainer's rule
        (stride.metrics.memory.SavedActivations) counts the activations alone (`saved_bytes` here)."""
        if isinstance(t, torch.Tensor) and not isinstance(t, nn.Parameter):
            key = storage_key(t)
            if key not in self.seen:
                self.seen.add(key)
                la, n = self[self.where()], t.untyped_storage().nbytes()
                if key in self.param_keys:
                    la.saved_param_bytes += n
                elif key in self.buffer_keys:
                    la.saved_buffer_bytes += n
                else:
                    la.saved_bytes += n
        return t


def _census(inp: CensusInputs) -> WorkloadCensus:
    model = inp.build_model()
    if inp.checkpoint_blocks is not None:
        inp.checkpoint_blocks(model)
    loss_fn = inp.build_loss(model)
    blocks = blocks_of(model)
    blocks_attr = plan_of(model).blocks if blocks is not None else None
    layers = _Layers(model, blocks_attr)
    for i, blk in enumerate(blocks or ()):  # the input of each block: what a checkpointed block keeps for backward
        def pre(mod, args, i=i):
            t = next((a for a in args if isinstance(a, torch.Tensor)), None)
            layers[f"{blocks_attr}.{i}"].input_bytes = nbytes(t)
        blk.register_forward_pre_hook(pre)

    counter = FlopCounterMode(display=False, custom_mapping=flop_mapping())
    layers.where = lambda: layer_key(set(counter.mod_tracker.parents), blocks_attr)
    phase = ["fwd"]
    opt_cost = PhaseCost()

    def sink(lname: str, kind: str, flops: float, n_bytes: float, causal: bool) -> None:
        if phase[0] == "opt":
            opt_cost.add(kind, flops, n_bytes, causal)
        else:
            getattr(layers[lname], phase[0]).add(kind, flops, n_bytes, causal)

    x, y = _make(inp.x_shape, inp.x_dtype), _make(inp.y_shape, inp.y_dtype)
    with OpRecorder(counter.flop_registry, layers.where, sink), counter:
        with torch.autograd.graph.saved_tensors_hooks(layers.pack, lambda t: t), _autocast(inp.precision):
            loss = loss_fn(model(x), y)
        phase[0] = "bwd"
        loss.backward()
    by_module = counter.get_flop_counts()
    root = type(model).__name__
    counter_by_layer = {}
    for la in layers.by_name.values():
        counts = by_module.get(f"{root}.{la.name}")
        counter_by_layer[la.name] = int(sum(counts.values())) if counts else 0

    opt_state = 0
    if inp.build_optimizer is not None:
        params = [p for p in model.parameters() if p.requires_grad]
        opt = inp.build_optimizer(params)

        def opt_step() -> None:
            if inp.grad_clip is not None:
                torch.nn.utils.clip_grad_norm_(params, inp.grad_clip, foreach=True)
            opt.step()

        opt_step()  # the first step allocates state; count the second
        phase[0] = "opt"
        with OpRecorder(counter.flop_registry, lambda: OUTSIDE, sink):
            opt_step()
        opt_state = sum(nbytes(v) for s in opt.state.values() for v in s.values())
    tokens = inp.x_shape[1] if len(inp.x_shape) >= 2 else 1
    return WorkloadCensus(
        name=inp.name, micro_batch=inp.x_shape[0], tokens_per_sample=tokens, precision=inp.precision,
        layers=list(layers.by_name.values()), optimizer=opt_cost, optimizer_name=inp.optimizer_name,
        optimizer_state_bytes=opt_state, param_count=sum(p.numel() for p in model.parameters()),
        param_bytes=sum(nbytes(p) for p in model.parameters()),
        buffer_bytes=sum(nbytes(b) for b in model.buffers()),
        broadcast_buffer_bytes=sum(nbytes(b) for b in persistent_buffers(model).values()),
        batch_bytes=nbytes(x) + nbytes(y), flop_counter_total=int(counter.get_total_flops()),
        flop_counter_by_layer=counter_by_layer, grad_clip=inp.grad_clip is not None,
    )
