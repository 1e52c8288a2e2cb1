"""nn.LSTM for a pack of models: the gates of all N models in one batched matmul per time step.

`vmap` cannot go into nn.LSTM (its fused CPU/cuDNN kernels have no batching rule; functorch falls back
to a per-model loop). `GroupedLSTM` is the grouped form: per time step one `baddbmm` computes the gates
of every model of the pack, and the backward pass (written out, not recorded op by op, so a step costs
about six kernel launches instead of autograd's ~30) does the same in reverse. `VmapLSTM` is a drop-in
for a single-layer, batch-first nn.LSTM inside a `vmap(functional_call)` model: it keeps nn.LSTM's
parameter names (weight_ih_l0, ...), so stacked state dicts load unchanged, and its vmap rule hands the
whole pack to `GroupedLSTM`.

Gate order and equations are nn.LSTM's (i, f, g, o; c' = f c + i g, h' = o tanh c'), with zero initial
state. The recurrence runs in float32 (or float64 when the inputs are) even under autocast.

Where the grouped form loses: on a CPU the fused oneDNN LSTM kernel is compute-bound already at the
workloads' sizes and runs the whole recurrence in C++, so the grouped form's per-step launches and its
N-times larger working set (out of L2 at N=16) made it 2.5x slower per model (one layer, hidden 64, batch
64, 64 steps, forward + backward, 1 thread, AMD EPYC: 0.99-1.07 s grouped against 0.41 s for 16 fused calls,
two alternations). `LSTM_MODE["mode"] = "auto"` therefore runs the pack's LSTMs as one fused kernel call per
model on CPU (`FusedPerModelLSTM`; the packed rest of the model stays packed), the calls spread over
single-threaded lanes, one per intra-op thread (stride.sweep.model_lanes), and the grouped form on GPUs, where
a per-step launch of the whole pack is what removes the launch-bound time (not measured yet:
benchmarks/sweep_packing.py --device cuda --lstm-mode grouped|per_model compares the two).
"""

from __future__ import annotations

import threading

import torch
from torch import nn

from stride.sweep.model_lanes import per_model
from stride.sweep.vmap_ops import PackOnly, stacked


def _forward(x: torch.Tensor, w_ih: torch.Tensor, w_hh: torch.Tensor, bias: torch.Tensor):
    """x [N, B, T, I]; returns (h [T+1, N, B, H] with h[0] = 0, activated gates [T, N, B, 4H], c, tanh c)."""
    n, b, t, i = x.shape
    hid = w_hh.shape[-1]
    # every time step's input projection in one matmul per model, laid out [T, N, B, 4H] so each step reads a block
    xp = torch.baddbmm(bias.unsqueeze(1), x.reshape(n, b * t, i), w_ih.transpose(1, 2))
    xp = xp.view(n, b, t, -1).permute(2, 0, 1, 3).contiguous()
    whh_t = w_hh.transpose(1, 2)
    hs = x.new_zeros(t + 1, n, b, hid)
    cs = x.new_zeros(t + 1, n, b, hid)
    gates = torch.empty_like(xp)
    tcs = torch.empty(t, n, b, hid, dtype=x.dtype, device=x.device)
    for s in range(t):
        g = torch.baddbmm(xp[s], hs[s], whh_t)
        a = gates[s]
        torch.sigmoid(g, out=a)
        torch.tanh(g[..., 2 * hid : 3 * hid], out=a[..., 2 * hid : 3 * hid])
        ig, fg, gg, og = a.split(hid, -1)
        c = cs[s + 1]
        torch.mul(fg, cs[s], out=c)
        c.addcmul_(ig, gg)
        torch.tanh(c, out=tcs[s])
        torch.mul(og, tcs[s], out=hs[s + 1])
    return hs, gates, cs, tcs


