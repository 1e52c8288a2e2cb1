"""A row's measurement as tokens/s per device, whatever the source measured.

Iteration time and tokens/s are used as they are. TFLOP/s per device and MFU are converted back
with the source's own FLOP convention (`tflops_metric`): sources differ on whether recompute is
counted (SC21 Eq. 3, Megatron-DeepSpeed with checkpointing), whether the causal mask halves
attention (MaxText) and whether attention is counted at all (6N). An unstated convention falls back
on Megatron's model FLOPs (flops.model_flops: full attention square, no recompute), noted.
"""

from __future__ import annotations

import re

from stride.perfmodel.flops import active_params, model_flops
from stride.perfmodel.model_spec import TransformerSpec
from stride.perfmodel.row_text import number


def flops_per_token(metric: str, spec: TransformerSpec) -> tuple[float, str]:
    """FLOPs per trained token under the convention `metric` names, and that convention's name."""
    t = (metric or "").lower().replace(" ", "")
    s, L, h, V = spec.seq, spec.layers, spec.hidden, spec.vocab
    attn_dim = spec.q_dim
    if "eq.3" in t or "96*b" in t or re.search(r"24\*4\*b", t):
        return 96 * s * L * h * h * (1 + s / (6 * h) + V / (16 * L * h)) / s, "sc21-eq3"
    if "72*b" in t or re.search(r"24\*3\*b", t):
        return 72 * s * L * h * h * (1 + s / (6 * h) + V / (12 * L * h)) / s, "megatron-72"
    if "num_floating_point_operations" in t:
        gated = 1.5 if spec.gated else 1.0
        ffn = spec.expert_ffn * spec.top_k if spec.moe else spec.ffn
        return 12 * L * h * h * ((1 + spec.kv_heads / spec.heads + s / h) + ffn / h * gated + V / (2 * L * h)), \
            "megatron"
    if "llm-foundry" in t or "12*l*d*s^2" in t:
        return 6 * active_params(spec) + 12 * L * h * s, "llm-foundry"
    if "maxtext" in t:
        return 6 * active_params(spec) + 6 * spec.heads * L * spec.head_dim * s, "maxtext"
    if "palm" in t:
        return 6 * active_params(spec) + 12 * L * attn_dim * s, "palm"
    if re.search(r"6\*?n|6nd|6\*params", t):
        return 6.0 * active_params(spec), "6N"
    return model_flops(spec, s) / s, "megatron model FLOPs (convention not stated)"


def _peak_in_text(metric: str) -> float | None:
    m = re.search(r"peak\D{0,12}(\d{2,5}(?:\.\d+)?)|/\s*(\d{2,5}(?:\.\d+)?)\s*t", (metric or "").lower())
    if not m:
        return None
    return float(m.group(1) or m.group(2)) * 1e12


MEASURE_COLUMNS = ("meas_iter_time_s", "meas_tokens_per_s_per_gpu", "meas_tflops_per_gpu", "meas_mfu_pct")


def has_measurement(row: dict) -> bool:
    """The row states a throughput (iteration time, tokens/s, TFLOP/s or MFU), readable or not."""
    return any(str(row.get(c) or "").strip() for c in MEASURE_COLUMNS)


def measured_tokens_per_s(row: dict, spec: TransformerSpec | None, global_batch: int, devices: int,
                          peak_flops: float | None) -> tuple[float | None, str]:
    """The row's measured tokens/s per device and how it was obtained."""
    direct = number(row.get("meas_tokens_per_s_per_gpu"))
    if direct and direct > 0:
        return direct, "meas_tokens_per_s_per_gpu"
    it = number(row.get("meas_iter_time_s"))
    if it and it > 0 and spec and global_batch and devices:
        return global_batch * spec.seq / it / devices, "meas_iter_time_s"
    if spec is None:
        return None, "inputs not readable"
    metric = row.get("tflops_metric") or ""
    fpt, conv = flops_per_token(metric, spec)
    tf = number(row.get("meas_tflops_per_gpu"))
    if tf and tf > 0:
        return tf * 1e12 / fpt, f"meas_tflops_per_gpu / FLOPs per token ({conv})"
    mfu = number(row.get("meas_mfu_pct"))
    peak = _peak_in_text(metric) or peak_flops
    if mfu and mfu > 0 and peak:
        frac = mfu / 100 if mfu > 1.0 else mfu
        return frac * peak / fpt, f"meas_mfu_pct x peak / FLOPs per token ({conv})"
    return None, "no measured throughput (iteration time, tokens/s, TFLOP/s or MFU)"


def measured_memory_gib(row: dict) -> float | None:
    v = number(row.get("meas_peak_mem_gib"))
    return v if v and v > 0 else None
