"""Fused attention as the published kernels run it: achieved TFLOP/s by kernel, part, sequence
length and head dimension, forward and backward apart where the figures give them.

Every figure counts the FLOPs of the causal half of the score square (backward = 2.5 x forward)
at batch x seq = 16k tokens, 2048 wide (heads = 2048 / head_dim), fp16/bf16, for seq 512..16k:
- Dao-AILab/flash-attention `assets/flash2_a100_fwd_bwd_benchmark.png` (commit 0251105a, the
  FlashAttention-2 paper's figure; README.md:507): forward + backward on A100 80GB SXM4, causal,
  head dim 64 (c) and 128 (d): FlashAttention-2, FlashAttention (v1), the FlashAttention Triton
  kernel, xformers;
- `assets/flash2_h100_fwd_bwd_benchmark.png` (README.md:520): the same on H100 SXM5 (FA2, FA1);
- `assets/flash3_fp16_fwd.png` (README.md:37, the FlashAttention-3 paper's figure): forward only on
  H100 SXM5, causal, head dim 64 / 128 / 256: FA2, cuDNN, FlashAttention-3.
Where a kernel has forward and forward + backward figures (FA2 on H100), backward is what the pair
implies: t_fb = 3.5 F / c = F / fwd + 2.5 F / bwd. Where only forward is published (FA3, cuDNN),
backward is assumed to keep FA2's backward/forward ratio on the same part (0.81 at 512 to 0.97 at
16k for head dim 128); where only forward + backward is (A100), both directions use it.

Other parts scale the reference part's curve by their matmul throughput (MAMF, hardware.py): an
sm80-style kernel gains on H100 what FA2 gains (the FlashAttention Triton kernel and FA1 have H100
figures only through that), Blackwell runs cuDNN/FA at Hopper's fraction of its MAMF, AMD's CK flash
attention at FA2-on-A100's. Beyond 16k the curve stays flat (the figures saturate); below 512 it
keeps the 512 value. The efficiency factor `flash` multiplies every curve (1.0: as published).

Which kernel a run uses follows its framework and part unless the row names one (kernel_from_text):
PyTorch SDPA's flash backend is FlashAttention-2 (torch.nn.functional.scaled_dot_product_attention
docs); Transformer Engine (Megatron-Core, NeMo, MaxText on GPU `attention=cudnn_flash_te`) runs
cuDNN fused attention on Hopper and Blackwell and FlashAttention-2 on Ampere; llm-foundry's MPT
benchmarks ran `attn_impl: triton` (mosaicml/llm-foundry scripts/train/benchmarking/
submit_benchmarks.py:144 default, not overridden by sweep.sh; commit 5e85bd62d).
"""

from __future__ import annotations

import math
import re
from functools import lru_cache

from stride.perfmodel.hardware import Hardware

SEQ = (512, 1024, 2048, 4096, 8192, 16384)
KERNELS = ("fa2", "fa3", "fa1", "triton", "cudnn", "xformers")

# (kernel, reference part) -> {"fb" | "fwd": {head_dim: TFLOP/s at SEQ}}
_CURVES: dict[tuple[str, str], dict[str, dict[int, tuple[float, ...]]]] = {
    ("fa2", "a100"): {"fb": {64: (88, 119, 140, 156, 165, 171), 128: (99, 133, 155, 173, 182, 189)}},
    ("fa1", "a100"): {"fb": {64: (58, 70, 77, 87, 92, 97), 128: (55, 62, 69, 76, 80, 83)}},
    ("triton", "a100"): {"fb": {64: (59, 75, 79, 76, 79, 80), 128: (50, 61, 68, 74, 78, 80)}},
    ("xformers", "a100"): {"fb": {64: (51, 60, 66, 68, 69, 67), 128: (58, 72, 82, 87, 91, 92)}},
    ("fa2", "h100"): {"fb": {64: (141, 192, 232, 257, 273, 284), 128: (163, 221, 265, 294, 308, 328)},
                      "fwd": {64: (180, 229, 262, 284, 295, 299), 128: (191, 260, 298, 319, 333, 335),
                              256: (208, 251, 278, 293, 297, 298)}},
    ("fa1", "h100"): {"fb": {64: (104, 123, 136, 138, 149, 156), 128: (98, 109, 108, 126, 135, 137)}},
    ("fa3", "h100"): {"fwd": {64: (197, 265, 371, 420, 460, 473), 128: (292, 423, 521, 579, 602, 616),
                              256: (286, 427, 537, 612, 628, 642)}},
    ("cudnn", "h100"): {"fwd": {64: (225, 288, 334, 363, 379, 388), 128: (315, 410, 484, 518, 529, 539),
                                256: (308, 391, 450, 483, 497, 509)}},
}
# the parts the figures were measured on, by catalog generation
_REFERENCE = {"ampere": "a100", "hopper": "h100"}
_REF_MAMF_BF16 = {"a100": 271.2, "h100": 794.5}  # hardware.toml mamf_tflops of the reference parts
_HOPPER_ONLY = ("fa3",)