class GroupedLSTM(torch.autograd.Function):
    """Single-layer LSTM over a pack: x [N, B, T, I], weights [N, 4H, I] / [N, 4H, H], biases [N, 4H]."""

    @staticmethod
    def forward(ctx, x, w_ih, w_hh, b_ih, b_hh):  # type: ignore[override]
        hs, gates, cs, tcs = _forward(x, w_ih, w_hh, b_ih + b_hh)
        ctx.save_for_backward(x, w_ih, w_hh, hs, gates, cs, tcs)
        return hs[1:].permute(1, 2, 0, 3).contiguous()  # [N, B, T, H]

    @staticmethod
    def backward(ctx, dy):  # type: ignore[override]
        x, w_ih, w_hh, hs, gates, cs, tcs = ctx.saved_tensors
        t, n, b, h4 = gates.shape
        hid = h4 // 4
        ig, fg, gg, og = gates.split(hid, -1)
        # per-step factors computed for all steps at once, so the loop below is six launches a step
        deriv = gates * (1 - gates)  # sigmoid' for i, f, o
        deriv[..., 2 * hid : 3 * hid] = 1 - gg * gg  # tanh' for g
        k_c = og * (1 - tcs * tcs)  # dc += dh * o * (1 - tanh(c)^2)
        p3 = torch.cat([gg, cs[:-1], ig], -1).mul_(deriv[..., : 3 * hid])  # dc -> pre-activations of i, f, g
        q_o = tcs * deriv[..., 3 * hid :]  # dh -> pre-activation of o
        dyt = dy.permute(2, 0, 1, 3)
        dg = torch.empty_like(gates)
        dh = torch.zeros(n, b, hid, dtype=dy.dtype, device=dy.device)
        dc = torch.zeros_like(dh)
        for s in range(t - 1, -1, -1):
            dht = dyt[s] + dh
            dc.addcmul_(dht, k_c[s])
            d = dg[s]
            torch.mul(dc.unsqueeze(-2), p3[s].view(n, b, 3, hid), out=d[..., : 3 * hid].view(n, b, 3, hid))
            torch.mul(dht, q_o[s], out=d[..., 3 * hid :])
            dc.mul_(fg[s])
            dh = torch.bmm(d, w_hh)
        # weight and input gradients over all steps in one matmul each
        dgn = dg.permute(1, 0, 2, 3).reshape(n, t * b, h4)
        xin = x.permute(0, 2, 1, 3).reshape(n, t * b, -1)
        hprev = hs[:-1].permute(1, 0, 2, 3).reshape(n, t * b, hid)
        dgt = dgn.transpose(1, 2)
        d_wih = torch.bmm(dgt, xin)
        d_whh = torch.bmm(dgt, hprev)
        d_b = dgn.sum(1)
        dx = torch.bmm(dgn, w_ih).view(n, t, b, -1).permute(0, 2, 1, 3)
        return dx, d_wih, d_whh, d_b, d_b.clone()


class _PerModelLSTM(PackOnly):
    """One model's LSTM call inside `vmap`: the vmap rule runs the whole pack through GroupedLSTM."""

    @staticmethod
    def vmap(info, in_dims, x, w_ih, w_hh, b_ih, b_hh):  # type: ignore[override]
        args = (x, w_ih, w_hh, b_ih, b_hh)
        x, w_ih, w_hh, b_ih, b_hh = (stacked(t, d, info.batch_size) for t, d in zip(args, in_dims, strict=True))
        if lstm_mode(x.device) == "per_model":
            return FusedPerModelLSTM.apply(x, w_ih, w_hh, b_ih, b_hh), 0
        compute = torch.float64 if x.dtype == torch.float64 else torch.float32
        with torch.autocast(x.device.type, enabled=False):
            out = GroupedLSTM.apply(*(t.to(compute) for t in (x, w_ih, w_hh, b_ih, b_hh)))
        return out.to(x.dtype), 0


LSTM_MODE = {"mode": "auto"}  # auto | grouped | per_model (tests and the benchmark set it)


def lstm_mode(device: torch.device) -> str:
    mode = LSTM_MODE["mode"]
    if mode == "auto":
        return "grouped" if device.type == "cuda" else "per_model"
    return mode


