"""One-device cost of the attention projection layout that tensor parallelism needs.

Head-parallel TP needs each rank to hold whole heads of q, k and v. Two layouts give that: three
projections `wq`, `wk`, `wv` (stride's model: three GEMMs forward, three weight-gradient and three
input-gradient GEMMs summed in backward), or one fused weight whose rows are grouped by head
(Megatron's layout: one GEMM each way, and its backward gathers the q, k, v gradients into one
buffer). stride's previous layout, one fused weight with rows [q; k; v] (not splittable by heads),
is timed as well.

All variants compute the same function (weights copied from one model; checked before timing).
A step is forward, backward and AdamW on one batch. The variants take turns step by step (the
order rotating each round), so load from other processes hits them alike; the figures are the
median step and the median of the paired ratios, on wall time and on this thread's CPU time (with
one intra-op thread the step runs on this thread, and its CPU time is far less disturbed by other
processes on a shared machine). The load average is recorded.

    .venv/bin/python benchmarks/attention_layout.py [--sizes tiny small] [--steps 40] [--json]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import time

import torch
import torch.nn.functional as F
from torch import nn

from stride.config import load_config
from stride.data.build import build_data
from stride.models.registry import build_model
from stride.models.transformer.layers import Attention, apply_rope


class FusedAttention(nn.Module):
    """One fused projection `wqkv`, its rows [q; k; v] (`by_head=False`, stride's layout before
    head-parallel TP) or grouped by head, [q_0 k_0 v_0 | q_1 k_1 v_1 | ...] (`by_head=True`,
    Megatron's layout, which a contiguous row split hands out in whole heads)."""

    def __init__(self, src: Attention, by_head: bool) -> None:
        super().__init__()
        self.head_dim, self.causal, self.by_head = src.head_dim, src.causal, by_head
        d = src.wo.in_features
        w = torch.stack([src.wq.weight, src.wk.weight, src.wv.weight]).detach()  # [3, d, d]
        if by_head:
            w = w.view(3, -1, self.head_dim, d).transpose(0, 1)  # [heads, 3, head_dim, d]
        self.wqkv = nn.Linear(d, 3 * d, bias=False)
        self.wqkv.weight.data.copy_(w.reshape(3 * d, d))
        self.wo = copy.deepcopy(src.wo)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        qkv = self.wqkv(x)
        if self.by_head:
            q, k, v = qkv.view(b, t, -1, 3, self.head_dim).permute(3, 0, 2, 1, 4)
        else:
            q, k, v = qkv.view(b, t, 3, -1, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        return self.wo(y.transpose(1, 2).reshape(b, t, -1))


def variants(model: nn.Module) -> dict[str, nn.Module]:
    """The same function in three layouts; `separate` is stride's model as it is."""
    out = {"separate": model}
    for name, by_head in (("fused_heads", True), ("fused_qkv_rows", False)):
        m = copy.deepcopy(model)
        for blk in m.blocks:
            blk.attn = FusedAttention(blk.attn, by_head)
        out[name] = m
    return out


def one_step(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    """(wall, CPU) seconds of one training step. With one intra-op thread the step runs on this
    thread, so its CPU time barely moves when other processes compete for the cores."""
    w0, c0 = time.perf_counter(), time.thread_time()
    loss = F.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return time.perf_counter() - w0, time.thread_time() - c0


def measure(size: str, steps: int, batch: int) -> dict:
    cfg = load_config(overrides=[f"model.size='{size}'", f"train.batch_size={batch}"])
    data = build_data(cfg.data, batch)
    x, y = next(iter(data.train))
    torch.manual_seed(0)
    models = variants(build_model(cfg.model, data.n_features, data.seq_len, data.n_horizons))
    with torch.no_grad():
        ref = models["separate"](x)
        for name, m in models.items():
            err = float((m(x) - ref).abs().max())
            if err > 1e-5:
                raise AssertionError(f"{size}/{name} computes a different function (max diff {err})")
    opts = {k: torch.optim.AdamW(m.parameters(), lr=1e-4) for k, m in models.items()}
    names = list(models)
    wall: dict[str, list[float]] = {k: [] for k in names}
    cpu: dict[str, list[float]] = {k: [] for k in names}
    # Alternate step by step (rotating the order) so every variant sees the same machine load.
    for i in range(steps + 2):
        for k in names[i % len(names):] + names[: i % len(names)]:
            w, c = one_step(models[k], opts[k], x, y)
            if i >= 2:  # two warm-up rounds
                wall[k].append(w)
                cpu[k].append(c)
    out: dict = {}
    for k in names:
        out[f"{size}_{k}_ms"] = round(statistics.median(wall[k]) * 1e3, 2)
        out[f"{size}_{k}_cpu_ms"] = round(statistics.median(cpu[k]) * 1e3, 2)
    for k in ("fused_heads", "fused_qkv_rows"):
        # median of the paired (same round) ratios separate / fused, on CPU time and on wall time
        out[f"{size}_separate_over_{k}_cpu"] = round(
            statistics.median(a / b for a, b in zip(cpu["separate"], cpu[k], strict=True)), 4)
        out[f"{size}_separate_over_{k}_wall"] = round(
            statistics.median(a / b for a, b in zip(wall["separate"], wall[k], strict=True)), 4)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", nargs="+", default=["tiny", "small"])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    result: dict = {"threads": args.threads, "batch": args.batch, "load_avg_before": round(os.getloadavg()[0], 2)}
    for size in args.sizes:
        res = measure(size, args.steps, args.batch)
        result.update(res)
        print(f"{size}: median step ms (wall / CPU) "
              + ", ".join(f"{k} {res[f'{size}_{k}_ms']} / {res[f'{size}_{k}_cpu_ms']}"
                          for k in ("separate", "fused_heads", "fused_qkv_rows"))
              + "; paired ratios (CPU time, wall time): " + ", ".join(
                  f"separate / {k} {res[f'{size}_separate_over_{k}_cpu']}, {res[f'{size}_separate_over_{k}_wall']}"
                  for k in ("fused_heads", "fused_qkv_rows")))
    result["load_avg_after"] = round(os.getloadavg()[0], 2)
    print(f"load average {result['load_avg_before']} before, {result['load_avg_after']} after")
    if args.json:
        print(json.dumps(result))


if __name__ == "__main__":
    main()