def _interp(xs: tuple[float, ...], ys: tuple[float, ...], x: float) -> float:
    """Piecewise linear in log x, flat outside the measured range."""
    lx = [math.log(v) for v in xs]
    t = math.log(max(xs[0], min(xs[-1], x)))
    for i in range(len(lx) - 1):
        if t <= lx[i + 1]:
            w = (t - lx[i]) / (lx[i + 1] - lx[i])
            return ys[i] + w * (ys[i + 1] - ys[i])
    return ys[-1]


def _at(table: dict[int, tuple[float, ...]], seq: int, head_dim: int) -> float:
    dims = sorted(table)
    by_dim = [_interp(SEQ, tuple(float(v) for v in table[d]), seq) for d in dims]
    if len(dims) == 1:
        return by_dim[0]
    return _interp(tuple(float(d) for d in dims), tuple(by_dim), head_dim)


@lru_cache(maxsize=4096)
def _curve(kernel: str, ref: str, seq: int, head_dim: int) -> tuple[float, float] | None:
    """(forward, backward) TFLOP/s of `kernel` on reference part `ref`, or None without figures."""
    data = _CURVES.get((kernel, ref))
    if data is None and ref == "h100" and (kernel, "a100") in _CURVES:
        # an sm80-style kernel on Hopper gains what FA2 gains there (legacy MMA path on both)
        base = _curve(kernel, "a100", seq, head_dim)
        a, h = _curve("fa2", "a100", seq, head_dim), _curve("fa2", "h100", seq, head_dim)
        if base is None or a is None or h is None:
            return None
        return base[0] * h[0] / a[0], base[1] * h[1] / a[1]
    if data is None:
        return None
    if "fwd" in data and "fb" in data:
        fwd, fb = _at(data["fwd"], seq, head_dim), _at(data["fb"], seq, head_dim)
        return fwd, 2.5 / max(3.5 / fb - 1.0 / fwd, 1e-9)
    if "fb" in data:
        fb = _at(data["fb"], seq, head_dim)
        return fb, fb
    fwd = _at(data["fwd"], seq, head_dim)
    fa2 = _curve("fa2", ref, seq, head_dim)
    ratio = fa2[1] / fa2[0] if fa2 else 1.0
    return fwd, fwd * ratio


def default_kernel(framework: str, generation: str) -> str:
    """The kernel a framework runs on a generation when the row does not say."""
    if framework in ("megatron", "megatron-legacy") or framework == "maxtext":
        return "cudnn" if generation in ("hopper", "blackwell") else "fa2"
    return "fa2"


def attention_tflops(kernel: str, hw: Hardware, seq: int, head_dim: int) -> tuple[float, float] | None:
    """(forward, backward) causal TFLOP/s of `kernel` on `hw`, or None where no figure reaches it
    (TPUs, CPUs: the caller falls back on a fraction of the peak)."""
    if hw.vendor not in ("nvidia", "amd", "intel") or hw.generation in ("volta", "turing"):  # FA needs sm80+
        return None
    gen = hw.generation
    ref = _REFERENCE.get(gen)
    if ref is None:  # scale a reference part's figures by matmul throughput
        ref = "h100" if gen == "blackwell" else "a100"
    if kernel in _HOPPER_ONLY and gen not in ("hopper",):
        kernel = "cudnn" if gen == "blackwell" else "fa2"
    got = _curve(kernel, ref, seq, head_dim)
    if got is None:
        return None
    # other parts, and reference-generation parts at other clocks or power: by matmul throughput
    mamf = (hw.matmul_fraction("bf16") or 0.0) * hw.peak_tflops.get("bf16", hw.peak_tflops.get("fp16", 0.0))
    scale = mamf / _REF_MAMF_BF16[ref] if mamf > 0 else 1.0
    return got[0] * scale, got[1] * scale


_TEXT = [
    (r"flash[- _]?attn[- _]?3|flash[- _]?attention[- _]?3|\bfa-?3\b|flash_attn_interface", "fa3"),
    (r"cudnn|fused[- _]?attention|te[- _]?fused|dot_product_attention.{0,20}te|cudnn_flash", "cudnn"),
    # "FlashAttention Triton kernel" too (the DeepSpeed-Ulysses release scripts' kernel: blind round 20 read it as FA2)
    (r"attn_impl\s*[:=]?\s*triton|triton[- _]?(flash|attention|fa)|flash[- _]?att(?:n|ention)[- _]?\(?triton",
     "triton"),
    (r"xformers|memory[- _]efficient attention|mem_efficient", "xformers"),
    (r"flash[- _]?attn[- _]?2|flash[- _]?attention[- _]?2|\bfa-?2\b|flash[- _]?attn\s*(==|v)?\s*2\.|sdpa|"
     r"scaled_dot_product_attention", "fa2"),
    (r"flash[- _]?attn\s*(==|v)?\s*1\.|flash[- _]?attention[- _]?(1|v1)\b|\bfa-?1\b", "fa1"),
]


def kernel_from_text(text: str) -> str | None:
    """The attention kernel a free-text description names ("attn_impl: triton", "FlashAttention-2",
    "cuDNN fused attention", "FA3", "SDPA"), or None."""
    low = (text or "").lower()
    return next((k for pat, k in _TEXT if re.search(pat, low)), None)