def _fused_lstm(x, w_ih, w_hh, b_ih, b_hh) -> torch.Tensor:
    """One model's LSTM through torch's own fused kernel (oneDNN on CPU), as nn.LSTM calls it; no module, so
    that threads can run models side by side."""
    z = x.new_zeros(1, x.shape[0], w_hh.shape[1])  # nn.LSTM's zero state, in the input's dtype
    return torch._VF.lstm(x, (z, z), [w_ih, w_hh, b_ih, b_hh], True, 1, 0.0, True, False, True)[0]


class FusedPerModelLSTM(torch.autograd.Function):
    """The pack's LSTMs as one fused-kernel call per model (x [N, B, T, I], weights [N, ...]), the models spread
    over CPU threads that each run one model at a time single-threaded (stride.sweep.model_lanes: no OpenMP
    barrier per time step). Each model's call is recorded by autograd on its own; backward runs each model's
    recorded backward, spread the same way. Each lane also copies its model's output and gradients into the
    pack's tensors (a stack after the lanes would copy them again, on every thread, at a barrier per op)."""

    @staticmethod
    def forward(ctx, *ins):  # type: ignore[override]
        needs = ctx.needs_input_grad
        n, dev = ins[0].shape[0], ins[0].device
        cast = torch.get_autocast_dtype(dev.type) if torch.is_autocast_enabled(dev.type) else None
        lock, out = threading.Lock(), []

        def run(i: int) -> tuple[list[torch.Tensor], torch.Tensor]:
            leaves = [t[i].detach().requires_grad_(need) for t, need in zip(ins, needs, strict=True)]
            with torch.enable_grad(), torch.autocast(dev.type, dtype=cast, enabled=cast is not None):
                y = _fused_lstm(*leaves)
            with lock:
                if not out:
                    out.append(y.new_empty((n, *y.shape)))
            out[0][i].copy_(y.detach())
            return leaves, y

        ctx.graphs = per_model(run, n, dev)
        return out[0]

    @staticmethod
    def backward(ctx, dy):  # type: ignore[override]
        needs = ctx.needs_input_grad
        n = dy.shape[0]
        firsts = ctx.graphs[0][0]
        grads = [t.new_empty((n, *t.shape)) if need else None for t, need in zip(firsts, needs, strict=True)]

        def run(i: int) -> None:
            leaves, y = ctx.graphs[i]
            wanted = [j for j, need in enumerate(needs) if need]
            for j, g in zip(wanted, torch.autograd.grad(y, [leaves[j] for j in wanted], dy[i]), strict=True):
                grads[j][i].copy_(g)

        per_model(run, n, dy.device)
        return tuple(grads)


class VmapLSTM(nn.Module):
    """Stand-in for `nn.LSTM(i, h, batch_first=True)` (one layer, one direction) in a packed model."""

    def __init__(self, lstm: nn.LSTM) -> None:
        super().__init__()
        if lstm.num_layers != 1 or lstm.bidirectional or not lstm.batch_first or lstm.proj_size or not lstm.bias:
            raise ValueError(
                "packed training groups single-layer, one-direction, batch_first nn.LSTMs with biases; this one has "
                f"num_layers={lstm.num_layers}, bidirectional={lstm.bidirectional}, batch_first={lstm.batch_first}, "
                f"proj_size={lstm.proj_size}, bias={lstm.bias}"
            )
        for name in ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"):
            setattr(self, name, getattr(lstm, name))

    def forward(self, x: torch.Tensor, state: object = None) -> tuple[torch.Tensor, None]:
        if state is not None:
            raise ValueError("VmapLSTM starts from a zero state; an initial (h, c) is not supported")
        return _PerModelLSTM.apply(x, self.weight_ih_l0, self.weight_hh_l0, self.bias_ih_l0, self.bias_hh_l0), None


def swap_lstms(model: nn.Module) -> int:
    """Replace every nn.LSTM in `model` by a VmapLSTM (same parameters); returns how many."""
    n = 0
    for name, child in list(model.named_children()):
        if isinstance(child, nn.LSTM):
            setattr(model, name, VmapLSTM(child))
            n += 1
        else:
            n += swap_lstms(child)
    return n
