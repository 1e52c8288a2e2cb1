"""Trace any stride workload once, without running it: per-layer FLOPs, bytes moved, kernel count,
saved-for-backward bytes and parameters, and the optimizer step.

The model is built by `stride.models.registry` inside `FakeTensorMode` (tensors with meta storage
that report device=cpu), then one forward, loss, backward and two optimizer steps run on it.
Why fake CPU tensors rather than `torch.device("meta")`: on the meta device torch sends SDPA to
its math path (which saves the s x s scores) and nn.LSTM to a cell-by-cell decomposition, so the
FLOPs and the saved tensors differ from the real CPU run (measured: tiny transformer 350M FLOPs
on meta against 300M on CPU); fake CPU tensors take the CPU kernels (flash SDPA, oneDNN RNN) with
meta shapes, allocate nothing, and trace a 70B model as fast as a tiny one.

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
import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.flop_counter import FlopCounterMode

from stride.config.dtypes import PRECISION_DTYPES
from stride.config.errors import ConfigError
from stride.config.schema import RunConfig
from stride.parallel.data_parallel import persistent_buffers

PHASES = ("fwd", "bwd", "opt")
OUTSIDE = "(outside modules)"  # loss and glue ops not inside any child module


def flop_mapping() -> dict:
    """torch's flop-counter gaps on CPU (flash SDPA, oneDNN RNN), filled in stride.metrics.flops."""
    from stride.metrics.flops import CPU_FLOP_FORMULAS

    return dict(CPU_FLOP_FORMULAS)


def op_kind(packet_name: str, flops: float) -> str:
    """gemm | attention | rnn | other: which efficiency a kernel's FLOPs run at."""
    if "attention" in packet_name:
        return "attention"
    if "rnn" in packet_name or "lstm" in packet_name or "gru" in packet_name:
        return "rnn"
    return "gemm" if flops > 0 else "other"


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
class LayerTrace:
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
class WorkloadTrace:
    name: str
    micro_batch: int  # samples per forward on one rank
    tokens_per_sample: int  # timesteps (or tokens) per sample
    precision: str
    layers: list[LayerTrace]
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
        """What the trainer's `saved_activation_bytes` counts: activations, plus parameter and
        buffer storages saved through views (stride.metrics.memory.SavedActivations)."""
        return sum(la.saved_bytes + la.saved_param_bytes + la.saved_buffer_bytes for la in self.layers)

    def blocks(self) -> list[LayerTrace]:
        return [la for la in self.layers if la.is_block]

    def layer(self, name: str) -> LayerTrace:
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


# ---- the dispatch-level recorder ---------------------------------------------------------------

_FREE = {"detach", "alias", "lift_fresh", "_unsafe_view", "empty", "empty_like", "empty_strided", "new_empty",
         "new_empty_strided", "_to_copy_noop", "set_"}


def _nbytes(x: Any) -> int:
    return x.numel() * x.element_size() if isinstance(x, torch.Tensor) else 0


def _is_causal(args: tuple, kwargs: dict) -> bool:
    if "is_causal" in kwargs:
        return bool(kwargs["is_causal"])
    # flash_attention_for_cpu(query, key, value, dropout_p, is_causal, ...); its backward
    # (grad_out, query, key, value, out, logsumexp, dropout_p, is_causal, ...)
    for a in args:
        if isinstance(a, bool):
            return a
    return False


_RNN_LAYER = getattr(getattr(torch.ops.aten, "mkldnn_rnn_layer", None), "default", None)
_LAYER_NORM = torch.ops.aten.native_layer_norm.default
_RNN_WS: dict[tuple, int] = {}
_RNN_PROBE_LIMIT = 256 * 2**20  # probe the real kernel at up to this workspace size, then scale by batch


