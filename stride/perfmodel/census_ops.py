"""The dispatch-level recorder of an operator census: each kernel's FLOPs, bytes moved and kind, in order.

It sits below torch's FlopCounterMode (`census_step.py`), so it sees the same, possibly decomposed, kernels.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from stride.metrics.flops import CPU_FLOP_FORMULAS
from stride.perfmodel.census import OUTSIDE


def flop_mapping() -> dict:
    """torch's flop-counter gaps on CPU (flash SDPA, oneDNN RNN), filled in stride.metrics.flops."""
    return dict(CPU_FLOP_FORMULAS)


def op_kind(packet_name: str, flops: float) -> str:
    """gemm | attention | rnn | other: which efficiency a kernel's FLOPs run at."""
    if "attention" in packet_name:
        return "attention"
    if "rnn" in packet_name or "lstm" in packet_name or "gru" in packet_name:
        return "rnn"
    return "gemm" if flops > 0 else "other"


_FREE = {"detach", "alias", "lift_fresh", "_unsafe_view", "empty", "empty_like", "empty_strided", "new_empty",
         "new_empty_strided", "_to_copy_noop", "set_"}


def nbytes(x: Any) -> int:
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


class OpRecorder(TorchDispatchMode):
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
        read = sum(nbytes(t) for t in tree_leaves((args, kwargs)))
        written = 0
        for i, arg in enumerate(schema.arguments):
            if arg.alias_info is not None and arg.alias_info.is_write:
                val = args[i] if i < len(args) else kwargs.get(arg.name)
                written += sum(nbytes(t) for t in tree_leaves(val))
        rets = schema.returns
        outs = out if isinstance(out, tuple | list) and len(rets) > 1 else (out,)
        for ret, o in zip(rets, outs, strict=False):
            if ret.alias_info is None:
                written += sum(nbytes(t) for t in tree_leaves(o))
        kind = op_kind(name, flops)
        self.sink(self.where(), kind, float(flops), float(read + written),
                  kind == "attention" and _is_causal(args, kwargs))
        return out


def layer_key(parents: set[str], blocks_attr: str | None) -> str:
    """'Model.blocks.3.attn.wqkv' -> 'blocks.3'; 'Model.head' -> 'head'; nothing -> OUTSIDE."""
    names = [p.split(".", 1)[1] for p in parents if p != "Global" and "." in p]
    if not names:
        return OUTSIDE
    deepest = max(names, key=lambda n: n.count("."))
    parts = deepest.split(".")
    if blocks_attr and parts[0] == blocks_attr and len(parts) > 1:
        return f"{parts[0]}.{parts[1]}"
    return parts[0]


def storage_key(t: torch.Tensor) -> int:
    return t.untyped_storage()._cdata