def onednn_rnn_workspace_bytes(args: tuple) -> int:
    """Bytes of the workspace oneDNN keeps for an LSTM/GRU layer's backward.

    oneDNN sizes it inside its primitive descriptor (gates and states per step, page-aligned
    sub-buffers), which torch's fake kernel cannot see: it returns an empty workspace. So the real
    kernel is asked, once per shape, on uninitialised CPU tensors; above `_RNN_PROBE_LIMIT` it runs
    at a smaller batch and the size is scaled (it is affine in batch: measured 252416 B per sample at
    T=64, H=64 for batch 8 and 64 alike)."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    inp, w_ih, w_hh = args[0], args[1], args[2]
    t, b, i = (inp.shape[1], inp.shape[0], inp.shape[2]) if args[14] else tuple(inp.shape)
    gates, h = w_ih.shape[0], args[10]
    key = (t, b, i, gates, h, *args[7:8], *args[9:10], *args[12:14])
    if key not in _RNN_WS:
        rough = 16 * t * b * max(i, h, gates) * 4
        probe_b = b if rough <= _RNN_PROBE_LIMIT else max(8, int(b * _RNN_PROBE_LIMIT / rough))
        with unset_fake_temporarily():  # (not under no_grad: it returns no workspace then)
            shape = (probe_b, t, i) if args[14] else (t, probe_b, i)
            real = [torch.empty(shape), torch.empty(w_ih.shape), torch.empty(w_hh.shape),
                    torch.empty(args[3].shape), torch.empty(args[4].shape),
                    torch.zeros(args[5].shape[:-2] + (probe_b, h)) if args[5].dim() > 2 else torch.zeros(probe_b, h),
                    torch.zeros(args[6].shape[:-2] + (probe_b, h)) if args[6].dim() > 2 else torch.zeros(probe_b, h)]
            out = torch.ops.aten.mkldnn_rnn_layer.default(*real, *args[7:])
            ws = out[3].numel() * out[3].element_size()
        _RNN_WS[key] = ws if probe_b == b else int(ws * b / probe_b)
    return _RNN_WS[key]


class _Recorder(TorchDispatchMode):
    """Sits below the flop counter: sees the same (possibly decomposed) kernels, in order."""

    def __init__(self, registry: dict, where: Callable[[], str], sink: Callable[[str, str, float, float, bool], None]):
        super().__init__()
        self.registry, self.where, self.sink = registry, where, sink

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if (func is _RNN_LAYER and len(args) == 16 and args[15]
                and isinstance(out[3], FakeTensor) and out[3].numel() == 0):
            ws = torch.empty(onednn_rnn_workspace_bytes(args), dtype=torch.uint8)  # a fake tensor here
            out = (*out[:3], ws)
        elif (func is _LAYER_NORM and isinstance(out[1], FakeTensor)
              and out[1].dtype in (torch.bfloat16, torch.float16)):
            # torch's meta kernel gives mean/rstd the input's 16-bit dtype; the CPU kernel keeps them
            # in fp32 (measured: the saved bytes differ by exactly that)
            out = (out[0], out[1].float(), out[2].float())
        packet = func._overloadpacket
        name = packet.__name__
        if (not isinstance(func, torch._ops.OpOverload) or func.is_view or name in _FREE
                or func.namespace == "prim"):  # prim.device etc.: metadata queries (fake mode asks many)
            return out
        schema = func._schema
        flops = self.registry[packet](*args, **kwargs, out_val=out) if packet in self.registry else 0
        read = sum(_nbytes(t) for t in tree_leaves((args, kwargs)))
        written = 0
        for i, arg in enumerate(schema.arguments):
            if arg.alias_info is not None and arg.alias_info.is_write:
                val = args[i] if i < len(args) else kwargs.get(arg.name)
                written += sum(_nbytes(t) for t in tree_leaves(val))
        rets = schema.returns
        outs = out if isinstance(out, tuple | list) and len(rets) > 1 else (out,)
        for ret, o in zip(rets, outs, strict=False):
            if ret.alias_info is None:
                written += sum(_nbytes(t) for t in tree_leaves(o))
        kind = op_kind(name, flops)
        self.sink(self.where(), kind, float(flops), float(read + written),
                  kind == "attention" and _is_causal(args, kwargs))
        return out


def _layer_key(parents: set[str], blocks_attr: str | None) -> str:
    """'Model.blocks.3.attn.wqkv' -> 'blocks.3'; 'Model.head' -> 'head'; nothing -> OUTSIDE."""
    names = [p.split(".", 1)[1] for p in parents if p != "Global" and "." in p]
    if not names:
        return OUTSIDE
    deepest = max(names, key=lambda n: n.count("."))
    parts = deepest.split(".")
    if blocks_attr and parts[0] == blocks_attr and len(parts) > 1:
        return f"{parts[0]}.{parts[1]}"
    return parts[0]


def _storage_key(t: torch.Tensor) -> int:
    return t.untyped_storage()._cdata


# ---- tracing -----------------------------------------------------------------------------------


@dataclass
class TraceInputs:
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


def trace(inp: TraceInputs, fake: bool = True) -> WorkloadTrace:
    """Run one training micro-step (forward, loss, backward) and two optimizer steps, recording
    everything listed in the module docstring. `fake=False` runs on real CPU tensors (tests)."""
    ctx = fake_mode() if fake else contextlib.nullcontext()
    with ctx, torch.random.fork_rng():
        return _trace(inp)


def _trace(inp: TraceInputs) -> WorkloadTrace:
    model = inp.build_model()
    if inp.checkpoint_blocks is not None:
        inp.checkpoint_blocks(model)
    loss_fn = inp.build_loss(model)
    blocks = getattr(model, "blocks", None)
    blocks_attr = "blocks" if isinstance(blocks, nn.ModuleList) else None
    layers: dict[str, LayerTrace] = {}

    def layer(name: str) -> LayerTrace:
        if name not in layers:
            layers[name] = LayerTrace(name, is_block=bool(blocks_attr) and name.startswith(blocks_attr + "."))
        return layers[name]

    for name, child in model.named_children():
        if name == blocks_attr:
            for i in range(len(child)):
                layer(f"{name}.{i}")
        else:
            layer(name)
    for pname, p in model.named_parameters():
        parts = pname.split(".")
        key = ".".join(parts[:2]) if parts[0] == blocks_attr else parts[0]
        layer(key).params += p.numel()
        layer(key).param_bytes += _nbytes(p)
    param_keys = {_storage_key(p) for p in model.parameters()}
    buffer_keys = {_storage_key(b) for b in model.buffers()}

    if blocks_attr:  # the input of each block: what a checkpointed block keeps for backward
        for i, blk in enumerate(blocks):
            def pre(mod, args, i=i):
                t = next((a for a in args if isinstance(a, torch.Tensor)), None)
                layer(f"{blocks_attr}.{i}").input_bytes = _nbytes(t)
            blk.register_forward_pre_hook(pre)

    mapping = flop_mapping()
    counter = FlopCounterMode(display=False, custom_mapping=mapping)
    phase = ["fwd"]
    opt_cost = PhaseCost()

    def where() -> str:
        return _layer_key(set(counter.mod_tracker.parents), blocks_attr)

    def sink(lname: str, kind: str, flops: float, nbytes: float, causal: bool) -> None:
        if phase[0] == "opt":
            opt_cost.add(kind, flops, nbytes, causal)
        else:
            getattr(layer(lname), phase[0]).add(kind, flops, nbytes, causal)

    seen: set[int] = set()

    def pack(t: torch.Tensor) -> torch.Tensor:
        # the trainer's rule (stride.metrics.memory.SavedActivations): skip nn.Parameter objects,
        # count every other storage once; here split by what the storage is
        if isinstance(t, torch.Tensor) and not isinstance(t, nn.Parameter):
            key = _storage_key(t)
            if key not in seen:
                seen.add(key)
                la, n = layer(where()), t.untyped_storage().nbytes()
                if key in param_keys:
                    la.saved_param_bytes += n
                elif key in buffer_keys:
                    la.saved_buffer_bytes += n
                else:
                    la.saved_bytes += n
        return t

    x, y = _make(inp.x_shape, inp.x_dtype), _make(inp.y_shape, inp.y_dtype)
    recorder = _Recorder(counter.flop_registry, where, sink)
    with recorder, counter:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), _autocast(inp.precision):
            loss = loss_fn(model(x), y)
        phase[0] = "bwd"
        loss.backward()
    fwd_bwd_total = counter.get_total_flops()
    by_module = counter.get_flop_counts()
    root = type(model).__name__
    counter_by_layer = {}
    for la in layers.values():
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

        opt_step()  # the first step allocates state; time the second
        phase[0] = "opt"
        with _Recorder(counter.flop_registry, lambda: OUTSIDE, sink):
            opt_step()
        opt_state = sum(_nbytes(v) for s in opt.state.values() for v in s.values())
    tokens = inp.x_shape[1] if len(inp.x_shape) >= 2 else 1
    return WorkloadTrace(
        name=inp.name, micro_batch=inp.x_shape[0], tokens_per_sample=tokens, precision=inp.precision,
        layers=list(layers.values()), optimizer=opt_cost, optimizer_name=inp.optimizer_name,
        optimizer_state_bytes=opt_state, param_count=sum(p.numel() for p in model.parameters()),
        param_bytes=sum(_nbytes(p) for p in model.parameters()),
        buffer_bytes=sum(_nbytes(b) for b in model.buffers()),
        broadcast_buffer_bytes=sum(_nbytes(b) for b in persistent_buffers(model).values()),
        batch_bytes=_nbytes(x) + _nbytes(y), flop_counter_total=int(fwd_bwd_total),
        flop_counter_by_layer=counter_by_layer, grad_clip=inp.grad_clip is not None,
    )


# ---- stride workloads --------------------------------------------------------------------------


def workload_trace_inputs(cfg: RunConfig, micro_batch: int | None = None, name: str = "",
                          checkpoint: str | None = None) -> TraceInputs:
    """TraceInputs of a stride run config: its model, loss, batch shapes, precision and optimizer.

    `micro_batch` defaults to the config's per-step micro-batch on one process
    (batch_size / grad_accum); `checkpoint` overrides `train.activation_checkpointing`."""
    from stride.data.build import build_data
    from stride.models.losses import make_loss
    from stride.models.registry import build_model
    from stride.optim.factory import build_optimizer
    from stride.train.apply import apply_activation_checkpointing

    t = cfg.train
    if t.kernels != "torch":
        raise ConfigError(f"`train.kernels` = {t.kernels!r}: tracing models the torch kernels only")
    bundle = build_data(cfg.data, t.batch_size)
    x0, y0 = next(iter(bundle.train))
    mb = micro_batch or max(1, t.batch_size // t.grad_accum)
    m = cfg.model

    def build() -> nn.Module:
        return build_model(m, bundle.n_features, bundle.seq_len, bundle.n_horizons)

    def loss(model: nn.Module):
        return getattr(model, "loss", None) or make_loss(m.loss, huber_delta=m.huber_delta, quantiles=m.quantiles)

    ac = t.activation_checkpointing if checkpoint is None else checkpoint
    return TraceInputs(
        name=name or m.name, build_model=build, build_loss=loss,
        x_shape=(mb, *x0.shape[1:]), x_dtype=x0.dtype, y_shape=(mb, *y0.shape[1:]), y_dtype=y0.dtype,
        precision=t.precision, build_optimizer=lambda ps: build_optimizer(ps, cfg.optim),
        optimizer_name=f"{cfg.optim.name}:{cfg.optim.impl}", grad_clip=t.grad_clip,
        checkpoint_blocks=None if ac == "none" else (lambda mod: apply_activation_checkpointing(mod, ac, t.ac_every)),
    )


_CACHE: dict[tuple, WorkloadTrace] = {}


def trace_workload(cfg: RunConfig, micro_batch: int | None = None, name: str = "") -> WorkloadTrace:
    """Trace a run config (cached by config hash and micro-batch): ~0.2-2 s per new size."""
    from stride.config import config_hash

    key = (config_hash(cfg), micro_batch, name)
    if key not in _CACHE:
        # activation checkpointing is a layout choice the cost model prices from the plain trace
        _CACHE[key] = trace(workload_trace_inputs(cfg, micro_batch, name, checkpoint="none"))
    return _CACHE[key]
